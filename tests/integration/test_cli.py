"""The ``shardq`` command line against the real local cluster: every command's exit code and
output shape, and the failures a user meets (Redis down, bad input, unknown queue) as one
line, exit 1 — or exit 2 for usage errors, as click does."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from support.cli import assert_one_line_error, ok, run
from support.helpers import Runner, job_id_in, scaled, stored_envelope, wait_for

from shardq import format as fmt
from shardq.client import Client
from shardq.config import WorkerSettings
from shardq.errors import PermanentError
from shardq.store import keys


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# failures ------------------------------------------------------------------------------------


def test_auth_failure_is_one_line(standalone_url: str) -> None:
    env = {"SHARDQ_REDIS_USERNAME": "nobody", "SHARDQ_REDIS_PASSWORD": "wrong-pw"}
    line = assert_one_line_error(run("queue", "list", "--url", standalone_url, env=env))
    assert "credentials" in line and "wrong-pw" not in line


def test_unknown_queue_is_exit_1_with_the_cli_command(cluster_url: str, queue: str) -> None:
    line = assert_one_line_error(run("job", "get", "-q", queue, "x", "--url", cluster_url))
    assert f"shardq queue create --queue {queue}" in line
    assert "client." not in line and "UnknownQueueError" not in line


# the grammar: old spellings, --yes ---------------------------------------------------------------


def _commands_in_help(text: str) -> set[str]:
    """The command names a group's --help lists."""
    listed = text.split("Commands:", 1)[1].splitlines()
    return {line.split()[0] for line in listed if line.startswith("  ") and line.strip()}


def test_old_spellings_run_their_new_command_and_say_so(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    """Scripts written for the flat commands go on working: each old spelling runs its new
    command (the same output on stdout) after one line on stderr naming the new one, and the
    help lists only the new ones."""
    cluster_client.create_queue(queue, 2)
    u = ["-q", queue, "--url", cluster_url]
    for old, new in (
        (["owners", *u, "--json"], ["queue", "owners", *u, "--json"]),
        (["health", *u, "--json"], ["redis", "check", *u, "--json"]),
        (["rebalance", *u], ["rebalance", "leases", *u]),
        (["rebalance", *u, "--even"], ["rebalance", "even", *u]),
        (["rebalance", *u, "--drain", "nobody"], ["rebalance", "drain", *u, "nobody"]),
    ):
        was, now = run(*old), run(*new)
        assert (was.exit_code, was.stdout) == (now.exit_code, now.stdout), (old, was.output)
        notes = was.stderr.splitlines()
        assert notes[0].startswith("note: `shardq ") and "is now `shardq " in notes[0], notes
        assert now.stderr.splitlines()[:1] == notes[1:2], (now.stderr, notes)  # nothing else
    made = run("enqueue", *u, "t", "--json")
    assert made.exit_code == 0 and json.loads(made.stdout)["created"] is True
    assert "`shardq enqueue` is now `shardq job enqueue`" in made.stderr
    said = run("stats", *u, "--json", "--window", "0")
    assert said.exit_code == 0 and json.loads(said.stdout)["queue"]["queue"] == queue
    assert "`shardq stats` is now `shardq queue stats`" in said.stderr
    shown = _commands_in_help(ok("--help"))
    assert {"job", "queue", "rebalance", "redis"} <= shown
    assert not shown & {"enqueue", "stats", "owners", "health", "demo", "dev"}, shown
    assert "retry-dead" not in _commands_in_help(ok("queue", "--help"))
    # `queue retry-dead` is `dlq replay --all`: a script that left --yes out fails, loudly
    assert_one_line_error(run("queue", "retry-dead", *u), 2)
    replayed = run("queue", "retry-dead", *u, "--yes")
    assert replayed.exit_code == 0 and "replayed 0 dead jobs" in replayed.stderr
    assert "is now `shardq dlq replay --all`" in replayed.stderr
    emptied = run("queue", "empty", *u, "--state", "dead", "--yes")
    assert emptied.exit_code == 0 and "is now `shardq dlq purge --all`" in emptied.stderr


def test_a_resize_moves_jobs_only_with_yes(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    cluster_client.create_queue(queue, 2)
    job_id = cluster_client.enqueue(queue, "t", None, delay=600)
    u = ["-q", queue, "--url", cluster_url]
    line = assert_one_line_error(run("queue", "resize", *u, "--partitions", "3"), 2)
    assert "moves every waiting job" in line and "add --yes" in line
    assert cluster_client.layout(queue).partitions == 2  # nothing started
    assert "resize done" in ok("queue", "resize", *u, "--partitions", "3", "--yes")
    assert cluster_client.layout(queue).partitions == 3
    assert cluster_client.get(queue, job_id) is not None


def test_dlq_replay_of_one_type(cluster_client: Client, cluster_url: str, queue: str) -> None:
    """`dlq replay --all --type T` (what `queue retry-dead --type T` did): only that type's
    dead jobs, and only with --yes."""
    cluster_client.create_queue(queue, 2)
    dead = {t: cluster_client.enqueue(queue, t, None) for t in ("a", "b")}
    with Runner(cluster_url, queue, dict.fromkeys(dead, _fail)):
        wait_for(
            lambda: all(_state(cluster_client, queue, j) == "dead" for j in dead.values()),
            scaled(20),
            "the jobs did not go dead",
        )
    u = ["-q", queue, "--url", cluster_url]
    assert "would replay every dead job of type a" in ok(
        "dlq", "replay", *u, "--all", "--type", "a"
    )
    assert _state(cluster_client, queue, dead["a"]) == "dead"
    assert "replayed 1 dead job(s) of type a" in ok(
        "dlq", "replay", *u, "--all", "--type", "a", "--yes"
    )
    assert _state(cluster_client, queue, dead["a"]) != "dead"
    assert _state(cluster_client, queue, dead["b"]) == "dead"
    assert_one_line_error(run("dlq", "replay", *u, dead["b"], "--type", "b", "--yes"), 2)


def _fail(job: Any) -> None:
    raise PermanentError("no")


def _state(client: Client, queue: str, job_id: str) -> str | None:
    info = client.get(queue, job_id)
    return None if info is None else info.state


# producer commands -----------------------------------------------------------------------------


def test_queue_create_list_and_json(cluster_url: str, queue: str) -> None:
    out = ok("queue", "create", "--queue", queue, "--partitions", "4", "--url", cluster_url)
    assert "created" in out
    assert "exists" in ok("--url", cluster_url, "queue", "create", "-q", queue, "--partitions", "4")
    conflict = run("queue", "create", "-q", queue, "--partitions", "8", "--url", cluster_url)
    assert "exists with 4 partitions" in assert_one_line_error(conflict)
    rows = json_lines(ok("queue", "list", "--json", "--url", cluster_url))
    assert {"queue": queue, "partitions": 4} in rows
    table = ok("queue", "list", "--url", cluster_url)
    assert table.splitlines()[0].split() == ["queue", "partitions"]
    assert any(line.split() == [queue, "4"] for line in table.splitlines())


def test_queue_from_the_environment(cluster_url: str, queue: str) -> None:
    env = {"SHARDQ_QUEUE": queue, "SHARDQ_REDIS_URL": cluster_url}
    assert run("queue", "create", "--partitions", "2", env=env).exit_code == 0
    result = run("job", "enqueue", "t", "--json", env=env)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["created"] is True


def test_enqueue_reports_dedup_and_takes_every_client_option(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    cluster_client.create_queue(queue, 4)
    args = ["job", "enqueue", "-q", queue, "mail.send", "--url", cluster_url, "--json"]
    opts = [
        "--payload",
        '{"to": "a@example.com"}',
        "--in",
        "5m",
        "--idempotency-key",
        "k-1",
        "--max-attempts",
        "3",
        "--backoff",
        "exponential",
        "--backoff-base",
        "2s",
        "--header",
        "traceparent=00-abc-def-01",
        "--header",
        "tenant=acme",
    ]
    first = json.loads(ok(*args, *opts))
    assert first["created"] is True and first["deduplicated"] is False
    assert set(first) >= {"job_id", "created", "due_ms", "due", "partition"}
    assert 250_000 < first["due_ms"] - fmt.now_ms() < 350_000
    assert first["due"].endswith("Z")
    again = json.loads(ok(*args, *opts))
    assert again["job_id"] == first["job_id"] and again["created"] is False
    assert again["deduplicated"] is True and again["deduplicated_by"] == "idempotency_key"
    assert again["due_ms"] == first["due_ms"]  # the existing job's due time
    human = ok(*args[:-1], *opts)
    assert human.startswith(first["job_id"]) and "deduplicated" in human and "(in 4m" in human
    info = cluster_client.get(queue, first["job_id"])
    assert info is not None and info.max_attempts == 3 and info.payload == {"to": "a@example.com"}
    raw = stored_envelope(
        cluster_client.redis, keys.partition_keys(queue, info.partition, 4), info.id
    )
    assert b"traceparent" in raw and b"tenant" in raw and b'"b"' in raw  # headers, backoff
    at = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    durable = json.loads(
        ok(*args[:-1], "--json", "--at", at.isoformat().replace("+00:00", "Z"), "--job-id", "j-1")
    )
    assert durable["job_id"] == "j-1" and durable["due_ms"] == int(at.timestamp() * 1000)


def _waits(node: redis.Redis) -> int:
    """WAIT commands the node has run (INFO commandstats): what a durable enqueue sends."""
    return int(node.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


def test_enqueue_durable_flag(cluster_client: Client, cluster_url: str, queue: str) -> None:
    """On the test cluster (a replica per primary) --durable exits 0 once the replica holds
    the job: one WAIT on the partition's primary, and the replica (READONLY) has the job."""
    cluster_client.create_queue(queue, 2)
    job_id = job_id_in(0, 2, "durable")
    pk = keys.partition_keys(queue, 0, 2)
    node = cluster_client.redis.nodes_manager.get_node_from_slot(keys.slot_of(pk.jobs))  # type: ignore[union-attr]
    primary = redis.Redis(host=node.host, port=node.port)
    replica = redis.Redis(host=node.host, port=int(primary.info("replication")["slave0"]["port"]))
    try:
        waits = _waits(primary)
        row = json.loads(
            ok(
                *(
                    "job",
                    "enqueue",
                    "-q",
                    queue,
                    "t",
                    "--job-id",
                    job_id,
                    "--json",
                    "--url",
                    cluster_url,
                ),
                *("--durable", "--durable-timeout", "2"),
            )
        )
        assert row["job_id"] == job_id and row["created"] and row["partition"] == "0", row
        assert _waits(primary) == waits + 1
        replica.execute_command(
            "READONLY"
        )  # read the replica itself, not a redirect to its primary
        assert replica.hget(pk.jobs, job_id) == primary.hget(pk.jobs, job_id) is not None
    finally:
        primary.close()
        replica.close()


@pytest.mark.parametrize("where", ["standalone, no replica", "cluster, 2 replicas asked"])
def test_enqueue_durable_that_cannot_be_confirmed_says_so(
    cluster_url: str, standalone_url: str, queue: str, where: str
) -> None:
    """No replica to confirm (the standalone node), or more asked than a primary has (the
    test cluster's have one): exit 1, one line saying how many confirmed, that the job is
    stored and that resending it is safe; the job is stored."""
    url, asked, confirmed = (
        (standalone_url, 1, 0) if where.startswith("standalone") else (cluster_url, 2, 1)
    )
    with Client.from_url(url) as client:
        client.create_queue(queue, 2)
        line = assert_one_line_error(
            run(
                *("job", "enqueue", "-q", queue, "t", "--job-id", "j-1", "--url", url),
                *("--durable", "--durable-timeout", "0.3", "--durable-replicas", str(asked)),
            )
        )
        said = f"j-1: stored on the primary but only {confirmed} of {asked} replica(s) confirmed"
        assert line.startswith(f"Error: {said} within 0.3 s."), line
        assert "resending with the same --idempotency-key or --job-id is safe" in line, line
        assert client.get(queue, "j-1") is not None


def test_enqueue_past_time_says_the_flag(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    cluster_client.create_queue(queue, 2)
    past = "2001-01-01T00:00:00Z"
    line = assert_one_line_error(
        run("job", "enqueue", "-q", queue, "t", "--at", past, "--url", cluster_url)
    )
    assert "--past-tolerance" in line and "past_tolerance" not in line and "delay=" not in line


def test_job_get_cancel_reschedule(cluster_client: Client, cluster_url: str, queue: str) -> None:
    cluster_client.create_queue(queue, 4)
    job_id = cluster_client.enqueue(queue, "t", {"n": 1}, delay=600)
    base = ["-q", queue, job_id, "--url", cluster_url]
    data = json.loads(ok("job", "get", *base, "--json"))
    assert data["id"] == job_id and data["state"] == "scheduled" and data["payload"] == {"n": 1}
    assert data["max_attempts"] == WorkerSettings().default_max_attempts
    assert data["max_attempts_default"] is True
    assert datetime.fromisoformat(data["due"]).timestamp() * 1000 == pytest.approx(
        data["due_ms"], abs=1
    )
    human = ok("job", "get", *base)
    assert "due:" in human and "(in 9m" in human and "null" not in human
    assert f"{WorkerSettings().default_max_attempts} (worker default" in human
    moved = ok("job", "reschedule", *base, "--in", "2h")
    assert moved.startswith(f"{job_id} due ") and ("Z (in 1h59m" in moved or "Z (in 2h)" in moved)
    moved_json = json.loads(ok("job", "reschedule", *base, "--delay", "60", "--json"))
    assert set(moved_json) == {"job_id", "due_ms", "due"}
    both = run("job", "reschedule", *base)
    assert both.exit_code == 2
    assert ok("job", "cancel", *base).strip() == f"cancelled {job_id}"
    assert "not found" in assert_one_line_error(run("job", "get", *base))
    assert "not found" in assert_one_line_error(run("job", "cancel", *base))


# What `shardq job get` needs: the command's module, the client and redis-py.  Not the roles,
# the metrics, the console, the admin code or the dev tools (issue 52 point 7; the helps are
# checked the same way, without Redis, in tests/unit/test_import_cost.py).
NOT_FOR_JOB_GET = (
    "prometheus_client",
    "starlette",
    "jinja2",
    "uvicorn",
    "cronsim",
    "shardq.worker",
    "shardq.dispatcher",
    "shardq.metrics",
    "shardq.web",
    "shardq.admin",
    "shardq.dev",
    "shardq.cli.queue",
    "shardq.cli.process",
)
JOB_GET_PROBE = """
import json, sys
from shardq.cli import main
main(sys.argv[1:], standalone_mode=False)
print(json.dumps(sorted(sys.modules)))
"""


def test_job_get_imports_what_it_needs_only(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    cluster_client.create_queue(queue, 4)
    job_id = cluster_client.enqueue(queue, "t", {"n": 1}, delay=600)
    argv = ["job", "get", "-q", queue, job_id, "--json", "--url", cluster_url]
    out = subprocess.run(
        [sys.executable, "-c", JOB_GET_PROBE, *argv],
        capture_output=True,
        text=True,
        timeout=scaled(60),
    )
    assert out.returncode == 0, out.stderr
    *shown, last = out.stdout.strip().splitlines()
    assert json.loads("\n".join(shown))["id"] == job_id  # it ran, against Redis
    modules = json.loads(last)
    assert {"redis", "shardq.client", "shardq.cli.job"} <= set(modules)
    assert [m for m in modules if m.startswith(NOT_FOR_JOB_GET)] == []


# operator commands -----------------------------------------------------------------------------


def test_stats_owners_health_functions(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    cluster_client.create_queue(queue, 4)
    cluster_client.enqueue(queue, "t", None, delay=60)
    q = ["-q", queue, "--url", cluster_url]
    data = json_lines(ok("queue", "stats", *q, "--json", "--window", "0.1"))
    assert len(data) == 1 and data[0]["queue"]["due"] == 1
    assert "hottest partitions" in ok("queue", "stats", *q, "--window", "0.1")
    rows = json_lines(ok("queue", "owners", *q, "--json"))
    assert [r["partition"] for r in rows] == ["0", "1", "2", "3"]  # names (g1.0 once resized)
    assert set(rows[0]) == {
        "partition",
        "owner",
        "token",
        "lease_age_s",
        "lease_ttl_s",
        "next_due_in_s",
        "malformed",  # lease fields that are not numbers in range (none here)
    }
    assert rows[0]["malformed"] == {}
    table = ok("queue", "owners", *q).splitlines()
    assert table[0].split()[:2] == ["partition", "token"] and len(table) == 5
    health = json.loads(ok("redis", "check", *q, "--json"))
    assert health["ok"] is True and health["queue"] == queue
    status = json.loads(ok("functions", "status", "--json", "--url", cluster_url))
    assert status["nodes"] and all(status["nodes"].values())


def test_stats_watch_plain_output_and_ctrl_c_exits_0(
    cluster_client: Client, cluster_url: str, queue: str
) -> None:
    cluster_client.create_queue(queue, 2)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "shardq.cli",
            "queue",
            "stats",
            "-q",
            queue,
            "--watch",
            "--window",
            "0.1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "SHARDQ_REDIS_URL": cluster_url},
        # As from a terminal: a suite started in the background (`make test &`) inherits an
        # ignored SIGINT, and Python only turns SIGINT into KeyboardInterrupt when it is not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    lines: list[str] = []
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)  # type: ignore[arg-type]
    reader.start()
    try:
        # Ctrl-C once it has drawn twice (however long a loaded machine takes to start it)
        wait_for(lambda: "".join(lines).count(f"queue {queue}:") >= 2, 20, "no second frame")
        proc.send_signal(2)  # SIGINT, as Ctrl-C sends
        err = proc.communicate(timeout=scaled(20))[1]
        reader.join(scaled(5))
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(lines)
    assert proc.returncode == 0, err
    assert "Aborted" not in err and "Traceback" not in err
    assert "\x1b[" not in out  # not a terminal: plain repeated output, no escape codes
    assert out.count(f"queue {queue}:") >= 2


def test_dlq_list_and_show(cluster_client: Client, cluster_url: str, queue: str) -> None:
    cluster_client.create_queue(queue, 2)

    def fail(job: object) -> None:
        raise PermanentError("no")

    job_id = cluster_client.enqueue(queue, "t", {"x": 1})
    with Runner(cluster_url, queue, {"t": fail}):
        wait_for(
            lambda: (
                (info := cluster_client.get(queue, job_id)) is not None and info.state == "dead"
            ),
            15,
            "job did not go dead",
        )
    q = ["-q", queue, "--url", cluster_url]
    letters = json_lines(ok("dlq", "list", *q, "--json"))
    assert [d["job_id"] for d in letters] == [job_id]
    assert letters[0]["died"].endswith("Z")
    human = ok("dlq", "list", *q)
    # The time it died, and how long ago ("now" within a second: the fleet stops in ms).
    assert job_id in human and re.search(r"Z \((now|\S+ ago)\)", human), human
    shown = json.loads(ok("dlq", "show", *q, job_id, "--json"))
    assert shown["state"] == "dead" and "no" in shown["last_error"]


def test_inspector_commands(cluster_client: Client, cluster_url: str, queue: str) -> None:
    """job list/find/run-now and queue info/members/pause/resume/cancel/retry-dead/empty/delete:
    exit codes, --json shapes, and --yes required for what cannot be undone."""
    from shardq import JobRequest

    u = ["--url", cluster_url, "-q", queue]
    cluster_client.create_queue(queue, 4)
    cluster_client.enqueue_many(
        queue, [JobRequest("a" if i % 2 else "b", i, delay=600) for i in range(30)]
    )
    job_id = cluster_client.enqueue(queue, "a", 1, delay=900, idempotency_key="k-1")
    page = json_lines(ok("job", "list", *u, "--state", "scheduled", "--limit", "7", "--json"))
    assert len(page) == 8 and "cursor" in page[-1]  # 7 jobs, then where to go on
    assert {"id", "partition", "state", "type", "due_ms", "attempt"} <= set(page[0])
    every = json_lines(ok("job", "list", *u, "--all", "--limit", "7", "--type", "b", "--json"))
    assert len(every) == 15 and {j["type"] for j in every} == {"b"}
    human = ok("job", "list", *u, "--limit", "3")
    assert "in 10m" in human or "in 9m" in human
    found = json.loads(ok("job", "find", *u, "--idempotency-key", "k-1", "--json"))
    assert found["id"] == job_id
    assert run("job", "find", *u, "--idempotency-key", "k-2").exit_code == 1
    assert "was scheduled" in ok("job", "run-now", *u, job_id)
    info = json_lines(ok("queue", "info", *u, "--json"))
    assert [i["partition"] for i in info] == ["0", "1", "2", "3"]
    assert ok("queue", "members", *u).strip() == "no live members"
    assert "4 partitions changed" in ok("queue", "pause", *u)
    assert all(i["paused"] for i in json_lines(ok("queue", "info", *u, "--json")))
    assert "4 partitions changed" in ok("queue", "resume", *u)
    assert_one_line_error(run("queue", "cancel", *u, "--type", "b"), 2)  # no --yes
    cancelled = run("queue", "cancel", *u, "--type", "b", "--yes")
    assert cancelled.exit_code == 0 and "cancelled 15 jobs" in cancelled.output
    assert "replayed 0 job(s)" in ok("dlq", "replay", *u, "--all", "--yes")
    assert_one_line_error(run("queue", "empty", *u, "--state", "scheduled"), 2)
    emptied = run("queue", "empty", *u, "--state", "scheduled", "--yes")
    assert (
        emptied.exit_code == 0 and "deleted 16 scheduled jobs" in emptied.output
    )  # 15 + the run-now one
    assert_one_line_error(run("queue", "delete", *u), 2)
    assert "deleted" in ok("queue", "delete", *u, "--yes")
    assert_one_line_error(run("queue", "info", *u))  # unknown queue now: exit 1
