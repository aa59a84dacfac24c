"""Every module of the benchmarks (bench/) and the wire tools (wire/) imports: a rename in shardq
(bench/move_lateness.py once imported names the package no longer exported) breaks a bench nobody
runs until its figure is due."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts)
    for p in [*ROOT.glob("bench/*.py"), *ROOT.glob("bench/*/*.py"), *ROOT.glob("wire/*.py")]
    if p.name != "__main__.py" and "node_modules" not in p.parts
)


@pytest.mark.parametrize("module", MODULES)
def test_the_bench_module_imports(module: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # bench/handlers/* open their run log at import, named by the environment
    monkeypatch.setenv("SHARDQ_BENCH_RUNLOG", "/dev/null")
    importlib.import_module(module)
