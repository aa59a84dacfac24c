"""No module of shardq/ reaches into another module's private members.

A facade's privates (``Client._runner``, ``AsyncClient._connected``, ...) are its own: every
other module runs an operation through the public seam, ``client.run(plan, what)`` with the
plan built from ``client.cache``, and asks ``client.transport`` where a key lives.  So an
attribute ``obj._name`` read or written on anything but ``self``/``cls`` must name a private
that the same module defines (a module-level name, a method or class attribute of one of its
classes, or an attribute it sets on ``self``): another instance of the module's own class is
fine, another module's is not.  The AST cannot know types, so a private of another module that
happens to share its name with one of this module's passes; the names are specific enough that
this has not hidden one.  No Redis needed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "shardq"

# Public API whose names start with an underscore: namedtuple's methods and attributes.
UNDERSCORED_API = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_self(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def defined_privates(tree: ast.AST) -> set[str]:
    """The private names a module defines itself."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and _is_self(node.value)
        ):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.rpartition(".")[2])
    return {n for n in names if _private(n)}


def reaches(source: str) -> list[str]:
    """Each ``obj._name`` of the source (obj not self/cls) naming a private it does not define,
    as ``line: obj._name``."""
    tree = ast.parse(source)
    own = defined_privates(tree)
    found = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and _private(node.attr)
        and not _is_self(node.value)
        and node.attr not in own
        and node.attr not in UNDERSCORED_API
    ]
    found.sort(key=lambda n: (n.lineno, n.col_offset))
    return [f"{n.lineno}: {ast.unparse(n)}" for n in found]


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_no_module_reaches_into_another_modules_privates(path: Path) -> None:
    found = reaches(path.read_text())
    assert not found, (
        f"{path.relative_to(PACKAGE.parent)} reaches into private members of another module "
        "(run an operation with client.run(plan, what) and client.cache, ask "
        "client.transport where a key lives, or make the member public): " + ", ".join(found)
    )


def test_the_finder_finds_them() -> None:
    """The finder, on the forms the code base used before the seam was public."""
    source = """
from shardq.plans import producer as producer_plans

class Inspector:
    def __init__(self, client):
        self.client = client
        self._mine = 1

    def get(self, queue, job_id):
        plan = producer_plans.get(self.client._queues, queue, job_id)
        return self.client._drive(plan, "reading")

    def copy(self, other):
        other._mine = self._mine  # another instance of this module's class: fine

def grant(client, op):
    producer_plans._enqueue(client._queues, "q")
    row = row._replace(x=1)  # namedtuple API: fine
    return client._run(op, what="x")
"""
    assert [f.split(": ", 1)[1] for f in reaches(source)] == [
        "self.client._queues",
        "self.client._drive",
        "producer_plans._enqueue",
        "client._queues",
        "client._run",
    ]
