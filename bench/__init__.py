"""shardq's benchmark suite: ``python -m bench`` (see :mod:`bench.run`)."""
