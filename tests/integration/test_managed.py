"""A cluster that takes away what managed services (ElastiCache, MemoryDB, Memorystore) take
away: CONFIG, DEBUG, MIGRATE, SAVE, BGSAVE, REPLICAOF are no commands of its nodes (renamed
away: "unknown command"), and its users are denied the CLUSTER subcommands that change the
topology (SETSLOT, ADDSLOTS, MEET, FORGET, FAILOVER, ...).

On it, the fleet as the shipped least-privilege roles (producer, dispatcher, worker, viewer)
and an operator-and-admin user without the taken commands: enqueue (now, delayed, a kept
result), a periodic schedule, a batch with its callback, the console, `queue create/info/
resize` all work; slot moves (`rebalance --nodes --apply`, `--move-partition`, `balancer run`)
refuse at once, the plan still printed, saying the provider's resharding must move the slots;
`health` lists what is unavailable.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from support.helpers import Runner, Runs, job_id_in, wait_for
from support.ports import TestPorts

from shardq import JobRequest
from shardq.admin import acl
from shardq.cli import main as cli
from shardq.client import Client
from shardq.config import RedisSettings
from shardq.dev import devcluster
from shardq.store import keys

PASSWORD = "managed-" + uuid.uuid4().hex[:8]
TAKEN = {c.lower() for c in devcluster.MANAGED_RENAMED}


def _rules(role: str) -> list[str]:
    """The role's shipped rules, less what the managed nodes do not have (a rule naming a
    command the server lacks is refused by ACL SETUSER, as a provider's user API refuses it),
    less the topology-changing CLUSTER subcommands (denied, as providers deny them)."""
    rules = re.findall(r"\([^)]*\)|\S+", acl.rules(role))
    kept = [r for r in rules if r.lstrip("+-").split("|")[0].lower() not in TAKEN]
    return [*kept, *devcluster.MANAGED_ACL_DENIED]


@pytest.fixture(scope="module")
def managed(test_ports: TestPorts, dev_dir: Path) -> Iterator[dict[str, str]]:
    """The managed cluster's URL per role (the fleet's users), and "root" for the default user
    (test setup only)."""
    port = test_ports.managed
    url = devcluster.cluster_up(port, root=dev_dir, managed=True)
    root = Client.from_url(url)
    try:
        nodes = [root.redis.get_redis_connection(n) for n in root.redis.get_nodes()]
        with pytest.raises(Exception, match="unknown command"):
            nodes[0].execute_command("CONFIG", "GET", "maxmemory-policy")
        urls = {"root": url}
        for role in ("producer", "dispatcher", "worker", "viewer", "operator", "admin"):
            name = f"m-{role}"
            for node in nodes:
                node.execute_command("ACL", "SETUSER", name, *_rules(role), "on", f">{PASSWORD}")
            urls[role] = f"redis://{name}:{PASSWORD}@127.0.0.1:{port}"
        # The library, loaded once as an admin does (shardq functions load).
        assert CliRunner().invoke(cli, ["functions", "load", "--url", urls["admin"]]).exit_code == 0
        yield urls
    finally:
        root.close()
        devcluster.cluster_down(port, root=dev_dir)


def _client(url: str) -> Client:
    return Client(RedisSettings.from_url(url))


def _slot_map(url: str) -> Any:
    with _client(url) as c:
        return sorted(map(str, c.redis.cluster_slots().items()))


def test_the_fleet_runs_with_the_shipped_roles_where_admin_commands_are_taken_away(
    managed: dict[str, str],
) -> None:
    queue = "m-" + uuid.uuid4().hex[:8]
    runner = CliRunner()
    out = runner.invoke(
        cli, ["queue", "create", "-q", queue, "--partitions", "4", "--url", managed["operator"]]
    )
    assert out.exit_code == 0, out.output
    runs = Runs()
    handlers = {"t": runs.add, "render": lambda job: {"page": job.payload}, "album": runs.add}
    with _client(managed["producer"]) as producer:
        now = [producer.enqueue(queue, "t", i) for i in range(20)]
        later = [producer.enqueue(queue, "t", i, delay=0.5) for i in range(20)]
        kept = producer.enqueue(queue, "render", 7, keep_result=60)
        producer.schedules.add(queue, "tick", "t", {"tick": True}, every=1)
        bid = producer.batches.create(
            queue, [JobRequest("t", {"child": i}) for i in range(5)],
            on_success=JobRequest("album", {"done": True}),
        )  # fmt: skip
        # a worker and a dispatcher, each as its own role's user
        with (
            Runner(managed["dispatcher"], queue, {}, workers=0),
            Runner(managed["worker"], queue, handlers, dispatcher=False),
        ):
            assert producer.result(queue, kept, timeout=30) == {"page": 7}
            wait_for(lambda: set(now + later) <= set(runs.count()), 30, "jobs did not all run")
            wait_for(lambda: producer.batches.get(queue, bid).state == "succeeded", 30, "batch")
            wait_for(
                lambda: any(
                    isinstance(j.payload, dict) and j.payload.get("done") for j in runs.jobs
                ),
                30,
                "the batch's callback did not run",
            )
            wait_for(
                lambda: any(
                    isinstance(j.payload, dict) and j.payload.get("tick") for j in runs.jobs
                ),
                30,
                "the schedule did not fire",
            )
            # a resize, under the running fleet, moves jobs with the functions alone: no
            # command a managed service takes away
            waiting = [producer.enqueue(queue, "t", i, delay=600) for i in range(30)]
            out = runner.invoke(
                cli,
                [
                    "queue",
                    "resize",
                    "-q",
                    queue,
                    "--partitions",
                    "8",
                    "--yes",
                    "--url",
                    managed["admin"],
                ],
            )
            assert out.exit_code == 0, out.output
            assert all(producer.get(queue, j) is not None for j in waiting)
        assert all(n == 1 for n in runs.count().values()), runs.count()
    out = runner.invoke(cli, ["queue", "info", "-q", queue, "--url", managed["viewer"]])
    assert out.exit_code == 0 and "g1.7" in out.output, out.output


def test_the_console_serves_as_the_viewer(managed: dict[str, str]) -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from shardq.web import WebConfig, create_app

    queue = "m-" + uuid.uuid4().hex[:8]
    with _client(managed["producer"]) as producer:
        CliRunner().invoke(cli, ["queue", "create", "-q", queue, "--url", managed["operator"]])
        job = producer.enqueue(queue, "t", 1, delay=600)
    config = WebConfig(redis=RedisSettings.from_url(managed["viewer"]))
    with TestClient(create_app(config), base_url="http://127.0.0.1:8080") as http:
        for path in ("/", f"/q/{queue}", f"/q/{queue}/jobs", f"/q/{queue}/job/{job}"):
            page = http.get(path)
            assert page.status_code == 200, (path, page.text[:500])


def test_slot_moves_refuse_at_once_with_the_plan_and_the_provider_named(
    managed: dict[str, str],
) -> None:
    queue = "m-" + uuid.uuid4().hex[:8]
    runner = CliRunner()
    admin = managed["admin"]
    assert (
        runner.invoke(
            cli, ["queue", "create", "-q", queue, "--partitions", "6", "--url", admin]
        ).exit_code
        == 0
    )
    with _client(managed["producer"]) as producer:
        # partitions 0 and 1 share the first primary (tags spread evenly over the slots): all
        # the bytes there, so a plan by bytes moves one of them
        for partition in (0, 1):
            producer.enqueue_many(
                queue,
                [
                    JobRequest("t", "x" * 200, delay=600, job_id=job_id_in(partition, 6, f"h{i}"))
                    for i in range(300)
                ],
            )
    before = _slot_map(managed["root"])
    with _client(admin) as c:  # where partition 5 lives: not partition 0's primary
        node = c.redis.get_node_from_key(keys.partition_keys(queue, 5, 6).due)
        target = f"{node.host}:{node.port}"
    for args in (
        ["rebalance", "apply", "-q", queue, "--yes", "--by", "bytes"],
        ["rebalance", "move-partition", "-q", queue, "0", "--to", target, "--yes"],
        ["balancer", "run", "-q", queue, "--rounds", "1"],
    ):
        out = runner.invoke(cli, [*args, "--url", admin])
        assert out.exit_code == 1, (args, out.output)
        assert "does not let shardq move slots" in out.output, (args, out.output)
        assert "MIGRATE (not a command of this server)" in out.output, out.output
        assert "CLUSTER SETSLOT (refused by this user's ACL)" in out.output, out.output
        assert "ElastiCache" in out.output and "Traceback" not in out.output
    assert _slot_map(managed["root"]) == before  # nothing moved, nothing left MIGRATING
    # the plan itself still prints
    plan = runner.invoke(cli, ["rebalance", "plan", "-q", queue, "--by", "bytes", "--url", admin])
    assert plan.exit_code == 0 and "move" in plan.output, plan.output


def test_health_says_which_features_are_unavailable(managed: dict[str, str]) -> None:
    out = CliRunner().invoke(cli, ["redis", "check", "--url", managed["operator"], "--json"])
    assert out.exit_code == 0, out.output
    import json

    report = json.loads(out.stdout)
    assert report["ok"] is True
    [unavailable] = report["unavailable"]
    assert unavailable["feature"].startswith("slot moves")
    assert "MIGRATE (not a command of this server)" in unavailable["why"]


def test_health_finds_nothing_unavailable_on_a_full_cluster(cluster_url: str) -> None:
    import json

    out = CliRunner().invoke(cli, ["redis", "check", "--url", cluster_url, "--json"])
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert report["unavailable"] == [] and report["server"], report
