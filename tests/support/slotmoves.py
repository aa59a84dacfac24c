"""Slot moves the tests make by hand: a queue's partition left half-moved, as a mover killed
between MIGRATING and SETSLOT NODE leaves it."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from shardq import Client
from shardq.admin import slots
from shardq.store import keys


@dataclass(frozen=True)
class HalfMove:
    slot: int
    source: str  # "host:port"
    target: str


def half_move(client: Client, queue: str, partition: int, partitions: int) -> HalfMove:
    """Partition ``partition``'s slot set IMPORTING on another primary and MIGRATING on its own,
    with its jobs hash already MIGRATEd and its other keys still on the source."""
    pk = keys.partition_keys(queue, partition, partitions)
    slot = keys.slot_of(pk.due)
    primaries = slots.primary_addresses(client)
    source = slots.prepare_move(client, queue, partition, primaries[0]).source
    target = next(a for a in primaries if a != source)
    src = redis.Redis(host="127.0.0.1", port=int(source.rsplit(":", 1)[1]))
    dst = redis.Redis(host="127.0.0.1", port=int(target.rsplit(":", 1)[1]))
    try:
        src_id = src.execute_command("CLUSTER MYID").decode()
        dst_id = dst.execute_command("CLUSTER MYID").decode()
        dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
        port = int(target.rsplit(":", 1)[1])
        src.execute_command("MIGRATE", "127.0.0.1", port, pk.jobs, 0, 5000)
    finally:
        src.close()
        dst.close()
    return HalfMove(slot, source, target)
