"""One loop per Redis primary, so a slow, paused or failing primary delays only its own
partitions.

The promoter and the fetcher each hand :class:`PerPrimary` a body ``(node) -> coroutine`` that
serves the partitions :meth:`PerPrimary.mine` returns for that node.  Which primary serves a
partition comes from the cluster client's slot map, grouped once per :meth:`PerPrimary.sync`
(every second, and at once after a redirect or a dead node: :meth:`PerPrimary.topology_changed`)
so a round costs no slot lookups; sync starts a loop for each primary that serves some
partition and retires loops whose primary serves none.  Every loop runs under the process's
:class:`~shardq.runtime.supervisor.Supervisor`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable

from shardq.runtime.supervisor import Supervisor
from shardq.store.transport import AsyncTransport

SYNC_INTERVAL = 1.0


class PerPrimary:
    """Keeps one supervised loop per primary over the partitions it serves."""

    def __init__(
        self,
        supervisor: Supervisor,
        transport: AsyncTransport,
        name: str,
        partitions: Iterable[int],
        route_key: Callable[[int], str],
        body: Callable[[str], Awaitable[None]],
        pace: float = 0.0,
    ) -> None:
        """``pace``: the longest idle wait of one pass of ``body`` (for the stall bound)."""
        self.supervisor = supervisor
        self.pace = pace
        self.transport = transport
        self.name = name
        self.partitions = list(partitions)
        self.route_key = route_key
        self.body = body
        self.wakeups: dict[str, asyncio.Event] = {}
        self._nodes: set[str] = set()
        self._node_of: dict[int, str] = {}
        self._groups: dict[str, list[int]] = {}
        self._changed = asyncio.Event()
        self._regroup()

    def loop_name(self, node: str) -> str:
        return f"{self.name}:{node}"

    def _regroup(self) -> None:
        node_of = {p: self.transport.node_name(self.route_key(p)) for p in self.partitions}
        groups: dict[str, list[int]] = {}
        for p, node in node_of.items():
            groups.setdefault(node, []).append(p)
        self._node_of, self._groups = node_of, groups

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
        self._regroup()
        wanted = set(self._groups)
        for node in sorted(wanted - self._nodes):
            self._nodes.add(node)
            self.event(node)
            self.supervisor.forever(self.loop_name(node), self._bind(node), pace=self.pace)
        for node in sorted(self._nodes - wanted):
            self._nodes.discard(node)
            self.wakeups.pop(node, None)
            await self.supervisor.retire(self.loop_name(node))

    def _bind(self, node: str) -> Callable[[], Awaitable[None]]:
        return lambda: self.body(node)

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
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), SYNC_INTERVAL)

    def start(self) -> None:
        self.supervisor.forever(f"{self.name}-topology", self.watch, pace=SYNC_INTERVAL)

    @property
    def nodes(self) -> set[str]:
        return set(self._nodes)
