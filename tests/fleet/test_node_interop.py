"""A Node producer (clients/node) feeding Python dispatchers and workers through a killed
primary and a moved partition, on a fresh cluster: every job the Node client was told is
stored runs exactly once (lost only within the killed primary's replication window, as for the
Python producers of test_failover), none runs that it was not told of; and jobs the Python
client enqueues are read back by the Node client by id, whatever node now holds them."""

from __future__ import annotations

import json
import random
import subprocess
import threading
import time
from pathlib import Path

import pytest
from support.fresh import FreshCluster, Ledger, check, drain, failover_reruns, kill_primary
from support.helpers import Runner, Runs, job_id_in, wait_for
from support.nodeclient import built_node_client, driver_command

from shardq import Client
from shardq.admin import slots as slot_moves
from shardq.dev.devcluster import restart_node
from shardq.store import keys
from wire import runner

PARTITIONS = 12
PRODUCER = Path(__file__).resolve().parents[1] / "support" / "node_producer.js"


@pytest.fixture(scope="module")
def node_client() -> Path:
    return built_node_client()


def read_producer(proc: subprocess.Popen[str], ledger: Ledger, done: threading.Event) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        event = json.loads(line)
        if "stored" in event:
            # The call's start on this process's monotonic clock (the producer says when, in
            # epoch ms): only a call begun before a kill can have been lost with the primary.
            started = time.monotonic() - (time.time() - event["started_ms"] / 1000)
            ledger.add(event["stored"], started=started)
        elif "error" in event:
            ledger.errors.append(f"node: {event['error']}: {event['message']}")
    done.set()


def test_node_producer_rides_out_a_killed_primary_and_a_moved_partition(
    fresh: FreshCluster, queue: str, node_client: Path
) -> None:
    client = Client.from_url(fresh.url)
    client.create_queue(queue, PARTITIONS)
    ledger, runs, done = Ledger(), Runs(), threading.Event()
    victim = fresh.primary_port(client, keys.partition_keys(queue, 0, PARTITIONS).due)
    proc = subprocess.Popen(
        ["node", str(PRODUCER), fresh.url, queue],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    reader = threading.Thread(target=read_producer, args=(proc, ledger, done), daemon=True)
    try:
        with Runner(fresh.url, queue, {"t": runs.add}):
            reader.start()
            wait_for(lambda: ledger.calls > 20, 30, "the Node producer stored nothing")
            time.sleep(random.uniform(0.5, 2.0))
            kill = kill_primary(fresh, client, victim, queue, [(0, PARTITIONS)])
            wait_for(
                lambda: (
                    fresh.primary_port(client, keys.partition_keys(queue, 0, PARTITIONS).due)
                    != victim
                ),
                30,
                "no failover",
            )
            failed_over_at = time.monotonic()
            calls = ledger.calls
            wait_for(lambda: ledger.calls > calls + 20, 30, "the Node producer stalled")
            restart_node(fresh.base, victim, root=fresh.root)  # back as a replica
            time.sleep(random.uniform(0.5, 1.5))
            addresses = slot_moves.primary_addresses(client)
            source = slot_moves.prepare_move(client, queue, 1, addresses[0]).source
            target = next(a for a in addresses if a != source)
            moved = slot_moves.move(client, slot_moves.prepare_move(client, queue, 1, target))
            assert moved.keys_moved > 0
            moved_at = time.monotonic()
            calls = ledger.calls
            wait_for(lambda: ledger.calls > calls + 20, 30, "the Node producer stalled")
            assert proc.stdin is not None
            proc.stdin.close()  # the producer finishes its call and stops
            assert done.wait(60), "the Node producer did not stop"
            assert proc.wait(30) == 0
            drain(client, queue, runs)
        figures = check(ledger, runs, kill)
        # At least once: a job whose delivery or ack the killed primary took but never
        # replicated runs again after the failover (README Guarantees); any other second run
        # is a duplicate.
        allowed, other = failover_reruns(runs, kill, failed_over_at)
        assert not other, (
            f"{len(other)} ran again beyond the failover (failed over at "
            f"{failed_over_at - kill.before:+.3f} s, partition 1 moved at "
            f"{moved_at - kill.before:+.3f} s): {other[:5]}"
        )
        figures["ran_again_in_failover"] = allowed
        print(f"node producer, killed primary and moved partition: {figures}")

        # The other way: Python enqueues, Node reads back by id (partition 1 moved, 0 failed over).
        ids = [job_id_in(p, PARTITIONS, f"py{p}") for p in (0, 1, 2)]
        for job_id in ids:
            client.enqueue(queue, "t", {"from": "python"}, job_id=job_id, delay=600)
        driver = runner.SubprocessDriver(driver_command(node_client))
        try:
            for job_id in ids:
                info = driver.run(
                    fresh.url,
                    {"name": queue, "partitions": PARTITIONS},
                    {"op": "get", "job_id": job_id},
                )
                assert info["state"] == "scheduled" and info["payload"] == {"from": "python"}
                assert info["id"] == job_id
        finally:
            driver.close()
    finally:
        if proc.poll() is None:
            proc.kill()
        client.close()
