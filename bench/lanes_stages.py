"""Redis cost per job by stage with lanes off and on, side by side (bench.stages.stage_costs).

    python -m bench.lanes_stages [--url redis://127.0.0.1:7300] [--rounds 3] [--jobs 100000]

Each round runs the stages (bulk enqueue, single enqueue, promote K=100, fetch 100 per call,
ack 100 per call) on a fresh 64-partition queue with lanes off, then on (the order alternating
between rounds), and prints script and Redis CPU microseconds per job per stage and the Redis
memory per job while jobs wait in due and once due (ready stream, or lane), with the
calibration of the machine taken in the same round; then min-max per figure.
"""

from __future__ import annotations

import argparse
from typing import Any

from bench.common import calibrate, calibration_line
from bench.stages import stage_costs

STAGES = ("enqueue_bulk", "enqueue_single", "promote", "fetch", "ack")


def main() -> None:
    cli(__doc__, "lanes", {"off": {}, "on": {"lanes": True}})


def cli(doc: str | None, what: str, variants: dict[str, dict[str, Any]]) -> None:
    """The command line of a side-by-side stage bench: --url, --rounds, --jobs, then compare."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n")[0])
    parser.add_argument("--url", default="redis://127.0.0.1:7300")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=100_000)
    args = parser.parse_args()
    compare(args.url, args.rounds, args.jobs, what, variants)


def compare(
    url: str, rounds: int, jobs: int, what: str, variants: dict[str, dict[str, Any]]
) -> None:
    """Stage costs of two variants (keyword arguments of stage_costs) side by side, alternating
    their order between rounds; min-max per figure at the end."""
    (a, a_kw), (b, b_kw) = variants.items()
    seen: dict[tuple[str, str], list[float]] = {}
    for rnd in range(1, rounds + 1):
        print(f"round {rnd}: {calibration_line(calibrate(url))}", flush=True)
        for mode, kw in [(a, a_kw), (b, b_kw)] if rnd % 2 else [(b, b_kw), (a, a_kw)]:
            o = stage_costs(url, jobs=jobs, single_jobs=1_000, **kw)
            figures: dict[str, Any] = {}
            for st in STAGES:
                figures[f"{st} script us/job"] = o[st]["script_usec_per_job"]
                figures[f"{st} redis cpu us/job"] = o[st]["cpu_usec_per_job"]
            figures["total script us/job"] = o["total_script_usec_per_job"]
            figures["total redis cpu us/job"] = o["total_cpu_usec_per_job"]
            figures["memory B/job due"] = o["memory_bytes_per_job"]["due"]
            figures["memory B/job once due"] = o["memory_bytes_per_job"]["ready"]
            for name, value in figures.items():
                seen.setdefault((name, mode), []).append(value)
            print(
                f"  {what} {mode:<3} complete={o['complete']} "
                + ", ".join(f"{k} {v}" for k, v in figures.items()),
                flush=True,
            )
    print(f"min - max over {rounds} rounds: {what + ' ' + a:>30} {what + ' ' + b:>18}")
    for name in dict.fromkeys(n for n, _ in seen):
        cells = []
        for mode in (a, b):
            v = seen.get((name, mode), [])
            cells.append(f"{min(v)} - {max(v)}" if v else "-")
        print(f"  {name:<30} {cells[0]:>18} {cells[1]:>18}")


if __name__ == "__main__":
    main()
