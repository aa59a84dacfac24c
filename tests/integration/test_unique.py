"""unique_until="done": an idempotency key that returns its job only until the job is done
(completed, cancelled or dead), atomic in the key's partition, under concurrent producers and
a SIGKILLed worker (a key is never held by a job that is done)."""

from __future__ import annotations

import itertools
import signal
import threading
import time
from pathlib import Path

import pytest
from support.helpers import Runner, Runs, pending_total, queue_state, scaled, wait_for
from support.procs import Proc

from shardq import PermanentError
from shardq.client import Client
from shardq.dev.demo import cli_command
from shardq.errors import IdempotencyKeyInUseError, InvalidJobError
from shardq.inspector import Inspector
from shardq.jobs import Job, JobRequest, debounced
from shardq.store import keys

HANDLERS = Path(__file__).resolve().parents[2] / "bench" / "handlers"


def _enqueue_from_threads(client: Client, queue: str, key: str, n: int) -> set[str]:
    ids: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(n)

    def one() -> None:
        barrier.wait()
        job_id = client.enqueue(queue, "t", None, delay=0.5, idempotency_key=key,
                                unique_until="done")  # fmt: skip
        with lock:
            ids.append(job_id)

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return set(ids)


def _state(client: Client, queue: str, job_id: str) -> str | None:
    info = client.get(queue, job_id)
    return None if info is None else info.state


def test_one_job_per_key_until_it_is_done(url: str, client: Client, queue: str) -> None:
    client.create_queue(queue, partitions=4)
    ran: list[str] = []
    with Runner(url, queue, {"t": lambda job: ran.append(job.id)}):
        rounds = []
        for _ in range(3):
            # 8 producers at once while the job waits: one job.
            ids = _enqueue_from_threads(client, queue, "report:42", 8)
            assert len(ids) == 1
            (job_id,) = ids
            wait_for(lambda: job_id in ran, 10, "the job did not run")  # noqa: B023
            wait_for(lambda: client.get(queue, job_id) is None, 10, "not acked")  # noqa: B023
            rounds.append(job_id)
    # Each round, once the job was done, the key gave a new one.
    assert len(set(rounds)) == 3 and ran == rounds


def test_a_dead_or_cancelled_job_frees_its_key(url: str, client: Client, queue: str) -> None:
    client.create_queue(queue, partitions=2)

    def fail(job: Job) -> None:
        raise PermanentError("no")

    first = client.enqueue(queue, "t", None, delay=600, idempotency_key="k", unique_until="done")
    # A plain idempotent enqueue with the key while the job waits: the same job.
    assert client.enqueue(queue, "t", None, idempotency_key="k", unique_until="done") == first
    assert client.cancel(queue, first)
    second = client.enqueue(queue, "f", None, idempotency_key="k", unique_until="done")
    assert second != first
    with Runner(url, queue, {"f": fail}):
        wait_for(lambda: _state(client, queue, second) == "dead", 10, "not dead")
    third = client.enqueue(queue, "t", None, delay=600, idempotency_key="k", unique_until="done")
    assert third not in (first, second)
    # Without unique_until the key keeps returning the job it names, whatever became of it.
    assert client.enqueue(queue, "t", None, idempotency_key="plain") == client.enqueue(
        queue, "t", None, idempotency_key="plain"
    )


def test_unique_needs_an_idempotency_key(client: Client, queue: str) -> None:
    client.create_queue(queue, partitions=2)
    with pytest.raises(InvalidJobError, match="pass idempotency_key"):
        client.enqueue(queue, "t", None, unique_until="done")
    with pytest.raises(InvalidJobError, match="unique_until must be"):
        client.enqueue(queue, "t", None, idempotency_key="x", unique_until="forever")  # type: ignore[arg-type]


def test_a_sigkilled_worker_does_not_hold_the_key_forever(
    cluster_url: str, cluster_client: Client, queue: str, procs: list[Proc], tmp_path: Path
) -> None:
    """The job's worker is SIGKILLed while it runs: the key keeps returning it (it is not done:
    it runs again elsewhere after reclaim); once that run completed, the key gives a new job."""
    client = cluster_client
    client.create_queue(queue, partitions=2)
    runlog = tmp_path / "runs"
    env = {"SHARDQ_BENCH_RUNLOG": str(runlog), "SHARDQ_BENCH_HOLD": "1.5",
           "PYTHONPATH": str(HANDLERS)}  # fmt: skip
    base = ["--queue", queue, "--url", cluster_url, "--membership-timeout", "1.5",
            "--heartbeat-interval", "0.3", "--visibility-timeout", "3"]  # fmt: skip
    worker = cli_command("worker", "run", *base, "--handlers", "shardq_runlog:register")
    procs.append(Proc.dispatcher(cluster_url, queue, env=env))
    first = Proc(worker, env)
    procs.append(first)
    job_id = client.enqueue(queue, "hold", None, idempotency_key="u", unique_until="done")
    wait_for(lambda: runlog.exists() and job_id in runlog.read_text(), 20, "it did not start")
    first.signal(signal.SIGKILL)
    first.popen.wait(10)
    assert client.enqueue(queue, "hold", None, idempotency_key="u", unique_until="done") == job_id
    procs.append(Proc(worker, env))
    wait_for(lambda: runlog.read_text().count(job_id) == 2, 30, "it was not run again")
    wait_for(lambda: client.get(queue, job_id) is None, 20, "the second run did not complete")
    assert pending_total(client.redis, queue, 2) == 0
    fresh = client.enqueue(queue, "hold", None, delay=600, idempotency_key="u", unique_until="done")
    assert fresh != job_id


def test_debounce_replaces_the_waiting_job_and_moves_it(
    url: str, client: Client, queue: str
) -> None:
    """A burst of 30 enqueues 0.1 s apart with debounce=0.6: one job, run once with the last
    payload, at the due time the last enqueue gave it (0.6 s after it, on the Redis clock);
    concurrent producers in the burst too."""
    client.create_queue(queue, partitions=4)
    runs = Runs()
    with Runner(url, queue, {"sync": runs.add}):
        first = client.enqueue_detailed(
            queue, debounced(JobRequest("sync", 0, idempotency_key="user:7"), 0.6)
        )
        assert first.created and first.due_ms is not None
        dues = [first.due_ms]
        for i in range(1, 30):
            r = client.enqueue_detailed(
                queue, debounced(JobRequest("sync", i, idempotency_key="user:7"), 0.6)
            )
            assert r.job_id == first.job_id and not r.created and r.due_ms is not None
            dues.append(r.due_ms)
            time.sleep(0.02 if i % 10 else 0.1)
        info = client.get(queue, first.job_id)
        assert info is not None and info.payload == 29 and info.state == "scheduled"
        wait_for(lambda: len(runs.jobs) == 1, 10, "the debounced job did not run")
        wait_for(lambda: pending_total(client.redis, queue, 4) == 0, 10, "not acked")
    assert len(runs.jobs) == 1
    job = runs.jobs[0]
    assert job.id == first.job_id and job.payload == 29
    # Each repeat moved the due time on (0.6 s after it); the job ran at the last one's, never
    # before it, and punctually (on the Redis clock).
    assert all(a < b for a, b in itertools.pairwise(dues)), dues
    assert dues[-1] - dues[0] >= 700, dues  # the burst's sleeps alone take 0.74 s
    assert job.due_ms == dues[-1]
    assert 0 <= job.fetched_redis_ms - job.due_ms <= scaled(1400)
    # Once it ran, the next enqueue with the key is a new job.
    again = client.enqueue(queue, "sync", 99, idempotency_key="user:7", debounce=60)
    assert again != first.job_id


def test_debounce_under_concurrent_producers_keeps_one_job(
    url: str, client: Client, queue: str
) -> None:
    client.create_queue(queue, partitions=2)
    ids: set[str] = set()
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def producer(n: int) -> None:
        barrier.wait()
        for i in range(20):
            job_id = client.enqueue(queue, "t", [n, i], idempotency_key="k", debounce=30)
            with lock:
                ids.add(job_id)

    threads = [threading.Thread(target=producer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(ids) == 1
    info = client.get(queue, ids.pop())
    assert info is not None and info.state == "scheduled" and info.payload[1] == 19


def test_bad_debounce_is_refused(client: Client, queue: str) -> None:
    client.create_queue(queue, partitions=2)
    with pytest.raises(InvalidJobError, match="pass idempotency_key"):
        client.enqueue(queue, "t", None, debounce=5)
    with pytest.raises(InvalidJobError, match="not both"):
        client.enqueue(queue, "t", None, idempotency_key="k", debounce=5, delay=3)
    with pytest.raises(InvalidJobError, match="debounce must be"):
        client.enqueue(queue, "t", None, idempotency_key="k", debounce=-1)


def test_a_debounce_replaces_only_a_burst_of_its_own(client: Client, queue: str) -> None:
    """The audit's case (M5): a debounce with another caller's idempotency key replaced that
    waiting job's type and payload under its id.  A debounce now acts only on a key a debounce
    made, for the same job type and tenant; any other key (a plain or unique one, another job
    type's or tenant's burst) is refused with IdempotencyKeyInUseError, and nothing is written:
    the waiting job keeps its type, payload and due time."""
    client.create_queue(queue, partitions=2, lanes=True)
    plain = client.enqueue(queue, "email", {"to": "a"}, idempotency_key="plain", delay=600)
    unique = client.enqueue(
        queue, "email", {"to": "b"}, idempotency_key="unique", unique_until="done", delay=600
    )
    burst = client.enqueue(queue, "sync", {"n": 1}, idempotency_key="burst", debounce=600)
    tenant = client.enqueue(
        queue, "sync", {"n": 1}, idempotency_key="tenant", debounce=600, tenant="acme"
    )
    keys_named = ["plain", "unique", "burst", "tenant"]
    before = queue_state(client.redis, queue, 2, keys_named)
    refused = [
        ("plain", "email", None),  # a plain key, even of the same type
        ("unique", "email", None),
        ("burst", "charge", None),  # another job type's burst
        ("tenant", "sync", "other"),  # another tenant's
        ("tenant", "sync", None),
    ]
    for key, job_type, who in refused:
        with pytest.raises(IdempotencyKeyInUseError, match="queue-global") as caught:
            client.enqueue(queue, job_type, {"n": 2}, idempotency_key=key, debounce=5, tenant=who)
        assert "nothing was written" in str(caught.value)
    assert queue_state(client.redis, queue, 2, keys_named) == before
    for job_id, job_type, payload in (
        (plain, "email", {"to": "a"}),
        (unique, "email", {"to": "b"}),
        (burst, "sync", {"n": 1}),
        (tenant, "sync", {"n": 1}),
    ):
        info = client.get(queue, job_id)
        assert info is not None and (info.type, info.payload) == (job_type, payload)
    # the burst's own type and tenant still debounce it
    assert client.enqueue(queue, "sync", {"n": 3}, idempotency_key="burst", debounce=600) == burst
    again = client.enqueue(
        queue, "sync", {"n": 3}, idempotency_key="tenant", debounce=600, tenant="acme"
    )
    assert again == tenant
    for job_id in (burst, tenant):
        info = client.get(queue, job_id)
        assert info is not None and info.payload == {"n": 3}
    # a plain enqueue with a debounce key gets the burst's job, as with any key
    assert client.enqueue(queue, "sync", None, idempotency_key="burst") == burst
    found = Inspector(client).find(queue, "burst")  # the key names its owner: read past it
    assert found is not None and found.id == burst


def test_a_debounce_key_from_before_keys_named_their_owner_still_debounces(
    client: Client, queue: str
) -> None:
    """Keys written before this change hold the bare job id.  One a debounce made (it expires a
    second after its job's due time) is still debounced by the same job type while its job
    waits; a plain key of the same shape (a day's retention) is refused."""
    client.create_queue(queue, partitions=2)
    old = client.enqueue(queue, "sync", {"n": 1}, idempotency_key="old", debounce=600)
    plain = client.enqueue(queue, "sync", {"n": 1}, idempotency_key="plain", delay=600)
    for key, job_id in (("old", old), ("plain", plain)):
        pk = keys.partition_keys(queue, keys.partition_for(key, 2), 2)
        raw = client.redis.get(pk.idem(key))
        assert raw is not None and raw.split(b" ", 1)[0] == job_id.encode()
        client.redis.set(pk.idem(key), job_id, keepttl=True)  # as written before the change
    assert client.enqueue(queue, "sync", {"n": 2}, idempotency_key="old", debounce=600) == old
    info = client.get(queue, old)
    assert info is not None and info.payload == {"n": 2}
    with pytest.raises(IdempotencyKeyInUseError):
        client.enqueue(queue, "sync", {"n": 2}, idempotency_key="plain", debounce=600)
    with pytest.raises(IdempotencyKeyInUseError):  # another type: not its burst either way
        client.enqueue(queue, "other", {"n": 2}, idempotency_key="old", debounce=600)
