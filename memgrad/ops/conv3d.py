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
from memgrad.ops.conv import _check_weight, _check_window, _sizes, conv2d
from memgrad.ops.movement import cat, permute, reshape, squeeze, unsqueeze
from memgrad.tensor import Tensor

__all__ = ["conv3d"]


def _pad_depth(x: Tensor, pad: int) -> Tensor:
    if not pad:
        return x
    n, c, _, h, w = x.shape
    zeros = Tensor(np.zeros((n, c, pad, h, w), dtype=x.dtype))
    return cat([zeros, x, zeros], 2)


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
    groups = _check_weight(api, input, weight, bias, groups)
    (sd, sh, sw) = _sizes(stride, "stride", api, low=1, n=3)
    (pd, ph, pw) = _sizes(padding, "padding", api, low=0, n=3)
    (dd, dh, dw) = _sizes(dilation, "dilation", api, low=1, n=3)
    _check_window(api, input.shape[2:], weight.shape[2:], (pd, ph, pw), (dd, dh, dw))
    n, c, depth, h, w = input.shape
    co, _, kd = weight.shape[:3]
    od = (depth + 2 * pd - dd * (kd - 1) - 1) // sd + 1
    x = _pad_depth(input, pd)
    out = None
    for k in range(kd):
        first = k * dd
        # the depth slices kernel slice k meets, one per output depth, as a batch of images
        planes = x[:, :, first:first + (od - 1) * sd + 1:sd]
        planes = reshape(permute(planes, 0, 2, 1, 3, 4), n * od, c, h, w)
        part = conv2d(planes, weight[:, :, k], None, (sh, sw), (ph, pw), (dh, dw), groups)
        out = part if out is None else out + part
    assert out is not None
    oh, ow = out.shape[2], out.shape[3]
    result = permute(reshape(out, n, od, co, oh, ow), 0, 2, 1, 3, 4)
    if bias is not None:
        result = result + reshape(bias, co, 1, 1, 1)
    return result
