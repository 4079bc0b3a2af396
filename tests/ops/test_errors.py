"""Bad input gives clear errors: the right exception type, naming the API, what was expected
and what came."""

from __future__ import annotations

import re

import numpy as np
import pytest

import memgrad as mg


def raises(exc, *fragments: str):
    """``pytest.raises`` that also requires every fragment in the message (literally)."""
    return pytest.raises(exc, match="(?s)" + "".join(f"(?=.*{re.escape(f)})" for f in fragments))


# ---------------------------------------------------------------------------- shapes


@pytest.mark.parametrize(
    "fn,api",
    [
        (lambda a, b: a + b, "add"),
        (lambda a, b: a - b, "sub"),
        (lambda a, b: a * b, "mul"),
        (lambda a, b: a / b, "div"),
        (lambda a, b: a**b, "pow"),
        (mg.add, "add"),
        (mg.maximum, "maximum"),
        (mg.minimum, "minimum"),
        (lambda a, b: mg.where(a > 0, a, b), "where"),
    ],
    ids=["+", "-", "*", "/", "**", "mg.add", "maximum", "minimum", "where"],
)
def test_broadcast_mismatch_raises_shape_error_naming_op_and_shapes(fn, api):
    a, b = mg.ones(2, 3), mg.ones(4)
    with raises(mg.ShapeError, api, "(2, 3)", "(4,)") as info:
        fn(a, b)
    assert isinstance(info.value, RuntimeError)
    assert isinstance(info.value, mg.MemgradError)


def test_broadcast_mismatch_with_requires_grad_records_nothing():
    x = mg.ones(2, 3, requires_grad=True)
    with raises(mg.ShapeError, "mul", "(2, 3)", "(3, 1)"):
        x * mg.ones(3, 1)
    assert x.grad is None


@pytest.mark.parametrize("sx,sy", [((2, 3), (4, 5)), ((3,), (4,)), ((2, 3), (2,)),
                                   ((5,), (4, 2)), ((2, 3, 4), (3, 5, 2))], ids=str)
def test_matmul_mismatch_names_both_shapes(sx, sy):
    with raises(RuntimeError, "matmul", str(sx), str(sy)):
        mg.ones(*sx) @ mg.ones(*sy)
    with raises(mg.ShapeError, "matmul", str(sx), str(sy)):
        mg.matmul(mg.ones(*sx), mg.ones(*sy))


def test_matmul_with_a_0d_operand():
    with raises(RuntimeError, "matmul", "at least one dimension"):
        mg.matmul(mg.tensor(2.0), mg.ones(3))


def test_cat_with_mismatched_shapes():
    with raises(mg.ShapeError, "cat", "(2, 4)", "(2, 3)", "dimension 0"):
        mg.cat([mg.ones(2, 3), mg.ones(2, 4)])
    with raises(mg.ShapeError, "cat", "(3,)", "(2, 3)"):
        mg.cat([mg.ones(2, 3), mg.ones(3)])
    with raises(mg.ShapeError, "cat", "(3, 2)", "dimension 1"):
        mg.cat([mg.ones(2, 2), mg.ones(3, 2)], dim=1)
    with raises(ValueError, "cat", "non-empty"):
        mg.cat([])
    with raises(TypeError, "cat", "position 1"):
        mg.cat([mg.ones(2), np.ones(2)])


def test_stack_with_mismatched_shapes():
    with raises(mg.ShapeError, "stack", "(2, 3)", "(3, 2)"):
        mg.stack([mg.ones(2, 3), mg.ones(3, 2)])


def test_view_on_non_contiguous_tensor_suggests_reshape():
    t = mg.ones(2, 3).T
    with raises(RuntimeError, "view", "(3, 2)", "reshape"):
        t.view(6)
    assert t.reshape(6).shape == (6,)  # the suggested fix works


def test_view_and_reshape_with_wrong_size():
    with raises(RuntimeError, "(2, 3)", "(4,)"):
        mg.ones(2, 3).view(4)
    with raises(mg.ShapeError, "reshape", "(2, 3)", "(4,)"):
        mg.ones(2, 3).reshape(4)


def test_expand_errors():
    with raises(mg.ShapeError, "expand", "(2, 3)"):
        mg.ones(2, 3).expand(4, 3)
    with raises(ValueError, "expand", "number of sizes"):
        mg.ones(2, 3).expand(3)


def test_permute_requires_a_permutation():
    with raises(ValueError, "permute", "(0, 0)", "(2, 3)"):
        mg.ones(2, 3).permute(0, 0)


def test_split_and_chunk_errors():
    with raises(ValueError, "split", "[2, 2]", "5"):
        mg.ones(5).split([2, 2])
    with raises(ValueError, "split", "positive"):
        mg.ones(5).split(0)
    with raises(ValueError, "chunk", "positive"):
        mg.ones(5).chunk(0)


def test_setitem_shape_mismatch_names_both_shapes():
    t = mg.ones(2, 3)
    with raises(ValueError, "(4,)", "(3,)"):
        t[0] = mg.ones(4)


def test_inplace_broadcast_mismatch():
    with raises(ValueError, "add_", "(3,)", "(2,3)"):
        mg.ones(3).add_(mg.ones(2, 3))
    with raises(RuntimeError, "add_", "read-only", "clone"):
        mg.ones(3, 1).expand(3, 3).add_(1.0)


def test_backward_with_a_gradient_of_the_wrong_shape():
    y = mg.ones(3, requires_grad=True) * 2
    with raises(RuntimeError, "backward", "(2,)", "(3,)"):
        y.backward(mg.ones(2))


# ---------------------------------------------------------------------------- dims


DIM_CASES = [
    ("sum", lambda t: t.sum(dim=2), 2),
    ("sum-neg", lambda t: t.sum(dim=-3), -3),
    ("sum-tuple", lambda t: t.sum(dim=(0, 5)), 5),
    ("mean", lambda t: t.mean(2), 2),
    ("var", lambda t: mg.var(t, -3), -3),
    ("std", lambda t: t.std(dim=2), 2),
    ("amax", lambda t: t.amax(2), 2),
    ("amin", lambda t: mg.amin(t, (0, -3)), -3),
    ("max", lambda t: t.max(dim=2), 2),
    ("min", lambda t: mg.min(t, -3), -3),
    ("logsumexp", lambda t: t.logsumexp(dim=2), 2),
    ("softmax", lambda t: t.softmax(dim=2), 2),
    ("log_softmax", lambda t: mg.log_softmax(t, -3), -3),
    ("argmax", lambda t: t.argmax(dim=-3), -3),
    ("argmin", lambda t: t.argmin(dim=2), 2),
    ("unsqueeze", lambda t: t.unsqueeze(3), 3),
    ("transpose", lambda t: t.transpose(0, 2), 2),
    ("squeeze", lambda t: t.squeeze(2), 2),
    ("flatten", lambda t: t.flatten(0, 2), 2),
    ("cat", lambda t: mg.cat([t, t], dim=2), 2),
    ("split", lambda t: t.split(1, dim=2), 2),
    ("chunk", lambda t: t.chunk(2, dim=-3), -3),
    ("stack", lambda t: mg.stack([t, t], dim=4), 4),
]


@pytest.mark.parametrize("label,fn,bad", DIM_CASES, ids=[c[0] for c in DIM_CASES])
def test_dim_out_of_range(label, fn, bad):
    with raises(IndexError, "Dimension out of range", f"got {bad})"):
        fn(mg.ones(2, 3))


@pytest.mark.parametrize(
    "label,fn,bad",
    [c for c in DIM_CASES if c[0] != "stack"],  # stack is cat of unsqueezed tensors
    ids=[c[0] for c in DIM_CASES if c[0] != "stack"],
)
def test_dim_out_of_range_names_the_api(label, fn, bad):
    api = label.split("-")[0]
    with raises(IndexError, "Dimension out of range") as info:
        fn(mg.ones(2, 3))
    assert str(info.value).startswith(f"{api}:"), str(info.value)


def test_dim_named_twice():
    with raises(ValueError, "sum", "twice"):
        mg.ones(2, 3).sum(dim=(0, -2))


def test_dim_of_a_wrong_type():
    with raises(TypeError, "sum", "dim must be an int or a tuple of ints", "1.0"):
        mg.ones(2).sum(dim=1.0)
    with raises(TypeError, "mean", "dim must be an int or a tuple of ints"):
        mg.ones(2).mean(dim=(0, "a"))


# ---------------------------------------------------------------------------- autograd misuse


@pytest.mark.parametrize(
    "make",
    [
        lambda: mg.tensor([1, 2], requires_grad=True),
        lambda: mg.tensor([1, 2]).requires_grad_(),
        lambda: mg.zeros(2, dtype=mg.int64, requires_grad=True),
        lambda: setattr(mg.arange(3), "requires_grad", True),
        lambda: mg.tensor([True, False]).requires_grad_(True),
    ],
    ids=["tensor", "requires_grad_", "zeros", "setter", "bool"],
)
def test_requires_grad_on_a_non_float_tensor(make):
    with raises(RuntimeError, "floating point"):
        make()


def test_item_on_a_multi_element_tensor():
    with raises(RuntimeError, "item", "4 elements", "(2, 2)"):
        mg.ones(2, 2).item()
    assert mg.ones(1, 1).item() == 1.0
    with raises(RuntimeError, "ambiguous"):
        bool(mg.ones(2))


@pytest.mark.parametrize("shape", [(3,), (2, 2), (1, 2)], ids=str)
def test_backward_on_a_non_scalar_mentions_the_shape(shape):
    y = mg.ones(*shape, requires_grad=True) * 2
    with raises(RuntimeError, "backward", "scalar", str(shape)):
        y.backward()


def test_backward_on_a_single_element_non_0d_tensor_works():
    x = mg.ones(1, 1, requires_grad=True)
    (x * 3).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[3.0]])


def test_backward_on_a_tensor_that_does_not_require_grad():
    with raises(RuntimeError, "does not require grad"):
        mg.ones(3).sum().backward()


def test_inplace_on_a_leaf_that_requires_grad():
    x = mg.ones(2, requires_grad=True)
    with raises(RuntimeError, "add_", "leaf", "no_grad"):
        x.add_(1.0)
    with mg.no_grad():
        x.add_(1.0)
    np.testing.assert_array_equal(x.numpy(), [2.0, 2.0])


def test_inplace_change_of_a_saved_tensor():
    x = mg.ones(2, requires_grad=True)
    y = x * 1.0
    z = y * y
    y.add_(1.0)
    with raises(RuntimeError, "modified by an inplace operation"):
        z.sum().backward()


def test_backward_twice_without_retain_graph():
    x = mg.ones(2, requires_grad=True)
    z = (x * x).sum()
    z.backward()
    with raises(RuntimeError, "second time", "retain_graph=True"):
        z.backward()


def test_requires_grad_false_on_a_non_leaf():
    y = mg.ones(2, requires_grad=True) * 2
    with raises(RuntimeError, "leaf", "detach"):
        y.requires_grad = False


# ---------------------------------------------------------------------------- other arguments


def test_where_needs_a_bool_condition():
    with raises(TypeError, "where", "bool", "float32"):
        mg.where(mg.ones(2), mg.ones(2), mg.zeros(2))


def test_clamp_needs_a_bound():
    with raises(ValueError, "clamp", "min and max"):
        mg.ones(2).clamp()


def test_index_errors():
    with raises(IndexError, "out of bounds", "size 2"):
        mg.ones(2, 3)[5]
    with raises(IndexError, "long, int or bool", "float32"):
        mg.ones(2, 3)[mg.tensor([0.5])]


def test_reducing_an_empty_tensor():
    with raises(RuntimeError, "empty", "(0,)"):
        mg.zeros(0).max()
    with raises(RuntimeError, "argmax", "empty"):
        mg.zeros(0).argmax()


def test_tensor_from_unsupported_data():
    with raises(TypeError, "tensor", "unsupported"):
        mg.tensor(["a"])
