"""Every job listing names the partition each job lives in, as ``Client.get`` does, in every
state and through every door: the library (Inspector and AsyncInspector), ``shardq job list
--json`` and the console's job list page.

The scheduled listing once tagged every job with the last partition merged (a generator inside
the merge bound the partition late), so ``enqueue`` and ``job get`` said 13 while ``job list``
said 15 for every job.  Each check here compares the listed partition with the one ``get``
reports, and wants the jobs to span several partitions so one constant cannot pass."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from click.testing import CliRunner
from support.web_seed import Seeded, seed

from shardq.aio import AsyncClient
from shardq.cli import main as cli
from shardq.client import Client
from shardq.inspector import LIST_STATES, AsyncInspector, Inspector, JobSummary

LIMIT = 7  # a few jobs per page, so paging (and the cursor's partition) is exercised too


@pytest.fixture
def seeded(cluster_client: Client, queue: str) -> Seeded:
    return seed(cluster_client, queue)


def expected(client: Client, queue: str, seeded: Seeded) -> dict[str, dict[str, int]]:
    """state -> {job id: partition per ``Client.get``} for the seeded jobs."""
    by_state: dict[str, list[str]] = {
        "scheduled": seeded.scheduled,
        "ready": seeded.ready,
        "running": seeded.running,
        "retrying": [seeded.retrying],
        "dead": [seeded.dead],
    }
    out: dict[str, dict[str, int]] = {}
    for state, ids in by_state.items():
        out[state] = {}
        for job_id in ids:
            info = client.get(queue, job_id)
            assert info is not None, job_id
            out[state][job_id] = info.partition
    assert len(set(out["scheduled"].values())) >= 4, "seeded jobs should span partitions"
    assert len(set(out["ready"].values())) >= 3
    return out


def check(state: str, listed: dict[str, int], want: dict[str, int]) -> None:
    # The scheduled listing also holds the retrying job (due again later): compare seeded ids.
    assert set(want) <= set(listed), (state, set(want) - set(listed))
    wrong = {j: (listed[j], p) for j, p in want.items() if listed[j] != p}
    assert not wrong, f"{state}: job -> (listed, get) partitions differ: {wrong}"


def sync_listing(ins: Inspector, queue: str, state: str) -> dict[str, int]:
    out: dict[str, int] = {}
    cursor = None
    while True:
        page = ins.list_jobs(queue, state, limit=LIMIT, cursor=cursor)
        out.update((j.id, j.partition) for j in page.jobs)
        if (cursor := page.cursor) is None:
            return out


def test_library_listings_name_each_jobs_partition(
    cluster_client: Client, cluster_url: str, queue: str, seeded: Seeded
) -> None:
    want = expected(cluster_client, queue, seeded)
    ins = Inspector(cluster_client)
    for state in LIST_STATES:
        check(state, sync_listing(ins, queue, state), want[state])

    async def async_listings() -> dict[str, dict[str, int]]:
        client = await AsyncClient.from_url(cluster_url)
        try:
            ains = AsyncInspector(client)
            got: dict[str, dict[str, int]] = {}
            for state in LIST_STATES:
                jobs: list[JobSummary] = []
                cursor = None
                while True:
                    page = await ains.list_jobs(queue, state, limit=LIMIT, cursor=cursor)
                    jobs += page.jobs
                    if (cursor := page.cursor) is None:
                        break
                got[state] = {j.id: j.partition for j in jobs}
            return got
        finally:
            await client.close()

    for state, listed in asyncio.run(async_listings()).items():
        check(state, listed, want[state])


def test_cli_job_list_json_names_each_jobs_partition(
    cluster_client: Client, cluster_url: str, queue: str, seeded: Seeded
) -> None:
    want = expected(cluster_client, queue, seeded)
    for state in LIST_STATES:
        args = ["job", "list", "--url", cluster_url, "-q", queue, "--state", state]
        result = CliRunner().invoke(cli, [*args, "--all", "--limit", str(LIMIT), "--json"])
        assert result.exit_code == 0, result.output
        rows: list[dict[str, Any]] = [json.loads(x) for x in result.stdout.splitlines() if x]
        check(state, {r["id"]: r["partition"] for r in rows if "id" in r}, want[state])


def test_console_job_list_names_each_jobs_partition(
    cluster_client: Client, cluster_url: str, queue: str, seeded: Seeded
) -> None:
    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    from starlette.testclient import TestClient

    from shardq.config import RedisSettings
    from shardq.web import WebConfig, create_app

    want = expected(cluster_client, queue, seeded)
    row = re.compile(
        r'<tr data-job="([^"]+)">.*?<td class="n">(\d+)</td>', re.DOTALL
    )  # the first numeric cell of a row is its partition (templates/jobs.html)
    config = WebConfig(redis=RedisSettings.from_url(cluster_url))
    # (the Host a browser sends to a loopback console: TestClient's "testserver" is refused)
    app = create_app(config)
    with TestClient(app, base_url="http://127.0.0.1:8080", follow_redirects=False) as http:
        for state in LIST_STATES:
            page = http.get(f"/q/{queue}/jobs", params={"state": state, "limit": 200})
            assert page.status_code == 200, (state, page.text[:300])
            listed = {j: int(p) for j, p in row.findall(page.text)}
            check(state, listed, want[state])
