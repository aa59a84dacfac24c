"""How shardq shows things to people: times (ISO 8601 UTC plus a relative form), durations,
partitions, aligned tables, JSON.

One module, shared by the CLI (shardq/cli/) and the web console (shardq/web/), so every
command and every page shows a time, a table and a JSON line the same way; the web console
imports this, never the CLI.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import click
import orjson

from shardq.store import keys, numbers


def now_ms() -> int:
    """This machine's clock in ms: only for the relative form, never to decide what is due."""
    return int(time.time() * 1000)


def iso(ms: int | float | None) -> str | None:
    """``2030-01-01T00:00:00.123Z`` for epoch ms; None stays None; a number no datetime can
    show (before 1970 or after 9999, not finite) as ``invalid time <ms>``."""
    if ms is None:
        return None
    try:
        moment = datetime.fromtimestamp(numbers.time_ms(ms) / 1000, UTC)
    except numbers.BadNumber:
        return f"invalid time {numbers.shown(ms)}"
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def span(seconds: float) -> str:
    """A duration in at most two units: ``45s``, ``5m12s``, ``2h5m``, ``3d4h``."""
    s = int(abs(seconds))
    if s < 60:
        return f"{s}s"
    units = [("d", 86400), ("h", 3600), ("m", 60), ("s", 1)]
    parts: list[str] = []
    for name, size in units:
        if s >= size or parts:
            n, s = divmod(s, size)
            parts.append(f"{n}{name}")
        if len(parts) == 2:
            break
    return "".join(p for p in parts if not p.startswith("0"))


def relative(ms: int | float | None, now: int | None = None) -> str | None:
    """``in 5m``, ``3s ago`` or ``now`` for epoch ms, against this machine's clock."""
    if ms is None:
        return None
    try:  # (a time, or a delta from 0: may be negative)
        ms = numbers.real(ms, -numbers.MAX_TIME_MS, numbers.MAX_TIME_MS)
    except numbers.BadNumber:
        return "?"
    delta = (ms - (now_ms() if now is None else now)) / 1000
    if abs(delta) < 1:
        return "now"
    return f"in {span(delta)}" if delta > 0 else f"{span(delta)} ago"


def when(ms: int | float | None, now: int | None = None) -> str:
    """``2030-01-01T00:00:00.000Z (in 5m)``, or ``-`` for no time."""
    if ms is None:
        return "-"
    return f"{iso(ms)} ({relative(ms, now)})"


def stream_id_ms(entry_id: str) -> int | None:
    """The ms timestamp at the front of a Redis stream entry id (``1714000000000-0``)."""
    try:
        return numbers.time_ms(entry_id.split("-", 1)[0])
    except numbers.BadNumber:
        return None


def partition(fleet_id: int) -> str:
    """A partition as every surface names it (text and JSON, the console, metric labels,
    logs): its number, ``g<generation>.<number>`` once a resize made it
    (:func:`keys.label_of_fleet_id` of the fleet id the library carries)."""
    return keys.label_of_fleet_id(fleet_id)


def named(row: dict[str, Any]) -> dict[str, Any]:
    """A JSON row with its ``partition`` (a fleet id) as the partition's name."""
    if isinstance(row.get("partition"), int):
        row["partition"] = partition(row["partition"])
    return row


def malformed(records: Iterable[tuple[str, dict[str, str]]]) -> list[str]:
    """One line per record with fields that are not what shardq writes (a number that is
    not one, read as unset): ``malformed: <record>: <field> = <raw value>, ...``."""
    return [
        f"malformed: {label}: " + ", ".join(f"{k} = {v}" for k, v in sorted(bad.items()))
        for label, bad in records
        if bad
    ]


def malformed_fields(bad: dict[str, str]) -> list[tuple[str, str]]:
    """A ``malformed`` line for :func:`fields` when a record has bad fields (else none)."""
    if not bad:
        return []
    return [("malformed", ", ".join(f"{k} = {v}" for k, v in sorted(bad.items())))]


def echo_malformed(records: Iterable[tuple[str, dict[str, str]]]) -> None:
    """Print :func:`malformed`'s lines, after a command's output (fix them with HSET/HDEL)."""
    for line in malformed(records):
        click.echo(line)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], right: Sequence[int] = ()) -> str:
    """Columns padded to their widest cell; columns listed in ``right`` (numbers) align right."""
    cells = [list(headers)] + [["-" if c is None else str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        padded = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(padded).rstrip())
    return "\n".join(lines)


def fields(pairs: Sequence[tuple[str, Any]]) -> str:
    """``key: value`` lines with the values aligned."""
    width = max(len(k) for k, _ in pairs)
    return "\n".join(f"{k + ':':<{width + 1}} {'-' if v is None else v}" for k, v in pairs)


def _default(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


def json_text(value: Any) -> str:
    """One line of JSON (orjson: dataclasses, datetimes; anything else as text)."""
    return orjson.dumps(value, default=_default).decode()


def echo_json(value: Any) -> None:
    """Print one JSON object (or array) on one line."""
    click.echo(json_text(value))


def echo_json_lines(items: Iterable[Any]) -> None:
    """Print a list as JSON lines: one object per line, so ``jq -c`` and ``while read`` work."""
    for item in items:
        click.echo(json_text(item))
