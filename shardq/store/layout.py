"""Where a queue's partitions live now (:class:`Layout`): the generation new jobs go to and,
while a resize runs, the one it empties and the one it makes; a queue's stored meta says which
(:meth:`shardq.store.meta.QueueMeta.key_layout`)."""

from __future__ import annotations

from dataclasses import dataclass

from shardq.store.keys import PartitionKeys, all_partition_keys, partition_keys
from shardq.store.partitioning import partition_for


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a queue's partitions live: the generation new jobs go to (``partitions`` of
    generation ``generation``) and, while a resize runs, the one it empties (``draining``:
    ``(generation, partitions)``).  A queue never resized is generation 0 alone.

    Routing (:meth:`route`) always picks the active generation; a job already stored is in the
    draining generation or the active one (:meth:`homes`: old first, since a resize only moves
    jobs old -> new); the fleet serves both (:meth:`fleet`), and ``coming``, the generation a
    resize has made and not yet switched to: the fleet takes it up before producers route to
    it, so no job waits in a partition nobody serves."""

    queue: str
    partitions: int
    generation: int = 0
    draining: tuple[int, int] | None = None
    coming: tuple[int, int] | None = None

    def pk(self, partition: int) -> PartitionKeys:
        """Partition ``partition`` of the active generation."""
        return partition_keys(self.queue, partition, self.partitions, self.generation)

    def active(self) -> list[PartitionKeys]:
        return all_partition_keys(self.queue, self.partitions, self.generation)

    def old(self) -> list[PartitionKeys]:
        """The draining generation's partitions (none when no resize runs)."""
        if self.draining is None:
            return []
        generation, partitions = self.draining
        return all_partition_keys(self.queue, partitions, generation)

    def every(self) -> list[PartitionKeys]:
        """Every live partition: the draining generation's, then the active one's."""
        return self.old() + self.active()

    def route(self, routing_key: str) -> PartitionKeys:
        """Where a new job with this id (or idempotency key) goes."""
        return self.pk(partition_for(routing_key, self.partitions))

    def homes(self, routing_key: str) -> list[PartitionKeys]:
        """Where a stored job with this id may be, in the order to ask: its draining
        generation's partition first (a resize moves jobs only from there to the active one, so
        a job not found there is found in the second by a call made after the first)."""
        here = self.route(routing_key)
        if self.draining is None:
            return [here]
        generation, partitions = self.draining
        p = partition_for(routing_key, partitions)
        return [partition_keys(self.queue, p, partitions, generation), here]

    def is_home(self, pk: PartitionKeys, job_id: str) -> bool:
        """Whether a job with this id is stored in ``pk`` when it is there at all: ``pk`` is
        the id's partition in its generation (one of this layout's).  Every job of a batch or
        chain is routed by its id."""
        sizes = {self.generation: self.partitions}
        for other in (self.draining, self.coming):
            if other is not None:
                sizes[other[0]] = other[1]
        n = sizes.get(pk.generation)
        return n is not None and pk.queue == self.queue and partition_for(job_id, n) == pk.partition

    def fleet(self) -> dict[int, PartitionKeys]:
        """Every partition the fleet serves by its fleet id
        (:func:`~shardq.store.partitioning.fleet_id`): the draining generation's, the active
        one's, the coming one's."""
        served = {pk.fleet_id: pk for pk in self.every()}
        if self.coming is not None:
            generation, partitions = self.coming
            for pk in all_partition_keys(self.queue, partitions, generation):
                served.setdefault(pk.fleet_id, pk)
        return served

    @property
    def resizing(self) -> bool:
        return self.draining is not None
