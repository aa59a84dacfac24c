"""Baseline (a): a TTL key per job as the timer, keyspace notifications as the trigger.

The design the field warns against, written the way it is usually written:

- producer: ``HSET <p>:payload <id> "<due ms>|<body>"`` (the payload must live beside the timer,
  because an expired key's value is gone) and ``SET <p>:timer:<id> 1 PX <delay>``;
- the node runs with ``notify-keyspace-events Ex``;
- consumer: ``SUBSCRIBE __keyevent@0__:expired``; for each expired ``<p>:timer:<id>``: ``HGET``
  the payload, run the handler, ``HDEL`` the payload.

With ``--claim`` the consumer instead runs a job only if its ``HDEL`` removed the payload (an
atomic claim): that stops two subscribers from both running a job, but nothing brings back an
event published while no subscriber was connected.

Needs a standalone node (keyspace events are per node and not cluster-aware), e.g.
``shardq dev standalone up --port 7310``.

    python -m bench.baselines.ttl_timer --url redis://127.0.0.1:7310 --prefix bl:x --out runs.log
"""

from __future__ import annotations

import argparse
import time

import redis as redis_lib

from bench.baselines.record import RunLog, ready

CHANNEL = "__keyevent@0__:expired"


def connect(url: str) -> redis_lib.Redis:
    return redis_lib.Redis.from_url(url)


def setup(r: redis_lib.Redis, prefix: str) -> None:
    r.config_set("notify-keyspace-events", "Ex")


def produce(r: redis_lib.Redis, prefix: str, jobs: list[tuple[str, int]], body: str) -> None:
    """Schedule (job id, due epoch ms) pairs."""
    pipe = r.pipeline(transaction=False)
    for n, (job_id, due_ms) in enumerate(jobs, 1):
        pipe.hset(f"{prefix}:payload", job_id, f"{due_ms}|{body}")
        pipe.set(f"{prefix}:timer:{job_id}", 1, px=max(1, due_ms - int(time.time() * 1000)))
        if n % 1000 == 0:
            pipe.execute()
    pipe.execute()


def leftover(r: redis_lib.Redis, prefix: str) -> int:
    """Jobs still stored: payloads nobody will ever run once their timer has fired."""
    return int(r.hlen(f"{prefix}:payload"))


def cleanup(r: redis_lib.Redis, prefix: str) -> None:
    r.delete(f"{prefix}:payload")
    for key in r.scan_iter(f"{prefix}:timer:*", count=1000):
        r.delete(key)


class Subscriber:
    """One subscriber; :meth:`handle` is the whole per-event logic."""

    def __init__(self, r: redis_lib.Redis, prefix: str, log: RunLog, claim: bool = False) -> None:
        self.r = r
        self.prefix = prefix
        self.timer_prefix = f"{prefix}:timer:".encode()
        self.log = log
        self.claim = claim
        self.pubsub = r.pubsub()

    def subscribe(self) -> None:
        self.pubsub.subscribe(CHANNEL)
        while True:  # wait for the subscription to be confirmed
            msg = self.pubsub.get_message(timeout=1.0)
            if msg and msg["type"] == "subscribe":
                return

    def handle(self, key: bytes) -> None:
        if not key.startswith(self.timer_prefix):
            return
        job_id = key[len(self.timer_prefix) :].decode()
        payload_key = f"{self.prefix}:payload"
        raw = self.r.hget(payload_key, job_id)
        if raw is None:
            return
        if self.claim and not self.r.hdel(payload_key, job_id):
            return  # another subscriber claimed it first
        due_ms = int(raw.split(b"|", 1)[0])  # type: ignore[arg-type]
        self.log.record(job_id, time.time() * 1000 - due_ms)  # the handler
        if not self.claim:
            self.r.hdel(payload_key, job_id)

    def run_forever(self) -> None:
        while True:
            msg = self.pubsub.get_message(timeout=1.0)
            if msg and msg["type"] == "message":
                self.handle(msg["data"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.baselines.ttl_timer")
    parser.add_argument("--url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--claim", action="store_true", help="HDEL first, run only if it won")
    args = parser.parse_args(argv)
    sub = Subscriber(connect(args.url), args.prefix, RunLog(args.out), claim=args.claim)
    sub.subscribe()
    ready()
    sub.run_forever()


if __name__ == "__main__":
    main()
