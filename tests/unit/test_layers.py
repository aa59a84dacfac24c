"""The layers contract of shardq/ (issue 23 item 4; the lead's DESIGN-23.md), checked on the source.

Every module of ``shardq/`` is parsed with :mod:`ast`.  Each import of a shardq module is an
edge from the importing module to the module it names, at any depth:

- imports inside a function count like top-level ones: a lazy import that reaches up a layer
  is still a dependency (and a cycle) in the design, only deferred;
- imports under ``if TYPE_CHECKING:`` count too: they do not run, but they say the module
  depends on that type, and the simplest honest rule is that every import is a dependency.

``from shardq.store import keys`` is an edge to ``shardq.store.keys``; ``from shardq.worker
import Worker`` one to the package ``shardq.worker`` (its ``__init__``).  Importing a submodule
also runs its package's ``__init__``, but that is not counted as an edge of the importer: the
``__init__`` is a module of its own, checked by its own imports.

The test fails on (a) an import of a higher layer, (b) a store leaf importing a store module
that is not a leaf, (c) an import cycle between modules, (d) a module with no layer, (e) more
than one CLI module loading the dev tools; except for the edges in ``KNOWN``, each of which
names the work package that removes it.  A ``KNOWN`` edge that is gone must leave the list.
No Redis needed.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "shardq"

BASE, CONNECTION, MODELS, STORE, SERVICES, ROLES, FACADES, INTERFACES, DEV = range(9)
LAYER_NAMES = [
    "L0 base",
    "L1 connection",
    "L2 models",
    "L3 store",
    "L4 services",
    "L5 roles",
    "L6 facades",
    "L7 interfaces",
    "L8 dev",
]

# A module's layer: the longest name here that is the module or a package holding it.
# Modules that move later (issue 23 item 5) are placed by name in the layer they move to.
LAYERS: dict[str, int] = {
    "shardq.errors": BASE,
    "shardq.config": BASE,
    "shardq.names": BASE,
    "shardq.backoff": BASE,
    "shardq.logs": BASE,
    "shardq.connection": CONNECTION,
    "shardq.jobs": MODELS,
    "shardq.limits": MODELS,
    "shardq.tasks": MODELS,
    "shardq.schedules": MODELS,
    "shardq.workflows": MODELS,
    "shardq.tracing": MODELS,
    "shardq.store": STORE,
    # The checked-number parser: IO-free, it imports only errors and config, and the models
    # parse their stored definitions with it (a schedule's JSON): base, though it lives in store/.
    "shardq.store.numbers": BASE,
    "shardq.plans": SERVICES,
    "shardq.metrics": SERVICES,
    "shardq.runtime": SERVICES,
    "shardq.worker": ROLES,
    "shardq.dispatcher": ROLES,
    "shardq.client": FACADES,
    "shardq.aio": FACADES,
    "shardq.inspector": FACADES,
    "shardq.admin": FACADES,
    "shardq.cli": INTERFACES,
    "shardq.web": INTERFACES,
    "shardq.format": INTERFACES,  # shared by cli/ and web/ only
    # The example handlers the manifests run: user code, on top of the public API.
    "shardq.examples": INTERFACES,
    "shardq.dev": DEV,
}
NAME_PREFIXES: dict[str, int] = {}

# The package root re-exports the public names.  As an importer it is exempt; as a target it
# stands for what it re-exports (Client, Inspector: facades), so only L6 and up may import it.
ROOT_PACKAGE = "shardq"
ROOT_LAYER = FACADES

# Within store/: these import no store module but each other (never transport or ops).
STORE_LEAVES = {
    "shardq.store.keys",
    "shardq.store.partitioning",
    "shardq.store.layout",
    "shardq.store.numbers",
    "shardq.store.codes",
    "shardq.store.faults",
    "shardq.store.op",
    "shardq.store.loader",
    "shardq.store.contracts",
    "shardq.store.envelope",
}

_FACADE_CYCLE = "removed by the plans/ work package (issue 23 item 1)"
# Edges still allowed for now: importer -> imported, and why it may stay until when.
KNOWN: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imports_of(name: str, path: Path, modules: set[str]) -> Iterator[tuple[str, bool]]:
    """The shardq modules ``name`` (at ``path``) imports, each with whether that import is
    inside a function (lazy)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))

    def resolve(target: str) -> str | None:
        # "shardq.store.keys.slot_of" names the module shardq.store.keys.
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    def visit(node: ast.AST, lazy: bool) -> Iterator[tuple[str, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.split(".")[0] == "shardq":
                        found = resolve(alias.name)
                        if found:
                            yield found, lazy
            elif isinstance(child, ast.ImportFrom):
                if child.level:  # relative: from .x import y
                    parts = package.split(".")
                    base = parts[: len(parts) - child.level + 1]
                    source = ".".join(base + ([child.module] if child.module else []))
                else:
                    source = child.module or ""
                if source.split(".")[0] != "shardq":
                    continue
                for alias in child.names:
                    # "from shardq.store import keys" imports the module shardq.store.keys.
                    found = resolve(f"{source}.{alias.name}")
                    if found:
                        yield found, lazy
            function = isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            yield from visit(child, lazy or function)

    for target, lazy in visit(tree, False):
        if target != name:
            yield target, lazy


def layer_of(name: str) -> int | None:
    if name == ROOT_PACKAGE:
        return ROOT_LAYER
    best: tuple[int, int] | None = None
    for prefix, layer in LAYERS.items():
        covers = name == prefix or name.startswith(prefix + ".")
        if covers and (best is None or len(prefix) > best[0]):
            best = (len(prefix), layer)
    if best is not None:
        return best[1]
    for prefix, layer in NAME_PREFIXES.items():
        if name.startswith(prefix):
            return layer
    return None


Graph = dict[str, dict[str, bool]]


def graph() -> Graph:
    """Module -> {imported module: whether every import of it there is lazy}."""
    modules = all_modules()
    names = set(modules)
    edges: Graph = {}
    for name, path in modules.items():
        out: dict[str, bool] = {}
        for target, lazy in imports_of(name, path, names):
            out[target] = out.get(target, True) and lazy
        edges[name] = out
    return edges


def violations(edges: Graph) -> list[tuple[str, str, str]]:
    """(importer, imported, why) for each edge the layers forbid."""
    found = []
    dev_loaders = []
    for name, out in sorted(edges.items()):
        if name == ROOT_PACKAGE:
            continue
        mine = layer_of(name)
        for target, lazy in sorted(out.items()):
            theirs = layer_of(target)
            if mine is None or theirs is None:
                continue  # test_every_module_has_a_layer names it
            if mine == INTERFACES and theirs == DEV and lazy:
                # The one way in to the dev tools: lazily, from one CLI module (checked below).
                dev_loaders.append((name, target))
            elif theirs > mine:
                found.append((name, target, f"{LAYER_NAMES[mine]} imports {LAYER_NAMES[theirs]}"))
            elif (
                name in STORE_LEAVES
                and target.startswith("shardq.store.")
                and target not in STORE_LEAVES
            ):
                found.append((name, target, "a store leaf imports a store module above the leaves"))
    if len({name for name, _ in dev_loaders}) > 1:
        for name, target in dev_loaders:
            found.append((name, target, "more than one CLI module loads the dev tools"))
    return found


def components(edges: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted: the
    import cycles."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return found


def shortest_cycle(edges: Graph, component: list[str], through: str) -> list[str]:
    """A shortest cycle through ``through`` inside ``component``, for a failure message."""
    members = set(component)
    paths = {through: [through]}
    frontier = [through]
    while frontier:
        following = []
        for v in frontier:
            for w in sorted(edges.get(v, {})):
                if w == through:
                    return paths[v] + [through]
                if w in members and w not in paths:
                    paths[w] = paths[v] + [w]
                    following.append(w)
        frontier = following
    return component


def new_cycles(edges: Graph, known: set[tuple[str, str]]) -> list[str]:
    """A line per import cycle that holds an edge not in ``known``: every cycle is found on
    the whole graph, so a new module that closes a cycle with known edges is found too."""
    lines = []
    for component in components(edges):
        inside = {(a, b) for a in component for b in edges.get(a, {}) if b in component}
        for a, b in sorted(inside - known):
            cycle = shortest_cycle(edges, component, a)
            lines.append(f"{a} -> {b}, in the cycle {' -> '.join(cycle)}")
    return lines


# -- the contract ---------------------------------------------------------------------------


def test_every_module_has_a_layer() -> None:
    missing = [name for name in all_modules() if layer_of(name) is None]
    assert not missing, f"modules with no layer: {missing}: place them in LAYERS ({__file__})"


def test_no_module_imports_a_higher_layer() -> None:
    bad = [v for v in violations(graph()) if (v[0], v[1]) not in KNOWN]
    assert not bad, "imports against the layers (issue 23, DESIGN-23.md):\n" + "\n".join(
        f"  {a} -> {b}: {why}" for a, b, why in bad
    )


def test_no_import_cycle() -> None:
    found = new_cycles(graph(), set(KNOWN))
    assert not found, "import cycles:\n" + "\n".join(f"  {line}" for line in found)


def test_known_edges_still_exist() -> None:
    """A KNOWN edge that is gone leaves the list, so it cannot come back unnoticed."""
    edges = graph()
    gone = sorted((a, b) for a, b in KNOWN if b not in edges.get(a, {}))
    assert not gone, f"KNOWN edges no longer in the code, remove them from KNOWN: {gone}"


# -- the checker can fail -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        # lazy, inside a function
        ("shardq.jobs", "def f():\n    from shardq.client import Client\n",
         [("shardq.client", "L2 models imports L6 facades")]),
        # under TYPE_CHECKING; a package (its __init__) like a module
        ("shardq.limits", "if TYPE_CHECKING:\n    from shardq import store\n",
         [("shardq.store", "L2 models imports L3 store")]),
        ("shardq.limits", "if TYPE_CHECKING:\n    from shardq.store.keys import slot_of\n",
         [("shardq.store.keys", "L2 models imports L3 store")]),
        ("shardq.connection", "import shardq.runtime.supervisor\n",
         [("shardq.runtime.supervisor", "L1 connection imports L4 services")]),
        ("shardq.store.keys", "from shardq.store import transport\n",
         [("shardq.store.transport", "a store leaf imports a store module above the leaves")]),
        ("shardq.store.keys", "from . import codes\nfrom .op import Op\n", []),
        ("shardq.store.op", "from .. import client\n",
         [("shardq.client", "L3 store imports L6 facades")]),
        # the package root stands for the facades it re-exports
        ("shardq.worker.fetcher", "from shardq import Client\n",
         [("shardq", "L5 roles imports L6 facades")]),
        ("shardq.cli.job", "def f():\n    from shardq.dev import devcluster\n", []),
        ("shardq.cli.job", "from shardq.dev import devcluster\n",
         [("shardq.dev.devcluster", "L7 interfaces imports L8 dev")]),
    ],
)  # fmt: skip
def test_the_checker_finds_upward_imports(
    module: str, source: str, expected: list[tuple[str, str]], tmp_path: Path
) -> None:
    path = tmp_path / "module.py"
    path.write_text(source)
    edges: Graph = {module: {}}
    for target, lazy in imports_of(module, path, set(all_modules())):
        edges[module][target] = edges[module].get(target, True) and lazy
    assert violations(edges) == [(module, target, why) for target, why in expected]


def test_the_checker_allows_one_lazy_dev_loader_only() -> None:
    one = {"shardq.cli.dev": {"shardq.dev.devcluster": True, "shardq.dev.demo": True}}
    assert violations(one) == []
    two = {**one, "shardq.cli.web": {"shardq.dev.demo": True}}
    assert [why for _, _, why in violations(two)] == [
        "more than one CLI module loads the dev tools"
    ] * 3


def test_the_checker_finds_cycles_and_new_edges_in_known_ones() -> None:
    edges: Graph = {
        "shardq.a": {"shardq.b": False},
        "shardq.b": {"shardq.c": True},
        "shardq.c": {"shardq.a": False},
        "shardq.d": {"shardq.a": False},
    }
    assert components(edges) == [["shardq.a", "shardq.b", "shardq.c"]]
    assert new_cycles(edges, set()) == [
        "shardq.a -> shardq.b, in the cycle shardq.a -> shardq.b -> shardq.c -> shardq.a",
        "shardq.b -> shardq.c, in the cycle shardq.b -> shardq.c -> shardq.a -> shardq.b",
        "shardq.c -> shardq.a, in the cycle shardq.c -> shardq.a -> shardq.b -> shardq.c",
    ]
    known = {("shardq.a", "shardq.b"), ("shardq.b", "shardq.c"), ("shardq.c", "shardq.a")}
    assert new_cycles(edges, known) == []
    # A module that joins a known cycle is a new cycle, even if only one edge of it is new.
    edges["shardq.a"]["shardq.d"] = False
    assert new_cycles(edges, known) == [
        "shardq.a -> shardq.d, in the cycle shardq.a -> shardq.d -> shardq.a",
        "shardq.d -> shardq.a, in the cycle shardq.d -> shardq.a -> shardq.d",
    ]


def test_the_source_is_what_the_checker_reads() -> None:
    """The graph has the edges the brief names, so a checker that read nothing cannot pass."""
    edges = graph()
    assert edges["shardq.store.transport"]["shardq.connection"] is False
    assert edges["shardq.client"]["shardq.plans.producer"] is False
    assert "shardq.client" in edges["shardq.inspector"]  # under TYPE_CHECKING
    assert edges["shardq.cli.dev"]["shardq.dev.devcluster"] is True  # lazy
    assert "shardq.names" in edges["shardq.jobs"]
    assert len(edges) > 80
