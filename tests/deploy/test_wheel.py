"""The wheel ships the product and only the product: build it, check its files, install it into
a fresh venv, load every script and run the README's quick start from the installed copy."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.helpers import free_port, scaled, wait_for
from support.procs import Proc

from shardq.client import Client
from shardq.errors import UnknownQueueError
from shardq.inspector import Inspector

ROOT = Path(__file__).resolve().parents[2]
# The wheel is ~0.6 MB (1.7 MB unpacked): the package, its Lua scripts, the console's assets.
# A bound well above it and far below what a stray directory adds (bench/reference alone is
# several MB): a wheel past it ships something it should not.
MAX_WHEEL_BYTES = 900_000

PROBE = """
import json, shardq, shardq.store.loader as s
loaded = s.scripts()
print(json.dumps({
    "package": shardq.__file__,
    "lua_dir": str(s.lua_dir()),
    "names": sorted(loaded),
    "keys": {n: l.num_keys for n, l in loaded.items()},
    "functions": {n: l.function for n, l in loaded.items()},
    "library": s.library().name,
    "includes_left": [n for n, l in loaded.items() if "--@include" in l.source],
}))
"""


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=180, env=env)
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    site: Path  # the fresh venv's site-packages

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def shardq(self) -> Path:
        return self.venv / "bin" / "shardq"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    tmp = tmp_path_factory.mktemp("wheel")
    dist = tmp / "dist"
    if importlib.util.find_spec("build") and importlib.util.find_spec("hatchling"):
        # offline and fast: the build backend is already in this venv
        build = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist)]
    else:  # pip fetches the build backend into an isolated environment
        build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(ROOT)]
    _run(build, ROOT)
    [wheel] = dist.glob("shardq-*.whl")

    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps"]
    _run([*pip, "--no-index", "--quiet", str(wheel)], tmp)
    # Dependencies come from the main venv, after the fresh venv's own site-packages (a .pth
    # line appends), so the shardq that imports is the one the wheel installed; the main
    # venv's own .pth files (the editable install of this checkout) are not read from there.
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp
        ).strip()
    )
    (site / "main_venv_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return Installed(wheel, venv, site)


def _package_files() -> set[str]:
    """What the wheel must hold under shardq/: every file of the package in this checkout (no
    bytecode), and lua/ as shardq/lua."""
    files = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "shardq").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }
    lua = {
        "shardq/" + p.relative_to(ROOT).as_posix() for p in (ROOT / "lua").rglob("*") if p.is_file()
    }
    return files | lua


def test_the_wheel_holds_the_package_and_nothing_else(installed: Installed) -> None:
    """Its files are the package's (with the Lua scripts as shardq/lua) and the dist-info: no
    benchmark, calibration or wire tooling, no tests, and a size that says so."""
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
    dist_info = {n for n in names if n.split("/")[0].endswith(".dist-info")}
    assert {n.rsplit("/", 1)[1] for n in dist_info} >= {"METADATA", "RECORD", "WHEEL"}
    assert names - dist_info == _package_files(), (
        f"shipped but not in the package: {sorted(names - dist_info - _package_files())}; "
        f"missing: {sorted(_package_files() - names)}"
    )
    # what the product needs is there: the dev cluster and the demo (shardq dev, shardq dev demo),
    # the scripts as shardq/lua, the console's assets
    for needed in (
        "shardq/dev/devcluster.py",
        "shardq/dev/demo.py",
        "shardq/lua/enqueue-8.lua",
        "shardq/lua/includes/checks.lua",
        "shardq/web/templates/base.html",
        "shardq/py.typed",
    ):
        assert needed in names, needed
    # the repository's tools are not
    stems = {Path(n).stem for n in names}
    assert not stems & {"calibration", "bench", "bench_fleet", "wire", "wire_runner", "spec"}
    assert not [n for n in names if n.split("/")[0] in ("bench", "wire", "tests", "loadtest")]
    size = installed.wheel.stat().st_size
    assert size < MAX_WHEEL_BYTES, f"the wheel is {size:,} bytes: what does it ship now?"


def test_installed_wheel_loads_every_script(installed: Installed, tmp_path: Path) -> None:
    out = json.loads(_run([str(installed.python), "-c", PROBE], tmp_path))

    package = installed.site / "shardq"
    assert Path(out["package"]).parent == package
    assert Path(out["lua_dir"]) == package / "lua"
    assert Path(out["lua_dir"]).is_relative_to(installed.venv)
    repo_scripts = sorted(p.name for p in (ROOT / "lua").glob("*.lua"))
    assert out["names"] == sorted(name.rsplit("-", 1)[0] for name in repo_scripts)
    assert {f"{n}-{k}.lua" for n, k in out["keys"].items()} == set(repo_scripts)
    assert out["includes_left"] == []
    assert sorted(p.name for p in (package / "lua").glob("*.lua")) == repo_scripts
    assert sorted(p.name for p in (package / "lua" / "includes").glob("*.lua")) == sorted(
        p.name for p in (ROOT / "lua" / "includes").glob("*.lua")
    )
    from shardq.store import loader

    assert out["functions"] == {n: lua.function for n, lua in loader.scripts().items()}
    assert out["library"] == loader.library().name  # the same library, byte for byte
    # the web console's assets ship in the package (no CDN): every template and static file
    web = ROOT / "shardq" / "web"
    for folder in ("static", "templates"):
        shipped = sorted(p.name for p in (package / "web" / folder).iterdir())
        assert shipped == sorted(p.name for p in (web / folder).iterdir()), folder
    # the CLI, its `python -m` entry, the dev cluster and the demo's engine, and the example
    # handlers the manifests name import from the installed copy; the repository's tools do not
    probe = (
        "import importlib.util, shardq.cli, shardq.examples.handlers as h, shardq.format;"
        "import shardq.dev.devcluster, shardq.dev.demo, shardq.dev.handlers;"
        "print(shardq.cli.__file__, sorted(h.handlers),"
        " [m for m in ('bench', 'wire') if importlib.util.find_spec(m)])"
    )
    cli_file, types, tools = _run([str(installed.python), "-c", probe], tmp_path).split(" ", 2)
    assert Path(cli_file) == package / "cli" / "__init__.py"
    assert types == "['demo']"
    assert tools.strip() == "[]"
    version = _run([str(installed.python), "-m", "shardq.cli", "--version"], tmp_path)
    assert version.strip().endswith("0.1.0")


def example_blocks() -> tuple[str, str]:
    """The README's complete example: its two Python blocks, the handlers (`jobs.py`) and the
    producer (`producer.py`)."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## A complete example") :]
    blocks = [b.split("```", 1)[0] for b in section.split("```python\n")[1:3]]
    return blocks[0], blocks[1]


@pytest.fixture
def queue_name(cluster_url: str) -> Iterator[str]:
    name = f"wheel-{os.getpid()}-{os.urandom(3).hex()}"
    yield name
    with Client.from_url(cluster_url) as client, contextlib.suppress(UnknownQueueError):
        Inspector(client).delete_queue(name, force=True)


def test_the_installed_wheel_runs_the_quick_start(
    installed: Installed, cluster_url: str, queue_name: str, tmp_path: Path, procs: list[Proc]
) -> None:
    """README's complete example with only the installed wheel, outside the checkout: a dev
    server from the installed `shardq dev`, then the example's handlers and producer as written
    and its commands (`queue create`, `dispatcher run`, `worker run --handlers jobs:handlers`,
    `python producer.py`) on the session's cluster: the producer prints the handler's result."""
    app = tmp_path / "app"
    app.mkdir()
    handlers, producer = example_blocks()
    assert "handlers = {" in handlers and '"reminders"' in producer
    (app / "jobs.py").write_text(handlers)
    (app / "producer.py").write_text(producer.replace('"reminders"', repr(queue_name)))
    env = {**os.environ, "PYTHONPATH": str(app), "SHARDQ_REDIS_URL": cluster_url}
    env.pop("SHARDQ_QUEUE", None)

    shardq = str(installed.shardq)
    # the dev tools ship: a standalone server from the installed `shardq dev`
    port = free_port()
    started = _run([shardq, "dev", "standalone", "up", "--port", str(port)], tmp_path, env)
    try:
        assert started.strip().splitlines()[-1] == f"redis://127.0.0.1:{port}"
        status = _run([shardq, "dev", "standalone", "status", "--port", str(port)], tmp_path, env)
        assert str(port) in status
    finally:
        _run([shardq, "dev", "standalone", "down", "--port", str(port)], tmp_path, env)

    # the example's commands, as written (the queue renamed), in the folder of jobs.py
    url = ["--url", cluster_url]
    q = ["-q", queue_name]
    _run([shardq, "queue", "create", *q, "--partitions", "16", *url], app, env)
    dispatcher = Proc([shardq, "dispatcher", "run", *q, *url], env, cwd=app)
    worker = Proc([shardq, "worker", "run", *q, "--handlers", "jobs:handlers", *url], env, cwd=app)
    procs.extend([dispatcher, worker])
    printed = _run([str(installed.python), "producer.py"], app, env)
    assert printed.splitlines()[-1] == "result: sent", printed
    wait_for(
        lambda: "reminding user 42 (attempt 1)" in worker.log(), 10, lambda: worker.log()[-2000:]
    )
    for proc in (worker, dispatcher):
        assert proc.stop(scaled(30)) == 0, proc.log()
