"""numba kernels: NumPy arrays in, NumPy arrays out, nothing imported from memgrad.

Each kernel has a NumPy reference it is tested against, and is correct with
``NUMBA_DISABLE_JIT=1``. This package is imported lazily (on the first call of an op that
needs a kernel) so that ``import memgrad`` does not pay for importing numba.
"""
