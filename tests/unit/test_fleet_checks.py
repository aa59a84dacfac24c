"""The fleet tests' own judges, on made-up records: which second runs the guarantees allow
(tests/support/reruns.py, tests/support/fresh.py ``failover_reruns``) and which lost jobs a
failover may cost (``check``).  Each rule is shown passing what the README allows and failing
what it does not, so the fleet tests that use them can fail."""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.fresh import REPLICATION_LAG, Kill, Ledger, check, failover_reruns, may_be_lost
from support.helpers import Runs, scaled
from support.reruns import classify, worker_report

from shardq.jobs import Job
from shardq.store import keys

# reruns.classify ----------------------------------------------------------------------------


def start(attempt: int, deliveries: int, pid: int, at: int, partition: int = 3) -> dict[str, Any]:
    return {
        "id": "j",
        "event": "start",
        "attempt": attempt,
        "deliveries": deliveries,
        "partition": partition,
        "pid": pid,
        "wall_ms": at,
    }


def why(
    *starts: dict[str, Any],
    kills: dict[int, int] | None = None,
    log: str = "",
    stops: dict[int, list[int]] | None = None,
) -> str:
    reruns = classify({"j": list(starts)}, kills or {}, {10: worker_report(log)}, stops)
    return next(k for k, v in reruns.counts().items() if v) if any(reruns.counts().values()) else ""


def test_a_single_start_is_no_rerun() -> None:
    assert why(start(1, 1, 10, 100)) == ""


def test_a_killed_workers_delivery_taken_over_is_allowed() -> None:
    assert why(start(1, 1, 10, 100), start(2, 2, 11, 3000), kills={10: 500}) == "killed"


def test_a_rerun_is_unexplained_when_the_worker_was_killed_only_after_it() -> None:
    assert why(start(1, 1, 10, 100), start(2, 2, 11, 3000), kills={10: 4000}) == "unexplained"


def test_a_rerun_on_a_new_ready_entry_is_unexplained_even_after_a_kill() -> None:
    # Stored twice (a resize putting a job in two partitions, say): delivery 1 again.
    assert why(start(1, 1, 10, 100), start(1, 1, 11, 3000), kills={10: 500}) == "unexplained"
    moved = start(2, 2, 11, 3000, partition=16387)
    assert why(start(1, 1, 10, 100), moved, kills={10: 500}) == "unexplained"


def test_a_rerun_from_a_live_worker_is_unexplained_unless_it_reported_a_loss() -> None:
    assert why(start(1, 1, 10, 100), start(2, 2, 11, 3000)) == "unexplained"
    paused = "partition 3: 1 deliveries were reclaimed by another worker while running"
    assert why(start(1, 1, 10, 100), start(2, 2, 11, 3000), log=paused) == "paused"
    gone = json.dumps({"event": "job.settle_gone", "job_id": "j", "partition": 3})
    assert why(start(1, 1, 10, 100), start(2, 2, 11, 3000), log=gone) == "paused"


def test_a_stopped_workers_delivery_taken_over_is_allowed_whichever_starts_first() -> None:
    assert why(start(1, 1, 10, 100), start(2, 2, 11, 3000), stops={10: [500]}) == "paused"
    # fetched before its SIGSTOP, started after SIGCONT: the taker's start comes first
    assert why(start(2, 2, 11, 3000), start(1, 1, 10, 4000), stops={10: [500]}) == "paused"
    assert why(start(1, 1, 10, 100), start(2, 2, 11, 3000), stops={10: [3500]}) == "unexplained"
    assert why(start(1, 1, 10, 100), start(2, 2, 11, 3000), stops={11: [500]}) == "unexplained"


def test_a_retry_after_a_logged_failure_is_allowed() -> None:
    failed = json.dumps({"event": "job.retry", "job_id": "j", "attempt": 1, "retry_in_ms": 800})
    assert why(start(1, 1, 10, 100), start(2, 1, 10, 900), log=failed) == "failed"
    # the failure of another attempt explains nothing
    other = json.dumps({"event": "job.retry", "job_id": "j", "attempt": 2, "retry_in_ms": 800})
    assert why(start(1, 1, 10, 100), start(2, 1, 10, 900), log=other) == "unexplained"


# fresh.check and failover_reruns ------------------------------------------------------------

QUEUE = "q"
P = 12
T = 1000.0  # the kill (monotonic s)


def job_in(partition: int) -> str:
    n = 0
    while keys.partition_for(f"j{n}", P) != partition:
        n += 1
    return f"j{n}"


def kill_of(partitions: list[int]) -> Kill:
    slots = {keys.slot_of(keys.partition_keys(QUEUE, p, P).due) for p in partitions}
    return Kill(7000, slots, T, T + 0.001, QUEUE, [(0, P)])


def ledger_of(*jobs: tuple[str, float, float]) -> Ledger:
    """(job id, call started, call returned)"""
    ledger = Ledger()
    for job_id, started, returned in jobs:
        ledger.stored[job_id] = returned
        ledger.started[job_id] = started
    return ledger


def ran(*job_ids: str) -> Runs:
    runs = Runs()
    for job_id in job_ids:
        runs.jobs.append(Job(job_id, QUEUE, keys.partition_for(job_id, P), "t", None, 1, 5, 0))
        runs.times.append(T + 5)
    return runs


def test_a_job_acknowledged_by_the_killed_primary_just_before_the_kill_may_be_lost() -> None:
    victim, other = job_in(0), job_in(7)
    kill = kill_of([0])
    ledger = ledger_of((victim, T - 0.01, T - 0.005), (other, T - 0.01, T - 0.005))
    assert may_be_lost(ledger, kill) == {victim}
    figures = check(ledger, ran(other), kill)
    assert figures["lost"] == 1 and figures["lost_returned_before_kill_s"] == (0.005, 0.005)


def test_a_job_lost_on_another_primary_fails_whenever_it_was_stored() -> None:
    other = job_in(7)
    for started, returned in ((T - 0.01, T - 0.005), (T + 0.5, T + 0.6), (T - 5, T - 4.9)):
        with pytest.raises(AssertionError, match="another primary"):
            check(ledger_of((other, started, returned)), ran(), kill_of([0]))


def test_a_job_of_the_killed_primary_is_lost_only_within_the_window() -> None:
    victim = job_in(0)
    kill = kill_of([0])
    long_before = T - scaled(REPLICATION_LAG) - 0.1
    begun_after = T + 0.01  # its call began after the kill: the primary it reached is alive
    for started, returned in ((long_before - 0.01, long_before), (begun_after, T + 3)):
        with pytest.raises(AssertionError, match="killed primary"):
            check(ledger_of((victim, started, returned)), ran(), kill)


def test_a_durable_job_is_never_lost() -> None:
    victim = job_in(0)
    ledger = ledger_of((victim, T - 0.01, T - 0.005))
    ledger.durable.add(victim)
    with pytest.raises(AssertionError, match="durable"):
        check(ledger, ran(), kill_of([0]))


def test_without_a_kill_nothing_may_be_lost() -> None:
    with pytest.raises(AssertionError, match="lost beyond"):
        check(ledger_of((job_in(0), T, T)), ran(), None)


def test_failover_reruns_allows_only_jobs_of_the_killed_primary_run_about_the_kill() -> None:
    kill = kill_of([0])
    failed_over_at = T + 4
    victim, other = job_in(0), job_in(7)

    def runs_of(job_id: str, *times: float) -> Runs:
        runs = Runs()
        for at in times:
            runs.jobs.append(Job(job_id, QUEUE, keys.partition_for(job_id, P), "t", None, 1, 5, 0))
            runs.times.append(at)
        return runs

    assert failover_reruns(runs_of(victim, T - 0.05, T + 5), kill, failed_over_at) == (1, [])
    for bad in (
        runs_of(other, T - 0.05, T + 5),  # not on the killed primary
        runs_of(victim, T - 10, T + 5),  # first run long before the kill: acked by then
        runs_of(victim, T + 5, T + 6),  # first run after the failover
    ):
        allowed, unexplained = failover_reruns(bad, kill, failed_over_at)
        assert allowed == 0 and len(unexplained) == 1, unexplained
