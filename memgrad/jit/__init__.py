"""Trace a function to a let-binding IR, print and parse it, and re-run it with an
interpreter that frees every value at its last use."""

from memgrad.jit.analysis import OpBytes, op_bytes, saved_entries, static_profile
from memgrad.jit.graph import Graph
from memgrad.jit.interpret import run
from memgrad.jit.ir import Binding, Const, Value
from memgrad.jit.parse import parse
from memgrad.jit.trace import trace, trace_stages

__all__ = [
    "trace",
    "parse",
    "run",
    "Graph",
    "Binding",
    "Value",
    "Const",
    "op_bytes",
    "OpBytes",
    "static_profile",
    "saved_entries",
    "trace_stages",
]
