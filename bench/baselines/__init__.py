"""Minimal versions of the two delayed-job designs the field warns against, and a harness that
runs them beside shardq through the same scenarios (:mod:`bench.baselines.scenarios`).

- :mod:`bench.baselines.ttl_timer`: a TTL key per job + keyspace notifications;
- :mod:`bench.baselines.zpoller`: ZRANGEBYSCORE a big batch, process, ZREM later;
- :mod:`bench.baselines.shardq_consumer`: shardq's Dispatcher + Worker in one process;
- :mod:`bench.baselines.bullmq_node`: BullMQ (Node.js, ``bench/baselines/bullmq/``) in the same
  harness, and :mod:`bench.baselines.drain`, the drain rate of shardq beside BullMQ.
"""
