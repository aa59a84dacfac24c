"""A griffe extension for the API reference (mkdocs.yml, mkdocstrings): shardq's docstrings
name other objects with Sphinx roles (``:meth:`Client.get```, ``:class:`~shardq.jobs.Job```),
which mkdocstrings' Markdown would show as written.  Each role becomes inline code: the name
as written, or its last part for ``~name`` (as Sphinx shows it)."""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:meth|class|func|attr|mod|data|exc|obj|const):`(~?)([^`]+)`")


def plain(text: str) -> str:
    """``text`` with every Sphinx cross-reference role turned into inline code."""

    def code(m: re.Match[str]) -> str:
        name = m.group(2).rsplit(".", 1)[-1] if m.group(1) else m.group(2)
        return f"`{name}`"

    return ROLE.sub(code, text)


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain(obj.docstring.value)
