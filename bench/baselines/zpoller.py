"""Baseline (b): a sorted-set poller that fetches a big batch, processes it, deletes it later.

The design the field warns against, written the way it is usually written:

- producer: ``ZADD <p>:due <due ms> <id>`` and ``HSET <p>:payload <id> <body>``;
- consumer loop: ``ZRANGEBYSCORE <p>:due -inf <now> WITHSCORES`` (every due job: the "big
  batch"; ``--batch N`` adds ``LIMIT 0 N``), ``HMGET`` the payloads, run each handler, then
  ``ZREM`` + ``HDEL`` the batch; sleep ``--interval`` when nothing is due.

Two pollers read the same batch before either deletes it (duplicates); a crash between the read
and the delete runs the batch again on restart (duplicates; deleting first would lose it
instead); and the batch, so the consumer's memory, grows with the backlog.

    python -m bench.baselines.zpoller --url redis://127.0.0.1:7310 --prefix bl:x --out runs.log
"""

from __future__ import annotations

import argparse
import time

import redis as redis_lib

from bench.baselines.record import RunLog, ready


def connect(url: str) -> redis_lib.Redis:
    return redis_lib.Redis.from_url(url)


def setup(r: redis_lib.Redis, prefix: str) -> None:
    pass


def produce(r: redis_lib.Redis, prefix: str, jobs: list[tuple[str, int]], body: str) -> None:
    pipe = r.pipeline(transaction=False)
    for start in range(0, len(jobs), 1000):
        chunk = jobs[start : start + 1000]
        pipe.zadd(f"{prefix}:due", {job_id: due_ms for job_id, due_ms in chunk})
        pipe.hset(f"{prefix}:payload", mapping={job_id: body for job_id, _ in chunk})
    pipe.execute()


def leftover(r: redis_lib.Redis, prefix: str) -> int:
    return int(r.zcard(f"{prefix}:due"))


def cleanup(r: redis_lib.Redis, prefix: str) -> None:
    r.delete(f"{prefix}:due", f"{prefix}:payload")


class Poller:
    """One poller; fetch, process and delete are separate steps so tests can interleave two."""

    def __init__(
        self, r: redis_lib.Redis, prefix: str, log: RunLog, batch: int = 0, handler_ms: float = 0
    ) -> None:
        self.r = r
        self.handler_s = handler_ms / 1000
        self.due_key = f"{prefix}:due"
        self.payload_key = f"{prefix}:payload"
        self.log = log
        self.batch = batch

    def fetch(self) -> list[tuple[str, int, bytes | None]]:
        """Every due job (or the first ``batch``): (id, due ms, payload)."""
        now = int(time.time() * 1000)
        if self.batch:
            rows = self.r.zrangebyscore(
                self.due_key, "-inf", now, start=0, num=self.batch, withscores=True
            )
        else:
            rows = self.r.zrangebyscore(self.due_key, "-inf", now, withscores=True)
        if not rows:
            return []
        payloads = self.r.hmget(self.payload_key, [m for m, _ in rows])  # type: ignore[str-unpack]
        return [(m.decode(), int(s), p) for (m, s), p in zip(rows, payloads, strict=True)]  # type: ignore

    def process(self, batch: list[tuple[str, int, bytes | None]]) -> None:
        for job_id, due_ms, _payload in batch:
            self.log.record(job_id, time.time() * 1000 - due_ms)  # the handler
            if self.handler_s:
                time.sleep(self.handler_s)

    def delete(self, batch: list[tuple[str, int, bytes | None]]) -> None:
        ids = [job_id for job_id, _, _ in batch]
        pipe = self.r.pipeline(transaction=False)
        pipe.zrem(self.due_key, *ids)
        pipe.hdel(self.payload_key, *ids)
        pipe.execute()

    def run_forever(self, interval: float) -> None:
        while True:
            batch = self.fetch()
            if not batch:
                time.sleep(interval)
                continue
            self.process(batch)
            self.delete(batch)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.baselines.zpoller")
    parser.add_argument("--url", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--batch", type=int, default=0, help="LIMIT per fetch (0: all due)")
    parser.add_argument("--interval", type=float, default=0.05, help="sleep when nothing due")
    parser.add_argument(
        "--handler-ms", type=float, default=0.0, help="time each handler run takes (default: none)"
    )
    args = parser.parse_args(argv)
    poller = Poller(connect(args.url), args.prefix, RunLog(args.out), args.batch, args.handler_ms)
    ready()
    poller.run_forever(args.interval)


if __name__ == "__main__":
    main()
