"""Prometheus metrics (a package from here on: see shardq/metrics/registry.py)."""

from shardq.metrics.registry import *  # noqa: F403
from shardq.metrics.registry import _shardq_version as _shardq_version
