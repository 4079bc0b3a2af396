"""Neural-network building blocks, as in ``torch.nn``: ``Module``, ``Parameter``, the
containers, the layers, the losses, ``functional`` (``F``), ``init`` and ``utils``.

Example:
    >>> import memgrad as mg
    >>> net = mg.nn.Sequential(mg.nn.Linear(4, 8), mg.nn.ReLU(), mg.nn.Linear(8, 1))
    >>> net(mg.randn(3, 4)).shape
    (3, 1)
"""

from memgrad.nn import functional, init, utils
from memgrad.nn.containers import ModuleDict, ParameterDict, ParameterList
from memgrad.nn.layers import (
    ELU,
    GELU,
    AdaptiveAvgPool2d,
    AvgPool2d,
    Bilinear,
    Conv1d,
    Conv2d,
    Conv3d,
    ConvTranspose2d,
    Dropout,
    Embedding,
    EmbeddingBag,
    Flatten,
    Identity,
    LayerNorm,
    LeakyReLU,
    Linear,
    LogSoftmax,
    MaxPool1d,
    MaxPool2d,
    Mish,
    MultiheadSelfAttention,
    ReLU,
    Sigmoid,
    SiLU,
    Softmax,
    Softplus,
    Tanh,
    TransformerBlock,
    Unflatten,
    Upsample,
)
from memgrad.nn.loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from memgrad.nn.module import Module, ModuleList, Parameter, Sequential
from memgrad.nn.normalization import BatchNorm1d, BatchNorm2d, GroupNorm, RMSNorm
from memgrad.nn.rnn import GRU, LSTM, RNN
from memgrad.nn.transformer import (
    MultiheadAttention,
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)

__all__ = [
    "Module", "Parameter", "Sequential", "ModuleList", "ModuleDict", "ParameterList",
    "ParameterDict", "Identity", "Linear", "Bilinear", "ReLU", "GELU", "Tanh", "Sigmoid", "SiLU",
    "LeakyReLU", "ELU", "Softplus", "Mish", "Dropout", "LayerNorm", "BatchNorm1d",
    "BatchNorm2d", "GroupNorm", "RMSNorm", "Embedding", "EmbeddingBag", "Conv1d", "Conv2d",
    "Conv3d", "ConvTranspose2d",
    "MaxPool1d", "MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "Upsample", "Flatten", "Unflatten",
    "Softmax", "LogSoftmax", "MultiheadSelfAttention", "TransformerBlock", "CrossEntropyLoss",
    "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "BCELoss", "BCEWithLogitsLoss",
    "KLDivLoss", "RNN", "LSTM", "GRU", "MultiheadAttention", "TransformerEncoderLayer",
    "TransformerEncoder", "TransformerDecoderLayer", "TransformerDecoder", "Transformer",
    "functional", "init", "utils",
]
