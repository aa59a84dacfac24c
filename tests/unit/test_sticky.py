"""Sticky routing (shardq.store.sticky): generated ids are steered to their run's partition, and
routing stays crc32(id) % P, so anything that finds a job from its id still does."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from shardq import JobRequest
from shardq.config import ProducerSettings
from shardq.jobs import timed_head
from shardq.store import keys, producer, sticky


@pytest.fixture(autouse=True)
def fresh_runs() -> None:
    sticky.RUNS.clear()


@pytest.mark.parametrize("partitions", [2, 3, 5, 16, 64, 1024, 4096, 16384])
def test_a_steered_id_hashes_to_the_partition_asked_and_keeps_its_head(partitions: int) -> None:
    head = timed_head(1_765_000_000_000)
    for n in range(600):
        target = (n * 7919) % partitions
        plain = sticky.steer("", target, partitions)
        timed = sticky.steer(head, target, partitions)
        assert keys.partition_for(plain, partitions) == target
        assert keys.partition_for(timed, partitions) == target
        assert len(plain) == 12 and len(timed) == 20 and timed.startswith(head)
        assert set(plain) <= set(sticky.ALPHABET)


def test_steered_ids_keep_their_randomness() -> None:
    # Into one of 64 partitions: 72 - 6 bits stay random, so 50,000 ids never repeat, and each
    # character position of the suffix still takes many values.
    ids = [sticky.steer("", 9, 64) for _ in range(50_000)]
    assert len(set(ids)) == len(ids)
    assert len({i[-2:] for i in ids}) > 2_000
    assert len({i[-1] for i in ids}) == 64


def test_counts_that_cannot_be_steered_cheaply_are_not() -> None:
    assert all(sticky.supports(p) for p in (2, 3, 16, 64, 128, 4096, 16384))
    assert not any(sticky.supports(p) for p in (1, 17, 100, 1000, 12_288))


def requests(n: int, apart_ms: float = 0.0) -> list[JobRequest]:
    return [JobRequest("t", {"n": i}, delay=5.0 + i * apart_ms / 1000) for i in range(n)]


def runs_of(partitions: list[int]) -> list[int]:
    """The lengths of the runs of equal consecutive partitions."""
    out: list[int] = []
    for n, p in enumerate(partitions):
        if n and p == partitions[n - 1]:
            out[-1] += 1
        else:
            out.append(1)
    return out


@pytest.mark.parametrize("compact", [False, True])
def test_jobs_due_together_go_in_runs_that_spread_evenly(compact: bool) -> None:
    settings = ProducerSettings(sticky_jobs=64)
    prepared = producer.prepare_many("q", 64, requests(64 * 200), settings, compact)
    parts = [p.partition for p in prepared]
    for p in prepared:
        assert keys.partition_for(p.job_id, 64) == p.partition
        assert p.pk == keys.partition_keys("q", p.partition, 64)
    # All due in one window: runs of sticky_jobs (two in a row may pick one partition).
    assert all(n % settings.sticky_jobs == 0 for n in runs_of(parts))
    # 200 runs at random over 64 partitions (3.1 each on average): most partitions get some,
    # none a crowd (bounds a random draw passes but once in over 10^4).
    counts = Counter(parts)
    assert len(counts) >= 50 and max(counts.values()) <= 14 * settings.sticky_jobs


def windows(prepared: list[producer.PreparedEnqueue], window_ms: int) -> dict[int, set[int]]:
    """The partitions of each window of due times (by the delay asked)."""
    out: dict[int, set[int]] = {}
    for p in prepared:
        delay_ms = round((p.request.delay or 0) * 1000)
        out.setdefault(delay_ms // window_ms, set()).add(p.partition)
    return out


def test_a_run_holds_the_jobs_of_one_window_of_due_times() -> None:
    settings = ProducerSettings()  # 10 ms windows
    # 1 ms apart: ten jobs a window, each window's in one partition (a window's edge is the
    # Redis clock's, so a window of delays may straddle two).
    prepared = producer.prepare_many("q", 64, requests(2_000, apart_ms=1), settings)
    assert sum(len(s) for s in windows(prepared, 10).values()) <= 2 * 200
    # 20 ms apart: one job a window, so one by one.
    prepared = producer.prepare_many("q", 64, requests(2_000, apart_ms=20), settings)
    assert max(runs_of([p.partition for p in prepared])) < 6  # 6 in a row: 64^-5 a place
    # Two streams due 10 s apart, enqueued interleaved: each keeps its runs.
    later = [replace(r, delay=(r.delay or 0) + 10) for r in requests(500, 1)]
    mixed = [r for pair in zip(requests(500, 1), later, strict=True) for r in pair]
    prepared = producer.prepare_many("q", 64, mixed, settings)
    assert sum(len(s) for s in windows(prepared, 10).values()) <= 2 * 100


def test_ids_and_keys_still_route_by_their_hash_and_sticky_jobs_1_is_one_by_one() -> None:
    settings = ProducerSettings()
    keyed = [JobRequest("t", {}, idempotency_key=f"k{i}") for i in range(100)]
    given = [JobRequest("t", {}, job_id=f"id-{i}") for i in range(100)]
    for p in producer.prepare_many("q", 64, keyed, settings):
        assert p.partition == keys.partition_for(p.request.idempotency_key or "", 64)
    for p in producer.prepare_many("q", 64, given, settings):
        assert p.job_id == p.request.job_id and p.partition == keys.partition_for(p.job_id, 64)
    single = ProducerSettings(sticky_jobs=1)
    parts = [p.partition for p in producer.prepare_many("q", 64, requests(2_000), single)]
    assert max(runs_of(parts)) < 6  # a run of 6 by chance: 64^-5 a place
    # A count that cannot be steered cheaply: one by one, whatever the setting.
    parts = [p.partition for p in producer.prepare_many("q", 100, requests(2_000), settings)]
    assert max(runs_of(parts)) < 6


def test_each_queue_has_its_own_run() -> None:
    settings = ProducerSettings(sticky_jobs=10, sticky_window=60)  # one window, whatever the clock
    a = [producer.prepare_enqueue("a", 64, JobRequest("t", {}), settings) for _ in range(10)]
    b = [producer.prepare_enqueue("b", 64, JobRequest("t", {}), settings) for _ in range(10)]
    assert len({p.partition for p in a}) == 1 and len({p.partition for p in b}) == 1
    assert {p.pk.due.split("}")[0] for p in a} != {p.pk.due.split("}")[0] for p in b}


def test_the_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="sticky_jobs"):
        ProducerSettings(sticky_jobs=0)
    with pytest.raises(ValueError, match="sticky_window"):
        ProducerSettings(sticky_window=0)


def test_threads_share_the_runs_without_failing() -> None:
    # Many threads enqueueing through one process's runs, past MAX_OPEN windows (each job its own
    # window): every id still hashes where its partition says, and nothing raises.
    import threading

    settings = ProducerSettings(sticky_window=0.001)
    errors: list[BaseException] = []

    def produce(offset: int) -> None:
        try:
            for i in range(2_000):
                job_id, p = sticky.RUNS.place("q", 64, "", offset + i, settings)
                assert keys.partition_for(job_id, 64) == p
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=produce, args=(n * 10_000,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
