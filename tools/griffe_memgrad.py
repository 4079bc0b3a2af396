"""A griffe extension for the API reference (used by mkdocs.yml; not part of the package).

- memgrad's docstrings head their doctests with ``Example:`` (the house style), which
  Google-style parsing reads as an admonition of plain Markdown; this makes it the
  ``Examples:`` section, so the doctests render as code.
- The Tensor methods that the op table binds (NOTE [ Public names ]) are known to static
  tools only through ``memgrad/tensor.pyi``, without docstrings; each such method gets a line
  that links the function it is (``x.tanh()`` is ``memgrad.ops.tanh(x)``).
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


class TensorMethodLinks(griffe.Extension):
    """Give each undocumented Tensor method that is a public function a link to it."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.name != "memgrad":
            return
        tensor = pkg.modules["tensor"]["Tensor"]
        functions = set(pkg.modules["ops"].exports or ())
        for name, member in tensor.members.items():
            if member.docstring is None and name in functions:
                member.docstring = griffe.Docstring(
                    f"[`memgrad.ops.{name}`][memgrad.ops.{name}] with this tensor as its "
                    "first argument.", parent=member)
