"""2-D convolution and max pooling over NCHW tensors, with PyTorch's semantics.

NOTE [ Convolution as one GEMM ]
``conv2d`` copies the input's patches into columns (``im2col``, a numba kernel; layout in
``memgrad/_kernels/conv.py``: a ``(C*KH*KW, N*OH*OW)`` matrix) and multiplies them by the
weight viewed as ``(CO, C*KH*KW)`` with BLAS, one GEMM per sample and group (a
``(C*KH*KW, OH*OW)`` slice of the columns, read in place), which writes the NCHW output
directly; the bias is added after. Its backward is two primitives, so that double backward
works through the op table:

* ``conv2d_input_grad(g, weight)``: ``weight^T @ g`` as columns, summed back into the input's
  shape (``col2im``). It is the transpose of the convolution, linear in each argument.
* ``conv2d_weight_grad(x, g)``: ``g @ columns(x)^T``, computed per sample as
  ``columns(x) @ g^T`` (``(C*KH*KW, OH*OW) @ (OH*OW, CO)``, both operands in place) and
  summed over the batch; the transposed product was 1.6 times faster on OpenBLAS.

For ``y = conv(x, w)`` the identities ``<conv(x, w), g> = <x, input_grad(g, w)> =
<w, weight_grad(x, g)>`` give each backward op's VJP in terms of the other two: the VJP of
``input_grad`` is ``(conv(gg, w), weight_grad(gg, g))`` and the VJP of ``weight_grad`` is
``(input_grad(g, gg), conv(x, gg))``.

Saved values: conv2d keeps its input and weight, never the columns. The columns are
``KH*KW`` times the input's bytes (9x for a 3x3 kernel, 19 MB per layer for the W3
benchmark's 16x32x32x32 input), while recomputing them in ``conv2d_weight_grad`` costs one
im2col pass (about 1 ms there, against about 3.5 ms for each of the layer's three GEMMs).

Scratch: columns and GEMM results live in per-thread buffers that are reused from call to
call (fresh columns would cost more in page faults than the im2col that fills them; see
DESIGN.md, house style 11). Results are always fresh arrays, never views of scratch. The
batch is processed in chunks of at most ``_CHUNK_BYTES`` of columns (one sample for W3),
which bounds the scratch and keeps a chunk's columns in the core's cache between the
im2col that writes them and the GEMMs that read them: on one thread the W3 step took
143 ms CPU with 1 MiB chunks, 169 ms with 4 MiB and 198 ms unchunked. The scratch is not
tensor storage, so ``mg.memory`` does not count it.

NOTE [ Row-shifted convolution ]
For a stride of 1 along the height (and groups 1) the columns are not built. ``im2row``
(memgrad/_kernels/conv.py) copies, for each channel c and kernel column kj, every row of the
padded input at that column's offsets: ``rows[c, kj, y, ox] = x_pad[c, y, ox*sw + kj*dw]``, a
``(C*KW, (H + 2*ph)*OW)`` matrix per sample. Kernel row ki's part of the columns is then the
window of its ``OH*OW`` columns that starts at ``ki*dh*OW``: a strided view (row stride
``(H + 2*ph)*OW``), which BLAS reads as it lies. The weight gradient is ``KH`` GEMMs
``rows_ki @ g^T`` per sample into its ``(C*KW, CO)`` blocks. The copying is ``1/KH`` of
im2col's. On the W3 shapes (one thread, CPU time, eight layers' inputs in turn, interleaved
with the im2col path forced): the input gradient took 0.87 times col2im's time, the weight
gradient the same (its three K=1024 products with a (C*KW, CO) output are slower than one
with K=288, which the saved copying makes up for), and the whole W3 step 0.80 times.

For at most ``_STACKED_MAX_CO`` output channels the weight gradient first copies each
sample's ``g`` transposed into a contiguous ``(OH*OW, CO)`` scratch: OpenBLAS packs a
transposed right operand of 32 columns slowly (on the W3 shapes a 96x1024x32 product took
110 against 89 microseconds, the copy about 20), and the weight gradient took 0.89 to 0.94
times as long with the copy (one thread, CPU time, interleaved); with 64 or 128 channels it
was a tie. (Stacking the kernel rows as the forward does, one (C*KW, (H + 2*ph)*OW) @
((H + 2*ph)*OW, KH*CO) product per sample of the rows and ``g`` copied into every kernel
row's window of a zero scratch, was slower: 0.98 times the window products.)

The forward multiplies every kernel row's weights at once with the whole rows: one GEMM per
sample, ``(KH*CO, C*KW) @ (C*KW, (H + 2*ph)*OW)`` into a scratch ``partial``, and
``row_sum`` (a numba kernel) adds kernel row ki's window of it, from column ``ki*dh*OW``,
into the NCHW output after the bias. The product has ``KH*CO`` rows where each kernel
row's own product would have ``CO``, which is what OpenBLAS needs for small ``CO``: on the
W3 shapes (one thread, CPU time, interleaved) the 96x96x1088 product ran at about 130
GFLOP/s where each 32x96x1024 window product ran at about 60, and the forward took 0.86 to
0.93 times the time of ``KH`` accumulating window products per sample. Those compute
``OH/(H + 2*ph)`` of the columns and need no ``partial``, and with more output channels
(OpenBLAS is then efficient at ``CO`` rows) or few rows (``C*KW``, a memory-bound product)
they are as fast or faster: 1.03 to 1.12 times for 128 and 256 channels on 16x16 and 8x8
inputs, 1.08 for 3 input and 64 output channels. So the stacked product is taken for at
most ``_STACKED_MAX_CO`` output channels and at least ``_STACKED_MIN_K`` rows, the window
products otherwise.

The input gradient of a stride-1 convolution (groups 1, padding at most the kernel's span
``d*(k - 1)``) is itself a stride-1 convolution, of ``g`` with the kernel flipped and its two
channel axes swapped, padded by ``d*(k - 1) - p``, so it takes the same path and needs no
col2im. Other strides and grouped convolutions use the columns.

NOTE [ Few output positions ]
The per-sample products have one column per output position of a sample: on small images
(8x8 and under, the last stages of an image classifier) they are thin, and OpenBLAS runs
thin products slowly; a 512-channel 3x3 layer on 8x8 images took twice PyTorch's time. For
at most ``_BATCHED_MAX_POSITIONS`` output positions a sample (and groups 1) the forward
instead builds the columns of a chunk of samples (``im2col``, at most
``_BATCHED_CHUNK_BYTES`` of them) and multiplies them, read transposed, by the weight
transposed: one ``(N*OH*OW, C*KH*KW) @ (C*KH*KW, CO)`` product per chunk, copied into the
NCHW output; the weight gradient multiplies ``g`` of the chunk, copied as ``(CO, N*OH*OW)``,
by the same columns transposed, the chunks' products added in order. The input gradient of
a stride-1 convolution is a forward (NOTE [ Row-shifted convolution ]) and takes the same
path. Against the per-sample paths (Intel model 167, 3x3, padding 1, 16 samples unless
marked; forward and weight gradient; medians of 5 calls):

    C -> CO,      size    fwd    wgrad
    64 -> 64,     8x8     0.46   0.71
    128 -> 128,   8x8     0.83   0.88
    256 -> 256,   8x8     0.82   0.69
    512 -> 512,   8x8     0.75   0.49
    256 -> 256,   4x4     0.49   0.36
    512 -> 512,   4x4     0.40   0.20
    128 -> 128,   8x8     1.05   1.05   (32 samples)
    128 -> 128,  16x16    1.23   1.17
    512 -> 512,  16x16    1.07   0.90

so the path is taken up to 64 positions (8x8); a 512-channel layer on 8x8 images, forward
and backward, went from 94 to 66 ms. The columns are ``KH*KW`` times the chunk's input
(18 MiB for that layer's 16 samples), scratch reused from call to call.

NOTE [ Winograd convolution ]
A 3x3 convolution of stride and dilation 1 and groups 1 can take Lavin and Gray's F(2x2, 3x3):
each 2x2 block of outputs is ``A^T [(G w G^T) * (B^T d B)] A`` for its 4x4 input window
``d`` (layout and kernels in memgrad/_kernels/winograd.py), so per sample the 16 positions
of the transformed tiles are 16 ``(CO, C) @ (C, T)`` products, ``T`` about ``OH*OW/4``: 2.25
times fewer multiply-adds than the direct product. The input gradient is a stride-1
convolution (NOTE [ Row-shifted convolution ]) and takes the same path; the weight gradient
is ``G^T [sum (A g A^T) * (B^T d B)] G``: per sample the input's and ``g``'s transforms and
16 ``(C, T) @ (T, CO)`` products, summed over the batch. The results agree with the direct
path to float32 rounding (on a W3 layer within 1e-5 of the largest value;
tests/ops/test_conv_ops.py), except that an infinite input can come out as NaN where the
direct sum gives an infinity (the transforms subtract it from itself).

The products run at about 1.5 times the stacked forward's speed per output, but the
transforms (per W3 sample about 45 microseconds for the input, 20 for the output and 40 for
``g``, against 25 for im2row) take much of that back, so the path pays only on some shapes.
Winograd time over the direct path's (one thread, CPU time, interleaved, float32 unless
marked; forward, input gradient, weight gradient):

    N,  C -> CO,   size     fwd   igrad  wgrad
    16, 32 -> 32,  32x32    0.72  0.72   0.78   (W3)
    16, 32 -> 32,  32x32    0.68  0.76   0.76   (float64)
    16, 16 -> 16,  32x32    0.79  0.87   0.77
    16, 16 -> 64,  32x32    0.78  0.76   0.87
    16, 64 -> 64,  16x16    0.69  0.74   1.07
    16, 64 -> 16,  16x16    0.80  1.00   1.07
     4, 32 -> 32,  64x64    0.86  0.98   1.17
     4, 32 -> 32,  64x64    1.08  1.06   0.93   (float64)
    16, 128 -> 128, 8x8     1.03  1.11   1.67
     8, 256 -> 256, 8x8     1.91  1.75   1.78

Thin products lose (few tiles: small images; and for the weight gradient, whose products
are (C, T) @ (T, CO), anything under 256 tiles), and so do transformed tiles that no longer
stay in the core's cache (64x64 in float64; the weight gradient's two transforms from about
2 MB). Those figures are from an older machine, before the loops ran as jobs (NOTE
[ Winograd convolution as jobs ]). On Intel model 167, with the jobs on two threads and
again on one (float32 unless marked; forward, input gradient, weight gradient; the medians
of 11 alternated calls' ratios):

    N,  C -> CO,   size     two threads         one thread
    16, 64 -> 64,   32x32   0.67  0.68  0.79
    16, 128 -> 128, 16x16   0.75  0.74  0.96    0.75  0.76  0.99
     8, 128 -> 128, 32x32   0.68  0.64  0.82    0.65  0.65  0.80
    16, 128 -> 128,  8x8    0.90  0.91  1.33
     8, 192 -> 192, 16x16   0.89  0.88  1.12    0.81  0.85  1.07
     8, 256 -> 256, 16x16   0.91  0.90  1.08    0.88  0.88  1.02
    16, 256 -> 256,  8x8    1.31  1.20  1.49
     4, 64 -> 64,   64x64   0.63  0.64  0.82    0.68  0.69  0.91   (4.1 MiB of tiles)
     4, 64 -> 64,   64x64   0.96  0.96  0.96                       (float64)
     2, 64 -> 64,   90x90   0.88  0.91  1.04    0.87  0.85  0.99   (8.1 MiB)
     2, 64 -> 64, 128x128   0.87  0.89  1.07                       (16.3 MiB)
     1, 64 -> 64, 180x180   1.16  1.13  1.15                       (32 MiB)

So the forward (and so the input gradient) takes the path for 16 to 256 channels in and out,
the weight gradient for 16 to 128 (``_WINOGRAD_CHANNELS``), at least 64 tiles per sample
(256 for the weight gradient, ``_WINOGRAD_MIN_TILES``) and at most 8 MiB (6 MiB) of
transformed tiles per sample (``_WINOGRAD_MAX_BYTES``); the direct paths otherwise. On the
W3 step (one thread, CPU time, interleaved with PyTorch's and with the
direct paths in one process, load average 7 on 2 cores, so ratios only) it took the step from
1.35-1.38 to 1.02-1.05 times PyTorch's time (0.74-0.78 of the direct paths'); a W3 layer's
forward 1.07, input gradient 0.56 and weight gradient 1.07 times PyTorch's (oneDNN's;
``torch.nn.grad`` for the gradients).

NOTE [ Bias gradient with the weight's ]
The bias gradient of conv2d is ``g`` summed over all but its channels: a pass over ``g``
(2 MiB a W3 layer) of its own, some 3% of W3's step. On the Winograd path the weight
gradient's transform copies every sample's ``g`` into the parities of its tiles anyway, so
``winograd_grad`` adds each channel's sum of that copy (float64, in SIMD lanes) into the bias
gradient's sums on the way. conv2d's VJP then asks ``conv2d_weight_grad`` for both (its
``bias=True``): one flat array, the weight gradient's elements and then the bias gradient's,
which the VJP hands on as two views (the weight's is copied once into ``.grad``, at most
64x64x3x3 elements on this path). The VJP of ``conv2d_weight_grad`` splits its incoming
gradient the same way, so double backward works. Off the Winograd path, whose weight
gradient can be larger than ``g``, the bias gradient stays a ``sum`` of its own. The sums
are float64, rounded once: at least as close as NumPy's float32 pairwise sum. One W3
layer's weight and bias gradients, 200 alternated calls on fresh arrays (Intel model 207):
0.947 and 0.948 the time of the weight gradient and the sum one after the other (medians of
the paired ratios; 1.80 against 1.89 ms).

NOTE [ Serial kernels ]
The numba kernels run on the calling thread only. Compiled with ``parallel=True`` they made
the W3 step three times slower (590 ms against 180 ms on a busy 2-core machine): numba's OpenMP
workers spin for milliseconds after each parallel region, taking the cores from OpenBLAS's
threads in the GEMM that follows. (And a forked child, a data-loader worker, that starts a
parallel region after its parent did is killed by GNU OpenMP.) Splitting each call between
the calling thread and a helper thread was slower too (141 ms against 134 ms): the kernels
are short next to the GEMMs, which already keep both cores busy.

NOTE [ Batch-parallel convolution ]
The kernels stay serial; the three convolution primitives run in parallel over the batch
instead (``in_parts``, NOTE [ Batch parts ] in memgrad/ops/parts.py): a part is its samples'
im2col, GEMMs and col2im in turn, so the serial kernels run on every core instead of leaving
the others idle, and there is one join per op instead of OpenBLAS's barriers inside every
GEMM. The weight gradient sums its parts in their order, so results do not depend on
timing. On one thread the kernels take about a fifth of W3's convolution time, which the
split spreads over both cores. And it holds up under load: the W3 step on a 2-core machine
running 7 to 16 other jobs (medians of 5, interleaved with PyTorch's) took 0.54 to 1.03 s,
against 6.2 to 19.7 s with 3-sample GEMMs on OpenBLAS's two threads and serial kernels
(PyTorch: 1.6 to 4.4 s): OpenBLAS's threads wait for each other at every GEMM's barriers,
and a preempted one stalls the other.

NOTE [ Winograd convolution as jobs ]
A part of ``in_parts`` is Python: the helper takes the GIL to run it and gives it back at
each NumPy or numba call, so the two threads of a Winograd convolution (three calls a
sample: the input transform, the 16 products, the output transform) wait for each other's
GIL at every call, and the helper is handed its part through Python (NOTE [ Kernels as
jobs ] in memgrad/ops/parts.py: some 50 us). On the W3 shapes one part's loop took about
900 us alone and about as long beside the other, yet the op 1.5 ms in parts against 2.1
on one thread. Where the hand-off is set up, the loops over the batch run as
``WINOGRAD_JOB`` (memgrad/_kernels/winograd_jobs.py) instead, through ``batch_as_jobs``: each
part is the same transforms (the same compiled functions) and one ``cblas_?gemm`` call per
position with the arguments NumPy's matmul passes, on its samples, without the GIL, each
part with scratch of its own; the weight gradient's parts return their sums, which are
added in part order as before. The values are bit for bit those of the Python parts
(tests/ops/test_handoff.py). On the W3 shapes (Intel model 167, medians of 200 alternated
calls) the forward took 1.22 against 1.68 ms and the weight gradient 1.62 against 2.10;
the W3 step went from 1.39 to 1.12-1.17 times PyTorch's. Without the hand-off (another
platform, ``NUMBA_DISABLE_JIT=1``) the Python parts run.

Max pooling keeps its argmax, not its input: ``max_pool2d_indices`` finds each window's
maximum position in one pass of the pooling kernel (not differentiable), and the primitive
``max_pool2d(x, indices)`` gathers the input there and saves ``indices`` through the
saved-value path (the version check included), so backward scatters the gradient to the
argmax without a second pass over the windows (``max_pool2d_backward``, whose own VJP
gathers at the same positions). The int64 argmax is twice the pooled output's float32
bytes; the input, no longer kept by the pooling, is usually kept anyway by the op that
produced it (``relu`` keeps its output).
"""

from __future__ import annotations

import functools
import math
import threading

import numpy as np

from memgrad.errors import ShapeError
from memgrad.ops.elementwise import where
from memgrad.ops.movement import getitem, squeeze, unsqueeze
from memgrad.ops.parts import Gemm, batch_as_jobs, gemm_address, in_parts
from memgrad.ops.reduce import sum as _sum
from memgrad.ops.registry import primitive
from memgrad.tensor import Tensor

__all__ = [
    "conv1d",
    "conv2d",
    "conv_transpose2d",
    "conv2d_input_grad",
    "conv2d_weight_grad",
    "max_pool1d",
    "max_pool2d",
    "max_pool2d_indices",
    "unfold",
    "fold",
    "max_pool2d_backward",
    "avg_pool2d",
    "adaptive_avg_pool2d",
]

# columns per chunk of the batch (see NOTE [ Convolution as one GEMM ])
_CHUNK_BYTES = 1 << 20

# conv2d of at most this many output positions a sample runs one product per chunk of
# samples, of at most this many bytes of columns (NOTE [ Few output positions ])
_BATCHED_MAX_POSITIONS = 64
_BATCHED_CHUNK_BYTES = 1 << 25

# the row-shifted forward stacks its kernel rows' products for at most this many output
# channels and at least this many rows of im2row, and the weight gradient transposes g for
# at most this many output channels (NOTE [ Row-shifted convolution ])
_STACKED_MAX_CO = 32
_STACKED_MIN_K = 64

# the Winograd path is taken for input and output channels in this range, at least this
# many tiles per sample and at most this many bytes of transformed tiles per sample (each:
# the forward's, then the weight gradient's; NOTE [ Winograd convolution ])
_WINOGRAD_CHANNELS = ((16, 256), (16, 128))
_WINOGRAD_MIN_TILES = (64, 256)
_WINOGRAD_MAX_BYTES = (8 << 20, 6 << 20)


class WINOGRAD:
    """Whether conv2d may take the Winograd path (the tests and benchmarks compare it with the
    direct path by turning it off)."""

    enabled = True


_scratch = threading.local()


def _buffer(slot: str, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """A reusable per-thread scratch array of ``shape``; its contents are undefined."""
    size = math.prod(shape)
    pool = _scratch.__dict__.setdefault("pool", {})
    key = (slot, dtype)
    buf = pool.get(key)
    if buf is None or buf.size < size:
        buf = pool[key] = np.empty(size, dtype)
    return buf[:size].reshape(shape)


def _out_size(size: int, k: int, s: int, p: int, d: int) -> int:
    return (size + 2 * p - d * (k - 1) - 1) // s + 1


def _chunks(lo: int, hi: int, bytes_per_sample: int, limit: int | None = None):
    step = max(1, (_CHUNK_BYTES if limit is None else limit) // max(bytes_per_sample, 1))
    for n0 in range(lo, hi, step):
        yield n0, min(hi, n0 + step)


def _columns(x: np.ndarray, kh: int, kw: int, oh: int, ow: int, stride, padding, dilation):
    from memgrad._kernels.conv import im2col

    n, c = x.shape[0], x.shape[1]
    col = _buffer("col", (c, kh, kw, n, oh, ow), x.dtype)
    return im2col(x, col, *stride, *padding, *dilation)


def _per_sample(col: np.ndarray, groups: int) -> np.ndarray:
    """Columns (C, KH, KW, m, OH, OW) viewed as (m, groups, C/groups*KH*KW, OH*OW): one GEMM
    operand per sample and group, without a copy."""
    c, kh, kw, m, oh, ow = col.shape
    return col.reshape(groups, c // groups * kh * kw, m, oh * ow).transpose(2, 0, 1, 3)


def _row_shifted(stride, groups: int) -> bool:
    """Whether conv2d takes the row-shifted path (NOTE [ Row-shifted convolution ])."""
    return stride[0] == 1 and groups == 1


def _rows(x: np.ndarray, kw: int, ow: int, sw: int, padding, dw: int) -> np.ndarray:
    """``im2row`` of ``x`` into scratch, viewed as (N, C*KW, (H + 2*ph)*OW): row (c, kj) of
    each sample holds every padded input row's values at kernel column kj."""
    from memgrad._kernels.conv import im2row

    n, c, h, _ = x.shape
    hp = h + 2 * padding[0]
    rows = _buffer("rows", (n, c, kw, hp, ow), x.dtype)
    return im2row(x, rows, sw, padding[0], padding[1], dw).reshape(n, c * kw, hp * ow)


# ---------------------------------------------------------------------------- conv2d


# kind="conv": a GEMM over im2col columns, which checkpoint policies treat like a matmul
@primitive("conv2d", saves={"x": (1,), "weight": (0,)}, kind="conv")
def _conv2d(x, weight, bias, *, stride, padding, dilation, groups):
    return _forward(x, weight, bias, stride, padding, dilation, groups)


def _forward(x, weight, bias, stride, padding, dilation, groups) -> np.ndarray:
    x = np.ascontiguousarray(x)
    if _winograd(x.shape, weight.shape, stride, padding, dilation, groups, x.itemsize):
        return _forward_winograd(x, weight, bias, padding)
    n, c, h, w = x.shape
    co, _, kh, kw = weight.shape
    oh = _out_size(h, kh, stride[0], padding[0], dilation[0])
    ow = _out_size(w, kw, stride[1], padding[1], dilation[1])
    if _batched(oh, ow, groups):
        return _forward_batched(x, weight, bias, stride, padding, dilation, oh, ow)
    if _row_shifted(stride, groups):
        return _forward_rows(x, weight, bias, padding, dilation, stride[1])
    length = oh * ow
    kg = c // groups * kh * kw
    wmat = np.ascontiguousarray(weight).reshape(groups, co // groups, kg)
    out = np.empty((n, co, oh, ow), dtype=x.dtype)
    rows = out.reshape(n, groups, co // groups, length)

    def work(lo: int, hi: int) -> None:
        for n0, n1 in _chunks(lo, hi, c * kh * kw * length * x.itemsize):
            col = _columns(x[n0:n1], kh, kw, oh, ow, stride, padding, dilation)
            np.matmul(wmat, _per_sample(col, groups), out=rows[n0:n1])
        if bias is not None:
            out[lo:hi] += bias[:, None, None]

    in_parts(n, n * co * kg * length, work)
    return out


def _batched(oh: int, ow: int, groups: int) -> bool:
    """Whether conv2d and its weight gradient take one product per chunk of samples (NOTE
    [ Few output positions ])."""
    return groups == 1 and 0 < oh * ow <= _BATCHED_MAX_POSITIONS


def _forward_batched(x, weight, bias, stride, padding, dilation, oh, ow) -> np.ndarray:
    """conv2d of groups 1 as one product per chunk of samples: the chunk's columns, read
    transposed, times the weight transposed ((N*OH*OW, C*KH*KW) @ (C*KH*KW, CO)), then
    copied into the NCHW output (NOTE [ Few output positions ])."""
    n = x.shape[0]
    co = weight.shape[0]
    kh, kw = weight.shape[2:]
    length = oh * ow
    wt = np.ascontiguousarray(weight).reshape(co, -1).T  # (K, CO), BLAS reads it transposed
    k = wt.shape[0]
    out = np.empty((n, co, oh, ow), dtype=x.dtype)
    flat = out.reshape(n, co, length)
    for n0, n1 in _chunks(0, n, k * length * x.itemsize, _BATCHED_CHUNK_BYTES):
        col = _columns(x[n0:n1], kh, kw, oh, ow, stride, padding, dilation)
        product = _buffer("batched", ((n1 - n0) * length, co), x.dtype)
        np.matmul(col.reshape(k, -1).T, wt, out=product)
        flat[n0:n1] = product.reshape(n1 - n0, length, co).transpose(0, 2, 1)
    if bias is not None:
        out += bias[:, None, None]
    return out


def _weight_grad_batched(x, g, weight_shape, stride, padding, dilation) -> np.ndarray:
    """conv2d_weight_grad of groups 1 as one product per chunk of samples: ``g`` of the
    chunk as (CO, N*OH*OW) times its columns transposed, the chunks' products added in
    order (NOTE [ Few output positions ])."""
    n = x.shape[0]
    co, c, kh, kw = weight_shape
    oh, ow = g.shape[2], g.shape[3]
    length = oh * ow
    k = c * kh * kw
    flat = g.reshape(n, co, length)
    gw = None
    for n0, n1 in _chunks(0, n, k * length * x.itemsize, _BATCHED_CHUNK_BYTES):
        col = _columns(x[n0:n1], kh, kw, oh, ow, stride, padding, dilation)
        rows = _buffer("batched_g", (co, n1 - n0, length), g.dtype)
        rows[...] = flat[n0:n1].transpose(1, 0, 2)
        part = np.matmul(rows.reshape(co, -1), col.reshape(k, -1).T)
        gw = part if gw is None else gw + part
    return gw.reshape(weight_shape)


def _winograd(x_shape, w_shape, stride, padding, dilation, groups, itemsize: int,
              weight_grad: bool = False) -> bool:
    """Whether conv2d (or its weight gradient) takes the Winograd path (NOTE [ Winograd
    convolution ])."""
    if not (WINOGRAD.enabled and tuple(w_shape[2:]) == (3, 3) and tuple(stride) == (1, 1)
            and tuple(dilation) == (1, 1) and groups == 1):
        return False
    co, c = w_shape[:2]
    lo, hi = _WINOGRAD_CHANNELS[weight_grad]
    if min(c, co) < lo or max(c, co) > hi:
        return False
    per = _winograd_tiles(x_shape[2] + 2 * padding[0] - 2, x_shape[3] + 2 * padding[1] - 2)[2]
    return (per >= _WINOGRAD_MIN_TILES[weight_grad]
            and 16 * max(c, co) * per * itemsize <= _WINOGRAD_MAX_BYTES[weight_grad])


def _winograd_tiles(oh: int, ow: int) -> tuple[int, int, int]:
    """Tile rows, tiles per row and entries per channel of the Winograd layout."""
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    return th, tw, th * (tw + 1)


def _winograd_weight(weight: np.ndarray) -> np.ndarray:
    """``G w G^T`` of every (CO, C) kernel, as (16, CO, C)."""
    from memgrad._kernels.winograd import G

    co, c = weight.shape[:2]
    g = G.astype(weight.dtype)
    # two 2-D products (einsum, or matmul broadcast over the kernels, took 10 times as long)
    t = (np.ascontiguousarray(weight).reshape(-1, 3) @ g.T).reshape(co, c, 3, 4)
    u = (g @ t.transpose(2, 0, 1, 3).reshape(3, -1)).reshape(4, co, c, 4)  # [i, o, c, j]
    return np.ascontiguousarray(u.transpose(0, 3, 1, 2)).reshape(16, co, c)


def _winograd_scratch(slot: str, channels: int, per: int, dtype) -> np.ndarray:
    """A (16, channels*per + 16) scratch: the 16 positions' blocks are then not a multiple
    of 4 KiB apart, which would make their writes evict each other from L1."""
    return _buffer(slot, (16, channels * per + 16), dtype)


def _forward_winograd(x, weight, bias, padding) -> np.ndarray:
    """conv2d of a 3x3 kernel, stride and dilation 1, groups 1, by Winograd F(2x2, 3x3):
    per sample the input transform, one (CO, C) @ (C, T) product per position of the 4x4
    tiles and the output transform (NOTE [ Winograd convolution ])."""
    from memgrad._kernels.winograd import winograd_input, winograd_output

    n, c, h, w = x.shape
    co = weight.shape[0]
    oh, ow = h + 2 * padding[0] - 2, w + 2 * padding[1] - 2
    th, tw, per = _winograd_tiles(oh, ow)
    u = _winograd_weight(np.asarray(weight, x.dtype))
    b = np.zeros(co, x.dtype) if bias is None else np.ascontiguousarray(bias, x.dtype)
    out = np.empty((n, co, oh, ow), dtype=x.dtype)
    macs = n * co * c * 16 * per
    if _winograd_as_jobs(True, x, u, b, out, padding, macs) is not None:
        return out

    def work(lo: int, hi: int) -> None:
        v = _winograd_scratch("wino_v", c, per, x.dtype)
        m = _winograd_scratch("wino_m", co, per, x.dtype)
        vs = v[:, : c * per].reshape(16, c, per)
        ms = m[:, : co * per].reshape(16, co, per)
        for i in range(lo, hi):
            winograd_input(x[i], v, padding[0], padding[1], th, tw)
            np.matmul(u, vs, out=ms)
            winograd_output(m, b, out[i])

    in_parts(n, macs, work)
    return out


@functools.cache
def _winograd_jobs():
    from memgrad._kernels import winograd_jobs

    return winograd_jobs


def _winograd_as_jobs(forward: bool, x: np.ndarray, y: np.ndarray, z: np.ndarray,
                      out: np.ndarray | None, padding, macs: int) -> list | None:
    """The Winograd forward (``y`` the transformed weights ``u``, ``z`` the bias, into
    ``out``) or weight gradient (``y`` is ``g``, ``z`` the float64 ``sums`` or empty) as
    jobs on the helpers (NOTE [ Winograd convolution as jobs ]); for the weight gradient
    each part's (16, C, CO) products and (CO,) float64 sums (added into nothing: the caller
    adds them up in part order), for the forward an empty list. None, with nothing
    written, where the jobs do not run (then the Python parts do): as ``batch_as_jobs``,
    or arrays the job cannot take as they lie (checked here: the job reads and writes
    where the addresses point)."""
    dtype = x.dtype
    n, c, h, w = x.shape
    oh, ow = h + 2 * padding[0] - 2, w + 2 * padding[1] - 2
    co = y.shape[1]
    gemm = gemm_address(dtype)
    shapes = ((16, co, c), (co,), (n, co, oh, ow)) if forward else ((n, co, oh, ow),)
    arrays = (y, z, out) if forward else (y,)
    if gemm is None or not x.flags.c_contiguous or any(
            a.dtype != dtype or a.shape != s or not a.flags.c_contiguous
            for a, s in zip(arrays, shapes)) or (forward and not out.flags.writeable) \
            or (not forward and (z.dtype != np.float64 or z.shape not in ((0,), (co,)))):
        return None
    th, tw, per = _winograd_tiles(oh, ow)
    parts: list = []

    def words_of(ends: list) -> np.ndarray:
        from memgrad._kernels.winograd import transform_terms

        jobs = _winograd_jobs()
        offsets, signs = transform_terms("input", tw + 1, (th + 2) * (tw + 1), dtype)
        grad_offsets, grad_signs = transform_terms("grad", tw + 1, th * (tw + 1), dtype)
        rows = np.zeros((len(ends) - 1, jobs.WINOGRAD_WORDS), np.int64)
        for j, row in enumerate(rows):
            v = _winograd_scratch(f"wino_v{j}", c, per, dtype)
            m = _winograd_scratch(f"wino_m{j}", co, per, dtype)
            if forward:
                prod, target, sums = v, out, z
            else:
                prod = _buffer(f"wino_part{j}", (16, c, co), dtype)
                target, sums = np.zeros((16, c, co), dtype), np.zeros(z.shape)
                parts.append((target, sums))
            row[jobs.W_KIND] = jobs.FORWARD if forward else jobs.WEIGHT_GRAD
            row[jobs.W_DOUBLE] = dtype == np.float64
            row[jobs.W_LO], row[jobs.W_HI] = ends[j], ends[j + 1]
            row[jobs.W_C], row[jobs.W_CO], row[jobs.W_H], row[jobs.W_W] = c, co, h, w
            row[jobs.W_OH], row[jobs.W_OW] = oh, ow
            row[jobs.W_PH], row[jobs.W_PW] = padding
            row[jobs.W_GEMM], row[jobs.W_SUMS] = gemm, sums.size
            row[jobs.W_LV], row[jobs.W_LM] = v.shape[1], m.shape[1]
            for word, a in ((jobs.W_X, x), (jobs.W_Y, y), (jobs.W_BIAS, sums),
                            (jobs.W_OUT, target), (jobs.W_V, v), (jobs.W_M, m),
                            (jobs.W_PROD, prod), (jobs.W_OFFSETS, offsets),
                            (jobs.W_SIGNS, signs), (jobs.W_GRAD_OFFSETS, grad_offsets),
                            (jobs.W_GRAD_SIGNS, grad_signs)):
                row[word] = a.ctypes.data
        return rows

    if not batch_as_jobs(n, macs, lambda: _winograd_jobs().WINOGRAD_JOB, words_of):
        return None
    return parts


def _forward_rows(x, weight, bias, padding, dilation, sw) -> np.ndarray:
    """conv2d of stride 1 along the height, groups 1 (NOTE [ Row-shifted convolution ])."""
    co, c, _, kw = weight.shape
    if co <= _STACKED_MAX_CO and c * kw >= _STACKED_MIN_K:
        return _forward_stacked(x, weight, bias, padding, dilation, sw)
    return _forward_windows(x, weight, bias, padding, dilation, sw)


def _forward_windows(x, weight, bias, padding, dilation, sw) -> np.ndarray:
    """The row-shifted forward as ``KH`` accumulating GEMMs per sample, one per kernel row's
    window of the rows."""
    n, c, h, w = x.shape
    co, _, kh, kw = weight.shape
    oh = _out_size(h, kh, 1, padding[0], dilation[0])
    ow = _out_size(w, kw, sw, padding[1], dilation[1])
    length = oh * ow
    # (KH, CO, C*KW): kernel row ki's weights, columns in the rows' (c, kj) order
    wk = np.ascontiguousarray(weight.transpose(2, 0, 1, 3)).reshape(kh, co, c * kw)
    out = np.empty((n, co, oh, ow), dtype=x.dtype)
    flat = out.reshape(n, co, length)
    filled = None if bias is None else np.broadcast_to(bias[:, None], (co, length))

    shift = dilation[0] * ow * x.itemsize  # bytes from one kernel row's window to the next

    def work(lo: int, hi: int) -> None:
        product = None
        for n0, n1 in _chunks(lo, hi, c * kw * (h + 2 * padding[0]) * ow * x.itemsize):
            rows = _rows(x[n0:n1], kw, ow, sw, padding, dilation[1])
            # one layout for every chunk: the scratch is the first (largest) chunk's
            product = product or Gemm(wk[0], rows[0, :, :length], flat[lo])
            base = (n0 - lo) * flat.strides[0]
            for i in range(n1 - n0):
                beta = 0.0
                if filled is not None:
                    flat[n0 + i] = filled  # the bias, added in by the first GEMM
                    beta = 1.0
                for ki in range(kh):
                    product(ki * wk.strides[0], i * rows.strides[0] + ki * shift,
                            base + i * flat.strides[0], beta)
                    beta = 1.0

    in_parts(n, n * co * c * kh * kw * length, work)
    return out


def _forward_stacked(x, weight, bias, padding, dilation, sw) -> np.ndarray:
    """The row-shifted forward as one GEMM per sample of every kernel row's weights with the
    whole rows, each kernel row's window of the product then summed by ``row_sum``."""
    from memgrad._kernels.conv import row_sum

    n, c, h, w = x.shape
    co, _, kh, kw = weight.shape
    hp = h + 2 * padding[0]
    oh = _out_size(h, kh, 1, padding[0], dilation[0])
    ow = _out_size(w, kw, sw, padding[1], dilation[1])
    length = oh * ow
    # (KH*CO, C*KW): every kernel row's weights stacked, columns in the rows' (c, kj) order
    wk = np.ascontiguousarray(weight.transpose(2, 0, 1, 3)).reshape(kh * co, c * kw)
    out = np.empty((n, co, oh, ow), dtype=x.dtype)
    flat = out.reshape(n, co, length)
    b = np.zeros(co, x.dtype) if bias is None else np.ascontiguousarray(bias, x.dtype)

    def work(lo: int, hi: int) -> None:
        partial = _buffer("partial", (kh, co, hp * ow), x.dtype)
        product = None
        for n0, n1 in _chunks(lo, hi, c * kw * hp * ow * x.itemsize):
            rows = _rows(x[n0:n1], kw, ow, sw, padding, dilation[1])
            # one layout for every chunk: the scratch is the first (largest) chunk's
            product = product or Gemm(wk, rows[0], partial.reshape(kh * co, hp * ow))
            for i in range(n1 - n0):
                product(0, i * rows.strides[0], 0, 0.0)
                row_sum(partial, b, flat[n0 + i], dilation[0] * ow)

    in_parts(n, n * co * c * kh * kw * length, work)
    return out


@_conv2d.vjp
def _(g, out, needs, x, weight, bias, stride, padding, dilation, groups):
    params = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    gx = conv2d_input_grad(g, weight, input_shape=x.shape, **params) if needs[0] else None
    if needs[1] and needs[2] and _winograd(x.shape, weight.shape, stride, padding, dilation,
                                           groups, x.dtype.itemsize, weight_grad=True):
        # the weight and bias gradients of one op (NOTE [ Bias gradient with the weight's ])
        both = conv2d_weight_grad(x, g, weight_shape=weight.shape, bias=True, **params)
        size = math.prod(weight.shape)
        return gx, both[:size].reshape(weight.shape), both[size:]
    gw = conv2d_weight_grad(x, g, weight_shape=weight.shape, **params) if needs[1] else None
    gb = _sum(g, dim=(0, 2, 3)) if needs[2] else None
    return gx, gw, gb


@primitive("conv2d_input_grad", saves={"g": (1,), "weight": (0,)}, kind="conv")
def conv2d_input_grad(g, weight, *, input_shape, stride, padding, dilation, groups):
    """The gradient of ``conv2d`` with respect to its input (a transposed convolution):
    ``weight^T @ g`` as columns, summed back into ``input_shape`` by col2im.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.conv import conv2d_input_grad
        >>> g, w = mg.ones(1, 1, 2, 2), mg.ones(1, 1, 2, 2)
        >>> conv2d_input_grad(g, w, input_shape=(1, 1, 3, 3), stride=(1, 1), padding=(0, 0),
        ...                   dilation=(1, 1), groups=1)
        tensor([[[[1., 2., 1.],
                  [2., 4., 2.],
                  [1., 2., 1.]]]])
    """
    from memgrad._kernels.conv import col2im

    n, c, _, _ = input_shape
    co, _, kh, kw = weight.shape
    oh, ow = g.shape[2], g.shape[3]
    flipped = _flipped_padding(input_shape, g.shape, weight.shape, stride, padding, dilation,
                               groups)
    if flipped is not None:
        # the gradient of a stride-1 convolution is a stride-1 convolution of g with the
        # kernel flipped and its channels swapped (NOTE [ Row-shifted convolution ])
        wf = np.ascontiguousarray(weight[:, :, ::-1, ::-1].transpose(1, 0, 2, 3))
        return _forward(g, wf, None, (1, 1), flipped, dilation, 1)
    kg = c // groups * kh * kw
    wt = np.ascontiguousarray(weight.reshape(groups, co // groups, kg).transpose(0, 2, 1))
    rows = np.ascontiguousarray(g).reshape(n, groups, co // groups, oh * ow)
    gx = np.empty(input_shape, dtype=g.dtype)

    def work(lo: int, hi: int) -> None:
        for n0, n1 in _chunks(lo, hi, c * kh * kw * oh * ow * g.itemsize):
            col = _buffer("col", (c, kh, kw, n1 - n0, oh, ow), g.dtype)
            np.matmul(wt, rows[n0:n1], out=_per_sample(col, groups))
            col2im(col, gx[n0:n1], *stride, *padding, *dilation)

    in_parts(n, n * co * kg * oh * ow, work)
    return gx


@conv2d_input_grad.vjp
def _(gg, out, needs, g, weight, input_shape, stride, padding, dilation, groups):
    params = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    d_g = _conv2d(gg, weight, None, **params) if needs[0] else None
    d_w = conv2d_weight_grad(gg, g, weight_shape=weight.shape, **params) if needs[1] else None
    return d_g, d_w


@primitive("conv2d_weight_grad", saves={"x": (1,), "g": (0,)}, kind="conv")
def conv2d_weight_grad(x, g, *, weight_shape, stride, padding, dilation, groups, bias=False):
    """The gradient of ``conv2d`` with respect to its weight: ``g @ columns(x)^T``, with the
    columns recomputed from ``x`` (see NOTE [ Convolution as one GEMM ]). With
    ``bias=True``, the bias gradient too (``g`` summed over all but its channels): one flat
    array, the weight gradient's elements, then the bias gradient's (NOTE [ Bias gradient
    with the weight's ]).

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.conv import conv2d_weight_grad
        >>> x, g = mg.arange(9.0).reshape(1, 1, 3, 3), mg.ones(1, 1, 2, 2)
        >>> conv2d_weight_grad(x, g, weight_shape=(1, 1, 2, 2), stride=(1, 1), padding=(0, 0),
        ...                    dilation=(1, 1), groups=1)
        tensor([[[[ 8., 12.],
                  [20., 24.]]]])
    """
    sums = np.zeros(weight_shape[0] if bias else 0)  # float64: the bias gradient's sums
    dw = _weight_grad(np.ascontiguousarray(x), g, weight_shape, stride, padding, dilation,
                      groups, sums)
    return _with_bias(dw, sums) if bias else dw


def _weight_grad(x, g, weight_shape, stride, padding, dilation, groups, sums) -> np.ndarray:
    """conv2d_weight_grad's weight gradient, and ``g``'s channel sums added into ``sums``
    unless it is empty."""
    if _winograd(x.shape, weight_shape, stride, padding, dilation, groups, x.itemsize,
                 weight_grad=True):
        return _weight_grad_winograd(x, np.ascontiguousarray(g), weight_shape, padding, sums)
    if sums.size:
        sums += np.sum(g, axis=(0, 2, 3), dtype=np.float64)
    if _batched(g.shape[2], g.shape[3], groups):
        return _weight_grad_batched(x, g, weight_shape, stride, padding, dilation)
    if _row_shifted(stride, groups):
        return _weight_grad_rows(x, np.ascontiguousarray(g), weight_shape, padding, dilation,
                                 stride[1])
    n, c, _, _ = x.shape
    co, _, kh, kw = weight_shape
    oh, ow = g.shape[2], g.shape[3]
    kg = c // groups * kh * kw
    # per sample and group, columns @ g^T: (KG, L) @ (L, CO/groups), both operands as they lie
    rows_t = np.ascontiguousarray(g).reshape(n, groups, co // groups, oh * ow).transpose(0, 1, 3, 2)

    def work(lo: int, hi: int) -> np.ndarray:
        gw = np.zeros((groups, kg, co // groups), dtype=g.dtype)
        for n0, n1 in _chunks(lo, hi, c * kh * kw * oh * ow * x.itemsize):
            col = _columns(x[n0:n1], kh, kw, oh, ow, stride, padding, dilation)
            part = _buffer("part", (n1 - n0, groups, kg, co // groups), g.dtype)
            np.matmul(_per_sample(col, groups), rows_t[n0:n1], out=part)
            gw += part.sum(axis=0) if n1 - n0 > 1 else part[0]
        return gw

    gw, *rest = in_parts(n, n * co * kg * oh * ow, work)
    for other in rest:
        gw += other
    return np.ascontiguousarray(gw.transpose(0, 2, 1)).reshape(weight_shape)


def _with_bias(dw: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """The weight gradient's elements, then the bias gradient (``sums`` rounded to its
    dtype), in one flat array."""
    out = np.empty(dw.size + sums.size, dw.dtype)
    out[: dw.size] = dw.reshape(-1)
    out[dw.size :] = sums
    return out


def _weight_grad_rows(x, g, weight_shape, padding, dilation, sw) -> np.ndarray:
    """conv2d_weight_grad of stride 1 along the height, groups 1: per sample and kernel row
    ki, ``rows_ki @ g^T`` ((C*KW, OH*OW) @ (OH*OW, CO)) added into that row's (C*KW, CO)
    block (NOTE [ Row-shifted convolution ]). For few output channels ``g^T`` is each
    sample's ``g`` transposed into scratch first, else ``g`` read as it lies."""
    n, c, h, _ = x.shape
    co, _, kh, kw = weight_shape
    oh, ow = g.shape[2], g.shape[3]
    length = oh * ow
    flat = g.reshape(n, co, length)
    transposed = co <= _STACKED_MAX_CO

    shift = dilation[0] * ow * x.itemsize  # bytes from one kernel row's window to the next

    def work(lo: int, hi: int) -> np.ndarray:
        gw = np.zeros((kh, c * kw, co), dtype=g.dtype)
        gt = _buffer("gt", (length, co), g.dtype) if transposed else flat[lo].T
        product = None
        for n0, n1 in _chunks(lo, hi, c * kw * (h + 2 * padding[0]) * ow * x.itemsize):
            rows = _rows(x[n0:n1], kw, ow, sw, padding, dilation[1])
            # one layout for every chunk: the scratch is the first (largest) chunk's
            product = product or Gemm(rows[0, :, :length], gt, gw[0])
            base = (n0 - lo) * flat.strides[0]
            for i in range(n1 - n0):
                if transposed:
                    np.copyto(gt, flat[n0 + i].T)
                db = 0 if transposed else base + i * flat.strides[0]
                for ki in range(kh):
                    product(i * rows.strides[0] + ki * shift, db, ki * gw.strides[0], 1.0)
        return gw

    gw, *rest = in_parts(n, n * co * c * kh * kw * length, work)
    for other in rest:
        gw += other
    # (KH, C, KW, CO) -> (CO, C, KH, KW)
    return np.ascontiguousarray(gw.reshape(kh, c, kw, co).transpose(3, 1, 0, 2))


def _weight_grad_winograd(x, g, weight_shape, padding, sums) -> np.ndarray:
    """conv2d_weight_grad of a 3x3 kernel, stride and dilation 1, groups 1, by Winograd
    F(2x2, 3x3): per sample, the input's and ``g``'s transforms and one (C, T) @ (T, CO)
    product per position, summed over the batch, then ``G^T (.) G`` (NOTE [ Winograd
    convolution ]). ``g``'s channel sums are added into ``sums`` (float64, CO) unless it is
    empty."""
    from memgrad._kernels.winograd import G, winograd_grad, winograd_input

    n, c, _, _ = x.shape
    co = weight_shape[0]
    oh, ow = g.shape[2], g.shape[3]
    th, tw, per = _winograd_tiles(oh, ow)
    macs = n * co * c * 16 * per
    results = _winograd_as_jobs(False, x, g, sums, None, padding, macs)

    def work(lo: int, hi: int) -> np.ndarray:
        v = _winograd_scratch("wino_v", c, per, x.dtype)
        mg = _winograd_scratch("wino_m", co, per, x.dtype)
        vs = v[:, : c * per].reshape(16, c, per)
        ms = mg[:, : co * per].reshape(16, co, per).transpose(0, 2, 1)
        part = _buffer("wino_part", (16, c, co), x.dtype)
        acc = np.zeros((16, c, co), dtype=x.dtype)
        part_sums = np.zeros_like(sums)
        for i in range(lo, hi):
            winograd_input(x[i], v, padding[0], padding[1], th, tw)
            winograd_grad(g[i], mg, part_sums)
            np.matmul(vs, ms, out=part)
            acc += part
        return acc, part_sums

    (acc, first), *rest = results or in_parts(n, macs, work)
    sums += first
    for other, other_sums in rest:
        acc += other
        sums += other_sums
    # G^T (.) G of every (C, CO) position block, as two 2-D products: [i, l, c, o], then j
    gm = G.astype(x.dtype)
    t = (gm.T @ acc.reshape(4, -1)).reshape(3, 4, c, co)
    dw = (t.transpose(0, 2, 3, 1).reshape(-1, 4) @ gm).reshape(3, c, co, 3)  # [i, c, o, j]
    return np.ascontiguousarray(dw.transpose(2, 1, 0, 3))


def _flipped_padding(input_shape, g_shape, weight_shape, stride, padding, dilation, groups):
    """The padding of the stride-1 convolution that is conv2d_input_grad, or None where the
    input gradient is not one (a stride above 1, groups, or more padding than the kernel's
    span)."""
    if tuple(stride) != (1, 1) or groups != 1:
        return None
    pads = tuple(d * (k - 1) - p for k, p, d in zip(weight_shape[2:], padding, dilation))
    if min(pads) < 0:
        return None
    sizes = tuple(_out_size(o, k, 1, q, d)
                  for o, k, q, d in zip(g_shape[2:], weight_shape[2:], pads, dilation))
    return pads if sizes == tuple(input_shape[2:]) else None


@conv2d_weight_grad.vjp
def _(gg, out, needs, x, g, weight_shape, stride, padding, dilation, groups, bias=False):
    params = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    gb = None
    if bias:  # gg is the weight's part, then the bias's (one per channel of g)
        size = math.prod(weight_shape)
        gg, gb = gg[:size].reshape(weight_shape), gg[size:]
    d_x = conv2d_input_grad(g, gg, input_shape=x.shape, **params) if needs[0] else None
    d_g = _conv2d(x, gg, gb, **params) if needs[1] else None
    return d_x, d_g


def conv2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
) -> Tensor:
    """2-D convolution (cross-correlation, as in PyTorch) over an NCHW input.

    Args:
        input: (N, C, H, W), or (C, H, W) for one unbatched sample.
        weight: (CO, C / groups, KH, KW).
        bias: (CO,) or None.
        stride: an int or a pair (height, width).
        padding: an int or a pair (height, width) of zeros added on both sides.
        dilation: an int or a pair (height, width).
        groups: split the channels into this many independent convolutions.

    Returns:
        (N, CO, OH, OW) with ``OH = (H + 2*padding - dilation*(KH - 1) - 1) // stride + 1``
        (likewise OW); (CO, OH, OW) for an unbatched input.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.conv import conv2d
        >>> x, w = mg.ones(1, 2, 5, 5), mg.ones(3, 2, 3, 3)
        >>> y = conv2d(x, w, padding=1)
        >>> y.shape, y[0, 0, 2, 2].item(), y[0, 0, 0, 0].item()
        ((1, 3, 5, 5), 18.0, 8.0)
    """
    api = "conv2d"
    for name, t in (("input", input), ("weight", weight)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{api}: {name} must be a Tensor, got {type(t).__name__}")
    if input.ndim not in (3, 4):
        raise ShapeError(
            f"{api}: expected a 3-D (unbatched C, H, W) or 4-D (batched N, C, H, W) input, got "
            f"shape {input.shape}"
        )
    if input.ndim == 3:
        out = conv2d(unsqueeze(input, 0), weight, bias, stride, padding, dilation, groups)
        return squeeze(out, 0)
    groups = _check_weight(api, input, weight, bias, groups)
    stride = _sizes(stride, "stride", api, low=1)
    padding = _sizes(padding, "padding", api, low=0)
    dilation = _sizes(dilation, "dilation", api, low=1)
    _check_window(api, input.shape[2:], weight.shape[2:], padding, dilation)
    return _conv2d(
        input, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups
    )


def conv_transpose2d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride=1,
    padding=0,
    output_padding=0,
    groups: int = 1,
    dilation=1,
) -> Tensor:
    """2-D transposed convolution over an NCHW input, as ``torch.nn.functional.conv_transpose2d``
    (arguments in PyTorch's order): the gradient of ``conv2d`` with respect to its input, the
    ``conv2d_input_grad`` primitive, so it needs no kernel or VJP of its own.

    Args:
        input: (N, C_in, H, W), or (C_in, H, W) for one unbatched sample.
        weight: (C_in, C_out / groups, KH, KW).
        bias: (C_out,) or None.
        stride: an int or a pair, that of the convolution it transposes.
        padding: an int or a pair, that of the convolution it transposes.
        dilation: an int or a pair, that of the convolution it transposes.
        output_padding: an int or a pair smaller than ``stride``: extra rows (columns) at the
            bottom (right) of the output.
        groups: split the channels into this many independent convolutions.

    Returns:
        (N, C_out, OH, OW) with ``OH = (H - 1)*stride - 2*padding + dilation*(KH - 1) +
        output_padding + 1`` (likewise OW).

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.conv import conv_transpose2d
        >>> y = conv_transpose2d(mg.ones(1, 1, 2, 2), mg.ones(1, 1, 2, 2), stride=2)
        >>> y.shape, y.sum().item()
        ((1, 1, 4, 4), 16.0)
    """
    api = "conv_transpose2d"
    for name, t in (("input", input), ("weight", weight)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{api}: {name} must be a Tensor, got {type(t).__name__}")
    if input.ndim not in (3, 4):
        raise ShapeError(
            f"{api}: expected a 3-D (unbatched C, H, W) or 4-D (batched N, C, H, W) input, got "
            f"shape {input.shape}"
        )
    if input.ndim == 3:
        out = conv_transpose2d(unsqueeze(input, 0), weight, bias, stride, padding,
                               output_padding, groups, dilation)
        return squeeze(out, 0)
    if weight.ndim != 4:
        raise ShapeError(
            f"{api}: expected a 4-D weight (in_channels, out_channels / groups, kH, kW), got "
            f"shape {weight.shape}"
        )
    _check_dtypes(api, input, weight, bias)
    stride = _sizes(stride, "stride", api, low=1)
    padding = _sizes(padding, "padding", api, low=0)
    dilation = _sizes(dilation, "dilation", api, low=1)
    extra = _sizes(output_padding, "output_padding", api, low=0)
    if extra[0] >= stride[0] or extra[1] >= stride[1]:
        raise ValueError(f"{api}: output_padding {extra} must be smaller than stride {stride} "
                         "in each dimension")
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError(f"{api}: groups must be a positive int, got {groups!r}")
    groups = int(groups)
    n, c, h, w = input.shape
    ci, cog, kh, kw = weight.shape
    if c != ci or ci % groups:
        raise ShapeError(
            f"{api}: weight of shape {weight.shape} expects an input with {ci} channels "
            f"(weight.shape[0], divisible by groups={groups}), but the input of shape "
            f"{input.shape} has {c}"
        )
    co = cog * groups
    if bias is not None and tuple(bias.shape) != (co,):
        raise ShapeError(
            f"{api}: bias must have shape ({co},) (weight.shape[1] * groups output channels), "
            f"got {bias.shape}"
        )
    oh = (h - 1) * stride[0] - 2 * padding[0] + dilation[0] * (kh - 1) + extra[0] + 1
    ow = (w - 1) * stride[1] - 2 * padding[1] + dilation[1] * (kw - 1) + extra[1] + 1
    if oh < 1 or ow < 1:
        raise ShapeError(f"{api}: the output of input {input.shape} with weight {weight.shape}, "
                         f"stride {stride} and padding {padding} would be {oh}x{ow}; reduce "
                         "the padding")
    out = conv2d_input_grad(input, weight, input_shape=(n, co, oh, ow), stride=stride,
                            padding=padding, dilation=dilation, groups=groups)
    return out if bias is None else out + bias.reshape(co, 1, 1)


# ---------------------------------------------------------------------------- max_pool2d


# a window element of the pooling kernel, in multiply-adds (for in_parts)
_POOL_COST = 64


def _pool(x: np.ndarray, kernel_size, stride, padding, dilation, indices: np.ndarray) -> None:
    """Fill ``indices`` with the argmax of max pooling ``x`` (the maxima go to scratch), in
    parts of the batch (NOTE [ Batch-parallel convolution ])."""
    from memgrad._kernels.pool import max_pool2d as kernel

    x = np.ascontiguousarray(x)
    out = _buffer("pooled", indices.shape, x.dtype)
    params = (*kernel_size, *stride, *padding, *dilation)
    in_parts(x.shape[0], indices.size * kernel_size[0] * kernel_size[1] * _POOL_COST,
             lambda lo, hi: kernel(x[lo:hi], out[lo:hi], indices[lo:hi], *params))


@primitive("max_pool2d_indices", differentiable=False, kind="reduce")
def max_pool2d_indices(x, *, kernel_size, stride, padding, dilation):
    """The flat (H, W) position in its input plane of each pooling window's maximum (-1 for
    a window with no input element), as PyTorch's ``return_indices`` gives it.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.conv import max_pool2d_indices
        >>> max_pool2d_indices(mg.arange(16.0).reshape(1, 1, 4, 4), kernel_size=(2, 2),
        ...                    stride=(2, 2), padding=(0, 0), dilation=(1, 1))
        tensor([[[[ 5,  7],
                  [13, 15]]]])
    """
    n, c, h, w = x.shape
    oh = _out_size(h, kernel_size[0], stride[0], padding[0], dilation[0])
    ow = _out_size(w, kernel_size[1], stride[1], padding[1], dilation[1])
    indices = np.empty((n, c, oh, ow), dtype=np.int64)
    _pool(x, kernel_size, stride, padding, dilation, indices)
    return indices


@primitive("max_pool2d", saves={"indices": (0,)}, kind="reduce")
def _max_pool2d(x, indices):
    n, c, h, w = x.shape
    if indices.dtype.kind not in "iu" or indices.ndim != 4 or indices.shape[:2] != (n, c):
        raise ShapeError(
            f"max_pool2d: indices must be an integer array of shape ({n}, {c}, OH, OW) for an "
            f"input of shape {x.shape}, got {indices.dtype} of shape {indices.shape}"
        )
    from memgrad._kernels.pool import max_pool2d_gather

    out = np.empty(indices.shape, x.dtype)
    try:
        return max_pool2d_gather(x, indices, out)
    except IndexError:
        raise IndexError(
            f"max_pool2d: an index is out of range for an input plane of {h} x {w} (valid: -1 "
            f"for no element, 0 to {h * w - 1})"
        ) from None


@_max_pool2d.vjp
def _(g, out, needs, x, indices):
    return max_pool2d_backward(g, indices, input_shape=x.shape), None


@primitive("max_pool2d_backward", saves={"indices": (0,)}, kind="movement")
def max_pool2d_backward(g, indices, *, input_shape):
    """Zeros of ``input_shape`` with each ``g[n, c, i, j]`` added at the flat position
    ``indices[n, c, i, j]`` of plane ``(n, c)``: the backward of max pooling.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.conv import max_pool2d_backward
        >>> g, at = mg.tensor([[[[1.0, 2.0]]]]), mg.tensor([[[[3, 3]]]])
        >>> max_pool2d_backward(g, at, input_shape=(1, 1, 2, 2))
        tensor([[[[0., 0.],
                  [0., 3.]]]])
    """
    from memgrad._kernels.pool import max_pool2d_backward as kernel

    n, c, h, w = input_shape
    if g.shape[:2] != (n, c) or indices.shape != g.shape:
        raise ShapeError(
            f"max_pool2d_backward: g of shape {g.shape} and indices of shape {indices.shape} "
            f"must be equal, with (N, C) = {(n, c)} of input_shape {input_shape}"
        )
    out = np.empty(input_shape, dtype=g.dtype)
    g, indices = np.ascontiguousarray(g), np.ascontiguousarray(indices)
    try:  # in parts of the batch, each part's indices checked before it writes
        in_parts(n, (out.size + g.size) * _POOL_COST // 4,
                 lambda lo, hi: kernel(g[lo:hi], indices[lo:hi], out[lo:hi]))
    except IndexError:
        bad = int(indices.min() if indices.min() < -1 else indices.max())
        raise IndexError(
            f"max_pool2d_backward: index {bad} is out of range for an input plane of {h} x {w} "
            f"(valid: -1 for no element, 0 to {h * w - 1})"
        ) from None
    return out


@max_pool2d_backward.vjp
def _(gg, out, needs, g, indices, input_shape):
    n, c, h, w = input_shape
    where_from = indices.numpy().reshape(n, c, -1)
    index = (
        np.arange(n)[:, None, None],
        np.arange(c)[None, :, None],
        np.maximum(where_from, 0),
        Ellipsis,
    )
    picked = getitem(gg.reshape(n, c, h * w), index=index).reshape(g.shape)
    if (where_from < 0).any():  # windows with no input element (see the pool kernel)
        picked = where(Tensor(indices.numpy() >= 0), picked, 0.0)
    return picked, None


def max_pool2d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1) -> Tensor:
    """2-D max pooling over an NCHW input; padding counts as ``-inf``.

    The gradient of each output goes to the input element that was the maximum of its window
    (the first one in row-major window order on a tie).

    Args:
        input: (N, C, H, W), or (C, H, W) for one unbatched sample.
        kernel_size: an int or a pair (height, width).
        stride: an int or a pair (height, width); defaults to ``kernel_size``.
        padding: an int or a pair (height, width), at most half of ``kernel_size``.
        dilation: an int or a pair (height, width).

    Returns:
        (N, C, OH, OW) with ``OH = (H + 2*padding - dilation*(KH - 1) - 1) // stride + 1``
        (likewise OW); (C, OH, OW) for an unbatched input.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.conv import max_pool2d
        >>> max_pool2d(mg.arange(16.0).reshape(1, 1, 4, 4), 2)
        tensor([[[[ 5.,  7.],
                  [13., 15.]]]])
    """
    api = "max_pool2d"
    if not isinstance(input, Tensor):
        raise TypeError(f"{api}: input must be a Tensor, got {type(input).__name__}")
    if input.ndim not in (3, 4):
        raise ShapeError(
            f"{api}: expected a 3-D (unbatched C, H, W) or 4-D (batched N, C, H, W) input, got "
            f"shape {input.shape}"
        )
    if input.ndim == 3:
        return squeeze(max_pool2d(unsqueeze(input, 0), kernel_size, stride, padding, dilation), 0)
    if input.dtype.kind != "f":
        raise TypeError(f"{api}: expected a floating-point input, got dtype {input.dtype}")
    kernel_size = _sizes(kernel_size, "kernel_size", api, low=1)
    stride = kernel_size if stride is None else _sizes(stride, "stride", api, low=1)
    padding = _sizes(padding, "padding", api, low=0)
    dilation = _sizes(dilation, "dilation", api, low=1)
    if padding[0] > kernel_size[0] // 2 or padding[1] > kernel_size[1] // 2:
        raise ValueError(
            f"{api}: padding {padding} must be at most half of kernel_size {kernel_size}, as in "
            "PyTorch (a window would otherwise see only padding)"
        )
    _check_window(api, input.shape[2:], kernel_size, padding, dilation)
    indices = max_pool2d_indices(
        input, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation
    )
    return _max_pool2d(input, indices)


# ---------------------------------------------------------------------------- composites
#
# conv1d is conv2d over a height of 1; average pooling is a grouped conv2d with a constant
# kernel (a weight that needs no gradient keeps nothing for backward); adaptive average
# pooling is two products with constant averaging matrices. Their gradients are those of
# conv2d and matmul.


def _single(value, name: str, api: str, low: int) -> int:
    v = value[0] if isinstance(value, (tuple, list)) and len(value) == 1 else value
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"{api}: {name} must be an int or a 1-tuple of ints, got {value!r}")
    if v < low:
        limit = "positive" if low == 1 else "non-negative"
        raise ValueError(f"{api}: {name} must be {limit}, got {value!r}")
    return int(v)


def conv1d(
    input: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
) -> Tensor:
    """1-D convolution (cross-correlation) over an (N, C, L) input, as in PyTorch.

    Args:
        input: (N, C, L), or (C, L) for one unbatched sample.
        weight: (CO, C / groups, K).
        bias: (CO,) or None.
        stride: an int (or a 1-tuple).
        padding: an int (or a 1-tuple).
        dilation: an int (or a 1-tuple).
        groups: as for ``conv2d``.

    Returns:
        (N, CO, OL) with ``OL = (L + 2*padding - dilation*(K - 1) - 1) // stride + 1``.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.conv import conv1d
        >>> conv1d(mg.arange(5.0).reshape(1, 1, 5), mg.ones(1, 1, 2)).tolist()
        [[[1.0, 3.0, 5.0, 7.0]]]
    """
    api = "conv1d"
    for name, t in (("input", input), ("weight", weight)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{api}: {name} must be a Tensor, got {type(t).__name__}")
    if input.ndim not in (2, 3):
        raise ShapeError(
            f"{api}: expected a 2-D (unbatched C, L) or 3-D (batched N, C, L) input, got shape "
            f"{input.shape}"
        )
    if weight.ndim != 3:
        raise ShapeError(
            f"{api}: expected a 3-D weight (out_channels, in_channels / groups, kW), got shape "
            f"{weight.shape}"
        )
    stride = _single(stride, "stride", api, 1)
    padding = _single(padding, "padding", api, 0)
    dilation = _single(dilation, "dilation", api, 1)
    out = conv2d(unsqueeze(input, -2), unsqueeze(weight, -2), bias, (1, stride), (0, padding),
                 (1, dilation), groups)
    return squeeze(out, -2)


def _pool_input(input, api: str) -> None:
    if not isinstance(input, Tensor):
        raise TypeError(f"{api}: input must be a Tensor, got {type(input).__name__}")
    if input.ndim not in (3, 4):
        raise ShapeError(
            f"{api}: expected a 3-D (unbatched C, H, W) or 4-D (batched N, C, H, W) input, got "
            f"shape {input.shape}"
        )
    if input.dtype.kind != "f":
        raise TypeError(f"{api}: expected a floating-point input, got dtype {input.dtype}")


def avg_pool2d(
    input: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """2-D average pooling over an NCHW input, as in PyTorch.

    Args:
        input: (N, C, H, W), or (C, H, W) for one unbatched sample.
        kernel_size: an int or a pair.
        stride: an int or a pair; defaults to ``kernel_size``.
        padding: an int or a pair of zeros, at most half of ``kernel_size``.
        ceil_mode: only False (the default) is supported.
        count_include_pad: divide by the whole window (True) or by its elements that are
            not padding.
        divisor_override: divide every window's sum by this instead.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.conv import avg_pool2d
        >>> avg_pool2d(mg.arange(16.0).reshape(1, 1, 4, 4), 2)
        tensor([[[[ 2.5,  4.5],
                  [10.5, 12.5]]]])
    """
    api = "avg_pool2d"
    _pool_input(input, api)
    if input.ndim == 3:
        return squeeze(avg_pool2d(unsqueeze(input, 0), kernel_size, stride, padding, ceil_mode,
                                  count_include_pad, divisor_override), 0)
    if ceil_mode:
        raise NotImplementedError(
            f"{api}: ceil_mode=True is not supported; pad the input (or choose the padding) so "
            "that the windows fit, and use ceil_mode=False"
        )
    kernel = _sizes(kernel_size, "kernel_size", api, low=1)
    stride = kernel if stride is None else _sizes(stride, "stride", api, low=1)
    padding = _sizes(padding, "padding", api, low=0)
    if padding[0] > kernel[0] // 2 or padding[1] > kernel[1] // 2:
        raise ValueError(
            f"{api}: padding {padding} must be at most half of kernel_size {kernel}, as in "
            "PyTorch"
        )
    if divisor_override is not None and (isinstance(divisor_override, bool)
                                         or not isinstance(divisor_override, (int, np.integer))
                                         or divisor_override <= 0):
        raise ValueError(f"{api}: divisor_override must be a positive int, got "
                         f"{divisor_override!r}")
    _check_window(api, input.shape[2:], kernel, padding, (1, 1))
    c = input.shape[1]
    ones = Tensor(np.ones((c, 1) + kernel, dtype=input.dtype))
    sums = conv2d(input, ones, None, stride, padding, 1, c)
    if divisor_override is not None:
        return sums / float(divisor_override)
    if count_include_pad or padding == (0, 0):
        return sums / float(kernel[0] * kernel[1])
    counts = [_window_counts(n, k, s, p, o) for n, k, s, p, o in
              zip(input.shape[2:], kernel, stride, padding, sums.shape[2:])]
    return sums / Tensor(np.outer(*counts).astype(input.dtype))


def _window_counts(size: int, k: int, s: int, p: int, n_out: int) -> np.ndarray:
    """How many elements of the unpadded input each of ``n_out`` windows covers."""
    start = np.arange(n_out) * s - p
    return np.minimum(start + k, size) - np.maximum(start, 0)


def _averaging(n_in: int, n_out: int, dtype) -> np.ndarray:
    """The (n_out, n_in) matrix of adaptive pooling: row i averages
    ``[floor(i * n_in / n_out), ceil((i + 1) * n_in / n_out))``, as PyTorch's windows."""
    a = np.zeros((n_out, n_in), dtype=dtype)
    for i in range(n_out):
        lo, hi = (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)
        a[i, lo:hi] = 1.0 / (hi - lo)
    return a


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """2-D average pooling to a fixed ``output_size`` (an int, a pair, or a pair with None
    for "keep this size") over windows chosen as PyTorch chooses them.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.conv import adaptive_avg_pool2d
        >>> adaptive_avg_pool2d(mg.arange(6.0).reshape(1, 1, 2, 3), 1)
        tensor([[[[2.5]]]])
    """
    api = "adaptive_avg_pool2d"
    _pool_input(input, api)
    size = tuple(output_size) if isinstance(output_size, (tuple, list)) \
        else (output_size, output_size)
    h, w = input.shape[-2:]
    if len(size) != 2:
        raise TypeError(f"{api}: output_size must be an int or a pair, got {output_size!r}")
    size = tuple(full if s is None else s for s, full in zip(size, (h, w)))
    for s in size:
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s <= 0:
            raise ValueError(
                f"{api}: output_size must hold positive ints (or None), got {output_size!r}"
            )
    if h == 0 or w == 0:
        raise ShapeError(f"{api}: input of shape {input.shape} has an empty spatial dimension")
    rows = Tensor(_averaging(h, int(size[0]), input.dtype))
    cols = Tensor(_averaging(w, int(size[1]), input.dtype).T.copy())
    return (rows @ input) @ cols


# ---------------------------------------------------------------------------- checks


_COUNT = {2: "a pair", 3: "a triple"}


def _sizes(value, name: str, api: str, low: int, n: int = 2) -> tuple[int, ...]:
    """``value`` (an int, or n ints) as n ints of at least ``low``."""
    sizes = tuple(value) if isinstance(value, (tuple, list)) else (value,) * n
    if len(sizes) != n or not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in sizes
    ):
        raise TypeError(f"{api}: {name} must be an int or {_COUNT[n]} of ints, got {value!r}")
    if min(sizes) < low:
        limit = "positive" if low == 1 else "non-negative"
        raise ValueError(f"{api}: {name} must be {limit}, got {value!r}")
    return tuple(int(v) for v in sizes)


_KERNEL_DIMS = {2: "kH, kW", 3: "kD, kH, kW"}


def _check_weight(api: str, input: Tensor, weight: Tensor, bias, groups) -> int:
    """A convolution's weight (as many dimensions as the batched input), dtypes, groups and
    bias checked against the input; returns groups as an int."""
    if weight.ndim != input.ndim:
        raise ShapeError(
            f"{api}: expected a {input.ndim}-D weight (out_channels, in_channels / groups, "
            f"{_KERNEL_DIMS[input.ndim - 2]}), got shape {weight.shape}"
        )
    _check_dtypes(api, input, weight, bias)
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError(f"{api}: groups must be a positive int, got {groups!r}")
    groups = int(groups)
    c = input.shape[1]
    co, cg = weight.shape[:2]
    if co % groups:
        raise ShapeError(
            f"{api}: weight of shape {weight.shape} has {co} output channels, which groups="
            f"{groups} does not divide"
        )
    if c != cg * groups:
        raise ShapeError(
            f"{api}: weight of shape {weight.shape} with groups={groups} expects an input with "
            f"{cg * groups} channels (weight.shape[1] * groups), but the input of shape "
            f"{input.shape} has {c}"
        )
    if bias is not None and tuple(bias.shape) != (co,):
        raise ShapeError(
            f"{api}: bias must have shape ({co},) (one value per output channel of the weight "
            f"of shape {weight.shape}), got {bias.shape}"
        )
    return groups


def _check_dtypes(api: str, input: Tensor, weight: Tensor, bias) -> None:
    if input.dtype.kind != "f":
        raise TypeError(f"{api}: expected a floating-point input, got dtype {input.dtype}")
    others = [("weight", weight)] + ([("bias", bias)] if bias is not None else [])
    for name, t in others:
        if not isinstance(t, Tensor):
            raise TypeError(f"{api}: {name} must be a Tensor, got {type(t).__name__}")
        if t.dtype != input.dtype:
            raise TypeError(
                f"{api}: input ({input.dtype}) and {name} ({t.dtype}) must have the same dtype; "
                f"convert one with .to(...), .float() or .double()"
            )


def _check_window(api: str, size, kernel, padding, dilation) -> None:
    padded = tuple(s + 2 * p for s, p in zip(size, padding))
    span = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
    if any(a > b for a, b in zip(span, padded)):
        raise ShapeError(
            f"{api}: the kernel {tuple(kernel)} with dilation {dilation} spans {span}, larger "
            f"than the padded input {padded} (input {tuple(size)} plus padding {padding} on "
            "each side); use a smaller kernel or more padding"
        )


# ---------------------------------------------------------------------------- unfold, fold
#
# F.unfold is im2col with PyTorch's layout, (N, C*KH*KW, L) for L = OH*OW windows (row c*KH*KW
# + i*KW + j holds kernel offset (i, j) of channel c); F.fold sums such columns back into an
# image (col2im). Each is linear and the other's transpose, so each one's VJP is the other.


@primitive("unfold", kind="movement")
def _unfold(x, *, kernel_size, dilation, padding, stride):
    from memgrad._kernels.conv import im2col

    n, c, h, w = x.shape
    kh, kw = kernel_size
    oh = _out_size(h, kh, stride[0], padding[0], dilation[0])
    ow = _out_size(w, kw, stride[1], padding[1], dilation[1])
    col = im2col(np.ascontiguousarray(x), np.empty((c, kh, kw, n, oh, ow), dtype=x.dtype),
                 *stride, *padding, *dilation)
    return np.ascontiguousarray(col.transpose(3, 0, 1, 2, 4, 5)).reshape(n, c * kh * kw,
                                                                         oh * ow)


@_unfold.vjp
def _(g, out, needs, x, kernel_size, dilation, padding, stride):
    return (_fold(g, output_size=tuple(x.shape[2:]), kernel_size=kernel_size,
                  dilation=dilation, padding=padding, stride=stride),)


@primitive("fold", kind="movement")
def _fold(cols, *, output_size, kernel_size, dilation, padding, stride):
    from memgrad._kernels.conv import col2im

    n, ck, _ = cols.shape
    kh, kw = kernel_size
    h, w = output_size
    oh = _out_size(h, kh, stride[0], padding[0], dilation[0])
    ow = _out_size(w, kw, stride[1], padding[1], dilation[1])
    c = ck // (kh * kw)
    col = np.ascontiguousarray(cols.reshape(n, c, kh, kw, oh, ow).transpose(1, 2, 3, 0, 4, 5))
    return col2im(col, np.empty((n, c, h, w), dtype=cols.dtype), *stride, *padding, *dilation)


@_fold.vjp
def _(g, out, needs, cols, output_size, kernel_size, dilation, padding, stride):
    return (_unfold(g, kernel_size=kernel_size, dilation=dilation, padding=padding,
                    stride=stride),)


def _window_args(api: str, kernel_size, dilation, padding, stride) -> dict:
    return dict(kernel_size=_sizes(kernel_size, "kernel_size", api, low=1),
                dilation=_sizes(dilation, "dilation", api, low=1),
                padding=_sizes(padding, "padding", api, low=0),
                stride=_sizes(stride, "stride", api, low=1))


def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """The sliding windows of an (N, C, H, W) input as columns: (N, C*KH*KW, L) with one
    column per window position (``L = OH*OW``), as ``torch.nn.functional.unfold``.

    Args:
        input: (N, C, H, W), or (C, H, W) unbatched.
        kernel_size: an int or a pair.
        dilation: an int or a pair.
        padding: zeros on each side, an int or a pair.
        stride: an int or a pair.

    Example:
        >>> import memgrad as mg
        >>> F = mg.nn.functional
        >>> F.unfold(mg.arange(9.0).reshape(1, 1, 3, 3), 2)[0]
        tensor([[0., 1., 3., 4.],
                [1., 2., 4., 5.],
                [3., 4., 6., 7.],
                [4., 5., 7., 8.]])
    """
    api = "unfold"
    if not isinstance(input, Tensor) or input.ndim not in (3, 4):
        got = input.shape if isinstance(input, Tensor) else type(input).__name__
        raise ShapeError(f"{api}: expected a 3-D (C, H, W) or 4-D (N, C, H, W) tensor, got {got}")
    if input.ndim == 3:
        return squeeze(unfold(unsqueeze(input, 0), kernel_size, dilation, padding, stride), 0)
    if input.dtype.kind != "f":
        raise TypeError(f"{api}: expected a floating-point input, got dtype {input.dtype}")
    params = _window_args(api, kernel_size, dilation, padding, stride)
    _check_window(api, input.shape[2:], params["kernel_size"], params["padding"],
                  params["dilation"])
    return _unfold(input, **params)


def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """Sum columns (N, C*KH*KW, L), one per window position, into an (N, C, H, W) image of
    ``output_size`` (overlapping windows add up), as ``torch.nn.functional.fold``: the
    transpose of ``unfold``.

    Args:
        input: (N, C*KH*KW, L), or (C*KH*KW, L) unbatched.
        output_size: the image's (H, W), an int or a pair.
        kernel_size: an int or a pair.
        dilation: an int or a pair.
        padding: an int or a pair.
        stride: an int or a pair.

    Example:
        >>> import memgrad as mg
        >>> F = mg.nn.functional
        >>> F.fold(mg.ones(1, 4, 4), (3, 3), 2)[0, 0]
        tensor([[1., 2., 1.],
                [2., 4., 2.],
                [1., 2., 1.]])
    """
    api = "fold"
    if not isinstance(input, Tensor) or input.ndim not in (2, 3):
        got = input.shape if isinstance(input, Tensor) else type(input).__name__
        raise ShapeError(f"{api}: expected a 2-D (C*KH*KW, L) or 3-D (N, C*KH*KW, L) tensor, "
                         f"got {got}")
    if input.ndim == 2:
        return squeeze(fold(unsqueeze(input, 0), output_size, kernel_size, dilation, padding,
                            stride), 0)
    if input.dtype.kind != "f":
        raise TypeError(f"{api}: expected a floating-point input, got dtype {input.dtype}")
    params = _window_args(api, kernel_size, dilation, padding, stride)
    size = _sizes(output_size, "output_size", api, low=1)
    kh, kw = params["kernel_size"]
    _check_window(api, size, params["kernel_size"], params["padding"], params["dilation"])
    oh, ow = (_out_size(s, k, st, p, d) for s, k, st, p, d in zip(
        size, params["kernel_size"], params["stride"], params["padding"], params["dilation"]))
    if input.shape[1] % (kh * kw) or input.shape[2] != oh * ow:
        raise ShapeError(f"{api}: input of shape {input.shape} must be (N, C*{kh}*{kw}, "
                         f"{oh * ow}) for windows of {kh}x{kw} over {size[0]}x{size[1]} "
                         f"({oh}x{ow} positions)")
    return _fold(input, output_size=size, **params)


def max_pool1d(input: Tensor, kernel_size, stride=None, padding=0, dilation=1) -> Tensor:
    """1-D max pooling over an (N, C, L) input (or (C, L)); ``stride`` defaults to
    ``kernel_size``, padding counts as ``-inf``.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.ops.conv import max_pool1d
        >>> max_pool1d(mg.tensor([[[1.0, 3.0, 2.0, 5.0]]]), 2)
        tensor([[[3., 5.]]])
    """
    api = "max_pool1d"
    if not isinstance(input, Tensor) or input.ndim not in (2, 3):
        got = input.shape if isinstance(input, Tensor) else type(input).__name__
        raise ShapeError(f"{api}: expected a 2-D (C, L) or 3-D (N, C, L) input, got {got}")
    k = _single(kernel_size, "kernel_size", api, 1)
    s = k if stride is None else _single(stride, "stride", api, 1)
    p = _single(padding, "padding", api, 0)
    d = _single(dilation, "dilation", api, 1)
    return squeeze(max_pool2d(unsqueeze(input, -2), (1, k), (1, s), (0, p), (1, d)), -2)
