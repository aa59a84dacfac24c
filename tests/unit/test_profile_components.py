"""bench.profile_steady's reading of a py-spy raw profile: samples by innermost shardq module,
waits in epoll left out."""

from __future__ import annotations

from bench.profile_steady import busy_samples, components

RAW = "\n".join(
    [
        "run (shardq/cli/process.py:10);_run_once (asyncio/base_events.py:1);"
        "select (selectors.py:468) 50",
        "run (shardq/cli/process.py:10);_loop (shardq/worker/fetcher.py:200);"
        "run_on (shardq/store/transport.py:436);write (asyncio/selector_events.py:1) 30",
        "run (shardq/cli/process.py:10);_run_once (asyncio/base_events.py:1) 10",
        "run (/x/site-packages/shardq/worker/fetcher.py:300) 10",
    ]
)


def test_samples_go_to_the_innermost_shardq_module_and_epoll_waits_are_left_out() -> None:
    assert busy_samples(RAW) == 50
    assert components(RAW) == {
        "shardq/store/transport.py": 0.6,
        "event loop": 0.2,
        "shardq/worker/fetcher.py": 0.2,
    }
    assert components("") == {}
