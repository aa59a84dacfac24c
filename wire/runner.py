"""Checks a producer client, in any language, against the wire vectors (docs/wire.md).

    python -m wire.runner --url redis://127.0.0.1:7310 [--driver "node ..."]

The client runs behind a *driver*: a process that reads one JSON request per line on stdin
and answers one JSON line on stdout (docs/wire.md "Conformance"), or, for the Python client,
:class:`PythonDriver` in this process.  For each case of wire/vectors/calls.json the runner
deletes the case's queue, then for each step asks the driver to run it and checks:

- the result (a subset match: the fields the vector names) or the typed error's class name;
- the Redis state the vector lists (each command read back by the runner itself);
- on a standalone node, the exact calls the client sent: MONITOR records every command, and
  the step's FCALLs and writes must be the vector's ``send`` (function names with the
  library's prefix, KEYS and ARGV byte for byte; a bulk enqueue's calls in any order).

The pure vectors (keys, routing, bodies, ...) are checked by each client's own unit tests: they
need no Redis.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from shardq.client import Client
from shardq.connection import as_text, is_cluster
from shardq.errors import ShardqError
from shardq.jobs import EnqueueResult, JobInfo
from shardq.plans import producer as plans
from shardq.store import functions, keys
from wire import spec

DEFAULT_SLACK_MS = 2000


class Driver:
    """Runs one step of a vector with a client; returns its result as JSON or raises
    :class:`StepError` with the error's class name."""

    def run(self, url: str, queue: dict[str, Any], step: dict[str, Any]) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        pass


class StepError(Exception):
    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name


def enqueue_json(r: EnqueueResult) -> dict[str, Any]:
    return {"job_id": r.job_id, "created": r.created, "due_ms": r.due_ms, "partition": r.partition}


def info_json(info: JobInfo | None) -> dict[str, Any] | None:
    """A job's snapshot as the vectors write it (times in ms)."""
    if info is None:
        return None
    d = dataclasses.asdict(info)

    def ms(value: float | None) -> int | None:
        return None if value is None else round(value * 1000)

    d["keep_result_ms"] = ms(d.pop("keep_result"))
    d["timeout_ms"] = ms(d.pop("timeout"))
    d["start_within_ms"] = ms(d.pop("start_within"))
    return d


class PythonDriver(Driver):
    """The Python client (shardq.Client), in this process.  Enqueues go through the plans
    without tracing: with a tracer provider set (another test's, an application's) the client
    adds a ``traceparent`` header to every body, which the vectors' requests do not have."""

    def __init__(self) -> None:
        self._clients: dict[str, Client] = {}

    def _client(self, url: str) -> Client:
        if url not in self._clients:
            self._clients[url] = Client.from_url(url)
        return self._clients[url]

    def run(self, url: str, queue: dict[str, Any], step: dict[str, Any]) -> Any:
        c = self._client(url)
        name = queue["name"]
        s = spec.settings_from_vector(step.get("settings"))
        try:
            op = step["op"]
            if op == "create_queue":
                return c.create_queue(name, step["partitions"], lanes=bool(step.get("lanes")))
            if op == "enqueue":
                req = spec.request_from_vector(step["request"])
                plan = plans.enqueue_untraced(c.cache, name, req, s, False)
                return enqueue_json(c.run(plan, "wire vector"))
            if op == "enqueue_many":
                reqs = [spec.request_from_vector(r) for r in step["requests"]]
                plan_many = plans.enqueue_many_untraced(c.cache, name, reqs, s, 5000, False)
                return [enqueue_json(r) for r in c.run(plan_many, "wire vector")]
            if op == "get":
                return info_json(c.get(name, step["job_id"]))
            if op == "cancel":
                return c.cancel(name, step["job_id"], running=bool(step.get("running")))
            if op == "reschedule":
                delay = None if step.get("delay_ms") is None else step["delay_ms"] / 1000
                run_at = None if step.get("run_at_ms") is None else step["run_at_ms"] / 1000
                return c.reschedule(
                    name, step["job_id"], run_at=run_at, delay=delay, priority=step.get("priority")
                )
        except ShardqError as exc:
            raise StepError(type(exc).__name__, str(exc)) from None
        raise ValueError(f"unknown op {step['op']!r}")

    def close(self) -> None:
        for c in self._clients.values():
            c.close()


class SubprocessDriver(Driver):
    """A client in another language behind a JSON-lines driver process (docs/wire.md)."""

    def __init__(self, command: list[str], cwd: str | None = None) -> None:
        self._proc = subprocess.Popen(
            command, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )

    def run(self, url: str, queue: dict[str, Any], step: dict[str, Any]) -> Any:
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(json.dumps({"url": url, "queue": queue, "step": step}) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError(f"driver exited ({self._proc.poll()}) without answering")
        answer = json.loads(line)
        if answer.get("ok"):
            return answer.get("result")
        raise StepError(answer.get("error", "?"), answer.get("message", ""))

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()


# matching --------------------------------------------------------------------------------------


class Mismatch(AssertionError):
    pass


def matches(expected: Any, actual: Any, window: tuple[int, int], where: str) -> None:
    """Raise Mismatch unless ``actual`` is what ``expected`` says (a subset for objects; the
    matchers of wire.spec's docstring); ``window``: Redis ms before and after."""
    if isinstance(expected, dict) and "from_now_ms" in expected:
        slack = expected.get("slack_ms", DEFAULT_SLACK_MS)
        lo, hi = window[0] + expected["from_now_ms"] - slack, window[1] + expected["from_now_ms"]
        value = float(actual) if actual is not None else None
        if value is None or not lo <= value <= hi + slack:
            raise Mismatch(f"{where}: {actual!r} is not {expected['from_now_ms']} ms from now")
        return
    if isinstance(expected, dict) and "ttl_ms" in expected:
        slack = expected.get("slack_ms", DEFAULT_SLACK_MS)
        if not isinstance(actual, int) or abs(actual - expected["ttl_ms"]) > slack + (
            window[1] - window[0]
        ):
            raise Mismatch(f"{where}: TTL {actual!r}, expected about {expected['ttl_ms']} ms")
        return
    if isinstance(expected, dict) and "re" in expected and len(expected) == 1:
        if not isinstance(actual, str) or re.fullmatch(expected["re"], actual) is None:
            raise Mismatch(f"{where}: {actual!r} does not match {expected['re']!r}")
        return
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            raise Mismatch(f"{where}: expected an object, got {actual!r:.200}")
        for k, v in expected.items():
            if k not in actual:
                raise Mismatch(f"{where}: no field {k!r} in {actual!r:.300}")
            matches(v, actual[k], window, f"{where}.{k}")
        return
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            raise Mismatch(f"{where}: expected {len(expected)} items, got {actual!r:.300}")
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            matches(e, a, window, f"{where}[{i}]")
        return
    if expected != actual:
        raise Mismatch(f"{where}: expected {expected!r:.300}, got {actual!r:.300}")


def _state_value(reply: Any) -> Any:
    if isinstance(reply, bytes):
        return as_text(reply)
    if isinstance(reply, float) and reply.is_integer():
        return int(reply)
    return reply


# MONITOR: what a client sent -------------------------------------------------------------------

_ARG_RE = re.compile(r'"((?:[^"\\]|\\.)*)"')
_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "a": "\a", "b": "\b", '"': '"', "\\": "\\"}


def _unescape(text: str) -> str:
    """One argument of a MONITOR line (sdscatrepr's escapes) back to its bytes, as text."""
    out = bytearray()
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "x":
                out.append(int(text[i + 2 : i + 4], 16))
                i += 4
                continue
            out += _ESCAPES.get(nxt, nxt).encode()
            i += 2
            continue
        out += ch.encode()
        i += 1
    return out.decode(errors="replace")


class Monitor:
    """Every command a standalone node runs while a step runs (a MONITOR connection)."""

    def __init__(self, url: str) -> None:
        self._conn: Any = redis.Redis.from_url(url)
        self._lines: list[list[str]] = []
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        if not self._ready.wait(5):
            raise RuntimeError("MONITOR did not start")

    def _read(self) -> None:
        with self._conn.monitor() as m:
            self._ready.set()
            conn = m.connection
            assert conn is not None
            while not self._stop.is_set():
                if not conn.can_read(timeout=0.05):
                    continue
                # The raw line ('<time> [<db> <client>] "ARG" "ARG" ...'): redis-py's own
                # parse joins the arguments with spaces, losing where one ends.
                line = as_text(conn.read_response())
                head = line.find("] ")
                if line[:head].endswith(" lua"):
                    continue  # a command a function ran, not one the client sent
                self._lines.append([_unescape(a) for a in _ARG_RE.findall(line[head + 2 :])])

    def mark(self) -> int:
        return len(self._lines)

    def since(self, mark: int, settle: float = 0.2) -> list[list[str]]:
        time.sleep(settle)  # MONITOR's feed trails the replies a little
        return self._lines[mark:]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._conn.close()


def expected_commands(send: list[dict[str, Any]]) -> list[list[str]]:
    return [
        functions.call_command(c["function"], c["keys"], c["argv"])
        if "function" in c
        else list(c["command"])
        for c in send
    ]


def sent_commands(seen: list[list[str]], send: list[dict[str, Any]]) -> list[list[str]]:
    """The commands of ``seen`` of the kinds the vector's ``send`` lists (its FCALLs and its
    writes), upper-cased verbs, in order; a client's reads (meta, TIME, HELLO...) are not
    part of the wire and are left out."""
    verbs = {c[0].upper() for c in expected_commands(send)} | set(functions.CALL_VERBS)
    out = []
    for args in seen:
        if not args:
            continue
        verb = args[0].upper()
        if verb in verbs:
            out.append([verb, *args[1:]])
    return out


# the run ---------------------------------------------------------------------------------------


def primaries(r: Any) -> list[Any]:
    """A connection to each primary (the node itself when standalone)."""
    if not is_cluster(r):
        return [r]
    return [r.get_redis_connection(n) for n in r.get_primaries()]


def clear_queue(r: Any, queue: str) -> None:
    """Delete every key of the vector's queue (its own, its partitions', its idempotency
    keys), on every primary."""
    nodes = primaries(r)
    for node in nodes:
        for pattern in keys.key_patterns(queue):
            for key in node.scan_iter(match=pattern, count=1000):
                node.delete(key)
    r.srem(keys.QUEUES_KEY, queue)


def redis_ms(r: Any) -> int:
    node = primaries(r)[0]
    sec, usec = node.time()
    return int(sec) * 1000 + int(usec) // 1000


def connect(url: str) -> Any:
    probe = redis.Redis.from_url(url)
    try:
        cluster = probe.info("cluster").get("cluster_enabled") == 1
    finally:
        probe.close()
    return redis.RedisCluster.from_url(url) if cluster else redis.Redis.from_url(url)


def load_library(r: Any) -> None:
    nodes = primaries(r)
    for node in nodes:
        node.function_load(functions.code(), replace=True)


def run_case(
    driver: Driver,
    url: str,
    case: dict[str, Any],
    r: Any,
    monitor: Monitor | None,
) -> None:
    """Run one case of calls.json; raises Mismatch at the first step that differs."""
    queue = case["queue"]
    clear_queue(r, queue["name"])
    for n, step in enumerate(case["steps"]):
        where = f"{case['name']} step {n + 1} ({step['op']})"
        mark = monitor.mark() if monitor else 0
        before = redis_ms(r)
        try:
            result, error = driver.run(url, queue, step), None
        except StepError as exc:
            result, error = None, exc
        after = redis_ms(r)
        window = (before, after)
        if "error" in step:
            if error is None:
                raise Mismatch(f"{where}: returned {result!r:.200}, expected {step['error']}")
            if error.name != step["error"]:
                raise Mismatch(f"{where}: raised {error}, expected {step['error']}")
        elif error is not None:
            raise Mismatch(f"{where}: raised {error}")
        elif "result" in step:
            matches(step["result"], result, window, f"{where} result")
        for check in step.get("state", []):
            got = _state_value(r.execute_command(*check["command"]))
            matches(check["expect"], got, window, f"{where} state {check['command']}")
        if monitor is not None:
            send = step.get("send", [])
            seen = sent_commands(monitor.since(mark), send)
            want = expected_commands(send)
            if step["op"] == "enqueue_many":
                seen, want = sorted(seen), sorted(want)
            if seen != want:
                raise Mismatch(f"{where}: sent\n  {seen!r:.2000}\nexpected\n  {want!r:.2000}")


def run(
    driver: Driver,
    url: str,
    directory: Path = spec.VECTORS_DIR,
    only: Callable[[str], bool] | None = None,
    watch: bool | None = None,
) -> list[str]:
    """Every case of calls.json against ``url``; returns the names run.  ``watch``: check the
    calls sent with MONITOR (default: on a standalone node)."""
    document = json.loads((directory / "calls.json").read_text())
    r = connect(url)
    load_library(r)
    standalone = not is_cluster(r)
    monitor = Monitor(url) if (standalone if watch is None else watch) else None
    done = []
    try:
        for case in document["cases"]:
            if only is None or only(case["name"]):
                run_case(driver, url, case, r, monitor)
                done.append(case["name"])
    finally:
        if monitor is not None:
            monitor.close()
        r.close()
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m wire.runner")
    parser.add_argument("--url", required=True, help="a cluster node or a standalone Redis")
    parser.add_argument(
        "--driver", default="", help="the client's driver command (default: Python)"
    )
    parser.add_argument("--cwd", default=None)
    parser.add_argument("--case", default="", help="only cases whose name contains this")
    args = parser.parse_args(argv)
    driver: Driver = (
        SubprocessDriver(args.driver.split(), args.cwd) if args.driver else PythonDriver()
    )
    try:
        done = run(driver, args.url, only=lambda name: args.case in name)
    except Mismatch as exc:
        print(f"FAIL {exc}", file=sys.stderr)
        return 1
    finally:
        driver.close()
    print(f"{len(done)} cases passed on {args.url}: {', '.join(done)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
