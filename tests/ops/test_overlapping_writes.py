"""In-place writes whose value shares memory with the tensor written: refused where PyTorch
refuses them, and otherwise computed as if the value were read in full first, in grad mode and
out of it (NOTE [ Overlapping writes ] in memgrad/ops/inplace.py)."""

import numpy as np
import pytest

import memgrad as mg

I2 = np.array([0, 1])


def _np(write):
    """The expected values of a write that is allowed: NumPy on a copy of the value."""
    def run(a):
        write(a)
        return a
    return run


# name: (the memgrad write, the expected values from NumPy, or None where it must raise)
CASES = {
    "x.add_(x)": (lambda x: x.add_(x), _np(lambda a: a.__iadd__(a.copy()))),
    "x.mul_(x.view(4, 4))": (lambda x: x.mul_(x.view(4, 4)), _np(lambda a: a.__imul__(a.copy()))),
    "x.copy_(x)": (lambda x: x.copy_(x), _np(lambda a: None)),
    "x[:] = x": (lambda x: x.__setitem__(slice(None), x), _np(lambda a: None)),
    "x[0] = x[0]": (lambda x: x.__setitem__(0, x[0]), _np(lambda a: None)),
    "x[0] = x[1]": (lambda x: x.__setitem__(0, x[1]), _np(lambda a: a.__setitem__(0, a[1].copy()))),
    "x[0] = x[0, 0:1]": (lambda x: x.__setitem__(0, x[0, 0:1]),
                         _np(lambda a: a.__setitem__(0, a[0, 0:1].copy()))),
    "x[:] = x[0, 0]": (lambda x: x.__setitem__(slice(None), x[0, 0]),
                       _np(lambda a: a.fill(a[0, 0]))),
    "x.fill_(x[0, 0])": (lambda x: x.fill_(x[0, 0]), _np(lambda a: a.fill(a[0, 0]))),
    "x[:, :2] = x[:, 2:]": (lambda x: x.__setitem__((slice(None), slice(0, 2)), x[:, 2:]),
                            _np(lambda a: a.__setitem__((slice(None), slice(0, 2)),
                                                        a[:, 2:].copy()))),
    "x[0].copy_(x[:, 0])": (lambda x: x[0].copy_(x[:, 0]),
                            _np(lambda a: a[0].__setitem__(slice(None), a[:, 0].copy()))),
    "x.view(-1)[:4].add_(x[1])": (lambda x: x.view(-1)[:4].add_(x[1]),
                                  _np(lambda a: a.reshape(-1)[:4].__iadd__(a[1].copy()))),
    "x[x > 3] = x[0, 0]": (lambda x: x.__setitem__(x > 3, x[0, 0]),
                           _np(lambda a: a.__setitem__(a > 3, a[0, 0].copy()))),
    "x[x > 3] = x[x > 3]": (lambda x: x.__setitem__(x > 3, x[x > 3]), _np(lambda a: None)),
    "x.add_(x[0])": (lambda x: x.add_(x[0]), None),
    "x.add_(x[0, 0])": (lambda x: x.add_(x[0, 0]), None),
    "x.add_(x.t())": (lambda x: x.add_(x.t()), None),
    "x.sub_(x.t(), alpha=2)": (lambda x: x.sub_(x.t(), alpha=2), None),
    "x.clamp_(min=x[0])": (lambda x: x.clamp_(min=x[0]), None),
    "x.copy_(x.t())": (lambda x: x.copy_(x.t()), None),
    "x.copy_(x[0])": (lambda x: x.copy_(x[0]), None),
    "x[1:].copy_(x[:-1])": (lambda x: x[1:].copy_(x[:-1]), None),
    "x[1:] = x[:-1]": (lambda x: x.__setitem__(slice(1, None), x[:-1]), None),
    "x[1:3] = x[2:4][None]": (lambda x: x.__setitem__(slice(1, 3), x[2:4][None]), None),
    "x[i] = x": (lambda x: x.__setitem__(mg.tensor([0, 1, 3, 2]), x), None),
    "x[i] = x[2]": (lambda x: x.__setitem__(mg.tensor(I2), x[2]), None),
    "x[i] = x[0, 0]": (lambda x: x.__setitem__(mg.tensor(I2), x[0, 0]), None),
    "x[x > -1] = x.view(-1)": (lambda x: x.__setitem__(x > -1, x.view(-1)), None),
    "x.scatter_(0, i, x)": (lambda x: x.scatter_(0, mg.zeros(4, 4, dtype=mg.long), x), None),
    "x.scatter_add_(0, i, x)": (lambda x: x.scatter_add_(0, mg.zeros(4, 4, dtype=mg.long), x),
                                None),
}


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("name", list(CASES))
def test_overlapping_writes_are_refused_or_read_the_value_first(name, grad):
    write, expected = CASES[name]
    start = np.arange(16.0).reshape(4, 4)
    x = mg.tensor(start.copy())
    if grad:
        x = mg.tensor(start.copy(), requires_grad=True) * 1
    if expected is None:
        with pytest.raises(RuntimeError, match="are the same memory.*clone"):
            write(x)
        return
    write(x)
    np.testing.assert_array_equal(x.detach().numpy(), expected(start.copy()))


def test_an_overlapping_write_in_grad_mode_gives_the_gradient_of_reading_first():
    leaf = mg.tensor(np.arange(1.0, 17.0).reshape(4, 4), requires_grad=True)
    x = leaf * 1
    x[0] = x[1]
    (x * mg.arange(16.0).view(4, 4)).sum().backward()
    w = np.arange(16.0).reshape(4, 4)
    expected = w.copy()
    expected[0] = 0
    expected[1] += w[0]
    np.testing.assert_array_equal(leaf.grad.numpy(), expected)


def test_an_index_tensor_that_is_the_tensor_written_is_refused():
    i = mg.tensor([0, 1, 2, 3])
    with pytest.raises(RuntimeError, match="__setitem__: some elements of the index"):
        i[i] = 0
