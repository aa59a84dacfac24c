"""The wheel ships the Lua scripts: build it, install it into a fresh venv, load every script."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

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


def _run(cmd: list[str], cwd: Path) -> str:
    result = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_installed_wheel_loads_every_script(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    if importlib.util.find_spec("build") and importlib.util.find_spec("hatchling"):
        # offline and fast: the build backend is already in this venv
        build = [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist)]
    else:  # pip fetches the build backend into an isolated environment
        build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(dist), str(ROOT)]
    _run(build, ROOT)
    [wheel] = dist.glob("shardq-*.whl")

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path)
    python = venv / "bin" / "python"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "--no-deps",
            "--no-index",
            "--quiet",
            str(wheel),
        ],
        tmp_path,
    )
    # Dependencies come from the main venv, after the fresh venv's own site-packages (a .pth
    # line appends), so the shardq that imports is the one the wheel installed.
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], tmp_path
        ).strip()
    )
    (site / "main_venv_deps.pth").write_text(sysconfig.get_path("purelib") + "\n")

    out = json.loads(_run([str(python), "-c", PROBE], tmp_path))

    installed = site / "shardq"
    assert Path(out["package"]).parent == installed
    assert Path(out["lua_dir"]) == installed / "lua"
    assert Path(out["lua_dir"]).is_relative_to(venv)
    repo_scripts = sorted(p.name for p in (ROOT / "lua").glob("*.lua"))
    assert out["names"] == sorted(name.rsplit("-", 1)[0] for name in repo_scripts)
    assert {f"{n}-{k}.lua" for n, k in out["keys"].items()} == set(repo_scripts)
    assert out["includes_left"] == []
    assert sorted(p.name for p in (installed / "lua").glob("*.lua")) == repo_scripts
    assert sorted(p.name for p in (installed / "lua" / "includes").glob("*.lua")) == sorted(
        p.name for p in (ROOT / "lua" / "includes").glob("*.lua")
    )
    from shardq.store import loader

    assert out["functions"] == {n: lua.function for n, lua in loader.scripts().items()}
    assert out["library"] == loader.library().name  # the same library, byte for byte
    # the web console's assets ship in the package (no CDN): every template and static file
    web = ROOT / "shardq" / "web"
    for folder in ("static", "templates"):
        shipped = sorted(p.name for p in (installed / "web" / folder).iterdir())
        assert shipped == sorted(p.name for p in (web / folder).iterdir()), folder
    # every module of the repository's package is installed (the packages made by moving
    # modules, cli/ devtools/ examples/, included), and the CLI, its `python -m` entry and
    # the example handlers the manifests name import from the installed copy
    modules = sorted(p.relative_to(ROOT / "shardq") for p in (ROOT / "shardq").rglob("*.py"))
    assert [m for m in modules if not (installed / m).is_file()] == []
    probe = (
        "import shardq.cli, shardq.examples.handlers as h, shardq.devtools.bench, shardq.format;"
        "print(shardq.cli.__file__, sorted(h.handlers))"
    )
    cli_file, types = _run([str(python), "-c", probe], tmp_path).split(" ", 1)
    assert Path(cli_file) == installed / "cli" / "__init__.py"
    assert types.strip() == "['demo']"
    assert _run([str(python), "-m", "shardq.cli", "--version"], tmp_path).strip().endswith("0.1.0")
