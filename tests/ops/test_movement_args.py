"""Sizes and dims of the movement and reduction ops: NumPy integers and bools mean what the
equal Python ints mean, negative dims count from the end, and the results come back as
Python ints (the fast paths for plain ints agree with the general one)."""

import numpy as np
import pytest

import memgrad as mg
from memgrad.ops.movement import shape_args
from memgrad.ops.reduce import normalize_dims


def test_shape_args_converts_numpy_integers_and_bools_to_ints():
    for given in ((2, 3), ((2, 3),), ([2, 3],), (np.int64(2), 3), (2, np.int32(3))):
        got = shape_args(given, "reshape")
        assert got == (2, 3) and all(type(s) is int for s in got)
    got = shape_args((True, 3), "reshape")
    assert got == (1, 3) and type(got[0]) is int
    with pytest.raises(TypeError, match=r"reshape: sizes must be ints, got \(2\.0, 3\)"):
        shape_args((2.0, 3), "reshape")


def test_normalize_dims_for_one_int_matches_the_tuple_form():
    for ndim in range(4):
        for d in range(-max(ndim, 1), max(ndim, 1)):
            assert normalize_dims(d, ndim, "sum") == normalize_dims((d,), ndim, "sum")
    assert normalize_dims(np.int64(-1), 3, "sum") == (2,)
    with pytest.raises(IndexError, match=r"range of \[-3, 2\], but got 3"):
        normalize_dims(3, 3, "sum")
    with pytest.raises(TypeError, match="sum: dim must be an int"):
        normalize_dims(1.0, 3, "sum")


def test_permute_and_transpose_with_negative_and_numpy_dims_match_numpy():
    a = np.arange(24.0).reshape(2, 3, 4)
    t = mg.tensor(a, requires_grad=True)
    p = t.permute(-1, np.int64(0), 1)
    np.testing.assert_array_equal(p.numpy(), a.transpose(2, 0, 1))
    np.testing.assert_array_equal(t.transpose(-1, 0).numpy(), a.swapaxes(-1, 0))
    g = np.arange(24.0).reshape(4, 2, 3)
    p.backward(mg.tensor(g))
    np.testing.assert_array_equal(t.grad.numpy(), g.transpose(1, 2, 0))
    with pytest.raises(ValueError, match="permute: dims .* must be a permutation"):
        t.permute(0, 0, 1)
