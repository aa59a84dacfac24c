"""Placing slots so that the load evens out over Redis primaries: the slot moves
``shardq rebalance plan`` prints.

Pure arithmetic, no Redis: the input is what :func:`shardq.admin.slots.slot_usage` (and the
queue's rates) measured: each slot holding a queue's partition, the primary serving it, its
load and its bytes.  The output is an ordered list of moves for :func:`shardq.admin.slots.move`.

**The unit is the slot, not the partition.**  A move carries every key of a slot; two
partitions (of different queues) sharing one slot can only move together, so they are one
unit here, with their loads and bytes summed.

**The goal.**  Every primary's load within ``tolerance`` of the mean (both sides: a primary
far below the mean, such as one just added, is as much a miss as one above it), moving the
fewest bytes, since bytes are what a move costs (MIGRATE pauses both primaries about 2 us per
waiting job, docs/capacity.md §3.2).  That is a bin-packing problem, so:

1. **Greedy**: while some primary is outside the band, take the move that removes the most
   "violation" (the sum of every primary's distance outside the band) per byte moved.  A move
   may not raise a primary above the busiest primary's load nor lower one below the least
   busy one's, so the busiest/mean ratio never rises and the least/mean never falls.
2. **Prune**: undo moved slots, largest first, when the placement stays as good without them
   (a slot moved away and back, or a move a later one made unnecessary).
3. **Exact** on small cases: a depth-first search over every assignment, bounded by the
   greedy result's bytes, within a budget of search nodes.  When it finishes, the plan is
   the proven fewest-bytes one (``optimal``), or the tolerance is proven impossible.

When the tolerance cannot be met (a slot heavier alone than mean + tolerance, or slots too
coarse for the band) the plan is the greedy's best effort and ``reason`` says why.
Deterministic: the same input gives the same plan (ties go to the lower slot, then to the
primary that sorts first).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

#: Search nodes the exact pass may visit before it gives up (a fraction of a second).
SEARCH_BUDGET = 200_000
#: The exact pass runs only on this few slots (the greedy's result is kept above it).
EXACT_MAX_UNITS = 24


@dataclass(frozen=True, slots=True)
class Unit:
    """One slot that holds partitions being balanced: it moves as a whole."""

    slot: int
    node: str  # "host:port" of the primary serving it now
    load: float  # in the unit of the balanced figure (jobs/s, or bytes)
    bytes: int  # what a move of it carries: every key of the slot
    partitions: tuple[tuple[str, int], ...] = ()  # (queue, partition) in the slot


@dataclass(frozen=True, slots=True)
class Move:
    slot: int
    partitions: tuple[tuple[str, int], ...]
    source: str
    target: str
    bytes: int
    load: float


@dataclass(frozen=True, slots=True)
class Placement:
    """A placement: the slot moves in order, and the load per primary before and after them."""

    moves: tuple[Move, ...]
    tolerance: float  # a fraction of the mean (0.1: within 10 %)
    mean: float
    before: dict[str, float]
    after: dict[str, float]
    within_tolerance: bool  # after the moves
    optimal: bool  # fewest bytes proven by the exact pass (or nothing to move)
    reason: str = ""  # why the tolerance is not met ("" when it is)
    heavy: tuple[Unit, ...] = field(default=())  # slots heavier alone than mean + tolerance

    @property
    def bytes_moved(self) -> int:
        return sum(m.bytes for m in self.moves)

    @property
    def ratio_before(self) -> float:
        return _ratio(max(self.before.values(), default=0.0), self.mean)

    @property
    def ratio_after(self) -> float:
        return _ratio(max(self.after.values(), default=0.0), self.mean)

    @property
    def least_before(self) -> float:
        return _ratio(min(self.before.values(), default=0.0), self.mean)

    @property
    def least_after(self) -> float:
        return _ratio(min(self.after.values(), default=0.0), self.mean)


def _ratio(value: float, mean: float) -> float:
    return value / mean if mean > 0 else 1.0


def deviation(loads: Mapping[str, float]) -> float:
    """The largest distance of a primary's load from the mean, as a fraction of the mean."""
    if not loads:
        return 0.0
    mean = sum(loads.values()) / len(loads)
    if mean <= 0:
        return 0.0
    return max(abs(v - mean) for v in loads.values()) / mean


def loads_of(
    units: Iterable[Unit],
    assignment: Mapping[int, str],
    primaries: Iterable[str],
    base: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Load per primary when each unit's slot is on ``assignment[slot]``."""
    out = {n: float((base or {}).get(n, 0.0)) for n in primaries}
    for u in units:
        out[assignment[u.slot]] += u.load
    return out


def place(
    units: Sequence[Unit],
    primaries: Iterable[str],
    tolerance: float,
    base: Mapping[str, float] | None = None,
    search_budget: int = SEARCH_BUDGET,
) -> Placement:
    """The moves that bring every primary's load within ``tolerance`` (a fraction) of the mean
    with the fewest bytes moved; see the module docstring.  ``base`` is load on a primary that
    no move can take away (counted in the mean, never moved).  Raises ValueError on input that
    does not describe a placement (a unit on a primary not listed, a slot twice, a negative
    load or size)."""
    nodes = sorted(set(primaries))
    if not nodes:
        raise ValueError("no primaries to place slots on")
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, not {tolerance!r}")
    todo = sorted(units, key=lambda u: u.slot)
    seen: set[int] = set()
    for u in todo:
        if u.node not in nodes:
            raise ValueError(f"slot {u.slot} is on {u.node}, which is not one of {nodes}")
        if u.slot in seen:
            raise ValueError(f"slot {u.slot} is listed twice")
        if u.load < 0 or u.bytes < 0:
            raise ValueError(f"slot {u.slot} has a negative load or size")
        seen.add(u.slot)
    base = {n: float((base or {}).get(n, 0.0)) for n in nodes}
    start = {u.slot: u.node for u in todo}
    before = loads_of(todo, start, nodes, base)
    total = sum(before.values())
    mean = total / len(nodes)
    eps = 1e-9 * max(1.0, mean)
    hi, lo = mean * (1 + tolerance) + eps, mean * (1 - tolerance) - eps
    heavy = tuple(u for u in todo if u.load > hi)

    def result(assignment: dict[int, str], order: list[int], optimal: bool) -> Placement:
        after = loads_of(todo, assignment, nodes, base)
        ok = all(lo <= v <= hi for v in after.values())
        by_slot = {u.slot: u for u in todo}
        moves = tuple(
            Move(
                s, by_slot[s].partitions, start[s], assignment[s], by_slot[s].bytes, by_slot[s].load
            )
            for s in order
            if assignment[s] != start[s]
        )
        reason = ""
        if not ok:
            band = f"{mean * (1 - tolerance):,.6g}-{mean * (1 + tolerance):,.6g}"
            if heavy:
                names = ", ".join(_unit_name(u) for u in heavy)
                reason = (
                    f"{names} alone carr{'y' if len(heavy) > 1 else 'ies'} more than the mean "
                    f"+ {tolerance:.0%} ({band}): no placement meets the tolerance; more "
                    "partitions would split that load"
                )
            elif optimal:
                reason = (
                    f"no placement of these {len(todo)} slots over {len(nodes)} primaries "
                    f"puts every primary within {band} (exhaustive search): the slots are too "
                    "coarse for the tolerance; more partitions or a wider tolerance"
                )
            else:
                reason = (
                    f"the planner found no placement of these {len(todo)} slots over "
                    f"{len(nodes)} primaries within {band}; this is the closest it found"
                )
        return Placement(moves, tolerance, mean, before, after, ok, optimal and ok, reason, heavy)

    if total <= 0 or all(lo <= v <= hi for v in before.values()):
        return result(dict(start), [], True)

    assignment, order = _greedy(todo, nodes, start, base, lo, hi, eps)
    assignment = _prune(todo, nodes, start, assignment, base, lo, hi, eps, before)
    greedy_ok = all(lo <= v <= hi for v in loads_of(todo, assignment, nodes, base).values())
    if len(todo) > EXACT_MAX_UNITS or heavy:
        return result(assignment, order, False)
    bound = _bytes_moved(todo, start, assignment) if greedy_ok else None
    found, finished = _exact(todo, nodes, start, base, lo, hi, bound, search_budget)
    if found is not None:
        exact_order = [
            u.slot
            for u in sorted(todo, key=lambda u: (-u.load, u.slot))
            if found[u.slot] != start[u.slot]
        ]
        return result(found, exact_order, finished)
    # Nothing better than the greedy's: proven optimal if the search finished and the greedy
    # met the tolerance; proven impossible if it finished and the greedy did not.
    return result(assignment, order, finished)


def _unit_name(u: Unit) -> str:
    parts = ", ".join(f"{q}/{p}" for q, p in u.partitions) or "?"
    return f"slot {u.slot} (partition {parts})"


def _bytes_moved(units: Sequence[Unit], start: Mapping[int, str], now: Mapping[int, str]) -> int:
    return sum(u.bytes for u in units if now[u.slot] != start[u.slot])


def _outside(v: float, lo: float, hi: float) -> float:
    return max(0.0, v - hi) + max(0.0, lo - v)


def _greedy(
    units: Sequence[Unit],
    nodes: list[str],
    start: dict[int, str],
    base: dict[str, float],
    lo: float,
    hi: float,
    eps: float,
) -> tuple[dict[int, str], list[int]]:
    assignment = dict(start)
    loads = loads_of(units, assignment, nodes, base)
    top, bottom = max(loads.values()), min(loads.values())
    order: list[int] = []
    scale = max(hi, 1e-300)
    # Per primary, its movable slots best-first while a move is "linear" (below): lazy heaps,
    # an entry stale once its slot has moved.  Without them each step scanned every slot,
    # and a step per move made 4,096 slots piled on one primary take 35 s to plan.
    on: dict[str, list[tuple[float, int, float, int]]] = {n: [] for n in nodes}
    by_slot = {u.slot: u for u in units}
    for u in units:
        if u.load > 0:
            on[u.node].append(_static_key(u))
    for heap in on.values():
        heapq.heapify(heap)
    max_load = max((u.load for u in units), default=0.0)

    def key_of(u: Unit, s: str, t: str) -> tuple[float, int, float, float, int, str] | None:
        new_s, new_t = loads[s] - u.load, loads[t] + u.load
        if new_t > top + eps or new_s < bottom - eps:
            return None  # would make the busiest busier or the idlest idler
        gain = (
            _outside(loads[s], lo, hi)
            + _outside(loads[t], lo, hi)
            - _outside(new_s, lo, hi)
            - _outside(new_t, lo, hi)
        )
        if gain <= eps:
            return None
        # (rounded, so float noise does not break a tie the wrong way)
        return (
            -round(gain / scale / (u.bytes + 1), 12),
            u.bytes,
            u.load,
            round(new_t / scale, 12),
            u.slot,
            t,
        )

    # Each step lowers the total violation, so no placement repeats; the cap is a backstop.
    for _ in range(4 * len(units) + 4):
        over = {n for n in nodes if loads[n] > hi}
        under = {n for n in nodes if loads[n] < lo}
        if not over and not under:
            break
        # (-gain per byte, bytes, load, target's load after, slot, target): on a tie the
        # lighter slot moves (a lone hot slot is not carried from one primary to another for
        # nothing), to the least loaded primary.
        best: tuple[float, int, float, float, int, str] | None = None
        best_unit: Unit | None = None
        # For a given slot the best target is always the least loaded other primary: the
        # violation is convex in a primary's load, so adding the slot where the load is lowest
        # raises it least (and lowers the under-violation most).  One target per source, then.
        ranked = sorted(nodes, key=lambda n: (loads[n], n))
        # Primaries above the band first: their moves gain most, so the bound below spares
        # scanning the others' slots (a filled target near the band holds many).
        for s in sorted(nodes, key=lambda n: (n not in over, n)):
            t = ranked[0] if ranked[0] != s else ranked[1] if len(ranked) > 1 else s
            # A move lowers the violation only from a primary above the band or to one below.
            if t == s or (s not in over and t not in under):
                continue
            heap = on[s]
            while heap and assignment[heap[0][3]] != s:
                heapq.heappop(heap)  # moved away since
            if not heap:
                continue
            # Linear: no slot of s, moved, takes s or t across an edge of the band or past an
            # extreme.  Then a move's gain is c x its load for one c (1 per side that stays
            # outside the band, 0 per side that stays inside), so the best slot is the one of
            # most load per byte, the heap's top, and with c = 0 there is none.  Otherwise
            # (near the band: few steps) every slot of s is tried.
            ls, lt = loads[s], loads[t]
            c_s = 1 if ls - max_load >= hi else 0 if lo <= ls - max_load and ls <= hi else None
            c_t = 1 if lt + max_load <= lo else 0 if lo <= lt and lt + max_load <= hi else None
            candidates: Iterable[Unit]
            if (
                c_s is not None
                and c_t is not None
                and lt + max_load <= top + eps
                and ls - max_load >= bottom - eps
            ):
                if c_s + c_t == 0:
                    continue
                # (a top of load within float noise gains nothing: then try them all)
                top_unit = by_slot[heap[0][3]]
                if key_of(top_unit, s, t) is not None:
                    candidates = (top_unit,)
                else:
                    candidates = (by_slot[e[3]] for e in heap if assignment[e[3]] == s)
            else:
                # A move gains at most its load on each side that was outside the band, so
                # no slot of s beats the best so far if twice (once) its top ratio does not.
                # (the keys are rounded to 12 decimals: a margin of one unit of that)
                bound = (2 if s in over else 1) * -heap[0][0] / scale
                if best is not None and -best[0] > bound + 1e-12:
                    continue
                candidates = (by_slot[e[3]] for e in heap if assignment[e[3]] == s)
            for u in candidates:
                key = key_of(u, s, t)
                if key is not None and (best is None or key < best):
                    best, best_unit = key, u
        if best is None or best_unit is None:
            break
        source, target = assignment[best_unit.slot], best[5]
        loads[source] -= best_unit.load
        loads[target] += best_unit.load
        assignment[best_unit.slot] = target
        heapq.heappush(on[target], _static_key(best_unit))
        if best_unit.slot in order:
            order.remove(best_unit.slot)
        order.append(best_unit.slot)
    return assignment, order


def _static_key(u: Unit) -> tuple[float, int, float, int]:
    """A slot's rank in a linear move (gain = 2 x load): most load per byte first, then as the
    step's key breaks ties (fewer bytes, lighter, lower slot)."""
    return (-u.load / (u.bytes + 1), u.bytes, u.load, u.slot)


def _prune(
    units: Sequence[Unit],
    nodes: list[str],
    start: dict[int, str],
    assignment: dict[int, str],
    base: dict[str, float],
    lo: float,
    hi: float,
    eps: float,
    before: Mapping[str, float],
) -> dict[int, str]:
    """Send moved slots back home, largest first, while that is no worse."""
    top, bottom = max(before.values()), min(before.values())

    def score(loads: Mapping[str, float]) -> tuple[float, float, float]:
        return (
            sum(_outside(v, lo, hi) for v in loads.values()),
            max(loads.values()),
            min(loads.values()),
        )

    current = dict(assignment)
    loads = loads_of(units, current, nodes, base)
    now = score(loads)
    for u in sorted(units, key=lambda u: (-u.bytes, u.slot)):
        here, home = current[u.slot], start[u.slot]
        if here == home:
            continue
        # Tried on the loads of two primaries (each trial costs the primaries, not the slots)
        trial = {**loads, here: loads[here] - u.load, home: loads[home] + u.load}
        got = score(trial)
        if got[0] <= now[0] + eps and got[1] <= top + eps and got[2] >= bottom - eps:
            current[u.slot] = home
            loads = loads_of(units, current, nodes, base)  # summed afresh: no float drift
            now = score(loads)
    return current


def _exact(
    units: Sequence[Unit],
    nodes: list[str],
    start: dict[int, str],
    base: dict[str, float],
    lo: float,
    hi: float,
    bound: int | None,
    budget: int,
) -> tuple[dict[int, str] | None, bool]:
    """The fewest-bytes assignment within [lo, hi] that moves fewer bytes than ``bound``
    (any, when None), and whether the search finished within ``budget`` nodes."""
    order = sorted(units, key=lambda u: (-u.load, u.slot))  # heavy first: prunes sooner
    remaining = [0.0] * (len(order) + 1)
    for i in range(len(order) - 1, -1, -1):
        remaining[i] = remaining[i + 1] + order[i].load
    loads = dict(base)
    chosen: dict[int, str] = {}
    best: dict[int, str] | None = None
    best_bytes = bound if bound is not None else None
    visited = 0

    def walk(i: int, spent: int) -> bool:
        nonlocal best, best_bytes, visited
        visited += 1
        if visited > budget:
            return False
        if best_bytes is not None and spent >= best_bytes:
            return True
        if sum(max(0.0, lo - v) for v in loads.values()) > remaining[i]:
            return True  # what is left cannot lift every primary to the band
        if i == len(order):
            best, best_bytes = dict(chosen), spent
            return True
        u = order[i]
        home = start[u.slot]
        for n in [home, *(n for n in nodes if n != home)]:
            if loads[n] + u.load > hi:
                continue  # loads only grow as slots are placed
            loads[n] += u.load
            chosen[u.slot] = n
            done = walk(i + 1, spent + (0 if n == home else u.bytes))
            loads[n] -= u.load
            if not done:
                return False
        return True

    finished = walk(0, 0)
    return best, finished
