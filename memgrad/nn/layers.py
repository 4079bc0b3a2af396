"""Layers: ``Identity``, ``Linear``, activations, ``Dropout``, ``LayerNorm``, ``Embedding``,
``Conv1d``, ``Conv2d``, ``ConvTranspose2d``, the pooling layers, ``Upsample``, ``Flatten``,
``MultiheadSelfAttention`` and ``TransformerBlock``.

Each layer holds its parameters and calls one function of ``memgrad.nn.functional``;
initialisation follows PyTorch's defaults, drawn from memgrad's global generator.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from memgrad.autograd.grad_mode import no_grad
from memgrad.errors import ShapeError
from memgrad.factories import empty, ones, zeros
from memgrad.nn import functional as F
from memgrad.nn import init
from memgrad.nn.module import Module, Parameter, Sequential
from memgrad.ops.linalg import einsum
from memgrad.ops.nn import linear_rows, self_attention
from memgrad.tensor import Tensor

__all__ = [
    "Identity", "Linear", "Bilinear", "ReLU", "GELU", "Tanh", "Sigmoid", "SiLU", "LeakyReLU", "ELU",
    "Softplus", "Mish", "Dropout", "LayerNorm", "Embedding", "EmbeddingBag", "Conv1d",
    "Conv2d", "Conv3d",
    "ConvTranspose2d", "MaxPool1d", "MaxPool2d",
    "AvgPool2d", "AdaptiveAvgPool2d", "Upsample", "Flatten", "Unflatten", "Softmax",
    "LogSoftmax", "MultiheadSelfAttention",
    "TransformerBlock",
]


def _check_positive(api: str, **sizes: Any) -> None:
    for name, v in sizes.items():
        if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"{api}: {name} must be a positive int, got {v!r}")


def _pair(api: str, name: str, v: Any) -> tuple[int, int]:
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return (int(v), int(v))
    if isinstance(v, (tuple, list)) and len(v) == 2 and all(
        isinstance(e, (int, np.integer)) for e in v
    ):
        return (int(v[0]), int(v[1]))
    raise TypeError(f"{api}: {name} must be an int or a pair of ints, got {v!r}")


def _triple(api: str, name: str, v: Any) -> tuple[int, int, int]:
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return (int(v),) * 3
    if isinstance(v, (tuple, list)) and len(v) == 3 and all(
        isinstance(e, (int, np.integer)) and not isinstance(e, bool) for e in v
    ):
        return (int(v[0]), int(v[1]), int(v[2]))
    raise TypeError(f"{api}: {name} must be an int or a triple of ints, got {v!r}")


def _single(api: str, name: str, v: Any) -> tuple[int]:
    if isinstance(v, (tuple, list)) and len(v) == 1:
        v = v[0]
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return (int(v),)
    raise TypeError(f"{api}: {name} must be an int or a 1-tuple of ints, got {v!r}")


def _check_p(api: str, p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{api}: dropout probability has to be between 0 and 1, but got {p}")


class Identity(Module):
    """Returns its input unchanged (any constructor arguments are ignored, as in PyTorch);
    a placeholder, e.g. to remove a layer from a model.

    Example:
        >>> import memgrad as mg
        >>> x = mg.ones(2)
        >>> mg.nn.Identity(54, unused="argument")(x) is x
        True
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def forward(self, input: Any) -> Any:
        return input


class Linear(Module):
    """``y = x @ weight.T + bias`` over the last dimension.

    ``weight`` has shape ``(out_features, in_features)`` and is drawn from
    ``U(-1/sqrt(in_features), 1/sqrt(in_features))`` (PyTorch's ``kaiming_uniform_`` with
    ``a=sqrt(5)``), as is ``bias``.

    Example:
        >>> import memgrad as mg
        >>> lin = mg.nn.Linear(4, 2)
        >>> lin(mg.ones(3, 4)).shape
        (3, 2)
        >>> lin
        Linear(in_features=4, out_features=2, bias=True)
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        _check_positive("Linear", in_features=in_features, out_features=out_features)
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(empty(out_features, in_features))
        self.bias = Parameter(empty(out_features)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw fresh weights with PyTorch's default initialisation."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features)
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Bilinear(Module):
    """``y = x1^T A x2 + b`` for each output: ``y[..., o] = sum_ij x1[..., i] *
    weight[o, i, j] * x2[..., j] + bias[o]``, as ``torch.nn.Bilinear``; weight and bias
    drawn from ``U(-1/sqrt(in1_features), 1/sqrt(in1_features))``.

    Example:
        >>> import memgrad as mg
        >>> mg.nn.Bilinear(3, 4, 5)(mg.randn(2, 3), mg.randn(2, 4)).shape
        (2, 5)
    """

    def __init__(self, in1_features: int, in2_features: int, out_features: int,
                 bias: bool = True) -> None:
        super().__init__()
        _check_positive("Bilinear", in1_features=in1_features, in2_features=in2_features,
                        out_features=out_features)
        self.in1_features, self.in2_features = in1_features, in2_features
        self.out_features = out_features
        self.weight = Parameter(empty(out_features, in1_features, in2_features))
        self.bias = Parameter(empty(out_features)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's initialisation: every entry from ``U(-1/sqrt(in1), 1/sqrt(in1))``."""
        bound = 1.0 / math.sqrt(self.in1_features)
        with no_grad():
            init.uniform_(self.weight, -bound, bound)
            if self.bias is not None:
                init.uniform_(self.bias, -bound, bound)

    def forward(self, input1: Tensor, input2: Tensor) -> Tensor:
        for name, t, size in (("input1", input1, self.in1_features),
                              ("input2", input2, self.in2_features)):
            if not isinstance(t, Tensor) or t.ndim < 1 or t.shape[-1] != size:
                got = t.shape if isinstance(t, Tensor) else type(t).__name__
                raise ShapeError(f"Bilinear: {name} must have last size {size}, got {got}")
        if input1.shape[:-1] != input2.shape[:-1]:
            raise ShapeError(f"Bilinear: input1 {input1.shape} and input2 {input2.shape} must "
                             "agree in all but the last dimension")
        out = einsum("...i,oij,...j->...o", input1, self.weight, input2)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return (f"in1_features={self.in1_features}, in2_features={self.in2_features}, "
                f"out_features={self.out_features}, bias={self.bias is not None}")


class ReLU(Module):
    """``max(x, 0)`` elementwise; ``inplace=True`` overwrites the input.

    Example:
        >>> import memgrad as mg
        >>> mg.nn.ReLU()(mg.tensor([-1.0, 2.0]))
        tensor([0., 2.])
    """

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.relu(input, self.inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class GELU(Module):
    """The Gaussian error linear unit: exact (``approximate="none"``) or its tanh
    approximation (``approximate="tanh"``).

    Example:
        >>> import memgrad as mg
        >>> mg.nn.GELU(approximate="tanh")
        GELU(approximate='tanh')
    """

    def __init__(self, approximate: str = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(
                f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}"
            )
        self.approximate = approximate

    def forward(self, input: Tensor) -> Tensor:
        return F.gelu(input, approximate=self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Tanh(Module):
    """``tanh(x)`` elementwise."""

    def forward(self, input: Tensor) -> Tensor:
        return F.tanh(input)


class Sigmoid(Module):
    """``1 / (1 + exp(-x))`` elementwise."""

    def forward(self, input: Tensor) -> Tensor:
        return F.sigmoid(input)


class SiLU(Module):
    """``x * sigmoid(x)`` elementwise; ``inplace=True`` overwrites the input.

    Example:
        >>> import memgrad as mg
        >>> [round(v, 4) for v in mg.nn.SiLU()(mg.tensor([-1.0, 2.0])).tolist()]
        [-0.2689, 1.7616]
    """

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.silu(input, self.inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class LeakyReLU(Module):
    """``x`` where positive, else ``negative_slope * x``.

    Example:
        >>> import memgrad as mg
        >>> mg.nn.LeakyReLU(0.1)(mg.tensor([-2.0, 3.0]))
        tensor([-0.2,  3. ])
    """

    def __init__(self, negative_slope: float = 0.01, inplace: bool = False) -> None:
        super().__init__()
        self.negative_slope = negative_slope
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace
                                                          else "")


class ELU(Module):
    """``x`` where positive, else ``alpha * (exp(x) - 1)``.

    Example:
        >>> import memgrad as mg
        >>> [round(v, 4) for v in mg.nn.ELU()(mg.tensor([-1.0, 2.0])).tolist()]
        [-0.6321, 2.0]
    """

    def __init__(self, alpha: float = 1.0, inplace: bool = False) -> None:
        super().__init__()
        self.alpha = alpha
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.elu(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class Softplus(Module):
    """``log(1 + exp(beta * x)) / beta``, the identity where ``beta * x > threshold``.

    Example:
        >>> import memgrad as mg
        >>> [round(v, 4) for v in mg.nn.Softplus()(mg.tensor([0.0, 30.0])).tolist()]
        [0.6931, 30.0]
    """

    def __init__(self, beta: float = 1.0, threshold: float = 20.0) -> None:
        super().__init__()
        self.beta = beta
        self.threshold = threshold

    def forward(self, input: Tensor) -> Tensor:
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Mish(Module):
    """``x * tanh(softplus(x))`` elementwise.

    Example:
        >>> import memgrad as mg
        >>> round(mg.nn.Mish()(mg.tensor([1.0])).item(), 4)
        0.8651
    """

    def __init__(self, inplace: bool = False) -> None:
        super().__init__()
        self.inplace = inplace

    def forward(self, input: Tensor) -> Tensor:
        return F.mish(input, self.inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Dropout(Module):
    """In training mode, zero each element with probability ``p`` (drawn from the global
    generator) and scale the rest by ``1 / (1 - p)``; in evaluation mode, the identity.

    Example:
        >>> import memgrad as mg
        >>> drop = mg.nn.Dropout(0.5).eval()
        >>> drop(mg.ones(3))
        tensor([1., 1., 1.])
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        _check_p("Dropout", p)
        self.p = p

    def forward(self, input: Tensor) -> Tensor:
        return F.dropout(input, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


class LayerNorm(Module):
    """Normalise over the trailing ``normalized_shape`` dimensions to zero mean and unit
    variance (biased), then scale by ``weight`` (ones) and shift by ``bias`` (zeros).

    Example:
        >>> import memgrad as mg
        >>> ln = mg.nn.LayerNorm(4)
        >>> y = ln(mg.randn(2, 4))
        >>> bool(y.mean(dim=-1).abs().max() < 1e-5)
        True
    """

    def __init__(
        self,
        normalized_shape: int | tuple[int, ...],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
    ) -> None:
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else normalized_shape
        self.normalized_shape = tuple(int(s) for s in shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape))
            self.bias = Parameter(zeros(self.normalized_shape)) if bias else None
        else:
            self.weight = None
            self.bias = None

    def forward(self, input: Tensor) -> Tensor:
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")


class Embedding(Module):
    """A lookup table: integer indices of any shape -> rows of ``weight``
    (``(num_embeddings, embedding_dim)``, drawn from ``N(0, 1)``). The row ``padding_idx``
    starts at zero and gets no gradient.

    Example:
        >>> import memgrad as mg
        >>> emb = mg.nn.Embedding(10, 3, padding_idx=0)
        >>> emb(mg.tensor([[1, 2], [0, 4]])).shape
        (2, 2, 3)
        >>> emb.weight[0].tolist()
        [0.0, 0.0, 0.0]
    """

    def __init__(
        self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None
    ) -> None:
        super().__init__()
        _check_positive("Embedding", num_embeddings=num_embeddings, embedding_dim=embedding_dim)
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(
                    f"Embedding: padding_idx must be within [-{num_embeddings}, "
                    f"{num_embeddings}) for num_embeddings={num_embeddings}, got {padding_idx}"
                )
            padding_idx %= num_embeddings
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.padding_idx = padding_idx
        self.weight = Parameter(empty(num_embeddings, embedding_dim))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw fresh rows from ``N(0, 1)`` and zero the padding row."""
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                init.zeros_(self.weight[self.padding_idx])

    def forward(self, input: Tensor) -> Tensor:
        return F.embedding(input, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s if self.padding_idx is None else s + f", padding_idx={self.padding_idx}"


class EmbeddingBag(Module):
    """Sums, means or maxima of bags of rows of ``weight`` (``(num_embeddings,
    embedding_dim)``, drawn from ``N(0, 1)``): ``F.embedding_bag`` with the module's
    ``mode``, ``include_last_offset`` and ``padding_idx`` (whose row starts at zero and is
    left out of every bag). ``forward(input, offsets=None, per_sample_weights=None)``.

    Example:
        >>> import memgrad as mg
        >>> bag = mg.nn.EmbeddingBag(10, 3, mode="sum")
        >>> bag(mg.tensor([1, 2, 4, 5, 4]), mg.tensor([0, 2])).shape
        (2, 3)
    """

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm: float | None = None,
                 norm_type: float = 2.0, scale_grad_by_freq: bool = False, mode: str = "mean",
                 sparse: bool = False, _weight: Tensor | None = None,
                 include_last_offset: bool = False, padding_idx: int | None = None) -> None:
        super().__init__()
        _check_positive("EmbeddingBag", num_embeddings=num_embeddings,
                        embedding_dim=embedding_dim)
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"EmbeddingBag: mode must be 'sum', 'mean' or 'max', got {mode!r}")
        for name, value, default in (("max_norm", max_norm, None),
                                     ("scale_grad_by_freq", scale_grad_by_freq, False),
                                     ("sparse", sparse, False)):
            if value is not default and value != default:
                raise NotImplementedError(f"EmbeddingBag: {name}={value!r} is not supported "
                                          f"by memgrad; leave {name} at its default")
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(
                    f"EmbeddingBag: padding_idx must be within [-{num_embeddings}, "
                    f"{num_embeddings}) for num_embeddings={num_embeddings}, got {padding_idx}"
                )
            padding_idx %= num_embeddings
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        self.mode = mode
        self.include_last_offset = include_last_offset
        self.padding_idx = padding_idx
        if _weight is None:
            self.weight = Parameter(empty(num_embeddings, embedding_dim))
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ShapeError(f"EmbeddingBag: _weight must have shape ({num_embeddings}, "
                                 f"{embedding_dim}), got {tuple(_weight.shape)}")
            self.weight = Parameter(_weight)

    def reset_parameters(self) -> None:
        """Draw fresh rows from ``N(0, 1)`` and zero the padding row."""
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                init.zeros_(self.weight[self.padding_idx])

    def forward(self, input: Tensor, offsets: Tensor | None = None,
                per_sample_weights: Tensor | None = None) -> Tensor:
        return F.embedding_bag(input, self.weight, offsets, mode=self.mode,
                               per_sample_weights=per_sample_weights,
                               include_last_offset=self.include_last_offset,
                               padding_idx=self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}, mode={self.mode!r}"
        if self.include_last_offset:
            s += ", include_last_offset=True"
        return s if self.padding_idx is None else s + f", padding_idx={self.padding_idx}"


def _conv_setup(module: Module, api: str, sizes: Any, in_channels: int, out_channels: int,
                kernel_size: Any, stride: Any, padding: Any, dilation: Any, groups: int,
                bias: bool, transposed: bool = False) -> None:
    """Check a convolution's arguments and give ``module`` its attributes and parameters
    (uninitialised: the caller's ``reset_parameters`` fills them); ``sizes`` makes the
    per-dimension tuples (``_pair``, ``_single``); a transposed convolution's weight is
    ``(in_channels, out_channels // groups, *kernel_size)``."""
    _check_positive(api, in_channels=in_channels, out_channels=out_channels, groups=groups)
    if in_channels % groups or out_channels % groups:
        raise ValueError(
            f"{api}: in_channels ({in_channels}) and out_channels ({out_channels}) must "
            f"both be divisible by groups ({groups})"
        )
    module.in_channels = in_channels
    module.out_channels = out_channels
    module.kernel_size = sizes(api, "kernel_size", kernel_size)
    module.stride = sizes(api, "stride", stride)
    module.padding = sizes(api, "padding", padding)
    module.dilation = sizes(api, "dilation", dilation)
    module.groups = groups
    first, second = (in_channels, out_channels) if transposed else (out_channels, in_channels)
    module.weight = Parameter(empty(first, second // groups, *module.kernel_size))
    module.bias = Parameter(empty(out_channels)) if bias else None


class Conv2d(Module):
    """2-D convolution over ``(N, C_in, H, W)`` input (cross-correlation, as in PyTorch).

    ``weight`` has shape ``(out_channels, in_channels // groups, kH, kW)``; weight and bias
    use PyTorch's default initialisation (``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` with
    ``fan_in = in_channels // groups * kH * kW``).

    Example:
        >>> import memgrad as mg
        >>> conv = mg.nn.Conv2d(3, 8, kernel_size=3, padding=1)
        >>> conv(mg.randn(2, 3, 16, 16)).shape
        (2, 8, 16, 16)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__()
        _conv_setup(self, "Conv2d", _pair, in_channels, out_channels, kernel_size, stride,
                    padding, dilation, groups, bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw fresh weights with PyTorch's default initialisation."""
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input: Tensor) -> Tensor:
        return F.conv2d(input, self.weight, self.bias, self.stride, self.padding,
                        self.dilation, self.groups)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if any(self.padding):
            s += f", padding={self.padding}"
        if any(d != 1 for d in self.dilation):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class Conv3d(Module):
    """3-D convolution over ``(N, C_in, D, H, W)`` input (cross-correlation, as in
    PyTorch; ``F.conv3d``, composed of ``conv2d``).

    ``weight`` has shape ``(out_channels, in_channels // groups, kD, kH, kW)``; weight and
    bias use PyTorch's default initialisation, as ``Conv2d``.

    Example:
        >>> import memgrad as mg
        >>> conv = mg.nn.Conv3d(2, 4, kernel_size=3, padding=1)
        >>> conv(mg.randn(1, 2, 5, 6, 6)).shape
        (1, 4, 5, 6, 6)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int, int],
        stride: int | tuple[int, int, int] = 1,
        padding: int | tuple[int, int, int] = 0,
        dilation: int | tuple[int, int, int] = 1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__()
        _conv_setup(self, "Conv3d", _triple, in_channels, out_channels, kernel_size, stride,
                    padding, dilation, groups, bias)
        self.reset_parameters()

    reset_parameters = Conv2d.reset_parameters

    def forward(self, input: Tensor) -> Tensor:
        return F.conv3d(input, self.weight, self.bias, self.stride, self.padding,
                        self.dilation, self.groups)

    extra_repr = Conv2d.extra_repr


class ConvTranspose2d(Module):
    """2-D transposed convolution over ``(N, C_in, H, W)`` input (``F.conv_transpose2d``):
    the output size is ``(H - 1)*stride - 2*padding + dilation*(kH - 1) + output_padding +
    1``, or the ``output_size`` given to ``forward``.

    ``weight`` has shape ``(in_channels, out_channels // groups, kH, kW)``; weight and bias
    use PyTorch's default initialisation (as ``Conv2d``, with ``fan_in = out_channels //
    groups * kH * kW``).

    Example:
        >>> import memgrad as mg
        >>> up = mg.nn.ConvTranspose2d(8, 4, kernel_size=2, stride=2)
        >>> up(mg.randn(2, 8, 5, 5)).shape
        (2, 4, 10, 10)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        output_padding: int | tuple[int, int] = 0,
        groups: int = 1,
        bias: bool = True,
        dilation: int | tuple[int, int] = 1,
        padding_mode: str = "zeros",
    ) -> None:
        super().__init__()
        api = "ConvTranspose2d"
        if padding_mode != "zeros":
            raise ValueError(f"{api}: only padding_mode='zeros' is supported, got "
                             f"{padding_mode!r}")
        _conv_setup(self, api, _pair, in_channels, out_channels, kernel_size, stride, padding,
                    dilation, groups, bias, transposed=True)
        self.output_padding = _pair(api, "output_padding", output_padding)
        self.reset_parameters()

    reset_parameters = Conv2d.reset_parameters

    def _extra(self, input: Tensor, output_size: Any) -> tuple[int, int]:
        if output_size is None:
            return self.output_padding
        want = tuple(output_size)[-2:]
        extra = []
        for i, (n, k) in enumerate(zip(input.shape[-2:], self.kernel_size)):
            base = ((n - 1) * self.stride[i] - 2 * self.padding[i]
                    + self.dilation[i] * (k - 1) + 1)
            if not base <= want[i] < base + self.stride[i]:
                raise ValueError(
                    f"ConvTranspose2d: output_size {tuple(output_size)} is not reachable from "
                    f"input of shape {input.shape}: each size must lie in [base, base + stride)"
                    f", here [{base}, {base + self.stride[i]}) for dimension {i}"
                )
            extra.append(want[i] - base)
        return (extra[0], extra[1])

    def forward(self, input: Tensor, output_size: Any = None) -> Tensor:
        return F.conv_transpose2d(input, self.weight, self.bias, self.stride, self.padding,
                                  self._extra(input, output_size), self.groups, self.dilation)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding != (0, 0):
            s += f", padding={self.padding}"
        if self.output_padding != (0, 0):
            s += f", output_padding={self.output_padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class _MaxPool(Module):
    """The options of a max pooling layer; ``stride`` defaults to ``kernel_size``."""

    def __init__(self, kernel_size: Any, stride: Any = None, padding: Any = 0,
                 dilation: Any = 1) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding = padding
        self.dilation = dilation

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, dilation={self.dilation}")


class MaxPool1d(_MaxPool):
    """1-D max pooling over ``(N, C, L)`` input; ``stride`` defaults to ``kernel_size``.

    Example:
        >>> import memgrad as mg
        >>> mg.nn.MaxPool1d(2)(mg.randn(1, 3, 8)).shape
        (1, 3, 4)
    """

    def __init__(self, kernel_size: int, stride: int | None = None, padding: int = 0,
                 dilation: int = 1) -> None:
        super().__init__(kernel_size, stride, padding, dilation)

    def forward(self, input: Tensor) -> Tensor:
        return F.max_pool1d(input, self.kernel_size, self.stride, self.padding, self.dilation)


class MaxPool2d(_MaxPool):
    """2-D max pooling over ``(N, C, H, W)`` input; ``stride`` defaults to ``kernel_size``.

    Example:
        >>> import memgrad as mg
        >>> mg.nn.MaxPool2d(2)(mg.randn(1, 3, 8, 8)).shape
        (1, 3, 4, 4)
    """

    def __init__(
        self,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] | None = None,
        padding: int | tuple[int, int] = 0,
        dilation: int | tuple[int, int] = 1,
    ) -> None:
        super().__init__(kernel_size, stride, padding, dilation)

    def forward(self, input: Tensor) -> Tensor:
        return F.max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation)


class Conv1d(Module):
    """1-D convolution over ``(N, C_in, L)`` input (cross-correlation, as in PyTorch).

    ``weight`` has shape ``(out_channels, in_channels // groups, kernel_size)``; weight and
    bias use PyTorch's default initialisation, as ``Conv2d``.

    Example:
        >>> import memgrad as mg
        >>> conv = mg.nn.Conv1d(3, 8, kernel_size=3, padding=1)
        >>> conv(mg.randn(2, 3, 16)).shape
        (2, 8, 16)
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int],
        stride: int | tuple[int] = 1,
        padding: int | tuple[int] = 0,
        dilation: int | tuple[int] = 1,
        groups: int = 1,
        bias: bool = True,
    ) -> None:
        super().__init__()
        _conv_setup(self, "Conv1d", _single, in_channels, out_channels, kernel_size, stride,
                    padding, dilation, groups, bias)
        self.reset_parameters()

    reset_parameters = Conv2d.reset_parameters

    def forward(self, input: Tensor) -> Tensor:
        return F.conv1d(input, self.weight, self.bias, self.stride, self.padding,
                        self.dilation, self.groups)

    extra_repr = Conv2d.extra_repr


class AvgPool2d(Module):
    """2-D average pooling over ``(N, C, H, W)`` input; ``stride`` defaults to
    ``kernel_size`` (arguments as ``F.avg_pool2d``).

    Example:
        >>> import memgrad as mg
        >>> mg.nn.AvgPool2d(2)(mg.ones(1, 3, 8, 8)).shape
        (1, 3, 4, 4)
    """

    def __init__(
        self,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] | None = None,
        padding: int | tuple[int, int] = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ) -> None:
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input: Tensor) -> Tensor:
        return F.avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """Average pooling of ``(N, C, H, W)`` input to ``output_size`` (an int, a pair, or a
    pair with None for "keep"), with PyTorch's windows.

    Example:
        >>> import memgrad as mg
        >>> mg.nn.AdaptiveAvgPool2d((1, 1))(mg.randn(2, 8, 5, 7)).shape
        (2, 8, 1, 1)
    """

    def __init__(self, output_size: int | tuple[int | None, int | None]) -> None:
        super().__init__()
        self.output_size = output_size

    def forward(self, input: Tensor) -> Tensor:
        return F.adaptive_avg_pool2d(input, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class Upsample(Module):
    """Resize (N, C, L), (N, C, H, W) or (N, C, D, H, W) input to ``size`` or by
    ``scale_factor``: ``F.interpolate`` with this module's ``mode`` (``"nearest"``,
    ``"linear"``, ``"bilinear"`` or ``"trilinear"``) and ``align_corners``, as in PyTorch.

    Example:
        >>> import memgrad as mg
        >>> mg.nn.Upsample(scale_factor=2)(mg.tensor([[[1.0, 2.0]]]))
        tensor([[[1., 1., 2., 2.]]])
        >>> mg.nn.Upsample(scale_factor=2, mode="linear", align_corners=True)(
        ...     mg.tensor([[[1.0, 4.0]]]))
        tensor([[[1., 2., 3., 4.]]])
    """

    def __init__(
        self,
        size: int | tuple[int, ...] | None = None,
        scale_factor: float | tuple[float, ...] | None = None,
        mode: str = "nearest",
        align_corners: bool | None = None,
        recompute_scale_factor: bool | None = None,
    ) -> None:
        super().__init__()
        if (size is None) == (scale_factor is None):
            raise ValueError("Upsample: give exactly one of size and scale_factor")
        if mode not in ("nearest", "linear", "bilinear", "trilinear"):
            raise NotImplementedError(
                f"Upsample: mode {mode!r} is not supported; use 'nearest', 'linear', "
                "'bilinear' or 'trilinear'"
            )
        if align_corners is not None and mode == "nearest":
            raise ValueError("Upsample: align_corners only applies to the interpolating "
                             "modes, not to 'nearest'")
        self.size = size
        self.scale_factor = scale_factor
        self.mode = mode
        self.align_corners = align_corners
        self.recompute_scale_factor = recompute_scale_factor

    def forward(self, input: Tensor) -> Tensor:
        return F.interpolate(input, self.size, self.scale_factor, self.mode,
                             self.align_corners, self.recompute_scale_factor)

    def extra_repr(self) -> str:
        given = f"size={self.size}" if self.size is not None else \
            f"scale_factor={self.scale_factor}"
        return f"{given}, mode={self.mode!r}" + (
            f", align_corners={self.align_corners}" if self.align_corners is not None else "")


class Flatten(Module):
    """Flatten dimensions ``start_dim`` .. ``end_dim`` into one.

    Example:
        >>> import memgrad as mg
        >>> mg.nn.Flatten()(mg.zeros(2, 3, 4)).shape
        (2, 12)
    """

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input: Tensor) -> Tensor:
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Split dimension ``dim`` into ``unflattened_size`` (one size may be -1), as
    ``Tensor.unflatten``.

    Example:
        >>> import memgrad as mg
        >>> mg.nn.Unflatten(1, (3, 4))(mg.zeros(2, 12)).shape
        (2, 3, 4)
    """

    def __init__(self, dim: int, unflattened_size: tuple[int, ...]) -> None:
        super().__init__()
        if not isinstance(unflattened_size, (tuple, list)):
            raise TypeError(f"Unflatten: unflattened_size must be a tuple of ints, got "
                            f"{type(unflattened_size).__name__}")
        self.dim = dim
        self.unflattened_size = tuple(unflattened_size)

    def forward(self, input: Tensor) -> Tensor:
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


def _implicit_dim(dim: int | None, input: Tensor, name: str) -> int:
    """``dim``, or PyTorch's legacy choice when it is None (with PyTorch's warning)."""
    if dim is not None:
        return dim
    warnings.warn(f"{name}: implicit dimension choice for {name.lower()} has been deprecated. "
                  "Change the call to include dim=X as an argument.", UserWarning, stacklevel=4)
    return 0 if input.ndim in (0, 1, 3) else 1


class Softmax(Module):
    """``F.softmax`` over ``dim``: each slice along it sums to 1.

    Example:
        >>> import memgrad as mg
        >>> mg.nn.Softmax(dim=-1)(mg.zeros(1, 4))
        tensor([[0.25, 0.25, 0.25, 0.25]])
    """

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return F.softmax(input, _implicit_dim(self.dim, input, "Softmax"))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Module):
    """``F.log_softmax`` over ``dim``.

    Example:
        >>> import memgrad as mg
        >>> round(mg.nn.LogSoftmax(dim=1)(mg.zeros(1, 2))[0, 0].item(), 4)
        -0.6931
    """

    def __init__(self, dim: int | None = None) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, input: Tensor) -> Tensor:
        return F.log_softmax(input, _implicit_dim(self.dim, input, "LogSoftmax"))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class MultiheadSelfAttention(Module):
    """Multi-head self-attention over ``(batch, seq, embed_dim)`` input.

    One ``Linear`` (``qkv``, its weight the three projections stacked) makes queries, keys
    and values, which are attended over ``num_heads`` heads (scale ``1/sqrt(head_dim)``;
    with ``causal=True`` position ``t`` sees only positions ``<= t``); ``out_proj`` mixes
    the heads back. Without dropout the attention is one op on the stacked projection
    (NOTE [ Fused self-attention ] in ops/nn.py); with it, each of queries, keys and
    values comes from its third of the weight (``linear_rows``, so that backward adds no
    full-size zero gradients for the slices of one output), and the heads are split with
    reshape/transpose and attended with ``F.scaled_dot_product_attention``. ``dropout`` is
    the dropout probability on the attention weights in training mode, as in
    ``torch.nn.MultiheadAttention``.

    Example:
        >>> import memgrad as mg
        >>> attn = mg.nn.MultiheadSelfAttention(16, num_heads=4, causal=True)
        >>> attn(mg.randn(2, 5, 16)).shape
        (2, 5, 16)
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        causal: bool = False,
    ) -> None:
        super().__init__()
        _check_positive("MultiheadSelfAttention", embed_dim=embed_dim, num_heads=num_heads)
        if embed_dim % num_heads:
            raise ValueError(
                f"MultiheadSelfAttention: embed_dim ({embed_dim}) must be divisible by "
                f"num_heads ({num_heads})"
            )
        _check_p("MultiheadSelfAttention", dropout)
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.causal = causal
        self.dropout = dropout
        self.qkv = Linear(embed_dim, 3 * embed_dim, bias=bias)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 3 or x.shape[-1] != self.embed_dim:
            raise ValueError(
                "MultiheadSelfAttention: expected input of shape (batch, seq, "
                f"{self.embed_dim}), got {x.shape}"
            )
        dropout_p = self.dropout if self.training else 0.0
        if dropout_p == 0.0:  # one op (NOTE [ Fused self-attention ] in ops/nn.py)
            y = self_attention(self.qkv(x), heads=self.num_heads, causal=self.causal,
                               scale=1.0 / math.sqrt(self.head_dim))
            return self.out_proj(y)
        return self._composite(x, dropout_p)

    def _composite(self, x: Tensor, dropout_p: float = 0.0) -> Tensor:
        """The same attention as separate ops, with dropout ``dropout_p`` on the weights:
        the projections by row ranges of ``qkv``'s weight, the heads split and merged with
        reshape and transpose, ``F.scaled_dot_product_attention``, ``out_proj``. What
        ``forward`` runs in training mode with dropout (and benchmarks/attention.py times
        against the fused op)."""
        b, t, e = x.shape
        heads = (b, t, self.num_heads, self.head_dim)
        w, bias = self.qkv.weight, self.qkv.bias
        q, k, v = (linear_rows(x, w, bias, lo=i * e, hi=(i + 1) * e).reshape(heads)
                   .transpose(1, 2) for i in range(3))
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=self.causal)
        return self.out_proj(y.transpose(1, 2).reshape(b, t, e))

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"dropout={self.dropout}, causal={self.causal}")


class TransformerBlock(Module):
    """A pre-LayerNorm transformer block:
    ``x = x + attn(ln1(x)); x = x + mlp(ln2(x))`` with
    ``mlp = Linear(d_model, d_ff), GELU("tanh"), Linear(d_ff, d_model), Dropout``.

    Args:
        d_model: the embedding size.
        n_heads: attention heads (must divide ``d_model``).
        d_ff: the hidden size of the MLP; ``4 * d_model`` by default.
        dropout: dropout probability on the attention weights and at the end of the MLP.
        causal: causal attention (the default, for language models).

    Example:
        >>> import memgrad as mg
        >>> block = mg.nn.TransformerBlock(16, 4)
        >>> block(mg.randn(2, 5, 16)).shape
        (2, 5, 16)
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        dropout: float = 0.0,
        causal: bool = True,
    ) -> None:
        super().__init__()
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.ln1 = LayerNorm(d_model)
        self.attn = MultiheadSelfAttention(d_model, n_heads, dropout=dropout, causal=causal)
        self.ln2 = LayerNorm(d_model)
        self.mlp = Sequential(
            Linear(d_model, d_ff), GELU(approximate="tanh"), Linear(d_ff, d_model),
            Dropout(dropout),
        )

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))
