"""`shardq rebalance plan` and `apply` on a cluster of the tests' own (the session block's
chaos ports, as in test_chaos.py: the shared cluster never has a slot moved): every partition
of a queue put on one primary, then planned and spread back under a producer, a dispatcher and
a worker, counting every job."""

from __future__ import annotations

import json
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from redis.exceptions import RedisError
from support.helpers import Runner, Runs, job_id_in, one_by_one, wait_for
from support.ports import TestPorts
from support.slotmoves import half_move

from shardq import Client, JobRequest
from shardq.admin import acl, slots
from shardq.cli import main as cli
from shardq.dev.devcluster import cluster_down, cluster_up
from shardq.store import keys

PARTITIONS = 12
FAR_PER_PARTITION = 200  # jobs due in an hour: the bytes being balanced, the same per partition
LIVE = 1500  # jobs due 0.3 s after enqueue, produced while the slots move


@pytest.fixture(scope="module")
def placement_url(test_ports: TestPorts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("placement")
    url = cluster_up(test_ports.chaos, root=root)
    try:
        yield url
    finally:
        cluster_down(test_ports.chaos, root=root)


def node_of(client: Client, queue: str, p: int, partitions: int = PARTITIONS) -> str:
    """The primary serving partition ``p``, as the primaries themselves say (slots.prepare_move):
    not the client's slot map, which comes from whichever node answered CLUSTER SLOTS and
    lags a finished move by gossip (under load it reported 3/2/1 after an even 2/2/2)."""
    return slots.prepare_move(client, queue, p, slots.primary_addresses(client)[0]).source


def produce(client: Client, queue: str, ids: list[str], stop: threading.Event) -> None:
    """LIVE jobs over about 12 s (the plans and moves happen meanwhile), retrying through
    redirects."""
    start = time.monotonic()
    for i in range(LIVE):
        if stop.is_set():
            return
        while True:
            try:
                ids.append(client.enqueue(queue, "t", i, delay=0.3, job_id=f"live{i}"))
                break
            except RedisError:
                time.sleep(0.05)
        lag = start + 12.0 * (i + 1) / LIVE - time.monotonic()
        if lag > 0:
            time.sleep(lag)


def plan_json(runner: CliRunner, url: str, queue: str) -> dict[str, Any]:
    out = runner.invoke(
        cli,
        ["rebalance", "plan", "--queue", queue, "--by", "bytes", "--json", "--url", url],
    )
    assert out.exit_code == 0, out.output
    lines = out.stdout.splitlines()
    assert len(lines) == 1, out.output  # one JSON object; log lines go to stderr
    return json.loads(lines[0])  # type: ignore[no-any-return]


def test_plan_and_apply_spread_a_queue_piled_on_one_primary_under_load(
    placement_url: str, queue: str
) -> None:
    url = placement_url
    client = Client.from_url(url)
    client.create_queue(queue, PARTITIONS)
    primaries = slots.primary_addresses(client)
    assert len(primaries) == 3
    # Pile every partition on the first primary with the existing move.
    pile = primaries[0]
    for p in range(PARTITIONS):
        plan = slots.prepare_move(client, queue, p, pile)
        if plan.needed:
            slots.move(client, plan)
    assert {node_of(client, queue, p) for p in range(PARTITIONS)} == {pile}
    # The same number of far-off jobs in each partition, so its bytes are even too.
    far = [
        job_id_in(p, PARTITIONS, f"far{p}-{k}")
        for p in range(PARTITIONS)
        for k in range(FAR_PER_PARTITION)
    ]
    for i in range(0, len(far), 500):
        client.enqueue_many(
            queue, [JobRequest("t", job_id=j, delay=3600) for j in far[i : i + 500]]
        )

    runner = CliRunner()
    before = plan_json(runner, url, queue)
    assert before["busiest_over_mean_before"] == pytest.approx(3.0, rel=0.01)
    assert before["within_tolerance"] and before["tolerance"] == 0.1
    assert (
        "bytes (MEMORY USAGE" in before["counted"]
        and f"{PARTITIONS} partitions" in before["counted"]
    )
    assert len(before["moves"]) == 8 and {m["from"] for m in before["moves"]} == {pile}
    assert {node_of(client, queue, p) for p in range(PARTITIONS)} == {pile}, "plan moved"

    runs = Runs()
    ids: list[str] = []
    stop = threading.Event()
    q = ["--queue", queue, "--url", url]
    plan, apply = ["rebalance", "plan", *q], ["rebalance", "apply", *q, "--by", "bytes"]
    with Runner(url, queue, {"t": runs.add}):
        producer = threading.Thread(target=produce, args=(client, queue, ids, stop))
        producer.start()
        try:
            time.sleep(1.0)
            shown = runner.invoke(cli, [*plan, "--by", "bytes"])
            assert shown.exit_code == 0, shown.output
            assert "load counted: bytes" in shown.stdout and "plan: 8 move(s)" in shown.stdout
            assert "busiest/mean 3.0" in shown.stdout, shown.stdout
            by_load = runner.invoke(cli, plan)  # --by load, the default
            assert by_load.exit_code == 0, by_load.output
            assert "load counted: % of the total: each slot's share of the jobs/s" in (
                by_load.stdout
            )
            load_json = runner.invoke(cli, [*plan, "--json"])
            assert load_json.exit_code == 0, load_json.output
            assert sum(json.loads(load_json.stdout)["before"].values()) == pytest.approx(100)
            by_rate = runner.invoke(cli, [*plan, "--by", "rate"])
            assert by_rate.exit_code == 0, by_rate.output
            assert "load counted: jobs/s (enqueued + promoted over 1 s)" in by_rate.stdout
            rate_json = runner.invoke(cli, [*plan, "--by", "rate", "--json"])
            assert rate_json.exit_code == 0, rate_json.output
            # The producer's ~190 jobs/s, enqueued then promoted: jobs/s, not millions.
            assert 0 < sum(json.loads(rate_json.stdout)["before"].values()) < 2000
            dry = runner.invoke(cli, apply)
            assert dry.exit_code == 0 and "add --yes" in dry.output, dry.output
            # A budget of 3 moves, then the rest: the second plan is what the first left.
            first = runner.invoke(cli, [*apply, "--yes", "--max-moves", "3"])
            assert first.exit_code == 0, first.output
            assert "done: 3 move(s)" in first.output and "5 left" in first.output, first.output
            middle = plan_json(runner, url, queue)
            assert len(middle["moves"]) == 5, middle
            rest = runner.invoke(cli, [*apply, "--yes"])
            assert rest.exit_code == 0 and "done: 5 move(s)" in rest.output, rest.output
            producer.join(60)
            wait_for(lambda: len(runs.count()) >= LIVE, 60, "jobs lost across the moves")
        finally:
            stop.set()
            producer.join(10)
    counts = runs.count()
    assert len(counts) == LIVE and set(counts) == {f"live{i}" for i in range(LIVE)}
    assert max(counts.values()) == 1, "a job ran twice across the moves"
    # Every far-off job is still there, once.
    due = sum(
        client.redis.zcard(keys.partition_keys(queue, p, PARTITIONS).due)  # type: ignore[misc]
        for p in range(PARTITIONS)
    )
    assert due == len(far)
    assert all(client.get(queue, j) is not None for j in far[:: len(far) // 50])

    after = plan_json(runner, url, queue)
    assert after["within_tolerance"] and after["moves"] == []
    assert after["busiest_over_mean_before"] <= 1.1 and after["least_over_mean_before"] >= 0.9
    # Independently of the planner's own figures: 4 partitions (4 x 200 far jobs) per primary.
    per_node = Counter(node_of(client, queue, p) for p in range(PARTITIONS))
    assert per_node == {n: 4 for n in primaries}
    client.close()


def test_a_half_done_move_is_named_with_the_command_that_finishes_it(
    placement_url: str, queue: str
) -> None:
    """`rebalance plan` refuses a slot left MIGRATING (a move that stopped half-way) and prints
    the command that finishes it; after it, it plans; a stale move is refused by execute."""
    url = placement_url
    partitions = 4
    client = Client.from_url(url)
    client.create_queue(queue, partitions)
    ids = [
        r.job_id
        for r in client.enqueue_many(queue, [JobRequest("t", i, delay=3600) for i in range(200)])
    ]
    moving = half_move(client, queue, 1, partitions)
    slot, source, target = moving.slot, moving.source, moving.target

    runner = CliRunner()
    plan = ["rebalance", "plan", "--queue", queue, "--url", url, "--by", "bytes"]
    refused = runner.invoke(cli, plan)
    assert refused.exit_code == 1, refused.output
    finish = f"shardq rebalance move-partition --queue {queue} 1 --to {target} --yes"
    assert f"slot {slot} (partition 1) is mid-move from {source} to {target}" in refused.output
    assert finish in refused.output, refused.output
    done = runner.invoke(cli, [*finish.split()[1:], "--url", url])
    assert done.exit_code == 0 and f"now lives on {target}" in done.output, done.output
    planned = runner.invoke(cli, plan)
    assert planned.exit_code == 0 and "busiest/mean" in planned.output, planned.output
    assert all(client.get(queue, j) is not None for j in ids)

    # A plan made before something else moved the slot: refused, nothing moved.
    with pytest.raises(slots.SlotMoveError, match=r"not .* as planned"):
        list(slots.execute(client, [(queue, 1, source, source)]))
    assert node_of(client, queue, 1, partitions) == target
    client.close()


def test_plan_options_refuse_bad_input_with_what_to_do(
    placement_url: str, standalone_url: str, queue: str
) -> None:
    with Client.from_url(placement_url) as client:
        client.create_queue(queue, 4)
    with Client.from_url(standalone_url) as client:
        client.create_queue(queue, 4)
    runner = CliRunner()
    q = ["--queue", queue]
    for args, url, code, message in [
        (["plan", *q, "--tolerance", "-1"], placement_url, 2, "--tolerance"),
        (["plan", *q, "--by", "cpu"], placement_url, 2, "--by"),
        (["apply", *q, "--yes", "--max-moves", "0"], placement_url, 2, "--max-moves"),
        (["apply", *q, "--json"], placement_url, 2, "No such option '--json'"),
        (["plan", *q], standalone_url, 1, "single node: there are no slots to move"),
        # the old spelling's flags are checked as they were
        ([*q, "--nodes", "--plan", "--apply"], placement_url, 2, "pick one"),
        (
            [*q, "--nodes", "--plan", "--move-partition", "0", "--to", "x:1"],
            placement_url,
            2,
            "pick one",
        ),
        ([*q, "--nodes", "--apply", "--json"], placement_url, 2, "--json goes with"),
    ]:
        out = runner.invoke(cli, ["rebalance", *args, "--url", url])
        assert out.exit_code == code and message in out.output, (args, out.output)


def test_apply_stops_at_the_first_error_saying_what_was_done_and_what_is_left(
    placement_url: str, queue: str
) -> None:
    """A real refusal mid-plan: a user with the admin's rules but RESTORE-ASKING, which the
    target runs for the source's MIGRATE (the check before a move asks about MIGRATE and
    SETSLOT themselves, which this user has; a move missing those is refused before it starts:
    tests/integration/test_managed.py); `rebalance apply` stops at the first move with one line
    (done 0, left N), the half-done slot is named by the next `rebalance plan` with its command,
    and after that the plan runs to the end."""
    url = placement_url
    partitions = 6
    client = Client.from_url(url)
    client.create_queue(queue, partitions)
    pile = slots.primary_addresses(client)[0]
    for p in range(partitions):
        plan = slots.prepare_move(client, queue, p, pile)
        if plan.needed:
            slots.move(client, plan)
    # One by one: even bytes per partition, so the bytes plan spreads partitions 2/2/2.
    one_by_one(client).enqueue_many(queue, [JobRequest("t", i, delay=3600) for i in range(600)])
    nodes = [client.redis.get_redis_connection(n) for n in client.redis.get_nodes()]  # type: ignore[union-attr]
    rules = [r for r in re.findall(r"\([^)]*\)|\S+", acl.rules("admin")) if r != "+restore-asking"]
    name = f"t-norestore-{queue}"
    for node in nodes:
        node.execute_command("ACL", "SETUSER", name, *rules, "on", f">pw-{name}")
    runner = CliRunner()
    q = ["--queue", queue, "--by", "bytes"]
    try:
        planned = json.loads(
            runner.invoke(cli, ["rebalance", "plan", *q, "--json", "--url", url]).stdout
        )
        total = len(planned["moves"])
        assert total >= 3, planned
        first = planned["moves"][0]
        out = runner.invoke(
            cli,
            [
                "rebalance",
                "apply",
                *q,
                "--yes",
                "--url",
                url,
                "--username",
                name,
                "--password",
                f"pw-{name}",
            ],
        )
        assert out.exit_code == 1, out.output
        assert (
            f"stopped at move 1 of {total} (slot {first['slot']} {first['from']} -> {first['to']})"
            in out.output
        )
        assert (
            "MIGRATE failed" in out.output
            and "restore-asking" in out.output
            and f"Done: 0 move(s), 0 bytes; left: {total}" in out.output
        )
    finally:
        for node in nodes:
            node.execute_command("ACL", "DELUSER", name)
    refused = runner.invoke(cli, ["rebalance", "plan", *q, "--url", url])
    assert refused.exit_code == 1 and "is mid-move" in refused.output, refused.output
    finish = refused.output.split("finish it with `", 1)[1].split("`", 1)[0]
    done = runner.invoke(cli, [*finish.split()[1:], "--url", url])
    assert done.exit_code == 0, done.output
    rest = runner.invoke(cli, ["rebalance", "apply", *q, "--yes", "--url", url])
    assert rest.exit_code == 0 and f"done: {total - 1} move(s)" in rest.output, rest.output
    # The plan ran to the end: the partitions are spread evenly.
    per_node = Counter(node_of(client, queue, p, partitions) for p in range(partitions))
    assert sorted(per_node.values()) == [2, 2, 2], (per_node, rest.output)
    due = sum(
        client.redis.zcard(keys.partition_keys(queue, p, partitions).due)  # type: ignore[misc]
        for p in range(partitions)
    )
    assert due == 600
    client.close()
