"""One loop per Redis primary, so a slow, paused or failing primary delays only its own
partitions.

The promoter, the ticker and the fetcher each start :class:`PerPrimary` with a body
``(node) -> coroutine`` that serves the partitions :meth:`PerPrimary.mine` returns for that
node.  The loops' wake-ups exist from construction, before the body is given: a worker's
in-flight table and settler wake the fetch loops, and are built before the fetcher.  Which
primary serves a partition comes from the cluster client's slot map, grouped once per
:meth:`PerPrimary.sync` (every second, and at once after a redirect or a dead node:
:meth:`PerPrimary.topology_changed`) so a round costs no slot lookups; sync starts a loop for
each primary that serves some partition and retires loops whose primary serves none.  Every
loop runs under the process's :class:`~shardq.runtime.supervisor.Supervisor`.

Loops that are not split per primary but send calls to every primary (lease rounds,
heartbeats, reclaims) send them through :class:`PerPrimaryCalls`, which handles each primary's
replies as they come and does not let a stuck primary hold the loop up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from shardq.runtime.supervisor import Supervisor
from shardq.store import faults
from shardq.store.keys import slot_of
from shardq.store.op import Call
from shardq.store.transport import AsyncTransport

log = logging.getLogger("shardq.runtime")

# How often the grouping by primary is made again from the client's slot map when nothing
# asked for it.  A loop that meets a redirect or a dead node regroups at once
# (topology_changed), and a call for a partition grouped under the wrong primary meets exactly
# that, so this is only a backstop: a stale grouping costs one redirected call, never a job.
# (It was 1 s: three PerPrimary instances per process woke every second for it.)
SYNC_INTERVAL = 10.0
# The longest a per-primary loop sleeps in one pass when none of its partitions is due sooner.
# Everything that makes work for it wakes it (hints, won leases, freed room, acks, a
# regrouping), so this bounds nothing a job waits for; it paces the loop's progress reports
# (its stall bound is Supervisor.stall_after plus STALL_PASSES of it).  An idle loop wakes
# this often instead of every max_sleep / idle_poll (1 s).
IDLE_PASS = 10.0
# The idle streak (reads or promotes in a row that found nothing) of a partition that has shown
# no work since the process started: its doubling fallback wait is at its longest at once (2 to
# this power, capped by the role's longest wait).
LONG_IDLE = 30


class PerPrimary:
    """Keeps one supervised loop per primary over the partitions it serves."""

    def __init__(
        self,
        supervisor: Supervisor,
        transport: AsyncTransport,
        name: str,
        partitions: Iterable[int],
        route_key: Callable[[int], str],
        pace: float = 0.0,
    ) -> None:
        """``pace``: the longest idle wait of one pass of the body (for the stall bound)."""
        self.supervisor = supervisor
        self.pace = pace
        self.transport = transport
        self.name = name
        self.partitions = list(partitions)
        self.route_key = route_key
        self.body: Callable[[str], Awaitable[None]] | None = None
        self.wakeups: dict[str, asyncio.Event] = {}
        self._nodes: set[str] = set()
        self._node_of: dict[int, str] = {}
        self._groups: dict[str, list[int]] = {}
        self._slots: dict[int, int] | None = None
        #: Counts regroupings that moved a partition to another primary (DueTimes rebuild on it).
        self.generation = 0
        self._changed = asyncio.Event()
        self._regroup()

    def loop_name(self, node: str) -> str:
        return f"{self.name}:{node}"

    def _regroup(self) -> None:
        # Every SYNC_INTERVAL, for up to 16,384 partitions: the slots are computed once.
        if self._slots is None:
            self._slots = {p: slot_of(self.route_key(p)) for p in self.partitions}
        node_name = self.transport.slot_node_name
        node_of = {p: node_name(slot) for p, slot in self._slots.items()}
        if node_of == self._node_of:
            return
        groups: dict[str, list[int]] = {}
        for p, node in node_of.items():
            groups.setdefault(node, []).append(p)
        self._node_of, self._groups = node_of, groups
        self.generation += 1

    def node_of(self, partition: int) -> str:
        node = self._node_of.get(partition)
        if node is None:
            node = self.transport.node_name(self.route_key(partition))
        return node

    def mine(self, node: str) -> list[int]:
        """The partitions the loop of ``node`` serves (per the slot map at the last sync)."""
        return self._groups.get(node, [])

    def wake(self, partition: int) -> None:
        """Wake the loop serving ``partition`` (a hint, a new lease, a finished job)."""
        event = self.wakeups.get(self.node_of(partition))
        if event is not None:
            event.set()

    def wake_all(self) -> None:
        for event in self.wakeups.values():
            event.set()

    def event(self, node: str) -> asyncio.Event:
        event = self.wakeups.get(node)
        if event is None:
            event = self.wakeups[node] = asyncio.Event()
        return event

    def topology_changed(self) -> None:
        """A loop met a redirect or a dead node: refresh the slot map and regroup now."""
        self._changed.set()

    async def sync(self) -> None:
        """Start a loop per primary serving a partition; retire loops whose primary serves none."""
        generation = self.generation
        self._regroup()
        if generation != self.generation:
            # Partitions moved between primaries: every loop files its partitions again now
            # (DueTimes.rebuild), not at the end of a long idle sleep.
            self.wake_all()
        wanted = set(self._groups)
        for node in sorted(wanted - self._nodes):
            self._nodes.add(node)
            self.event(node)
            self.supervisor.forever(
                self.loop_name(node), self._bind(node), pace=self.pace, wakes=(self.event(node),)
            )
        for node in sorted(self._nodes - wanted):
            self._nodes.discard(node)
            self.wakeups.pop(node, None)
            await self.supervisor.retire(self.loop_name(node))

    def _bind(self, node: str) -> Callable[[], Awaitable[None]]:
        body = self.body
        assert body is not None  # sync runs only once start() gave the body
        return lambda: body(node)

    async def watch(self) -> None:
        """The supervised loop that keeps the per-primary loops in step with the slot map."""
        stop = self.supervisor.stop_event(f"{self.name}-topology")
        state = self.supervisor.state(f"{self.name}-topology")
        while not stop.is_set():
            if self._changed.is_set():
                self._changed.clear()
                await self.transport.refresh()
                self.wake_all()
            await self.sync()
            state.ok()
            await self.supervisor.sleep_to_tick(self._changed, SYNC_INTERVAL)

    def start(self, body: Callable[[str], Awaitable[None]]) -> None:
        """Run ``body(node)`` as the loop of each primary, kept in step with the slot map."""
        self.body = body
        self.supervisor.forever(
            f"{self.name}-topology", self.watch, pace=SYNC_INTERVAL, wakes=(self._changed,)
        )

    @property
    def nodes(self) -> set[str]:
        return set(self._nodes)


Results = list[Any]
Handle = Callable[[list[int], Results], Awaitable[None] | None]


class PerPrimaryCalls:
    """The calls of one loop that spans primaries (lease renewals and takes, touches, reclaims),
    sent as one batch per primary, each batch's replies handled the moment its primary answers.

    A loop waits for its batches at most ``wait`` seconds.  A primary that answers later (paused,
    asleep, failing over: up to the socket timeout) finishes in the background and its replies
    are handled then; until it has, this loop sends it nothing new (its calls of later rounds
    are skipped, not queued behind the stuck ones).  So one slow primary holds up neither the
    loop's next round (its heartbeat, its other primaries' leases) nor the handling of the
    replies of the primaries that did answer: a lease won on a healthy primary is used at once.
    """

    def __init__(self, transport: AsyncTransport, name: str) -> None:
        self.transport = transport
        self.name = name
        self._out: dict[str, asyncio.Task[list[BaseException]]] = {}

    @property
    def pending(self) -> set[str]:
        """Primaries whose batch of an earlier round is still out."""
        return set(self._out)

    async def run(self, ops: Sequence[Call[Any]], handle: Handle, wait: float) -> RunReport:
        """Send ``ops``, one batch per primary; ``handle(indexes, results)`` gets each batch's
        op indexes and results (parsed, or the exception a call met), once per batch.  Ops of a
        primary with a batch still out are not sent (:attr:`RunReport.skipped`)."""
        report = RunReport()
        started: list[asyncio.Task[list[BaseException]]] = []
        for node, indexes in self.transport.group(ops).items():
            if node in self._out:
                report.skipped.extend(indexes)
                continue
            batch = [ops[i] for i in indexes]
            task = asyncio.get_running_loop().create_task(
                self._batch(node, batch, indexes, handle), name=f"{self.name}:{node}"
            )
            self._out[node] = task
            task.add_done_callback(lambda t, n=node: self._done(n, t))  # type: ignore[misc]
            started.append(task)
        if started:
            done, _ = await asyncio.wait(started, timeout=wait)
            for task in started:
                if task in done:
                    report.errors.extend(task.result())
                else:
                    report.late += 1
        return report

    async def _batch(
        self, node: str, batch: list[Call[Any]], indexes: list[int], handle: Handle
    ) -> list[BaseException]:
        results: Results = list(await self.transport.run_on(node, batch))
        retry = [i for i, r in enumerate(results) if isinstance(r, BaseException)]
        retry = [i for i in retry if faults.is_transient(results[i])]
        if retry and any(faults.is_redirect(results[i]) for i in retry):
            # The slot moved: the fresh slot map sends each call to its new primary, once.
            await self.transport.refresh()
            again = await asyncio.gather(
                *(self.transport.run(batch[i]) for i in retry), return_exceptions=True
            )
            for i, r in zip(retry, again, strict=True):
                results[i] = r
        outcome = handle(indexes, results)
        if outcome is not None:
            await outcome
        return [r for r in results if isinstance(r, BaseException)]

    def _done(self, node: str, task: asyncio.Task[list[BaseException]]) -> None:
        if self._out.get(node) is task:
            del self._out[node]
        if task.cancelled():
            return
        exc = task.exception()  # retrieved here: a late batch's handler error is logged
        if exc is not None:
            log.warning("%s: handling the replies of %s failed: %r", self.name, node, exc)

    async def close(self) -> None:
        """Cancel the batches still out (shutdown)."""
        tasks = list(self._out.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._out.clear()


@dataclass(slots=True)
class RunReport:
    """What :meth:`PerPrimaryCalls.run` saw within its wait."""

    errors: list[BaseException] = field(default_factory=list)  # of the batches that answered
    skipped: list[int] = field(default_factory=list)  # ops not sent: their primary was busy
    late: int = 0  # batches still out when the wait ended (handled when they answer)
