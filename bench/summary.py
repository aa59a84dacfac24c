"""Min-max of every figure over several runs of the benchmark suite, with each run's calibration.

    python -m bench --out results/bench/run-1.json    # three times (or more)
    python -m bench.summary results/bench/run-*.json  # the figures the docs quote

The docs quote a figure as ``min-max`` over the runs named here, beside the calibration of
each run (this interpreter's CPU loop, the nodes' PING rate and the load average, measured in
the same run), because the machine's speed moves by a third from day to day.  Every numeric
leaf of the runs' ``results`` is listed by its path (list items by their position, or by
their ``jobs``/``k``/``rate``/``partitions`` field when they have one).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from bench.common import calibration_line

LABELS = ("scenario", "design", "rate", "k", "jobs_per_s", "partitions", "jobs", "waiting", "mode")


def _label(item: Any, index: int) -> str:
    if isinstance(item, dict):
        parts = [f"{k}={item[k]}" for k in LABELS if k in item and not isinstance(item[k], dict)]
        if parts:
            return "[" + ",".join(parts[:3]) + "]"
    return f"[{index}]"


def leaves(value: Any, path: str = "") -> dict[str, float]:
    """Every numeric leaf of ``value`` by its path."""
    out: dict[str, float] = {}
    if isinstance(value, bool):
        return out
    if isinstance(value, int | float):
        out[path] = float(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            out.update(leaves(v, f"{path}.{k}" if path else str(k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.update(leaves(v, f"{path}{_label(v, i)}"))
    return out


def _fmt(x: float) -> str:
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def summarize(docs: list[dict[str, Any]]) -> list[tuple[str, float, float, int]]:
    """(path, min, max, runs that have it) of every figure."""
    per_run = [leaves(d.get("results", {})) for d in docs]
    paths: list[str] = []
    for run in per_run:
        paths += [p for p in run if p not in paths]
    rows = []
    for p in paths:
        values = [run[p] for run in per_run if p in run]
        rows.append((p, min(values), max(values), len(values)))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.summary", description=__doc__)
    parser.add_argument("runs", nargs="+", help="JSON documents of `python -m bench --out`")
    parser.add_argument("--grep", default="", help="only paths containing this")
    args = parser.parse_args(argv)
    docs = [orjson.loads(Path(p).read_bytes()) for p in args.runs]
    out = sys.stdout
    out.write(f"{len(docs)} runs\n")
    for path, doc in zip(args.runs, docs, strict=True):
        cal = doc.get("calibration", {})
        line = "; ".join(
            f"{where}: {calibration_line(c)}" for where, c in cal.items() if isinstance(c, dict)
        )
        out.write(f"  {path}: {doc.get('environment', {}).get('started_utc', '?')}  {line}\n")
    for path, lo, hi, n in summarize(docs):
        if args.grep and args.grep not in path:
            continue
        span = _fmt(lo) if lo == hi else f"{_fmt(lo)} - {_fmt(hi)}"
        out.write(f"{path:<90} {span}{'' if n == len(docs) else f'  ({n} runs)'}\n")


if __name__ == "__main__":
    main()
