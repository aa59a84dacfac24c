"""Leases: which partitions this dispatcher drains, with fencing tokens.

One round per ``renew_interval``: compute this dispatcher's fair share (floor or ceiling of
P / N, by sorted position among live, non-draining members), hand back what is above the
share, take partitions up to it.  A lease lasts as long as its owner is a live member: liveness
is the process's heartbeat, one call per ``renew_interval`` whatever P is, so an idle partition
costs nothing.  A lease key lives ``lease_ttl`` (a day) in Redis; a promote extends it, and this
loop renews the few no promote extended for a third of that, so only a fleet that went away
leaves leases that expire.  The heartbeat into the
fleet is a loop of its own (:meth:`Leases.beat`), so a round held up never makes this
dispatcher look dead to its peers; and the lease calls go out per primary
(:class:`~shardq.runtime.pernode.PerPrimaryCalls`): a lease won on one primary is used at once
whatever another primary is doing, and a stuck primary holds the round up for at most half a
``renew_interval``.

A partition is taken when it is free, when its lease expired, or at once when its owner is gone
from the fleet (dead or paused a whole membership timeout, seen going or found absent: see
:meth:`~shardq.runtime.membership.Membership.absent`) or is this process's predecessor
(restarted in place): the lease-acquire script displaces such an owner with a newer fencing
token, so the old owner's every later write is rejected.  A live owner that does not claim a
partition it holds the lease of (the owners hash does not name it: a lease written by hand, a
dispatcher that lost track of it) is displaced once that has lasted ``lease_time``; a real
owner names itself there within a round of winning the lease.  Tokens are forgotten *before* a lease
is released, so no promote is ever sent with a token this process has already given back.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterable
from typing import Any

from shardq import metrics
from shardq.dispatcher.context import DispatcherContext
from shardq.logs import log_event
from shardq.runtime.pernode import PerPrimaryCalls
from shardq.runtime.supervisor import log_redirect
from shardq.store import fleet, keys
from shardq.store.faults import is_migration, is_transient

log = logging.getLogger("shardq.dispatcher")

# A member that has held no partition for this long after joining (or after being undrained,
# or after a resize made every member run its role again: Membership.age) does not count in
# the fair share: it is not a working dispatcher (a member written by hand, a process stuck
# before its first lease), and counting it would leave its share of partitions without a
# dispatcher.
IDLE_MEMBER_GRACE = 10.0
# A round reads the advisory owners hash again only when something it decides from may have
# changed since the last read: the fleet (live or draining members, a member still in its
# grace), this process's own leases (won, tried, lost, given back, owner entries fixed: it
# wrote the hash or a peer may have), a share not met (it takes free partitions from it), a
# malformed entry (counted every round); and at least every OWNERS_RECHECK seconds, which
# bounds how long a hand-edited hash goes unnoticed.  Read every renew_interval, it was one
# of the three round trips a second of an idle dispatcher, and its parse (64 entries checked
# as numbers) the largest piece of Python in one.
OWNERS_RECHECK = 10.0


def fair_share(partitions: int, members: list[str], me: str) -> int:
    """How many partitions ``me`` should hold: floor or ceiling of P / N, by sorted position."""
    if me not in members:
        return 0
    ordered = sorted(members)
    base, extra = divmod(partitions, len(ordered))
    return base + (1 if ordered.index(me) < extra else 0)


class Leases:
    """The partitions this dispatcher holds and their fencing tokens."""

    def __init__(self, ctx: DispatcherContext) -> None:
        self.transport = ctx.transport
        self.queue = ctx.queue
        self.pks = ctx.pks
        # Fleet ids (keys.fleet_id) run past the count while a resize runs.
        self._bound = max(self.pks) + 1 if self.pks else 0
        self._holders: tuple[dict[int, str] | None, set[str]] = (None, set())
        self.membership = ctx.membership
        # A role started again on a new layout (a resize): the peers are handing back and
        # taking leases just as this process is; none is idle for holding nothing meanwhile.
        ctx.membership.restart_ages()
        self.settings = ctx.settings
        self.pinned = ctx.pinned
        # Called with each partition won, in order: the promoter and the ticker act on a new
        # lease at once.  They need these leases (tokens, fencing) and these leases need to
        # tell them, so each follows them from its own construction (when_acquired).
        self._on_acquired: list[Callable[[int], None]] = []
        self.owner = ctx.owner
        self.tokens: dict[int, str] = {}
        self.renewed: dict[int, float] = {}
        # Partitions whose lease names a live member the owners hash does not name for them:
        # (that holder, since when), displaced after lease_time (see the module docstring).
        # The last time each was seen so, too: the watch must be unbroken.
        self._unclaimed: dict[int, tuple[str, float, float]] = {}
        # The membership view the held leases were last checked under (see round).
        self._checked_view = 0.0
        # Bumped at every change of the held tokens: the owners entries are fixed, and the
        # renewals looked for, only when it (or the owners read) changed, not every round (at
        # 16,384 partitions each was a pass over all of them every second).
        self._changes = 0
        self._fixed: tuple[int, int] = (-1, -1)
        self._renew_at = 0.0
        self.target = 0
        self.rounds = 0
        self._warned_owners: frozenset[str] = frozenset()
        # The owners hash as last read, and what it was read under (see OWNERS_RECHECK).
        self._owners: dict[int, str] | None = None
        self._owners_view: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
        self._owners_at = 0.0
        self._owners_dirty = True
        self.counts: dict[str, int] = {}
        # Several dispatchers of one queue may share a process (tests, embedding): each adds
        # its change to the shared series instead of setting it.
        self._m_held = metrics.LEASES_HELD.labels(ctx.queue)
        self._held_reported = 0
        self.calls = PerPrimaryCalls(ctx.transport, "leases")
        # How long a round waits for a primary's lease calls before going on without it.
        self.wait = ctx.settings.renew_interval / 2

    def when_acquired(self, callback: Callable[[int], None]) -> None:
        """Call ``callback(partition)`` for every lease won from now on."""
        self._on_acquired.append(callback)

    # events --------------------------------------------------------------------------------

    def event(self, event: str, level: int = logging.INFO, **fields: Any) -> None:
        self.counts[event] = self.counts.get(event, 0) + 1
        metrics.LEASE_EVENTS.labels(self.queue, event).inc()
        log_event(log, f"lease.{event}", level, queue=self.queue, dispatcher=self.owner, **fields)

    def fenced(self, partition: int, reason: str, token: str | None = None) -> None:
        """A write for ``partition`` made with ``token`` was rejected: another dispatcher owns
        it now.  A rejection of a token this process already gave back (a call in flight while
        it released the lease, or from before it took the partition again) is no news."""
        if token is not None and self.tokens.get(partition) != token:
            return
        if self.tokens.pop(partition, None) is None:
            return
        self._changes += 1
        self._owners_dirty = True
        self.renewed.pop(partition, None)
        # Losing a partition to fencing means this process was paused or cut off: say so loudly.
        name = keys.label_of_fleet_id(partition)
        self.event("fenced", logging.WARNING, partition=name, reason=reason)
        self.event("lost", partition=name)
        metrics.PARTITIONS.drop(self.queue, [partition])
        self._report_held()

    def extended(self, partition: int, at: float) -> None:
        """A promote extended the lease (it renews as a side effect)."""
        if partition in self.tokens:
            self.renewed[partition] = at

    # the round -----------------------------------------------------------------------------

    async def beat(self) -> None:
        """Heartbeat into the fleet (the ``membership`` loop, every ``renew_interval``)."""
        await self.membership.beat()

    async def round(self) -> None:
        """Renew, hand back above the fair share, take up to it."""
        m = self.membership
        if m.last_success is None:
            await m.beat()  # no view of the fleet yet: no share can be computed without one
        else:
            # The membership loop beats at this same grid moment: decide on what it brings,
            # so a dead owner's partitions are taken in this round (not a renew_interval on).
            await m.this_tick(self.wait)
        # A view older than the membership timeout (the fleet's node has not answered the
        # heartbeats) says nothing about who is live now: keep what is held, take nothing.
        stale = time.monotonic() - (m.last_success or 0.0) > m.timeout
        self.rounds += 1
        total = len(self.pks)
        owners, skipped = await self._read_owners(self._bound)
        if skipped:
            self._malformed_owners(skipped)
        wanted: Iterable[int]
        if self.pinned is not None:
            wanted = list(self.pinned)
            self.target = len(wanted)
        else:
            wanted = self.pks
            self.target = fair_share(total, self.working_members(owners), self.owner)
        # A fresh view follows a gap in this process's own heartbeats (frozen, cut off):
        # peers may have displaced it meanwhile, and an idle partition sends no write that
        # would be fenced, so every held lease is checked now, once.
        fresh = m.view_since != self._checked_view and not stale
        if fresh:
            self._checked_view = m.view_since
        await self._renew(everything=fresh)
        if stale:
            self._report_held()
            return
        excess = len(self.tokens) - self.target
        if excess > 0:
            # Hand back the most recently acquired first: the others have warm state.
            give = sorted(self.tokens, key=lambda p: -self.renewed.get(p, 0.0))[:excess]
            await self.release(give, "above fair share")
        await self._fix_owner_entries(owners)
        if self.target - len(self.tokens) > 0:
            await self._take(wanted, owners)
        self._report_held()

    async def _read_owners(self, bound: int) -> tuple[dict[int, str], list[str]]:
        """The owners hash (partition -> owner), and its malformed fields: read again, or as
        last read when nothing this round decides from can have changed (OWNERS_RECHECK)."""
        m = self.membership
        view = (tuple(m.live), tuple(m.draining))
        now = time.monotonic()
        if (
            self._owners is not None
            and not self._owners_dirty
            and view == self._owners_view
            and len(self.tokens) == self.target
            and now - self._owners_at < OWNERS_RECHECK
            and all(m.age(member) >= IDLE_MEMBER_GRACE for member in m.live)
        ):
            return self._owners, []
        skipped: list[str] = []
        owners = await fleet.read_owners(self.transport.client, self.queue, bound, skipped)
        self._owners = None if skipped else owners
        self._owners_view, self._owners_at, self._owners_dirty = view, now, False
        return owners, skipped

    def _report_held(self) -> None:
        held = len(self.tokens)
        self._m_held.inc(held - self._held_reported)
        self._held_reported = held

    def _malformed_owners(self, fields: list[str]) -> None:
        """Count bad owners fields every round; say so once per distinct set (not every round)."""
        metrics.MALFORMED.labels(self.queue, "owner").inc(len(fields))
        shown = frozenset(fields)
        if shown != self._warned_owners:
            self._warned_owners = shown
            log_event(
                log,
                "record.malformed",
                logging.WARNING,
                queue=self.queue,
                key=keys.owners_key(self.queue),
                fields=sorted(shown)[:20],
                action="skipped; fix or HDEL the fields (the hash is advisory)",
            )

    def _holder_names(self, owners: dict[int, str]) -> set[str]:
        """The owners the hash names, made again only for a new read of it."""
        if self._holders[0] is not owners:
            self._holders = (owners, set(owners.values()))
        return self._holders[1]

    def working_members(self, owners: dict[int, str]) -> list[str]:
        """The live, non-draining members the partitions are shared among: those that hold a
        partition, joined lately, or are this process."""
        holders = self._holder_names(owners)
        m = self.membership
        return [
            member
            for member in m.live
            if member not in m.draining
            and (member == self.owner or member in holders or m.age(member) < IDLE_MEMBER_GRACE)
        ]

    async def _renew(self, everything: bool = False) -> None:
        """Renew leases no promote extended for a third of the lease ttl (a day), one batch
        per primary, or ``everything`` held (a renewal of a lease a peer took is fenced).  A
        busy partition is renewed by its promotes; an idle one here, every eight hours: its
        owner's liveness is the membership heartbeat, not the lease key's expiry, so this is
        only the key's life in Redis."""
        now = time.monotonic()
        if not everything and now < self._renew_at:
            return
        due = 0.0 if everything else max(self.settings.renew_interval, self.settings.lease_ttl / 3)
        # Looked for again a minute on at most (the due time is hours; a promote extends).
        self._renew_at = now + min(60.0, due)
        stale = [p for p in self.tokens if now - self.renewed.get(p, 0.0) >= due]
        if not stale:
            return
        ttl = round(self.settings.lease_ttl * 1000)
        sent = [self.tokens[p] for p in stale]
        ops = [fleet.lease_renew(self.pks[p], t, ttl) for p, t in zip(stale, sent, strict=True)]

        def renewed(indexes: list[int], results: list[object]) -> None:
            for i, result in zip(indexes, results, strict=True):
                p, token = stale[i], sent[i]
                if self.tokens.get(p) != token:
                    continue  # released (or taken again) meanwhile
                if result is True:
                    self.renewed[p] = now
                elif result is False:
                    self.fenced(p, "lease lost before renewal", token)
                else:
                    self._refused(p, "renew", result)

        await self.calls.run(ops, renewed, self.wait)

    def _refused(self, partition: int, what: str, exc: object) -> None:
        """A lease call failed (node down, OOM, READONLY during a failover): log and count it;
        the lease expires on its own if this keeps up, and a peer takes over.  A slot on the
        move is no failure: an info event, and the next round goes to the new node."""
        metrics.SCRIPT_ERRORS.labels(self.queue, f"lease-{what}", type(exc).__name__).inc()
        if isinstance(exc, BaseException) and is_migration(exc):
            name = keys.label_of_fleet_id(partition)
            log_redirect(log, exc, queue=self.queue, partition=name, call=f"lease-{what}")
            return
        self.event(
            f"{what}_failed",
            logging.WARNING,
            partition=keys.label_of_fleet_id(partition),
            error=f"{type(exc).__name__}: {exc}"[:300],
            transient=isinstance(exc, BaseException) and is_transient(exc),
        )

    async def _take(self, wanted: Iterable[int], owners: dict[int, str]) -> None:
        self._owners_dirty = True  # peers race for the same partitions: read the hash again
        live = set(self.membership.live)
        displace = self.membership.displaceable | self.membership.absent(self._holder_names(owners))
        free = [
            p
            for p in wanted
            if p not in self.tokens
            and (owners.get(p) is None or owners[p] not in live or owners[p] == self.owner)
        ]
        random.shuffle(free)  # peers starting together should not all try the same ones
        # Peers race for the same free partitions: go on down the list until the share is met
        # or every candidate was tried, rather than waiting a whole round per loss.
        while free and len(self.tokens) < self.target:
            room = self.target - len(self.tokens)
            batch, free = free[: room + 2], free[room + 2 :]
            named = [o for o in displace if o in self._holder_names(owners)]
            if not await self._acquire(batch, named, owners):
                break  # grants still on the way: count them before asking for more

    async def _acquire(
        self, candidates: list[int], displace: list[str], owners: dict[int, str]
    ) -> bool:
        """Try to take ``candidates``; each primary's grants are used as they come.  False when
        some grants were still on the way after the round's wait (they count when they land)."""
        ttl = round(self.settings.lease_ttl * 1000)
        ops = [fleet.lease_acquire(self.pks[p], self.owner, ttl, displace) for p in candidates]

        async def granted(indexes: list[int], results: list[Any]) -> None:
            chosen = [candidates[i] for i in indexes]
            await self._granted(chosen, results, displace, ttl, owners)

        report = await self.calls.run(ops, granted, self.wait)
        return report.late == 0

    async def _granted(
        self,
        candidates: list[int],
        results: list[Any],
        displace: list[str],
        ttl: int,
        owners: dict[int, str],
    ) -> None:
        """Use the grants of one primary's acquire calls."""
        # The owners hash is written after the leases are granted, so a dispatcher killed in
        # between holds leases the hash does not name: ``displace`` (filtered by the hash) then
        # missed it.  The refusal names the holder: take it over now if it may be displaced.
        refused = {
            i: grant.owner
            for i, grant in enumerate(results)
            if isinstance(grant, fleet.Grant) and not grant.won and grant.owner is not None
        }
        displaceable = self.membership.displaceable | self.membership.absent(refused.values())
        again = [
            (i, holder)
            for i, holder in refused.items()
            if holder not in displace
            and (holder in displaceable or self._unclaimed_too_long(candidates[i], holder, owners))
        ]
        if again:
            retry = [
                fleet.lease_acquire(self.pks[candidates[i]], self.owner, ttl, [holder])
                for i, holder in again
            ]
            for (i, _), grant in zip(again, await self.transport.run_many(retry), strict=True):
                results[i] = grant
        now = time.monotonic()
        won: dict[int, str] = {}
        for p, grant in zip(candidates, results, strict=True):
            if isinstance(grant, BaseException):
                self._refused(p, "acquire", grant)
                continue
            if not grant.won:
                continue
            if len(self.tokens) >= self.target and grant.new:
                # Won more than needed (tried a few spare): give it straight back.
                await self.transport.run(fleet.lease_release(self.pks[p], grant.token))
                continue
            self.tokens[p] = grant.token
            self._changes += 1
            self.renewed[p] = now
            self._unclaimed.pop(p, None)
            won[p] = grant.token
            name = keys.label_of_fleet_id(p)
            if grant.takeover:
                self.event("takeover", partition=name, token=grant.token)
            self.event("acquired", partition=name, token=grant.token)
            for acquired in self._on_acquired:
                acquired(p)
        if won:
            self._owners_dirty = True
            await fleet.write_owners(self.transport.client, self.queue, self.owner, won)

    def _unclaimed_too_long(self, partition: int, holder: str, owners: dict[int, str]) -> bool:
        """Whether the live ``holder`` of ``partition``'s lease has left it unclaimed (the
        owners hash names someone else, or no one) for ``lease_time``: a real owner writes
        its entry in the round it wins the lease and puts it back every round after, so this
        is a lease written by hand or one its dispatcher lost track of, and it is taken over
        (safe: the holder's writes check its token)."""
        if owners.get(partition) == holder:
            self._unclaimed.pop(partition, None)
            return False
        now = time.monotonic()
        seen = self._unclaimed.get(partition)
        unbroken = 3 * self.settings.renew_interval  # asked every round while below the share
        if seen is None or seen[0] != holder or now - seen[2] > unbroken:
            self._unclaimed[partition] = (holder, now, now)
            return False
        self._unclaimed[partition] = (holder, seen[1], now)
        return now - seen[1] >= self.settings.lease_time

    async def _fix_owner_entries(self, owners: dict[int, str]) -> None:
        """Keep the advisory owners hash true for this dispatcher's own entries (when the hash
        was read again or the held tokens changed since the last fix)."""
        fixed = (id(owners), self._changes)
        if fixed == self._fixed and owners is self._owners:
            return
        self._fixed = fixed
        wrong = [p for p, o in owners.items() if o == self.owner and p not in self.tokens]
        missing = {p: t for p, t in self.tokens.items() if owners.get(p) != self.owner}
        if wrong or missing:
            self._owners_dirty = True
        await fleet.forget_owners(self.transport.client, self.queue, wrong)
        await fleet.write_owners(self.transport.client, self.queue, self.owner, missing)

    async def release(self, partitions: list[int], reason: str, wait: bool = False) -> None:
        """Give leases back.  Their tokens are forgotten first: a promote already running for
        one of them is fenced harmlessly, and none is sent with a released token.  ``wait``
        (shutdown): for every primary's answer, not only the round's share of time."""
        held = {p: self.tokens.pop(p) for p in partitions if p in self.tokens}
        self._changes += 1
        if held:
            self._owners_dirty = True
        for p in held:
            self.renewed.pop(p, None)
        metrics.PARTITIONS.drop(self.queue, held)
        self._report_held()
        if not held:
            return
        try:
            ops = [fleet.lease_release(self.pks[p], token) for p, token in held.items()]
            if wait:
                await self.transport.run_many(ops)
            else:
                # A release that is not written expires on its own; nothing to do with replies.
                await self.calls.run(ops, lambda _i, _r: None, self.wait)
            await fleet.forget_owners(self.transport.client, self.queue, held)
        except Exception as exc:
            log.warning("releasing leases failed (%s): they expire on their own", exc)
        for p in held:
            self.event("released", partition=keys.label_of_fleet_id(p), reason=reason)
