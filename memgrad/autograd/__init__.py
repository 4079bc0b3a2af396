"""Reverse-mode automatic differentiation: the graph, the engine and grad mode."""

from memgrad.autograd import graph
from memgrad.autograd.anomaly import detect_anomaly, set_detect_anomaly
from memgrad.autograd.engine import backward, grad

__all__ = ["graph", "backward", "grad", "detect_anomaly", "set_detect_anomaly"]
