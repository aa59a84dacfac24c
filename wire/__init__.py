"""The wire specification's tooling (docs/wire.md), next to the vectors it writes: repository
tools, not part of the shardq package.

- ``wire.spec``: builds the conformance vectors (``wire/vectors/``) from the Python client's
  own code, and exports the Functions library for clients in other languages;
- ``wire.runner``: runs any producer client against the call vectors on a real Redis.
"""
