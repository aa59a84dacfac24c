"""BullMQ (Node.js) in the same comparison: the Python side of the Node project in ``bullmq/``.

- producer (``bullmq/producer.js``): ``Queue.addBulk`` in chunks of 1,000, each job with the
  harness's job id, a ``body_bytes`` payload and ``delay`` = due ms minus the moment its chunk
  is built (``opts.timestamp``), so BullMQ's own due time (timestamp + delay) is the given one;
- consumer (``bullmq/consumer.js``): one ``Worker`` (``--concurrency``, default 100), a handler
  that appends ``<job id> <lateness ms>`` to the run log like :mod:`bench.baselines.record`,
  completed jobs removed (``removeOnComplete``), as shardq's ack removes a job.

Lateness is handler start minus due time on the machine's wall clock: BullMQ has no server
clock for delays (the producer's ``Date.now()`` sets the due time, the worker's decides what is
due).  Keys live under the BullMQ prefix ``{bq}`` (a hash tag: on a Redis Cluster every key of
every queue sits in one slot, as BullMQ requires), the queue named after the run's prefix:
``{bq}:<prefix>:wait``, ``...:delayed``, ``...:<job id>``.

``node`` and ``npm`` must be on PATH (``$NODE``, ``$NPM`` override); the Node dependencies are
installed on first use (:func:`ensure_installed`: ``npm ci`` from the lock file).

    python -m bench.baselines.bullmq_node --check    # install if needed, print the versions
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import redis as redis_lib
import redis.cluster

NODE_DIR = Path(__file__).resolve().parent / "bullmq"
BULLMQ_PREFIX = "{bq}"
MIN_NODE_MAJOR = 18
PRODUCE_TIMEOUT = 600.0


class Unavailable(RuntimeError):
    """node/npm are missing or the Node dependencies could not be installed."""


def _tool(name: str) -> str | None:
    return os.environ.get(name.upper()) or shutil.which(name)


def missing() -> str | None:
    """Why BullMQ cannot run here (node or npm absent or too old), or None."""
    node, npm = _tool("node"), _tool("npm")
    if node is None:
        return "node not found on PATH (install Node.js >= 18, or set $NODE)"
    if npm is None and not (NODE_DIR / "node_modules" / "bullmq").is_dir():
        return "npm not found on PATH (needed once to install bullmq; or set $NPM)"
    try:
        version = subprocess.run(
            [node, "--version"], capture_output=True, text=True, timeout=30, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{node} --version failed: {exc}"
    try:
        major = int(version.lstrip("v").split(".")[0])
    except ValueError:
        return f"cannot read the node version {version!r}"
    if major < MIN_NODE_MAJOR:
        return f"node {version} is too old (need >= {MIN_NODE_MAJOR})"
    return None


def ensure_installed() -> None:
    """Install the Node dependencies when ``node_modules`` lacks bullmq: ``npm ci`` (the
    versions of package-lock.json), or ``npm install`` when there is no lock file.  Raises
    :class:`Unavailable` with the reason (and npm's output) when it cannot."""
    why = missing()
    if why:
        raise Unavailable(why)
    if (NODE_DIR / "node_modules" / "bullmq" / "package.json").is_file():
        return
    npm = _tool("npm")
    assert npm is not None  # missing() checked it
    verb = "ci" if (NODE_DIR / "package-lock.json").is_file() else "install"
    cmd = [npm, verb, "--no-audit", "--no-fund", "--loglevel=error"]
    sys.stderr.write(f"installing the BullMQ baseline: {' '.join(cmd)} in {NODE_DIR}\n")
    try:
        done = subprocess.run(cmd, cwd=NODE_DIR, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as exc:
        raise Unavailable(f"npm {verb} failed: {exc}") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-20:])
        raise Unavailable(f"npm {verb} in {NODE_DIR} exited {done.returncode}:\n{tail}")


def versions() -> dict[str, str]:
    """node and the installed bullmq / ioredis versions."""
    node = _tool("node") or "node"
    out = {"node": subprocess.run([node, "--version"], capture_output=True, text=True).stdout}
    for pkg in ("bullmq", "ioredis"):
        meta = NODE_DIR / "node_modules" / pkg / "package.json"
        out[pkg] = json.loads(meta.read_text())["version"] if meta.is_file() else "-"
    return {k: v.strip() for k, v in out.items()}


@functools.lru_cache(maxsize=16)
def is_cluster_url(url: str) -> bool:
    probe = redis_lib.Redis.from_url(url)
    try:
        return int(probe.info("cluster").get("cluster_enabled", 0)) == 1
    finally:
        probe.close()


class Handle:
    """What the harness gets from :func:`connect`: the URL (the Node processes need it) and a
    redis-py client for counting and cleaning up."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.cluster = is_cluster_url(url)
        self.redis: Any = (
            redis.cluster.RedisCluster.from_url(url)
            if self.cluster
            else redis_lib.Redis.from_url(url)
        )

    def node_args(self) -> list[str]:
        return ["--url", self.url, "--prefix", BULLMQ_PREFIX] + (
            ["--cluster"] if self.cluster else []
        )

    def close(self) -> None:
        self.redis.close()


def connect(url: str) -> Handle:
    return Handle(url)


def setup(handle: Handle, prefix: str) -> None:
    ensure_installed()


def _node() -> str:
    node = _tool("node")
    if node is None:
        raise Unavailable("node not found on PATH")
    return node


def produce(handle: Handle, prefix: str, jobs: list[tuple[str, int]], body: str) -> float:
    """Enqueue (job id, due epoch ms) pairs through ``producer.js``; returns its seconds (the
    addBulk calls, without Node's start-up)."""
    cmd = [
        _node(),
        str(NODE_DIR / "producer.js"),
        *handle.node_args(),
        "--queue",
        prefix,
        "--body-bytes",
        str(len(body.encode())),
    ]
    lines = "".join(f"{job_id} {due_ms}\n" for job_id, due_ms in jobs)
    done = subprocess.run(
        cmd, input=lines, capture_output=True, text=True, cwd=NODE_DIR, timeout=PRODUCE_TIMEOUT
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr[-2000:]}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if report["jobs"] != len(jobs):
        raise RuntimeError(f"producer.js enqueued {report['jobs']} of {len(jobs)} jobs")
    return float(report["ms"]) / 1000.0


def consumer_argv(url: str, prefix: str, out: str) -> list[str]:
    """The consumer process the harness starts (and SIGKILLs in the restart scenario); the
    harness appends ``--concurrency``, ``--lock-ms``, ``--stalled-ms`` (later options win)."""
    return [
        _node(),
        str(NODE_DIR / "consumer.js"),
        "--url",
        url,
        "--prefix",
        BULLMQ_PREFIX,
        *(["--cluster"] if is_cluster_url(url) else []),
        "--queue",
        prefix,
        "--out",
        out,
    ]


def _key(prefix: str, name: str) -> str:
    return f"{BULLMQ_PREFIX}:{prefix}:{name}"


def leftover(handle: Handle, prefix: str) -> int:
    """Jobs BullMQ would still run: waiting, delayed, prioritized, paused, and active (a killed
    worker's active jobs go back to wait once the stalled check finds their lock gone)."""
    r = handle.redis
    pipe = r.pipeline(transaction=False)
    pipe.llen(_key(prefix, "wait"))
    pipe.llen(_key(prefix, "paused"))
    pipe.llen(_key(prefix, "active"))
    pipe.zcard(_key(prefix, "delayed"))
    pipe.zcard(_key(prefix, "prioritized"))
    return sum(int(n) for n in pipe.execute())


def failed(handle: Handle, prefix: str) -> int:
    """Jobs in BullMQ's failed set (a job stalled more than maxStalledCount times lands here)."""
    return int(handle.redis.zcard(_key(prefix, "failed")))


def cleanup(handle: Handle, prefix: str) -> None:
    """Delete every key of this run's queue, ``{bq}:<prefix>:*``, and nothing else."""
    r = handle.redis
    batch: list[bytes] = []
    for key in r.scan_iter(match=_key(prefix, "*"), count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            r.delete(*batch)
            batch.clear()
    if batch:
        r.delete(*batch)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.baselines.bullmq_node")
    parser.add_argument("--check", action="store_true", help="install if needed, show versions")
    args = parser.parse_args(argv)
    if args.check:
        try:
            ensure_installed()
        except Unavailable as exc:
            raise SystemExit(f"BullMQ baseline unavailable: {exc}") from exc
        print(json.dumps(versions()))


if __name__ == "__main__":
    main()
