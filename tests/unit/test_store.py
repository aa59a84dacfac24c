"""The store boundary: only shardq/store names scripts, builds script calls or reads replies;
each script has one typed op; every return code a script documents is in the Code enum."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from shardq.errors import ShardqError
from shardq.store import codes, loader

PACKAGE = Path(__file__).resolve().parents[2] / "shardq"
STORE = PACKAGE / "store"
LUA = PACKAGE.parent / "lua"
# Modules of the store that only it may import (script names, raw replies, the op builder).
PRIVATE = {"shardq.store.loader", "shardq.store.codes"}


def outside_store() -> list[Path]:
    return [p for p in PACKAGE.rglob("*.py") if STORE not in p.parents]


@pytest.mark.parametrize("path", outside_store(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_outside_the_store_names_a_script_or_reads_a_reply(path: Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            assert node.module not in PRIVATE, f"{path.name} imports {node.module}"
            if node.module == "shardq.store.op":
                names = {a.name for a in node.names}
                assert "op" not in names, f"{path.name} builds script calls"
            if node.module == "shardq.store":
                names = {a.name for a in node.names}
                assert not names & {"loader", "codes"}, f"{path.name} imports {names}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            assert node.value.upper() not in ("EVALSHA", "EVAL", "FCALL"), path.name


def test_each_script_has_exactly_one_op_builder() -> None:
    built: dict[str, list[str]] = {}
    for path in STORE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "op"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                built.setdefault(node.args[0].value, []).append(path.name)
    assert set(built) == set(loader.scripts()), set(built) ^ set(loader.scripts())
    assert all(len(where) == 1 for where in built.values()), built


def test_every_documented_return_code_is_in_the_enum() -> None:
    documented: dict[int, str] = {}
    for path in LUA.glob("*.lua"):
        header = path.read_text().split("]]", 1)[0]
        for value, name in re.findall(r"\{(-\d+),[^}]*\}\s+E_([A-Z_]+)", header):
            documented[int(value)] = name
    assert documented, "no codes found in the headers"
    for value, name in documented.items():
        assert codes.Code(value).name == name, (value, name)
    for code in codes.Code:
        err = codes.error_for(code, ["x", "1", "2"])
        assert isinstance(err, ShardqError) and str(err), code


def test_check_raises_typed_errors_and_passes_replies_through() -> None:
    with pytest.raises(ShardqError):
        codes.check([codes.Code.FENCED, b"3", b"4:other"])
    assert codes.check([1, b"x"]) == [1, b"x"]
    assert codes.check(7) == [7]
    unknown = codes.error_for(-99, ["?"])
    assert "upgrade shardq" in str(unknown)


# The store owns all of Redis: no redis-py data command outside shardq/store/ ------------------
#
# How "a redis client" is recognised (the AST cannot know types): a redis-py command method
# (every public method of its data, script, function and pub/sub command mixins, plus
# pipeline, transaction, time and ping) called on
#   - an attribute chain ending in ``.redis``/``._redis``, or ``transport.client`` (the
#     AsyncTransport's redis-py client);
#   - a name conventionally bound to a redis-py client or pipeline in this code base
#     (REDIS_NAMES);
#   - a name assigned, in the same module, from one of those or from a call that returns a
#     client or pipeline (``.pipeline()``, ``.get_redis_connection()``, ``connect()``, ...);
#   - the result of such a call directly (``x.get_redis_connection(n).hset(...)``).
# ``.pipeline(`` and ``.execute_command(`` are redis-py's whatever their receiver.  A shardq
# object's own method of the same name (``client.get(queue, job_id)``, ``client.schedules.list``)
# is not a redis-py call, and is not matched: its receiver is none of the above.

import redis.commands.core as redis_commands  # noqa: E402

COMMAND_MIXINS = (
    redis_commands.DataAccessCommands,
    redis_commands.AsyncDataAccessCommands,
    redis_commands.ScriptCommands,
    redis_commands.FunctionCommands,
    redis_commands.PubSubCommands,
)
REDIS_METHODS = {
    name for mixin in COMMAND_MIXINS for name in dir(mixin) if not name.startswith("_")
} | {"pipeline", "transaction", "time", "ping", "pubsub"}
REDIS_NAMES = {"redis", "r", "conn", "pipe", "node", "src", "dst", "cluster", "probe"}
CLIENT_FACTORIES = {
    "pipeline",
    "get_redis_connection",
    "connect",
    "connect_async",
    "node_client",
    "node_client_async",
    "node_of",
    "Redis",
    "RedisCluster",
    "from_url",
    "from_pool",
}
# Allowed exceptions, each with its reason: (module, method) -> why.
ALLOWED: dict[tuple[str, str], str] = {
    ("connection.py", "ping"): "health: whether a node answers at all, not a command on a key",
    ("admin/slots.py", "execute_command"): (
        "CLUSTER SETSLOT/GETKEYSINSLOT/COUNTKEYSINSLOT/NODES/MYID and MIGRATE address a named "
        "node, not a key's slot (admin/slots.py's docstring); checked below to be only those"
    ),
}
# Not commands on shardq's keys, hence not store calls, and not matched above: the sharded
# pub/sub subscribers of runtime/hints.py (``client.pubsub()``: a subscriber connection per
# primary, on a name the finder does not take for a client), and reads of Redis's own settings
# (INFO, CONFIG GET: runtime/redis_config.py, run through the runner's ``plain``).
# The dev commands' code (shardq/dev/, loaded only by `shardq dev`): the dev
# cluster configures and inspects its own servers, the demo reads raw state to measure its run.
DEV_TOOLS = "dev/"
SLOT_COMMANDS = ("CLUSTER ", "MIGRATE")


def _chain(node: ast.AST) -> list[str]:
    """``a.b.c`` as ["a", "b", "c"] (a call in the chain ends it, named by its function)."""
    parts: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Name):
            parts.append(node.id)
            return parts[::-1]
        elif isinstance(node, ast.Call):
            parts.append("()")
            node = node.func
        else:
            return parts[::-1]


def _makes_client(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Attribute) and node.func.attr in CLIENT_FACTORIES)
            or (isinstance(node.func, ast.Name) and node.func.id in CLIENT_FACTORIES)
        )
    ) or (isinstance(node, ast.Await) and _makes_client(node.value))


def _is_redis(node: ast.AST, bound: set[str]) -> bool:
    if _makes_client(node):
        return True
    chain = _chain(node)
    if not chain:
        return False
    if len(chain) == 1:
        return chain[0] in REDIS_NAMES or chain[0] in bound
    return chain[-1] in ("redis", "_redis") or chain[-2:] == ["transport", "client"]


def redis_calls(tree: ast.AST) -> list[tuple[int, str, ast.Call]]:
    """(line, method, call) of every redis-py command call in a module (see above)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign | ast.NamedExpr) and node.value is not None:
            targets, value = [node.target], node.value
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            targets, value = [node.optional_vars], node.context_expr
        else:
            continue
        if _makes_client(value) or _is_redis(value, set()):
            bound |= {t.id for t in targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        method = node.func.attr
        if method in ("pipeline", "execute_command") or (
            method in REDIS_METHODS and _is_redis(node.func.value, bound)
        ):
            found.append((node.lineno, method, node))
    return found


def _slot_command(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and str(node.value).startswith(SLOT_COMMANDS)


def _allowed(module: str, method: str, call: ast.Call, tree: ast.AST) -> bool:
    if (module, method) not in ALLOWED:
        return False
    if method != "execute_command":
        return True
    first = call.args[0] if call.args else None
    if _slot_command(first):
        return True
    # admin/slots.py's _admin(conn, *command): every call of it must name a slot command.
    if not isinstance(first, ast.Starred):
        return False
    helpers = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "_admin"
    ]
    return bool(helpers) and all(len(n.args) > 1 and _slot_command(n.args[1]) for n in helpers)


@pytest.mark.parametrize("path", outside_store(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_redis_data_command_outside_the_store(path: Path) -> None:
    """Every command on shardq's keys is a store call (shardq.store.op), so it goes through the
    transport and, from a facade, the one retry and error-translation layer."""
    module = path.relative_to(PACKAGE).as_posix()
    if module.startswith(DEV_TOOLS):
        pytest.skip("the dev cluster and the demo (see DEV_TOOLS)")
    tree = ast.parse(path.read_text())
    offenders = [
        f"{module}:{line}: .{method}("
        for line, method, call in redis_calls(tree)
        if not _allowed(module, method, call, tree)
    ]
    assert not offenders, "redis-py commands outside shardq/store/: " + ", ".join(offenders)


def test_the_redis_command_finder_finds_them() -> None:
    """The finder above, on the forms the code base used before they moved into the store."""
    source = """
async def f(self, client, r, x):
    client.redis.hgetall(k)
    self.client.redis.get(k)
    r.time()
    await self.transport.client.xgroup_create(k, "g")
    pipe = client.redis.pipeline(transaction=False)
    pipe.xlen(k)
    conn = cluster.get_redis_connection(node)
    conn.zcard(k)
    x.get_redis_connection(n).hset(k, "f", 1)
    x.execute_command("HSET", k, "f", 1)
    client.get(queue, job_id)
    self.client.schedules.list(queue)
    d.get("a")
    x.partitions(queue)
"""
    found = sorted((line, method) for line, method, _ in redis_calls(ast.parse(source)))
    assert [m for _, m in found] == [
        "hgetall", "get", "time", "xgroup_create", "pipeline", "xlen", "zcard", "hset",
        "execute_command",
    ], found  # fmt: skip


def test_every_partition_key_is_in_the_one_list() -> None:
    """PartitionKeys.all() (what a queue deletion unlinks per partition) names every key
    attribute of a partition, and the ACL grants name every kind keys.py lists."""
    from shardq.admin import acl
    from shardq.store import keys

    pk = keys.partition_keys("q", 0, 4)
    attrs = {
        getattr(pk, name)
        for name in keys.PartitionKeys.__slots__
        if isinstance(getattr(pk, name), str) and getattr(pk, name).startswith("{")
        and ":hint:" not in getattr(pk, name)
    }  # fmt: skip
    assert set(pk.all()) == attrs
    assert len(pk.all()) == len(keys.PARTITION_KINDS) == len(set(pk.all()))
    assert pk.idem("k") == "{" + pk.tag + "}:idem:k" and keys.tag_of_queue("q", pk.idem("k"))
    assert {keys.slot_of(k) for k in pk.all()} == {keys.slot_of(pk.due)}
    assert set(keys.queue_keys("q")) == {
        keys.queue_meta_key("q"), keys.limits_key("q"), keys.dispatchers_key("q"),
        keys.workers_key("q"), keys.workers_drain_key("q"), keys.drain_key("q"),
        keys.owners_key("q"), keys.resize_key("q"), keys.resize_lease_key("q"),
        keys.resize_fence_key("q"), keys.batches_key("q"), keys.batches_live_key("q"),
        keys.batches_firing_key("q"),
    }  # fmt: skip
    granted = {kind for grants in acl.GRANTS.values() for g in grants for kind in g.kinds}
    every = {
        *keys.PARTITION_KINDS, keys.IDEM_KIND, *keys.QUEUE_KINDS, *keys.LIMIT_KINDS,
        *keys.BATCH_KINDS,
    }  # fmt: skip
    assert every <= granted | {"registry"}
    bk = keys.batch_keys("q", "b1")
    assert keys.tag_of_queue("q", bk.record) and keys.tag_of_queue("q", bk.seen)
    assert keys.slot_of(bk.record) == keys.slot_of(bk.seen)
    assert keys.partition_of_key(bk.record) is None
    # What a queue deletion finds by SCAN and removes: the queue's partition and limit tags only.
    assert keys.tag_of_queue("q", keys.limit_state_key("q", "type:t"))
    assert keys.tag_of_queue("q", keys.limit_holders_key("q", "key:a"))
    assert not keys.tag_of_queue("q", keys.queue_meta_key("q"))
    assert not keys.tag_of_queue("q", keys.partition_keys("qq", 0, 4).due)
    assert not keys.tag_of_queue("q", "{sq:q:x}:due")
