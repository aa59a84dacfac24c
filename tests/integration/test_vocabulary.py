"""One vocabulary for a job's states (issue 23 item 7): the words are defined once
(shardq.names.JOB_STATES), and the library, the CLI, the console, the inspector's listings and
the docs (docs/concepts.md) say the same word for the same job.  The old word ``active`` is
taken as an input for ``running`` (one release), and never said.

The first tests read the source and the docs (no Redis); the rest seed one real queue with a
job in every state (tests/support/web_seed.py: no dispatcher or worker runs, so the states stay
put) and ask every entry point about each of those jobs.
"""

from __future__ import annotations

import ast
import html
import json
import re
import typing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from shardq import jobs, names
from shardq.cli import main as cli
from shardq.client import Client
from shardq.inspector import EMPTY_STATES, LIST_STATES, AsyncInspector, Inspector, JobSummary
from shardq.plans import listing as listing_plans

ROOT = Path(__file__).resolve().parents[2]


# the one definition (no Redis) ---------------------------------------------------------------


def test_every_state_has_one_meaning_and_the_models_use_the_one_list() -> None:
    assert tuple(names.JOB_STATE_MEANINGS) == names.JOB_STATES
    assert all(m.strip() for m in names.JOB_STATE_MEANINGS.values())
    assert typing.get_args(names.JobState) == names.JOB_STATES
    assert jobs.JobState is names.JobState
    assert LIST_STATES is names.JOB_STATES and EMPTY_STATES is names.EMPTY_STATES
    assert set(names.EMPTY_STATES) <= set(names.JOB_STATES)
    assert set(names.NOT_STARTED_STATES) <= set(names.JOB_STATES)
    # An alias is an old word only: never a state of its own, always naming a current one.
    assert not set(names.JOB_STATE_ALIASES) & set(names.JOB_STATES)
    assert set(names.JOB_STATE_ALIASES.values()) <= set(names.JOB_STATES)


def test_no_other_module_spells_out_the_list_of_states() -> None:
    """A second ``Literal["scheduled", ...]`` or tuple of the state words is how the lists
    drifted apart (JobInfo said ``active``, the inspector ``running``): only names.py may
    write the whole list down."""
    words = set(names.JOB_STATES) | set(names.JOB_STATE_ALIASES)
    found = []
    for path in sorted((ROOT / "shardq").rglob("*.py")):
        if path.name == "names.py" and path.parent.name == "shardq":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Tuple | ast.List):
                items = [e.value for e in node.elts if isinstance(e, ast.Constant)]
                if len(items) >= 4 and set(items) <= words:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"a list of job states outside shardq/names.py: {found}"


def test_the_concepts_table_is_the_one_list_with_its_meanings() -> None:
    text = (ROOT / "docs" / "concepts.md").read_text()
    rows = dict(re.findall(r"^\s*\| `([a-z]+)` \| (.+?) \|$", text, re.M))
    table = {w: rows[w] for w in rows if w in names.JOB_STATES or w in names.JOB_STATE_ALIASES}
    assert table == names.JOB_STATE_MEANINGS
    assert not re.search(r"`scheduled`,\s+`ready`,\s+`active`", text)


def test_an_old_word_maps_in_one_place_and_unknown_words_are_refused() -> None:
    assert names.job_state("active") == "running"
    assert names.job_state("running") == "running"
    assert [names.job_state(s) for s in names.JOB_STATES] == list(names.JOB_STATES)
    with pytest.raises(ValueError, match="state must be one of scheduled, ready, running"):
        names.job_state("pending")
    with pytest.raises(ValueError, match="state must be one of scheduled, ready, retrying, dead"):
        names.job_state("active", names.EMPTY_STATES)  # running jobs cannot be emptied
    with pytest.raises(ValueError):
        listing_plans.list_jobs(
            None,  # type: ignore[arg-type]  # refused before the cache is used
            "q",
            "waiting",
            job_type=None,
            limit=10,
            cursor=None,
            start=None,
            end=None,
        )


def test_the_cli_offers_the_one_list_and_takes_the_old_word() -> None:
    from shardq.cli.job import job_list

    state = next(p for p in job_list.params if p.name == "state")
    assert tuple(state.type.choices) == names.JOB_STATES  # type: ignore[attr-defined]
    assert state.type.convert("active", state, None) == "running"
    result = CliRunner().invoke(cli, ["job", "list", "-q", "q", "--state", "pending"])
    assert result.exit_code == 2 and "pending" in result.output


# the same job, every entry point (real Redis) ---------------------------------------------


def _cli_json(*args: str) -> Any:
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 0, f"{args}: {result.output}"
    return result.stdout


def _console_state(http: Any, queue: str, job_id: str) -> tuple[str, str]:
    """(the job page's state, the live endpoint's state) of one job."""
    page = http.get(f"/q/{queue}/job/{job_id}")
    assert page.status_code == 200, page.text
    shown = re.search(r'<dd id="job-state">([^<]*)</dd>', page.text)
    assert shown, page.text[:400]
    live = http.get(f"/live/q/{queue}/job/{job_id}")
    assert live.status_code == 200, live.text
    return html.unescape(shown.group(1)), live.json()["data"]["state"]


def _listed(ins: Inspector, queue: str, state: str) -> dict[str, JobSummary]:
    out: dict[str, JobSummary] = {}
    cursor = None
    while True:
        page = ins.list_jobs(queue, state, limit=100, cursor=cursor)
        out.update((j.id, j) for j in page.jobs)
        cursor = page.cursor
        if cursor is None:
            return out


@pytest.fixture
def seeded_jobs(cluster_client: Client, cluster_url: str, queue: str) -> dict[str, str]:
    """state -> a job id in that state, on a seeded queue."""
    from support.web_seed import seed

    s = seed(cluster_client, queue)
    return {
        "scheduled": s.scheduled[0],
        "ready": s.ready[0],
        "running": s.running[0],
        "retrying": s.retrying,
        "dead": s.dead,
    }


def test_library_cli_console_and_listings_say_one_state_per_job(
    cluster_client: Client, cluster_url: str, queue: str, seeded_jobs: dict[str, str]
) -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from shardq.config import RedisSettings
    from shardq.web import WebConfig, create_app

    assert set(seeded_jobs) == set(names.JOB_STATES)
    ins = Inspector(cluster_client)
    config = WebConfig(redis=RedisSettings.from_url(cluster_url))
    app = create_app(config)
    with TestClient(app, base_url="http://127.0.0.1:8080", follow_redirects=False) as http:
        for state, job_id in seeded_jobs.items():
            info = cluster_client.get(queue, job_id)
            assert info is not None and info.state == state, (state, info)
            row = json.loads(
                _cli_json("job", "get", "-q", queue, job_id, "--json", "--url", cluster_url)
            )
            assert row["state"] == state
            human = _cli_json("job", "get", "-q", queue, job_id, "--url", cluster_url)
            assert re.search(rf"^state\s*:?\s+{state}$", human, re.M), human
            assert _console_state(http, queue, job_id) == (state, state)
            listed = _listed(ins, queue, state)
            assert job_id in listed and listed[job_id].state == state
            args = ["job", "list", "-q", queue, "--state", state, "--all", "--json"]
            lines = _cli_json(*args, "--url", cluster_url)
            rows = {r["id"]: r for r in map(json.loads, lines.splitlines()) if "id" in r}
            assert rows[job_id]["state"] == state
            jobs_page = http.get(f"/q/{queue}/jobs?state={state}")
            assert jobs_page.status_code == 200 and job_id in jobs_page.text
    # The scheduled listing pages the whole due set: the retrying job is in it, and says so.
    due = _listed(ins, queue, "scheduled")
    retrying = seeded_jobs["retrying"]
    assert due[retrying].state == "retrying" and due[retrying].last_error == "timeout"
    assert {j.state for j in due.values()} == {"scheduled", "retrying"}
    assert all(j.last_error is None for j in due.values() if j.state == "scheduled")
    # Nothing anywhere says the old word.
    for job_id in seeded_jobs.values():
        assert "active" not in _cli_json("job", "get", "-q", queue, job_id, "--url", cluster_url)


def test_the_old_word_active_is_taken_as_running_everywhere_a_state_is_given(
    cluster_client: Client, cluster_url: str, queue: str, seeded_jobs: dict[str, str]
) -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from shardq.config import RedisSettings
    from shardq.web import WebConfig, create_app

    ins = Inspector(cluster_client)
    running = _listed(ins, queue, "running")
    assert seeded_jobs["running"] in running
    # (the same jobs: a running row's started_ms is read against the clock, so rows are
    # compared by id and state)
    assert {i: j.state for i, j in _listed(ins, queue, "active").items()} == {
        i: j.state for i, j in running.items()
    }
    assert {j.state for j in running.values()} == {"running"}
    # A cursor of the running listing pages on under the old word too.
    first = ins.list_jobs(queue, "running", limit=1)
    assert first.cursor is not None
    assert ins.list_jobs(queue, "active", limit=1, cursor=first.cursor).jobs

    async def via_async() -> set[str]:
        from shardq.aio import AsyncClient

        client = await AsyncClient.from_url(cluster_url)
        try:
            page = await AsyncInspector(client).list_jobs(queue, "active", limit=100)
            return {j.state for j in page.jobs}
        finally:
            await client.close()

    import asyncio

    assert asyncio.run(via_async()) == {"running"}
    lines = _cli_json(
        "job", "list", "-q", queue, "--state", "active", "--all", "--json", "--url", cluster_url
    )
    rows = [json.loads(line) for line in lines.splitlines() if '"id"' in line]
    assert {r["id"] for r in rows} == set(running) and {r["state"] for r in rows} == {"running"}
    app = create_app(WebConfig(redis=RedisSettings.from_url(cluster_url)))
    with TestClient(app, base_url="http://127.0.0.1:8080", follow_redirects=False) as http:
        page = http.get(f"/q/{queue}/jobs?state=active")
        assert page.status_code == 200
        assert seeded_jobs["running"] in page.text
        assert re.search(r'class="tab current" href="[^"]*state=running"', page.text), page.text
        assert http.get(f"/q/{queue}/jobs?state=pending").status_code == 400
