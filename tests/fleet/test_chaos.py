"""Failure modes on a cluster of the tests' own (the session block's chaos ports), so the
rest of the suite never sees a node killed or a slot moved: slot migration under load, a
primary killed and its replica promoted, Redis restarted with persistence, a producer clock
far off Redis', a handler that never returns."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from redis.exceptions import RedisError
from support import servers
from support.helpers import (
    FAST_DISPATCHER,
    FAST_WORKER,
    TIME_FACTOR,
    Runner,
    Runs,
    job_id_in,
    scaled,
    wait_for,
)
from support.ports import TestPorts
from support.procs import Proc

from shardq import Client, Job, JobRequest, WorkerSettings
from shardq.admin import slots
from shardq.cli import main as cli
from shardq.dev.demo import cli_command
from shardq.dev.devcluster import cluster_down, cluster_up, standalone_down, standalone_up
from shardq.inspector import Inspector
from shardq.store import keys


@pytest.fixture(scope="module")
def chaos_port(test_ports: TestPorts) -> int:
    return test_ports.chaos


@pytest.fixture(scope="module")
def chaos_url(chaos_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("chaos")
    url = cluster_up(chaos_port, root=root)
    try:
        yield url
    finally:
        cluster_down(chaos_port, root=root)


def primaries(url: str) -> list[redis.Redis]:
    c = redis.cluster.RedisCluster.from_url(url)
    try:
        return [redis.Redis(host=n.host, port=n.port) for n in c.get_primaries()]
    finally:
        c.close()


def produce(
    client: Client, queue: str, n: int, spread: float, ids: list[str], stop: threading.Event
) -> None:
    """Enqueue n jobs over `spread` seconds, retrying through redirects and failovers."""
    start = time.monotonic()
    for i in range(n):
        if stop.is_set():
            return
        while True:
            try:
                ids.append(client.enqueue(queue, "t", i, delay=0.3, job_id=f"j{i}"))
                break
            except RedisError:
                time.sleep(0.05)
        lag = start + spread * (i + 1) / n - time.monotonic()
        if lag > 0:
            time.sleep(lag)


def test_slot_migration_under_load(chaos_url: str, queue: str) -> None:
    """`shardq rebalance move-partition` (shardq.admin.slots) moves a partition's slot to another
    primary while producers, a dispatcher and a worker run: nothing lost, nothing run twice."""
    partitions = 4
    n = 1500
    client = Client.from_url(chaos_url)
    mover = Client.from_url(chaos_url)
    client.create_queue(queue, partitions)
    runs = Runs()
    ids: list[str] = []
    stop = threading.Event()
    nodes = primaries(chaos_url)
    pk = keys.partition_keys(queue, 0, partitions)
    slot = keys.slot_of(pk.due)
    owner_port = client.redis.nodes_manager.get_node_from_slot(slot).port  # type: ignore[union-attr]
    source = next(r for r in nodes if r.connection_pool.connection_kwargs["port"] == owner_port)
    target = next(r for r in nodes if r is not source)
    target_addr = f"127.0.0.1:{target.connection_pool.connection_kwargs['port']}"
    with Runner(chaos_url, queue, {"t": runs.add}):
        producer = threading.Thread(target=produce, args=(client, queue, n, 6.0, ids, stop))
        producer.start()
        try:
            time.sleep(2.0)
            plan = slots.prepare_move(mover, queue, 0, target_addr)
            assert plan.needed and not plan.in_progress and plan.keys_in_slot > 0
            result = slots.move(mover, plan)
            assert result.keys_moved > 0  # (counts can differ: an emptied zset is deleted)
            producer.join(60)
            wait_for(lambda: len(runs.count()) >= n, 60, "jobs lost across the migration")
        finally:
            stop.set()
            producer.join(10)
    counts = runs.count()
    assert len(counts) == n
    assert max(counts.values()) == 1, "a job ran twice across the migration"
    assert source.execute_command("CLUSTER COUNTKEYSINSLOT", slot) == 0
    assert target.execute_command("CLUSTER COUNTKEYSINSLOT", slot) > 0
    assert slots.prepare_move(mover, queue, 0, target_addr).needed is False
    client.close()
    mover.close()


REDIRECT_TYPES = {"MovedError", "AskError", "TryAgainError", "ClusterError"}


def test_a_slot_move_is_logged_as_redirects_not_loop_errors(
    chaos_url: str, queue: str, procs: list[Proc], tmp_path: Path
) -> None:
    """MOVED, ASK, TRYAGAIN and "TTL exhausted" are the normal signals of a slot move: a
    running ``shardq dispatcher run`` and ``shardq worker run`` (JSON logs, info level) log
    them as ``topology.redirect`` events at info level with the slot and its new node, never
    as ``loop.error`` or any other warning; every job still runs once."""
    partitions = 4
    client = Client.from_url(chaos_url)
    client.create_queue(queue, partitions)
    runlog = tmp_path / "runs"
    env = {"SHARDQ_BENCH_RUNLOG": str(runlog), "PYTHONPATH": str(HANDLERS)}
    base = ["--queue", queue, "--url", chaos_url]
    procs.append(Proc.dispatcher(chaos_url, queue, env=env))
    worker = cli_command("worker", "run", *base, "--handlers", "shardq_runlog:register")
    worker[worker.index("--log-level") + 1] = "INFO"
    procs.append(Proc(worker, env))
    ins = Inspector(client)
    wait_for(
        lambda: len(ins.members(queue)) == 2 and all(i.owner for i in ins.partitions(queue)),
        30,
        "the fleet did not start",
    )
    n = 1200
    now = time.time()
    ids = [
        r.job_id
        for r in client.enqueue_many(
            queue,
            [
                JobRequest("tick", None, job_id=job_id_in(i % partitions, partitions, f"m{i}"),
                           run_at=now + 0.5 + 5 * i / n)
                for i in range(n)
            ],
        )
    ]  # fmt: skip
    time.sleep(2.0)
    plan = slots.prepare_move(client, queue, 0, slots.primary_addresses(client)[0])
    target = next(a for a in slots.primary_addresses(client) if a != plan.source)
    assert slots.move(client, slots.prepare_move(client, queue, 0, target)).keys_moved > 0
    wanted = set(ids)
    wait_for(lambda: wanted <= {r[0] for r in read_runlog(runlog)}, 60, "jobs did not run")
    time.sleep(1.0)
    for proc in procs:
        proc.check_alive()
        proc.stop()
    runs = [r[0] for r in read_runlog(runlog)]
    assert len(runs) == len(set(runs)) == n, "a job ran twice (or not at all) across the move"
    records = [
        json.loads(line)
        for proc in procs
        for line in proc.log().splitlines()
        if line.startswith("{")
    ]
    loud = [
        r
        for r in records
        if r["level"] not in ("debug", "info")
        and (
            r.get("error_type") in REDIRECT_TYPES
            or any(t in str(r.get("error", "")) for t in REDIRECT_TYPES | {"TTL exhausted"})
        )
    ]
    assert not loud, f"redirects logged as warnings: {loud[:3]}"
    redirects = [r for r in records if r["event"] == "topology.redirect"]
    assert redirects, "the move met no redirect: nothing was checked"
    assert all(r["level"] == "info" for r in redirects), redirects
    slot = keys.slot_of(keys.partition_keys(queue, 0, partitions).due)
    moved = [r for r in redirects if r.get("redirect") in ("moved", "ask")]
    assert moved and all(r["slot"] == slot and r["node"] == target for r in moved), moved
    client.close()


def test_rebalance_nodes_suggests_moving_the_hot_partition_and_moves_it(
    chaos_url: str, queue: str
) -> None:
    """`shardq rebalance nodes` names the hot partition's primary and a cooler one;
    `--move-partition` prints its plan and changes nothing without --yes, moves with it."""
    partitions = 6
    client = Client.from_url(chaos_url)
    client.create_queue(queue, partitions)

    def node_of(p: int) -> str:
        slot = keys.slot_of(keys.partition_keys(queue, p, partitions).due)
        node = client.redis.nodes_manager.get_node_from_slot(slot)  # type: ignore[union-attr]
        return f"{node.host}:{node.port}"

    # Two partitions of one primary take all the load: moving one of them halves that
    # primary's rate (moving a lone hot partition would only move the hot spot).
    pair = [p for p in range(partitions) if node_of(p) == node_of(0)]
    assert len(pair) == 2, [node_of(p) for p in range(partitions)]
    stop = threading.Event()

    def load() -> None:
        i = 0
        while not stop.is_set():
            ids = [job_id_in(p, partitions, f"hot{i}-{k}") for p in pair for k in range(10)]
            client.enqueue_many(queue, [JobRequest("t", job_id=j, delay=3600) for j in ids])
            i += 1

    runner = CliRunner()
    producer = threading.Thread(target=load)
    producer.start()
    try:
        shown = runner.invoke(cli, ["rebalance", "nodes", "--queue", queue, "--url", chaos_url])
    finally:
        stop.set()
        producer.join(10)
    assert shown.exit_code == 0, shown.output
    source = node_of(0)
    assert "suggestion: move partition " in shown.output, shown.output
    hot = int(shown.output.split("suggestion: move partition ", 1)[1].split()[0])
    assert hot in pair and f"from {source} to " in shown.output
    target = shown.output.split(f" {hot} --to ", 1)[1].split()[0]
    assert target != source

    args = ["rebalance", "move-partition", "--queue", queue, str(hot), "--to", target]
    dry = runner.invoke(cli, [*args, "--url", chaos_url])
    assert dry.exit_code == 0 and "add --yes to do it" in dry.output, dry.output
    assert slots.prepare_move(client, queue, hot, target).source == source  # nothing moved
    done = runner.invoke(cli, [*args, "--yes", "--url", chaos_url])
    assert done.exit_code == 0 and f"now lives on {target}" in done.output, done.output
    assert slots.prepare_move(client, queue, hot, target).source == target
    assert client.get(queue, job_id_in(hot, partitions, "hot0-0")) is not None  # data came along
    client.close()


def test_a_move_that_stopped_half_way_is_finished_by_running_it_again(
    chaos_url: str, queue: str
) -> None:
    """A move interrupted after one of the partition's keys went over (the state in which the
    partition's scripts get TRYAGAIN) is reported as in progress and finished by the same move."""
    partitions = 4
    client = Client.from_url(chaos_url)
    client.create_queue(queue, partitions)
    ids = [
        r.job_id
        for r in client.enqueue_many(queue, [JobRequest("t", i, delay=3600) for i in range(200)])
    ]
    pk = keys.partition_keys(queue, 0, partitions)
    slot = keys.slot_of(pk.due)
    nodes = {r.connection_pool.connection_kwargs["port"]: r for r in primaries(chaos_url)}
    owner = client.redis.nodes_manager.get_node_from_slot(slot)  # type: ignore[union-attr]
    src = nodes[owner.port]
    dst_port = next(p for p in nodes if p != owner.port)
    dst = nodes[dst_port]
    src_id = src.execute_command("CLUSTER MYID").decode()
    dst_id = dst.execute_command("CLUSTER MYID").decode()
    dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src_id)
    src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
    src.execute_command("MIGRATE", "127.0.0.1", dst_port, pk.jobs, 0, 5000)  # one key, then "crash"

    target = f"127.0.0.1:{dst_port}"
    plan = slots.prepare_move(client, queue, 0, target)
    assert plan.in_progress and plan.needed, plan
    result = slots.move(client, plan)
    assert result.keys_moved > 0
    assert src.execute_command("CLUSTER COUNTKEYSINSLOT", slot) == 0
    assert slots.prepare_move(client, queue, 0, target).source == target
    assert all(client.get(queue, job_id) is not None for job_id in ids)
    client.close()


def test_wake_up_hints_follow_a_moved_slot(chaos_url: str, queue: str) -> None:
    """After a partition's slot moves, its hints reach the dispatcher and worker again at once:
    a job due 0.2 s after the move runs within 3 s.  The fallback polls and sweeps are 600 s
    apart, far beyond any (scaled) deadline: only a hint can wake them in time."""
    partitions = 4
    client = Client.from_url(chaos_url)
    client.create_queue(queue, partitions)
    runs = Runs()
    slow_fallback = {
        "dispatcher_settings": replace(FAST_DISPATCHER, max_sleep=600.0),
        "worker_settings": replace(FAST_WORKER, idle_poll=600.0, sweep_interval=600.0),
    }
    with Runner(chaos_url, queue, {"t": runs.add}, **slow_fallback):  # type: ignore[arg-type]
        before = client.enqueue(queue, "t", 0, job_id=job_id_in(0, partitions, "a"), delay=0.2)
        wait_for(lambda: before in runs.count(), 3, "hints did not work before the move")
        source = slots.prepare_move(client, queue, 0, slots.primary_addresses(client)[0]).source
        target = next(a for a in slots.primary_addresses(client) if a != source)
        slots.move(client, slots.prepare_move(client, queue, 0, target))
        after = client.enqueue(queue, "t", 1, job_id=job_id_in(0, partitions, "b"), delay=0.2)
        wait_for(lambda: after in runs.count(), 3, "no hint after the move: the job waited")
    client.close()


def test_slot_moves_refuse_bad_input_with_what_to_do(
    chaos_url: str, chaos_port: int, standalone_url: str, queue: str
) -> None:
    runner = CliRunner()
    with Client.from_url(chaos_url) as client:
        client.create_queue(queue, 4)
    # (exit 2: options that do not go together, a usage error; 1: what Redis says is wrong)
    q = ["--queue", queue]
    cases = [
        (["move-partition", *q, "0", "--to", "127.0.0.1:1"], chaos_url, 1, "is not a primary"),
        (
            ["move-partition", *q, "7", "--to", f"127.0.0.1:{chaos_port}"],
            chaos_url,
            1,
            "partitions 0-3",
        ),
        (["move-partition", *q, "0"], chaos_url, 2, "Missing option '--to'"),
        (["nodes", *q], standalone_url, 1, "single node"),
        # the old spelling's flags are checked as they were
        ([*q, "--to", f"127.0.0.1:{chaos_port}"], chaos_url, 2, "go together"),
        ([*q, "--nodes", "--even"], chaos_url, 2, "run them separately"),
    ]
    for args, url, code, message in cases:
        out = runner.invoke(cli, ["rebalance", *args, "--url", url])
        assert out.exit_code == code and message in out.output, (args, out.output)


# One primary stalled while the others must keep flowing ------------------------------------

HANDLERS = Path(__file__).resolve().parents[2] / "bench" / "handlers"
STALLS = ("all", "write", "sleep")
# Lateness bound for jobs of the primaries that are NOT stalled (BRIEF §2: "tens of ms").
OTHERS_P99_MS = 100.0


def stall(node: redis.Redis, mode: str, seconds: float) -> None:
    """Stall one primary (BRIEF §7: three different ways, isolation must hold for each):
    ``all`` = CLIENT PAUSE ALL (every command waits, connections accepted), ``write`` = CLIENT
    PAUSE WRITE (reads served, writes and every FCALL wait), ``sleep`` = DEBUG SLEEP (the whole
    node blocked, nothing answers, not even the cluster bus: its replica takes over)."""
    kwargs = node.connection_pool.connection_kwargs
    if mode == "sleep":

        def sleep() -> None:
            with redis.Redis(host=kwargs["host"], port=kwargs["port"]) as r:
                r.execute_command("DEBUG", "SLEEP", seconds)

        threading.Thread(target=sleep, daemon=True).start()
        return
    node.execute_command("CLIENT", "PAUSE", round(seconds * 1000), mode.upper())


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else 0.0


def read_runlog(path: Path) -> list[tuple[str, float, float, str]]:
    """(job id, start epoch s, lateness ms on the Redis clock, "attempt@pid") per handler
    start (the format of bench/handlers/shardq_runlog.py)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 5:
            out.append((parts[0], float(parts[2]), float(parts[3]), f"{parts[1]}@{parts[4]}"))
    return out


def wait_cluster_settled(url: str) -> None:
    """Every slot served, every node agreeing the cluster is ok, each primary with a replica
    (a DEBUG SLEEP failover turns the sleeper into a replica once it wakes)."""

    def settled() -> bool:
        try:
            c = redis.cluster.RedisCluster.from_url(url)
        except Exception:
            return False
        try:
            nodes = [redis.Redis(host=n.host, port=n.port) for n in c.get_nodes()]
            if any(n.cluster("info")["cluster_state"] != "ok" for n in nodes):
                return False
            masters = [n for n in nodes if n.info("replication")["role"] == "master"]
            return all(n.info("replication")["connected_slaves"] >= 1 for n in masters)
        except Exception:
            return False
        finally:
            c.close()

    wait_for(settled, 60, "the cluster did not settle after the stall")


def stalled_primaries_isolation(
    url: str, queue: str, procs: list[Proc], tmp_path: Path, stall_s: float
) -> list[dict[str, Any]]:
    """Two dispatchers and two workers (``shardq ... run``, default settings) serve jobs due
    steadily on every primary; one primary after another is stalled for ``stall_s`` seconds,
    once per mode of :data:`STALLS`.  Returns per stall: how late the jobs of the *other*
    primaries that came due during it ran.  Every job must run exactly once."""
    try:
        return _stall_each_primary(url, queue, procs, tmp_path, stall_s)
    finally:
        for proc in procs:
            proc.stop()
        wait_cluster_settled(url)  # for the tests after this one


def _stall_each_primary(
    url: str, queue: str, procs: list[Proc], tmp_path: Path, stall_s: float
) -> list[dict[str, Any]]:
    partitions, rate, gap = 24, 150, 2.5
    client = Client.from_url(url)
    client.create_queue(queue, partitions)
    runlog = tmp_path / "runs"
    env = {"SHARDQ_BENCH_RUNLOG": str(runlog), "PYTHONPATH": str(HANDLERS)}
    base = ["--queue", queue, "--url", url]
    for _ in range(2):
        procs.append(Proc.dispatcher(url, queue, env=env))
        worker = ["worker", "run", *base, "--handlers", "shardq_runlog:register"]
        procs.append(Proc(cli_command(*worker), env))
    ins = Inspector(client)
    wait_for(
        lambda: (
            sorted(m.role for m in ins.members(queue)) == ["dispatcher"] * 2 + ["worker"] * 2
            and all(i.owner for i in ins.partitions(queue))
        ),
        30,
        "the fleet did not start",
    )
    manager = client.redis.nodes_manager  # type: ignore[union-attr]
    node_of = {
        p: manager.get_node_from_slot(keys.slot_of(pk.due)).name
        for p, pk in enumerate(keys.all_partition_keys(queue, partitions))
    }
    nodes = {n.name: n for n in client.redis.get_primaries()}  # type: ignore[union-attr]
    assert len({*node_of.values()}) == 3, f"the partitions should span the primaries: {node_of}"
    # Each stall hits another primary: first the one holding the queue's fleet keys
    # (membership, owners, meta: every process's heartbeats and lease rounds go there), then
    # the others, whose stall must not hold up heartbeats and lease rounds for healthy ones.
    fleet_node = manager.get_node_from_slot(keys.slot_of(keys.workers_key(queue))).name
    targets = [fleet_node, *sorted({*node_of.values()} - {fleet_node})]
    # Periodic schedules too, two on each primary, ticking every second: the dispatchers fire
    # them from loops of their own, which must not wait on a stalled primary either.
    ticking: dict[str, str] = {}
    for name in (f"tick-{i}" for i in range(1000)):
        node = node_of[keys.partition_for(name, partitions)]
        if list(ticking.values()).count(node) < 2:
            ticking[name] = node
    assert len(ticking) == 6, ticking
    for name in ticking:
        client.schedules.add(queue, name, "tick", None, every=1.0)
    lead = 2.0
    span = lead + len(STALLS) * (stall_s + gap)
    t0 = time.time() + 1.0
    n = int(rate * span)
    ids = [
        r.job_id
        for r in client.enqueue_many(
            queue, [JobRequest("tick", None, run_at=t0 + span * i / n) for i in range(n)]
        )
    ]
    windows: list[tuple[str, str, float, float]] = []
    for i, mode in enumerate(STALLS):
        target = targets[i % len(targets)]
        at = t0 + lead + i * (stall_s + gap)
        while time.time() < at:
            time.sleep(0.005)
        r = redis.Redis(host=nodes[target].host, port=nodes[target].port)
        started = time.time()
        stall(r, mode, stall_s)
        r.close()
        windows.append((mode, target, started, started + stall_s))
    wanted = set(ids)
    wait_for(lambda: wanted <= {r[0] for r in read_runlog(runlog)}, 90, "jobs did not run")
    time.sleep(1.0)  # a job run twice would show up now
    runs = read_runlog(runlog)
    for proc in procs:
        proc.check_alive()
    figures = []
    for mode, target, start, end in windows:
        others = sorted(
            (late, round(at - late / 1000 - start, 2))  # (lateness, due s into the stall)
            for job_id, at, late, _ in runs
            if start <= at - late / 1000 <= end
            and node_of[keys.partition_for(job_id, partitions)] != target
        )
        late_ms = [late for late, _ in others]
        # A tick's job is due when it is fired: its tick time is in its id
        # (sq-sched:<name>@<tick ms>), so a tick near the end of the window that fired a
        # little late (a busy machine) still counts as the stall's, and its lateness is from
        # the tick, the ticker's delay included.
        tick_ms = sorted(
            at * 1000 - tick
            for job_id, at, _, _ in runs
            if job_id.startswith(keys.SCHEDULE_JOB_PREFIX)
            and start <= (tick := int(job_id.rpartition("@")[2])) / 1000 <= end
            and node_of[keys.partition_for(job_id, partitions)] != target
        )
        figures.append(
            {"mode": mode, "n": len(others), "p99": p99(late_ms), "max": late_ms[-1],
             "worst_due_s_into_stall": others[-1][1], "ticks": len(tick_ms),
             "ticks_max": round(tick_ms[-1], 1) if tick_ms else None}
        )  # fmt: skip
    print(f"other primaries' lateness during each stall: {figures}")
    for mode, target, start, end in windows:
        # Isolation, whatever the machine's speed: the other primaries' jobs due in the first
        # half of a stall started before it ended (held behind the stalled primary, they would
        # have started after).
        held = [
            (job_id, round(at - end, 2))
            for job_id, at, late, _ in runs
            if start <= at - late / 1000 <= start + stall_s / 2
            and node_of[keys.partition_for(job_id, partitions)] != target
            and at > end
        ]
        assert not held, f"{mode}: jobs of other primaries waited for the stall: {held[:5]}"
    for f in figures:
        assert f["n"] > rate * stall_s / 3, f
        # Every tick of the 4 schedules on the other primaries fired during the stall (a tick
        # fired late is a misfire: only the latest of those runs).
        assert f["ticks"] >= 4 * int(stall_s), f
    starts: dict[str, list[tuple[float, str]]] = {}
    for job_id, at, _, by in runs:
        starts.setdefault(job_id, []).append((round(at - t0, 2), by))
    assert wanted <= set(starts), f"{len(wanted - set(starts))} jobs lost"
    ticks = set(starts) - wanted
    assert all(j.startswith(keys.SCHEDULE_JOB_PREFIX) for j in ticks), ticks - wanted
    twice = {
        j: (node_of[keys.partition_for(j, partitions)], ats)
        for j, ats in starts.items()
        if len(ats) > 1
    }
    # A primary asleep past cluster-node-timeout is replaced by its replica.  Woken, it serves
    # the calls that waited for it for a moment before it learns so (Redis' failover window:
    # what it wrote then is discarded when it turns replica), so jobs of its own partitions
    # may run twice, as across any failover (at least once).  No other job may.
    slept = next(t for m, t, _, _ in windows if m == "sleep")
    host, port = slept.rsplit(":", 1)
    with redis.Redis(host=host, port=int(port)) as r:
        failed_over = r.info("replication")["role"] != "master"
    allowed = {j for j, (node, _) in twice.items() if failed_over and node == slept}
    wrong = {j: twice[j] for j in set(twice) - allowed}
    stalls = [(m, t, round(a - t0, 2)) for m, t, a, _ in windows]
    assert not wrong, f"{len(wrong)} jobs ran twice: {list(wrong.items())[:5]}; stalls {stalls}"
    print(f"{len(allowed)} jobs of the primary that failed over ran twice (its failover window)")
    client.close()
    return figures


def assert_isolated(figures: list[dict[str, Any]]) -> None:
    bound = OTHERS_P99_MS * TIME_FACTOR
    late = [f for f in figures if f["p99"] > bound]
    assert not late, f"other primaries' jobs ran late (p99 > {bound} ms): {late}"


def test_a_stalled_primary_does_not_delay_the_others(
    chaos_url: str, queue: str, procs: list[Proc], tmp_path: Path
) -> None:
    """CI version: each way of stalling a primary for 3 s, one after another."""
    assert_isolated(stalled_primaries_isolation(chaos_url, queue, procs, tmp_path, 3.0))


@pytest.mark.slow
def test_a_primary_stalled_10_s_does_not_delay_the_others(
    chaos_url: str, queue: str, procs: list[Proc], tmp_path: Path
) -> None:
    """Each way of stalling a primary for 10 s (longer than every timeout: socket, membership,
    cluster-node-timeout), one after another."""
    assert_isolated(stalled_primaries_isolation(chaos_url, queue, procs, tmp_path, 10.0))


def test_rounds_to_a_paused_primary_hold_no_concurrency(chaos_url: str, queue: str) -> None:
    """A worker whose handlers take a while (0.1 s, about half its concurrency busy): while one
    primary is write-paused, the fetch rounds waiting on it give their reserved room back, so
    the other primaries' jobs still find handlers (the stuck rounds held two thirds of it: the
    others' jobs queued up, p99 0.7 s late); the paused primary's jobs all run once it answers."""
    import asyncio

    partitions, concurrency, rate, pause_s = 12, 12, 60, 3.0
    client = Client.from_url(chaos_url)
    client.create_queue(queue, partitions)
    late_ms: dict[str, float] = {}
    running = {"now": 0, "most": 0}

    async def hold(job: Job) -> None:
        late_ms[job.id] = job.redis_now_ms(time.monotonic()) - (job.due_ms or 0)
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
        try:
            await asyncio.sleep(0.1)
        finally:
            running["now"] -= 1

    node_of = {
        p: client.redis.nodes_manager.get_node_from_slot(keys.slot_of(pk.due)).name  # type: ignore[union-attr]
        for p, pk in enumerate(keys.all_partition_keys(queue, partitions))
    }
    paused = node_of[0]
    settings = replace(FAST_WORKER, concurrency=concurrency, visibility_timeout=30.0)
    with Runner(chaos_url, queue, {"hold": hold}, worker_settings=settings):
        span = pause_s + 3.0
        t0 = time.time() + 1.0
        n = int(rate * span)
        ids = [
            r.job_id
            for r in client.enqueue_many(
                queue, [JobRequest("hold", None, run_at=t0 + span * i / n) for i in range(n)]
            )
        ]
        while time.time() < t0 + 1.0:
            time.sleep(0.005)
        host, port = paused.rsplit(":", 1)
        started = time.time()
        with redis.Redis(host=host, port=int(port)) as r:
            r.execute_command("CLIENT", "PAUSE", round(pause_s * 1000), "WRITE")
        wait_for(lambda: set(ids) <= set(late_ms), 60, "jobs did not run")
    client.close()
    others = sorted(
        late
        for i, job_id in enumerate(ids)
        if started <= t0 + span * i / n <= started + pause_s
        and node_of[keys.partition_for(job_id, partitions)] != paused
        for late in [late_ms[job_id]]
    )
    assert len(others) > rate * pause_s / 2, len(others)
    print(f"other primaries' lateness: p99 {p99(others):.1f} ms, max {others[-1]:.1f} ms")
    # Whatever the machine's speed: those due in the pause's first half started before it
    # ended (rounds stuck on the paused primary holding the room would have kept them waiting).
    held = [
        job_id
        for i, job_id in enumerate(ids)
        if started <= t0 + span * i / n <= started + pause_s / 2
        and node_of[keys.partition_for(job_id, partitions)] != paused
        and t0 + span * i / n + late_ms[job_id] / 1000 > started + pause_s
    ]
    assert not held, f"{len(held)} jobs of other primaries waited for the pause: {held[:5]}"
    bound = OTHERS_P99_MS * TIME_FACTOR
    assert p99(others) <= bound, f"p99 {p99(others):.1f} ms, max {others[-1]:.1f} ms"
    # Late rounds' jobs wait for handlers (the overflow): the limit holds throughout.
    assert running["most"] <= concurrency, running


def test_calls_spanning_primaries_do_not_wait_for_a_paused_one(chaos_url: str, queue: str) -> None:
    """PerPrimaryCalls (lease rounds, touches, reclaims): with one primary write-paused, the
    others' replies are handled at once, the round goes on after its wait, the paused primary's
    batch is handled when it answers, and meanwhile it gets no new batch."""
    import asyncio

    from shardq.config import RedisSettings
    from shardq.connection import connect_async
    from shardq.runtime.pernode import PerPrimaryCalls
    from shardq.store import fleet
    from shardq.store.transport import AsyncTransport

    partitions = 24
    with Client.from_url(chaos_url) as client:
        client.create_queue(queue, partitions)
    pks = keys.all_partition_keys(queue, partitions)

    async def main() -> None:
        redis_client = await connect_async(RedisSettings.from_url(chaos_url))
        transport = AsyncTransport(redis_client)
        calls = PerPrimaryCalls(transport, "test")
        node_of = {p: transport.node_name(pk.lease) for p, pk in enumerate(pks)}
        paused = node_of[0]
        ops = [fleet.lease_renew(pk, "no-such-token", 1000) for pk in pks]
        handled: dict[str, float] = {}

        def handle(indexes: list[int], results: list[object]) -> None:
            assert all(r is False for r in results), results  # no lease: nothing renewed
            handled[node_of[indexes[0]]] = time.monotonic()

        host, port = paused.rsplit(":", 1)
        # The pause outlasts the 0.3 s wait by far at any time factor: a round that waited
        # for the paused primary would have handled it by the time it returned.
        pause = scaled(1.5)
        with redis.Redis(host=host, port=int(port)) as r:
            r.execute_command("CLIENT", "PAUSE", round(pause * 1000), "WRITE")
        try:
            started = time.monotonic()
            report = await calls.run(ops, handle, 0.3)
            took = time.monotonic() - started
            assert report.late == 1 and not report.errors, report
            assert set(handled) == set(node_of.values()) - {paused}  # returned without it
            assert took < scaled(1.0), took  # ... and soon after its wait
            assert calls.pending == {paused}
            again = await calls.run(ops, handle, 0.3)
            assert sorted(again.skipped) == [p for p in range(partitions) if node_of[p] == paused]
            # the pause ends: the paused primary's batch is handled then, not before
            deadline = time.monotonic() + pause + scaled(5)
            while calls.pending and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert calls.pending == set()
            assert paused in handled and handled[paused] - started >= pause - 0.2, handled
        finally:
            await calls.close()
            await transport.aclose()
            await redis_client.aclose()

    asyncio.run(main())


def test_new_connections_do_not_read_package_metadata(
    cluster_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a stall every process reconnects to that primary at once, and opens connections to
    the replica that took over: redis-py looks its own version up in the installed package
    metadata for each new connection unless it is told (a sys.path scan that blocked the
    dispatcher's event loop 40 ms, the other primaries' jobs waiting meanwhile)."""
    import asyncio
    import importlib.metadata

    import redis.utils

    from shardq.config import RedisSettings
    from shardq.connection import connect, connect_async, node_client_async

    lookups: list[str] = []
    real = importlib.metadata.version

    def version(name: str) -> str:
        lookups.append(name)
        return real(name)

    monkeypatch.setattr(redis.utils.metadata, "version", version)

    async def fresh_connections() -> None:
        client = await connect_async(RedisSettings.from_url(cluster_url))
        try:
            for node in client.get_primaries():  # type: ignore[union-attr]
                per_node = node_client_async(node)
                assert await per_node.ping()
                await per_node.aclose()
        finally:
            await client.aclose()

    asyncio.run(fresh_connections())
    sync = connect(RedisSettings.from_url(cluster_url))
    assert sync.ping()
    sync.close()
    assert lookups == [], f"{len(lookups)} package metadata lookups for new connections"


def test_primary_killed_replica_promoted(chaos_url: str, chaos_port: int, queue: str) -> None:
    """SIGKILL the primary of a partition mid-run: its replica takes over in a few seconds,
    dispatcher and worker keep serving the other partitions meanwhile and then that one too.
    Jobs enqueued durably before the kill are never lost (at least once: some may run twice)."""
    partitions = 8
    n = 2000
    client = Client.from_url(chaos_url)
    client.create_queue(queue, partitions)
    now = time.time()
    client.enqueue_many(
        queue, [JobRequest("t", i, run_at=now + 1 + 6 * i / n) for i in range(n)], durable=True
    )
    pk = keys.partition_keys(queue, 0, partitions)
    victim_port = int(
        client.redis.nodes_manager.get_node_from_slot(  # type: ignore[union-attr]
            keys.slot_of(pk.due)
        ).port
    )
    victim_pid = int(redis.Redis(port=victim_port).info("server")["process_id"])
    runs = Runs()
    with Runner(chaos_url, queue, {"t": runs.add}):
        time.sleep(2.0)
        os.kill(victim_pid, signal.SIGKILL)
        wait_for(lambda: len(runs.count()) >= n, 90, "jobs lost across the failover")
    client.close()
    assert len(runs.count()) == n
    fresh = redis.cluster.RedisCluster.from_url(
        chaos_url.replace(
            str(victim_port), str(chaos_port + (1 if victim_port == chaos_port else 0))
        )
    )
    try:
        new_port = fresh.nodes_manager.get_node_from_slot(keys.slot_of(pk.due)).port
    finally:
        fresh.close()
    assert new_port != victim_port, "no failover happened"


def test_redis_restart_with_persistence(tmp_path: Path, test_ports: TestPorts, queue: str) -> None:
    aof_port = test_ports.aof
    url = standalone_up(aof_port, root=tmp_path, appendonly=True)
    try:
        client = Client.from_url(url)
        client.create_queue(queue, 4)
        ids = [
            r.job_id
            for r in client.enqueue_many(queue, [JobRequest("t", i, delay=1) for i in range(200)])
        ]
        r = redis.Redis(port=aof_port)
        pid = int(r.info("server")["process_id"])
        r.execute_command("BGREWRITEAOF")
        wait_for(
            lambda: (
                r.info("persistence")["aof_rewrite_in_progress"] == 0
                and r.info("persistence")["aof_rewrite_scheduled"] == 0
            ),
            20,
            "the AOF rewrite did not finish",
        )
        assert r.info("persistence")["aof_last_bgrewrite_status"] == "ok"
        os.kill(pid, signal.SIGKILL)  # appendfsync everysec: at most ~1 s of writes at risk
        client.close()
        wait_for(
            lambda: (
                not os.path.exists(f"/proc/{pid}")
                or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
            ),
            10,
            "not dead",
        )
        # Start the same server on the same files (standalone_up would start afresh).
        (conf,) = tmp_path.rglob("redis.conf")
        subprocess.run([servers.server(), str(conf)], check=True, timeout=30)
        wait_for(lambda: _pings(aof_port), 20, "restarted redis did not answer")
        runs = Runs()
        with Runner(url, queue, {"t": runs.add}):
            wait_for(lambda: len(runs.count()) >= 200, 30, "jobs lost across the restart")
        assert set(runs.count()) == set(ids)
    finally:
        standalone_down(aof_port, root=tmp_path)


def _pings(port: int) -> bool:
    try:
        return bool(redis.Redis(port=port).ping())
    except RedisError:
        return False


def test_producer_clock_skew_does_not_move_due_times(
    cluster_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delay is applied on the Redis clock: a producer whose clock is an hour ahead still
    gets its job run one second after enqueue, and the due time is the Redis clock's."""
    client = Client.from_url(cluster_url)
    client.create_queue(queue, 4)

    def redis_ms() -> int:
        seconds, micros = client.redis.time()  # type: ignore[misc]
        return int(seconds) * 1000 + int(micros) // 1000

    real_time = time.time
    before_ms = redis_ms()
    monkeypatch.setattr(time, "time", lambda: real_time() + 3600)
    job_id = client.enqueue(queue, "t", None, delay=1.0)
    monkeypatch.setattr(time, "time", real_time)
    after_ms = redis_ms()
    info = client.get(queue, job_id)
    # one second after the Redis clock read the call, however long the call took
    assert info is not None and info.due_ms is not None
    assert before_ms + 1000 <= info.due_ms <= after_ms + 1000
    runs = Runs()
    with Runner(cluster_url, queue, {"t": runs.add}):
        wait_for(lambda: len(runs.jobs) == 1, 10, "skewed job did not run")
    client.close()


def test_handler_that_never_returns_is_retried(cluster_url: str, queue: str) -> None:
    client = Client.from_url(cluster_url)
    client.create_queue(queue, 2)
    attempts: list[int] = []

    async def hang(job: object) -> None:
        attempts.append(1)
        if len(attempts) == 1:
            import asyncio

            await asyncio.sleep(3600)

    settings = WorkerSettings(
        visibility_timeout=FAST_WORKER.visibility_timeout,
        heartbeat_interval=FAST_WORKER.heartbeat_interval,
        reclaim_interval=FAST_WORKER.reclaim_interval,
        idle_poll=FAST_WORKER.idle_poll,
        sweep_interval=FAST_WORKER.sweep_interval,
        membership_timeout=FAST_WORKER.membership_timeout,
        shutdown_grace=FAST_WORKER.shutdown_grace,
        handler_timeout=1.0,
    )
    from shardq import Backoff

    job_id = client.enqueue(queue, "t", None, backoff=Backoff("fixed", 0.1))
    with Runner(
        cluster_url,
        queue,
        {"t": hang},
        worker_settings=settings,
        dispatcher_settings=FAST_DISPATCHER,
    ):
        wait_for(lambda: len(attempts) >= 2, 15, "hung handler was not retried")
        wait_for(lambda: client.get(queue, job_id) is None, 10, "retry did not complete")
    client.close()
