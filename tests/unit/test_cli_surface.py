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
             ["demo", "--help"], ["queue", "info", "--help"]):
    assert CliRunner().invoke(main, args).exit_code == 0, args
loaded = sorted(m for m in sys.modules if m.startswith(("shardq.dev.", "shardq.examples")))
print(web, loaded)
"""
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == ["[]", "[]"], out.stdout + out.stderr


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python tests/unit/test_cli_surface.py --write")
    SNAPSHOT.write_text(json.dumps(surface(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {SNAPSHOT} ({len(surface())} commands)")
