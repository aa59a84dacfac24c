"""Fixtures of the fleet tests: ``fresh``, a 6-node cluster of a test's own."""

from support.fresh import fresh  # noqa: F401 - the fixture, for every fleet test
