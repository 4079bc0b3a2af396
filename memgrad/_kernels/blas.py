"""Compiled calls of NumPy's own OpenBLAS: ``_gemm``, an intrinsic that calls the ILP64
``cblas_?gemm`` at a given address from compiled code (the jobs of the hand-off use it), and
``addmm_into``, a linear layer's forward as PyTorch's ``addmm`` computes it, in one compiled
call: the bias broadcast into the output, then the product added to it by one ``cblas_?gemm``
with beta 1 (NOTE [ A linear layer's bias first ] in memgrad/ops/nn.py).

``addmm_into`` checks the shapes of its arrays; its caller checks that BLAS can take them as
they lie and gives it the transpose flags and leading dimensions (the ILP64 ``cblas_?gemm``
reads and writes where those point). This module is small on purpose: importing it costs
one compiled function loaded from numba's cache, not the hand-off's compiled callbacks.

Nothing here imports memgrad. It needs numba's compiler (with ``NUMBA_DISABLE_JIT=1`` memgrad
does not call it).
"""

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ["addmm_into", "fill_rows"]


def _extern(builder, name, ret, arg_types, var_arg=False):
    """The C function ``name`` of the given type, declared in the module being built."""
    fnty = ir.FunctionType(ret, arg_types, var_arg=var_arg)
    return cgutils.get_or_insert_function(builder.module, fnty, name)


@intrinsic
def _gemm(typingctx, fn, double, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc):
    """``fn(RowMajor, ta, tb, m, n, k, 1, a, lda, b, ldb, beta, c, ldc)``: the ILP64
    ``cblas_dgemm`` when ``double`` is nonzero, else ``cblas_sgemm``; ``beta`` a float64."""
    def codegen(context, builder, sig, args):
        i32, i64 = ir.IntType(32), ir.IntType(64)

        def call(real, scale):
            fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32, i64, i64, i64, real, i64,
                                                   i64, i64, i64, real, i64, i64])
            fn = builder.inttoptr(args[0], fnty.as_pointer())
            builder.call(fn, [ir.Constant(i32, 101), builder.trunc(args[2], i32),
                              builder.trunc(args[3], i32), args[4], args[5], args[6],
                              ir.Constant(real, 1.0), args[7], args[8], args[9], args[10],
                              scale, args[12], args[13]])

        with builder.if_else(builder.icmp_signed("!=", args[1], ir.Constant(i64, 0))) as (
                double, single):
            with double:
                call(ir.DoubleType(), args[11])
            with single:
                call(ir.FloatType(), builder.fptrunc(args[11], ir.FloatType()))
        return context.get_dummy_value()

    return types.void(*([types.int64] * 11), types.float64, types.int64, types.int64), codegen


@njit(nogil=True, cache=True)
def addmm_into(x, w, bias, out, fn, ta, lda, tb, ldb):
    """``out = x @ w + bias`` for ``x`` (M, K), ``w`` (K, N), ``bias`` (N,) and a
    C-contiguous ``out`` (M, N), all float32 or all float64: ``bias`` written into every row
    of ``out``, then ``fn`` (the ILP64 ``cblas_?gemm`` of their dtype) adds ``x @ w`` to it;
    ``ta``, ``lda``, ``tb``, ``ldb`` are the BLAS transpose flags and leading dimensions of
    ``x`` and ``w`` as row-major operands."""
    m, k = x.shape
    n = w.shape[1]
    if w.shape[0] != k or bias.shape[0] != n or out.shape[0] != m or out.shape[1] != n:
        raise ValueError("addmm_into: expected x (M, K), w (K, N), bias (N,) and out (M, N)")
    fill_rows(bias, out)
    _gemm(fn, out.itemsize == 8, ta, tb, m, n, k, x.ctypes.data, lda, w.ctypes.data, ldb, 1.0,
          out.ctypes.data, n)


@njit(nogil=True, cache=True)
def fill_rows(v, out):
    """``out[i, :] = v`` for every row of ``out`` (M, N), ``v`` (N,) (checked first:
    ValueError).

    Example:
        >>> out = np.empty((2, 3))
        >>> fill_rows(np.array([1.0, 2.0, 3.0]), out); out.tolist()
        [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]]
    """
    if v.shape[0] != out.shape[1]:
        raise ValueError("fill_rows: v must have out's row length")
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = v[j]
