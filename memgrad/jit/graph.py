"""The traced program: a Graph of bindings over values, printable, comparable and runnable.

Example:
    >>> import memgrad as mg
    >>> g = mg.jit.trace(lambda x: x.exp(), mg.ones(2))
    >>> type(g).__name__, g(mg.zeros(2)).tolist()
    ('Graph', [1.0, 1.0])
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memgrad.jit.analysis import saved_entries, static_profile
from memgrad.jit.interpret import run
from memgrad.jit.ir import Binding, Const, Value
from memgrad.records import SavedEntry, StageProfile

__all__ = ["Graph"]


@dataclass
class Graph:
    """A traced program. ``str(graph)`` prints it with types as comments; ``graph.code`` is
    the text ``memgrad.jit.parse`` reads back; ``graph(*inputs)`` runs it (see
    ``memgrad.jit.interpret``)."""

    inputs: list[Value]
    params: list[Value]
    bindings: list[Binding]
    outputs: list[Value]
    tuple_output: bool = False
    constants: list[Const] = field(default_factory=list)
    # the parameter tensors, by name, bound at trace time (absent for a parsed graph)
    bound: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    dynamic: bool = field(default=False, compare=False)
    # with dynamic=True: trace the function again for inputs of other types (set by trace)
    retrace: Callable[..., Graph] | None = field(default=None, compare=False, repr=False)
    # names of the inputs that required grad when traced
    requires_grad: frozenset = field(default=frozenset(), compare=False)
    # forward seconds of the traced run
    seconds: float = field(default=0.0, compare=False)
    _plan: Any = field(default=None, compare=False, repr=False)

    def _lines(self, types: bool) -> list[str]:
        formals = (
            [f"{v}: {v.type_str}" for v in self.inputs]
            + [f"param {v}: {v.type_str}" for v in self.params]
            + [
                f"const {c}: {c.type_str}" + ("" if types else f" = {c.value_text()}")
                for c in self.constants
            ]
        )
        one_line = f"graph({', '.join(formals)}):"
        if len(one_line) <= 100:
            lines = [one_line]
        else:  # one formal a line
            lines = [f"graph({formals[0]},"]
            lines += [f"      {f}," for f in formals[1:-1]]
            lines.append(f"      {formals[-1]}):")
        region = None
        for b in self.bindings:
            if b.region != region:
                if region is not None:
                    lines.append("  }")
                if b.region is not None:
                    lines.append(f"  checkpoint {b.region} {{")
                region = b.region
            indent = "    " if region is not None else "  "
            text = indent + str(b)
            if types:
                text = f"{text:<56}  # {b.out.type_str}"
            lines.append(text)
        if region is not None:
            lines.append("  }")
        outs = ", ".join(str(v) for v in self.outputs)
        if self.tuple_output and len(self.outputs) == 1:
            outs += ","
        lines.append(f"  return {outs}")
        return lines

    def __str__(self) -> str:
        return "\n".join(self._lines(types=True))

    @property
    def code(self) -> str:
        """The program as text (what ``memgrad.jit.parse`` reads)."""
        return "\n".join(self._lines(types=False)) + "\n"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return (
            self.inputs == other.inputs
            and self.params == other.params
            and self.constants == other.constants
            and self.bindings == other.bindings
            and self.outputs == other.outputs
            and self.tuple_output == other.tuple_output
        )

    def __call__(self, *inputs: Any) -> Any:
        return run(self, inputs)

    def static_profile(self) -> StageProfile:
        """The planner's profile of this graph as one stage, from static analysis (see
        ``memgrad.jit.static_profile``); what ``checkpoint.plan`` reads of traced stages."""
        return static_profile(self, self.seconds)

    def saved_entries(self) -> list[SavedEntry]:
        """Every value a backward of this graph keeps, from static analysis; what
        ``memory.saved_report`` reads of a traced graph."""
        return saved_entries(self)
