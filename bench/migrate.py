"""How long moving one partition's slot between primaries blocks them.

MIGRATE moves a whole key at once (serialise on the source, RESTORE on the target, the source
waiting for the target's reply), so the pause grows with the partition's size.  This fills a
one-partition queue with N waiting jobs, moves its slot to another primary with the standard
IMPORTING / MIGRATING / MIGRATE ... KEYS / SETSLOT NODE sequence, and reports the MIGRATE call's
duration, the longest PING round trip another client saw on the source meanwhile, and the bytes
moved (the sum of DUMP sizes).  The move is shardq's own (``shardq.admin.slots``, what ``shardq
rebalance move-partition`` runs).  The empty slot is then handed back the same way.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import redis as redis_lib

from bench.common import delete_queue, fresh_queue
from shardq import JobRequest
from shardq.admin import slots
from shardq.client import Client
from shardq.store import keys


def _node(host: str, port: int) -> redis_lib.Redis:
    return redis_lib.Redis(host=host, port=port, socket_timeout=120)


class Prober:
    """PINGs a node from a thread and keeps the longest round trip."""

    def __init__(self, host: str, port: int) -> None:
        self.node = _node(host, port)
        self.worst = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            self.node.ping()
            self.worst = max(self.worst, time.perf_counter() - t)
            time.sleep(0.0005)

    def start(self) -> None:
        self._thread.start()
        time.sleep(0.2)
        self.worst = 0.0  # forget connection set-up

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        self.node.close()
        return self.worst


def _settled(nodes: list[redis_lib.Redis], slot: int, owner_port: int) -> bool:
    for node in nodes:
        for start, end, primary, *_ in node.execute_command("CLUSTER SLOTS"):
            if start <= slot <= end and int(primary[1]) != owner_port:
                return False
    return True


def migrate_pause(url: str, sizes: list[int]) -> list[dict[str, Any]]:
    rows = []
    client = Client(url)
    cluster = client.redis
    if not hasattr(cluster, "get_primaries"):
        client.close()
        return [{"skipped": "not a cluster"}]
    try:
        for n in sizes:
            queue = fresh_queue(client, "bench-mig", 1)
            pk = keys.partition_keys(queue, 0, 1)
            slot = keys.slot_of(pk.due)
            try:
                for start in range(0, n, 10_000):
                    m = min(10_000, n - start)
                    client.enqueue_many(
                        queue, [JobRequest("bench", "x" * 20, delay=3600) for _ in range(m)]
                    )
                owner = cluster.nodes_manager.get_node_from_slot(slot)  # type: ignore[union-attr]
                prim = cluster.get_primaries()  # type: ignore[union-attr]
                target = next(p for p in prim if p.name != owner.name)
                src, dst = _node(owner.host, owner.port), _node(target.host, target.port)
                others = [
                    _node(p.host, p.port) for p in prim if p.name not in (owner.name, target.name)
                ]
                names = src.execute_command("CLUSTER GETKEYSINSLOT", slot, 1000)
                dumped = sum(len(src.dump(k) or b"") for k in names)
                # a second client pings the source throughout: the longest reply it waits is
                # the pause callers of that primary see
                probe = Prober(owner.host, owner.port)
                probe.start()
                target_addr = f"{target.host}:{target.port}"
                took = slots.move(client, slots.prepare_move(client, queue, 0, target_addr))
                took_s = took.migrate_seconds
                time.sleep(0.05)
                worst = probe.stop()
                rows.append(
                    {
                        "jobs_in_partition": n,
                        "keys": len(names),
                        "bytes_moved": dumped,
                        "bytes_per_job": round(dumped / n, 1),
                        "migrate_ms": round(took_s * 1000, 1),
                        "source_max_ping_ms": round(worst * 1000, 1),
                        "mb_per_s": round(dumped / 1e6 / max(took_s, 1e-9), 1),
                    }
                )
                # empty the slot, then hand it back the same way
                for k in names:
                    dst.delete(k)
                slots.move(
                    client, slots.prepare_move(client, queue, 0, f"{owner.host}:{owner.port}")
                )
                deadline = time.monotonic() + 20
                all_nodes = [src, dst, *others]
                while not _settled(all_nodes, slot, owner.port) and time.monotonic() < deadline:
                    time.sleep(0.1)
                cluster.nodes_manager.initialize()  # type: ignore[union-attr]
                for node in all_nodes:
                    node.close()
            finally:
                delete_queue(client.redis, queue, 1)
    finally:
        client.close()
    return rows
