"""3-D convolution over an NCDHW input, as ``torch.nn.functional.conv3d``, composed of
``conv2d``: the kernel's depth slices ``weight[:, :, k]`` each convolve, over height and
width, the input's depth slices they meet (``d * stride + k * dilation`` of the
zero-padded depth, for every output depth ``d``, taken as a batch), and the results add up.
Its gradients (and double backward) are those of ``conv2d``, the depth slicing and the sum,
so it needs no kernel or VJP of its own.

Example:
    >>> import memgrad as mg
    >>> from memgrad.ops.conv3d import conv3d
    >>> conv3d(mg.ones(1, 1, 3, 3, 3), mg.ones(1, 1, 2, 2, 2)).shape
    (1, 1, 2, 2, 2)
"""

from __future__ import annotations

import numpy as np

from memgrad.errors import ShapeError
from memgrad.ops.conv import _check_dtypes, conv2d
from memgrad.ops.movement import cat, permute, reshape, squeeze, unsqueeze
from memgrad.tensor import Tensor

__all__ = ["conv3d"]


def _triple(value, name: str, api: str, low: int) -> tuple[int, int, int]:
    triple = tuple(value) if isinstance(value, (tuple, list)) else (value,) * 3
    if len(triple) != 3 or not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in triple
    ):
        raise TypeError(f"{api}: {name} must be an int or a triple of ints, got {value!r}")
    if min(triple) < low:
        limit = "positive" if low == 1 else "non-negative"
        raise ValueError(f"{api}: {name} must be {limit}, got {value!r}")
    return int(triple[0]), int(triple[1]), int(triple[2])


def _pad_depth(x: Tensor, pad: int) -> Tensor:
    if not pad:
        return x
    n, c, _, h, w = x.shape
    zeros = Tensor(np.zeros((n, c, pad, h, w), dtype=x.dtype))
    return cat([zeros, x, zeros], 2)


def _check(api: str, input: Tensor, weight: Tensor, bias: Tensor | None, groups: int) -> None:
    if weight.ndim != 5:
        raise ShapeError(f"{api}: expected a 5-D weight (out_channels, in_channels / groups, "
                         f"kD, kH, kW), got shape {weight.shape}")
    _check_dtypes(api, input, weight, bias)
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError(f"{api}: groups must be a positive int, got {groups!r}")
    co, cg = weight.shape[:2]
    if co % groups or input.shape[1] != cg * groups:
        raise ShapeError(
            f"{api}: weight of shape {weight.shape} with groups={groups} expects an input "
            f"with {cg * groups} channels (weight.shape[1] * groups) and out_channels "
            f"divisible by groups, but the input of shape {input.shape} has "
            f"{input.shape[1]}"
        )
    if bias is not None and tuple(bias.shape) != (co,):
        raise ShapeError(f"{api}: bias must have shape ({co},) (one value per output channel "
                         f"of the weight of shape {weight.shape}), got {bias.shape}")


def conv3d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
) -> Tensor:
    """3-D convolution (cross-correlation, as in PyTorch) over an NCDHW input.

    Args:
        input: (N, C, D, H, W), or (C, D, H, W) for one unbatched sample.
        weight: (CO, C / groups, KD, KH, KW).
        bias: (CO,) or None.
        stride: an int or a triple (depth, height, width).
        padding: an int or a triple of zeros added on both sides.
        dilation: an int or a triple.
        groups: split the channels into this many independent convolutions.

    Returns:
        (N, CO, OD, OH, OW) with ``OD = (D + 2*padding - dilation*(KD - 1) - 1) // stride + 1``
        (likewise OH, OW); (CO, OD, OH, OW) for an unbatched input.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.conv3d import conv3d
        >>> y = conv3d(mg.ones(1, 2, 4, 4, 4), mg.ones(3, 2, 3, 3, 3), padding=1)
        >>> y.shape, y[0, 0, 1, 1, 1].item(), y[0, 0, 0, 0, 0].item()
        ((1, 3, 4, 4, 4), 54.0, 16.0)
    """
    api = "conv3d"
    for name, t in (("input", input), ("weight", weight)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{api}: {name} must be a Tensor, got {type(t).__name__}")
    if input.ndim == 4:
        return squeeze(conv3d(unsqueeze(input, 0), weight, bias, stride, padding, dilation,
                              groups), 0)
    if input.ndim != 5:
        raise ShapeError(f"{api}: expected a 4-D (unbatched C, D, H, W) or 5-D (batched N, "
                         f"C, D, H, W) input, got shape {input.shape}")
    _check(api, input, weight, bias, groups)
    (sd, sh, sw) = _triple(stride, "stride", api, low=1)
    (pd, ph, pw) = _triple(padding, "padding", api, low=0)
    (dd, dh, dw) = _triple(dilation, "dilation", api, low=1)
    n, c, depth, h, w = input.shape
    co, _, kd = weight.shape[:3]
    padded = tuple(size + 2 * p for size, p in zip(input.shape[2:], (pd, ph, pw)))
    spans = tuple(d * (k - 1) + 1 for k, d in zip(weight.shape[2:], (dd, dh, dw)))
    if any(a > b for a, b in zip(spans, padded)):
        raise ShapeError(f"{api}: the kernel {tuple(weight.shape[2:])} with dilation "
                         f"{(dd, dh, dw)} spans {spans}, larger than the padded input {padded} "
                         f"(input {tuple(input.shape[2:])} plus padding {(pd, ph, pw)} on each "
                         "side); use a smaller kernel or more padding")
    od = (padded[0] - spans[0]) // sd + 1
    x = _pad_depth(input, pd)
    out = None
    for k in range(kd):
        first = k * dd
        # the depth slices kernel slice k meets, one per output depth, as a batch of images
        planes = x[:, :, first:first + (od - 1) * sd + 1:sd]
        planes = reshape(permute(planes, 0, 2, 1, 3, 4), n * od, c, h, w)
        part = conv2d(planes, weight[:, :, k], None, (sh, sw), (ph, pw), (dh, dw), int(groups))
        out = part if out is None else out + part
    assert out is not None
    oh, ow = out.shape[2], out.shape[3]
    result = permute(reshape(out, n, od, co, oh, ow), 0, 2, 1, 3, 4)
    if bias is not None:
        result = result + reshape(bias, co, 1, 1, 1)
    return result
