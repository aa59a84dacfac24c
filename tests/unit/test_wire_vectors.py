"""The wire vectors (wire/vectors/*.json, docs/wire.md) are what this code sends, and the pure
ones hold for the Python client: a change to the wire fails here until the vectors are
regenerated (``python -m wire.spec vectors --write``) and the diff reviewed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardq import jobs
from shardq.errors import ShardqError
from shardq.store import keys
from wire import spec

VECTORS = spec.VECTORS_DIR


def load(name: str) -> dict:
    return json.loads((VECTORS / name).read_text())


def test_vectors_are_current() -> None:
    assert spec.stale() == [], (
        "the wire changed: run `python -m wire.spec vectors --write`, review the "
        "diff and say what changed in docs/wire.md"
    )


def test_every_file_names_the_wire_version() -> None:
    for path in VECTORS.glob("*.json"):
        assert json.loads(path.read_text())["wire"] == spec.WIRE, path


def test_keys_and_tags() -> None:
    doc = load("keys.json")
    for case in doc["cases"]:
        pk = keys.partition_keys(
            case["queue"], case["partition"], case["partitions"], case["generation"]
        )
        assert pk.tag == case["tag"]
        assert keys.slot_of(pk.due) == case["slot"]
        lo, hi = keys.slot_range(case["partition"], case["partitions"])
        assert lo <= case["slot"] < hi  # every tag lands in its own slot range
        assert pk.due == case["keys"]["due"] and pk.idem("k-1") == case["keys"]["idem:k-1"]
    for case in doc["queue_keys"]:
        assert keys.queue_meta_key(case["queue"]) == case["meta"]


def test_routing() -> None:
    for case in load("routing.json")["cases"]:
        assert keys.partition_for(case["key"], case["partitions"]) == case["partition"]


def test_timed_ids() -> None:
    for case in load("timed_ids.json")["cases"]:
        if "head" in case:
            assert jobs.timed_head(case["due_ms"]) == case["head"]
            assert jobs.timed_id_due(case["head"] + "A" * 12) == case["due_ms"]
        else:
            assert jobs.compact_pays(case["body_bytes"]) == case["compact_pays"]


def test_bodies() -> None:
    for case in load("bodies.json")["cases"]:
        settings = spec.settings_from_vector(case.get("settings"))
        if "error" in case:
            with pytest.raises(ShardqError) as raised:
                spec.body_of(case["request"], settings)
            assert type(raised.value).__name__ == case["error"], case
        else:
            assert spec.body_of(case["request"], settings).decode() == case["body"]


def test_functions_contracts_name_their_files() -> None:
    for entry in load("functions.json")["cases"]:
        path = Path(__file__).resolve().parents[2] / entry["file"]
        assert path.is_file(), entry
