"""How long `shardq rebalance plan` takes to plan, by slot count (no Redis).

    python -m bench.placement_plan [--slots 1024,4096,16384] [--primaries 30] [--rounds 3]

Every slot piled on one of ``--primaries`` primaries (the worst case: the most moves), loads
1-2 and 2,000-2,500 bytes each, tolerance 10 %; prints seconds to plan (min-max over rounds),
the moves and busiest/mean after, with the CPU-loop calibration of the run.
"""

from __future__ import annotations

import argparse
import random
import time

from bench.common import cpu_loop_rate
from shardq.admin import placement


def units(n: int, seed: int = 1) -> list[placement.Unit]:
    rnd = random.Random(seed)
    return [
        placement.Unit(s, "p0", 1.0 + rnd.random(), 2000 + rnd.randint(0, 500), (("q", s),))
        for s in range(n)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slots", default="1024,4096,16384")
    parser.add_argument("--primaries", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    nodes = [f"p{i}" for i in range(args.primaries)]
    print(f"calibration: python CPU loop {cpu_loop_rate() / 1e6:.1f} M iter/s")
    for n in (int(x) for x in args.slots.split(",")):
        slots = units(n)
        took = []
        for _ in range(args.rounds):
            start = time.perf_counter()
            plan = placement.place(slots, nodes, 0.1)
            took.append(time.perf_counter() - start)
        print(
            f"{n:>6} slots on 1 of {args.primaries} primaries: plan {min(took):.2f}-"
            f"{max(took):.2f} s, {len(plan.moves)} moves, busiest/mean "
            f"{plan.ratio_before:.1f} -> {plan.ratio_after:.3f}"
        )


if __name__ == "__main__":
    main()
