"""Batches and chains where a user looks at them, against real Redis: ``shardq batch
get|list|cancel`` (text and ``--json``, unknown ids and queues, exit codes), the inspector's
``batch``/``batches``/``cancel_batch`` and their asyncio twins, and the console's batches pages
(list, batch page, its live JSON) with the cancel action behind the same boundary as the other
actions (refused read-only, token, CSRF, confirmation), also as the read-only ``viewer`` user.

The workflows themselves (callbacks, counts, the relay) are tests/integration/test_workflows.py."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient
from support.cli import assert_one_line_error, ok, run
from support.helpers import Runner, wait_for

from shardq import Batch, JobRequest, PermanentError
from shardq.admin import acl
from shardq.client import AsyncClient, Client
from shardq.config import RedisSettings
from shardq.errors import BatchNotFoundError, InvalidWorkflowError, UnknownQueueError
from shardq.inspector import AsyncInspector, Inspector
from shardq.jobs import Job
from shardq.store import keys
from shardq.web import WebConfig, create_app
from shardq.workflows import BATCH_STATE_MEANINGS

TOKEN = "test-operator-token-0123456789"
ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
JSON_KEYS = {
    "batch_id", "queue", "kind", "state", "meaning", "total", "pending", "completed", "dead",
    "cancelled", "policy", "created_ms", "sealed_ms", "ended_ms", "created", "sealed", "ended",
    "reason", "parent", "callbacks", "fires_pending", "retention_ms", "ttl_ms", "fired_ms",
    "fired", "fire_errors",
}  # fmt: skip


def later(n: int, job_type: str = "child") -> list[JobRequest]:
    """``n`` children due in an hour: they wait (nothing runs them in these tests)."""
    return [JobRequest(job_type, {"n": i}, delay=3600) for i in range(n)]


def cb(name: str) -> JobRequest:
    return JobRequest("callback", {"name": name})


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def fields(text: str) -> dict[str, str]:
    """``key: value`` lines (fmt.fields) as a dict."""
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip()] = value.strip()
    return out


def make_batches(client: Client, queue: str) -> dict[str, str]:
    """A queue with a sealed batch of 5 waiting children (two callbacks), an open batch, a
    chain, a batch with a nested batch, and an empty batch that ended at once; their ids."""
    client.create_queue(queue, partitions=4)
    ids = {}
    ids["sealed"] = client.batches.create(
        queue, later(5), batch_id="nightly-1", on_success=cb("success"), on_complete=cb("done")
    )
    time.sleep(0.005)  # distinct creation times: the listing's order is theirs
    ids["open"] = client.batches.open(queue, batch_id="open-1", policy="continue")
    time.sleep(0.005)
    ids["chain"] = client.batches.chain(queue, later(2, "step"))
    time.sleep(0.005)
    ids["outer"] = client.batches.create(queue, [Batch(later(3)), *later(1)])
    ids["inner"] = f"{ids['outer']}~0"
    time.sleep(0.005)
    ids["empty"] = client.batches.create(queue, [], on_complete=cb("done"))
    return ids


@pytest.fixture
def made(client: Client, queue: str) -> dict[str, str]:
    """:func:`make_batches` on both topologies."""
    return make_batches(client, queue)


# the command line --------------------------------------------------------------------------


def test_batch_get_shows_state_counts_and_callbacks(
    made: dict[str, str], url: str, queue: str
) -> None:
    u = ["--url", url]
    shown = fields(ok("batch", "get", "-q", queue, "nightly-1", *u))
    assert shown["id"] == "nightly-1" and shown["queue"] == queue and shown["kind"] == "batch"
    assert shown["state"] == f"running - {BATCH_STATE_MEANINGS['running']}"
    assert [shown[k] for k in ("total", "pending", "completed", "dead", "cancelled")] == [
        "5",
        "5",
        "0",
        "0",
        "0",
    ]
    assert shown["policy"] == "fail" and shown["reason"] == "-" and shown["parent"] == "-"
    assert set(shown["callbacks"].split(", ")) == {"success", "complete"}
    assert shown["fires pending"] == "-" and shown["ended"] == "-"
    assert re.match(r"\d{4}-\d\d-\d\dT[\d:.]+Z \((now|\d+s ago)\)$", shown["created"])
    assert shown["ttl"].startswith("- (kept until it ends")

    data = json.loads(ok("batch", "get", "-q", queue, "nightly-1", "--json", *u))
    assert set(data) == JSON_KEYS
    assert (data["state"], data["meaning"], data["total"], data["pending"]) == (
        "running",
        BATCH_STATE_MEANINGS["running"],
        5,
        5,
    )
    assert ISO.match(data["created"]) and ISO.match(data["sealed"]) and data["ended"] is None
    assert data["ttl_ms"] is None and data["retention_ms"] == 7 * 86400 * 1000
    assert sorted(data["callbacks"]) == ["complete", "success"] and data["fires_pending"] == []

    opened = json.loads(ok("batch", "get", "-q", queue, made["open"], "--json", *u))
    assert (opened["state"], opened["policy"], opened["sealed"]) == ("open", "continue", None)
    chain = json.loads(ok("batch", "get", "-q", queue, made["chain"], "--json", *u))
    assert (chain["kind"], chain["total"], chain["state"]) == ("chain", 2, "running")
    inner = fields(ok("batch", "get", "-q", queue, made["inner"], *u))
    assert inner["parent"] == f"{made['outer']}|0" and inner["total"] == "3"
    empty = json.loads(ok("batch", "get", "-q", queue, made["empty"], "--json", *u))
    assert empty["state"] == "succeeded" and ISO.match(empty["ended"])
    assert empty["ttl_ms"] is not None and 0 < empty["ttl_ms"] <= empty["retention_ms"]
    assert (
        "its record expires then"
        in fields(ok("batch", "get", "-q", queue, made["empty"], *u))["ttl"]
    )


def test_batch_list_newest_first_table_and_json(made: dict[str, str], url: str, queue: str) -> None:
    u = ["--url", url]
    newest = [made[k] for k in ("empty", "outer", "inner", "chain", "open", "sealed")]
    rows = json_lines(ok("batch", "list", "-q", queue, "--json", *u))
    # the nested batch is created inside its parent's create, so after it: same ms or later
    assert {r["batch_id"] for r in rows} == set(newest)
    order = [r["batch_id"] for r in rows]
    assert order[0] == made["empty"] and order[-3:] == newest[-3:]
    assert all(set(r) == JSON_KEYS for r in rows)
    two = json_lines(ok("batch", "list", "-q", queue, "--limit", "2", "--json", *u))
    assert [r["batch_id"] for r in two] == order[:2]

    table = ok("batch", "list", "-q", queue, *u).splitlines()
    assert table[0].split() == [
        "id", "kind", "state", "total", "pending", "completed", "dead", "cancelled", "created",
        "ended",
    ]  # fmt: skip
    by_id = {line.split()[0]: line.split() for line in table[1:]}
    assert by_id["nightly-1"][1:8] == ["batch", "running", "5", "5", "0", "0", "0"]
    assert by_id[made["chain"]][1:3] == ["chain", "running"]
    assert by_id[made["empty"]][2] == "succeeded"

    assert_one_line_error(run("batch", "list", "-q", queue, "--limit", "0", *u), 2)


def test_batch_cancel_text_json_and_again(made: dict[str, str], url: str, queue: str) -> None:
    u = ["--url", url]
    refused = assert_one_line_error(run("batch", "cancel", "-q", queue, "nightly-1", *u), 2)
    assert "cancels its waiting children: add --yes" in refused  # and nothing changed:
    assert json.loads(ok("batch", "get", "-q", queue, "nightly-1", "--json", *u))["state"] == (
        "running"
    )
    said = ok("batch", "cancel", "-q", queue, "nightly-1", "--yes", *u).strip()
    assert said == (
        f"batch nightly-1 in {queue}: cancelled (was running), 5 waiting children cancelled, "
        "0 running (they end as they will)"
    )
    again = ok("batch", "cancel", "-q", queue, "nightly-1", "--yes", *u).strip()
    assert "had already been cancelled (state kept)" in again and "0 waiting children" in again
    data = json.loads(ok("batch", "get", "-q", queue, "nightly-1", "--json", *u))
    assert (data["state"], data["cancelled"], data["pending"]) == ("cancelled", 5, 0)
    assert data["ttl_ms"] is not None and data["fires_pending"] == []
    out = json.loads(ok("batch", "cancel", "-q", queue, made["chain"], "--json", "--yes", *u))
    # (a chain's cancel cancels its waiting step and counts the step never enqueued)
    assert out == {
        "batch_id": made["chain"],
        "was": "running",
        "cancelled_children": 2,
        "running_children": 0,
    }
    chain = json.loads(ok("batch", "get", "-q", queue, made["chain"], "--json", *u))
    assert (chain["state"], chain["cancelled"], chain["pending"]) == ("cancelled", 2, 0)
    done = json.loads(ok("batch", "cancel", "-q", queue, made["empty"], "--json", "--yes", *u))
    assert done["was"] == "succeeded" and done["cancelled_children"] == 0
    assert json.loads(ok("batch", "get", "-q", queue, made["empty"], "--json", *u))["state"] == (
        "succeeded"
    )


def test_unknown_and_invalid_ids_and_queues(made: dict[str, str], url: str, queue: str) -> None:
    u = ["--url", url]
    line = assert_one_line_error(run("batch", "get", "-q", queue, "no-such-batch", *u))
    assert "batch 'no-such-batch' not found in " + queue in line and "shardq batch list" in line
    assert_one_line_error(run("batch", "get", "-q", queue, "no-such-batch", "--json", *u))
    line = assert_one_line_error(run("batch", "cancel", "-q", queue, "no-such-batch", "--yes", *u))
    assert "no batch 'no-such-batch'" in line and "BatchNotFoundError" not in line
    for bad in ("has space", "x" * 65, "a~b", "a~1~2~3~4", "a|1"):
        result = run("batch", "get", "-q", queue, bad, *u)
        assert_one_line_error(result, 2)
        assert "1-64 characters" in result.stderr, result.stderr
    other = queue + "-none"
    for args in (
        ["get", "-q", other, "x"],
        ["list", "-q", other],
        ["cancel", "-q", other, "x", "--yes"],
    ):
        line = assert_one_line_error(run("batch", *args, *u))
        assert f"shardq queue create --queue {other}" in line, line


def test_a_failed_batch_shows_its_reason(url: str, client: Client, queue: str) -> None:
    client.create_queue(queue, partitions=4)

    def child(job: Job) -> None:
        if job.payload["n"] == 2:
            raise PermanentError("no such album <x>")

    with Runner(url, queue, {"child": child, "callback": lambda job: None}):
        bid = client.batches.create(
            queue, [JobRequest("child", {"n": i}) for i in range(4)], on_failure=cb("failed")
        )

        def ended() -> bool:
            b = client.batches.get(queue, bid)
            return b is not None and b.ended and not b.fires_pending

        wait_for(ended, 30, "the batch did not end")
    shown = fields(ok("batch", "get", "-q", queue, bid, "--url", url))
    assert shown["state"] == f"failed - {BATCH_STATE_MEANINGS['failed']}"
    assert shown["reason"].startswith(f"{bid}#2: ") and "no such album <x>" in shown["reason"]
    assert shown["dead"] == "1" and shown["callbacks"] == "failure"


# the inspector -----------------------------------------------------------------------------


def test_inspector_reads_and_cancels(made: dict[str, str], client: Client, queue: str) -> None:
    ins = Inspector(client)
    b = ins.batch(queue, "nightly-1")
    assert b is not None and (b.total, b.pending, b.state) == (5, 5, "running")
    assert b == client.batches.get(queue, "nightly-1")
    inner = ins.batch(queue, made["inner"])
    assert inner is not None and inner.parent == f"{made['outer']}|0"
    assert ins.batch(queue, "never-made") is None
    listed = ins.batches(queue)
    assert listed[0].batch_id == made["empty"] and len(listed) == 6
    assert [x.batch_id for x in ins.batches(queue, limit=3)] == [x.batch_id for x in listed[:3]]
    with pytest.raises(ValueError, match="limit"):
        ins.batches(queue, limit=0)
    with pytest.raises(InvalidWorkflowError):
        ins.batch(queue, "bad id")
    with pytest.raises(UnknownQueueError):
        ins.batch(queue + "-none", "nightly-1")
    with pytest.raises(UnknownQueueError):
        ins.batches(queue + "-none")
    with pytest.raises(BatchNotFoundError):
        ins.cancel_batch(queue, "never-made")
    out = ins.cancel_batch(queue, "nightly-1")
    assert (out.was, out.cancelled_children, out.running_children) == ("running", 5, 0)
    for i in range(5):
        assert client.get(queue, f"nightly-1#{i}") is None
    after = ins.batch(queue, "nightly-1")
    assert after is not None and after.state == "cancelled"


def test_the_inspectors_listing_only_reads(
    made: dict[str, str], client: Client, queue: str
) -> None:
    """An id whose record is gone (expired) is skipped by the listings, which write nothing
    (the viewer may not); the next batch created takes it out of the index."""
    gone = keys.batch_keys(queue, made["chain"])
    client.redis.delete(gone.record, gone.seen)
    index = keys.batches_key(queue)
    listed = {b.batch_id for b in Inspector(client).batches(queue)}
    assert made["chain"] not in listed and len(listed) == 5
    assert client.redis.zscore(index, made["chain"]) is not None
    assert made["chain"] not in {b.batch_id for b in client.batches.list(queue)}
    assert client.redis.zscore(index, made["chain"]) is not None
    client.batches.create(queue, [])
    assert client.redis.zscore(index, made["chain"]) is None


def test_async_inspector_twins(made: dict[str, str], url: str, queue: str) -> None:
    async def main() -> None:
        async with AsyncClient(url) as client:
            ins = AsyncInspector(client)
            b = await ins.batch(queue, "nightly-1")
            assert b is not None and b.total == 5
            assert await ins.batch(queue, "never-made") is None
            listed = await ins.batches(queue, limit=2)
            assert listed[0].batch_id == made["empty"] and len(listed) == 2
            with pytest.raises(UnknownQueueError):
                await ins.batches(queue + "-none")
            out = await ins.cancel_batch(queue, made["chain"])
            assert (out.was, out.cancelled_children) == ("running", 2)

    asyncio.run(main())


# the console -------------------------------------------------------------------------------


def console(url: str, **kw: Any) -> TestClient:
    config = WebConfig(redis=RedisSettings.from_url(url), **kw)
    return TestClient(create_app(config), base_url="http://127.0.0.1:8080", follow_redirects=False)


@pytest.fixture
def on_cluster(cluster_client: Client, queue: str) -> dict[str, str]:
    """The batches of ``made`` on the cluster, plus one with dots in its id (``a..b``; an id
    of dots only is refused at create: a browser would resolve '..' in a path)."""
    ids = make_batches(cluster_client, queue)
    time.sleep(0.005)  # the newest
    ids["dots"] = cluster_client.batches.create(queue, later(1), batch_id="a..b")
    with pytest.raises(InvalidWorkflowError):
        cluster_client.batches.create(queue, later(1), batch_id="..")
    return ids


@pytest.fixture
def ro(cluster_url: str) -> Iterator[TestClient]:
    with console(cluster_url) as http:
        yield http


@pytest.fixture
def rw(cluster_url: str) -> Iterator[TestClient]:
    with console(cluster_url, allow_actions=True, token=TOKEN) as http:
        yield http


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found, "no CSRF field in the page"
    return found.group(1)


def login(http: TestClient) -> str:
    page = http.get("/login?next=/")
    done = http.post("/login", data={"csrf": csrf_of(page.text), "token": TOKEN, "next": "/"})
    assert done.status_code == 303, done.text
    return csrf_of(http.get("/").text)


def test_console_batch_pages(ro: TestClient, on_cluster: dict[str, str], queue: str) -> None:
    assert f'href="/q/{queue}/batches"' in ro.get(f"/q/{queue}").text  # the queue's nav
    page = ro.get(f"/q/{queue}/batches")
    assert page.status_code == 200
    listed = re.findall(r'<tr data-batch="([^"]+)">', page.text)
    assert listed[0] == on_cluster["dots"] and set(listed) == set(on_cluster.values())
    assert f'href="/q/{queue}/batch/nightly-1"' in page.text
    assert f'href="/q/{queue}/batch/a..b"' in page.text
    assert len(re.findall(r"<tr data-batch=", ro.get(f"/q/{queue}/batches?limit=20").text)) == 7

    one = ro.get(f"/q/{queue}/batch/nightly-1")
    assert one.status_code == 200 and 'id="batch-state">running<' in one.text
    assert BATCH_STATE_MEANINGS["running"] in one.text
    assert '5 total · <span id="batch-pending">5</span> pending · 0 completed' in one.text
    assert f'href="/q/{queue}/job/nightly-1%23success">success</a>' in one.text
    assert f'data-live="/live/q/{queue}/batch/nightly-1"' in one.text
    assert "action/" not in one.text  # read-only: no cancel button

    inner = ro.get(f"/q/{queue}/batch/{on_cluster['inner']}").text
    parent = on_cluster["outer"]
    assert f'<a href="/q/{queue}/batch/{parent}" id="batch-parent">{parent}</a> (child 0)' in inner
    chain = ro.get(f"/q/{queue}/batch/{on_cluster['chain']}").text
    assert "<h1>Chain" in chain
    empty = ro.get(f"/q/{queue}/batch/{on_cluster['empty']}").text
    assert 'id="batch-state">succeeded<' in empty and "in 6d23h" in empty
    assert ro.get(f"/q/{queue}/batch?id=a..b").status_code == 200

    live = ro.get(f"/live/q/{queue}/batch/nightly-1").json()
    assert live["data"]["state"] == "running" and live["data"]["pending"] == 5
    assert 'id="batch-state">running<' in live["regions"]["facts"]
    gone = ro.get(f"/live/q/{queue}/batch/never-made").json()
    assert gone["data"] is None and "gone" in gone["regions"]["facts"]

    missing = ro.get(f"/q/{queue}/batch/never-made")
    assert missing.status_code == 404 and "Batch not found" in missing.text
    assert ro.get(f"/q/{queue}/batch/bad%20id").status_code == 400
    assert ro.get(f"/q/{queue}-none/batches").status_code == 404
    assert ro.get(f"/q/{queue}-none/batch/nightly-1").status_code == 404


def test_console_cancel_refused_read_only(
    ro: TestClient, on_cluster: dict[str, str], queue: str, cluster_client: Client
) -> None:
    form = {"batch_id": "nightly-1", "confirm": queue}
    refused = ro.post(f"/q/{queue}/action/cancel-batch", data=form)
    assert refused.status_code == 403 and "read-only" in refused.text
    bearer = ro.post(
        f"/q/{queue}/action/cancel-batch", data=form, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert bearer.status_code == 403
    b = cluster_client.batches.get(queue, "nightly-1")
    assert b is not None and b.state == "running" and b.cancelled == 0


def test_console_cancel_with_actions(
    rw: TestClient,
    on_cluster: dict[str, str],
    queue: str,
    cluster_client: Client,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    caplog.set_level(logging.INFO, "shardq.web")
    url = f"/q/{queue}/action/cancel-batch"
    page = f"/q/{queue}/batch/nightly-1"
    assert rw.post(url, data={"batch_id": "nightly-1"}).status_code == 401  # no token
    assert "action/cancel-batch" not in rw.get(page).text  # not logged in: no button
    csrf = login(rw)
    html = rw.get(page).text
    assert 'data-action="cancel-batch"' in html
    assert rw.post(url, data={"batch_id": "nightly-1"}).status_code == 403  # no CSRF token

    ask = rw.post(url, data={"batch_id": "nightly-1", "csrf": csrf, "back": page})
    assert ask.status_code == 200 and 'id="confirm"' in ask.text
    assert 'batch <span class="mono">nightly-1</span>' in ask.text
    b = cluster_client.batches.get(queue, "nightly-1")
    assert b is not None and b.state == "running"  # asked, not done

    done = rw.post(
        url, data={"batch_id": "nightly-1", "csrf": csrf, "back": page, "confirm": queue}
    )
    assert done.status_code == 303 and done.headers["location"] == page
    b = cluster_client.batches.get(queue, "nightly-1")
    assert b is not None and (b.state, b.cancelled) == ("cancelled", 5)
    after = rw.get(page).text
    assert "cancelled batch nightly-1 (was running): 5 waiting children cancelled" in after
    assert 'data-action="cancel-batch"' not in after  # nothing left to cancel

    auth = {"Authorization": f"Bearer {TOKEN}"}
    unconfirmed = rw.post(url, data={"batch_id": on_cluster["chain"]}, headers=auth)
    assert unconfirmed.status_code == 409 and "confirm" in unconfirmed.json()["error"]
    cancelled = rw.post(
        url, data={"batch_id": on_cluster["chain"], "confirm": queue}, headers=auth
    ).json()
    assert cancelled["ok"] is True and "2 waiting children cancelled" in cancelled["result"]
    unknown = rw.post(url, data={"batch_id": "never-made", "confirm": queue}, headers=auth)
    assert unknown.status_code == 409 and "no batch 'never-made'" in unknown.json()["result"]
    bad = rw.post(url, data={"batch_id": "bad id", "confirm": queue}, headers=auth)
    assert bad.status_code == 409 and "invalid" in bad.json()["result"]
    assert rw.post(url, data={"confirm": queue}, headers=auth).status_code == 400  # no id

    events = [r.getMessage() for r in caplog.records if '"event":"web.action"' in r.getMessage()]
    assert any('"batch_id":"nightly-1"' in e and '"who":"session:' in e for e in events)
    assert any(f'"batch_id":"{on_cluster["chain"]}"' in e and "bearer" in e for e in events)


def test_the_batches_pages_as_the_viewer_user(
    cluster_url: str, cluster_client: Client, on_cluster: dict[str, str], queue: str
) -> None:
    """The read-only console as the ``viewer`` Redis user (acl.rules('viewer')) on every node:
    the batches pages render, a listed id whose record expired is skipped, and ACL LOG stays
    empty (nothing the pages send is refused)."""
    gone = keys.batch_keys(queue, on_cluster["chain"])
    cluster_client.redis.delete(gone.record, gone.seen)  # as if it had expired
    redis = cluster_client.redis
    nodes = [redis.get_redis_connection(n) for n in redis.get_nodes()]
    user, password = "t-batch-viewer", "viewer-password-123"
    try:
        for node in nodes:
            node.execute_command("ACL", "SETUSER", user, "reset", *acl.rules("viewer").split())
            node.execute_command("ACL", "SETUSER", user, "on", f">{password}")
            node.execute_command("ACL", "LOG", "RESET")
        as_viewer = RedisSettings.from_url(cluster_url, username=user, password=password)
        with TestClient(
            create_app(WebConfig(redis=as_viewer)), base_url="http://127.0.0.1:8080"
        ) as http:
            listing = http.get(f"/q/{queue}/batches")
            assert listing.status_code == 200, listing.text[:300]
            assert "nightly-1" in listing.text and f'"{on_cluster["chain"]}"' not in listing.text
            for path in (
                f"/q/{queue}/batch/nightly-1",
                f"/q/{queue}/batch/{on_cluster['inner']}",
                f"/q/{queue}/batch?id=a..b",
                f"/live/q/{queue}/batch/nightly-1",
            ):
                r = http.get(path)
                assert r.status_code == 200, (path, r.status_code, r.text[:300])
            assert http.get(f"/q/{queue}/batch/{on_cluster['chain']}").status_code == 404
        problems = [entry for node in nodes for entry in node.execute_command("ACL", "LOG") or []]
        assert not problems, problems
    finally:
        for node in nodes:
            node.execute_command("ACL", "DELUSER", user)
            node.execute_command("ACL", "LOG", "RESET")
