"""The ops real PyTorch models use, beyond the op table's samples: result dtypes (int64
indices, int64 sums of integers), ties, the errors for bad input (index errors before
anything runs), index arrays through backward (the version check, or a private copy), the
values of known PyTorch results, and the random draws (reproducible with ``manual_seed``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import memgrad as mg
import memgrad.nn.functional as F
from memgrad.errors import ShapeError

# ---------------------------------------------------------------------------- elementwise


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erf_matches_math_erf(dtype):
    v = np.linspace(-5, 5, 101).astype(dtype)
    got = mg.erf(mg.tensor(v)).numpy()
    want = np.array([math.erf(float(a)) for a in v])
    assert got.dtype == dtype
    np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.float32 else 1e-15,
                               atol=1e-7)


def test_erf_of_integers_is_float32_and_of_half_is_half():
    assert mg.erf(mg.tensor([0, 1])).dtype == np.float32
    assert mg.erf(mg.tensor([0, 1])).tolist()[1] == pytest.approx(math.erf(1), rel=1e-6)
    assert mg.erf(mg.ones(2, dtype=mg.half)).dtype == np.float16


def test_stepped_functions_have_zero_gradient_and_round_half_to_even():
    x = mg.tensor([-1.5, -0.5, 0.5, 1.5, 2.5, 0.7], requires_grad=True)
    assert mg.round(x).tolist() == [-2.0, -0.0, 0.0, 2.0, 2.0, 1.0]
    assert mg.floor(x).tolist() == [-2.0, -1.0, 0.0, 1.0, 2.0, 0.0]
    assert x.ceil().tolist() == [-1.0, -0.0, 1.0, 2.0, 3.0, 1.0]
    (mg.floor(x) + x.ceil() + x.round() + x).sum().backward()
    assert x.grad.tolist() == [1.0] * 6
    assert mg.round(mg.tensor([1.234, -5.678]), decimals=2).numpy().tolist() == pytest.approx(
        [1.23, -5.68])


def test_isfinite_and_isnan_are_bool():
    x = mg.tensor([1.0, math.inf, -math.inf, math.nan])
    assert x.isfinite().tolist() == [True, False, False, False]
    assert mg.isnan(x).tolist() == [False, False, False, True]
    assert mg.isnan(x).dtype == np.bool_ and not mg.isnan(x).requires_grad


def test_rsqrt_log1p_expm1_values():
    x = mg.tensor([4.0, 1e-10, 0.25], dtype=mg.float64)
    assert x.rsqrt().tolist() == pytest.approx([0.5, 1e5, 2.0])
    assert mg.log1p(x).tolist()[1] == pytest.approx(1e-10, rel=1e-12)
    assert mg.expm1(x).tolist()[1] == pytest.approx(1e-10, rel=1e-12)


# ---------------------------------------------------------------------------- sorting


def test_sort_argsort_topk_give_int64_indices_and_keep_ties_in_order():
    x = mg.tensor([[2.0, 1.0, 2.0, 0.0, 1.0]])
    v, i = mg.sort(x)
    assert i.dtype == np.int64 and i.tolist() == [[3, 1, 4, 0, 2]]
    assert v.tolist() == [[0.0, 1.0, 1.0, 2.0, 2.0]]
    d = x.sort(descending=True)
    assert d.indices.tolist() == [[0, 2, 1, 4, 3]] and d.values.tolist() == [[2, 2, 1, 1, 0]]
    assert mg.argsort(x, dim=1, descending=True).tolist() == [[0, 2, 1, 4, 3]]
    assert mg.argsort(x).dtype == np.int64
    t = mg.topk(x, 3)
    assert t.indices.dtype == np.int64 and t.indices.tolist() == [[0, 2, 1]]
    s = x.topk(2, largest=False)
    assert s.values.tolist() == [[0.0, 1.0]] and s.indices.tolist() == [[3, 1]]
    assert mg.topk(x, 0).values.shape == (1, 0)


def test_topk_gradient_goes_to_the_chosen_elements():
    x = mg.tensor([3.0, 1.0, 4.0, 1.5], requires_grad=True)
    v, _ = x.topk(2)
    (v * mg.tensor([10.0, 1.0])).sum().backward()
    assert x.grad.tolist() == [1.0, 0.0, 10.0, 0.0]


def test_topk_k_out_of_range_is_an_index_error():
    with pytest.raises(IndexError, match=r"topk: k=4 is out of range .* size 3"):
        mg.topk(mg.ones(3), 4)
    with pytest.raises(IndexError, match="Dimension out of range"):
        mg.sort(mg.ones(3), dim=1)


# ---------------------------------------------------------------------------- indexing


def test_index_checks_name_the_function_before_anything_runs():
    x = mg.ones(2, 3, requires_grad=True)
    with pytest.raises(IndexError, match=r"index_select: index 3 is out of bounds .* size 3"):
        mg.index_select(x, 1, mg.tensor([0, 3]))
    with pytest.raises(IndexError, match=r"index_select: index -1 is out of bounds"):
        x.index_select(0, mg.tensor([-1]))
    with pytest.raises(IndexError, match=r"scatter: index 2 is out of bounds .* size 2"):
        mg.scatter(x, 0, mg.tensor([[2, 0, 0]]), mg.ones(1, 3))
    with pytest.raises(IndexError, match=r"take_along_dim: index 5 is out of bounds"):
        mg.take_along_dim(x, mg.tensor([[5]]), 1)
    with pytest.raises(IndexError, match=r"one_hot: class index 3 is out of range"):
        F.one_hot(mg.tensor([0, 3]), 3)
    with pytest.raises(TypeError, match="index_select: index must be an integer tensor"):
        mg.index_select(x, 0, mg.tensor([0.0]))
    assert x.grad is None


def test_scatter_shape_checks():
    x = mg.zeros(2, 3)
    with pytest.raises(ShapeError, match="no larger than src"):
        mg.scatter(x, 1, mg.tensor([[0, 1]]), mg.ones(1, 1))
    with pytest.raises(ShapeError, match="as many dimensions as input"):
        mg.scatter(x, 1, mg.tensor([0, 1]), mg.ones(2))
    with pytest.raises(TypeError, match="give src or value, not both"):
        mg.scatter(x, 1, mg.tensor([[0]]), mg.ones(1, 1), value=1.0)


def test_a_saved_index_changed_in_place_makes_backward_raise():
    x = mg.randn(3, 4, requires_grad=True)
    src = mg.randn(3, 2, requires_grad=True)
    index = mg.tensor([[0, 1], [2, 3], [1, 0]])
    out = mg.scatter(x, 1, index, src)
    index[0, 0] = 3
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
    index = mg.tensor([[1], [0], [3]])
    picked = mg.gather(x, 1, index)
    index.add_(0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        picked.sum().backward()


def test_index_select_keeps_a_private_copy_of_its_index():
    x = mg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    index = mg.tensor([2, 2, 0])
    y = mg.index_select(x, 0, index)
    index.fill_(1)
    y.sum().backward()
    assert x.grad.tolist() == [1.0, 0.0, 2.0]


def test_scatter_gives_a_repeated_position_one_winner_and_only_it_a_gradient():
    x = mg.zeros(1, 2, requires_grad=True)
    src = mg.tensor([[5.0, 6.0, 7.0]], requires_grad=True)
    out = mg.scatter(x, 1, mg.tensor([[1, 1, 0]]), src)
    won = out.tolist()[0][1]
    assert won in (5.0, 6.0) and out.tolist()[0][0] == 7.0
    out.sum().backward()
    assert x.grad.tolist() == [[0.0, 0.0]]
    assert src.grad.tolist() == [[1.0 if won == 5.0 else 0.0, 1.0 if won == 6.0 else 0.0, 1.0]]


def test_scatter_value_and_reduce_add():
    x = mg.zeros(2, 2)
    assert mg.scatter(x, 0, mg.tensor([[1, 0]]), value=3.0).tolist() == [[0, 3], [3, 0]]
    added = x.scatter(1, mg.tensor([[0, 0], [1, 1]]), mg.ones(2, 2), reduce="add")
    assert added.tolist() == [[2.0, 0.0], [0.0, 2.0]]
    with pytest.raises(ValueError, match="reduce must be None or 'add'"):
        x.scatter(1, mg.tensor([[0]]), mg.ones(1, 1), reduce="multiply")


def test_masked_fill_keeps_dtype_and_checks_the_mask():
    t = mg.tensor([1, 2, 3])
    r = t.masked_fill(mg.tensor([True, False, True]), 9.7)
    assert r.dtype == np.int64 and r.tolist() == [9, 2, 9]
    with pytest.raises(TypeError, match="masked_fill: mask must be a bool tensor"):
        t.masked_fill(mg.tensor([1, 0, 1]), 0)
    with pytest.raises(ShapeError, match="does not broadcast to input"):
        t.masked_fill(mg.tensor([[True], [False]]), 0)


def test_repeat_and_repeat_interleave():
    x = mg.tensor([[1.0, 2.0]])
    assert x.repeat(2, 2).tolist() == [[1, 2, 1, 2], [1, 2, 1, 2]]
    assert x.repeat(2, 1, 1).shape == (2, 1, 2)
    with pytest.raises(ValueError, match="at least the number of dimensions"):
        x.repeat(2)
    assert mg.repeat_interleave(mg.tensor([[1, 2], [3, 4]]), 2).tolist() == [1, 1, 2, 2, 3, 3,
                                                                               4, 4]
    assert mg.tensor([[1, 2], [3, 4]]).repeat_interleave(mg.tensor([1, 2]), dim=0).tolist() == [
        [1, 2], [3, 4], [3, 4]]
    with pytest.raises(ShapeError, match="one entry or one per element"):
        mg.repeat_interleave(x, mg.tensor([1, 2, 3]), dim=1)


def test_tril_triu_roll_flip():
    x = mg.arange(1.0, 10.0).reshape(3, 3)
    assert x.tril().tolist() == [[1, 0, 0], [4, 5, 0], [7, 8, 9]]
    assert mg.triu(x, 1).tolist() == [[0, 2, 3], [0, 0, 6], [0, 0, 0]]
    with pytest.raises(ShapeError, match="tril: input must have at least 2 dimensions"):
        mg.tril(mg.ones(3))
    assert mg.roll(x, 1, 0).tolist()[0] == [7, 8, 9]
    assert x.roll((1, 1), (0, 1)).tolist()[0] == [9, 7, 8]
    flipped = x.flip(0)
    assert flipped.tolist()[0] == [7, 8, 9] and not np.shares_memory(flipped.numpy(), x.numpy())


# ---------------------------------------------------------------------------- reductions


def test_cumsum_and_prod_of_integers_are_int64():
    assert mg.cumsum(mg.tensor([1, 2, 3], dtype=mg.int32), 0).dtype == np.int64
    assert mg.cumsum(mg.tensor([True, True]), 0).tolist() == [1, 2]
    assert mg.prod(mg.tensor([2, 3], dtype=mg.int32)).dtype == np.int64
    assert mg.prod(mg.tensor([2, 3, 4])).item() == 24
    assert mg.prod(mg.ones(2, 0), 1).tolist() == [1.0, 1.0]
    assert mg.cumsum(mg.tensor([1.0, 2.0]), 0, dtype=mg.float64).dtype == np.float64


def test_cumprod_of_integers_is_int64_and_a_0d_input_keeps_its_shape():
    assert mg.cumprod(mg.tensor([1, 2, 3], dtype=mg.int32), 0).dtype == np.int64
    assert mg.cumprod(mg.tensor([2, 3, 4]), 0).tolist() == [2, 6, 24]
    assert mg.cumprod(mg.tensor([True, False, True]), 0).tolist() == [1, 0, 0]
    assert mg.cumprod(mg.tensor(3.0), 0).shape == ()
    assert mg.cumprod(mg.tensor([1.0, 2.0]), -1, dtype=mg.float64).dtype == np.float64
    with pytest.raises(IndexError, match="cumprod"):
        mg.cumprod(mg.tensor([1.0, 2.0]), 1)


def test_cumprod_gradient_at_zeros_is_each_products_derivative():
    x = mg.tensor([2.0, 0.0, 3.0, 0.0, 5.0], dtype=mg.float64, requires_grad=True)
    mg.cumprod(x, 0).sum().backward()
    # d/dx0 of (x0 + x0x1 + ...) = 1 + x1 + ... = 1; d/dx1 = x0 (1 + x2 + x2x3 + ...) = 8
    assert x.grad.tolist() == [1.0, 8.0, 0.0, 0.0, 0.0]


def test_prod_gradient_at_zeros_is_the_product_of_the_others():
    x = mg.tensor([2.0, 0.0, 3.0, 5.0], requires_grad=True)
    x.prod().backward()
    assert x.grad.tolist() == [0.0, 30.0, 0.0, 0.0]
    y = mg.tensor([0.0, 4.0, 0.0], requires_grad=True)
    y.prod().backward()
    assert y.grad.tolist() == [0.0, 0.0, 0.0]


def test_norms():
    x = mg.tensor([[3.0, -4.0], [0.0, 0.0]], requires_grad=True)
    n = x.norm(dim=1)
    assert n.tolist() == [5.0, 0.0]
    n.sum().backward()
    assert x.grad.numpy().ravel().tolist() == pytest.approx([0.6, -0.8, 0.0, 0.0])
    v = mg.tensor([1.0, -2.0, 0.0])
    assert mg.linalg.vector_norm(v, 0).item() == 2.0
    assert mg.linalg.vector_norm(v, math.inf).item() == 2.0
    assert mg.linalg.vector_norm(v, -math.inf).item() == 0.0
    assert mg.norm(v, p=1).item() == 3.0
    assert mg.norm(v, 3).item() == pytest.approx(9 ** (1 / 3))
    with pytest.raises(NotImplementedError, match="p='nuc' is not supported"):
        mg.norm(x, p="nuc")
    with pytest.raises(TypeError, match="vector_norm: expected a floating point tensor"):
        mg.linalg.vector_norm(mg.tensor([1, 2]))


# ---------------------------------------------------------------------------- products


def test_einsum_matches_numpy_and_checks_its_equation():
    rng = np.random.default_rng(0)
    a, b, c = rng.standard_normal((2, 3)), rng.standard_normal((3, 4)), rng.standard_normal(4)
    got = mg.einsum("ij,jk,k->i", mg.tensor(a), mg.tensor(b), mg.tensor(c)).numpy()
    np.testing.assert_allclose(got, np.einsum("ij,jk,k->i", a, b, c))
    bcast = mg.einsum("...ij,...jk", mg.ones(5, 1, 2, 3), mg.ones(4, 3, 2))
    assert bcast.shape == (5, 4, 2, 2) and bcast.tolist()[0][0][0] == [3.0, 3.0]
    assert mg.einsum("ij", mg.ones(2, 3)).shape == (2, 3)
    assert mg.einsum("ba", mg.ones(2, 3)).shape == (3, 2)
    assert mg.einsum("ij->", [mg.ones(2, 3)]).item() == 6.0
    with pytest.raises(NotImplementedError, match="repeated within one operand"):
        mg.einsum("ii->i", mg.ones(2, 2))
    with pytest.raises(ShapeError, match="subscript 'j' has sizes 3 and 4"):
        mg.einsum("ij,jk->ik", mg.ones(2, 3), mg.ones(4, 2))
    with pytest.raises(ValueError, match="names 2 operands, got 1"):
        mg.einsum("ij,jk->ik", mg.ones(2, 3))


def test_matrix_product_helpers():
    with pytest.raises(ShapeError, match="bmm: input must be 3-D"):
        mg.bmm(mg.ones(2, 3), mg.ones(3, 2))
    with pytest.raises(ShapeError, match="do not fit"):
        mg.bmm(mg.ones(2, 2, 3), mg.ones(3, 3, 2))
    nan = mg.full((2, 2), math.nan)
    assert mg.addmm(nan, mg.eye(2), mg.eye(2), beta=0).tolist() == [[1, 0], [0, 1]]
    with pytest.raises(ShapeError, match="outer: vec2 must be 1-D"):
        mg.outer(mg.ones(2), mg.ones(2, 1))
    with pytest.raises(ShapeError, match="addmm: input of shape"):
        mg.addmm(mg.ones(3), mg.ones(2, 2), mg.ones(2, 2))


# ---------------------------------------------------------------------------- functional


def test_interpolate_gives_pytorchs_values():
    x = mg.tensor([[[[1.0, 2.0], [3.0, 4.0]]]])
    bilinear = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
    assert bilinear.numpy()[0, 0].tolist() == [[1.0, 1.25, 1.75, 2.0], [1.5, 1.75, 2.25, 2.5],
                                               [2.5, 2.75, 3.25, 3.5], [3.0, 3.25, 3.75, 4.0]]
    corners = F.interpolate(x, size=(3, 3), mode="bilinear", align_corners=True)
    assert corners.numpy()[0, 0].tolist() == [[1.0, 1.5, 2.0], [2.0, 2.5, 3.0], [3.0, 3.5, 4.0]]
    nearest = F.interpolate(x, scale_factor=2)
    assert nearest.numpy()[0, 0].tolist() == [[1, 1, 2, 2], [1, 1, 2, 2], [3, 3, 4, 4],
                                              [3, 3, 4, 4]]
    assert F.interpolate(mg.tensor([[[0.0, 1.0, 2.0]]]), size=2).tolist() == [[[0.0, 1.0]]]
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        F.interpolate(x)
    with pytest.raises(NotImplementedError, match="mode='bicubic' is not supported"):
        F.interpolate(x, scale_factor=2, mode="bicubic")
    with pytest.raises(ShapeError, match="mode='bilinear' takes 4-D input"):
        F.interpolate(mg.ones(1, 1, 4), scale_factor=2, mode="bilinear")


def test_pad_modes_and_errors():
    x = mg.tensor([[1.0, 2.0, 3.0]])
    assert F.pad(x, (1, 1)).tolist() == [[0, 1, 2, 3, 0]]
    assert F.pad(x, (0, 0, 1, 0), value=-1.0).tolist() == [[-1, -1, -1], [1, 2, 3]]
    assert F.pad(x, (-1, 1)).tolist() == [[2, 3, 0]]
    assert F.pad(x, (2, 2), mode="reflect").tolist() == [[3, 2, 1, 2, 3, 2, 1]]
    assert F.pad(x, (1, 2), mode="replicate").tolist() == [[1, 1, 2, 3, 3, 3]]
    assert F.pad(x, (1, 1), mode="circular").tolist() == [[3, 1, 2, 3, 1]]
    with pytest.raises(ValueError, match="reflect padding must be smaller"):
        F.pad(x, (3, 0), mode="reflect")
    with pytest.raises(ValueError, match="even length"):
        F.pad(x, (1,))
    with pytest.raises(ValueError, match="mode must be 'constant'"):
        F.pad(x, (1, 1), mode="edge")


def test_pad_widths_may_be_one_element_integer_tensors():
    # as PyTorch code computes them: diff = mg.tensor([a - b]); pad(x, [diff // 2, ...])
    x = mg.tensor([[1.0, 2.0, 3.0]])
    diff = mg.tensor([3])
    assert F.pad(x, [diff // 2, diff - diff // 2]).tolist() == [[0, 1, 2, 3, 0, 0]]
    assert F.pad(x, (mg.tensor(1), 0)).tolist() == [[0, 1, 2, 3]]
    for bad in ([1.5, 1], [True, 1], [mg.tensor([1, 2]), 0], [mg.tensor([1.0]), 0]):
        with pytest.raises(TypeError, match="pad: pad must be a sequence of ints"):
            F.pad(x, bad)


def test_pad_gradient_crops_and_fills():
    x = mg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = F.pad(x, (-1, 2))
    (y * mg.tensor([10.0, 20.0, 30.0, 40.0])).sum().backward()
    assert x.grad.tolist() == [0.0, 10.0, 20.0]


def test_one_hot():
    assert F.one_hot(mg.tensor([2, 0])).tolist() == [[0, 0, 1], [1, 0, 0]]
    assert F.one_hot(mg.tensor([1]), 4).dtype == np.int64
    with pytest.raises(TypeError, match="one_hot: expected an int64 tensor"):
        F.one_hot(mg.tensor([1.0]))


# ---------------------------------------------------------------------------- random


def _seeded(fn):
    mg.manual_seed(11)
    a = fn()
    mg.manual_seed(11)
    return a, fn()


def test_random_ops_are_reproducible_with_manual_seed():
    for fn in (lambda: mg.bernoulli(mg.full((20,), 0.5)),
               lambda: mg.multinomial(mg.tensor([[1.0, 2.0, 3.0]] * 2), 2),
               lambda: mg.zeros(5).normal_(1.0, 2.0),
               lambda: mg.zeros(5).uniform_(-1, 1),
               lambda: mg.randn_like(mg.zeros(3)),
               lambda: mg.rand_like(mg.zeros(3)),
               lambda: mg.randperm(6)):
        a, b = _seeded(fn)
        assert a.tolist() == b.tolist()


def test_bernoulli_frequencies_and_checks():
    mg.manual_seed(0)
    draws = mg.bernoulli(mg.tensor([0.0, 0.25, 1.0]).expand(4000, 3))
    assert draws.dtype == np.float32
    freq = draws.mean(0).tolist()
    assert freq[0] == 0.0 and freq[2] == 1.0 and abs(freq[1] - 0.25) < 0.03
    assert mg.ones(3, dtype=mg.float64).bernoulli(0.0).tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(RuntimeError, match=r"bernoulli: probabilities must be in \[0, 1\]"):
        mg.bernoulli(mg.tensor([1.5]))


def test_multinomial_draws():
    mg.manual_seed(0)
    rows = mg.multinomial(mg.tensor([1.0, 0.0, 1.0, 1.0]).expand(50, 4), 3)
    assert rows.dtype == np.int64 and rows.shape == (50, 3)
    assert all(sorted(r) == [0, 2, 3] for r in rows.tolist())
    many = mg.multinomial(mg.tensor([1.0, 3.0]), 4000, replacement=True)
    assert many.shape == (4000,) and abs(many.float().mean().item() - 0.75) < 0.03
    with pytest.raises(RuntimeError, match="without replacement"):
        mg.multinomial(mg.tensor([1.0, 0.0]), 2)
    with pytest.raises(RuntimeError, match="positive sum"):
        mg.multinomial(mg.tensor([0.0, 0.0]), 1, replacement=True)


def test_in_place_fills_follow_the_in_place_rules():
    mg.manual_seed(0)
    t = mg.zeros(20000, dtype=mg.float64).normal_(2.0, 0.5)
    assert abs(t.mean().item() - 2.0) < 0.02 and abs(t.std().item() - 0.5) < 0.02
    u = mg.zeros(20000).uniform_(-1.0, 3.0)
    assert u.min().item() >= -1.0 and u.max().item() < 3.0
    assert abs(u.mean().item() - 1.0) < 0.05
    w = mg.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="uniform_: a leaf Variable that requires grad"):
        w.uniform_()
    with mg.no_grad():
        w.normal_()
    assert w._version == 1
    x = mg.ones(3, requires_grad=True)
    y = x * 2
    z = y * y
    y.uniform_()  # y is saved by z's backward
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()
    with pytest.raises(TypeError, match="normal_: expected a floating point tensor"):
        mg.zeros(2, dtype=mg.long).normal_()
