"""No record stops a process: malformed jobs, ready entries, members, owners and counters are
written straight into live queues (as a buggy producer or a careless operator would) while a
dispatcher and a worker run; each bad record is dead-lettered or skipped, the good jobs beside
them run, every loop keeps working, and every CLI command still answers."""

from __future__ import annotations

import dataclasses
import os
import re
import uuid
from collections import Counter
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from support.helpers import (
    FAST_DISPATCHER,
    FAST_WORKER,
    Runner,
    Runs,
    counter_value,
    job_id_in,
    one_by_one,
    pending_total,
    text,
    wait_for,
)

from shardq.cli import main as cli
from shardq.client import Client
from shardq.errors import RetryAfter
from shardq.jobs import Backoff, Job
from shardq.store import delivery, keys
from shardq.store.transport import SyncTransport

# (job id, stored envelope) pairs that no handler can run: each must end dead, not stop anyone.
BAD_ENVELOPES = [
    ("bad-backoff-str", 'S0|["t",1,{"b":"zzz"}]'),
    ("bad-backoff-list", 'S0|["t",1,{"b":["q",1,2]}]'),
    ("bad-backoff-obj", 'S0|["t",1,{"b":{}}]'),
    ("bad-backoff-empty", 'S0|["t",1,{"b":[]}]'),
    ("bad-attempts-str", 'S0|["t",1,{"m":"5"}]'),
    ("bad-attempts-neg", 'S0|["t",1,{"m":-1}]'),
    ("bad-headers", 'S0|["t",1,{"h":[1,2]}]'),
    ("bad-key", 'S0|["t",1,{"k":5}]'),
    ("bad-json", "S0|{not json"),
    ("bad-type", "S0|[1,2]"),
    ("bad-short", 'S0|["t"]'),
    ("bad-options", 'S0|["t",1,[1]]'),
    ("no-bar", "S0"),
    ("bad-attempt", 'Sx|["t",1]'),
    # numbers no producer writes: each must end dead, never retried forever
    ("bad-attempt-nan", 'Snan|["t",1]'),
    ("bad-attempt-inf", 'Sinf|["t",1]'),
    ("bad-attempt-huge", 'S1e400|["t",1]'),
    ("bad-attempts-huge", 'S0|["t",1,{"m":1e308}]'),
    ("bad-attempts-bigint", 'S0|["t",1,{"m":1000000000000000000000000000000}]'),
    ("bad-attempts-float", 'S0|["t",1,{"m":1.5}]'),
    ("bad-backoff-cap", 'S0|["t",1,{"b":["f",1,1e300]}]'),
    ("bad-backoff-neg", 'S0|["t",1,{"b":["e",-5,10]}]'),
    ("bad-backoff-text", 'S0|["t",1,{"b":["f","5","9"]}]'),
]
# ... of which the fetch script dead-letters these (no '|': no envelope; an attempt that is
# no whole number 0..1e9); the worker the rest, as MalformedJobError.
SCRIPT_REFUSED = {"no-bar", "bad-attempt", "bad-attempt-nan", "bad-attempt-inf", "bad-attempt-huge"}
# Ready entries a worker cannot trust: odd due times still run the job.
ODD_DUES = ["-inf", "inf", "nan", "1.5", "abc", ""]


def _runner(url: str, queue: str, runs: Runs) -> Runner:
    # Entries written here by hand come with no ready hint (an enqueue's), so the worker finds
    # them by its idle read: at most a second apart here.  With the default max_idle_poll a
    # partition read empty at start-up, before they were written, waits 30 s (and the good jobs,
    # one sticky run, may all land on the other partition and wake only that one).
    worker = dataclasses.replace(FAST_WORKER, max_idle_poll=1.0)
    return Runner(url, queue, {"t": runs.add}, worker_settings=worker)


def test_malformed_jobs_and_entries_go_dead_and_good_ones_run(
    cluster_url: str, cluster_client: Client, queue: str
) -> None:
    client, r = cluster_client, cluster_client.redis
    partitions = 2
    client.create_queue(queue, partitions)
    pk = keys.partition_keys(queue, 0, partitions)
    runs = Runs()
    with _runner(cluster_url, queue, runs) as runner:
        for job_id, envelope in BAD_ENVELOPES:
            jid = job_id_in(0, partitions, job_id)
            r.hset(pk.jobs, jid, envelope)
            r.xadd(pk.ready, {"j": jid, "d": "0"})
        odd = []
        for i, due in enumerate(ODD_DUES):
            jid = job_id_in(0, partitions, f"odd-due-{i}")
            r.hset(pk.jobs, jid, 'S0|["t",{"odd":true}]')
            r.xadd(pk.ready, {"j": jid, "d": due})
            odd.append(jid)
        binary = b"\xff\xfe-not-utf8"
        r.hset(pk.jobs, binary, 'S0|["t",1]')
        r.xadd(pk.ready, {"j": binary, "d": "0"})
        r.xadd(pk.ready, {"no-j": "x"})
        good = [client.enqueue(queue, "t", {"fine": i}) for i in range(10)]
        later = client.enqueue(queue, "t", {"later": True}, delay=0.5)
        expected = set(good) | set(odd) | {later}
        wait_for(
            lambda: expected <= set(runs.count()),
            30,
            lambda: f"not run: {expected - set(runs.count())}",
        )
        wait_for(lambda: pending_total(r, queue, partitions) == 0, 30, "deliveries stuck")
        wait_for(
            lambda: (
                len([e for e in r.xrange(pk.dead) if text(e[1].get(b"e", b"")).strip()])
                >= len(BAD_ENVELOPES) + 1
            ),
            30,
            lambda: f"dead: {len(r.xrange(pk.dead))}",
        )
        # An id no client can write (not UTF-8) cannot be named to a handler: it goes dead.
        wait_for(lambda: (r.hget(pk.jobs, binary) or b"").startswith(b"D"), 10, "binary id")
        worker = runner.workers[0]
        # Every bad envelope has a dead letter saying why: the fetch script's for those it
        # cannot take apart (no '|', an attempt that is no whole number), the worker's for
        # the rest (and for the id that is not UTF-8).
        reasons = {
            f.get(b"j", b"").decode(errors="replace") or text(f[b"e"]).split()[-1]: text(f[b"e"])
            for _, f in r.xrange(pk.dead)
            if b"e" in f
        }
        for job_id, _ in BAD_ENVELOPES:
            jid = job_id_in(0, partitions, job_id)
            want = (
                f"malformed envelope for job {jid}"
                if job_id in SCRIPT_REFUSED
                else "MalformedJobError: stored job cannot be read"
            )
            assert reasons.get(jid, "").startswith(want), (jid, reasons.get(jid))
        by_worker = len(BAD_ENVELOPES) - len(SCRIPT_REFUSED) + 1  # + the id that is not UTF-8
        assert worker.stats.malformed == by_worker
        assert counter_value("shardq_malformed_records_total", queue=queue, kind="job") == by_worker
        # the partition's counter: what the scripts dead-lettered (the entry with no job id
        # too), not what the worker did
        assert int(r.hget(pk.stats, "malformed") or 0) == len(SCRIPT_REFUSED) + 1
        runner.check()
        assert not worker.supervisor.failing() and worker.supervisor.healthy()
    # Nothing left active or stuck: every bad envelope is dead or gone.
    for job_id, _ in BAD_ENVELOPES:
        jid = job_id_in(0, partitions, job_id)
        envelope = r.hget(pk.jobs, jid)
        assert envelope is None or envelope.startswith(b"D"), (job_id, envelope)


def test_malformed_jobs_taken_over_by_reclaim_go_dead_beside_good_ones(
    cluster_url: str, cluster_client: Client, queue: str
) -> None:
    """A crashed consumer held a poison record and a good job: reclaim takes both, the good
    one runs, the bad one goes dead, and nothing stays pending."""
    client, r = cluster_client, cluster_client.redis
    client.create_queue(queue, 1)
    pk = keys.partition_keys(queue, 0, 1)
    r.hset(pk.jobs, "poison", 'S0|["t",1,{"b":"zzz"}]')
    r.xadd(pk.ready, {"j": "poison", "d": "-inf"})
    good = client.enqueue(queue, "t", {"fine": True})
    taken = SyncTransport(r).run(delivery.fetch(pk, "crashed-consumer", 10))
    assert len(taken.jobs) == 2
    runs = Runs()
    with _runner(cluster_url, queue, runs) as runner:
        wait_for(lambda: good in runs.count(), 30, "the good job was not reclaimed")
        wait_for(lambda: pending_total(r, queue, 1) == 0, 30, "poison stuck pending")
        wait_for(lambda: (r.hget(pk.jobs, "poison") or b"").startswith(b"D"), 10, "not dead")
        runner.check()
        assert runner.workers[0].supervisor.healthy()


def test_bad_fleet_records_do_not_stop_dispatchers(
    cluster_url: str, cluster_client: Client, queue: str
) -> None:
    """A non-integer owners field, 100 members with endless heartbeats, non-numeric counters:
    the dispatcher still holds every partition, promotes, samples and trims."""
    client, r = cluster_client, cluster_client.redis
    partitions = 4
    client.create_queue(queue, partitions)
    r.hset(
        keys.owners_key(queue),
        # '²' passed str.isdigit() and then failed int(); int() reads Arabic-Indic digits
        mapping={"notint": "x 1", "99": "ghost 1", "1": "", "²": "x 1", "\u0661": "y 1"},
    )
    r.zadd(keys.dispatchers_key(queue), {f"ghost-{i}": "+inf" for i in range(100)})
    for pk in keys.all_partition_keys(queue, partitions):
        # 'cancelled' and 'reclaimed' no script bumps here: they stay bad for the sampler
        r.hset(
            pk.stats,
            mapping={"promoted": "not-a-number", "enqueued": "x", "cancelled": "inf",
                     "reclaimed": "1e400"},
        )  # fmt: skip
    # A schedule no producer writes (a zero interval divided by zero in the ticker): stopped,
    # while a good one beside it keeps firing.
    bad = keys.partition_keys(queue, keys.partition_for("bad-sched", partitions), partitions)
    r.hset(bad.schedules, "bad-sched", '{"v":1,"type":"t","body":"[\\"t\\",1]","every":0}')
    r.zadd(bad.schedule_next, {"bad-sched": 1})
    client.schedules.add(queue, "good-sched", "t", {"tick": True}, every=1)
    stats_before = counter_value("shardq_malformed_records_total", queue=queue, kind="stats")
    runs = Runs()
    settings = dataclasses.replace(FAST_DISPATCHER, metrics_interval=0.2)
    with Runner(
        cluster_url, queue, {"t": runs.add}, wait_leases=False, dispatcher_settings=settings
    ) as runner:
        d = runner.dispatcher
        assert d is not None
        wait_for(lambda: len(d.tokens) == partitions, 30, "the dispatcher did not take over")
        # Spread one by one: every partition should see a promote (its counter repaired).
        spread = one_by_one(client)
        ids = {spread.enqueue(queue, "t", i, delay=0.3) for i in range(40)}
        wait_for(lambda: ids <= set(runs.count()), 30, "jobs did not run")
        # Counters repaired by the scripts, not fatal to them or to the sampler.
        wait_for(
            lambda: all(
                r.hget(pk.stats, "promoted") not in (None, b"not-a-number")
                for pk in keys.all_partition_keys(queue, partitions)
            ),
            30,
            "counters not repaired",
        )
        wait_for(
            lambda: (
                counter_value("shardq_malformed_records_total", queue=queue, kind="stats")
                > stats_before
            ),
            30,
            "the sampler did not count the bad counters",
        )
        wait_for(
            lambda: sum(1 for j in runs.jobs if j.payload == {"tick": True}) >= 2,
            30,
            "the good schedule stopped firing",
        )
        wait_for(
            lambda: counter_value("shardq_malformed_records_total", queue=queue, kind="owner") > 0,
            30,
            "the bad owners fields were not counted",
        )
        wait_for(  # stopped, not looped on
            lambda: r.zscore(bad.schedule_next, "bad-sched") is None,
            30,
            "the schedule of interval 0 was not stopped",
        )
        runner.check()
        assert d.supervisor.healthy()
    assert r.zcount(keys.dispatchers_key(queue), "-inf", "+inf") == 0  # endless ones pruned


def _one_line_error(args: list[str], result: Any, code: int) -> str:
    """The command failed (with ``code``) in one line that starts with 'Error:' (click's usage
    lines around it allowed), no traceback; returns that line."""
    text = result.output + result.stderr
    assert "Traceback" not in text, (args, text)
    assert result.exception is None or isinstance(result.exception, SystemExit), (args, text)
    assert code != 0 and result.exit_code == code, (args, text)
    lines = [
        line
        for line in result.stderr.splitlines()
        if line.strip()
        and not line.startswith(("Usage:", "Try '"))
        and "visible to every user" not in line  # (the argv password warning)
    ]
    assert len(lines) == 1 and lines[0].startswith("Error: "), (args, text)
    return lines[0]


def _answers(args: list[str], result: Any, code: int, words: list[str]) -> str:
    """The command exited with ``code`` and its answer (or its one error line) names every
    one of ``words``: each bad record it met, what it did, what to do.  Returns the output."""
    if code == 0:
        text = result.output + result.stderr
        assert result.exit_code == 0 and result.exception is None, (args, text)
        assert "Traceback" not in text, (args, text)
    else:
        text = _one_line_error(args, result, code)
    missing = [w for w in words if w not in text]
    assert not missing, (args, missing, text)
    return str(result.output)


def test_cli_commands_answer_despite_bad_records(
    cluster_url: str, cluster_client: Client, queue: str
) -> None:
    """Each read command answers (exit 0) and names the bad records it met; the commands that
    act say what they did and what they skipped; a job whose body cannot be shown is one line
    saying so and how to remove it."""
    client, r = cluster_client, cluster_client.redis
    client.create_queue(queue, 2)
    pk = keys.partition_keys(queue, 0, 2)
    # ids of partition 0, so commands that look a job up by id find these records
    x1, x2 = job_id_in(0, 2, "x1"), job_id_in(0, 2, "x2")
    r.xadd(pk.dead, {"j": x1, "a": "notint", "e": "boom", "t": "later"})
    r.xadd(pk.dead, {"e": "malformed", "raw": b"\xff\xfe\x00", "t": "1"})
    r.xadd(pk.dead, {"j": x2, "a": "nan", "e": "boom", "t": "inf"})
    r.hset(pk.jobs, x1, "D1|[1,2]")
    r.hset(pk.jobs, x2, "Dnan|[1,2]")
    r.hset(pk.stats, mapping={"enqueued": "inf", "dead": "1e400", "promoted": "²"})
    r.zadd(keys.dispatchers_key(queue), {"dispatcher:ghost#1": "+inf"})
    r.set(pk.lease, "²:ghost", px=60_000)
    r.sadd(keys.QUEUES_KEY, "gone-queue")  # registered, but its meta is missing
    runner = CliRunner()
    base = ["--queue", queue, "--url", cluster_url]
    bad_body = ["malformed body", "`shardq job cancel` removes it"]
    args = ["dlq", "list", *base, "--json"]
    rows = [orjson.loads(x) for x in _answers(args, runner.invoke(cli, args), 0, []).splitlines()]
    assert {row["job_id"]: row["malformed"] for row in rows} == {
        x1: {"attempt": "'notint'", "at_ms": "'later'"},
        x2: {"attempt": "'nan'", "at_ms": "'inf'"},
        None: {},  # the letter with no job id: its raw fields are kept instead
    }, rows
    for args, code, words in [
        (
            ["dlq", "list", *base],
            0,
            [
                "3 dead letter(s)",
                "(malformed)",
                "at_ms = 'later', attempt = 'notint'",
                "at_ms = 'inf', attempt = 'nan'",
            ],
        ),
        (["dlq", "show", *base, x1], 1, [repr(x1), *bad_body]),
        (["dlq", "show", *base, x2], 1, [repr(x2), *bad_body]),
        (
            ["job", "list", *base, "--state", "dead"],
            0,
            [
                f"malformed: job {x1}: body = '[1,2]', dead_at_ms = 'later'",
                f"malformed: job {x2}: attempt = 'nan', body = '[1,2]', dead_at_ms = 'inf'",
            ],
        ),
        # the two dead jobs go back; the letter with no job is skipped, then purged
        (
            ["dlq", "replay", *base, "--all", "--yes"],
            0,
            ["replayed 2 job(s); skipped 1 (malformed"],
        ),
        (["dlq", "purge", *base, "--all", "--yes"], 0, ["purged 1 dead letter(s)"]),
        (["queue", "list", "--url", cluster_url], 0, ["gone-queue ", "? (damaged)", queue]),
        (
            ["queue", "info", *base],
            0,
            [
                "malformed: partition 0: counter dead = '1e400', counter enqueued = 'inf', "
                "counter promoted = '²', token = '²'"
            ],
        ),
        (
            ["queue", "members", *base],
            0,
            ["(malformed)", "malformed: dispatcher dispatcher:ghost#1: heartbeat_expires_ms = inf"],
        ),
        (["queue", "owners", *base], 0, ["malformed: partition 0: token = '²'"]),
        (["rebalance", "leases", *base], 0, ["2 partitions", "ghost: holds 1 but is not live"]),
        (
            ["queue", "stats", *base, "--window", "0"],
            0,
            ["malformed: partition 0: counter dead = '1e400', counter enqueued = 'inf'"],
        ),
    ]:
        _answers(args, runner.invoke(cli, args), code, words)
    # The damaged entry's own row says so (the column is as wide as the longest queue name of
    # the shared cluster's registry, which other tests fill).
    args = ["queue", "list", "--url", cluster_url]
    listing = runner.invoke(cli, args).output
    assert re.search(r"^gone-queue +\? \(damaged\)$", listing, re.M), listing
    args = ["queue", "stats", *base, "--json", "--window", "0"]
    stats = orjson.loads(_answers(args, runner.invoke(cli, args), 0, []))
    assert stats["queue"]["malformed_partitions"] == 1, stats
    assert stats["partitions"][0]["malformed"] == {
        "counter enqueued": "'inf'",
        "counter dead": "'1e400'",
        "counter promoted": "'²'",
    }, stats
    r.hset(pk.jobs, job_id_in(0, 2, "weird"), "S0|{not json")
    weird = job_id_in(0, 2, "weird")
    args = ["job", "get", "-q", queue, weird, "--url", cluster_url]
    line = _one_line_error(args, runner.invoke(cli, args), 1)
    assert "malformed body" in line and "job cancel" in line, line
    r.srem(keys.QUEUES_KEY, "gone-queue")


# Every command that talks to Redis, with a queue ({q}), a job id ({id}) or a name ({name}).
REDIS_COMMANDS: list[list[str]] = [
    ["queue", "create", "-q", "{q}", "--partitions", "2"],
    ["queue", "lanes", "-q", "{q}", "--on"],
    ["queue", "upgrade", "-q", "{q}"],
    ["queue", "list"],
    ["queue", "info", "-q", "{q}"],
    ["queue", "members", "-q", "{q}"],
    ["queue", "pause", "-q", "{q}"],
    ["queue", "resume", "-q", "{q}"],
    ["queue", "cancel", "-q", "{q}", "--state", "scheduled", "--yes"],
    ["queue", "empty", "-q", "{q}", "--state", "ready", "--yes"],
    ["queue", "delete", "-q", "{q}", "--yes"],
    ["job", "enqueue", "-q", "{q}", "t"],
    ["job", "get", "-q", "{q}", "{id}"],
    ["job", "cancel", "-q", "{q}", "{id}"],
    ["job", "reschedule", "-q", "{q}", "{id}", "--delay", "5"],
    ["job", "run-now", "-q", "{q}", "{id}"],
    ["job", "list", "-q", "{q}", "--state", "scheduled"],
    ["job", "find", "-q", "{q}", "--idempotency-key", "k"],
    ["schedule", "add", "-q", "{q}", "{name}", "t", "--every", "60"],
    ["schedule", "list", "-q", "{q}"],
    ["schedule", "show", "-q", "{q}", "{name}"],
    ["schedule", "pause", "-q", "{q}", "{name}"],
    ["schedule", "resume", "-q", "{q}", "{name}"],
    ["schedule", "remove", "-q", "{q}", "{name}"],
    ["schedule", "next", "-q", "{q}", "{name}"],
    ["queue", "owners", "-q", "{q}"],
    ["rebalance", "leases", "-q", "{q}"],
    ["rebalance", "even", "-q", "{q}"],
    ["queue", "stats", "-q", "{q}", "--window", "0"],
    ["dlq", "list", "-q", "{q}"],
    ["dlq", "show", "-q", "{q}", "{id}"],
    ["dlq", "replay", "-q", "{q}", "--yes", "{id}"],
    ["dlq", "purge", "-q", "{q}", "--yes", "{id}"],
    ["dlq", "replay", "-q", "{q}", "--all", "--yes"],
    ["dlq", "replay", "-q", "{q}", "--all", "--type", "t", "--yes"],
    ["dlq", "purge", "-q", "{q}", "--all", "--yes"],
    ["limit", "set", "-q", "{q}", "--type", "t", "--rate", "10/s"],
    ["limit", "list", "-q", "{q}"],
    ["limit", "remove", "-q", "{q}", "--type", "t"],
    ["functions", "status"],
    ["functions", "load"],
    ["redis", "check"],
    ["redis", "check", "-q", "{q}"],
]
NOT_UTF8 = os.fsdecode(b"\xff\xfe")  # what a shell hands over for bytes that are not UTF-8


def _fill(args: list[str], q: str, job_id: str = "some-id", name: str = "s1") -> list[str]:
    return [a.format(q=q, id=job_id, name=name) for a in args]


@pytest.mark.parametrize(
    ("url", "code", "words"),
    [
        ("redis://[::1:7000", 2, ("'--url'", "cannot be parsed", "redis://[::1]:6379")),
        ("redis://u:pw#x@127.0.0.1:notaport", 2, ("'--url'", "bad port", "1-65535")),
        ("http://127.0.0.1:7000", 2, ("'--url'", "must start with redis://")),
        ("redis://127.0.0.1:1", 1, ("cannot reach Redis", "check --url")),
    ],
)
def test_every_cli_command_fails_in_one_line_on_a_bad_url_or_redis_down(
    url: str, code: int, words: tuple[str, ...]
) -> None:
    """A URL that cannot be one is a usage error (exit 2) naming --url and the fix; Redis down
    is one line naming it (exit 1); never a traceback, in any command."""
    runner = CliRunner()
    for command in REDIS_COMMANDS:
        args = [*_fill(command, "some-queue"), "--url", url]
        line = _one_line_error(args, runner.invoke(cli, args), code)
        assert all(w in line for w in words), (args, line)
        assert "pw#x" not in line and ":pw" not in line  # (the password stays hidden)


def test_every_cli_command_fails_in_one_line_on_an_unknown_queue(cluster_url: str) -> None:
    runner = CliRunner()
    queue = "never-made-" + uuid.uuid4().hex[:8]
    for command in REDIS_COMMANDS:
        if "{q}" not in command or command[:2] in (["queue", "create"], ["queue", "delete"]):
            continue
        args = [*_fill(command, queue), "--url", cluster_url]
        line = _one_line_error(args, runner.invoke(cli, args), 1)
        assert f"queue {queue!r} does not exist" in line and "shardq queue create" in line, (
            args,
            line,
        )


def test_every_cli_command_fails_in_one_line_on_a_bad_id_or_name(
    cluster_url: str, cluster_client: Client, queue: str
) -> None:
    """Ids and names that are not text (bytes that are not UTF-8) or break the id rule: a usage
    error or one line naming the rule, before anything talks to Redis (dlq replay with a
    non-UTF-8 id was a UnicodeEncodeError traceback)."""
    cluster_client.create_queue(queue, 2)
    cluster_client.redis.xadd(
        keys.partition_keys(queue, 0, 2).dead, {"j": "x", "e": "boom", "t": "1"}
    )
    runner = CliRunner()
    for bad in (NOT_UTF8, "has space", "x" * 200):
        for command in REDIS_COMMANDS:
            if "{id}" not in command and "{name}" not in command:
                continue
            args = [*_fill(command, queue, bad, bad), "--url", cluster_url]
            # a job id is a usage error (its click type); a schedule name is refused in one
            # line by the schedules API
            code, rule = (2, "use 1-128 printable") if "{id}" in command else (1, "use 1-100")
            line = _one_line_error(args, runner.invoke(cli, args), code)
            assert f"{bad!r} is invalid: {rule}" in line, (args, line)
    not_text = "is not valid text (it holds bytes that are not UTF-8): write it in UTF-8"
    lone = "'\\udcff\\udcfe' is not valid Unicode (a lone surrogate): fix its source"
    parts = "use partition numbers 0-16383 and ranges of them"
    for args, code, words in (
        (["limit", "remove", "-q", queue, "--type", NOT_UTF8], 1, "is not valid text: give type:"),
        (["redis", "check", "--username", NOT_UTF8], 2, f"'--username': {not_text}"),
        (["redis", "check", "--password", NOT_UTF8], 2, f"'--password': {not_text}"),
        (
            ["job", "find", "-q", queue, "--idempotency-key", NOT_UTF8],
            1,
            f"--idempotency-key {lone}",
        ),
        (
            ["job", "enqueue", "-q", queue, "t", "--idempotency-key", NOT_UTF8],
            1,
            f"--idempotency-key {lone}",
        ),
        (
            ["job", "enqueue", "-q", queue, "t", "--delay", "9" * 400],
            2,
            "is too long: at most 316224000 s",
        ),
        (
            ["job", "reschedule", "-q", queue, "x", "--delay", "9" * 400],
            2,
            "is too long: at most 316224000 s",
        ),
        # (a range of 10**11 partitions was built as a list before anything was checked)
        (
            [
                "worker",
                "run",
                "-q",
                queue,
                "--handlers",
                "shardq.dev.handlers:handlers",
                "--partitions",
                "0-99999999999",
            ],
            2,
            f"'0-99999999999': {parts}",
        ),
        (["dispatcher", "run", "-q", queue, "--partitions", "\u0663"], 2, f"'\u0663': {parts}"),
    ):
        line = _one_line_error(args, runner.invoke(cli, [*args, "--url", cluster_url]), code)
        assert words in line, (args, line)


RECORD = st.one_of(
    st.binary(max_size=40),
    st.builds(
        lambda v: b"S0|" + orjson.dumps(v),
        st.lists(st.none() | st.integers() | st.text(max_size=5), max_size=4),
    ),
    st.builds(
        lambda opts: b'S0|["t",1,' + orjson.dumps(opts) + b"]",
        st.dictionaries(
            st.sampled_from(["m", "b", "k", "h", "x"]),
            st.none() | st.integers() | st.text(max_size=4) | st.lists(st.integers(), max_size=3),
            max_size=3,
        ),
    ),
)


@settings(max_examples=4)
@given(records=st.lists(st.tuples(RECORD, st.text(max_size=6)), min_size=5, max_size=20))
def test_any_stored_record_is_run_or_dead_and_the_worker_carries_on(
    cluster_url: str, records: list[tuple[bytes, str]]
) -> None:
    """Hypothesis writes arbitrary envelopes and due fields; every one ends run, dead or gone,
    none stays pending, and a good job enqueued after them still runs."""
    import uuid

    client = Client.from_url(cluster_url)
    queue = "h-" + uuid.uuid4().hex[:10]
    client.create_queue(queue, 1)
    r = client.redis
    pk = keys.partition_keys(queue, 0, 1)
    for i, (envelope, due) in enumerate(records):
        r.hset(pk.jobs, f"rec-{i}", envelope)
        r.xadd(pk.ready, {"j": f"rec-{i}", "d": due})
    runs = Runs()
    try:
        with _runner(cluster_url, queue, runs) as runner:
            good = client.enqueue(queue, "t", {"fine": True})
            wait_for(lambda: good in runs.count(), 30, "the worker stopped serving")
            wait_for(lambda: pending_total(r, queue, 1) == 0, 30, "a record stays pending")
            runner.check()
            assert runner.workers[0].supervisor.healthy()
        for i in range(len(records)):
            envelope = r.hget(pk.jobs, f"rec-{i}")
            ran = f"rec-{i}" in runs.count()
            assert ran or envelope is None or envelope.startswith(b"D"), (i, envelope)
    finally:
        client.close()


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ itself fails")


def test_failure_settles_that_cannot_be_described_still_end_each_delivery(
    cluster_url: str, cluster_client: Client, queue: str
) -> None:
    """Handlers that raise odd things (RetryAfter(nan), RetryAfter('5'), RetryAfter(-1), an
    exception whose __str__ raises, an exception of a huge message) each end back in due or
    dead: nothing stays in the worker's in-flight table, pending, or holds a slot."""
    client, r = cluster_client, cluster_client.redis
    client.create_queue(queue, 2)
    attempts: Counter[str] = Counter()
    raisers = {
        "nan": lambda: RetryAfter(float("nan")),
        "inf": lambda: RetryAfter(float("inf")),
        "str": lambda: RetryAfter("5"),  # type: ignore[arg-type]
        "negative": lambda: RetryAfter(-1),
        "unprintable": lambda: _Unprintable(),
        "huge": lambda: ValueError("x" * 5_000_000),
    }

    def handler(job: Job) -> None:
        attempts[job.payload] += 1
        if job.attempt < job.max_attempts:
            raise raisers[job.payload]()

    with Runner(cluster_url, queue, {"t": handler}, worker_settings=FAST_WORKER) as runner:
        ids = {
            kind: client.enqueue(queue, "t", kind, max_attempts=2, backoff=Backoff("fixed", 0.05))
            for kind in raisers
        }
        wait_for(
            lambda: all(attempts[k] >= 2 for k in raisers),
            30,
            lambda: f"attempts: {dict(attempts)}",
        )
        wait_for(lambda: pending_total(r, queue, 2) == 0, 30, "deliveries stuck pending")
        worker = runner.workers[0]
        wait_for(lambda: worker.inflight == 0, 10, "deliveries stuck in memory")
        runner.check()
        assert worker.supervisor.healthy()
    for kind, job_id in ids.items():
        info = client.get(queue, job_id)
        assert info is None, (kind, info)  # each ran again and completed


def test_a_member_heartbeat_no_heartbeat_could_write_is_not_live(
    cluster_client: Client, queue: str
) -> None:
    """A dispatcher registry entry expiring at +inf or beyond the longest membership timeout
    (only a buggy writer stores one; members-2 drops it at its next call) does not count as a
    live dispatcher for `shardq rebalance`, which would give it a fair share."""
    from shardq import admin
    from shardq.store import fleet

    cluster_client.create_queue(queue, 4)
    now_ms = int(cluster_client.redis.time()[0]) * 1000  # type: ignore[index]
    cluster_client.redis.zadd(
        keys.dispatchers_key(queue),
        {
            "dispatcher:forever#1": float("inf"),
            "dispatcher:too-far#1": now_ms + fleet.MEMBER_MAX_TIMEOUT_MS + 60_000,
            "dispatcher:fine#1": now_ms + 60_000,
        },
    )
    assert admin.spread(cluster_client, queue).live == ["dispatcher:fine#1"]
