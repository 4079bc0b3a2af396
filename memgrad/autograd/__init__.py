"""Reverse-mode automatic differentiation: the graph, the engine and grad mode."""

from memgrad.autograd import graph
from memgrad.autograd.anomaly import detect_anomaly, set_detect_anomaly
from memgrad.autograd.engine import backward, grad
from memgrad.autograd.function import Function, FunctionCtx
from memgrad.autograd.gradcheck import gradcheck, gradgradcheck

__all__ = [
    "graph", "backward", "grad", "detect_anomaly", "set_detect_anomaly", "Function",
    "FunctionCtx", "gradcheck", "gradgradcheck",
]
