"""Reverse-mode automatic differentiation: the graph, the engine, grad mode and derivatives of
whole functions (``functional``)."""

from memgrad.autograd import functional, graph
from memgrad.autograd.anomaly import detect_anomaly, set_detect_anomaly
from memgrad.autograd.engine import backward, grad
from memgrad.autograd.function import Function, FunctionCtx
from memgrad.autograd.gradcheck import gradcheck, gradgradcheck

__all__ = [
    "graph", "functional", "backward", "grad", "detect_anomaly", "set_detect_anomaly", "Function",
    "FunctionCtx", "gradcheck", "gradgradcheck",
]
