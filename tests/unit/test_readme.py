"""The Python examples of README.md and of every docs page still work on this tree: the public
API cannot break silently.

Every ```python block of README.md and of docs/**/*.md is parsed (a page's blocks with the files
of examples/ it includes put in their place, as the site shows them).  Each ``from shardq...
import ...`` and ``import shardq...`` in it is run, and each imported name must exist.  Each
call whose callee the test can resolve without Redis is bound against the callee's signature
(``inspect.signature().bind`` with placeholders): a name imported from shardq
(``JobRequest(...)``), an attribute path from one (``limits.for_type(...)``,
``Client.from_url(...)``), or a method of a variable the page binds to a known facade
(``client.enqueue(...)``, ``ins.list_jobs(...)``, ``client.schedules.add(...)``), so a renamed
method, a removed parameter or a keyword that no longer exists fails here.  Attributes read from
a known result (``info.state``, ``r.created``, ``page.cursor``) must exist too.  Nothing is sent
to Redis (the included examples run against a cluster in tests/examples/).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import inspect
import re
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support import doccode


def _repo_root() -> Path:
    here = Path(__file__).resolve().parent
    for folder in (here, *here.parents):
        if (folder / "pyproject.toml").is_file() and (folder / "shardq").is_dir():
            return folder
    raise RuntimeError(f"no repository root above {here}")


README = _repo_root() / "README.md"
PAGES = doccode.pages()  # README.md first, then every page of docs/
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


def page_text(page: Path) -> str:
    """The page as the site shows it: its includes put in their place."""
    return doccode.expand(page.read_text())


def _blocks(page: Path = README) -> list[tuple[int, str, ast.Module]]:
    return [(i, b, _parse(b)) for i, b in enumerate(python_blocks(page_text(page)))]


def page_blocks() -> list[tuple[Path, int]]:
    return [(p, i) for p in PAGES for i in range(len(python_blocks(page_text(p))))]


def _instances() -> dict[str, type]:
    """README variables and the class each stands for (an instance of it)."""
    from shardq import Client, EnqueueResult, Inspector, JobInfo
    from shardq.client import Batches, Schedules
    from shardq.errors import BulkEnqueueError
    from shardq.inspector import Page

    return {
        "client": Client,  # also AsyncClient in the asyncio block: the same surface
        "client.schedules": Schedules,
        "client.batches": Batches,
        "ins": Inspector,
        "inspector": Inspector,
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
    try:
        signature = inspect.signature(fn)
    except ValueError:
        return  # a builtin's (an exception class without an __init__ of its own)
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise AssertionError(f"{ast.unparse(call)}: does not fit {signature}: {exc}") from None


def _return_class(fn: Any) -> type | None:
    """The class of what calling ``fn`` returns, when its annotations say (``X | None``: X)."""
    if inspect.isclass(fn):
        return fn
    target = fn.fn if isinstance(fn, _Unbound) else fn
    try:
        hints = typing.get_type_hints(getattr(target, "__func__", target))
    except Exception:
        return None
    returned = hints.get("return")
    if returned is typing.Self:
        owner = getattr(target, "__self__", None)
        return owner if inspect.isclass(owner) else None
    for candidate in typing.get_args(returned) or (returned,):
        plain = typing.get_origin(candidate) is None  # list[X] is not X
        if inspect.isclass(candidate) and candidate is not type(None) and plain:
            return candidate
    return None


class _Checker(ast.NodeVisitor):
    """One block in source order: each variable has the class of its last assignment where
    the code says it (``info = client.get(...)``: JobInfo; ``except X as exc``: X; ``with
    Client(...) as client``: Client), else the page-wide guess of ``_instances`` until it is
    assigned something else."""

    def __init__(self, names: dict[str, Any], instances: dict[str, type]) -> None:
        self.names = names
        self.types = dict(instances)
        self.problems: list[str] = []

    def _class_of(self, node: ast.expr | None) -> type | None:
        if isinstance(node, ast.Await):
            node = node.value
        if isinstance(node, ast.Name):
            return self.types.get(node.id)
        if isinstance(node, ast.Call):
            path = _path(node.func)
            try:
                fn = None if path is None else _callee(path, self.names, self.types)
            except AssertionError:
                return None
            return None if fn is None else _return_class(fn)
        return None

    def _annotation_class(self, node: ast.expr) -> type | None:
        path = _path(node)
        try:
            obj = None if path is None else _callee(path, self.names, {})
        except AssertionError:
            return None
        return obj if inspect.isclass(obj) else None

    def _bind(self, target: ast.expr, cls: type | None) -> None:
        if isinstance(target, ast.Name):
            if cls is None:
                self.types.pop(target.id, None)
            else:
                self.types[target.id] = cls

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        cls = self._class_of(node.value)
        for target in node.targets:
            self._bind(target, cls)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
        self._bind(node.target, self._annotation_class(node.annotation))

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self._bind(node.target, self._class_of(node.value))

    def visit_For(self, node: ast.For) -> None:
        self.visit(node.iter)
        for name in ast.walk(node.target):
            self._bind(name, None)  # a loop variable: its class is not known here
        for stmt in [*node.body, *node.orelse]:
            self.visit(stmt)

    visit_AsyncFor = visit_For  # type: ignore[assignment]

    def visit_With(self, node: ast.With | ast.AsyncWith) -> None:
        for item in node.items:
            self.visit(item.context_expr)
            if item.optional_vars is not None:
                self._bind(item.optional_vars, self._class_of(item.context_expr))
        for stmt in node.body:
            self.visit(stmt)

    visit_AsyncWith = visit_With  # type: ignore[assignment]

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name is not None:
            cls = None if node.type is None else self._annotation_class(node.type)
            if cls is None:
                self.types.pop(node.name, None)
            else:
                self.types[node.name] = cls
        for stmt in node.body:
            self.visit(stmt)

    def visit_Call(self, node: ast.Call) -> None:
        try:
            path = _path(node.func)
            fn = None if path is None else _callee(path, self.names, self.types)
            if fn is not None:
                bind_call(node, fn)
        except AssertionError as exc:
            self.problems.append(str(exc))
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.ctx, ast.Load):
            base = _path(node.value)
            cls = self.types.get(base) if base is not None else None
            if cls is not None and not _has_attribute(cls, node.attr):
                self.problems.append(f"{ast.unparse(node)}: {cls.__name__} has no {node.attr!r}")
        self.generic_visit(node)


def check_block(
    tree: ast.Module, instances: dict[str, type], before: dict[str, Any] | None = None
) -> list[str]:
    """Problems with one block: imports that fail, calls that do not bind, attributes gone.
    ``before``: the names earlier blocks of the page imported (a page reads as one session)."""
    problems = []
    names: dict[str, Any] = dict(before or {})
    for imp in shardq_imports(tree):
        try:
            run_import(imp, names)
        except ImportError as exc:
            problems.append(f"{imp.line}: {type(exc).__name__}: {exc}")
    names.pop("__builtins__", None)
    checker = _Checker(names, instances)
    checker.visit(tree)
    return problems + checker.problems


# -- README ---------------------------------------------------------------------------------


def test_the_docs_have_python_examples_with_shardq_imports() -> None:
    """The extraction finds what the pages show, includes put in place (else everything below
    passes vacuously)."""
    blocks = page_blocks()
    assert len(blocks) >= 40
    assert {"getting-started.md", "scheduling.md", "results.md"} <= {p.name for p, _ in blocks}
    imports = [
        imp for page in PAGES for _, _, tree in _blocks(page) for imp in shardq_imports(tree)
    ]
    assert {"Client", "AsyncClient", "Inspector", "BulkEnqueueError", "limits"} <= {
        imp.name for imp in imports
    }


@pytest.mark.parametrize(
    ("page", "index"), page_blocks(), ids=lambda v: v.name if isinstance(v, Path) else str(v)
)
def test_block_imports_and_calls_work(page: Path, index: int) -> None:
    blocks = _blocks(page)
    before: dict[str, Any] = {}
    for _, _, earlier in blocks[:index]:
        for imp in shardq_imports(earlier):
            with contextlib.suppress(ImportError):  # a failing one fails its own block's test
                run_import(imp, before)
    before.pop("__builtins__", None)
    _, block, tree = blocks[index]
    problems = check_block(tree, _instances(), before)
    where = page.relative_to(_repo_root())
    assert not problems, f"{where} python block {index}:\n{block}\n" + "\n".join(
        f"  {p}" for p in problems
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_shardq_name_a_page_imports_is_public(page: Path) -> None:
    """``from shardq import X``: X is one of the names the package exports (``__all__``), or a
    submodule (``limits``)."""
    import shardq

    for _, _, tree in _blocks(page):
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
        ("b = client.batches.get('q', 'b')\nprint(b.state, b.nope)\n", "BatchInfo has no 'nope'"),
        ("from shardq.errors import JobFailedError\ntry:\n    pass\n"
         "except JobFailedError as exc:\n    print(exc.error, exc.nope)\n",
         "JobFailedError has no 'nope'"),
        ("from shardq import Client\nwith Client.from_url('x') as c:\n    c.enqueue(colour=1)\n",
         "does not fit"),
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
