"""README's Python examples still work on this tree: the public API cannot break silently.

Every ```python block of README.md is parsed.  Each ``from shardq... import ...`` and ``import
shardq...`` in it is run, and each imported name must exist.  Each call whose callee the test
can resolve without Redis is bound against the callee's signature (``inspect.signature().bind``
with placeholders): a name imported from shardq (``JobRequest(...)``), an attribute path from
one (``limits.for_type(...)``, ``Client.from_url(...)``), or a method of a variable the README
binds to a known facade (``client.enqueue(...)``, ``ins.list_jobs(...)``,
``client.schedules.add(...)``), so a renamed method, a removed parameter or a keyword that no
longer exists fails here.  Attributes the README reads from a known result (``info.state``,
``r.created``, ``page.cursor``) must exist too.  Nothing is sent to Redis.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


def _repo_root() -> Path:
    here = Path(__file__).resolve().parent
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file() and (folder / "shardq").is_dir():
            return folder
    raise RuntimeError(f"no repository root above {here}")


README = _repo_root() / "README.md"
_BLOCK = re.compile(r"^[ \t]*```python[ \t]*\n(?P<code>.*?)^[ \t]*```", re.MULTILINE | re.DOTALL)


def python_blocks(text: str) -> list[str]:
    """The README's ```python blocks, dedented (some sit inside list items)."""
    blocks = []
    for match in _BLOCK.finditer(text):
        lines = match.group("code").splitlines()
        indent = min((len(x) - len(x.lstrip()) for x in lines if x.strip()), default=0)
        blocks.append("\n".join(x[indent:] for x in lines) + "\n")
    return blocks


@dataclass(frozen=True)
class ShardqImport:
    module: str
    name: str | None  # None: ``import shardq.x`` (the module itself)
    line: str  # the import of this one name, as Python would run it


def shardq_imports(tree: ast.AST) -> list[ShardqImport]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "shardq":
            for alias in node.names:
                one = ast.ImportFrom(module=node.module, names=[alias], level=0)
                found.append(ShardqImport(node.module or "", alias.name, ast.unparse(one)))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "shardq":
                    one = ast.Import(names=[alias])
                    found.append(ShardqImport(alias.name, None, ast.unparse(one)))
    return found


def run_import(imp: ShardqImport, namespace: dict[str, Any]) -> None:
    """Run the import statement as written, into ``namespace``; raises what Python raises."""
    # The README's own line, one name at a time (shardq_imports): nothing else is run.
    exec(compile(imp.line, "README.md", "exec"), namespace)


def _parse(block: str) -> ast.Module:
    return ast.parse(block)


def _blocks() -> list[tuple[int, str, ast.Module]]:
    return [(i, b, _parse(b)) for i, b in enumerate(python_blocks(README.read_text()))]


def _instances() -> dict[str, type]:
    """README variables and the class each stands for (an instance of it)."""
    from shardq import Client, EnqueueResult, Inspector, JobInfo
    from shardq.client import Schedules
    from shardq.errors import BulkEnqueueError
    from shardq.inspector import Page

    return {
        "client": Client,  # also AsyncClient in the asyncio block: the same surface
        "client.schedules": Schedules,
        "ins": Inspector,
        "info": JobInfo,
        "r": EnqueueResult,
        "page": Page,
        "exc": BulkEnqueueError,
    }


def _path(node: ast.expr) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _path(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


class _Placeholder:
    def __repr__(self) -> str:
        return "<arg>"


def _has_attribute(cls: type, name: str) -> bool:
    if hasattr(cls, name):
        return True
    for klass in cls.__mro__:
        if name in getattr(klass, "__annotations__", {}):
            return True
        if name in getattr(klass, "__slots__", ()):
            return True
    # Set in __init__ (an exception's fields): look for ``self.<name> =`` in its source.
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return False
    return re.search(rf"\bself\.{re.escape(name)}\s*[:=]", source) is not None


def _callee(path: str, names: dict[str, Any], instances: dict[str, type]) -> Any:
    """The function a dotted call path stands for, or None when it is not the test's to check.
    Raises AssertionError naming what does not exist."""
    parts = path.split(".")
    if parts[0] in names:
        obj = names[parts[0]]
        for i, part in enumerate(parts[1:], 1):
            assert hasattr(obj, part), f"{'.'.join(parts[:i])} has no attribute {part!r}"
            obj = getattr(obj, part)
        return obj
    for size in (2, 1):  # the longest known instance prefix: client.schedules before client
        prefix = ".".join(parts[:size])
        if prefix in instances and len(parts) == size + 1:
            cls = instances[prefix]
            assert hasattr(cls, parts[-1]), f"{cls.__name__} has no method {parts[-1]!r}"
            member = inspect.getattr_static(cls, parts[-1])
            if isinstance(member, classmethod | staticmethod):
                return getattr(cls, parts[-1])
            return _Unbound(getattr(cls, parts[-1]))
    return None


@dataclass(frozen=True)
class _Unbound:
    """A method looked up on the class, called on an instance: bind ``self`` too."""

    fn: Any


def bind_call(call: ast.Call, fn: Any) -> None:
    """``inspect.signature(fn).bind`` with one placeholder per argument of ``call``."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    ):
        return  # *args / **kwargs: the arity is not known statically
    args: list[Any] = [_Placeholder() for _ in call.args]
    kwargs = {k.arg: _Placeholder() for k in call.keywords if k.arg is not None}
    if isinstance(fn, _Unbound):
        fn, args = fn.fn, [_Placeholder(), *args]
    signature = inspect.signature(fn)
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise AssertionError(f"{ast.unparse(call)}: does not fit {signature}: {exc}") from None


def check_block(
    tree: ast.Module, instances: dict[str, type], before: dict[str, Any] | None = None
) -> list[str]:
    """Problems with one block: imports that fail, calls that do not bind, attributes gone.
    ``before``: the names earlier blocks imported (the README reads as one session)."""
    problems = []
    names: dict[str, Any] = dict(before or {})
    for imp in shardq_imports(tree):
        try:
            run_import(imp, names)
        except ImportError as exc:
            problems.append(f"{imp.line}: {type(exc).__name__}: {exc}")
    names.pop("__builtins__", None)
    for node in ast.walk(tree):
        try:
            if isinstance(node, ast.Call):
                path = _path(node.func)
                fn = None if path is None else _callee(path, names, instances)
                if fn is not None:
                    bind_call(node, fn)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                base = _path(node.value)
                if base in instances and base != "client" and base != "client.schedules":
                    cls = instances[base]
                    if not _has_attribute(cls, node.attr):
                        problems.append(f"{ast.unparse(node)}: {cls.__name__} has no {node.attr!r}")
        except AssertionError as exc:
            problems.append(str(exc))
    return problems


# -- README ---------------------------------------------------------------------------------


def test_readme_has_python_examples_with_shardq_imports() -> None:
    """The extraction finds what the README shows (else everything below passes vacuously)."""
    blocks = _blocks()
    assert len(blocks) >= 15
    imports = [imp for _, _, tree in blocks for imp in shardq_imports(tree)]
    assert {"Client", "AsyncClient", "Inspector", "BulkEnqueueError", "limits"} <= {
        imp.name for imp in imports
    }


@pytest.mark.parametrize("index", range(len(python_blocks(README.read_text()))))
def test_readme_block_imports_and_calls_work(index: int) -> None:
    blocks = _blocks()
    before: dict[str, Any] = {}
    for _, _, earlier in blocks[:index]:
        for imp in shardq_imports(earlier):
            run_import(imp, before)  # a failing one fails its own block's test
    before.pop("__builtins__", None)
    _, block, tree = blocks[index]
    problems = check_block(tree, _instances(), before)
    assert not problems, f"README.md python block {index}:\n{block}\n" + "\n".join(
        f"  {p}" for p in problems
    )


def test_every_shardq_name_readme_imports_is_public() -> None:
    """``from shardq import X``: X is one of the names the package exports (``__all__``), or a
    submodule (``limits``)."""
    import shardq

    for _, _, tree in _blocks():
        for imp in shardq_imports(tree):
            if imp.module == "shardq" and imp.name is not None:
                exported = imp.name in shardq.__all__
                submodule = importlib.util.find_spec(f"shardq.{imp.name}") is not None
                assert exported or submodule, f"{imp.line}: {imp.name} is not in shardq.__all__"


# -- the checker can fail -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from shardq import Nope\n", "from shardq import Nope: ImportError"),
        ("from shardq.nowhere import X\n", "from shardq.nowhere import X: ModuleNotFoundError"),
        ("client.enqueue('q', 't', delay_seconds=3)\n", "delay_seconds=3): does not fit"),
        ("client.enqueue()\n", "client.enqueue(): does not fit"),
        ("client.no_such_method('q')\n", "Client has no method 'no_such_method'"),
        ("client.schedules.add('q')\n", "client.schedules.add('q'): does not fit"),
        ("from shardq import limits\nlimits.for_type('t', '1/s', rate=2)\n", "does not fit"),
        ("from shardq import limits\nlimits.nope('t')\n", "limits has no attribute 'nope'"),
        ("from shardq import JobRequest\nJobRequest('t', colour=1)\n", "does not fit"),
        ("print(info.no_such_field)\n", "JobInfo has no 'no_such_field'"),
    ],
)  # fmt: skip
def test_the_checker_finds_what_no_longer_works(source: str, expected: str) -> None:
    problems = check_block(ast.parse(source), _instances())
    assert any(expected in p for p in problems), problems


def test_the_checker_passes_what_works() -> None:
    source = (
        "from shardq import Client, JobRequest, limits\n"
        "client = Client.from_url('redis://x')\n"
        "client.enqueue('q', 't', {'a': 1}, delay=5, priority='high')\n"
        "client.schedules.add('q', 'n', 't', every=30)\n"
        "client.set_limit('q', limits.for_key('k', '10/s', burst=1, concurrency=5))\n"
        "JobRequest('t', 1, tenant='x')\n"
        "print(info.state, r.created, page.cursor, exc.retry_requests)\n"
    )
    assert check_block(ast.parse(source), _instances()) == []
