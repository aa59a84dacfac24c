"""Redis cost per job by stage, compact waiting jobs (queue layout 3) against the plain layout
(layout 2), side by side (bench.stages.stage_costs through bench.lanes_stages.compare).

    python -m bench.compact_stages [--url redis://127.0.0.1:7300] [--rounds 3] [--jobs 100000]

Each round runs the stages (bulk enqueue, single enqueue, promote K=100, fetch 100 per call,
ack 100 per call) on a fresh 64-partition queue of each layout, the order alternating between
rounds, and prints script and Redis CPU microseconds per job per stage and the Redis memory per
job while jobs wait in due and once due, with the calibration taken in the same round; then
min-max per figure.
"""

from __future__ import annotations

from bench.lanes_stages import cli


def main() -> None:
    cli(__doc__, "layout", {"3": {}, "2": {"layout": 2}})


if __name__ == "__main__":
    main()
