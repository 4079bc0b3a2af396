"""Result types for ``parse``: the shape and dtype of a binding read from text, found
without running a numba kernel and without reading a const's values.

NOTE [ Parse-time inference ]
``parse`` must learn the type of every binding in a text that may be hostile. Three rules
keep that safe and bounded:

1. Sizes first. No array of a shape exists before the shape's element count (zero-length
   dimensions counted as 1) is checked against the limit: declared shapes, shape
   parameters, and an upper bound on the binding's result computed from its operands'
   shapes alone (broadcasting, concatenation, indexing, a lookup).
2. Zeros, never data. Primitives written with NumPy alone run their forward on zero arrays
   of their operands' shapes and dtypes; a const counts as its shape and dtype, so its
   values never reach a forward. (Index arrays in parameters are literals of the binding;
   NumPy checks them when it indexes the zeros.)
3. No kernels. A primitive whose forward calls a numba kernel (kernels trust their caller:
   the public functions check shapes and indices first) and the matrix products (whose cost
   grows faster than their operands) get their result type from a rule in ``_RULES`` that
   checks what the public function checks; their forward never runs here. A new primitive
   that calls a kernel needs a rule: ``tests/jit/test_parse.py`` parses a trace of every
   sample of the op table with the kernels replaced by functions that fail.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from memgrad.autograd.graph import Meta
from memgrad.ops.nn import _causal_shape, _self_attention_shape
from memgrad.ops.registry import REGISTRY

__all__ = ["DTYPES", "elements", "result_type"]

# the dtypes a graph text may name
DTYPES = frozenset(
    ["bool", "float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8",
     "uint16", "uint32", "uint64"]
)
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def elements(shape: Iterable[int]) -> int:
    """The element count of ``shape`` with zero-length dimensions counted as 1: what bounds
    the arrays a shape leads to (a zero-size array with a huge dimension reduces to a huge
    one)."""
    return math.prod(max(int(d), 1) for d in shape)


def result_type(op: str, args: list, params: dict, max_elements: int) -> tuple[tuple, np.dtype]:
    """The ``(shape, dtype)`` of ``op`` applied to ``args`` (``Meta`` for values, else Python
    scalars or None) with ``params``; a ValueError says what does not fit."""
    for i, a in enumerate(args):
        if not (isinstance(a, (Meta, bool, int, float, np.generic)) or a is None):
            raise ValueError(
                f"argument {i} is {_describe(a)}; an argument is a value (%name), a number, a "
                "bool or None (lists, strings and arrays go in the [parameters])"
            )
    for key, value in params.items():
        if key.endswith("shape"):
            _shape_param(value, key, max_elements)
    if op == "to" and not isinstance(params.get("dtype"), np.dtype):
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {params.get('dtype')!r}")
    rule = _RULES.get(op)
    found = rule(args, params, max_elements) if rule is not None else None
    if found is None:
        found = _run_on_zeros(op, args, params, max_elements)
    shape, dtype = found
    if dtype.name not in DTYPES:
        raise ValueError(f"the result would have dtype {dtype.name}, which a graph cannot hold")
    if elements(shape) > max_elements:
        raise ValueError(
            f"the result would have shape {tuple(shape)}, more than {max_elements} elements"
        )
    return tuple(int(d) for d in shape), dtype


def _describe(a: Any) -> str:
    if isinstance(a, np.ndarray):
        return f"an array of shape {a.shape}"
    text = repr(a)
    return f"{type(a).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _shape_param(value: Any, key: str, max_elements: int) -> None:
    if not isinstance(value, (tuple, list)) or not all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in value
    ):
        raise ValueError(f"{key} must be a tuple of ints, got {_describe(value)}")
    if elements(abs(int(d)) for d in value) > max_elements:
        raise ValueError(f"{key}={tuple(value)} has more than {max_elements} elements")


def _metas(args: list) -> list[Meta]:
    return [a for a in args if isinstance(a, Meta)]


def _run_on_zeros(op: str, args: list, params: dict, max_elements: int) -> tuple:
    bound = _result_bound(op, args, params)
    if bound > max_elements:
        raise ValueError(
            f"the result could have up to {bound} elements, more than {max_elements}"
        )
    zeros = [np.zeros(a.shape, a.dtype) if isinstance(a, Meta) else a for a in args]
    out = _forward(REGISTRY[op].forward, zeros, params)
    return out.shape, out.dtype


def _forward(forward: Callable, zeros: list, params: dict) -> np.ndarray:
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return np.asarray(forward(*zeros, **params))
    except Exception as e:  # the forward's own checks: any failure means "does not fit"
        raise ValueError(f"does not accept these arguments ({type(e).__name__}: {e})") from None


def _result_bound(op: str, args: list, params: dict) -> int:
    """An upper bound on the elements of the result of a NumPy-only primitive."""
    metas = _metas(args)
    sizes = [elements(m.shape) for m in metas]
    if not metas:
        return 1
    if op in ("getitem", "index_put") and "index" in params:
        return max(sizes[0], _index_bound(metas[0].shape, params["index"]))
    if op == "cat":
        return sum(sizes)
    if op == "embedding" and len(metas) == 2:
        return sizes[0] * elements(metas[1].shape[1:])
    try:
        return max(elements(np.broadcast_shapes(*(m.shape for m in metas))), *sizes)
    except ValueError:
        return max(sizes)


def _index_item(i: Any) -> tuple[int, tuple | None]:
    """How many dimensions item ``i`` of an index takes (-1: a slice, which keeps its
    dimension) and, for an item that takes part in advanced indexing, its shape."""
    if i is None or i is Ellipsis:
        return 0, None
    if isinstance(i, (bool, np.bool_)):
        return 0, (int(i),)
    if isinstance(i, (int, np.integer)):
        return 1, ()
    if isinstance(i, slice):
        for part in (i.start, i.stop, i.step):
            if part is not None and not isinstance(part, (int, np.integer)):
                raise ValueError(f"a slice holds {_describe(part)}; use ints or None")
        return -1, None
    if isinstance(i, np.ndarray) and i.dtype.kind == "b":
        return i.ndim, (int(np.count_nonzero(i)),)
    if isinstance(i, np.ndarray) and i.dtype.kind in "iu":
        return 1, i.shape
    raise ValueError(
        f"an index holds {_describe(i)}; an index holds ints, slices, None, ..., and arrays of "
        "ints or bools (array([...], int64))"
    )


def _index_bound(shape: tuple, index: Any) -> int:
    """An upper bound on the elements of ``zeros(shape)[index]`` (dimensions a slice keeps
    count in full), from the shapes alone; a ValueError for an index NumPy would refuse."""
    items = index if isinstance(index, tuple) else (index,)
    if sum(i is Ellipsis for i in items) > 1:
        raise ValueError("an index can hold at most one ...")
    taken, advanced = [], []
    for i in items:
        n, shape_of = _index_item(i)
        taken.append(n)
        if shape_of is not None:
            advanced.append(shape_of)
    # the dimensions each item takes: from the left up to the ..., from the right after it
    cut = next((k for k, i in enumerate(items) if i is Ellipsis), len(items))
    ndim = len(shape)
    removed = set()
    at = 0
    for n in taken[:cut]:
        if n > 0:
            removed.update(range(at, at + n))
        at += abs(n)
    at = ndim
    for n in reversed(taken[cut:]):
        at -= abs(n)
        if n > 0:
            removed.update(range(at, at + n))
    kept = elements(d for k, d in enumerate(shape) if k not in removed)
    if not advanced:
        return kept
    try:
        picked = np.broadcast_shapes(*advanced)
    except ValueError:
        raise ValueError(
            f"the index arrays of shapes {[tuple(s) for s in advanced]} do not broadcast "
            "together"
        ) from None
    return kept * elements(picked)


# ---------------------------------------------------------------------------- rules


def _arity(args: list, names: tuple[str, ...]) -> None:
    if len(args) != len(names):
        raise ValueError(
            f"takes {len(names)} arguments ({', '.join(names)}), got {len(args)}"
        )


def _tensor(args: list, i: int, name: str, ndim: int | None = None) -> Meta:
    a = args[i]
    if not isinstance(a, Meta):
        raise ValueError(f"{name} must be a value (%name), got {_describe(a)}")
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {a.shape}")
    return a


def _optional(args: list, i: int, name: str) -> Meta | None:
    return None if args[i] is None else _tensor(args, i, name)


def _floating(m: Meta, name: str) -> None:
    if m.dtype not in _FLOATS:
        raise ValueError(f"{name} must be float32 or float64, got {m.dtype.name}")


def _same_shape(a: Meta, b: Meta, names: str) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{names} must have one shape, got {a.shape} and {b.shape}")


def _keys(params: dict, names: tuple[str, ...]) -> None:
    if set(params) != set(names):
        raise ValueError(
            f"takes the parameters {list(names)}, got {list(params)}"
        )


def _int(value: Any, name: str, low: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {_describe(value)}")
    if low is not None and value < low:
        raise ValueError(f"{name} must be at least {low}, got {value}")
    return int(value)


def _real(value: Any, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise ValueError(f"{name} must be a number, got {_describe(value)}")
    return float(value)


def _pair(params: dict, name: str, low: int) -> tuple[int, int]:
    value = params[name]
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"{name} must be a pair of ints, got {_describe(value)}")
    return _int(value[0], name, low), _int(value[1], name, low)


def _shape4(params: dict, name: str) -> tuple[int, int, int, int]:
    value = params[name]
    if len(value) != 4 or min(value) < 0:  # a tuple of ints: _shape_param checked it
        raise ValueError(f"{name} must be 4 non-negative sizes, got {tuple(value)}")
    return tuple(int(d) for d in value)


def _window(size: tuple, kernel: tuple, params: dict, pool: bool = False) -> tuple[int, int]:
    """The output size of a convolution or pooling window sliding over ``size``."""
    stride = _pair(params, "stride", 1)
    padding = _pair(params, "padding", 0)
    dilation = _pair(params, "dilation", 1)
    if min(kernel) < 1:
        raise ValueError(f"the kernel {kernel} has a zero size")
    if pool and (padding[0] > kernel[0] // 2 or padding[1] > kernel[1] // 2):
        raise ValueError(f"padding {padding} must be at most half of kernel_size {kernel}")
    out = []
    for s, k, st, p, d in zip(size, kernel, stride, padding, dilation):
        span = d * (k - 1) + 1
        if span > s + 2 * p:
            raise ValueError(
                f"the kernel {kernel} with dilation {dilation} spans more than the padded "
                f"input {tuple(size)} (padding {padding})"
            )
        out.append((s + 2 * p - span) // st + 1)
    return out[0], out[1]


def _groups(params: dict, channels: int, weight_shape: tuple) -> None:
    groups = _int(params["groups"], "groups", 1)
    co, cg = weight_shape[0], weight_shape[1]
    if co % groups or channels != cg * groups:
        raise ValueError(
            f"a weight of shape {tuple(weight_shape)} with groups={groups} does not fit "
            f"{channels} input channels"
        )


_CONV_KEYS = ("stride", "padding", "dilation", "groups")


def _matmul(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("x", "y"))
    _keys(params, ())
    x, y = _tensor(args, 0, "x"), _tensor(args, 1, "y")
    if x.ndim == 0 or y.ndim == 0:
        raise ValueError(f"both arguments need a dimension, got shapes {x.shape} and {y.shape}")
    k_y = y.shape[-2] if y.ndim > 1 else y.shape[0]
    if x.shape[-1] != k_y:
        raise ValueError(f"shapes {x.shape} and {y.shape} are not aligned")
    try:
        batch = np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    except ValueError:
        raise ValueError(f"the batch dimensions of {x.shape} and {y.shape} do not broadcast") \
            from None
    rows = x.shape[-2:-1]  # () for a 1-D x
    cols = y.shape[-1:] if y.ndim > 1 else ()
    return batch + rows + cols, _tiny(REGISTRY["matmul"].forward, args)


def _linear(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("x", "weight", "bias"))
    _keys(params, ())
    x, weight = _tensor(args, 0, "x"), _tensor(args, 1, "weight", ndim=2)
    if x.ndim == 0 or weight.shape[1] != x.shape[-1]:
        raise ValueError(f"x of shape {x.shape} does not fit a weight of shape {weight.shape}")
    rows = (math.prod(x.shape[:-1]), weight.shape[0])
    bias = _optional(args, 2, "bias")
    if bias is not None:
        try:
            fits = np.broadcast_shapes(bias.shape, rows) == rows
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"a bias of shape {bias.shape} does not fit {weight.shape[0]} outputs")
    shape = x.shape[:-1] + weight.shape[:1]
    # the product's and the bias's dtypes promoted, as NumPy's matmul and add promote them
    # (linear's forward calls a compiled kernel, so it does not run here)
    return shape, np.result_type(x.dtype, weight.dtype, *([] if bias is None else [bias.dtype]))


def _linear_input_grad(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("g", "weight"))
    _keys(params, ())
    g, weight = _tensor(args, 0, "g"), _tensor(args, 1, "weight", ndim=2)
    if g.ndim == 0 or g.shape[-1] != weight.shape[0]:
        raise ValueError(f"g of shape {g.shape} does not fit a weight of shape {weight.shape}")
    return g.shape[:-1] + weight.shape[1:], np.result_type(g.dtype, weight.dtype)


def _linear_weight_grad(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("g", "x"))
    _keys(params, ())
    g, x = _tensor(args, 0, "g"), _tensor(args, 1, "x")
    if g.ndim == 0 or x.ndim == 0 or g.shape[:-1] != x.shape[:-1]:
        raise ValueError(f"g of shape {g.shape} and x of shape {x.shape} must have the same "
                         "leading dims")
    return (g.shape[-1], x.shape[-1]), np.result_type(g.dtype, x.dtype)


def _linear_rows(args: list, params: dict, max_elements: int) -> tuple:
    _keys(params, ("lo", "hi"))
    lo, hi = _int(params["lo"], "lo", 0), _int(params["hi"], "hi", 1)
    weight = _tensor(args, 1, "weight", ndim=2) if len(args) == 3 else None
    if weight is None or not lo < hi <= weight.shape[0]:
        raise ValueError(f"lo={lo} and hi={hi} must pick rows 0 <= lo < hi <= the weight's")
    bias = args[2]
    if isinstance(bias, Meta) and bias.shape != weight.shape[:1]:
        raise ValueError(f"a bias of shape {bias.shape} does not fit a weight of shape "
                         f"{weight.shape}")
    rows = Meta(((hi - lo, weight.shape[1]), weight.dtype))
    part = bias if not isinstance(bias, Meta) else Meta(((hi - lo,), bias.dtype))
    return _linear([args[0], rows, part], {}, max_elements)


def _tiny(forward: Callable, args: list) -> np.dtype:
    """The dtype a NumPy-only forward gives, from a run on one-element zeros (the shapes are
    checked already; only the dtype rules are left to NumPy)."""
    zeros = [np.zeros((1,) * a.ndim, a.dtype) if isinstance(a, Meta) else a for a in args]
    return _forward(forward, zeros, {}).dtype


def _conv2d(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("x", "weight", "bias"))
    _keys(params, _CONV_KEYS)
    x, weight = _tensor(args, 0, "x", ndim=4), _tensor(args, 1, "weight", ndim=4)
    bias = _optional(args, 2, "bias")
    _floating(x, "x")
    for name, t in (("weight", weight), ("bias", bias)):
        if t is not None and t.dtype != x.dtype:
            raise ValueError(f"x ({x.dtype.name}) and {name} ({t.dtype.name}) differ in dtype")
    if bias is not None and bias.shape != weight.shape[:1]:
        raise ValueError(f"bias must have shape {weight.shape[:1]}, got {bias.shape}")
    _groups(params, x.shape[1], weight.shape)
    oh, ow = _window(x.shape[2:], weight.shape[2:], params)
    return (x.shape[0], weight.shape[0], oh, ow), x.dtype


def _conv2d_input_grad(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("g", "weight"))
    _keys(params, ("input_shape",) + _CONV_KEYS)
    g, weight = _tensor(args, 0, "g", ndim=4), _tensor(args, 1, "weight", ndim=4)
    _floating(g, "g")
    if weight.dtype != g.dtype:
        raise ValueError(f"g ({g.dtype.name}) and weight ({weight.dtype.name}) differ in dtype")
    n, c, h, w = _shape4(params, "input_shape")
    _groups(params, c, weight.shape)
    oh, ow = _window((h, w), weight.shape[2:], params)
    if g.shape != (n, weight.shape[0], oh, ow):
        raise ValueError(f"g must have shape {(n, weight.shape[0], oh, ow)}, got {g.shape}")
    return (n, c, h, w), g.dtype


def _conv2d_weight_grad(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("x", "g"))
    bias = params.get("bias", False)
    if not isinstance(bias, bool):
        raise ValueError(f"bias must be a bool, got {_describe(bias)}")
    _keys(params, ("weight_shape",) + _CONV_KEYS + (("bias",) if "bias" in params else ()))
    x, g = _tensor(args, 0, "x", ndim=4), _tensor(args, 1, "g", ndim=4)
    _floating(x, "x")
    if g.dtype != x.dtype:
        raise ValueError(f"x ({x.dtype.name}) and g ({g.dtype.name}) differ in dtype")
    weight_shape = _shape4(params, "weight_shape")
    _groups(params, x.shape[1], weight_shape)
    oh, ow = _window(x.shape[2:], weight_shape[2:], params)
    if g.shape != (x.shape[0], weight_shape[0], oh, ow):
        raise ValueError(
            f"g must have shape {(x.shape[0], weight_shape[0], oh, ow)}, got {g.shape}"
        )
    if bias:  # the weight gradient's elements, then the bias gradient's
        return (math.prod(weight_shape) + weight_shape[0],), g.dtype
    return weight_shape, g.dtype


def _max_pool2d_indices(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("x",))
    _keys(params, ("kernel_size", "stride", "padding", "dilation"))
    x = _tensor(args, 0, "x", ndim=4)
    _floating(x, "x")
    oh, ow = _window(x.shape[2:], _pair(params, "kernel_size", 1), params, pool=True)
    return x.shape[:2] + (oh, ow), np.dtype(np.int64)


def _max_pool2d(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("x", "indices"))
    _keys(params, ())
    x, indices = _tensor(args, 0, "x", ndim=4), _tensor(args, 1, "indices", ndim=4)
    _floating(x, "x")
    if indices.dtype.kind not in "iu":
        raise ValueError(f"indices must be integers, got {indices.dtype.name}")
    if indices.shape[:2] != x.shape[:2]:
        raise ValueError(f"indices of shape {indices.shape} do not fit x of shape {x.shape}")
    return indices.shape, x.dtype


_WINDOW_KEYS = ("kernel_size", "dilation", "padding", "stride")


def _unfold(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("x",))
    _keys(params, _WINDOW_KEYS)
    x = _tensor(args, 0, "x", ndim=4)
    _floating(x, "x")
    kh, kw = _pair(params, "kernel_size", 1)
    oh, ow = _window(x.shape[2:], (kh, kw), params)
    return (x.shape[0], x.shape[1] * kh * kw, oh * ow), x.dtype


def _fold(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("cols",))
    _keys(params, ("output_size",) + _WINDOW_KEYS)
    cols = _tensor(args, 0, "cols", ndim=3)
    _floating(cols, "cols")
    kh, kw = _pair(params, "kernel_size", 1)
    h, w = _pair(params, "output_size", 1)
    oh, ow = _window((h, w), (kh, kw), params)
    if cols.shape[1] % (kh * kw) or cols.shape[2] != oh * ow:
        raise ValueError(f"cols of shape {cols.shape} must be (N, C*{kh}*{kw}, {oh * ow})")
    return (cols.shape[0], cols.shape[1] // (kh * kw), h, w), cols.dtype


def _max_pool2d_backward(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("g", "indices"))
    _keys(params, ("input_shape",))
    g, indices = _tensor(args, 0, "g", ndim=4), _tensor(args, 1, "indices")
    _floating(g, "g")
    if indices.dtype.kind not in "iu":
        raise ValueError(f"indices must be integers, got {indices.dtype.name}")
    _same_shape(g, indices, "g and indices")
    shape = _shape4(params, "input_shape")
    if shape[:2] != g.shape[:2]:
        raise ValueError(f"input_shape {shape} does not fit g of shape {g.shape}")
    return shape, g.dtype


def _normalized_shape(x: Meta, params: dict) -> tuple:
    ndim = _int(params["ndim"], "ndim", 1)
    _real(params["eps"], "eps")
    if ndim > x.ndim:
        raise ValueError(f"ndim={ndim} is more than the {x.ndim} dimensions of {x.shape}")
    shape = x.shape[x.ndim - ndim:]
    if math.prod(shape) == 0:
        raise ValueError(f"cannot normalize over the empty shape {shape}")
    return shape


def _affine(args: list, i: int, name: str, shape: tuple) -> None:
    t = _optional(args, i, name)
    if t is not None and t.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {t.shape}")


def _layer_norm(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("x", "weight", "bias"))
    _keys(params, ("ndim", "eps"))
    x = _tensor(args, 0, "x")
    _floating(x, "x")
    shape = _normalized_shape(x, params)
    _affine(args, 1, "weight", shape)
    _affine(args, 2, "bias", shape)
    return x.shape, x.dtype


def _float_pair(args: list, names: tuple[str, str]) -> tuple[Meta, Meta, np.dtype]:
    a, b = _tensor(args, 0, names[0]), _tensor(args, 1, names[1])
    _floating(a, names[0])
    _floating(b, names[1])
    _same_shape(a, b, " and ".join(names))
    return a, b, np.result_type(a.dtype, b.dtype)


def _layer_norm_backward(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("g", "x", "weight"))
    _keys(params, ("ndim", "eps"))
    _, x, dtype = _float_pair(args, ("g", "x"))
    _affine(args, 2, "weight", _normalized_shape(x, params))
    return x.shape, dtype


def _layer_norm_weight_grad(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("g", "x"))
    _keys(params, ("ndim", "eps"))
    _, x, dtype = _float_pair(args, ("g", "x"))
    return _normalized_shape(x, params), dtype


def _layer_norm_grads(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("g", "x", "weight"))
    _keys(params, ("ndim", "eps"))
    _, x, dtype = _float_pair(args, ("g", "x"))
    tail = _normalized_shape(x, params)
    _affine(args, 2, "weight", tail)
    rows = math.prod(x.shape[:x.ndim - len(tail)])
    return (rows + 2, math.prod(tail)), dtype


def _dim(x: Meta, params: dict) -> None:
    dim = _int(params["dim"], "dim")
    if x.ndim and not -x.ndim <= dim < x.ndim:
        raise ValueError(f"dim={dim} is out of range for shape {x.shape}")


def _softmax(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("x",))
    _keys(params, ("dim",))
    x = _tensor(args, 0, "x")
    _floating(x, "x")
    _dim(x, params)
    return x.shape, x.dtype


def _softmax_backward(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("g", "y"))
    _keys(params, ("dim",))
    g, _, dtype = _float_pair(args, ("g", "y"))
    _dim(g, params)
    return g.shape, dtype


def _attention_softmax(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("scores",))
    _keys(params, ("scale", "causal"))
    x = _tensor(args, 0, "scores")
    _floating(x, "scores")
    if x.ndim < 2:
        raise ValueError(f"scores must have at least 2 dimensions, got shape {x.shape}")
    _real(params["scale"], "scale")
    if not isinstance(params["causal"], bool):
        raise ValueError(f"causal must be a bool, got {_describe(params['causal'])}")
    return x.shape, x.dtype


def _attention_softmax_backward(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("g", "y"))
    _keys(params, ("scale",))
    g, _, dtype = _float_pair(args, ("g", "y"))
    if g.ndim < 1:
        raise ValueError("g must have at least 1 dimension, got a 0-d value")
    _real(params["scale"], "scale")
    return g.shape, dtype


def _causal_matmul(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("a", "b"))
    _keys(params, ("form", "block"))
    a, b = _tensor(args, 0, "a"), _tensor(args, 1, "b")
    _floating(a, "a")
    _floating(b, "b")
    _int(params["block"], "block", 1)
    shape = _causal_shape(a, b, params["form"])  # a ValueError if they do not fit
    return shape, np.result_type(a.dtype, b.dtype)


def _attention_params(params: dict) -> None:
    _keys(params, ("heads", "causal", "scale"))
    _real(params["scale"], "scale")
    if not isinstance(params["causal"], bool):
        raise ValueError(f"causal must be a bool, got {_describe(params['causal'])}")


def _self_attention(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("qkv",))
    _attention_params(params)
    qkv = _tensor(args, 0, "qkv")
    _floating(qkv, "qkv")
    return _self_attention_shape(qkv.shape, params["heads"]), qkv.dtype


def _self_attention_backward(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("g", "qkv"))
    _attention_params(params)
    g, qkv = _tensor(args, 0, "g"), _tensor(args, 1, "qkv")
    _floating(qkv, "qkv")
    if g.shape != _self_attention_shape(qkv.shape, params["heads"]):
        raise ValueError(f"g of shape {g.shape} does not fit qkv of shape {qkv.shape}")
    return qkv.shape, qkv.dtype


def _classes(args: list, params: dict, x_at: int) -> Meta:
    x = _tensor(args, x_at, "x", ndim=2)
    target = _tensor(args, x_at + 1, "target", ndim=1)
    _floating(x, "x")
    if x.shape[1] == 0:
        raise ValueError(f"x of shape {x.shape} has no classes")
    if target.dtype != np.int64 or target.shape != x.shape[:1]:
        raise ValueError(
            f"target must be int64 of shape {x.shape[:1]}, got {target.dtype.name}"
            f"{list(target.shape)}"
        )
    _int(params["ignore_index"], "ignore_index")
    if not 0.0 <= _real(params["label_smoothing"], "label_smoothing") <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {params['label_smoothing']}")
    return x


def _nll_loss(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("logp", "target"))
    _keys(params, ("ignore_index", "label_smoothing"))
    x = _classes(args, params, 0)
    return x.shape[:1], x.dtype


def _nll_loss_backward(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("g", "target"))
    _keys(params, ("classes", "ignore_index", "label_smoothing"))
    g = _tensor(args, 0, "g", ndim=1)
    _floating(g, "g")
    target = _tensor(args, 1, "target", ndim=1)
    if target.dtype != np.int64 or target.shape != g.shape:
        raise ValueError(
            f"target must be int64 of shape {g.shape}, got {target.dtype.name}"
            f"{list(target.shape)}"
        )
    classes = _int(params["classes"], "classes", low=1)
    _int(params["ignore_index"], "ignore_index")
    if not 0.0 <= _real(params["label_smoothing"], "label_smoothing") <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {params['label_smoothing']}")
    shape = (g.shape[0], classes)
    if elements(shape) > max_elements:
        raise ValueError(f"the result of shape {shape} has more than {max_elements} elements")
    return shape, g.dtype


def _gather_backward(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("g", "index"))
    _keys(params, ("dim", "shape"))
    g = _tensor(args, 0, "g")
    _floating(g, "g")
    index = _tensor(args, 1, "index")
    if index.dtype.kind not in "iu" or index.shape != g.shape:
        raise ValueError(f"index must be an integer value of g's shape {g.shape}")
    shape = tuple(_int(d, "shape", low=0) for d in params["shape"])
    dim = _int(params["dim"], "dim", low=0)
    if len(shape) != g.ndim or dim >= len(shape) or any(
        a != b for i, (a, b) in enumerate(zip(shape, g.shape)) if i != dim
    ):
        raise ValueError(f"shape {shape} must match g of shape {g.shape} except along dim={dim}")
    if elements(shape) > max_elements:
        raise ValueError(f"the result of shape {shape} has more than {max_elements} elements")
    return shape, g.dtype


def _approximate(params: dict) -> None:
    _keys(params, ("approximate",))
    if params["approximate"] not in ("none", "tanh"):
        raise ValueError(f"approximate must be 'none' or 'tanh', got {params['approximate']!r}")


def _gelu(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("x",))
    _approximate(params)
    x = _tensor(args, 0, "x")
    _floating(x, "x")
    return x.shape, x.dtype


def _gelu_backward(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("g", "x"))
    _approximate(params)
    _, x, dtype = _float_pair(args, ("g", "x"))
    return x.shape, dtype


def _sigmoid(args: list, params: dict, max_elements: int) -> tuple | None:
    # the kernel serves float32 and float64; other dtypes take NumPy's path
    if len(args) == 1 and not params and isinstance(args[0], Meta) and args[0].dtype in _FLOATS:
        return args[0].shape, args[0].dtype
    return None


def _sigmoid_backward(args: list, params: dict, max_elements: int) -> tuple | None:
    metas = _metas(args)
    if (len(args) == len(metas) == 2 and not params and metas[0].shape == metas[1].shape
            and all(m.dtype in _FLOATS for m in metas)):
        return metas[0].shape, np.result_type(metas[0].dtype, metas[1].dtype)
    return None


def _index_scatter(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("g",))
    _keys(params, ("shape", "index"))
    g = _tensor(args, 0, "g")
    shape, index = tuple(params["shape"]), params["index"]
    if min(shape, default=0) < 0:
        raise ValueError(f"shape {shape} has a negative size")
    bound = _index_bound(shape, index)
    if bound > max_elements:
        raise ValueError(f"the index could pick up to {bound} elements, more than {max_elements}")
    try:
        picked = np.broadcast_to(np.zeros((), np.bool_), shape)[index].shape
    except (IndexError, ValueError, TypeError) as e:
        raise ValueError(f"the index does not fit shape {shape} ({e})") from None
    if g.shape != picked:
        raise ValueError(f"g must have the shape {picked} the index picks, got {g.shape}")
    return shape, g.dtype


def _erf(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("x",))
    _keys(params, ())
    x = _tensor(args, 0, "x")
    return x.shape, x.dtype if x.dtype.kind == "f" else np.dtype(np.float32)


def _squared_error_sum(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("input", "target"))
    _keys(params, ())
    x, t, dtype = _float_pair(args, ("input", "target"))
    if x.dtype != t.dtype:
        raise ValueError(f"input and target must have one dtype, got {x.dtype.name} and "
                         f"{t.dtype.name}")
    return (), dtype


def _squared_error_grad(args: list, params: dict, max_elements: int) -> tuple:
    _arity(args, ("g", "input", "target"))
    _keys(params, ())
    g = _tensor(args, 0, "g", ndim=0)
    _floating(g, "g")
    x, _, dtype = _float_pair(args[1:], ("input", "target"))
    return x.shape, dtype


_RULES: dict[str, Callable[[list, dict, int], tuple | None]] = {
    "matmul": _matmul,
    "linear": _linear,
    "linear_input_grad": _linear_input_grad,
    "linear_rows": _linear_rows,
    "linear_weight_grad": _linear_weight_grad,
    "conv2d": _conv2d,
    "conv2d_input_grad": _conv2d_input_grad,
    "conv2d_weight_grad": _conv2d_weight_grad,
    "max_pool2d": _max_pool2d,
    "max_pool2d_indices": _max_pool2d_indices,
    "max_pool2d_backward": _max_pool2d_backward,
    "unfold": _unfold,
    "fold": _fold,
    "layer_norm": _layer_norm,
    "layer_norm_backward": _layer_norm_backward,
    "layer_norm_weight_grad": _layer_norm_weight_grad,
    "layer_norm_grads": _layer_norm_grads,
    "softmax": _softmax,
    "log_softmax": _softmax,
    "softmax_backward": _softmax_backward,
    "log_softmax_backward": _softmax_backward,
    "attention_softmax": _attention_softmax,
    "attention_softmax_backward": _attention_softmax_backward,
    "causal_matmul": _causal_matmul,
    "self_attention": _self_attention,
    "self_attention_backward": _self_attention_backward,
    "nll_loss": _nll_loss,
    "nll_loss_backward": _nll_loss_backward,
    "squared_error_sum": _squared_error_sum,
    "squared_error_grad": _squared_error_grad,
    "gather_backward": _gather_backward,
    "gelu": _gelu,
    "gelu_backward": _gelu_backward,
    "sigmoid": _sigmoid,
    "sigmoid_backward": _sigmoid_backward,
    "relu_backward": _sigmoid_backward,  # the same rule: two equal float shapes
    "index_scatter": _index_scatter,
    "erf": _erf,
}
