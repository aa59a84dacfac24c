"""The local development commands' code, shipped with the product: the local Redis servers of
``shardq dev`` (``devcluster``), the end-to-end run of ``shardq dev demo`` (``demo``), and no-op
handlers for workers run against them (``handlers``).

Nothing in shardq imports this package except ``shardq dev``
(shardq/cli/dev.py), and those only inside the commands, so a worker or a producer never loads
it.  Tests, bench/ and loadtest/ import it by its modules.  The benchmarks, the machine's
calibration and the wire vectors' tools are repository tools, outside the package (bench/,
wire/).
"""
