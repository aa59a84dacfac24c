"""Fleet membership, shared by workers and dispatchers.

Each member heartbeats into a sorted set scored by when its heartbeat expires (Redis clock), so
a member that stops (SIGKILL, SIGSTOP, a lost network) drops out after ``timeout`` without
anyone cleaning up.  Each heartbeat also returns the live members, from which every member
derives the same split of partitions, and the members an operator asked to drain.

:attr:`Membership.gone` names members that were live at one successful heartbeat of this
process and expired by the next: they stopped heartbeating for a whole timeout (dead or paused),
and fencing makes it safe to take their work at once.  After a gap in this process's own
heartbeats (it was cut off from the queue's node) the view starts afresh, so a member coming
back from its own outage does not mistake everyone else for dead.  A member that died unseen
(before this process started, or during its outage) is :meth:`Membership.absent` once this
process has watched the fleet a whole timeout without seeing it.  Members of this process's
own instance with another incarnation are its predecessors (a restart in place): gone from
the start (see :mod:`shardq.runtime.identity`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from shardq.logs import log_event
from shardq.runtime.identity import predecessors
from shardq.store import fleet
from shardq.store.transport import AsyncTransport

log = logging.getLogger("shardq.membership")

# How long a gone member is remembered (after that it is absent: Membership.absent).
GONE_TTL = 600.0


class Membership:
    """One member's heartbeat and its view of the live fleet."""

    def __init__(
        self,
        transport: AsyncTransport,
        members_key: str,
        drain_key: str,
        me: str,
        timeout: float,
    ) -> None:
        self.transport = transport
        self.members_key = members_key
        self.drain_key = drain_key
        self.me = me
        self.timeout = timeout
        self.started = time.monotonic()
        self.live: list[str] = [me]
        self.draining: list[str] = []
        self._gone: dict[str, float] = {}
        self.first_seen: dict[str, float] = {}
        # When each member was last seen live, and since when this view is unbroken (absent).
        self.last_seen: dict[str, float] = {}
        self.view_since = 0.0
        self.predecessors: set[str] = set()
        self.now_ms = 0
        self.last_success: float | None = None
        self._previous: set[str] = set()
        self._warned_twin = False
        self._beating: asyncio.Future[None] | None = None

    async def beat(self) -> fleet.Members:
        """Heartbeat and refresh the view (raises what Redis raised; the view is kept)."""
        beating = self._beating = asyncio.get_running_loop().create_future()
        try:
            return await self._beat()
        finally:
            beating.set_result(None)
            if self._beating is beating:
                self._beating = None

    async def this_tick(self, timeout: float) -> None:
        """Wait, at most ``timeout``, for the heartbeat under way or starting in this turn of
        the event loop: a loop woken at the same grid moment as the membership loop (the
        dispatcher's lease round) then decides on the view that beat brings, so a member found
        gone is acted on in this round, not one tick later."""
        await asyncio.sleep(0)  # tasks woken in this turn run up to their first wait
        beating = self._beating
        if beating is not None:
            await asyncio.wait((beating,), timeout=timeout)

    async def _beat(self) -> fleet.Members:
        op = fleet.members(self.members_key, self.drain_key, self.me, round(self.timeout * 1000))
        try:
            members = await self.transport.run(op)
        except Exception:
            self._previous = set()  # a gap: the next success starts a fresh view
            raise
        now = time.monotonic()
        fresh = self.last_success is None or now - self.last_success > self.timeout
        live = set(members.live)
        if fresh:
            self._gone.clear()
            self.view_since = now
        else:
            # Live at the last beat, expired now: dead or paused for a whole timeout.
            for member in self._previous - live:
                if member not in self._gone:
                    self._gone[member] = now
                    log_event(
                        log,
                        "member.gone",
                        logging.INFO,
                        member=member,
                        seen_by=self.me,
                        timeout_s=self.timeout,
                    )
        for member in [m for m, since in self._gone.items() if m in live or now - since > GONE_TTL]:
            del self._gone[member]
        self._previous = live
        for member in live:
            self.first_seen.setdefault(member, now)
            self.last_seen[member] = now
        for member in [m for m, at in self.last_seen.items() if now - at > GONE_TTL]:
            del self.last_seen[member]
        for member in [m for m in self.first_seen if m not in live]:
            del self.first_seen[member]
        twins = set(predecessors(self.me, members.live))
        if now - self.started < self.timeout:
            self.predecessors |= twins  # restarted in place: the old incarnation is gone
        elif twins - self.predecessors and not self._warned_twin:
            self._warned_twin = True
            log_event(
                log,
                "membership.duplicate_instance",
                logging.ERROR,
                member=self.me,
                others=sorted(twins),
                hint="two live processes share one SHARDQ_INSTANCE; give each its own",
            )
        self.live = sorted(live - self.predecessors | {self.me})
        draining = [m for m in members.draining if m in self.live]
        for member in set(self.draining) - set(draining):
            if member in self.first_seen:
                # Undrained: it holds nothing yet, as a member that just joined.
                self.first_seen[member] = now
        self.draining = draining
        self.now_ms = members.now_ms
        self.last_success = now
        return members

    def age(self, member: str) -> float:
        """Seconds since this process first saw ``member`` live (0 if never), or since it saw
        it undrained, or since :meth:`restart_ages`: how long it has had to take partitions."""
        seen = self.first_seen.get(member)
        return 0.0 if seen is None else time.monotonic() - seen

    def restart_ages(self) -> None:
        """Count every live member as joined now.  A resize changes the partitions every
        member serves, and each runs its role again on them, handing its leases back first
        (all at about the same moment, each at its next layout check): a member holding
        nothing then is taking partitions, not idle (shardq.dispatcher.leases.IDLE_MEMBER_GRACE)."""
        now = time.monotonic()
        for member in self.first_seen:
            self.first_seen[member] = now

    @property
    def gone(self) -> set[str]:
        """Members seen live before and expired since (dead or paused)."""
        return set(self._gone)

    @property
    def displaceable(self) -> set[str]:
        """Members whose work may be taken over now: gone, or this process's predecessors."""
        return (set(self._gone) | self.predecessors) - {self.me}

    def absent(self, names: Iterable[str]) -> set[str]:
        """Of ``names``, those not live and not seen live by this process for a whole timeout
        of an unbroken view: dead or paused, whether or not this process saw them go (one that
        died before it started, a name no member ever had).  A whole timeout, not one beat: a
        failover of the fleet's node may lose the latest heartbeats, and a live member beats
        again within its renew interval."""
        now = time.monotonic()
        if self.last_success is None or now - self.last_success > self.timeout:
            return set()  # no current view: it says nothing about who is live now
        live = set(self.live)
        return {
            name
            for name in names
            if name != self.me
            and name not in live
            and now - max(self.view_since, self.last_seen.get(name, 0.0)) >= self.timeout
        }

    async def leave(self) -> None:
        """Leave the fleet at once (clean shutdown)."""
        op = fleet.members(
            self.members_key, self.drain_key, self.me, round(self.timeout * 1000), leaving=True
        )
        await self.transport.run(op)
