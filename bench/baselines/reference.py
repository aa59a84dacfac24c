"""A checkout of another revision of this repository, for side-by-side runs of shardq's consumer.

    python -m bench.baselines.drain --reference f0dd435 ...

``git archive <rev>`` unpacked into ``$TMPDIR/shardq-ref-<full sha>`` (kept between runs: the
revision's tree never changes); its consumer runs with that directory first on PYTHONPATH, so it
imports that revision's shardq and loads that revision's Lua.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from bench.common import REPO


def checkout(rev: str) -> tuple[str, Path]:
    """(full sha, directory) of ``rev`` unpacked from this repository's history."""
    try:
        sha = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(f"--reference {rev!r}: not a commit of {REPO} ({exc})") from exc
    target = Path(tempfile.gettempdir()) / f"shardq-ref-{sha}"
    if not (target / "shardq" / "__init__.py").is_file():
        partial = target.with_name(target.name + ".partial")
        subprocess.run(["rm", "-rf", str(partial)], check=True)
        partial.mkdir(parents=True)
        archive = subprocess.Popen(["git", "-C", str(REPO), "archive", sha], stdout=subprocess.PIPE)
        subprocess.run(["tar", "-x", "-C", str(partial)], stdin=archive.stdout, check=True)
        if archive.wait() != 0:
            raise SystemExit(f"git archive {sha} failed")
        partial.rename(target)  # whole or not at all: a stopped unpack is redone next time
    return sha, target
