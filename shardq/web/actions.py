"""The console's actions (``POST /q/<queue>/action/<name>``): each one an entry of
:data:`ACTIONS` with what it does, who may run it (the operator token: a session with its CSRF
token, or a bearer) and whether it is destructive (then it needs ``confirm=<queue>``: the
confirmation page).  Every attempt is logged as a JSON event (``web.action``)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from shardq import names
from shardq.aio import AsyncClient
from shardq.errors import BatchNotFoundError, JobNotFoundError, JobRunningError
from shardq.inspector import EMPTY_STATES, AsyncInspector
from shardq.logs import log_event
from shardq.web import auth
from shardq.web.console import (
    console_of,
    error_page,
    local_target,
    page,
    queue_of,
    remote,
    session_of,
)
from shardq.web.middleware import Refused, bearer

log = logging.getLogger("shardq.web")

#: What an action does: (client, queue, the form) -> the line shown to the operator.
Perform = Callable[[AsyncClient, str, FormData], Awaitable[str]]


def _field(form: FormData, name: str) -> str:
    return str(form.get(name, "")).strip()


async def _pause(client: AsyncClient, queue: str, form: FormData) -> str:
    return f"paused {await AsyncInspector(client).pause(queue)} partitions"


async def _resume(client: AsyncClient, queue: str, form: FormData) -> str:
    return f"resumed {await AsyncInspector(client).resume(queue)} partitions"


async def _run_now(client: AsyncClient, queue: str, form: FormData) -> str:
    job_id = _field(form, "job_id")
    was = await AsyncInspector(client).run_now(queue, job_id)
    return f"job {job_id} ({was}) is due now"


async def _retry_dead(client: AsyncClient, queue: str, form: FormData) -> str:
    job_type = _field(form, "type") or None
    return f"replayed {await AsyncInspector(client).retry_dead(queue, job_type)} dead jobs"


async def _cancel(client: AsyncClient, queue: str, form: FormData) -> str:
    job_id = _field(form, "job_id")
    # A running job too: its worker is told to stop it, and it ends as cancelled.
    if await client.cancel(queue, job_id, running=True):
        return f"cancelled job {job_id}"
    return f"job {job_id} was not cancelled (finished, or not found)"


async def _empty(client: AsyncClient, queue: str, form: FormData) -> str:
    state = names.job_state(str(form.get("state", "")), EMPTY_STATES)
    return f"deleted {await AsyncInspector(client).empty(queue, state)} {state} jobs"


async def _cancel_batch(client: AsyncClient, queue: str, form: FormData) -> str:
    batch_id = _field(form, "batch_id")
    out = await AsyncInspector(client).cancel_batch(queue, batch_id)
    children = (f"{out.cancelled_children} waiting children cancelled, "
                f"{out.running_children} running (they end as they will)")  # fmt: skip
    if out.was in ("open", "running"):
        return f"cancelled batch {batch_id} (was {out.was}): {children}"
    return f"batch {batch_id} had already ended ({out.was}), its state kept: {children}"


@dataclass(frozen=True)
class Action:
    title: str
    destructive: bool
    perform: Perform
    needs_job: bool = False
    needs_batch: bool = False


ACTIONS: dict[str, Action] = {
    "pause": Action("Pause every partition of the queue", True, _pause),
    "resume": Action("Resume every partition of the queue", False, _resume),
    "run-now": Action("Run the job now", False, _run_now, needs_job=True),
    "replay": Action(
        "Replay the dead job (attempts reset, due now)", False, _run_now, needs_job=True
    ),
    "retry-dead": Action("Replay every dead job", True, _retry_dead),
    "cancel": Action("Cancel the job", True, _cancel, needs_job=True),
    "empty": Action("Delete every job in a state", True, _empty),
    "cancel-batch": Action(
        "Cancel the batch (no callback fires; its waiting children are cancelled)",
        True,
        _cancel_batch,
        needs_batch=True,
    ),
}


def _authorise(request: Request, form: FormData) -> tuple[str, bool]:
    """(who, by bearer) for an action request, or :class:`Refused`."""
    console = console_of(request)
    if not console.config.allow_actions:
        raise Refused(403, "read-only", "this console is read-only: start it with "
                      "--allow-actions (and SHARDQ_WEB_TOKEN) to act on queues")  # fmt: skip
    if bearer(console, request):
        return "bearer", True
    session = session_of(request)
    if session is None:
        raise Refused(401, "no token", "log in with the operator token first (or send "
                      "Authorization: Bearer <token>)")  # fmt: skip
    if not auth.same(str(form.get("csrf", "")), session.csrf):
        raise Refused(403, "csrf", "the form's CSRF token is missing or does not match this "
                      "session: reload the page and try again")  # fmt: skip
    return session.who, False


async def action(request: Request) -> Response:
    queue, name = queue_of(request), str(request.path_params["action"])
    form = await request.form()
    job_id = _field(form, "job_id") or None
    batch_id = _field(form, "batch_id") or None
    what: dict[str, Any] = {
        "action": name, "queue": queue, "job_id": job_id, "remote": remote(request)
    }  # fmt: skip
    if batch_id is not None:
        what["batch_id"] = batch_id
    try:
        who, by_bearer = _authorise(request, form)
    except Refused as refused:
        log_event(log, "web.action_refused", reason=refused.reason, **what)
        if request.headers.get("authorization") or "json" in request.headers.get("accept", ""):
            return JSONResponse(
                {"ok": False, "error": refused.detail}, refused.status, refused.headers()
            )
        shown = error_page(request, refused.status, "Refused", refused.detail)
        shown.headers.update(refused.headers())
        return shown
    spec = ACTIONS.get(name)
    if spec is None or (spec.needs_job and not job_id) or (spec.needs_batch and not batch_id):
        detail = (
            f"unknown action {name!r}"
            if spec is None
            else f"{name} needs a {'job_id' if spec.needs_job else 'batch_id'}"
        )
        return (
            JSONResponse({"ok": False, "error": detail}, 400)
            if by_bearer
            else error_page(request, 400, "Bad request", detail)
        )
    await console_of(request).connected.partitions(queue)  # an unknown queue is a 404, first
    if spec.destructive and str(form.get("confirm", "")) != queue:
        if by_bearer:
            return JSONResponse(
                {"ok": False, "error": f"{name} is destructive: send confirm={queue}"}, 409
            )
        kept = ("job_id", "batch_id", "state", "type", "back")
        fields = {k: str(v) for k, v in form.items() if k in kept}
        return page(request, "confirm.html", queue=queue, name=name, spec=spec, fields=fields)
    ok = True
    try:
        result = await spec.perform(console_of(request).connected, queue, form)
    except (JobRunningError, JobNotFoundError, BatchNotFoundError, ValueError) as exc:
        ok, result = False, str(exc)
    log_event(
        log,
        "web.action",
        logging.INFO if ok else logging.WARNING,
        who=who,
        ok=ok,
        result=result,
        state=str(form.get("state", "")) or None,
        job_type=str(form.get("type", "")) or None,
        **what,
    )
    if by_bearer:
        return JSONResponse({"ok": ok, "result": result}, 200 if ok else 409)
    session = session_of(request)
    if session is not None:
        session.flash.append(result if ok else f"refused: {result}")
    back = local_target(str(form.get("back", "")), f"/q/{queue}")
    return RedirectResponse(back, status_code=303)
