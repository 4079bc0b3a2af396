"""A griffe extension for the API reference: memgrad's docstrings head their doctests with
``Example:`` (the house style), which Google-style parsing reads as an admonition of plain
Markdown; this makes it the ``Examples:`` section, so the doctests render as code.

Used by mkdocs.yml (mkdocstrings' ``extensions`` option); not part of the package.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    """Rename each docstring's ``Example:`` heading to ``Examples:`` before it is parsed."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE.sub(r"\1Examples:", obj.docstring.value)
