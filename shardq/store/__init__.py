"""The store: every Redis key name, every Lua script and every reply, in one package.

- :mod:`~shardq.store.keys`: key names and the hash-tag rule;
- :mod:`~shardq.store.loader`: loads lua/*.lua (expanding includes);
- :mod:`~shardq.store.codes`: script return codes and the typed errors they become;
- :mod:`~shardq.store.faults`: what a redis-py exception means (retry, redirect, give up);
- :mod:`~shardq.store.op`: a script call as data (:class:`~shardq.store.op.Op`);
- :mod:`~shardq.store.transport`: running ops (alone, per node, per primary, with WAIT);
- one module of ops per role: :mod:`~shardq.store.producer`, :mod:`~shardq.store.delivery`,
  :mod:`~shardq.store.fleet`, :mod:`~shardq.store.inspection`.

Nothing outside this package names a script or parses a reply (tests/unit/test_store.py checks it).
"""
