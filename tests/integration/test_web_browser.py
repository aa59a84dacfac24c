"""The web console in a real browser: headless Debian chromium driven by playwright (the system
browser, through ``executable_path``: nothing is downloaded).  .ci/run installs chromium.

The console runs under uvicorn in a thread, on 127.0.0.1 and a free port of the session's
block, against the test cluster with jobs in every state.  Screenshots of the main pages go to
results/screenshots/ (docs/img/ holds copies for docs/guides/web-console.md).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("uvicorn")
sync_api = pytest.importorskip("playwright.sync_api")

from support.helpers import Runner, Runs, wait_for  # noqa: E402
from support.web_seed import PARTITIONS, TYPES, seed  # noqa: E402
from support.web_serve import serving  # noqa: E402

from shardq.client import Client  # noqa: E402
from shardq.config import RedisSettings  # noqa: E402
from shardq.web import WebConfig  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "results" / "screenshots"
TOKEN = "browser-test-token-0123456789"


def chromium() -> str | None:
    for name in (os.environ.get("SHARDQ_TEST_CHROMIUM"), "chromium", "chromium-browser"):
        if name and (found := shutil.which(name)):
            return found
    return None


pytestmark = pytest.mark.skipif(
    chromium() is None, reason="no system chromium (.ci/run installs Debian's `chromium`)"
)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=chromium(), headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield b
        finally:
            b.close()


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=False)


def post_status(page: Any, path: str) -> int:
    """POST from inside the page (same origin), as a script or a forged form would."""
    status: int = page.evaluate(
        "path => fetch(path, {method: 'POST', body: new URLSearchParams({confirm: 'x'})})"
        ".then(r => r.status)",
        path,
    )
    return status


def test_console_in_chromium(
    browser: Any, cluster_client: Client, cluster_url: str, queue: str
) -> None:
    seeded = seed(cluster_client, queue)
    redis = RedisSettings.from_url(cluster_url)
    errors: list[str] = []

    # read-only console: overview, partition map, lists, job; an action is refused
    with serving(WebConfig(redis=redis, poll_seconds=0.5)) as base:
        page = browser.new_page(viewport={"width": 1280, "height": 760})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(base + "/")
        row = page.locator(f'tr[data-queue="{queue}"]')
        sync_api.expect(row).to_be_visible()
        assert "read-only" in page.locator("#mode").inner_text()
        shot(page, "overview")

        page.goto(f"{base}/q/{queue}")
        cells = page.locator("#heat .cell")
        assert cells.count() == PARTITIONS
        assert sorted(int(c) for c in cells.all_inner_texts()) == list(range(PARTITIONS))
        # live refresh: the page polls /live/... and redraws the map without reloading
        sync_api.expect(page.locator("body[data-refreshed]")).to_have_count(1, timeout=10_000)
        assert page.locator("#heat .cell").count() == PARTITIONS
        assert "ok" in (page.locator("#live-status").get_attribute("class") or "")
        shot(page, "queue")

        page.goto(f"{base}/q/{queue}/jobs?state=running")
        for job_id in seeded.running:
            sync_api.expect(page.locator(f'tr[data-job="{job_id}"]')).to_be_visible()
        page.goto(f"{base}/q/{queue}/job/{seeded.idem_job}")
        assert '"order": 4711' in page.locator("pre.payload").inner_text()
        assert page.locator("button[data-action]").count() == 0
        assert post_status(page, f"/q/{queue}/action/pause") == 403
        page.close()

    # actions enabled: refused without the token, then log in and replay the dead job
    with serving(WebConfig(redis=redis, allow_actions=True, token=TOKEN)) as base:
        page = browser.new_page(viewport={"width": 1280, "height": 760})
        page.goto(f"{base}/q/{queue}/dead")
        assert page.locator("button[data-action]").count() == 0
        assert post_status(page, f"/q/{queue}/action/replay") == 401
        page.click("#mode")  # "log in to act"
        page.fill('input[name="token"]', "not-the-token-000000")
        page.click('form.login button[type="submit"]')
        sync_api.expect(page.locator("#login-failed")).to_be_visible()
        page.fill('input[name="token"]', TOKEN)
        page.click('form.login button[type="submit"]')
        page.wait_for_url(f"{base}/q/{queue}/dead")
        dead_row = page.locator(f'tr[data-job="{seeded.dead}"]')
        sync_api.expect(dead_row).to_contain_text("bad address <x>")
        shot(page, "dead-letters")
        dead_row.locator('button[data-action="replay"]').click()
        sync_api.expect(page.locator(".flash")).to_contain_text("is due now")
        info = cluster_client.get(queue, seeded.dead)
        assert info is not None and info.state in ("scheduled", "ready") and info.attempt == 0

        # a destructive step asks first: pause shows a confirm page, then pauses
        page.goto(f"{base}/q/{queue}")
        page.click('button[data-action="pause"]')
        sync_api.expect(page.locator("#confirm")).to_be_visible()
        page.click("#confirm")
        sync_api.expect(page.locator(".flash")).to_contain_text(f"paused {PARTITIONS}")
        page.click('button[data-action="resume"]')
        sync_api.expect(page.locator(".flash")).to_contain_text("resumed")
        page.goto(f"{base}/q/{queue}/job/{seeded.dead}")
        shot(page, "job")
        page.close()
    # no script error, no CSP violation, no missing asset (the refusals above are expected)
    expected = ("status of 401", "status of 403")
    assert not [e for e in errors if not any(x in e for x in expected)], errors

    # the replayed job runs
    runs = Runs()
    with Runner(cluster_url, queue, dict.fromkeys(TYPES, runs.add)):
        wait_for(lambda: seeded.dead in runs.count(), 20, "the replayed job did not run")
    time.sleep(0.1)
