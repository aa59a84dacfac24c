"""The store boundary: only shardq/store names scripts, builds script calls or reads replies;
each script has one typed op; every return code a script documents is in the Code enum."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from shardq.errors import ShardqError
from shardq.store import codes, loader

PACKAGE = Path(__file__).resolve().parent.parent / "shardq"
STORE = PACKAGE / "store"
LUA = PACKAGE.parent / "lua"
# Modules of the store that only it may import (script names, raw replies, the op builder).
PRIVATE = {"shardq.store.loader", "shardq.store.codes"}


def outside_store() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if STORE not in p.parents]


@pytest.mark.parametrize("path", outside_store(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_outside_the_store_names_a_script_or_reads_a_reply(path: Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            assert node.module not in PRIVATE, f"{path.name} imports {node.module}"
            if node.module == "shardq.store.op":
                names = {a.name for a in node.names}
                assert "op" not in names, f"{path.name} builds script calls"
            if node.module == "shardq.store":
                names = {a.name for a in node.names}
                assert not names & {"loader", "codes"}, f"{path.name} imports {names}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            assert node.value.upper() not in ("EVALSHA", "EVAL", "FCALL"), path.name


def test_each_script_has_exactly_one_op_builder() -> None:
    built: dict[str, list[str]] = {}
    for path in STORE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "op"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                built.setdefault(node.args[0].value, []).append(path.name)
    assert set(built) == set(loader.scripts()), set(built) ^ set(loader.scripts())
    assert all(len(where) == 1 for where in built.values()), built


def test_every_documented_return_code_is_in_the_enum() -> None:
    documented: dict[int, str] = {}
    for path in LUA.glob("*.lua"):
        header = path.read_text().split("]]", 1)[0]
        for value, name in re.findall(r"\{(-\d+),[^}]*\}\s+E_([A-Z_]+)", header):
            documented[int(value)] = name
    assert documented, "no codes found in the headers"
    for value, name in documented.items():
        assert codes.Code(value).name == name, (value, name)
    for code in codes.Code:
        err = codes.error_for(code, ["x", "1", "2"])
        assert isinstance(err, ShardqError) and str(err), code


def test_check_raises_typed_errors_and_passes_replies_through() -> None:
    with pytest.raises(ShardqError):
        codes.check([codes.Code.FENCED, b"3", b"4:other"])
    assert codes.check([1, b"x"]) == [1, b"x"]
    assert codes.check(7) == [7]
    unknown = codes.error_for(-99, ["?"])
    assert "upgrade shardq" in str(unknown)
