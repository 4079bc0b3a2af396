"""numba kernels: NumPy arrays in, NumPy arrays out, nothing imported from memgrad.

Each kernel has a NumPy reference it is tested against, and is correct with
``NUMBA_DISABLE_JIT=1``. The kernel modules are imported lazily (on the first call of an op
that needs one) so that ``import memgrad`` does not pay for importing numba; this package
itself imports nothing heavy.
"""

import os
import sys
import threading


def _reset_numba_after_fork() -> None:
    # A fork taken while another thread held numba's compiler lock leaves the child's copy
    # locked by a thread that does not exist there: the child's first compile would hang.
    module = sys.modules.get("numba.core.compiler_lock")
    if module is not None:
        module.global_compiler_lock._lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_numba_after_fork)
