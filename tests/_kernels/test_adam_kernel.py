"""The one-pass Adam kernel against its NumPy reference (one ufunc per operation): equal
bit for bit, for both dtypes, every weight-decay mode, with and without AMSGrad; and SGD's
one-pass step likewise."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memgrad._kernels import optim as K


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 300), dtype=st.sampled_from([np.float32, np.float64]),
       mode=st.sampled_from([0, 1, 2]), amsgrad=st.booleans(), step=st.integers(1, 50),
       eps=st.sampled_from([0.0, 1e-8, 1e-3]), seed=st.integers(0, 2**32 - 1))
def test_adam_update_equals_the_numpy_reference_bit_for_bit(n, dtype, mode, amsgrad, step,
                                                             eps, seed):
    rng = np.random.default_rng(seed)
    p, g, m = (rng.standard_normal(n).astype(dtype) for _ in range(3))
    v, vmax = (rng.random(n).astype(dtype) for _ in range(2))
    if n:
        g[0] = 0.0  # with eps 0 and v 0 below: 0 / 0
        m[0] = v[0] = vmax[0] = 0.0
    c = np.dtype(dtype).type
    lr, wd, b1, b2 = 0.01, 0.1, 0.9, 0.999
    decay = c(1 - lr * wd) if mode == 1 else c(wd)
    scalars = (mode, decay, c(b1), c(1 - b1), c(b2), c(1 - b2), amsgrad,
               c(np.sqrt(1 - b2**step)), c(eps), c(lr / (1 - b1**step)))
    want = [a.copy() for a in (p, g, m, v, vmax)]
    with np.errstate(invalid="ignore", divide="ignore"):
        K.adam_update_reference(*want, *scalars)
        got = [a.copy() for a in (p, g, m, v, vmax)]
        K.adam_update(*got, *scalars)
    for a, b in zip(got, want):
        assert a.dtype == dtype
        np.testing.assert_array_equal(a, b)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(0, 300), dtype=st.sampled_from([np.float32, np.float64]),
       lr=st.sampled_from([0.1, 1e-3, 0.37]), seed=st.integers(0, 2**32 - 1))
def test_sgd_step_equals_the_numpy_reference_bit_for_bit(n, dtype, lr, seed):
    # lr a Python float, rounded to the dtype by the kernel as by NumPy's multiply
    rng = np.random.default_rng(seed)
    p, g = (rng.standard_normal(n).astype(dtype) for _ in range(2))
    want = np.subtract(p, np.multiply(g, lr, dtype=dtype))
    np.testing.assert_array_equal(K.sgd_step_reference(p, g, lr), want)
    K.sgd_step_into(g, lr, p)
    assert p.dtype == dtype
    np.testing.assert_array_equal(p, want)


def test_sgd_step_checks_the_lengths_first():
    p = np.ones(3)
    with pytest.raises(ValueError, match="one length"):
        K.sgd_step_into(np.ones(4), 0.5, p)
    assert (p == 1).all()
