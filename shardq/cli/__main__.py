"""``python -m shardq.cli``: the same as the ``shardq`` command (tests and the benchmarks run
the CLI this way, with the interpreter they run under)."""

from shardq.cli import entry

entry()
