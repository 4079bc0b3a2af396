"""Neural-network building blocks, as in ``torch.nn``: ``Module``, ``Parameter``, the
containers, the layers, ``functional`` (``F``) and ``init``.

Example:
    >>> import memgrad as mg
    >>> net = mg.nn.Sequential(mg.nn.Linear(4, 8), mg.nn.ReLU(), mg.nn.Linear(8, 1))
    >>> net(mg.randn(3, 4)).shape
    (3, 1)
"""

from memgrad.nn import functional, init
from memgrad.nn.layers import (
    GELU,
    Conv2d,
    Dropout,
    Embedding,
    Flatten,
    LayerNorm,
    Linear,
    MaxPool2d,
    MultiheadSelfAttention,
    ReLU,
    Sigmoid,
    Tanh,
    TransformerBlock,
)
from memgrad.nn.module import Module, ModuleList, Parameter, Sequential

__all__ = [
    "Module", "Parameter", "Sequential", "ModuleList", "Linear", "ReLU", "GELU", "Tanh",
    "Sigmoid", "Dropout", "LayerNorm", "Embedding", "Conv2d", "MaxPool2d", "Flatten",
    "MultiheadSelfAttention", "TransformerBlock", "functional", "init",
]
