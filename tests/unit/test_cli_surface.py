"""The whole ``shardq`` command tree against a stored snapshot (tests/unit/cli_surface.json): every
command path with its help text, its parameters (names, flags, types, defaults, env vars, help)
and its rendered ``--help``.  So the CLI surface cannot change by accident, e.g. when commands
move between modules.  After a deliberate change, write the snapshot again and review its diff:

    .venv/bin/python tests/unit/test_cli_surface.py --write

No Redis: the tree is read from click's objects, nothing runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import click

SNAPSHOT = Path(__file__).resolve().parent / "cli_surface.json"
# A fixed width, so the rendered help does not depend on the terminal that runs the test.
WIDTH = 100


def _plain(value: Any) -> Any:
    """JSON-safe, and stable across runs (no object addresses)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = [_plain(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, set | frozenset) else items
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if callable(value):
        return f"<callable {getattr(value, '__qualname__', type(value).__name__)}>"
    return repr(value)


def _param(param: click.Parameter, ctx: click.Context) -> dict[str, Any]:
    info = param.to_info_dict()
    info["class"] = type(param).__name__
    info["show_default"] = getattr(param, "show_default", None)
    info["show_envvar"] = getattr(param, "show_envvar", None)
    info["metavar"] = param.make_metavar(ctx)
    return _plain(info)


def _walk(cmd: click.Command, ctx: click.Context, out: dict[str, Any]) -> None:
    path = ctx.command_path
    out[path] = {
        "class": type(cmd).__name__,
        "help": cmd.help,
        "short_help": cmd.short_help,
        "epilog": cmd.epilog,
        "hidden": cmd.hidden,
        "deprecated": cmd.deprecated,
        "no_args_is_help": cmd.no_args_is_help,
        "options_metavar": cmd.options_metavar,
        "context_settings": _plain(cmd.context_settings),
        "params": [_param(p, ctx) for p in cmd.params],
        "rendered_help": cmd.get_help(ctx).splitlines(),
    }
    if isinstance(cmd, click.Group):
        out[path]["invoke_without_command"] = cmd.invoke_without_command
        out[path]["chain"] = cmd.chain
        # through the group's lookup, as click does: the root imports its commands lazily
        names = sorted(cmd.list_commands(ctx))
        out[path]["commands"] = names
        for name in names:
            sub = cmd.get_command(ctx, name)
            assert sub is not None, f"{path} lists {name} but has no such command"
            _walk(sub, click.Context(sub, info_name=name, parent=ctx), out)


def surface() -> dict[str, Any]:
    """Every command of the tree by its path (``shardq queue info``), in a JSON-safe form."""
    from shardq.cli import main

    root = click.Context(main, info_name="shardq", terminal_width=WIDTH, max_content_width=WIDTH)
    out: dict[str, Any] = {}
    _walk(main, root, out)
    return out


def test_cli_surface_matches_the_snapshot() -> None:
    stored = json.loads(SNAPSHOT.read_text())
    now = surface()
    gone = sorted(set(stored) - set(now))
    added = sorted(set(now) - set(stored))
    assert not gone and not added, f"commands gone: {gone}; commands added: {added}"
    for path in stored:
        assert now[path] == stored[path], (
            f"{path!r} differs from tests/unit/cli_surface.json; if the change is meant, write the "
            "snapshot again: .venv/bin/python tests/unit/test_cli_surface.py --write"
        )


def test_the_snapshot_covers_every_group_and_a_known_leaf() -> None:
    """The walk reaches nested groups and the parameters of settings options (a walk that
    stopped at the root would compare nothing)."""
    stored = json.loads(SNAPSHOT.read_text())
    for path in ("shardq", "shardq queue info", "shardq dev cluster up", "shardq worker run"):
        assert path in stored, path
    worker = {p["name"] for p in stored["shardq worker run"]["params"]}
    assert {"handlers_spec", "queue_names", "strict", "concurrency", "url"} <= worker


def test_the_product_and_the_cli_load_no_dev_tools() -> None:
    """The CLI (every group but what ``dev`` and ``demo`` run), the roles, the client and the
    web console load neither shardq.dev nor the examples, and the console
    nothing of the CLI: checked in a fresh interpreter, after the CLI has rendered its help."""
    probe = """
import sys
from click.testing import CliRunner
import shardq, shardq.client, shardq.worker, shardq.dispatcher, shardq.inspector
import shardq.web.app
web = sorted(m for m in sys.modules if m == "shardq.cli" or m.startswith("shardq.cli."))
from shardq.cli import main
for args in (["--help"], ["worker", "run", "--help"], ["dev", "cluster", "--help"],
             ["dev", "demo", "--help"], ["queue", "info", "--help"]):
    assert CliRunner().invoke(main, args).exit_code == 0, args
loaded = sorted(m for m in sys.modules if m.startswith(("shardq.dev.", "shardq.examples")))
print(web, loaded)
"""
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == ["[]", "[]"], out.stdout + out.stderr


# The grammar (issue 53 item 6) ---------------------------------------------------------------


def commands() -> dict[str, click.Command]:
    """Every command of the tree by its path, hidden ones (the old spellings) too."""
    from shardq.cli import main

    out: dict[str, click.Command] = {}

    def walk(cmd: click.Command, ctx: click.Context) -> None:
        out[ctx.command_path] = cmd
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                walk(sub, click.Context(sub, info_name=name, parent=ctx))

    walk(main, click.Context(main, info_name="shardq"))
    return out


def test_every_option_shows_its_environment_variables() -> None:
    for path, cmd in commands().items():
        for p in cmd.params:
            if not isinstance(p, click.Option) or not p.envvar or p.hidden:
                continue
            wanted = [p.envvar] if isinstance(p.envvar, str) else list(p.envvar)
            missing = [e for e in wanted if e not in (p.help or "")]
            assert not missing, f"{path} {p.opts[0]} reads {missing} but its help does not say so"


# Numbers that are not a span of time: a percentage, a rate, a multiple.
NOT_TIME = {"tolerance", "trigger", "bytes_per_second", "hot_multiple"}


def test_every_time_option_takes_a_duration() -> None:
    """``90``, ``1.5``, ``250ms``, ``5m``: no option takes plain seconds only."""
    from shardq.cli.params import Duration

    seen = 0
    for path, cmd in commands().items():
        for p in cmd.params:
            if isinstance(p.type, Duration):
                seen += 1
            elif isinstance(p.type, click.types.FloatParamType):
                assert p.name in NOT_TIME, f"{path} {p.name}: a float; a time takes Duration"
    assert seen > 40


# What deletes or moves jobs (or the leases and slots that serve them) takes --yes.
NEEDS_YES = {
    *(f"shardq queue {v}" for v in ("cancel", "empty", "delete", "resize", "retry-dead")),
    *(f"shardq dlq {v}" for v in ("replay", "purge")),
    "shardq batch cancel",
    "shardq schedule remove",
    *(f"shardq rebalance {v}" for v in ("even", "drain", "undrain", "apply", "move-partition")),
}


def test_what_deletes_or_moves_jobs_takes_yes() -> None:
    tree = commands()
    for path in NEEDS_YES:
        assert "yes" in {p.name for p in tree[path].params}, path


def test_old_spellings_are_hidden_aliases_of_their_commands() -> None:
    """``shardq enqueue`` and the other old names: hidden, and the very parameters of the
    command they stand for (they cannot drift apart)."""
    from shardq.cli import ALIASES

    tree = commands()
    new = {"enqueue": "job enqueue", "health": "redis check", "owners": "queue owners",
           "stats": "queue stats", "demo": "dev demo"}  # fmt: skip
    assert set(ALIASES) == set(new)
    for old, path in new.items():
        alias, command = tree[f"shardq {old}"], tree[f"shardq {path}"]
        assert alias.hidden and not command.hidden
        assert alias.params == command.params
    assert tree["shardq dev"].hidden and tree["shardq queue retry-dead"].hidden


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python tests/unit/test_cli_surface.py --write")
    SNAPSHOT.write_text(json.dumps(surface(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT} ({len(surface())} commands)")
