"""The attempt bound is one number on both sides: the scripts dead-letter a job whose stored
attempt is not a whole number 0..MAX_ATTEMPT (lua/includes/envelope.lua), and the inspector
reads exactly those as malformed (shardq/store/envelope.py), so `job get` never shows a job as
healthy that the next fetch would dead-letter."""

from __future__ import annotations

import re
from pathlib import Path

from shardq.jobs import MAX_ATTEMPT
from shardq.store import envelope

LUA = Path(__file__).resolve().parents[2] / "lua" / "includes" / "envelope.lua"


def test_the_scripts_and_the_reader_share_the_attempt_bound() -> None:
    found = re.search(r"^local MAX_ATTEMPT = (\d+)$", LUA.read_text(), re.M)
    assert found is not None, "lua/includes/envelope.lua names MAX_ATTEMPT"
    assert int(found.group(1)) == MAX_ATTEMPT
    at_bound = envelope.read(f"A{MAX_ATTEMPT}|".encode() + b'["t",1]')
    beyond = envelope.read(f"A{MAX_ATTEMPT + 1}|".encode() + b'["t",1]')
    assert at_bound.attempt == MAX_ATTEMPT and "attempt" not in at_bound.malformed
    assert beyond.attempt is None and "attempt" in beyond.malformed
