"""Running ``shardq`` commands in-process (click's runner) and checking their one-line errors,
for the CLI tests of every folder."""

from __future__ import annotations

from click.testing import CliRunner, Result

from shardq.cli import main as cli


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


def ok(*args: str) -> str:
    result = run(*args)
    assert result.exit_code == 0, f"{args}: {result.output}"
    return result.stdout


def assert_one_line_error(result: Result, code: int = 1) -> str:
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("Error: "), result.stderr
    if code == 1:
        assert len(lines) == 1, result.stderr
    return lines[-1]
