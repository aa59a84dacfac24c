"""The Lua scripts as files and the loader that builds the Functions library from them, no Redis:
names and KEYS counts match the headers, includes are expanded (nested ones once), bad layouts
are refused, every variable argument list has a cap and the callers split by it.  The library
on real Redis is in tests/integration/test_scripts.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shardq.errors import ConfigError
from shardq.store import keys, loader
from shardq.store.op import op

REPO_LUA = Path(__file__).resolve().parents[2] / "lua"


def lua_files() -> list[Path]:
    return sorted(REPO_LUA.glob("*.lua"))


def header(path: Path) -> str:
    text = path.read_text()
    match = re.match(r"--\[\[(.*?)\]\]", text, re.DOTALL)
    assert match, f"{path.name} has no --[[ header ]]"
    return match.group(1)


def test_checkout_loads_the_repo_scripts() -> None:
    assert loader.lua_dir().resolve() == REPO_LUA
    loaded = loader.scripts()
    assert set(loaded) == {re.sub(r"-\d+\.lua$", "", p.name) for p in lua_files()}
    assert len(loaded) == len(lua_files())


@pytest.mark.parametrize("path", lua_files(), ids=lambda p: p.name)
def test_name_and_key_count_match_the_file_name_and_header(path: Path) -> None:
    name, num_keys = re.fullmatch(r"([a-z][a-z-]*)-(\d+)\.lua", path.name).groups()  # type: ignore[union-attr]
    lua = loader.script(name)
    assert lua.name == name
    assert lua.num_keys == int(num_keys)
    head = header(path)
    declared = [int(i) for i in re.findall(r"^KEYS\[(\d+)\]", head, re.MULTILINE)]
    assert declared == list(range(1, int(num_keys) + 1)), f"{path.name} header lists {declared}"
    assert re.search(r"^Returns", head, re.MULTILINE), f"{path.name} header has no Returns"
    used = {int(i) for i in re.findall(r"KEYS\[(\d+)\]", lua.source)}
    assert used and max(used) <= int(num_keys), f"{path.name} uses KEYS{sorted(used)}"
    argv_used = {int(i) for i in re.findall(r"ARGV\[(\d+)\]", lua.source)}
    argv_listed = {int(i) for i in re.findall(r"^ARGV\[(\d+)", head, re.MULTILINE)}
    assert argv_used <= argv_listed, f"{path.name} uses ARGV{sorted(argv_used - argv_listed)}"


@pytest.mark.parametrize("path", lua_files(), ids=lambda p: p.name)
def test_includes_are_expanded(path: Path) -> None:
    lua = loader.script(re.sub(r"-\d+\.lua$", "", path.name))
    raw = path.read_text()
    assert "--@include" not in lua.source
    for included in re.findall(r"^--@include\s+(\S+)", raw, re.MULTILINE):
        body = (REPO_LUA / "includes" / included).read_text()
        # (its own includes expand before it, once per script)
        assert re.sub(r"^--@include.*\n", "", body, flags=re.MULTILINE) in lua.source
    lib = loader.library()
    assert lua.function.startswith(lib.name + "_") and lua.function in lib.code
    wanted = (
        str(lua.num_keys) if lua.max_keys == lua.num_keys else f"{lua.num_keys}..{lua.max_keys}"
    )
    with pytest.raises(ValueError, match=f"{lua.name} takes {wanted} keys"):
        op(lua.name, ["k"] * (lua.max_keys + 1), [], raw)
    if lua.num_keys:
        with pytest.raises(ValueError, match=f"{lua.name} takes {wanted} keys"):
            op(lua.name, ["k"] * (lua.num_keys - 1), [], raw)


def test_a_variable_key_list_needs_its_cap(tmp_path: Path) -> None:
    (tmp_path / "includes").mkdir()
    (tmp_path / "many-2.lua").write_text(
        "--[[ x\nKEYS[1] a\nKEYS[2] b\nKEYS[3..] more\nMax KEYS: 12\n]]\nreturn 1\n"
    )
    lib = loader.build(tmp_path)
    assert lib.scripts["many"].max_keys == 12
    assert "#KEYS < 2 or #KEYS > 12" in lib.code
    (tmp_path / "many-2.lua").write_text("--[[ x\nKEYS[3..] more\n]]\nreturn 1\n")
    with pytest.raises(ConfigError, match="Max KEYS"):
        loader.build(tmp_path)
    (tmp_path / "many-2.lua").write_text("--[[ x\nKEYS[4..] more\nMax KEYS: 9\n]]\nreturn 1\n")
    with pytest.raises(ConfigError, match=r"KEYS\[3\.\.\]"):
        loader.build(tmp_path)
    (tmp_path / "many-2.lua").write_text("--[[ x\nMax KEYS: 9\n]]\nreturn 1\n")
    with pytest.raises(ConfigError, match="without a KEYS"):
        loader.build(tmp_path)


def test_loader_rejects_bad_layouts(tmp_path: Path) -> None:
    (tmp_path / "includes").mkdir()
    (tmp_path / "includes" / "a.lua").write_text("--@include b.lua\nlocal a = 1\n")
    (tmp_path / "includes" / "b.lua").write_text("--@include a.lua\n")
    (tmp_path / "ok-1.lua").write_text("return 1\n")
    assert set(loader.build(tmp_path).scripts) == {"ok"}

    (tmp_path / "cycle-1.lua").write_text("--@include a.lua\nreturn 1\n")
    with pytest.raises(ConfigError, match="include cycle"):
        loader.build(tmp_path)
    (tmp_path / "cycle-1.lua").unlink()

    (tmp_path / "missing-1.lua").write_text("--@include nope.lua\nreturn 1\n")
    with pytest.raises(ConfigError, match="missing Lua include"):
        loader.build(tmp_path)
    (tmp_path / "missing-1.lua").unlink()

    (tmp_path / "NoKeyCount.lua").write_text("return 1\n")
    with pytest.raises(ConfigError, match=r"<operation>-<numkeys>\.lua"):
        loader.build(tmp_path)


def test_nested_include_is_expanded_once(tmp_path: Path) -> None:
    (tmp_path / "includes").mkdir()
    (tmp_path / "includes" / "inner.lua").write_text("local inner = 1\n")
    (tmp_path / "includes" / "outer.lua").write_text("--@include inner.lua\nlocal outer = 2\n")
    (tmp_path / "x-0.lua").write_text("--@include outer.lua\nreturn inner + outer\n")
    source = loader.build(tmp_path).scripts["x"].source
    assert source == "local inner = 1\n\nlocal outer = 2\n\nreturn inner + outer\n"


def test_loader_wants_a_cap_for_every_variable_argument_list(tmp_path: Path) -> None:
    (tmp_path / "includes").mkdir()
    (tmp_path / "fixed-1.lua").write_text("--[[ x\nARGV[1] a\nARGV[2] b\n]]\nreturn 1\n")
    assert loader.build(tmp_path).scripts["fixed"].max_argv == 2
    (tmp_path / "many-1.lua").write_text("--[[ x\nARGV[1] a\nARGV[2..] b\n]]\nreturn 1\n")
    with pytest.raises(ConfigError, match="Max ARGV"):
        loader.build(tmp_path)
    (tmp_path / "many-1.lua").write_text("--[[ x\nARGV[3..] b\nMax ARGV: 2\n]]\nreturn 1\n")
    with pytest.raises(ConfigError, match="below"):
        loader.build(tmp_path)
    (tmp_path / "many-1.lua").write_text("--[[ x\nARGV[1..] b\nMax ARGV: 50\n]]\nreturn 1\n")
    assert loader.build(tmp_path).scripts["many"].max_argv == 50


def test_the_callers_split_what_they_send_by_the_caps() -> None:
    """One number per script, shared by the script's cap and the code that fills its ARGV."""
    from shardq import admin
    from shardq.plans import job_actions
    from shardq.store import delivery, fleet, producer
    from shardq.store import limits as store_limits
    from shardq.store import schedules as sched
    from shardq.worker import limiter

    cap = {name: s.max_argv for name, s in loader.scripts().items()}
    assert cap["ack"] == 1 + 2 * delivery.MAX_ACK
    assert cap["touch"] == 3 + 2 * delivery.MAX_TOUCH
    assert cap["reclaim"] == 7 + delivery.MAX_LIVE
    assert cap["defer"] == 2 + 3 * store_limits.MAX_DEFER
    assert cap["lease-acquire"] == 2 + fleet.MAX_DISPLACE
    assert cap["limit-acquire"] == 2 + limiter.MAX_TAKE
    assert cap["limit-release"] == limiter.MAX_TAKE
    assert cap["schedule-fire"] == 2 + 7 * sched.FIRE_GROUPS + sched.FIRE_TICKS
    assert cap["enqueue-batch"] >= 4 + 4 * producer.BATCH_JOBS
    assert cap["dlq-purge"] >= max(job_actions.BATCH, admin.DLQ_BATCH)
    assert cap["dlq-replay"] >= 1 + max(job_actions.BATCH, admin.DLQ_BATCH)
    # The ops take what a caller can hold and stay within the caps.
    pk = keys.partition_keys("caps", 0, 1)
    fleet.lease_acquire(pk, "d", 1000, [f"gone-{i}" for i in range(5000)])
    many = [f"w-{i}" for i in range(delivery.MAX_LIVE + 1)]
    big = delivery.reclaim(
        pk, "c", visibility_ms=30_000, orphan_idle_ms=1500, live=many, count=10, max_deliveries=5
    )
    assert big.argv[5] == 30_000 and len(big.argv) == 7  # the visibility timeout only


def test_shared_limits_are_the_python_constants_declared_once() -> None:
    """A bound a script and its Python caller both check is one Python constant, a local of
    the library: no script states the number itself, nor declares the name again."""
    from shardq import config, jobs, names, workflows

    code = loader.library().code
    expected = {
        "MAX_CHILDREN": workflows.MAX_CHILDREN,
        "MAX_ADD": workflows.MAX_ADD,
        "MAX_TOTAL": workflows.MAX_TOTAL,
        "MAX_STEPS": workflows.MAX_STEPS,
        "MAX_PROGRESS_BYTES": jobs.MAX_PROGRESS_BYTES,
        "STAMP_BYTES": jobs.STAMP_BYTES,
        "MAX_RESULT_BYTES": config.MAX_RESULT_BYTES,
        "MAX_ERROR_BYTES": config.MAX_ERROR_BYTES,
        "MAX_NAME_BYTES": names.MAX_MEMBER_BYTES,
    }
    assert expected == loader.SHARED_LIMITS
    for name, value in expected.items():
        assert f"\nlocal {name} = {value}\n" in code
    for path in [*lua_files(), *sorted((REPO_LUA / "includes").glob("*.lua"))]:
        text = path.read_text()
        for name in expected:
            assert not re.search(rf"\blocal {name}\b", text), f"{path.name} declares {name}"
        body = text.split("]]", 1)[-1]
        numbers = r"4294967295|4294967296|16777216|1000000|100000|4096"
        if path.name.startswith(("batch-", "complete-", "progress-", "outbox")):
            assert not re.search(rf"\b({numbers})\b", body), f"{path.name} states a bound"


def test_a_flags_line_must_be_one_line(tmp_path: Path) -> None:
    (tmp_path / "includes").mkdir()
    (tmp_path / "w-1.lua").write_text(
        "--[[ x\nKEYS[1] a\nReturns 1\nFlags: allow-oom  (a reason that runs on\n"
        "to a second line)\n]]\nreturn 1\n"
    )
    with pytest.raises(ConfigError, match="one line"):
        loader.build(tmp_path)


# The header as the contract: its ARGV checks (lua/README.md) -----------------------------------

UNIVERSAL = re.compile(
    r"^\s*\{-10, key, found, expected\}|^\s*\{-11, argv index, value, lo, hi\}"
    r"|^\s*\{-15, 'KEYS' or 'ARGV'|^Every check comes before the first write",
    re.MULTILINE,
)


@pytest.mark.parametrize("path", lua_files(), ids=lambda p: p.name)
def test_a_header_lists_its_own_replies_only(path: Path) -> None:
    """The replies every function may give are stated once (lua/README.md); each negative code
    the script's body returns is that, or listed in its header."""
    head = header(path)
    assert not UNIVERSAL.search(head), f"{path.name} restates what lua/README.md says"
    body = path.read_text().split("]]", 1)[1]
    listed = {int(c) for c in re.findall(r"\{-(\d+)\b|(?<![\w-])-(\d+) E_", head) for c in c if c}
    returned = {int(c) for c in re.findall(r"\{-(\d+),", body)}
    assert returned - listed <= {10, 11, 15}, f"{path.name}: {sorted(returned - listed)} unlisted"
    readme = (REPO_LUA / "README.md").read_text()
    for code in ("{-10, key, found, expected}", "{-11, argv index", "{-15, 'KEYS' or 'ARGV'"):
        assert code in readme


@pytest.mark.parametrize("path", lua_files(), ids=lambda p: p.name)
def test_a_script_does_not_check_again_what_its_header_checks(path: Path) -> None:
    lua = loader.script(re.sub(r"-\d+\.lua$", "", path.name))
    assert lua.contract is not None
    body = path.read_text().split("]]", 1)[1]
    for check in lua.contract.checks:
        assert not re.search(rf"arg_number\({check.index},", body), (path.name, check.index)
        assert not re.search(rf"tonumber\(ARGV\[{check.index}\]\)", body), (path.name, check.index)
        refused = rf"ARGV\[{check.index}\] ~= '[^']*' and ARGV\[{check.index}\] ~= '"
        assert not re.search(refused, body), (path.name, check.index)


def _script(tmp_path: Path, argv_lines: str, max_argv: str = "") -> loader.Library:
    (tmp_path / "includes").mkdir(exist_ok=True)
    (tmp_path / "x-0.lua").write_text(
        f"--[[ x\n{argv_lines}\n{max_argv}\nReturns 1\n]]\nreturn 1\n"
    )
    return loader.build(tmp_path)


def test_the_loader_reads_each_kind_of_check(tmp_path: Path) -> None:
    lib = _script(
        tmp_path,
        "ARGV[1] a count  number 1..1e3 as n\n"
        "ARGV[2] a whole one, wrapped onto     int -1..MAX_ADD\n"
        "        a second line\n"
        "ARGV[3] no check\n"
        "ARGV[4] on or off  flag\nARGV[5] who  name\nARGV[6] a mode  one of in|at|''\n"
        "ARGV[7] text  bytes 1..MAX_NAME_BYTES\n"
        "ARGV[8..] per thing  groups of 3, at least 1\n"
        "ARGV[i]   its id  name\nARGV[i+1] no check\nARGV[i+2] when  number 0..1e15",
        "Max ARGV: 13",
    )
    contract = lib.scripts["x"].contract
    assert contract is not None and contract.max_argv == 13
    got = [(c.index, c.kind, c.lo, c.hi, c.choices, c.local) for c in contract.checks]
    assert got == [
        (1, "number", "1", "1e3", (), "n"),
        (2, "int", "-1", "MAX_ADD", (), ""),
        (4, "flag", "", "", (), ""),
        (5, "name", "", "", (), ""),
        (6, "one of", "", "", ("in", "at", ""), ""),
        (7, "bytes", "1", "MAX_NAME_BYTES", (), ""),
    ]
    assert contract.checks[1].hi_value == loader.SHARED_LIMITS["MAX_ADD"]
    assert contract.arg_list is not None
    assert (contract.arg_list.start, contract.arg_list.size, contract.arg_list.at_least_one) == (
        8,
        3,
        True,
    )
    assert [(m.index, m.kind) for m in contract.arg_list.members] == [(0, "name"), (2, "number")]
    # Before the body: each check, the list's count, each group's values.
    code = lib.code.split("callback=function(KEYS, args)\n", 1)[1].split("ARGV = args", 1)[0]
    # (the number named n stays a local of the body; the others' end with their block)
    assert "local n = tonumber(args[1]) if n == nil or n ~= n or n < 1 or n > 1e3 then" in code
    assert "do local v = args[2]" in code and "(#args - 7) % 3 ~= 0" in code
    assert "if #args < 10 then return {-11, #args, 'argument count', 10, 13} end" in code
    assert "for i = 8, #args, 3 do" in code and "args[i + 2]" in code


@pytest.mark.parametrize(
    ("lines", "error"),
    [
        ("ARGV[1] a  number 1..NOPE", "neither a number"),
        ("ARGV[1] a  number 5..1", "bounds nothing"),
        ("ARGV[1] a  numeral 1..2", None),  # prose, not a check: no error, no check
        ("ARGV[1] a  number 1-2", "unknown ARGV check"),
        ("ARGV[1] a  bytes 1..2 as n", "not bytes"),
        ("ARGV[1] a  number 1..2 as end", "Lua leaves free"),
        ("ARGV[1] a  number 1..2 as n\nARGV[2] b  int 1..2 as n", "two arguments as n"),
        ("ARGV[1..] a  groups of 2\nARGV[i] a  number 1..2 as n\nMax ARGV: 4", "no local"),
        ("ARGV[1] a  one of in", "choices"),
        ("ARGV[1] a  one of in|a b", "choices"),
        ("ARGV[1..] a  groups of 2, at least 2\nMax ARGV: 4", "unknown list check"),
        ("ARGV[1..] a  at least 2\nMax ARGV: 4", "at least 1"),
        ("ARGV[1..] a  groups of 3\nMax ARGV: 4", "whole groups"),
        ("ARGV[1..] a  in pairs\nMax ARGV: 4", None),
        ("ARGV[1..] a  each thing\nMax ARGV: 4", "unknown ARGV check"),
        ("ARGV[i] a  name", "follow an ARGV"),
        ("ARGV[1..] a  groups of 2\nARGV[i+2] a  name\nMax ARGV: 4", "not a new place"),
        ("ARGV[1..] a  groups of 2\nARGV[i] a\nARGV[i] b\nMax ARGV: 4", "not a new place"),
        ("ARGV[2..] a  at least 1\nARGV[1] b  flag\nMax ARGV: 4", "after the ARGV"),
    ],
)
def test_the_loader_refuses_a_check_it_cannot_hold_to(
    tmp_path: Path, lines: str, error: str | None
) -> None:
    if error is None:
        contract = _script(tmp_path, lines).scripts["x"].contract
        assert contract is not None and not contract.checks and contract.arg_list is None
        return
    with pytest.raises(ConfigError, match=error):
        _script(tmp_path, lines)
