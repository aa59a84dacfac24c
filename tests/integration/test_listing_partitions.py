"""Every job listing names the partition each job lives in, as ``Client.get`` does, in every
state and through every door: the library (Inspector and AsyncInspector), ``shardq job list
--json`` and the console's job list page; and a resized queue's partition has one name
(``g1.3``) on every surface.

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

from shardq import format as fmt
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


def named(want: dict[str, int]) -> dict[str, str]:
    """The partitions ``get`` reports (fleet ids) by the name the CLI and console show."""
    return {j: fmt.partition(p) for j, p in want.items()}


def check(state: str, listed: dict[str, Any], want: dict[str, Any]) -> None:
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
        check(state, {r["id"]: r["partition"] for r in rows if "id" in r}, named(want[state]))


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
        r'<tr data-job="([^"]+)">.*?<td class="n">([^<]+)</td>', re.DOTALL
    )  # the first right-aligned cell of a row is its partition (templates/jobs.html)
    config = WebConfig(redis=RedisSettings.from_url(cluster_url))
    # (the Host a browser sends to a loopback console: TestClient's "testserver" is refused)
    app = create_app(config)
    with TestClient(app, base_url="http://127.0.0.1:8080", follow_redirects=False) as http:
        for state in LIST_STATES:
            page = http.get(f"/q/{queue}/jobs", params={"state": state, "limit": 200})
            assert page.status_code == 200, (state, page.text[:300])
            check(state, dict(row.findall(page.text)), named(want[state]))


def test_a_resized_queues_partition_has_one_name_everywhere(
    cluster_client: Client, cluster_url: str, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """After `queue resize` a partition was `g1.3` in `queue info` and 16387 (its fleet id) in
    `job list`, `owners`, the console and the metrics: now every surface names it `g1.3`, text
    and JSON alike (the metrics: test_observability::test_partition_series_follow_a_resize)."""
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient
    from support.cli import ok, run
    from support.helpers import Runner, job_id_in

    from shardq.admin.resize import Resizer
    from shardq.config import RedisSettings
    from shardq.store import keys
    from shardq.web import WebConfig, create_app

    client = cluster_client
    client.create_queue(queue, 2)
    u = ["-q", queue, "--url", cluster_url]
    names = {keys.partition_label(1, p) for p in range(4)}
    with caplog.at_level("INFO", logger="shardq.dispatcher"), Runner(cluster_url, queue, {}):
        assert Resizer(client, queue).run(4).phase == "done"
        job_id = job_id_in(3, 4, "named")
        made = json.loads(ok("job", "enqueue", *u, "t", "--job-id", job_id, "--delay", "600",
                             "--json"))  # fmt: skip
        assert made["partition"] == "g1.3", made
        # Another id in g1.3: the same id again is refused (its due time, computed again,
        # differs when the two commands start a millisecond apart).
        assert "partition g1.3" in ok("job", "enqueue", *u, "t", "--delay", "600",
                                      "--job-id", job_id_in(3, 4, "text"))  # fmt: skip
        assert json.loads(ok("job", "get", *u, job_id, "--json"))["partition"] == "g1.3"
        assert re.search(r"^partition:\s+g1\.3$", ok("job", "get", *u, job_id), re.M)
        rows = [json.loads(x) for x in ok("job", "list", *u, "--json").splitlines()]
        assert [r["partition"] for r in rows if "id" in r] == ["g1.3", "g1.3"], rows
        assert re.search(rf"^{job_id}\s+g1\.3\s", ok("job", "list", *u), re.M)
        for command in (["queue", "info"], ["queue", "owners"]):
            rows = [json.loads(x) for x in ok(*command, *u, "--json").splitlines()]
            assert {r["partition"] for r in rows} == names, (command, rows)
            text = ok(*command, *u)
            assert all(re.search(rf"^\s*{re.escape(n)}\s", text, re.M) for n in names), text
        stats = json.loads(ok("queue", "stats", *u, "--json", "--window", "0.1"))
        assert {r["partition"] for r in stats["partitions"]} == names
        # An option naming a partition takes its number in the active generation: 3 is g1.3.
        assert ok("dlq", "list", *u, "--partition", "3", "--json") == ""
        assert "partitions 0-3" in run("dlq", "list", *u, "--partition", "4").output
        members = [json.loads(x) for x in ok("queue", "members", *u, "--json").splitlines()]
        assert [set(m["partitions"]) for m in members if m["role"] == "dispatcher"] == [names]
        config = WebConfig(redis=RedisSettings.from_url(cluster_url))
        with TestClient(create_app(config), base_url="http://127.0.0.1:8080") as http:
            jobs = http.get(f"/q/{queue}/jobs", params={"state": "scheduled"}).text
            assert re.search(rf'data-job="{job_id}">.*?<td class="n">g1\.3</td>', jobs, re.S)
            page = http.get(f"/q/{queue}").text
            assert {n for n in names if f'data-partition="{n}"' in page} == names
            live = http.get(f"/live/q/{queue}").json()
            assert {p for p, _ in live["partitions"]} == names
    # The lease events of the new generation name its partitions so too.
    acquired = {
        r.msg["partition"]
        for r in caplog.records
        if isinstance(r.msg, dict) and r.msg.get("event") == "lease.acquired"
    }
    assert names <= acquired, acquired
