"""A job option is declared once (shardq/jobs/options.py, issue 52 point 1) and every surface
derives from that declaration or is kept in step with it here: JobRequest's fields and
documentation, JobOptions (the enqueue signatures' type), the signatures and documentation of
Client.enqueue, AsyncClient.enqueue and Task, the body codec (shardq/jobs/body.py), the CLI's
``enqueue`` flags and help, the console's job view, a workflow's stored spec, the Node
producer's generated constants and body writer, and the scripts' reads.  An option added to
the declaration and missing from any of them fails here.  No Redis."""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shardq.aio import AsyncClient
from shardq.client import Client
from shardq.config import ProducerSettings
from shardq.jobs import JobInfo, JobRequest
from shardq.jobs import body as codec
from shardq.jobs.options import OPTION, OPTIONS, PUBLIC, Backoff, JobOptions
from shardq.store import producer, routing
from shardq.store import workflows as workflow_ops
from shardq.tasks import Task, Tasks

REPO = Path(__file__).resolve().parents[2]
SETTINGS = ProducerSettings()
BODY_LETTERS = {letter for o in OPTIONS for letter in o.letters}

# A value of each option the body carries and what reading it back gives (StoredOptions'
# fields; priority and tenant: decode_body's).  An option declared without one fails below.
EXAMPLES: dict[str, list[tuple[Any, dict[str, Any]]]] = {
    "idempotency_key": [("order-7", {"idempotency_key": "order-7"})],
    "max_attempts": [(3, {"max_attempts": 3})],
    "backoff": [(Backoff("fixed", 2.0, 9.0), {"backoff": Backoff("fixed", 2.0, 9.0)})],
    "headers": [({"traceparent": "00-ab-cd-01"}, {"headers": {"traceparent": "00-ab-cd-01"}})],
    "limit_key": [("api.example.com", {"limit_key": "api.example.com"})],
    "priority": [("high", {"priority": "high"})],
    "tenant": [("acme", {"tenant": "acme"})],
    "keep_result": [(timedelta(minutes=5), {"keep_result": 300.0})],
    "timeout": [(2.5, {"timeout": 2.5})],
    "deadline": [
        (datetime(2030, 1, 1, tzinfo=UTC), {"deadline_ms": 1893456000000}),
        (timedelta(seconds=90), {"start_within": 90.0}),
    ],
    "workflow": [
        ({"g": ["b1", 4, 1], "pr": {"n": 1}}, {"workflow": ("b1", 4, True), "previous": {"n": 1}}),
        ({"gb": "b2"}, {"callback_of": "b2"}),
    ],
}


def _hints(cls: Any) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def test_the_declaration_and_job_options_name_the_same_options() -> None:
    assert len(OPTION) == len(OPTIONS), "an option is declared twice"
    assert list(JobOptions.__annotations__) == [o.name for o in PUBLIC]
    for o in OPTIONS:
        assert o.doc.strip(), f"{o.name} has no documentation"
        assert len(o.help) == len(o.flags), f"{o.name}: one help text per flag"
        assert (o.carried == "body") == bool(o.letters), f"{o.name}: body options have letters"


def test_job_request_has_every_option_with_its_declared_type_and_default() -> None:
    fields = {f.name: f for f in dataclasses.fields(JobRequest)}
    assert list(fields)[:2] == ["job_type", "payload"]
    assert set(fields) - {"job_type", "payload"} == set(OPTION)
    request_types, option_types = _hints(JobRequest), _hints(JobOptions)
    for name in OPTION:
        assert fields[name].default is None, f"JobRequest.{name} must default to None (not set)"
        if name in option_types:
            assert request_types[name] == option_types[name], name


def test_job_request_documents_every_field() -> None:
    doc = JobRequest.__doc__ or ""
    for f in dataclasses.fields(JobRequest):
        assert f"``{f.name}``" in doc, f"JobRequest's documentation misses {f.name}"
    for o in OPTIONS:
        assert " ".join(o.doc.split()[:6]) in " ".join(doc.split()), o.name


@pytest.mark.parametrize(
    "fn",
    [Client.enqueue, AsyncClient.enqueue, Task.enqueue, Task.enqueue_async, Task.request],
    ids=lambda fn: fn.__qualname__,
)
def test_each_enqueue_signature_lists_every_option(fn: Any) -> None:
    params = inspect.signature(fn).parameters
    for o in PUBLIC:
        p = params.get(o.name)
        assert p is not None, f"{fn.__qualname__} does not take {o.name}"
        assert p.kind is p.KEYWORD_ONLY and p.default is None
        assert p.annotation == str(JobOptions.__annotations__[o.name].__forward_arg__)
    assert not [p for p in params.values() if p.kind is p.VAR_KEYWORD], "**options shown as such"
    doc = inspect.getdoc(fn) or ""
    for o in PUBLIC:
        assert f"``{o.name}``" in doc, f"{fn.__qualname__}'s documentation misses {o.name}"


def test_a_task_declares_defaults_with_the_options_types() -> None:
    declared = [o.name for o in OPTIONS if o.task]
    task_types, option_types = _hints(Task), _hints(JobOptions)
    for name in declared:
        assert task_types[name] == option_types[name], name
    task_params = inspect.signature(Tasks.task).parameters
    assert set(declared) <= set(task_params)


def test_the_codec_writes_and_reads_every_declared_letter() -> None:
    body_options = {o.name for o in OPTIONS if o.carried == "body"}
    assert set(codec.WRITERS) == body_options, "shardq/jobs/body.py WRITERS vs the declaration"
    assert set(codec.READERS) == BODY_LETTERS, "shardq/jobs/body.py READERS vs the declaration"
    stored_fields = set(codec.StoredOptions._fields)
    for letter, reader in codec.READERS.items():
        assert reader.field in stored_fields, letter
    assert {o.name for o in OPTIONS if o.carried == "prefix"} == set(codec.PREFIXED)
    carried = {o.name for o in OPTIONS if o.carried in ("body", "prefix")}
    assert set(EXAMPLES) == carried, "give each option the body carries an example here"


def test_each_option_is_checked_by_its_declared_check() -> None:
    """The body's writers check a value with the option's declared check (the key is checked
    with the job id, before the body is written)."""
    for o in OPTIONS:
        if o.carried != "body" or o.check is None:
            continue
        write = codec.WRITERS[o.name].write
        caller = routing.check_ids if o.name == "idempotency_key" else write
        assert write is o.check or o.check.__name__ in caller.__code__.co_names, o.name


@pytest.mark.parametrize(
    ("name", "value", "read"),
    [(name, value, read) for name, cases in EXAMPLES.items() for value, read in cases],
)
def test_each_option_is_written_under_its_letter_and_read_back(
    name: str, value: Any, read: dict[str, Any]
) -> None:
    raw = codec.request_body(JobRequest("t", {"x": 1}, **{name: value}), SETTINGS)
    assert raw == codec.encode_body("t", {"x": 1}, settings=SETTINGS, **{name: value})
    body = codec.decode_body(raw)
    written = set(body) - {"t", "p", "priority", "tenant"}
    letters = set(OPTION[name].letters)  # none: carried in the prefix
    assert written <= letters and bool(written) == bool(letters), (name, written)
    options = codec.stored_options(body)
    for field, expected in read.items():
        got = body[field] if field in ("priority", "tenant") else getattr(options, field)
        assert got == expected, (name, field)


def test_prepare_many_writes_the_body_prepare_enqueue_writes() -> None:
    """The bulk path encodes the request whole, as the single path does: it once dropped
    ``workflow=`` (a copied list of options)."""
    values = {name: cases[0][0] for name, cases in EXAMPLES.items() if name != "idempotency_key"}
    request = JobRequest("t", 1, **values)
    one = producer.prepare_enqueue("q", 4, request, SETTINGS)
    [many] = producer.prepare_many("q", 4, [request], SETTINGS)
    assert many.body == one.body == codec.request_body(request, SETTINGS)


def test_every_option_reaches_a_workflows_spec_or_is_refused_there() -> None:
    assert list(workflow_ops.SPEC_KEYS) == sorted(
        workflow_ops.SPEC_KEYS, key=lambda n: workflow_ops.SPEC_KEYS[n] is not None
    )
    assert set(workflow_ops.SPEC_KEYS) == set(OPTION)


def _enqueue_command() -> Any:
    from shardq.cli.job import enqueue

    return enqueue


def test_every_declared_flag_is_an_enqueue_option_with_its_declared_help() -> None:
    params = {opt: p for p in _enqueue_command().params for opt in getattr(p, "opts", [])}
    for o in OPTIONS:
        for flag, text in zip(o.flags, o.help, strict=True):
            assert flag in params, f"shardq enqueue has no {flag} ({o.name})"
            assert params[flag].help == text, flag
    assert not [o.name for o in PUBLIC if not o.flags], "a public option without a flag"


def test_the_enqueue_flags_give_every_option() -> None:
    from shardq.cli.job import job_options

    ctx = _enqueue_command().make_context("enqueue", ["-q", "q", "t"])
    assert set(job_options(dict(ctx.params))) == {o.name for o in PUBLIC}


def test_the_job_view_shows_every_declared_fact() -> None:
    pytest.importorskip("starlette")
    from starlette.templating import Jinja2Templates

    from shardq.web import app

    info = JobInfo(
        id="j", queue="q", partition=0, state="scheduled", type="t", payload=None, attempt=0,
        max_attempts=None, due_ms=None, last_error=None, idempotency_key="k", limit_key="api",
        priority="high", tenant="acme", keep_result=300.0, timeout=2.5,
        deadline_ms=1893456000000, start_within=90.0,
    )  # fmt: skip
    facts = [fact for o in OPTIONS for fact in o.facts]
    assert [fact for fact, _ in info.option_facts()] == facts
    templates = Jinja2Templates(directory=str(REPO / "shardq" / "web" / "templates"))
    app._filters(templates)
    html = templates.get_template("_job_facts.html").render(job=info, queue="q", kept=None)
    for fact in facts:
        assert f"<dt>{fact.label}</dt>" in html
    assert "<dt>keeps result</dt><dd>300 s after it completes</dd>" in html
    plain = dataclasses.replace(info, idempotency_key=None, priority="default", tenant=None)
    assert [f.label for f, _ in plain.option_facts()][:1] == ["limit key"]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def test_the_node_producer_has_every_letter() -> None:
    constants = (REPO / "clients" / "node" / "src" / "constants.generated.ts").read_text()
    writer = (REPO / "clients" / "node" / "src" / "body.ts").read_text()
    for letter, reader in codec.READERS.items():
        assert f'  {_camel(reader.field)}: "{letter}",' in constants, letter
    public = {letter for o in PUBLIC for letter in o.letters}
    for letter in public:
        key = _camel(codec.READERS[letter].field)
        assert f"BODY_KEY.{key}]" in writer, f"clients/node/src/body.ts does not write {letter}"


# What a script reads of a body's options: a key searched in its text ('"g":[') or read from
# the decoded options object (options['g'], options.g).
_LUA_READS = re.compile(r"""'"(\w+)":|options\[['"](\w+)['"]\]|options\.(\w+)""")


def test_every_letter_the_scripts_read_is_declared() -> None:
    read: set[str] = set()
    for path in sorted((REPO / "lua").rglob("*.lua")):
        for line in path.read_text().splitlines():
            code = line.split("--", 1)[0]
            read |= {g for m in _LUA_READS.finditer(code) for g in m.groups() if g}
    assert "g" in read, "the scan no longer finds lua/includes/outbox.lua's read of g"
    assert read <= BODY_LETTERS, f"lua/ reads undeclared body options {read - BODY_LETTERS}"
