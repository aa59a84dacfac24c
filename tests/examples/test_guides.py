"""The code of the guides (docs/guides/*.md) runs: every script of examples/guides/ (whose
sections the pages include) and every `shardq` command of examples/cli/ against the session's
cluster.  A renamed method, parameter, command or option fails here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from support import doccode
from support.helpers import scaled

from shardq.cli import main as cli

GUIDES = doccode.ROOT / "examples" / "guides"
CLI = doccode.ROOT / "examples" / "cli"
SCRIPTS = sorted(p for p in GUIDES.glob("*.py") if p.name != "fleet.py")


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_guide_script_runs(script: Path, cluster_url: str) -> None:
    env = {**os.environ, "SHARDQ_REDIS_URL": cluster_url, "SHARDQ_LOG_LEVEL": "WARNING"}
    done = subprocess.run(
        [sys.executable, script.name],
        cwd=GUIDES,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(180),
    )
    assert done.returncode == 0, f"{script.name}:\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize("script", sorted(CLI.glob("*.sh")), ids=lambda p: p.name)
def test_cli_script_runs(script: Path, cluster_url: str) -> None:
    """Each command in turn, in this process (click's runner), as the shell would run it;
    the scripts hold `shardq` commands only, so a user can run them with sh as well."""
    lines = doccode.command_lines(script.read_text())
    commands = doccode.shardq_commands(script.read_text())
    assert commands and len(commands) == len(lines), f"{script.name}: not all `shardq` commands"
    for command in commands:
        env = {"SHARDQ_REDIS_URL": cluster_url, **command.env}
        result = CliRunner().invoke(cli, command.argv, env=env)
        assert result.exit_code == 0, f"{script.name}: {command.line}\n{result.output}"
