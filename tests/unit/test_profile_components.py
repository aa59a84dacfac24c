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


def test_newer_py_spy_frame_names_of_the_epoll_wait_are_left_out_too() -> None:
    # py-spy 0.4 names the wait "EpollSelector.select": counted as busy before 55344c9.
    raw = RAW.replace("select (selectors.py:468)", "EpollSelector.select (selectors.py:468)")
    assert busy_samples(raw) == 50 and components(raw) == components(RAW)


def test_hot_frames_name_the_innermost_frame_of_the_busy_samples() -> None:
    from bench.profile_steady import hot_frames

    assert hot_frames(RAW) == {
        "write (asyncio/selector_events.py)": 0.6,
        "_run_once (asyncio/base_events.py)": 0.2,
        "run (worker/fetcher.py)": 0.2,
    }
    assert hot_frames(RAW, top=1) == {"write (asyncio/selector_events.py)": 0.6}
