"""The console's pages, their ``/live/...`` JSON twins (polled by static/console.js) and the
health probes.  Each reads through :mod:`shardq.web.data` or the inspector and renders a
template; none changes anything (actions are :mod:`shardq.web.actions`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any
from urllib.parse import urlencode

from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response

from shardq import format as fmt
from shardq import names
from shardq.connection import ping_async
from shardq.errors import ShardqError
from shardq.inspector import EMPTY_STATES, AsyncInspector, InvalidCursorError
from shardq.web import data
from shardq.web.console import (
    PAGE_LIMITS,
    batch_id_of,
    batch_url,
    console_of,
    error_page,
    fragment,
    job_id_of,
    job_url,
    page,
    page_limit,
    queue_of,
)
from shardq.web.data import HEAT_METRICS, fleet, overview, queue_view

# Partition tables above this size are drawn at page load only (the heat map stays live).
LIVE_TABLE_MAX = 256
#: The most of a payload or kept result a job page shows (a result may be 16 MiB):
#: `shardq job result` prints it whole.
SHOWN_CHARS = 64 * 1024


async def overview_page(request: Request) -> Response:
    queues = await overview(console_of(request).connected, console_of(request).rates)
    return page(request, "overview.html", queues=queues, live="/live/overview")


async def overview_live(request: Request) -> Response:
    queues = await overview(console_of(request).connected, console_of(request).rates)
    html = fragment(request, "_overview_rows.html", queues=queues)
    return JSONResponse({"data": queues, "regions": {"queues": html}})


async def _queue_view(request: Request) -> dict[str, Any]:
    metric = request.query_params.get("metric", "backlog")
    console = console_of(request)
    return await queue_view(console.connected, console.rates, queue_of(request), metric)


async def queue_page(request: Request) -> Response:
    view = await _queue_view(request)
    return page(
        request,
        "queue.html",
        queue=queue_of(request),
        view=view,
        metrics=HEAT_METRICS,
        live_table=len(view["partitions"]) <= LIVE_TABLE_MAX,
        empty_states=EMPTY_STATES,
        live=f"/live/q/{queue_of(request)}?" + urlencode({"metric": view["metric"]}),
    )


async def queue_live(request: Request) -> Response:
    view = await _queue_view(request)
    queue = queue_of(request)
    regions = {
        "summary": fragment(request, "_queue_summary.html", queue=queue, view=view),
        "heat": fragment(request, "_heat.html", queue=queue, view=view),
        "nodes": fragment(request, "_nodes.html", view=view),
        "tabs": fragment(
            request, "_tabs.html", queue=queue, view=view, state=request.query_params.get("state")
        ),
    }
    if len(view["partitions"]) <= LIVE_TABLE_MAX:
        regions["partitions"] = fragment(request, "_partitions.html", view=view)
    return JSONResponse(
        {
            "data": {"summary": view["summary"], "nodes": view["nodes"]},
            "partitions": [[fmt.partition(r["partition"]), r["heat"]] for r in view["partitions"]],
            "regions": regions,
        }
    )


async def jobs_page(request: Request, state: str | None = None) -> Response:
    queue = queue_of(request)
    q = request.query_params
    try:
        # (an old word, ?state=active, is taken for the state it names now: shardq.names)
        state = names.job_state(state or q.get("state", "scheduled"))
    except ValueError as exc:
        return error_page(request, 400, "Unknown state", str(exc))
    job_type = q.get("type") or None
    limit = page_limit(q.get("limit"))
    console = console_of(request)
    try:
        listed = await AsyncInspector(console.connected).list_jobs(
            queue, state, job_type=job_type, limit=limit, cursor=q.get("cursor") or None
        )
    except InvalidCursorError as exc:
        return error_page(request, 400, "Invalid cursor", str(exc))
    view = await queue_view(console.connected, console.rates, queue)
    base = {"state": state, "limit": limit} | ({"type": job_type} if job_type else {})
    next_url = (
        f"/q/{queue}/jobs?" + urlencode(base | {"cursor": listed.cursor}) if listed.cursor else None
    )
    return page(
        request,
        "jobs.html",
        queue=queue,
        state=state,
        page=listed,
        job_type=job_type or "",
        limit=limit,
        limits=PAGE_LIMITS,
        next_url=next_url,
        first_url=f"/q/{queue}/jobs?" + urlencode(base),
        paged=bool(q.get("cursor")),
        view=view,
        live=f"/live/q/{queue}?" + urlencode({"state": state}),
    )


async def dead_page(request: Request) -> Response:
    return await jobs_page(request, "dead")


async def job_page(request: Request) -> Response:
    queue, job_id = queue_of(request), job_id_of(request)
    client = console_of(request).connected
    try:
        info = await client.get(queue, job_id)
        kept = await client.result_info(queue, job_id) if info is None else None
    except ValueError as exc:
        return error_page(request, 400, "Invalid job id", str(exc))
    if info is None and kept is not None:
        # Completed, and it kept its result (keep_result): the result is all that is left.
        return page(request, "job.html", queue=queue, job=None, kept=kept,
                    result=_pretty(kept.value) if kept.stored else None, live=None)  # fmt: skip
    if info is None:
        return error_page(
            request, 404, "Job not found", f"job {job_id!r} is not in queue {queue!r}: it "
            "completed without keeping its result, was cancelled, or never existed",
        )  # fmt: skip
    return page(
        request,
        "job.html",
        queue=queue,
        job=info,
        kept=None,
        payload=_pretty(info.payload),
        live=job_url(queue, job_id, live=True),
    )


def _pretty(value: Any) -> str:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    if len(text) <= SHOWN_CHARS:
        return text
    return (
        f"{text[:SHOWN_CHARS]}\n... cut here: {len(text)} characters in all "
        "(shardq job result prints it whole)"
    )


async def job_live(request: Request) -> Response:
    queue, job_id = queue_of(request), job_id_of(request)
    client = console_of(request).connected
    kept = None
    try:
        info = await client.get(queue, job_id)
        if info is None:
            kept = await client.result_info(queue, job_id)
    except ValueError:
        info = None
    html = fragment(request, "_job_facts.html", queue=queue, job=info, kept=kept)
    state = info.state if info else "completed" if kept else "gone"
    return JSONResponse({"data": {"state": state}, "regions": {"facts": html}})


async def search(request: Request) -> Response:
    queue = queue_of(request)
    text = request.query_params.get("q", "").strip()
    if not text:
        return RedirectResponse(f"/q/{queue}/jobs", status_code=303)
    client = console_of(request).connected
    with contextlib.suppress(ValueError):
        if await client.get(queue, text) is not None:
            return RedirectResponse(job_url(queue, text), status_code=303)
    with contextlib.suppress(ValueError):
        found = await AsyncInspector(client).find(queue, text)
        if found is not None:
            return RedirectResponse(job_url(queue, found.id), status_code=303)
    return error_page(
        request, 404, "No such job", f"no job in {queue!r} has the id or idempotency key "
        f"{text!r} (finished jobs are gone; idempotency keys expire)",
    )  # fmt: skip


async def schedules_page(request: Request) -> Response:
    queue = queue_of(request)
    items = await console_of(request).connected.schedules.list(queue)
    return page(request, "schedules.html", queue=queue, schedules=items)


async def batches_page(request: Request) -> Response:
    queue = queue_of(request)
    limit = page_limit(request.query_params.get("limit"))
    items = await data.batches(console_of(request).connected, queue, limit)
    return page(request, "batches.html", queue=queue, batches=items, limit=limit,
                limits=PAGE_LIMITS)  # fmt: skip


async def batch_page(request: Request) -> Response:
    queue, batch_id = queue_of(request), batch_id_of(request)
    try:
        found = await data.batch(console_of(request).connected, queue, batch_id)
    except ValueError as exc:
        return error_page(request, 400, "Invalid batch id", str(exc))
    if found is None:
        return error_page(
            request, 404, "Batch not found", f"batch {batch_id!r} is not in queue {queue!r}: it "
            "was never created, or it ended and its record expired after its retention",
        )  # fmt: skip
    return page(request, "batch.html", queue=queue, batch=found,
                live=batch_url(queue, batch_id, live=True))  # fmt: skip


async def batch_live(request: Request) -> Response:
    queue, batch_id = queue_of(request), batch_id_of(request)
    try:
        found = await data.batch(console_of(request).connected, queue, batch_id)
    except ValueError:
        found = None
    html = fragment(request, "_batch_facts.html", queue=queue, batch=found)
    return JSONResponse({"data": found, "regions": {"facts": html}})


async def fleet_page(request: Request) -> Response:
    queue = queue_of(request)
    members = await fleet(console_of(request).connected, queue)
    return page(request, "fleet.html", queue=queue, fleet=members, live=f"/live/q/{queue}/fleet")


async def fleet_live(request: Request) -> Response:
    queue = queue_of(request)
    members = await fleet(console_of(request).connected, queue)
    html = fragment(request, "_fleet.html", queue=queue, fleet=members)
    return JSONResponse({"data": members, "regions": {"fleet": html}})


async def healthz(request: Request) -> Response:
    return PlainTextResponse("ok")


async def readyz(request: Request) -> Response:
    console = console_of(request)
    if console.client is None:
        return PlainTextResponse(f"Redis unreachable: {console.redis_error}", status_code=503)
    try:
        await asyncio.wait_for(ping_async(console.client.redis), 2.0)
    except (RedisError, ShardqError, OSError, TimeoutError) as exc:
        return PlainTextResponse(f"Redis unreachable: {exc}", status_code=503)
    return PlainTextResponse("ready")
