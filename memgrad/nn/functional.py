"""The functional API, ``import memgrad.nn.functional as F``, as in PyTorch.

Every name here is a function of the op table (``memgrad.ops``, ``memgrad.ops.nn``,
``memgrad.ops.conv``, ``memgrad.ops.normalization``, ``memgrad.ops.functional``) re-exported
unchanged, so ``F.gelu`` and the op the tracer, the checkpoint policies and the tests see
are one and the same.

Example:
    >>> import memgrad as mg
    >>> import memgrad.nn.functional as F
    >>> F.relu(mg.tensor([-1.0, 2.0]))
    tensor([0., 2.])
"""

from memgrad.ops import sigmoid, tanh
from memgrad.ops.conv import (
    adaptive_avg_pool2d,
    avg_pool2d,
    conv1d,
    conv2d,
    conv_transpose2d,
    fold,
    max_pool1d,
    max_pool2d,
    unfold,
)
from memgrad.ops.conv3d import conv3d
from memgrad.ops.functional import (
    binary_cross_entropy,
    cosine_similarity,
    embedding_bag,
    huber_loss,
    kl_div,
    normalize,
    smooth_l1_loss,
)
from memgrad.ops.nn import (
    binary_cross_entropy_with_logits,
    cross_entropy,
    dropout,
    elu,
    embedding,
    gelu,
    l1_loss,
    layer_norm,
    leaky_relu,
    linear,
    log_softmax,
    mish,
    mse_loss,
    nll_loss,
    relu,
    scaled_dot_product_attention,
    silu,
    softmax,
    softplus,
)
from memgrad.ops.normalization import batch_norm, group_norm, rms_norm
from memgrad.ops.resample import interpolate, one_hot, pad

__all__ = [
    "linear", "relu", "gelu", "tanh", "sigmoid", "softmax", "log_softmax", "dropout",
    "layer_norm", "embedding", "conv2d", "max_pool2d", "cross_entropy", "mse_loss", "nll_loss",
    "scaled_dot_product_attention", "silu", "leaky_relu", "elu", "softplus", "mish", "l1_loss",
    "binary_cross_entropy_with_logits", "batch_norm", "group_norm", "rms_norm", "conv1d",
    "avg_pool2d", "adaptive_avg_pool2d", "pad", "interpolate", "one_hot", "conv_transpose2d",
    "binary_cross_entropy", "smooth_l1_loss", "huber_loss", "kl_div", "normalize",
    "cosine_similarity", "max_pool1d", "unfold", "fold", "embedding_bag",
    "conv3d",
]
