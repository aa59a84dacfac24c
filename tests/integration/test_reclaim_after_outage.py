"""A worker never takes back a job it ran itself because its ack could not be written for
longer than the visibility timeout: the recoverer writes the worker's own waiting acks before it
reclaims in their partitions.

Seen in a failover (tests/fleet/test_hostnames.py): a finished job's ack rides with the next
read of its partition, on the fetcher's loop of the partition's primary; when that primary is
killed, the loop keeps failing until the slot map regroups the partitions, while the recoverer
already reaches the new primary, finds the delivery idle past the visibility timeout and runs
the job again.  Here the worker's fetcher loops are stopped the moment the job's handler ends,
with its heartbeat (whose touch keeps held deliveries from looking idle): its ack can only be
written by the recoverer, after the delivery has been idle past the visibility timeout.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time

from support.helpers import FAST_WORKER, Runner, Runs, scaled, wait_for

from shardq.client import Client
from shardq.jobs import Job


def test_a_job_whose_ack_waited_past_the_visibility_timeout_is_not_run_again(
    cluster_url: str, cluster_client: Client, queue: str
) -> None:
    cluster_client.create_queue(queue, 1)
    settings = dataclasses.replace(
        FAST_WORKER, visibility_timeout=1.0, heartbeat_interval=0.25, reclaim_interval=0.25
    )
    runs = Runs()
    runner = Runner(cluster_url, queue, {}, dispatcher=False, worker_settings=settings)

    def handler(job: Job) -> None:
        runs.add(job)
        if runs.count()[job.id] == 1:  # its ack is left to nobody but the recoverer
            worker, loop = runner.workers[0], runner.loop
            assert loop is not None
            # the loops a primary's outage stops: its reads (which carry the acks) and the
            # heartbeat's touch of held deliveries (which keeps them from looking idle)
            names = [
                n for n in worker.supervisor.loops if n.startswith("fetcher:") or n == "heartbeat"
            ]
            for name in names:
                asyncio.run_coroutine_threadsafe(worker.supervisor.retire(name), loop).result(5)

    runner.handlers = {"t": handler}
    with runner:
        job = cluster_client.enqueue(queue, "t", None)
        wait_for(lambda: runs.count()[job] >= 1, 10, "the job did not run")
        wait_for(
            lambda: cluster_client.get(queue, job) is None or runs.count()[job] > 1,
            10,
            "neither acked nor run again",
        )
        assert runs.count()[job] == 1, "the recoverer took back a job this worker had run"
        time.sleep(scaled(settings.visibility_timeout * 2))  # a reclaim would have run it again
    assert runs.count()[job] == 1, f"ran {runs.count()[job]} times"
