"""The runnable examples of examples/ (docs/examples.md), each run as its README says against
the session's cluster: the `shardq` commands and scripts in processes of their own, the
FastAPI app through its TestClient, the Django project through manage.py, the TypeScript
producer compiled with tsc and run by node.  A renamed parameter or command fails here."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support import doccode
from support.helpers import scaled
from support.procs import Proc

from shardq import Client
from shardq.cli import main as cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
#: The console script, as a user runs it (not ``python -m``, which would add the working
#: directory to sys.path and hide a missing PYTHONPATH).
SHARDQ = str(Path(sys.executable).with_name("shardq"))


def example_env(url: str, **extra: str) -> dict[str, str]:
    return {**os.environ, "SHARDQ_REDIS_URL": url, "SHARDQ_LOG_LEVEL": "WARNING", **extra}


def run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 90) -> str:
    """Run to the end; its stdout, after checking it succeeded."""
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=scaled(timeout)
    )
    assert done.returncode == 0, f"{argv} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture
def start(procs: list[Proc]) -> Iterator[Callable[..., Proc]]:
    """Start a process in an example's folder; stopped (SIGTERM) at the end of the test."""

    def go(argv: list[str], cwd: Path, env: dict[str, str]) -> Proc:
        proc = Proc(argv, env, cwd=cwd)
        procs.append(proc)
        return proc

    yield go


def fleet(start: Callable[..., Proc], queue: str, cwd: Path, env: dict[str, str]) -> list[Proc]:
    """`shardq dispatcher run -q QUEUE` and `PYTHONPATH=. shardq worker run -q QUEUE
    --handlers jobs:handlers` in the example's folder, as its README runs them."""
    run([SHARDQ, "queue", "create", "-q", queue, "--partitions", "16"], cwd, env)
    worker = [SHARDQ, "worker", "run", "-q", queue, "--handlers", "jobs:handlers"]
    return [
        start([SHARDQ, "dispatcher", "run", "-q", queue], cwd, env),
        start(worker, cwd, {**env, "PYTHONPATH": "."}),
    ]


def stopped_cleanly(proc: Proc) -> str:
    """SIGTERM, then its log once it exited 0 (a clean shutdown)."""
    proc.signal(signal.SIGTERM)
    assert proc.popen.wait(scaled(40)) == 0, proc.log()
    return proc.log()


def test_quickstart_python_worker(cluster_url: str, start: Callable[..., Proc]) -> None:
    """examples/quickstart: worker.py (a Dispatcher and a Worker in one process) runs what
    producer.py enqueues, and producer.py prints the handler's return value."""
    here = EXAMPLES / "quickstart"
    env = example_env(cluster_url)
    run([SHARDQ, "queue", "create", "-q", "reminders", "--partitions", "16"], here, env)
    worker = start([sys.executable, "worker.py"], here, env)
    out = run([sys.executable, "producer.py"], here, env)
    assert "enqueued " in out and "result: sent" in out, out
    assert "reminding user 42 (attempt 1)" in stopped_cleanly(worker)


def _import(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.filterwarnings("ignore:Using `httpx` with `starlette.testclient`")
def test_fastapi_app_enqueues_and_awaits_a_result(
    cluster_url: str, start: Callable[..., Proc], monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient

    here = EXAMPLES / "fastapi_app"
    procs = fleet(start, "reports", here, example_env(cluster_url))
    monkeypatch.setenv("SHARDQ_REDIS_URL", cluster_url)
    app = _import(here / "app.py", "example_fastapi_app").app
    with TestClient(app) as http:
        created = http.post("/reports", json={"rows": 40})
        assert created.status_code == 202, created.text
        job_id = created.json()["job_id"]
        done = http.get(f"/reports/{job_id}", params={"wait": scaled(30)}).json()
        assert done == {
            "state": "done",
            "result": {"url": f"https://reports.example.com/{job_id}.pdf", "rows": 40},
        }
        assert http.get("/reports/no-such-job").status_code == 404
    for proc in procs:
        stopped_cleanly(proc)


def test_django_project_management_commands(cluster_url: str, start: Callable[..., Proc]) -> None:
    """`manage.py run_jobs` (a dispatcher and a worker from settings.SHARDQ) runs the job
    `manage.py remind` enqueues; the sync handler sends its mail with Django."""
    here = EXAMPLES / "django_project"
    env = example_env(cluster_url)
    jobs = start([sys.executable, "manage.py", "run_jobs"], here, env)
    out = run([sys.executable, "manage.py", "remind", "42", "--in", "1", "--wait"], here, env)
    assert "result: sent" in out, out
    assert "Hello user 42" in stopped_cleanly(jobs)


def test_workflow_batch_with_a_callback_and_a_chain(
    cluster_url: str, start: Callable[..., Proc]
) -> None:
    here = EXAMPLES / "workflow"
    env = example_env(cluster_url)
    procs = fleet(start, "albums", here, env)
    out = run([sys.executable, "producer.py"], here, env).splitlines()
    assert out[0] == "succeeded 100 of 100", out
    assert out[1].startswith("album 7 published ("), out
    assert out[2] == "charged 1250 cents for order 42", out
    for proc in procs:
        stopped_cleanly(proc)


def test_typescript_producer_feeds_a_python_worker(
    cluster_url: str, start: Callable[..., Proc], tmp_path: Path
) -> None:
    """examples/node_producer: producer.ts compiled as its package.json says (the client as a
    file: dependency on clients/node), its jobs run by the Python worker of jobs.py."""
    from support.nodeclient import built_node_client

    client_dir = built_node_client()
    here = EXAMPLES / "node_producer"
    for name in ("producer.ts", "tsconfig.json", "package.json"):
        shutil.copy(here / name, tmp_path / name)
    # What `npm install` makes of the package.json: the client linked, the Node types.
    (tmp_path / "node_modules" / "@types").mkdir(parents=True)
    (tmp_path / "node_modules" / "shardq-producer").symlink_to(client_dir)
    types = client_dir / "node_modules" / "@types" / "node"
    (tmp_path / "node_modules" / "@types" / "node").symlink_to(types)
    env = example_env(cluster_url)
    run([str(client_dir / "node_modules" / ".bin" / "tsc"), "-p", "tsconfig.json"], tmp_path, env)
    procs = fleet(start, "signups", here, env)
    job_ids = run(["node", "dist/producer.js", cluster_url], tmp_path, env).split()
    assert len(job_ids) == 4, job_ids
    with Client.from_url(cluster_url) as client:
        results = {client.result("signups", j, timeout=scaled(30)) for j in job_ids}
    assert results == {f"sent to {n}@example.com" for n in "abcd"}
    for proc in procs:
        stopped_cleanly(proc)


def test_testing_example_passes_against_the_cluster(cluster_url: str) -> None:
    """examples/testing: its pytest tests (handlers as functions, then through a real worker
    in a fixture) pass when pytest runs them as a user would, in its folder."""
    here = EXAMPLES / "testing"
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "."]
    out = run(argv, here, example_env(cluster_url), timeout=120)
    assert "5 passed" in out, out


def quickstart_block(page: Path) -> list[str]:
    """The shell block of ``page`` that starts the quickstart's fleet: its command lines."""
    for block in doccode.blocks(doccode.expand(page.read_text())):
        lines = doccode.command_lines(block.code)
        if block.lang in doccode.SHELL and any("shardq worker run" in x for x in lines):
            return lines
    raise AssertionError(f"{page.name} has no block that runs `shardq worker run`")


def run_quickstart_as_written(page: Path, url: str, start: Callable[..., Proc]) -> None:
    """The page's quickstart commands, each as written, in examples/quickstart: `shardq`
    commands that run until stopped in processes of their own, the rest to their end; then
    the producer's output and the worker's log say the job ran."""
    here = EXAMPLES / "quickstart"
    env = example_env(url)
    fleet: list[Proc] = []
    out = ""
    for line in quickstart_block(page):
        command = doccode.shardq_command(line)
        if command is not None and command.argv[:2] in (["dispatcher", "run"], ["worker", "run"]):
            fleet.append(start([SHARDQ, *command.argv], here, {**env, **command.env}))
        elif command is not None:
            run([SHARDQ, *command.argv], here, {**env, **command.env})
        else:
            assert line == "python producer.py", f"{page.name}: unexpected line {line!r}"
            out = run([sys.executable, "producer.py"], here, env)
    assert len(fleet) == 2 and "result: sent" in out, (page.name, out)
    logs = [stopped_cleanly(proc) for proc in fleet]
    assert "reminding user 42 (attempt 1)" in logs[1], logs[1]


def test_getting_started_runs_as_written(cluster_url: str, start: Callable[..., Proc]) -> None:
    run_quickstart_as_written(doccode.DOCS / "getting-started.md", cluster_url, start)
    # The page's other blocks of short `shardq` commands run too (not `dev`: the cluster is
    # the session's).
    for block in doccode.blocks(doccode.expand((doccode.DOCS / "getting-started.md").read_text())):
        commands = doccode.shardq_commands(block.code)
        if block.lang not in doccode.SHELL or not commands:
            continue
        if len(commands) != len(doccode.command_lines(block.code)):
            continue  # a block with other commands (pip, python): not for this runner
        if any(c.argv[0] == "dev" or c.argv[1:2] == ["run"] for c in commands):
            continue
        for command in commands:
            result = CliRunner().invoke(cli, command.argv, env={"SHARDQ_REDIS_URL": cluster_url})
            assert result.exit_code == 0, f"{command.line}\n{result.output}"


def test_readme_runs_as_written(cluster_url: str, start: Callable[..., Proc]) -> None:
    """README.md's example: its commands, in examples/quickstart, whose files are its Python
    blocks (tests/unit/test_docs_names.py checks they are the same)."""
    run_quickstart_as_written(doccode.ROOT / "README.md", cluster_url, start)
