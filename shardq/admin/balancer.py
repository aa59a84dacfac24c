"""The placement autopilot: measure every primary's load, plan, and move slots within a budget;
once (``shardq rebalance plan`` / ``apply``) or for as long as it runs (``shardq balancer
run``).

**What is balanced.**  Every slot that holds a partition of the balanced queues (every queue,
unless told otherwise), with three figures each: its job rate (enqueued + promoted per second,
summed over the queues' partitions in it), and its bytes (``MEMORY USAGE`` of every key of the
slot: the backlog's payloads and whatever shares the slot; also what a move of it carries).
``--by load`` (the default) balances the sum of a slot's share of the total rate and its share
of the total bytes, in percent (both shares count equally; a figure that is zero everywhere, such
as the rate of an idle cluster, counts for nothing), so neither the busiest primary nor the
fullest one is left far from the mean; ``--by rate`` and ``--by bytes`` balance one figure.

**How a placement is carried out** (:func:`carry_out`): its moves in order, each the safe slot
move of :mod:`shardq.admin.slots` (0 lost under load), at most :attr:`Budget.concurrency` at
once and never two on one primary (MIGRATE pauses both of its primaries), started no faster
than :attr:`Budget.bytes_per_second` on average (MIGRATE carries a slot's keys in one call, so
the throttle spaces moves out; it does not slow one down).  The first error stops it: no move
starts after it, the ones running finish, and the outcome says what was done and what is left.

**The continuous mode** (:class:`Balancer`) holds one leader lease for the whole cluster
(``{sq:balancer}:lease``, the dispatchers' lease scripts: a fencing token that only grows), so
any number may run and one acts.  The leader measures every ``interval`` seconds; it plans only
when the deviation (the farthest primary from the mean, as a fraction of it) has been above
``trigger`` in ``sustain`` measurements in a row, and then plans to the tighter ``tolerance``:
the gap between the two bands, and the rounds in a row, keep it from chasing noise (a load that
hovers around the tolerance never moves anything).  Before each move starts it renews its lease;
a leader whose token went stale (paused past its lease, another took over) starts nothing more.
A move a killed leader left half-way is finished by the next one before anything else.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from shardq.admin import placement, slots
from shardq.admin.lease import LeaderLease
from shardq.admin.owners import partition_rates
from shardq.client import Client
from shardq.errors import ShardqError, UnknownQueueError
from shardq.logs import log_event
from shardq.names import BY_CHOICES as BY_CHOICES
from shardq.names import By as By
from shardq.plans import one
from shardq.runtime.identity import member_id
from shardq.store import fleet, keys

log = logging.getLogger("shardq.balancer")


class BalancerError(ShardqError):
    """The balancer cannot run as asked (nothing to balance, bad settings)."""


@dataclass(frozen=True, slots=True)
class SlotLoad:
    """One slot holding partitions of the balanced queues, as measured."""

    slot: int
    node: str  # "host:port" of the primary serving it
    rate: float  # jobs/s of the balanced queues' partitions in it
    bytes: int  # MEMORY USAGE of every key of the slot: what a move carries
    partitions: tuple[tuple[str, int], ...]  # (queue, partition) in the slot


@dataclass(frozen=True, slots=True)
class Measurement:
    """Every balanced slot's figures, and the primaries they may be placed on."""

    queues: tuple[str, ...]
    primaries: tuple[str, ...]
    slots: tuple[SlotLoad, ...]
    window: float  # seconds the rates were taken over

    def units(self, by: By) -> list[placement.Unit]:
        """The planner's input: each slot with its load in the unit of ``by``."""
        rate_total = sum(s.rate for s in self.slots)
        bytes_total = sum(s.bytes for s in self.slots)
        counted = (rate_total > 0) + (bytes_total > 0)

        def load(s: SlotLoad) -> float:
            if by == "rate":
                return s.rate
            if by == "bytes":
                return float(s.bytes)
            if not counted:
                return 0.0
            share = (s.rate / rate_total if rate_total > 0 else 0.0) + (
                s.bytes / bytes_total if bytes_total > 0 else 0.0
            )
            return 100.0 * share / counted

        return [placement.Unit(s.slot, s.node, load(s), s.bytes, s.partitions) for s in self.slots]

    def loads(self, by: By) -> dict[str, float]:
        """Load per primary (primaries holding none of the slots at 0)."""
        out = dict.fromkeys(self.primaries, 0.0)
        for u in self.units(by):
            out[u.node] += u.load
        return out

    def deviation(self, by: By) -> float:
        """The farthest primary from the mean, as a fraction of the mean (0: even)."""
        return placement.deviation(self.loads(by))


def measure(client: Client, queues: Sequence[str] = (), window: float = 1.0) -> Measurement:
    """Every slot holding a partition of ``queues`` (every queue when empty), with its rate
    over ``window`` seconds and its bytes.  Raises SlotMoveError on a single node, and
    SlotMidMoveError when a slot is half-moved (:func:`finish_move` finishes it)."""
    names = sorted(set(queues)) if queues else client.queues()
    if not names:
        raise BalancerError(
            "no queue to balance: create one first (`shardq queue create`), or name them with "
            "--queue"
        )
    primaries: list[str] = []
    found: dict[int, dict[str, object]] = {}
    where: dict[tuple[str, int], int] = {}
    measured: list[str] = []
    for q in names:
        try:
            primaries, usage = slots.slot_usage(client, q)
        except UnknownQueueError:
            if queues:
                raise
            continue  # deleted since it was listed
        measured.append(q)
        for p, u in usage.items():
            where[(q, p)] = u.slot
            entry = found.setdefault(
                u.slot, {"node": u.node, "bytes": u.bytes, "partitions": set()}
            )
            parts = entry["partitions"]
            assert isinstance(parts, set)
            parts.update(u.partitions)
            parts.add((q, p))
    rates = partition_rates(client, measured, window)
    rate_of: dict[int, float] = {}
    for q, per_partition in rates.items():
        for p, r in per_partition.items():
            slot = where.get((q, p))
            if slot is not None:
                rate_of[slot] = rate_of.get(slot, 0.0) + r
    out = []
    for slot, entry in sorted(found.items()):
        parts = entry["partitions"]
        assert isinstance(parts, set)
        out.append(
            SlotLoad(
                slot,
                str(entry["node"]),
                rate_of.get(slot, 0.0),
                int(str(entry["bytes"])),
                tuple(sorted((q, p) for q, p in parts if q in rates)),
            )
        )
    return Measurement(tuple(measured), tuple(primaries), tuple(out), window)


def finish_move(client: Client, stuck: slots.SlotMidMoveError, timeout_ms: int = 60_000) -> None:
    """Finish a slot move that stopped half-way, to the target it was going to."""
    step = slots.prepare_move(client, stuck.queue, stuck.partition, stuck.target)
    slots.move(client, step, timeout_ms)


# Carrying a placement out ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Budget:
    """How much carrying out a placement may do at once."""

    concurrency: int = 1  # moves at once (never two on one primary)
    bytes_per_second: float | None = None  # average bytes/s of moves started; None: no limit
    max_moves: int = 10  # moves per placement carried out (the rest wait for the next)
    migrate_timeout_ms: int = 60_000

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise BalancerError(f"concurrency must be at least 1, not {self.concurrency}")
        if self.bytes_per_second is not None and not self.bytes_per_second > 0:
            raise BalancerError(
                f"bytes per second must be above 0, not {self.bytes_per_second} (leave it out "
                "for no limit)"
            )
        if self.max_moves < 1:
            raise BalancerError(f"max moves must be at least 1, not {self.max_moves}")


@dataclass(frozen=True, slots=True)
class Moved:
    move: placement.Move
    keys_moved: int
    migrate_seconds: float  # the pause both primaries saw
    started: float  # seconds after the placement started being carried out
    seconds: float  # the whole move, planning its step included


@dataclass(frozen=True, slots=True)
class Outcome:
    """What carrying out a placement did."""

    done: tuple[Moved, ...]
    left: tuple[placement.Move, ...]  # not started (budget, error, or no longer leader)
    error: BaseException | None = None  # the first move that failed (nothing started after)
    failed: placement.Move | None = None
    fenced: bool = False  # stopped because this process no longer leads
    seconds: float = 0.0
    most_at_once: int = 0  # the most moves that ran at the same time

    @property
    def bytes_moved(self) -> int:
        return sum(m.move.bytes for m in self.done)


def _one_move(connect: Callable[[], Client], m: placement.Move, timeout_ms: int) -> Moved:
    started = time.monotonic()
    queue, partition = m.partitions[0]
    with connect() as client:
        step = slots.prepare_move(client, queue, partition, m.target)
        if not step.needed:  # already there: nothing to do
            return Moved(m, 0, 0.0, 0.0, time.monotonic() - started)
        if step.source != m.source and not step.in_progress:
            raise slots.SlotMoveError(
                f"slot {m.slot} is on {step.source}, not {m.source} as planned (something "
                "else moved it): plan again"
            )
        r = slots.move(client, step, timeout_ms)
    return Moved(m, r.keys_moved, r.migrate_seconds, 0.0, time.monotonic() - started)


def carry_out(
    connect: Callable[[], Client],
    moves: Sequence[placement.Move],
    budget: Budget = Budget(),
    keep_going: Callable[[], bool] = lambda: True,
    on_moved: Callable[[Moved], None] | None = None,
    move_one: Callable[[placement.Move], Moved] | None = None,
) -> Outcome:
    """Make ``moves`` (a placement's, in its order) within ``budget``; see the module docstring.

    ``connect`` makes a client for each move (each runs in a thread of its own, with its own
    connections).  ``keep_going`` is asked before each move starts; False stops it (the
    balancer's lease check).  ``on_moved`` hears of each finished move.  ``move_one`` makes
    one move (default: the safe slot move, :func:`shardq.admin.slots.move`)."""
    if move_one is None:

        def move_one(m: placement.Move) -> Moved:
            return _one_move(connect, m, budget.migrate_timeout_ms)

    t0 = time.monotonic()
    pending = list(moves[: budget.max_moves])
    never = list(moves[budget.max_moves :])
    running: dict[Future[Moved], placement.Move] = {}
    busy: set[str] = set()
    done: list[Moved] = []
    error: BaseException | None = None
    failed: placement.Move | None = None
    fenced = False
    started_bytes = 0
    starts: dict[int, float] = {}
    most = 0
    with ThreadPoolExecutor(budget.concurrency, thread_name_prefix="shardq-move") as pool:
        while pending or running:
            wake = 0.25
            if error is None and not fenced and pending:
                i = 0
                while i < len(pending) and len(running) < budget.concurrency:
                    m = pending[i]
                    if m.source in busy or m.target in busy:
                        i += 1
                        continue
                    if budget.bytes_per_second is not None:
                        # Start when the bytes started so far fit the elapsed time at the rate.
                        due = t0 + started_bytes / budget.bytes_per_second
                        now = time.monotonic()
                        if now < due:
                            wake = min(wake, due - now)
                            break
                    if not keep_going():
                        fenced = True
                        break
                    pending.pop(i)
                    future = pool.submit(move_one, m)
                    running[future] = m
                    starts[m.slot] = time.monotonic() - t0
                    busy.update((m.source, m.target))
                    started_bytes += m.bytes
                    most = max(most, len(running))
            if not running:
                if error is not None or fenced or not pending:
                    break
                time.sleep(wake)
                continue
            finished, _ = wait(list(running), timeout=wake, return_when=FIRST_COMPLETED)
            for future in finished:
                m = running.pop(future)
                busy.difference_update((m.source, m.target))
                try:
                    r = future.result()
                except Exception as exc:
                    if error is None:
                        error, failed = exc, m
                    continue
                moved = Moved(m, r.keys_moved, r.migrate_seconds, starts[m.slot], r.seconds)
                done.append(moved)
                if on_moved is not None:
                    on_moved(moved)
    return Outcome(
        tuple(done),
        tuple(pending + never),
        error,
        failed,
        fenced,
        time.monotonic() - t0,
        most,
    )


# The continuous mode ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BalancerSettings:
    """How ``shardq balancer run`` decides (module docstring)."""

    queues: tuple[str, ...] = ()  # () : every queue
    by: By = "load"
    tolerance: float = 0.10  # place to within this fraction of the mean
    trigger: float = 0.25  # act only past this deviation...
    sustain: int = 3  # ...in this many measurements in a row
    interval: float = 30.0  # seconds from one measurement to the next
    window: float = 5.0  # seconds the rates are taken over
    lease_ms: int = 30_000  # the leader lease (renewed at a third of it)
    budget: Budget = field(default_factory=Budget)

    def __post_init__(self) -> None:
        if self.by not in BY_CHOICES:
            raise BalancerError(f"by must be one of {', '.join(BY_CHOICES)}, not {self.by!r}")
        if not 0 <= self.tolerance < self.trigger:
            raise BalancerError(
                f"the trigger ({self.trigger:.0%}) must be above the tolerance "
                f"({self.tolerance:.0%}): the gap between them is what keeps the balancer from "
                "moving slots back and forth on noise"
            )
        if self.sustain < 1:
            raise BalancerError(f"sustain must be at least 1, not {self.sustain}")
        if not 0 < self.window <= self.lease_ms / 3000:
            raise BalancerError(
                f"the window ({self.window:g} s) must be above 0 and at most a third of the "
                f"lease ({self.lease_ms / 1000:g} s), so the leader renews its lease in time"
            )
        if not self.interval >= self.window:
            raise BalancerError(
                f"the interval ({self.interval:g} s) must be at least the window "
                f"({self.window:g} s)"
            )


class Hysteresis:
    """Says when to act: the deviation above the trigger ``sustain`` times in a row."""

    def __init__(self, trigger: float, sustain: int) -> None:
        self.trigger = trigger
        self.sustain = sustain
        self.over = 0

    def observe(self, deviation: float) -> bool:
        self.over = self.over + 1 if deviation > self.trigger else 0
        return self.over >= self.sustain

    def reset(self) -> None:
        self.over = 0


@dataclass(frozen=True, slots=True)
class Round:
    """What one round of the balancer did."""

    leader: bool
    token: str = ""
    deviation: float | None = None  # before any move (None: not measured)
    acted: bool = False
    placement: placement.Placement | None = None
    outcome: Outcome | None = None
    finished_stuck_move: int | None = None  # the slot of a half-done move it finished
    error: str = ""


class Balancer:
    """One balancer process: stands by, or leads and balances (module docstring)."""

    def __init__(
        self,
        connect: Callable[[], Client],
        settings: BalancerSettings = BalancerSettings(),
        owner: str | None = None,
    ) -> None:
        self.connect = connect
        self.settings = settings
        self.owner = owner or member_id("balancer")
        self.client = connect()
        self.hysteresis = Hysteresis(settings.trigger, settings.sustain)
        #: The cluster's one leader lease.
        self.lease = LeaderLease(
            self.client, keys.BALANCER, self.owner, settings.lease_ms, "the balancer's lease"
        )
        self.rounds: list[Round] = []

    def close(self) -> None:
        self.client.close()

    # leadership ----------------------------------------------------------------------------

    @property
    def token(self) -> str:
        """The lease's fencing token while this process leads, else ""."""
        return self.lease.token

    def lead(self) -> bool:
        """Take or extend the leader lease; True while this process leads."""
        was = self.token
        grant = self.lease.acquire()
        if grant.won and grant.new:
            log_event(log, "balancer.leading", logging.INFO, owner=self.owner, token=grant.token)
        elif not grant.won and was:
            log_event(log, "balancer.lost", logging.WARNING, owner=self.owner, holder=grant.owner)
        return grant.won

    def still_leading(self) -> bool:
        """Renew the lease if a third of it passed; False once the token is stale."""
        token = self.token
        if self.lease.renew():
            return True
        if token:
            log_event(log, "balancer.fenced", logging.WARNING, owner=self.owner, token=token)
        return False

    def step_down(self) -> None:
        """Give the lease back (a clean stop), so a standby takes over at once."""
        self.lease.release()

    # one round -----------------------------------------------------------------------------

    def one_round(self) -> Round:
        """Measure and, when the hysteresis says so, plan and move; a standby only checks the
        lease."""
        s = self.settings
        if not self.lead():
            return self._report(Round(False))
        try:
            m = measure(self.client, s.queues, s.window)
        except slots.SlotMidMoveError as stuck:
            # A leader killed mid-move left it: finish it first (the next round measures).
            if not self.still_leading():
                return self._report(Round(False))
            log_event(
                log,
                "balancer.finishing",
                logging.WARNING,
                slot=stuck.slot,
                queue=stuck.queue,
                partition=keys.label_of_fleet_id(stuck.partition),
                target=stuck.target,
            )
            finish_move(self.client, stuck, s.budget.migrate_timeout_ms)
            self.hysteresis.reset()
            return self._report(Round(True, self.token, finished_stuck_move=stuck.slot))
        if not self.still_leading():
            return self._report(Round(False))
        deviation = m.deviation(s.by)
        if not self.hysteresis.observe(deviation):
            return self._report(Round(True, self.token, deviation))
        self.hysteresis.reset()
        p = placement.place(m.units(s.by), m.primaries, s.tolerance)
        if not p.moves:
            return self._report(Round(True, self.token, deviation, True, p))
        log_event(
            log,
            "balancer.plan",
            logging.INFO,
            deviation=round(deviation, 4),
            moves=len(p.moves),
            bytes=p.bytes_moved,
            busiest_after=round(p.ratio_after, 4),
        )
        outcome = carry_out(
            self.connect,
            p.moves,
            s.budget,
            keep_going=self.still_leading,
            on_moved=lambda r: log_event(
                log,
                "balancer.moved",
                logging.INFO,
                slot=r.move.slot,
                source=r.move.source,
                target=r.move.target,
                bytes=r.move.bytes,
                migrate_ms=round(r.migrate_seconds * 1000, 1),
            ),
        )
        error = ""
        if outcome.error is not None:
            error = str(outcome.error)
            log_event(log, "balancer.stopped", logging.WARNING, error=error)
        return self._report(Round(True, self.token, deviation, True, p, outcome, error=error))

    def _report(self, r: Round) -> Round:
        self.rounds.append(r)
        del self.rounds[:-100]
        if r.leader and self.token:
            fields: dict[str, str | int | float] = {
                "leader": self.owner,
                "token": self.token,
                "at_ms": int(time.time() * 1000),
                "deviation": -1.0 if r.deviation is None else round(r.deviation, 4),
                "by": self.settings.by,
                "acted": int(r.acted),
                "moves": len(r.outcome.done) if r.outcome else 0,
                "bytes": r.outcome.bytes_moved if r.outcome else 0,
                "error": r.error,
            }
            with contextlib.suppress(ShardqError):  # advisory only
                self.client.run(one(fleet.balancer_report(fields)), "writing the status")
        return r

    def run(self, stop: threading.Event, rounds: int | None = None) -> None:
        """Round after round every ``interval`` seconds until ``stop`` is set (or ``rounds``
        are done); gives the lease back on the way out.  A round that fails (Redis away, a
        move refused) is logged and the next one tries again."""
        done = 0
        try:
            while not stop.is_set() and (rounds is None or done < rounds):
                started = time.monotonic()
                try:
                    r = self.one_round()
                except ShardqError as exc:
                    log_event(log, "balancer.error", logging.WARNING, error=str(exc))
                    self.hysteresis.reset()
                    r = Round(bool(self.token), self.token, error=str(exc))
                done += 1
                # A standby checks the lease at a third of its time, to take over soon.
                pause = self.settings.interval if r.leader else self.settings.lease_ms / 3000
                while not stop.is_set():
                    left = started + pause - time.monotonic()
                    if left <= 0:
                        break
                    stop.wait(min(left, self.settings.lease_ms / 3000))
                    if self.token and not self.still_leading():
                        break
        finally:
            self.step_down()


def status(client: Client) -> dict[str, str]:
    """The leader's last report (empty when no balancer ever led) and the lease's holder."""
    return client.run(one(fleet.balancer_status()), "reading the balancer's status")
