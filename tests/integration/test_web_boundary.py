"""The console's boundary, attacked over real HTTP (uvicorn on 127.0.0.1, httpx) against the real
cluster: Host validation (DNS rebinding), reads behind the token, the start-up refusals, the
login flood, crafted cursors, ``Secure`` cookies behind a trusted TLS proxy, every valid job id,
the bearer rate limit, the read-only Redis role, and a console started while Redis is down."""

from __future__ import annotations

import base64
import html
import json
import re
import socket
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from click.testing import CliRunner  # noqa: E402
from hypothesis import example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from support.helpers import free_port, wait_for  # noqa: E402
from support.procs import OwnRedis, Proc  # noqa: E402
from support.web_seed import Seeded, seed  # noqa: E402
from support.web_serve import serving  # noqa: E402

from shardq.admin import acl  # noqa: E402
from shardq.cli import main  # noqa: E402
from shardq.client import Client  # noqa: E402
from shardq.config import RedisSettings  # noqa: E402
from shardq.connection import connect  # noqa: E402
from shardq.dev.demo import cli_command  # noqa: E402
from shardq.errors import InvalidCursorError  # noqa: E402
from shardq.inspector import LIST_STATES, Inspector  # noqa: E402
from shardq.web import WebConfig  # noqa: E402
from shardq.web.auth import LOGIN_COOKIE, SESSION_COOKIE, TokenError  # noqa: E402

TOKEN = "boundary-test-token-0123456789"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def seeded(cluster_client: Client, queue: str) -> Seeded:
    return seed(cluster_client, queue)


def config(url: str, **kw: Any) -> WebConfig:
    return WebConfig(redis=RedisSettings.from_url(url), **kw)


def csrf_of(text: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', text)
    assert found, "no CSRF field in the page"
    return found.group(1)


def log_in(http: httpx.Client, token: str = TOKEN) -> httpx.Response:
    page = http.get("/login?next=/")
    assert page.status_code == 200, page.text
    return http.post("/login", data={"csrf": csrf_of(page.text), "token": token, "next": "/"})


def port_of(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


# Host ------------------------------------------------------------------------------------------


def test_a_hostile_host_gets_no_data(cluster_url: str, seeded: Seeded, queue: str) -> None:
    """DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1 reads the
    console with ``Host: evil.example:<port>``.  Refused, with no data; the loopback names and
    the configured names are served; the probes answer whatever the Host."""
    job = f"/q/{queue}/job/{seeded.idem_job}"
    with serving(config(cluster_url)) as base:
        port = port_of(base)
        for hostile in (f"evil.example:{port}", "evil.example", "127.0.0.1.evil.example", ""):
            r = httpx.get(base + job, headers={"Host": hostile})
            assert r.status_code == 400, (hostile, r.status_code)
            assert "4711" not in r.text and seeded.idem_key not in r.text
            assert "--allowed-host" in r.text
            assert httpx.get(base + "/live/overview", headers={"Host": hostile}).status_code == 400
        for name in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", f"[::1]:{port}"):
            assert httpx.get(base + job, headers={"Host": name}).status_code == 200, name
        for probe in ("/healthz", "/readyz"):
            assert httpx.get(base + probe, headers={"Host": "10.1.2.3:8080"}).status_code == 200

    allowed = ("console.example.com", "Ops.Example.org")
    with serving(config(cluster_url, allowed_hosts=allowed)) as base:
        ok = httpx.get(base + job, headers={"Host": "console.example.com:443"})
        assert ok.status_code == 200 and "4711" in ok.text
        assert httpx.get(base + job, headers={"Host": "OPS.example.ORG"}).status_code == 200
        assert httpx.get(base + job, headers={"Host": "evil.example"}).status_code == 400
        # a name is not a suffix match
        assert httpx.get(base + job, headers={"Host": "x.console.example.com"}).status_code == 400


def test_a_console_beyond_loopback_answers_ip_literals_and_its_names(
    cluster_url: str, seeded: Seeded, queue: str
) -> None:
    """Bound to every address (0.0.0.0, in a pod), a Host that is an IP literal (a probe, a
    client using the address) or a loopback name (port-forward, an SSH tunnel) is answered;
    a rebinding attack always sends a name, and other names are refused."""
    cfg = config(cluster_url, host="0.0.0.0", token=TOKEN, allowed_hosts=("shardq-web",))
    job = f"/q/{queue}/job/{seeded.idem_job}"
    with serving(cfg) as base:
        for name in ("10.244.1.7:8080", "[fd00::7]:8080", "localhost:9000", "shardq-web:8080"):
            r = httpx.get(base + job, headers={"Host": name, **BEARER})
            assert r.status_code == 200, (name, r.status_code)
        r = httpx.get(base + job, headers={"Host": "evil.example:8080", **BEARER})
        assert r.status_code == 400


# reads behind the token ------------------------------------------------------------------------


def test_reads_need_the_token_beyond_loopback_or_with_require_login(
    cluster_url: str, seeded: Seeded, queue: str
) -> None:
    job = f"/q/{queue}/job/{seeded.idem_job}"
    for cfg in (
        config(cluster_url, host="0.0.0.0", token=TOKEN),
        config(cluster_url, require_login=True, token=TOKEN),
        config(cluster_url, require_login=True, token=TOKEN, allow_actions=True),
    ):
        assert cfg.require_login
        with serving(cfg) as base:
            anonymous = httpx.get(base + job)
            assert anonymous.status_code == 303, anonymous.status_code
            assert anonymous.headers["location"].startswith("/login?next=")
            assert "4711" not in anonymous.text
            for path in ("/", f"/q/{queue}", f"/q/{queue}/jobs?state=dead", f"/q/{queue}/fleet"):
                assert httpx.get(base + path).status_code == 303, path
            live = httpx.get(base + f"/live/q/{queue}/job/{seeded.idem_job}")
            assert live.status_code == 401 and "token" in live.json()["error"]
            assert httpx.get(base + "/live/overview").status_code == 401
            wrong = httpx.get(base + job, headers={"Authorization": "Bearer nope-nope-nope-nope"})
            assert wrong.status_code == 401 and "4711" not in wrong.text
            # the probes, the assets and the login page need nothing
            assert httpx.get(base + "/healthz").status_code == 200
            assert httpx.get(base + "/readyz").status_code == 200
            assert httpx.get(base + "/static/console.css").status_code == 200
            # a script with the token; a browser after logging in
            assert "4711" in httpx.get(base + job, headers=BEARER).text
            with httpx.Client(base_url=base) as browser:
                assert log_in(browser, "not-the-token-00000").status_code == 401
                done = log_in(browser)
                assert done.status_code == 303 and done.headers["location"] == "/"
                page = browser.get(job)
                assert page.status_code == 200 and "4711" in page.text
                assert browser.get("/live/overview").status_code == 200
                # log out: reads need the token again
                browser.post("/logout", data={"csrf": csrf_of(browser.get("/").text)})
                assert browser.get(job).status_code == 303
            if not cfg.allow_actions:
                # logged in or not, a read-only console acts on nothing
                refused = httpx.post(base + f"/q/{queue}/action/pause", headers=BEARER)
                assert refused.status_code == 403

    # on loopback without --require-login, reads stay open (the loopback default)
    with serving(config(cluster_url, token=TOKEN, allow_actions=True)) as base:
        assert httpx.get(base + job).status_code == 200


def test_no_token_no_console_beyond_loopback(cluster_url: str, monkeypatch: Any) -> None:
    for host in ("0.0.0.0", "::", "10.0.0.5", "console.internal"):
        with pytest.raises(TokenError, match="SHARDQ_WEB_TOKEN"):
            config(cluster_url, host=host)
        with pytest.raises(TokenError):
            config(cluster_url, host=host, token="short")
    with pytest.raises(TokenError, match="SHARDQ_WEB_TOKEN"):
        config(cluster_url, require_login=True)
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert not config(cluster_url, host=host).require_login, host

    monkeypatch.delenv("SHARDQ_WEB_TOKEN", raising=False)
    runner = CliRunner()
    for args in (["--host", "0.0.0.0"], ["--require-login"]):
        result = runner.invoke(main, ["web", "--url", cluster_url, *args])
        assert result.exit_code == 1, result.output
        [line] = result.output.strip().splitlines()
        assert "SHARDQ_WEB_TOKEN" in line and "Traceback" not in line, line
    bad = runner.invoke(main, ["web", "--url", cluster_url, "--trusted-proxy", "not-an-ip"])
    assert bad.exit_code == 1 and "not-an-ip" in bad.output, bad.output
    help_text = runner.invoke(main, ["web", "--help"]).output
    for option in ("--allowed-host", "--require-login", "--trusted-proxy"):
        assert option in help_text


# sessions --------------------------------------------------------------------------------------


def test_a_flood_of_login_pages_logs_nobody_out(
    cluster_url: str, seeded: Seeded, queue: str
) -> None:
    """1,000 anonymous GET /login used to fill the session table and evict the operators'."""
    cfg = config(cluster_url, allow_actions=True, token=TOKEN)
    with serving(cfg) as base, httpx.Client(base_url=base) as operator:
        assert log_in(operator).status_code == 303
        csrf = csrf_of(operator.get(f"/q/{queue}").text)
        with httpx.Client(base_url=base) as anonymous:
            for _ in range(1000):
                anonymous.cookies.clear()
                assert anonymous.get("/login").status_code == 200
        assert "log in to act" not in operator.get(f"/q/{queue}").text
        replay = operator.post(
            f"/q/{queue}/action/replay", data={"job_id": seeded.dead, "csrf": csrf}
        )
        assert replay.status_code == 303, replay.text
    info = Client.from_url(cluster_url).get(queue, seeded.dead)
    assert info is not None and info.state == "scheduled"


def test_the_login_form_is_bound_to_its_browser(cluster_url: str) -> None:
    """No server state before login, and still CSRF: the form's token must match the browser's
    own signed cookie, so a token lifted from another browser, a forged one or an expired one
    is refused."""
    cfg = config(cluster_url, allow_actions=True, token=TOKEN)
    with serving(cfg) as base:
        with httpx.Client(base_url=base) as a, httpx.Client(base_url=base) as b:
            csrf_a = csrf_of(a.get("/login").text)
            csrf_b = csrf_of(b.get("/login").text)
            assert csrf_a != csrf_b
            lifted = b.post("/login", data={"csrf": csrf_a, "token": TOKEN})
            assert lifted.status_code == 403
            forged = a.post("/login", data={"csrf": csrf_a[:-2] + "xx", "token": TOKEN})
            assert forged.status_code == 403
            a.cookies.set(LOGIN_COOKIE, csrf_a[:-2] + "xx")
            assert (
                a.post("/login", data={"csrf": csrf_a[:-2] + "xx", "token": TOKEN}).status_code
                == 403
            )
        with httpx.Client(base_url=base) as c:
            good = log_in(c)
            assert good.status_code == 303 and c.cookies.get(SESSION_COOKIE)


# cursors ---------------------------------------------------------------------------------------


def _cursor(obj: Any) -> str:
    """A cursor as the inspector encodes one (stdlib json: orjson refuses huge integers)."""
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")


CRAFTED = [
    "x",
    "!!!!",
    _cursor("scheduled"),
    _cursor({"scheduled": 1, "x": 2}),
    _cursor(["scheduled"]),
    _cursor(["scheduled", None]),
    _cursor(["scheduled", [1]]),
    _cursor(["scheduled", ["a", "b"]]),
    _cursor(["scheduled", [1e308, "a"]]),
    _cursor(["scheduled", [10**30, "a"]]),
    _cursor(["scheduled", [1, 2]]),
    _cursor(["dead", ["x-y", 0]]),
    _cursor(["dead", ["1-1", "a"]]),
    _cursor(["dead", [5, 0]]),
    _cursor(["dead", ["99999999999999999999999-0", 0]]),
    _cursor(["ready", ["-1-0", 0]]),
    _cursor(["running", [None, None]]),
    _cursor(["retrying", [-1, "0"]]),
    _cursor(["retrying", [0, 5]]),
    _cursor(["retrying", [0, "abc"]]),
    _cursor(["retrying", [99, "0"]]),
    "A" * 5000,
]


def test_crafted_cursors_are_400_with_a_message(
    cluster_url: str, seeded: Seeded, queue: str
) -> None:
    with serving(config(cluster_url)) as base:
        for state in LIST_STATES:
            for cursor in CRAFTED:
                r = httpx.get(base + f"/q/{queue}/jobs", params={"state": state, "cursor": cursor})
                assert r.status_code == 400, (state, cursor[:60], r.status_code)
                assert "cursor" in r.text
    # the CLI: one line, no traceback
    runner = CliRunner()
    for cursor in CRAFTED[:12]:
        result = runner.invoke(
            main, ["job", "list", "--url", cluster_url, "-q", queue, "--cursor", cursor]
        )
        assert result.exit_code == 1, (cursor, result.output, result.exception)
        assert len(result.output.strip().splitlines()) == 1 and "cursor" in result.output


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)


@pytest.fixture(scope="module")
def fuzz_queue(cluster_url: str) -> Iterator[tuple[Client, str]]:
    client = Client.from_url(cluster_url)
    queue = "t-cursor-" + uuid.uuid4().hex[:10]
    client.create_queue(queue, 2)
    client.enqueue(queue, "t", 1, delay=600)
    yield client, queue
    client.close()


@settings(max_examples=150)
@given(
    state=st.sampled_from(LIST_STATES),
    cursor=st.one_of(
        st.text(max_size=80),
        json_values.map(_cursor),
        st.tuples(st.sampled_from(LIST_STATES), json_values).map(lambda t: _cursor(list(t))),
        st.tuples(
            st.sampled_from(LIST_STATES),
            st.tuples(st.integers() | st.text(max_size=30), st.integers() | st.text(max_size=30)),
        ).map(lambda t: _cursor([t[0], list(t[1])])),
    ),
)
@example(state="scheduled", cursor=_cursor(["scheduled", [-(10**15), ""]]))
@example(state="dead", cursor=_cursor(["dead", ["0-0", -1]]))
def test_any_cursor_is_a_page_or_an_invalid_cursor_error(
    fuzz_queue: tuple[Client, str], state: str, cursor: str
) -> None:
    """Fuzzed cursors through the real inspector against the real cluster: a page, or
    InvalidCursorError; never another exception."""
    client, queue = fuzz_queue
    try:
        page = Inspector(client).list_jobs(queue, state, cursor=cursor, limit=5)
    except InvalidCursorError as exc:
        assert "cursor" in str(exc)
    else:
        assert isinstance(page.jobs, list)


# TLS proxy -------------------------------------------------------------------------------------


def test_secure_cookies_behind_a_trusted_tls_proxy(cluster_url: str) -> None:
    proxied = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"}

    def cookie_flags(base: str) -> str:
        """The session cookie's attributes after a login through the "proxy".  The cookies
        go back by hand: httpx, speaking http, would keep a Secure one to itself, where the
        browser (speaking https to the proxy) sends it."""
        page = httpx.get(base + "/login", headers=proxied)
        login_cookie = page.cookies[LOGIN_COOKIE]
        login = httpx.post(
            base + "/login",
            data={"csrf": csrf_of(page.text), "token": TOKEN, "next": "/"},
            headers={**proxied, "Cookie": f"{LOGIN_COOKIE}={login_cookie}"},
        )
        assert login.status_code == 303, login.text
        return ";".join(
            v for v in login.headers.get_list("set-cookie") if v.startswith(SESSION_COOKIE)
        ).lower()

    trusted = config(cluster_url, allow_actions=True, token=TOKEN, trusted_proxies=("127.0.0.1",))
    with serving(trusted) as base:
        assert "secure" in cookie_flags(base).split("; ")
    cidr = config(cluster_url, allow_actions=True, token=TOKEN, trusted_proxies=("127.0.0.0/8",))
    with serving(cidr) as base:
        assert "secure" in cookie_flags(base).split("; ")
    # from a peer that is not a configured proxy the header is the client's word: ignored
    untrusted = config(cluster_url, allow_actions=True, token=TOKEN, trusted_proxies=("10.0.0.1",))
    with serving(untrusted) as base:
        assert "secure" not in cookie_flags(base).split("; ")
    with serving(config(cluster_url, allow_actions=True, token=TOKEN)) as base:
        assert "secure" not in cookie_flags(base).split("; ")


# job ids ---------------------------------------------------------------------------------------

ID_ALPHABET = [chr(c) for c in range(0x21, 0x7F)]  # shardq.jobs.JOB_ID_RE


def _browser_resolves_dots(href: str) -> bool:
    """Whether a browser would rewrite the path (WHATWG URL: '.'/'..' segments, also as %2e)."""
    segments = urlsplit(href).path.split("/")
    return any(unquote(s.lower().replace("%2e", ".")) in (".", "..") for s in segments)


@pytest.fixture(scope="module")
def id_console(cluster_url: str) -> Iterator[tuple[str, str, Client]]:
    url = cluster_url
    client = Client.from_url(url)
    queue = "t-ids-" + uuid.uuid4().hex[:10]
    client.create_queue(queue, 4)
    with serving(config(url)) as base:
        yield base, queue, client
    client.close()


@settings(max_examples=80)
@given(job_id=st.text(alphabet=ID_ALPHABET, min_size=1, max_size=128))
@example(job_id="/")
@example(job_id="a/b")
@example(job_id="a/../b")
@example(job_id=".")
@example(job_id="..")
@example(job_id="%2e%2E")
@example(job_id="%")
@example(job_id="%2F")
@example(job_id="?x=1")
@example(job_id="#top")
@example(job_id="a&b=c;d")
@example(job_id="~" * 128)
def test_every_valid_job_id_can_be_opened(id_console: tuple[str, str, Client], job_id: str) -> None:
    """A job enqueued with any id the id rule allows is opened from the listing's link and from
    the search box, over real HTTP, and the link is one a browser would not rewrite."""
    base, queue, client = id_console
    if client.get(queue, job_id) is None:
        client.enqueue(queue, "t", {"id": job_id}, delay=3600, job_id=job_id)
    listing = httpx.get(base + f"/q/{queue}/jobs", params={"state": "scheduled", "limit": 200})
    rows = {
        html.unescape(jid): html.unescape(href)
        for jid, href in re.findall(
            r'<tr data-job="([^"]*)">\s*<td class="mono"><a href="([^"]+)"', listing.text
        )
    }
    href = rows.get(job_id)
    if href is None:  # more than a page of ids by now: open the job through the search box
        found = httpx.get(base + f"/q/{queue}/search", params={"q": job_id})
        assert found.status_code == 303, found.text
        href = found.headers["location"]
    assert not _browser_resolves_dots(href), href
    for target in (
        href,
        httpx.get(base + f"/q/{queue}/search", params={"q": job_id}).headers["location"],
    ):
        page = httpx.get(base + target)
        assert page.status_code == 200, (job_id, target, page.status_code)
        title = re.search(r'<h1>Job <span class="mono">(.*?)</span></h1>', page.text)
        assert title and html.unescape(title.group(1)) == job_id, (job_id, target)
        live = re.search(r'data-live="([^"]+)"', page.text)
        assert live
        assert httpx.get(base + html.unescape(live.group(1))).json()["data"]["state"] == "scheduled"


# rate limit ------------------------------------------------------------------------------------


def test_wrong_tokens_are_rate_limited_and_the_right_one_still_gets_in(
    cluster_url: str, queue: str
) -> None:
    """Wrong tokens from one address (bearer and login form alike) are answered 429 past the
    burst, until the budget refills.  The audit's case: the right token was answered 429 too,
    so ten wrong tokens a minute from anyone sharing the operator's address (everyone behind
    one `kubectl port-forward`) locked the operator out.  The token is compared first: from the
    same, blocked address the right bearer acts and the right login logs in, and wrong ones
    there are still refused 429 (uncounted: the wait does not grow)."""
    cfg = config(
        cluster_url,
        allow_actions=True,
        token=TOKEN,
        auth_failures=5,
        auth_window_s=600.0,  # one failure forgiven every 2 min: none during the test
        require_login=True,  # so reads check the bearer too
        trusted_proxies=("127.0.0.1",),
    )
    Client.from_url(cluster_url).create_queue(queue, 2)
    bad = {"Authorization": "Bearer wrong-token-000000000"}
    with serving(cfg) as base:
        statuses = [
            httpx.post(base + f"/q/{queue}/action/resume", headers=bad).status_code
            for _ in range(8)
        ]
        assert statuses[:5] == [401] * 5 and statuses[5:] == [429] * 3, statuses
        limited = httpx.post(base + f"/q/{queue}/action/resume", headers=bad)
        assert limited.status_code == 429
        assert 1 <= int(limited.headers["retry-after"]) <= 120
        assert httpx.get(base + "/live/overview", headers=bad).status_code == 429
        # the right token, from the same address, at once: in
        for _ in range(3):
            right = httpx.post(base + f"/q/{queue}/action/resume", headers=BEARER)
            assert right.status_code == 200, right.text
        assert httpx.get(base + "/live/overview", headers=BEARER).status_code == 200
        with httpx.Client(base_url=base) as b:
            assert log_in(b, "wrong-token-111111111").status_code == 429  # the form counts too
            logged_in = log_in(b)
            assert logged_in.status_code == 303, logged_in.text
            assert b.get("/").status_code == 200
        # still blocked for wrong ones
        assert httpx.post(base + f"/q/{queue}/action/resume", headers=bad).status_code == 429
        # another client (behind the trusted proxy) is not held up by this one
        other = {**bad, "X-Forwarded-For": "198.51.100.20"}
        assert httpx.post(base + f"/q/{queue}/action/resume", headers=other).status_code == 401
    # (the budget's refill: test_the_rate_limiter_refills_and_keeps_bounded_memory)


def test_the_rate_limiter_refills_and_keeps_bounded_memory() -> None:
    from shardq.web.auth import FailureLimiter

    refills = FailureLimiter(burst=2, window_s=10)  # one failure forgiven every 5 s
    refills.failed("192.0.2.9", now=100.0)
    refills.failed("192.0.2.9", now=100.0)
    assert refills.retry_after("192.0.2.9", now=100.0) == 5
    assert refills.retry_after("192.0.2.9", now=104.0) == 1
    assert refills.retry_after("192.0.2.9", now=105.0) == 0
    limiter = FailureLimiter(burst=3, window_s=60, max_clients=100)
    for i in range(10_000):
        limiter.failed(f"10.{i // 65536}.{i // 256 % 256}.{i % 256}")
    assert len(limiter) <= 100
    for _ in range(3):
        assert limiter.retry_after("192.0.2.1") == 0
        limiter.failed("192.0.2.1")
    assert limiter.retry_after("192.0.2.1") > 0
    # one IPv6 host holds a /64: its addresses share one budget
    for i in range(3):
        limiter.failed(f"2001:db8:1:2::{i + 1}")
    assert limiter.retry_after("2001:db8:1:2:ffff::1") > 0
    assert limiter.retry_after("2001:db8:1:3::1") == 0


# the read-only Redis role ----------------------------------------------------------------------


def _nodes(url: str) -> tuple[list[Any], Any]:
    """Every node of the cluster (replicas too: ACL users are per node), and the client."""
    conn = connect(RedisSettings.from_url(url))
    return [conn.get_redis_connection(n) for n in conn.get_nodes()], conn


def test_the_read_only_console_runs_as_the_viewer_user(
    cluster_url: str, seeded: Seeded, queue: str
) -> None:
    """Every read page rendered as ``shardq-viewer`` (acl.rules('viewer')) on every node of the
    real cluster, with ACL LOG empty after; an action the console refuses is also refused by
    Redis, for the viewer user, whatever the function."""
    nodes, conn = _nodes(cluster_url)
    user, password = "t-shardq-viewer", "viewer-password-123"
    rules = acl.rules("viewer").split()
    try:
        for node in nodes:
            node.execute_command("ACL", "SETUSER", user, "reset", *rules)
            node.execute_command("ACL", "SETUSER", user, "on", f">{password}")
            node.execute_command("ACL", "LOG", "RESET")
        settings_ = RedisSettings.from_url(cluster_url, username=user, password=password)
        cfg = WebConfig(redis=settings_)
        with serving(cfg) as base:
            pages = [
                "/",
                f"/q/{queue}",
                f"/q/{queue}?metric=hot",
                *(f"/q/{queue}/jobs?state={s}" for s in LIST_STATES),
                f"/q/{queue}/jobs?state=scheduled&limit=20",
                f"/q/{queue}/dead",
                f"/q/{queue}/job/{seeded.idem_job}",
                f"/q/{queue}/job/{seeded.dead}",
                f"/q/{queue}/job/{seeded.retrying}",
                f"/q/{queue}/job/no-such-job",
                f"/q/{queue}/search?q={seeded.idem_key}",
                f"/q/{queue}/schedules",
                f"/q/{queue}/fleet",
                "/live/overview",
                f"/live/q/{queue}",
                f"/live/q/{queue}/fleet",
                f"/live/q/{queue}/job/{seeded.dead}",
                "/readyz",
            ]
            for path in pages:
                r = httpx.get(base + path)
                assert r.status_code in (200, 303, 404), (path, r.status_code, r.text[:300])
                assert "Redis unavailable" not in r.text and "NOPERM" not in r.text, path
            first = httpx.get(base + f"/q/{queue}/jobs?state=scheduled&limit=20").text
            nxt = re.search(r'href="([^"]+)" id="next-page"', first)
            assert nxt and httpx.get(base + html.unescape(nxt.group(1))).status_code == 200
        problems = [entry for node in nodes for entry in node.execute_command("ACL", "LOG") or []]
        assert not problems, problems

        # Redis refuses the viewer every write: the writing functions (FCALL is not granted;
        # FCALL_RO refuses a function without no-writes) and the plain write commands.
        from shardq.store import inspection, keys, producer

        pk = keys.partition_keys(queue, 0, 8)
        viewer = Client(settings_)
        try:
            for op in (
                inspection.pause(pk, True),
                inspection.empty_due(pk, 10),
                inspection.run_now(pk, seeded.dead),
                producer.cancel(
                    keys.partition_keys(queue, keys.partition_for(seeded.scheduled[0], 8), 8),
                    seeded.scheduled[0],
                ),
            ):
                node = viewer.redis.get_redis_connection(
                    viewer.redis.get_node_from_key(op.route_key)
                )
                for command in (op.command(), ("FCALL_RO", *op.command()[1:])):
                    with pytest.raises(Exception) as refused:
                        node.execute_command(*command)
                    text = str(refused.value).lower()
                    assert "permission" in text or "write flag" in text or "noperm" in text, text
            for command in (
                ("HSET", pk.stats, "paused", "1"),
                ("DEL", pk.due),
                ("XADD", pk.dead, "*", "j", "x"),
            ):
                with pytest.raises(Exception, match=r"(?i)permission|noperm"):
                    viewer.redis.execute_command(*command)
        finally:
            viewer.close()
        assert Client.from_url(cluster_url).get(queue, seeded.dead).state == "dead"  # type: ignore[union-attr]
    finally:
        for node in nodes:
            node.execute_command("ACL", "DELUSER", user)
            node.execute_command("ACL", "LOG", "RESET")
        conn.close()


def test_a_viewer_console_without_the_functions_says_what_to_run(
    own_redis: Any, queue: str
) -> None:
    """The viewer may not load shardq's library: a node without it (a new node, FUNCTION
    FLUSH) is a 503 page saying to run `shardq functions load`, not a 500."""
    server = own_redis()
    with Client.from_url(server.url) as admin:
        admin.create_queue(queue, 2)
        admin.redis.execute_command("FUNCTION", "FLUSH")
        admin.redis.execute_command(
            "ACL", "SETUSER", "viewer", "reset", *acl.rules("viewer").split()
        )
        admin.redis.execute_command("ACL", "SETUSER", "viewer", "on", ">viewer-password-1")
    viewer = RedisSettings.from_url(server.url, username="viewer", password="viewer-password-1")
    with serving(WebConfig(redis=viewer)) as base:
        page = httpx.get(base + f"/q/{queue}")
        assert page.status_code == 503 and "shardq functions load" in page.text, page.text[-500:]


# Redis down at start ---------------------------------------------------------------------------


def _get(url: str) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=5)
    except httpx.TransportError:
        return None


def test_started_while_redis_is_down_it_serves_and_waits(procs: list[Proc]) -> None:
    """`shardq web` with Redis down at start: it serves at once (liveness passes, readiness does
    not, every page says Redis is unreachable and being retried, no traceback) and works as
    soon as Redis answers; bad credentials, which waiting cannot fix, are one line and exit 1."""
    redis_port, web_port = free_port(), free_port()
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", redis_port)) != 0
    url = f"redis://127.0.0.1:{redis_port}"
    web = Proc(cli_command("web", "--url", url, "--port", str(web_port)))
    procs.append(web)
    base = f"http://127.0.0.1:{web_port}"
    wait_for(lambda: _get(base + "/healthz") is not None or not web.alive(), 20, web.log)
    web.check_alive()
    assert _get(base + "/healthz").status_code == 200  # type: ignore[union-attr]
    ready = _get(base + "/readyz")
    assert ready is not None and ready.status_code == 503 and "unreachable" in ready.text
    page = _get(base + "/")
    assert page is not None and page.status_code == 503
    assert "unreachable" in page.text and "retry" in page.text.lower()
    server = OwnRedis(port=redis_port)
    try:
        wait_for(
            lambda: (r := _get(base + "/readyz")) is not None and r.status_code == 200, 30, web.log
        )
        assert _get(base + "/").status_code == 200  # type: ignore[union-attr]
        assert "Traceback" not in web.log(), web.log()
        assert web.alive()
    finally:
        web.stop()
        server.stop()

    # wrong credentials on a Redis that answers: one line, exit 1
    server = OwnRedis("--requirepass", "right-password", port=redis_port)
    try:
        wrong = f"redis://:wrong@127.0.0.1:{redis_port}"
        bad = subprocess.run(
            cli_command("web", "--url", wrong, "--port", str(web_port)),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert bad.returncode == 1, bad.stderr
        lines = [line for line in bad.stderr.strip().splitlines() if not line.startswith("{")]
        assert lines and "credentials" in lines[-1] and "Traceback" not in bad.stderr, bad.stderr
        assert "wrong" not in bad.stderr
    finally:
        server.stop()
