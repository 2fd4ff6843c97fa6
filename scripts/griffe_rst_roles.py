"""A Griffe extension for the docs site's API page: Sphinx roles in docstrings
(``:func:`x```, ``:class:`x```, ``:mod:`x```, ``:meth:`` and ``:attr:``) become plain code
spans, since the Markdown renderer would print the role name. Loaded by ``mkdocs.yml``
(``plugins.mkdocstrings.handlers.python.options.extensions``).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|exc|obj):`~?([^`]+)`")


def strip_roles(text: str) -> str:
    """``:func:`a.b``` -> ```a.b``` (a leading ``~`` is dropped as Sphinx would)."""
    return _ROLE.sub(r"`\1`", text)


class RstRoles(griffe.Extension):
    """Rewrite the roles of every docstring Griffe loads."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = strip_roles(obj.docstring.value)
