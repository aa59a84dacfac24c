"""The web console over HTTP (starlette's TestClient, against the real cluster): every page and
live endpoint, read-only refusal, token, CSRF and confirmation checks, the audit log, and the
bounded Redis work of each page."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from click.testing import CliRunner
from starlette.testclient import TestClient
from support.web_seed import PARTITIONS, Seeded, seed

from shardq.cli import main
from shardq.client import Client
from shardq.config import RedisSettings
from shardq.web import WebConfig, create_app
from shardq.web.auth import SESSION_COOKIE, TokenError
from shardq.web.data import Rates

TOKEN = "test-operator-token-0123456789"


@pytest.fixture
def seeded(cluster_client: Client, queue: str) -> Seeded:
    return seed(cluster_client, queue)


def console(url: str, **kw: Any) -> TestClient:
    config = WebConfig(redis=RedisSettings.from_url(url), **kw)
    # the Host a browser sends to a loopback console (TestClient's default, "testserver", is
    # not one the console answers to)
    return TestClient(create_app(config), base_url="http://127.0.0.1:8080", follow_redirects=False)


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
    """Log in through the form; returns the session's CSRF token."""
    page = http.get("/login?next=/")
    assert page.status_code == 200
    done = http.post("/login", data={"csrf": csrf_of(page.text), "token": TOKEN, "next": "/"})
    assert done.status_code == 303, done.text
    return csrf_of(http.get("/").text)


def test_every_page_and_live_endpoint_read_only(ro: TestClient, seeded: Seeded, queue: str) -> None:
    home = ro.get("/")
    assert home.status_code == 200 and queue in home.text and "read-only" in home.text
    csp = home.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert home.headers["x-frame-options"] == "DENY"
    assert "http://" not in home.text.replace("http://testserver", "")  # no CDN

    page = ro.get(f"/q/{queue}")
    assert page.status_code == 200
    cells = re.findall(r'class="cell h\d[^"]*" data-partition="(\d+)"', page.text)
    assert sorted(int(c) for c in cells) == list(range(PARTITIONS))
    assert "load share" in page.text and 'data-live="/live/q/' in page.text
    assert "action/" not in page.text  # read-only: no action forms at all
    for metric in ("lag", "hot", "dead"):
        assert ro.get(f"/q/{queue}?metric={metric}").status_code == 200

    expect = {
        "scheduled": seeded.scheduled[:5],
        "ready": seeded.ready[:3],
        "running": seeded.running,
        "retrying": [seeded.retrying],
        "dead": [seeded.dead],
    }
    for state, ids in expect.items():
        listing = ro.get(f"/q/{queue}/jobs", params={"state": state, "limit": 200})
        assert listing.status_code == 200, state
        for job_id in ids:
            assert job_id in listing.text, (state, job_id)
    dead = ro.get(f"/q/{queue}/dead")
    assert seeded.dead in dead.text and "bad address &lt;x&gt;" in dead.text  # escaped

    # paging by cursor: two pages of 20 cover the 32 due jobs (31 scheduled, 1 retrying) once
    first = ro.get(f"/q/{queue}/jobs?state=scheduled&limit=20")
    nxt = re.search(r'href="([^"]+)" id="next-page"', first.text)
    assert nxt
    second = ro.get(nxt.group(1).replace("&amp;", "&"))
    ids_1 = set(re.findall(r'data-job="([^"]+)"', first.text))
    ids_2 = set(re.findall(r'data-job="([^"]+)"', second.text))
    assert len(ids_1) == 20 and ids_1.isdisjoint(ids_2)
    assert ids_1 | ids_2 == {*seeded.scheduled, seeded.retrying}
    assert 'id="next-page"' not in second.text
    typed = ro.get(f"/q/{queue}/jobs?state=scheduled&type=report&limit=200")
    assert set(re.findall(r"<td>(mail|report|sync)</td>", typed.text)) == {"report"}
    assert ro.get(f"/q/{queue}/jobs?state=scheduled&cursor=bm9wZQ").status_code == 400
    assert ro.get(f"/q/{queue}/jobs?state=nope").status_code == 400

    job = ro.get(f"/q/{queue}/job/{seeded.idem_job}")
    assert job.status_code == 200
    assert "&#34;order&#34;: 4711" in job.text or "&quot;order&quot;: 4711" in job.text
    assert seeded.idem_key in job.text and re.search(r"\d{4}-\d\d-\d\dT[\d:.]+Z", job.text)
    assert "(in 1h" in job.text or "(in 2h" in job.text  # relative time beside the ISO one
    assert ro.get(f"/q/{queue}/job/nope-not-a-job").status_code == 404

    by_id = ro.get(f"/q/{queue}/search", params={"q": seeded.dead})
    assert by_id.status_code == 303 and by_id.headers["location"].endswith(seeded.dead)
    by_key = ro.get(f"/q/{queue}/search", params={"q": seeded.idem_key})
    assert by_key.status_code == 303 and by_key.headers["location"].endswith(seeded.idem_job)
    assert ro.get(f"/q/{queue}/search", params={"q": "no-such-thing"}).status_code == 404

    assert ro.get(f"/q/{queue}/schedules").status_code == 200
    fleet = ro.get(f"/q/{queue}/fleet")
    assert fleet.status_code == 200 and "No live dispatcher" in fleet.text

    live = ro.get("/live/overview").json()
    mine = next(q for q in live["data"] if q["queue"] == queue)
    assert mine["dead"] == 1 and mine["partitions"] == PARTITIONS and "queues" in live["regions"]
    qlive = ro.get(f"/live/q/{queue}").json()
    assert len(qlive["partitions"]) == PARTITIONS
    assert {"summary", "heat", "nodes", "tabs", "partitions"} <= set(qlive["regions"])
    assert qlive["data"]["summary"]["scheduled"] == len(seeded.scheduled) + 1  # + retrying
    assert ro.get(f"/live/q/{queue}/fleet").json()["data"] == {"dispatchers": [], "workers": []}
    assert ro.get(f"/live/q/{queue}/job/{seeded.dead}").json()["data"]["state"] == "dead"

    assert ro.get("/healthz").text == "ok" and ro.get("/readyz").status_code == 200
    assert ro.get("/q/no-such-queue").status_code == 404
    assert "setInterval" in ro.get("/static/console.js").text
    assert ro.get("/static/console.css").status_code == 200


def test_read_only_console_refuses_every_action(
    ro: TestClient, seeded: Seeded, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "shardq.web")
    for name in ("pause", "resume", "replay", "run-now", "retry-dead", "cancel", "empty"):
        r = ro.post(f"/q/{queue}/action/{name}", data={"job_id": seeded.dead, "confirm": queue})
        assert r.status_code == 403 and "read-only" in r.text, name
        bearer = ro.post(
            f"/q/{queue}/action/{name}",
            data={"job_id": seeded.dead, "confirm": queue},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert bearer.status_code == 403, name
    assert ro.get("/login").status_code == 404
    assert any('"reason":"read-only"' in r.getMessage() for r in caplog.records)


def test_actions_need_the_token_csrf_and_confirmation(
    rw: TestClient,
    seeded: Seeded,
    queue: str,
    cluster_client: Client,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "shardq.web")
    url = f"/q/{queue}/action"
    # no token at all, a wrong bearer token
    assert rw.post(f"{url}/replay", data={"job_id": seeded.dead}).status_code == 401
    wrong = rw.post(
        f"{url}/replay", data={"job_id": seeded.dead}, headers={"Authorization": "Bearer nope"}
    )
    assert wrong.status_code == 401
    assert "log in to act" in rw.get(f"/q/{queue}").text

    # login: a wrong CSRF token, a wrong operator token, then the right ones
    page = rw.get("/login")
    assert rw.post("/login", data={"csrf": "forged", "token": TOKEN}).status_code == 403
    bad = rw.post("/login", data={"csrf": csrf_of(page.text), "token": "wrong-token-000000"})
    assert bad.status_code == 401 and "not the operator token" in bad.text
    csrf = login(rw)
    assert rw.cookies.get(SESSION_COOKIE)
    queue_page = rw.get(f"/q/{queue}").text
    assert "actions enabled" in queue_page and 'data-action="pause"' in queue_page

    # a session cookie without the form's CSRF token is refused
    no_csrf = rw.post(f"{url}/replay", data={"job_id": seeded.dead})
    assert no_csrf.status_code == 403 and "CSRF" in no_csrf.text
    forged = rw.post(f"{url}/replay", data={"job_id": seeded.dead, "csrf": "x" * 43})
    assert forged.status_code == 403
    info = cluster_client.get(queue, seeded.dead)
    assert info is not None and info.state == "dead"

    # replay of one dead job: not destructive, done at once, back to the page with a flash
    done = rw.post(
        f"{url}/replay", data={"job_id": seeded.dead, "csrf": csrf, "back": f"/q/{queue}/dead"}
    )
    assert done.status_code == 303 and done.headers["location"] == f"/q/{queue}/dead"
    info = cluster_client.get(queue, seeded.dead)
    assert info is not None and info.state == "scheduled" and info.attempt == 0
    assert "is due now" in rw.get(f"/q/{queue}/dead").text

    # cancel is destructive: a confirm page first, then the confirmed POST
    victim = seeded.scheduled[0]
    ask = rw.post(f"{url}/cancel", data={"job_id": victim, "csrf": csrf})
    assert ask.status_code == 200 and 'id="confirm"' in ask.text
    assert cluster_client.get(queue, victim) is not None
    rw.post(f"{url}/cancel", data={"job_id": victim, "csrf": csrf, "confirm": queue})
    assert cluster_client.get(queue, victim) is None
    # an off-site "back" is ignored
    away = rw.post(f"{url}/resume", data={"csrf": csrf, "back": "//evil.example/"})
    assert away.headers["location"] == f"/q/{queue}"

    # empty needs the queue name typed in
    ask = rw.post(f"{url}/empty", data={"state": "ready", "csrf": csrf})
    assert 'name="confirm" autocomplete="off"' in ask.text
    assert (
        rw.post(
            f"{url}/empty", data={"state": "ready", "csrf": csrf, "confirm": "wrong"}
        ).status_code
        == 200
    )  # asked again
    rw.post(f"{url}/empty", data={"state": "ready", "csrf": csrf, "confirm": queue})
    # cancelled ready entries stay in the stream until a worker drops them, unlisted
    after = rw.get(f"/q/{queue}/jobs?state=ready&limit=200").text
    assert "<td>report</td>" not in after and "the next worker" not in after

    # bearer (scripts): JSON answers, destructive steps need confirm=<queue> too
    auth = {"Authorization": f"Bearer {TOKEN}"}
    unconfirmed = rw.post(f"{url}/pause", headers=auth)
    assert unconfirmed.status_code == 409 and "confirm" in unconfirmed.json()["error"]
    paused = rw.post(f"{url}/pause", data={"confirm": queue}, headers=auth)
    assert paused.json() == {"ok": True, "result": f"paused {PARTITIONS} partitions"}
    assert "partly paused" not in rw.get("/").text and "paused" in rw.get("/").text
    assert rw.post(f"{url}/resume", headers=auth).json()["ok"] is True
    running = rw.post(f"{url}/run-now", data={"job_id": seeded.running[0]}, headers=auth)
    assert running.status_code == 409 and running.json()["ok"] is False
    assert rw.post(f"{url}/frobnicate", headers=auth).status_code == 400

    events = [r.getMessage() for r in caplog.records if r.name == "shardq.web"]
    actions = [e for e in events if '"event":"web.action"' in e]
    assert any('"action":"replay"' in e and '"who":"session:' in e for e in actions)
    assert any('"action":"pause"' in e and '"who":"bearer"' in e for e in actions)
    assert all('"remote":' in e for e in actions)
    refused = [e for e in events if "web.action_refused" in e]
    assert {"no token", "bad token", "csrf"} <= {
        m.group(1) for e in refused if (m := re.search(r'"reason":"([^"]+)"', e))
    }
    assert TOKEN not in "".join(events)

    # log out: the session no longer acts
    rw.post("/logout", data={"csrf": csrf})
    assert rw.post(f"{url}/resume", data={"csrf": csrf}).status_code == 401


def test_actions_without_a_token_refuse_to_start(cluster_url: str, monkeypatch: Any) -> None:
    with pytest.raises(TokenError):
        WebConfig(allow_actions=True, token=None)
    with pytest.raises(TokenError):
        WebConfig(allow_actions=True, token="short")
    monkeypatch.delenv("SHARDQ_WEB_TOKEN", raising=False)
    result = CliRunner().invoke(main, ["web", "--url", cluster_url, "--allow-actions"])
    assert result.exit_code == 1 and "SHARDQ_WEB_TOKEN" in result.output, result.output
    assert "--token" not in CliRunner().invoke(main, ["web", "--help"]).output


def test_rates_come_from_successive_counter_reads() -> None:
    from shardq.inspector import PartitionInfo

    def part(p: int, enqueued: int) -> PartitionInfo:
        return PartitionInfo(
            p, "n1", 0, 0, 0, 0, 0, None, 0.0, None, False, {"enqueued": enqueued, "completed": 1}
        )

    rates = Rates(window=30)
    assert rates.queue_rates("q")["enqueued"] is None
    rates.add("q", [part(0, 0), part(1, 0)], now=100.0)
    rates.add("q", [part(0, 30), part(1, 10)], now=110.0)
    assert rates.queue_rates("q")["enqueued"] == 4.0 and rates.queue_rates("q")["completed"] == 0
    assert rates.partition_rates("q") == {0: 3.0, 1: 1.0}


def test_the_job_page_shows_priority_tenant_and_limit_key(
    ro: TestClient, cluster_client: Client, queue: str
) -> None:
    cluster_client.create_queue(queue, 2, lanes=True)
    job = cluster_client.enqueue(
        queue, "t", 1, delay=600, priority="high", tenant="acme", limit_key="api.example.com"
    )
    plain = cluster_client.enqueue(queue, "t", 2, delay=600)
    html = ro.get(f"/q/{queue}/job/{job}").text
    assert re.search(r"<dt>priority</dt><dd>high</dd>", html), html
    assert "acme" in html and "api.example.com" in html
    assert "<dt>priority</dt>" not in ro.get(f"/q/{queue}/job/{plain}").text


@pytest.mark.parametrize(
    "options",
    ['{"b":[["f"],1,2]}', '{"b":[{"k":1},1,2]}', '{"g":[["x"],1,0]}', '{"h":{"a":[1]}}'],
)
def test_a_crafted_body_is_shown_as_malformed_on_every_surface(
    ro: TestClient, cluster_client: Client, cluster_url: str, queue: str, options: str
) -> None:
    """A body no producer writes (a list where the backoff's kind letter goes) is one malformed
    job on the job page, the listing, `job get` and `job list`, never a 500 or a traceback."""
    from support.helpers import job_id_in

    from shardq.store import keys

    cluster_client.create_queue(queue, 2)
    pk = keys.partition_keys(queue, 0, 2)
    crafted = job_id_in(0, 2, "crafted")
    cluster_client.redis.hset(pk.jobs, crafted, f'S0|["t",1,{options}]')
    cluster_client.redis.zadd(pk.due, {crafted: 4_000_000_000_000})
    plain = cluster_client.enqueue(queue, "t", 2, delay=600)
    page = ro.get(f"/q/{queue}/job/{crafted}")
    assert page.status_code == 200 and "malformed" in page.text, page.text
    listing = ro.get(f"/q/{queue}/jobs?state=scheduled")
    assert listing.status_code == 200 and crafted in listing.text and plain in listing.text
    cli = CliRunner()
    for args in (["job", "get", crafted], ["job", "list", "--state", "scheduled"]):
        for json_flag in ([], ["--json"]):
            done = cli.invoke(main, [*args, *json_flag, "-q", queue, "--url", cluster_url])
            assert done.exit_code == 0 and done.exception is None, (args, done.output)
            assert crafted in done.output


def test_the_job_page_shows_a_kept_result_once_the_job_completed(
    ro: TestClient, cluster_client: Client, cluster_url: str, queue: str
) -> None:
    from support.helpers import Runner

    cluster_client.create_queue(queue, 2)
    job = cluster_client.enqueue(queue, "render", {"page": 3}, delay=600, keep_result=300)
    waiting = ro.get(f"/q/{queue}/job/{job}").text
    assert re.search(r"<dt>keeps result</dt><dd>300 s", waiting), waiting
    cluster_client.reschedule(queue, job, delay=0)
    with Runner(cluster_url, queue, {"render": lambda j: {"url": f"/pages/{j.payload['page']}"}}):
        assert cluster_client.result(queue, job, timeout=15) == {"url": "/pages/3"}
    page = ro.get(f"/q/{queue}/job/{job}")
    assert page.status_code == 200
    assert re.search(r'id="job-state">completed<', page.text), page.text
    assert "&#34;url&#34;: &#34;/pages/3&#34;" in page.text or '"url": "/pages/3"' in page.text
    assert ro.get(f"/live/q/{queue}/job/{job}").json()["data"]["state"] == "completed"
