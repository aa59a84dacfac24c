"""What a sync handler's timeout costs a job: the await of its pool future, with and without it.

    python -m bench.handler_timer [--jobs 50000] [--rounds 3]

A sync handler runs in a thread; the worker's task awaits the pool's future.  With a timeout
(every sync job under the default ``handler_timeout``) the job must fail at the limit, so the
await carries a timer.  This times the await alone, on a future completed at once (no thread,
so the difference is the timer's), in four forms: a plain await (no timeout), the
``asyncio.wait(..., timeout=)`` form (shardq at ``fbea221``), a ``loop.call_later`` timer that
cancels the future, told from the task's own cancel by ``Task.cancelling()`` (``c7f5f29``), and
``async with asyncio.timeout()`` (``Executor._call`` since, the same semantics from the
standard library).  CPU µs per job (``time.process_time``).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable

from bench.calibration import cpu_loop_rate

LIMIT = 600.0  # the default handler_timeout: the timer never fires here


async def plain(loop: asyncio.AbstractEventLoop) -> int:
    ran: asyncio.Future[int] = loop.create_future()
    loop.call_soon(ran.set_result, 1)
    return await ran


async def wait_form(loop: asyncio.AbstractEventLoop) -> int:
    ran: asyncio.Future[int] = loop.create_future()
    loop.call_soon(ran.set_result, 1)
    try:
        done, _ = await asyncio.wait((ran,), timeout=LIMIT)
    finally:
        if not ran.done():
            ran.cancel()
    if not done:
        raise TimeoutError
    return ran.result()


async def timer_form(loop: asyncio.AbstractEventLoop) -> int:
    ran: asyncio.Future[int] = loop.create_future()
    loop.call_soon(ran.set_result, 1)
    expired = False

    def expire() -> None:
        nonlocal expired
        expired = True
        ran.cancel()

    timer = loop.call_later(LIMIT, expire)
    try:
        return await ran
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if expired and (task is None or not task.cancelling()):
            raise TimeoutError from None
        raise
    finally:
        timer.cancel()


async def timeout_form(loop: asyncio.AbstractEventLoop) -> int:
    ran: asyncio.Future[int] = loop.create_future()
    loop.call_soon(ran.set_result, 1)
    async with asyncio.timeout(LIMIT):  # the error path (deadline.expired()) never runs here
        return await ran


FORMS: dict[str, Callable[[asyncio.AbstractEventLoop], Awaitable[int]]] = {
    "plain await (no timeout)": plain,
    "asyncio.wait with a timeout": wait_form,
    "call_later timer": timer_form,
    "asyncio.timeout": timeout_form,
}


async def _run(jobs: int, rounds: int) -> dict[str, list[float]]:
    loop = asyncio.get_running_loop()
    out: dict[str, list[float]] = {name: [] for name in FORMS}
    for _ in range(rounds):
        for name, form in FORMS.items():
            t0 = time.process_time()
            for _ in range(jobs):
                await form(loop)
            out[name].append(1e6 * (time.process_time() - t0) / jobs)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.handler_timer", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"calibration (same run, before): python CPU loop {cpu_loop_rate() / 1e6:.1f} M iter/s")
    out = asyncio.run(_run(args.jobs, args.rounds))
    print(f"calibration (same run, after):  python CPU loop {cpu_loop_rate() / 1e6:.1f} M iter/s")
    print()
    head = f"await of a completed future ({args.jobs:,} jobs, {args.rounds} rounds)"
    print(f"| {head} | CPU µs per job |")
    print("|---|---|")
    for name, values in out.items():
        print(f"| {name} | {min(values):.1f}-{max(values):.1f} |")


if __name__ == "__main__":
    main()
