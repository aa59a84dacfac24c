"""The late-binding check on shardq/'s source, no Redis: no comprehension hands out a generator
over its loop variable (the bug that made listings name the wrong partition; the listings
themselves are checked against Redis in tests/integration/test_listing_partitions.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "shardq"


# Calls that consume a generator argument before they return: a generator passed to one of these
# inside a comprehension sees the current loop variable.  Anything else (heapq.merge, map,
# itertools.chain, a generator kept in the result) may run after the loop.
EAGER = {"sum", "min", "max", "any", "all", "list", "tuple", "set", "frozenset", "dict",
         "sorted", "len", "join", "extend", "update", "Counter"}  # fmt: skip


COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def _free_names(node: ast.expr) -> set[str]:
    bound: set[str] = set()
    if isinstance(node, ast.Lambda):
        bound = {a.arg for a in [*node.args.args, *node.args.kwonlyargs]}
    elif isinstance(node, ast.GeneratorExp):
        bound = {
            n.id for g in node.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)
        }
    # A generator evaluates its first iterable at once: only the rest runs late.
    late: list[ast.AST] = [node]
    if isinstance(node, ast.GeneratorExp):
        first = node.generators[0]
        late = [node.elt, first.target, *first.ifs, *node.generators[1:]]
    used = {n.id for part in late for n in ast.walk(part) if isinstance(n, ast.Name)}
    return used - bound


def _lazy(node: ast.AST) -> list[ast.expr]:
    """Generators and lambdas under ``node`` that may be evaluated after it is built."""
    if isinstance(node, ast.GeneratorExp | ast.Lambda):
        return [node]
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        args = [] if name in EAGER else [*node.args, *(k.value for k in node.keywords)]
        return [x for a in args for x in _lazy(a)] + _lazy(func)
    return [x for child in ast.iter_child_nodes(node) for x in _lazy(child)]


def late_bindings(source: str) -> list[tuple[int, set[str]]]:
    found = []
    for comp in ast.walk(ast.parse(source)):
        if not isinstance(comp, COMPREHENSIONS):
            continue
        targets = {
            n.id for g in comp.generators for n in ast.walk(g.target) if isinstance(n, ast.Name)
        }
        parts = [comp.key, comp.value] if isinstance(comp, ast.DictComp) else [comp.elt]
        for part in parts:
            for lazy in _lazy(part):
                if hit := _free_names(lazy) & targets:
                    found.append((lazy.lineno, hit))
    return found


def test_the_late_binding_check_finds_the_listing_bug() -> None:
    buggy = "m = heapq.merge(*(((d, p) for d in rows) for p, rows in enumerate(pages)))"
    assert late_bindings(buggy) == [(1, {"p"})]
    assert late_bindings("m = [map(lambda r: (r, p), rows) for p, rows in pages]") == [(1, {"p"})]
    fixed = "m = heapq.merge(*([(d, p) for d in rows] for p, rows in enumerate(pages)))"
    assert late_bindings(fixed) == []
    assert late_bindings("w = [max(len(r[i]) for r in cells) for i in range(3)]") == []


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_no_comprehension_hands_out_a_generator_over_its_loop_variable(path: Path) -> None:
    assert late_bindings(path.read_text()) == [], f"{path}: late-bound loop variables"
