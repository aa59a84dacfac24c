"""The Lua loader (one Functions library), the scripts' headers, and transparent recovery from a
node that lost the library."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis
from helpers import Runner, primaries, wait_for

from shardq import JobRequest
from shardq.client import Client
from shardq.errors import ConfigError, ScriptArgumentError
from shardq.jobs import Job
from shardq.store import keys, loader
from shardq.store.codes import check
from shardq.store.op import op, raw

REPO_LUA = Path(__file__).resolve().parent.parent / "lua"


def lua_files() -> list[Path]:
    return sorted(REPO_LUA.glob("*.lua"))


def header(path: Path) -> str:
    text = path.read_text()
    match = re.match(r"--\[\[(.*?)\]\]", text, re.DOTALL)
    assert match, f"{path.name} has no --[[ header ]]"
    return match.group(1)


def test_checkout_loads_the_repo_scripts() -> None:
    assert loader.lua_dir().resolve() == REPO_LUA
    loaded = loader.scripts()
    assert set(loaded) == {re.sub(r"-\d+\.lua$", "", p.name) for p in lua_files()}
    assert len(loaded) == len(lua_files())


@pytest.mark.parametrize("path", lua_files(), ids=lambda p: p.name)
def test_name_and_key_count_match_the_file_name_and_header(path: Path) -> None:
    name, num_keys = re.fullmatch(r"([a-z][a-z-]*)-(\d+)\.lua", path.name).groups()  # type: ignore[union-attr]
    lua = loader.script(name)
    assert lua.name == name
    assert lua.num_keys == int(num_keys)
    head = header(path)
    declared = [int(i) for i in re.findall(r"^KEYS\[(\d+)\]", head, re.MULTILINE)]
    assert declared == list(range(1, int(num_keys) + 1)), f"{path.name} header lists {declared}"
    assert re.search(r"^Returns", head, re.MULTILINE), f"{path.name} header has no Returns"
    used = {int(i) for i in re.findall(r"KEYS\[(\d+)\]", lua.source)}
    assert used and max(used) <= int(num_keys), f"{path.name} uses KEYS{sorted(used)}"
    argv_used = {int(i) for i in re.findall(r"ARGV\[(\d+)\]", lua.source)}
    argv_listed = {int(i) for i in re.findall(r"^ARGV\[(\d+)", head, re.MULTILINE)}
    assert argv_used <= argv_listed, f"{path.name} uses ARGV{sorted(argv_used - argv_listed)}"


@pytest.mark.parametrize("path", lua_files(), ids=lambda p: p.name)
def test_includes_are_expanded(path: Path) -> None:
    lua = loader.script(re.sub(r"-\d+\.lua$", "", path.name))
    raw = path.read_text()
    assert "--@include" not in lua.source
    for included in re.findall(r"^--@include\s+(\S+)", raw, re.MULTILINE):
        body = (REPO_LUA / "includes" / included).read_text()
        # (its own includes expand before it, once per script)
        assert re.sub(r"^--@include.*\n", "", body, flags=re.MULTILINE) in lua.source
    lib = loader.library()
    assert lua.function.startswith(lib.name + "_") and lua.function in lib.code
    with pytest.raises(ValueError, match=f"{lua.name} takes {lua.num_keys} keys"):
        op(lua.name, ["k"] * (lua.num_keys + 1), [], raw)


def test_loader_rejects_bad_layouts(tmp_path: Path) -> None:
    (tmp_path / "includes").mkdir()
    (tmp_path / "includes" / "a.lua").write_text("--@include b.lua\nlocal a = 1\n")
    (tmp_path / "includes" / "b.lua").write_text("--@include a.lua\n")
    (tmp_path / "ok-1.lua").write_text("return 1\n")
    assert set(loader.build(tmp_path).scripts) == {"ok"}

    (tmp_path / "cycle-1.lua").write_text("--@include a.lua\nreturn 1\n")
    with pytest.raises(ConfigError, match="include cycle"):
        loader.build(tmp_path)
    (tmp_path / "cycle-1.lua").unlink()

    (tmp_path / "missing-1.lua").write_text("--@include nope.lua\nreturn 1\n")
    with pytest.raises(ConfigError, match="missing Lua include"):
        loader.build(tmp_path)
    (tmp_path / "missing-1.lua").unlink()

    (tmp_path / "NoKeyCount.lua").write_text("return 1\n")
    with pytest.raises(ConfigError, match=r"<operation>-<numkeys>\.lua"):
        loader.build(tmp_path)


def test_nested_include_is_expanded_once(tmp_path: Path) -> None:
    (tmp_path / "includes").mkdir()
    (tmp_path / "includes" / "inner.lua").write_text("local inner = 1\n")
    (tmp_path / "includes" / "outer.lua").write_text("--@include inner.lua\nlocal outer = 2\n")
    (tmp_path / "x-0.lua").write_text("--@include outer.lua\nreturn inner + outer\n")
    source = loader.build(tmp_path).scripts["x"].source
    assert source == "local inner = 1\n\nlocal outer = 2\n\nreturn inner + outer\n"


def test_the_library_loads_and_registers_every_function(client: Client) -> None:
    node = primaries(client.redis)[0]
    lib = loader.library()
    try:
        node.execute_command("FUNCTION", "LOAD", lib.code)
    except redis.ResponseError as exc:
        assert "already exists" in str(exc)
    [info] = node.execute_command("FUNCTION", "LIST", "LIBRARYNAME", lib.name)
    assert info[b"library_name"] == lib.name.encode()
    registered = {
        f[b"name"].decode(): {flag.decode() for flag in f[b"flags"]} for f in info[b"functions"]
    }
    assert registered == {s.function: set(s.flags) for s in loader.scripts().values()}
    # What runs at maxmemory and what is refused there is declared, not left to chance.
    refused = {s.name for s in loader.scripts().values() if not s.flags}
    # (jobs that come back or come new: they add memory, like an enqueue)
    assert refused == {
        "enqueue",
        "enqueue-batch",
        "dlq-replay",
        "queue-create",
        "run-now",
        "schedule-fire",
        "schedule-put",
    }


def _flush_scripts(client: Client) -> None:
    for node in primaries(client.redis):
        node.execute_command("FUNCTION", "FLUSH")  # a running dispatcher/worker reloads it


def test_a_flushed_library_is_loaded_again_by_run_and_run_many(
    url: str, client: Client, queue: str
) -> None:
    partitions = 8
    client.create_queue(queue, partitions)
    ran: list[str] = []

    def handler(job: Job) -> None:
        ran.append(job.id)

    with Runner(url, queue, {"t": handler}):
        first = client.enqueue(queue, "t", {"n": 0})
        wait_for(lambda: first in ran, 10, "warm-up job did not run")

        # The dispatcher and worker have their scripts cached; the cache goes away under them.
        _flush_scripts(client)
        single = client.enqueue(queue, "t", {"n": 1}, delay=0.2)  # one call
        assert client.get(queue, single) is not None

        _flush_scripts(client)
        bulk = client.enqueue_many(  # one pipeline per node
            queue, [JobRequest("t", {"n": i}, delay=0.2) for i in range(40)]
        )
        assert all(r.created for r in bulk)
        assert all(client.get(queue, r.job_id) is not None or r.job_id in ran for r in bulk)

        expected = {single, *(r.job_id for r in bulk)}
        wait_for(lambda: expected <= set(ran), 15, lambda: f"{len(expected - set(ran))} not run")

        _flush_scripts(client)  # and once more while the worker is idle and the queue empty
        last = client.enqueue(queue, "t", delay=0.1)
        wait_for(lambda: last in ran, 10, "job after the last flush did not run")
    assert sorted(ran) == sorted({first, last, *expected})
    for pk in keys.all_partition_keys(queue, partitions):
        assert client.redis.hlen(pk.jobs) == 0


def test_loader_wants_a_cap_for_every_variable_argument_list(tmp_path: Path) -> None:
    (tmp_path / "includes").mkdir()
    (tmp_path / "fixed-1.lua").write_text("--[[ x\nARGV[1] a\nARGV[2] b\n]]\nreturn 1\n")
    assert loader.build(tmp_path).scripts["fixed"].max_argv == 2
    (tmp_path / "many-1.lua").write_text("--[[ x\nARGV[1] a\nARGV[2..] b\n]]\nreturn 1\n")
    with pytest.raises(ConfigError, match="Max ARGV"):
        loader.build(tmp_path)
    (tmp_path / "many-1.lua").write_text("--[[ x\nARGV[3..] b\nMax ARGV: 2\n]]\nreturn 1\n")
    with pytest.raises(ConfigError, match="below"):
        loader.build(tmp_path)
    (tmp_path / "many-1.lua").write_text("--[[ x\nARGV[1..] b\nMax ARGV: 50\n]]\nreturn 1\n")
    assert loader.build(tmp_path).scripts["many"].max_argv == 50


@pytest.mark.parametrize("name", sorted(loader.scripts()))
def test_every_function_refuses_more_arguments_than_its_cap_before_anything(
    standalone_client: Client, name: str
) -> None:
    """The cap (the header's ARGV count, or its Max ARGV line) and the KEYS count are checked
    first of all, by the loader's guard: a longer call writes nothing, whatever the script."""
    from shardq.store import functions

    r = standalone_client.redis
    functions.load_everywhere(r)
    lua = loader.script(name)
    tag = "{caps-" + name + "}:"
    names = [f"{tag}k{i}" for i in range(lua.num_keys)]
    over = ["1"] * (lua.max_argv + 1)
    reply = r.execute_command("FCALL", lua.function, lua.num_keys, *names, *over)
    assert reply == [-15, b"ARGV", lua.max_argv + 1, lua.max_argv], reply
    extra = [*names, tag + "extra"]
    reply = r.execute_command("FCALL", lua.function, len(extra), *extra, *over[:1])
    assert reply == [-15, b"KEYS", lua.num_keys + 1, lua.num_keys], reply
    assert not list(r.scan_iter(match=tag + "*"))
    with pytest.raises(ScriptArgumentError, match="at most"):
        check(reply)
    with pytest.raises(ValueError, match=f"at most {lua.max_argv} arguments"):
        op(name, names, over, raw)


def test_the_callers_split_what_they_send_by_the_caps() -> None:
    """One number per script, shared by the script's cap and the code that fills its ARGV."""
    from shardq import admin
    from shardq.plans import inspect as inspector
    from shardq.store import delivery, fleet, producer
    from shardq.store import limits as store_limits
    from shardq.store import schedules as sched
    from shardq.worker import limiter

    cap = {name: s.max_argv for name, s in loader.scripts().items()}
    assert cap["ack"] == 1 + 2 * delivery.MAX_ACK
    assert cap["touch"] == 2 + delivery.MAX_TOUCH
    assert cap["reclaim"] == 6 + delivery.MAX_LIVE
    assert cap["defer"] == 2 + 3 * store_limits.MAX_DEFER
    assert cap["lease-acquire"] == 2 + fleet.MAX_DISPLACE
    assert cap["limit-acquire"] == 2 + limiter.MAX_TAKE
    assert cap["limit-release"] == limiter.MAX_TAKE
    assert cap["schedule-fire"] == 2 + 7 * sched.FIRE_GROUPS + sched.FIRE_TICKS
    assert cap["enqueue-batch"] >= 4 + 4 * producer.BATCH_JOBS
    assert cap["dlq-purge"] >= max(inspector.BATCH, admin.DLQ_BATCH)
    assert cap["dlq-replay"] >= 1 + max(inspector.BATCH, admin.DLQ_BATCH)
    # The ops take what a caller can hold and stay within the caps.
    pk = keys.partition_keys("caps", 0, 1)
    fleet.lease_acquire(pk, "d", 1000, [f"gone-{i}" for i in range(5000)])
    many = [f"w-{i}" for i in range(delivery.MAX_LIVE + 1)]
    big = delivery.reclaim(
        pk, "c", visibility_ms=30_000, orphan_idle_ms=1500, live=many, count=10, max_deliveries=5
    )
    assert big.argv[5] == 30_000 and len(big.argv) == 6  # the visibility timeout only


def test_a_worker_holding_more_than_one_call_carries_acks_them_in_chunks(
    standalone_client: Client, queue: str
) -> None:
    """2,500 finished deliveries of one partition: three ack calls within the cap, all settled."""
    import asyncio
    import logging

    from shardq.config import WorkerSettings
    from shardq.runtime.supervisor import Supervisor
    from shardq.store import delivery, transport
    from shardq.store.queues import read_meta
    from shardq.worker.context import WorkerContext
    from shardq.worker.inflight import Delivery, InFlight, WorkerStats
    from shardq.worker.settler import Settler

    client, r = standalone_client, standalone_client.redis
    client.create_queue(queue, 1)
    client.enqueue_many(queue, [JobRequest("t", i) for i in range(2500)])
    pk = keys.partition_keys(queue, 0, 1)
    inflight = InFlight(concurrency=10_000)
    ctx = WorkerContext(
        role="worker",
        queue=queue,
        member="c",
        redis=None,  # type: ignore[arg-type]  # take_acks builds the ops; they are run here
        transport=None,  # type: ignore[arg-type]
        meta=client._run(read_meta(queue)),
        pks=[pk],
        pinned=None,
        settings=WorkerSettings(),
        supervisor=Supervisor("worker", queue),
        membership=None,
        stop=asyncio.Event(),
        log=logging.getLogger("test"),
        stats=WorkerStats(),
        inflight=inflight,
        handlers={},
        inline_types=set(),
    )
    settler = Settler(ctx, wake=lambda p: None)
    for _ in range(3):
        for got in transport.run(r, delivery.fetch(pk, "c", 1000)).jobs:
            d = Delivery(0, got.entry_id, got.raw_id, None)  # type: ignore[arg-type]
            inflight.add(d)
            settler.succeeded(d)
    assert inflight.count == 2500
    taken, ops = settler.take_acks([0])
    assert [len(batch) for _, batch in taken] == [1000, 1000, 500]
    assert all(len(o.argv) <= o.script.max_argv for o in ops)
    assert sum(transport.run_many(r, ops)) == 2500
    assert r.hlen(pk.jobs) == 0 and int(r.hget(pk.stats, "completed")) == 2500
