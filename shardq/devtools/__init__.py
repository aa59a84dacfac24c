"""Tools for developing and measuring shardq, not part of the product: the local Redis servers
(``devcluster``), the benchmarks (``bench``, ``bench_fleet``) and the machine calibration they
print (``calibration``), and the no-op handlers the demo and the benchmarks run (``handlers``).

Nothing in shardq imports this package except ``shardq dev``, ``shardq demo`` and ``shardq
bench`` (shardq/cli/dev.py), and those only inside the commands, so a worker or a producer never
loads it.  Tests, bench/ and loadtest/ import it by its modules.
"""
