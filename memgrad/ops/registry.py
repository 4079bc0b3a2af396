"""The op table: one record per differentiable primitive, and the dispatcher that runs one.

NOTE [ One op, one place ]
A primitive is declared once, with its forward (NumPy arrays in, one array out), its VJP
(written with memgrad ops, so that ``create_graph=True`` records a graph and higher
derivatives work) and what it saves for backward. The engine, checkpoint policies, the
memory report, the tracer and the tests all read the same record.

``saves`` maps a saved value to the inputs whose gradients need it: ``{"x": (1,)}`` keeps
input ``x`` only when input 1 needs a gradient, ``{"out": (0,)}`` keeps the output only when
input 0 does. An input that is not saved reaches the VJP as a ``Meta`` (shape, dtype and
ndim only), so a VJP can always read ``x.shape``.

A VJP has the signature ``vjp(g, out, needs, *inputs, **params)`` and returns one gradient
per input (None where ``needs`` is False or the gradient is zero). For a primitive declared
with ``broadcasting=True`` the dispatcher sums each gradient back to its input's shape, so
its VJP may return the broadcast shape.

Python scalars stay Python scalars (NumPy's weak scalar promotion then keeps float32 data
float32); they are constants: never saved, never differentiated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from memgrad import interpreters
from memgrad.autograd.grad_mode import state
from memgrad.autograd.graph import (
    _RELEASED_MSG,
    Meta,
    Node,
    _anomaly_trace,
    _seq,
    accumulator,
    refresh_view,
)
from memgrad.autograd.saved import save, saved_input, saved_output, unpack_input
from memgrad.errors import ShapeError
from memgrad.tensor import Tensor

__all__ = ["Primitive", "primitive", "public", "REGISTRY", "PUBLIC", "METHODS", "Meta", "OpNode",
           "apply"]

_NDARRAY = np.ndarray  # a module global: cheaper on the per-op path than np.ndarray
_new = object.__new__
REGISTRY: dict[str, Primitive] = {}
# NOTE [ Public names ]: what ``mg.<name>`` and ``Tensor.<name>`` are, from the declarations
PUBLIC: dict[str, Callable] = {}
METHODS: dict[str, Callable] = {}


class Primitive:
    """One entry of the op table."""

    __slots__ = (
        "name",
        "_forward",
        "run",  # what the dispatcher calls: the forward, or the NumPy ufunc that it is
        "ufunc",  # whether run is that NumPy ufunc (NOTE [ An output's Meta from its operand ])
        "vjp_fn",
        "save_inputs",
        "save_out",
        "broadcasting",
        "view",
        "kind",
        "node_name",
        "differentiable",
        "accumulates",
        "array_params",
        "sink_block_bytes",
        "inplace",
        "_inplace_variant",
        "_saves_for",  # needs mask -> saves_for's answer, filled on first use
        "_rules",  # the dispatcher's form of the save rule, by call shape (see _rule)
        "call1",  # the short paths of one and two operands (_short_path1, _short_path2)
        "call2",
    )

    def __init__(
        self,
        name: str,
        forward: Callable,
        *,
        saves: dict[str, tuple[int, ...]],
        broadcasting: bool = False,
        view: bool = False,
        kind: str = "elementwise",
        differentiable: bool = True,
        accumulates: tuple[int, ...] = (),
        sink_block_bytes: int | None = None,
        array_params: tuple[str, ...] = (),
        ufunc: Callable | None = None,
    ) -> None:
        import inspect

        self.name = name
        self.forward = forward
        if ufunc is not None:
            self.run, self.ufunc = ufunc, True
        self.vjp_fn: Callable | None = None
        self.broadcasting = broadcasting
        self.view = view
        self.kind = kind
        self.differentiable = differentiable
        self.accumulates = accumulates
        self.sink_block_bytes = sink_block_bytes
        self.array_params = array_params
        self._saves_for: dict[tuple, tuple[tuple[int, ...], bool]] = {}
        self._rules: dict[int, tuple] = {}
        self.inplace = False
        self._inplace_variant: Primitive | None = None
        self.call1, self.call2 = _short_path1(self), _short_path2(self)
        self.node_name = "".join(p.capitalize() for p in name.split("_")) + "Backward"
        params = inspect.signature(forward).parameters.values()
        names = []
        variadic = False
        for p in params:
            if p.name == "out":
                raise ValueError(f"primitive {name}: 'out' names the output; rename that input")
            if p.kind is p.VAR_POSITIONAL:
                variadic = True
            elif p.kind is p.POSITIONAL_OR_KEYWORD and p.default is p.empty:
                names.append(p.name)
        save_inputs = []
        self.save_out: tuple[int, ...] | None = None
        for key, needed_by in saves.items():
            if key == "out":
                self.save_out = tuple(needed_by)
            elif variadic:
                raise ValueError(f"primitive {name}: a variadic primitive cannot save inputs")
            elif key not in names:
                raise ValueError(f"primitive {name}: saves {key!r}, which is not an input name")
            else:
                save_inputs.append((names.index(key), tuple(needed_by)))
        self.save_inputs = tuple(save_inputs)

    def saves_for(self, needs: int) -> tuple[tuple[int, ...], bool]:
        """The save rule as data: for ``needs``, a bit mask of the inputs that need
        gradients (bit i for input i), the inputs kept for backward and whether the output
        is. The dispatcher, the tracer's static analysis and the planner read it.

        Example:
            >>> import memgrad as mg
            >>> mg.ops.REGISTRY["mul"].saves_for(0b01)  # x needs a gradient, y not
            ((1,), False)
        """
        rule = self._saves_for.get(needs)
        if rule is None:
            inputs = tuple(i for i, by in self.save_inputs if any(needs >> j & 1 for j in by))
            out = self.save_out is not None and any(needs >> j & 1 for j in self.save_out)
            rule = self._saves_for[needs] = (inputs, out)
        return rule

    def _rule(self, key: int, n: int) -> tuple:
        """What ``_record`` does for a call of ``n`` arguments whose ``key`` is a leading 1
        and then two bits per argument, the first one's highest: 0 for a constant, 1 for a
        Tensor, 3 for a Tensor that needs a gradient. The Tensor inputs kept, whether the
        output is, and the ``needs`` tuple the VJP gets; cached: the per-op path then does
        one dict lookup."""
        codes = [key >> 2 * (n - 1 - i) & 3 for i in range(n)]
        keep, out = self.saves_for(sum(1 << i for i, c in enumerate(codes) if c == 3))
        rule = self._rules[key] = (
            tuple(i for i in keep if codes[i]), out, tuple(c == 3 for c in codes),
        )
        return rule

    @property
    def forward(self) -> Callable:
        """The forward function (NumPy arrays in, one array out); setting it replaces what
        the dispatcher calls."""
        return self._forward

    @forward.setter
    def forward(self, fn: Callable) -> None:
        self._forward = self.run = fn
        self.ufunc = False

    def vjp(self, fn: Callable) -> Callable:
        """Decorator: declare the VJP of this primitive."""
        self.vjp_fn = fn
        return fn

    def __call__(self, *args: Any, **params: Any) -> Tensor:
        if not params:
            n = len(args)
            if n == 2:
                return self.call2(*args)
            if n == 1:
                return self.call1(*args)
        return apply(self, args, params)

    def own_params(self, params: dict) -> dict:
        """``params`` with private copies of the arrays in ``array_params``: what a node
        keeps, so that a change to the caller's index array after forward changes nothing."""
        if not self.array_params:
            return params
        return {k: _copy_arrays(v) if k in self.array_params else v for k, v in params.items()}

    @property
    def inplace_variant(self) -> Primitive:
        """The same op as recorded for an in-place change (``add_`` for ``add``): the same
        forward, VJP and saves, named with a trailing underscore and marked ``inplace``, so
        that interpreters can tell ``t.add_(u)`` from ``t + u``. Not in ``REGISTRY``."""
        twin = self._inplace_variant
        if twin is None:
            twin = Primitive.__new__(Primitive)
            for slot in Primitive.__slots__:
                setattr(twin, slot, getattr(self, slot))
            twin.name = self.name + "_"
            twin.inplace = True
            twin.call1, twin.call2 = _short_path1(twin), _short_path2(twin)
            self._inplace_variant = twin
        return twin

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"


def primitive(
    name: str,
    saves: dict[str, tuple[int, ...]] | None = None,
    broadcasting: bool = False,
    view: bool = False,
    kind: str = "elementwise",
    differentiable: bool = True,
    accumulates: tuple[int, ...] = (),
    sink_block_bytes: int | None = None,
    array_params: tuple[str, ...] = (),
    public: bool = False,
    ufunc: Callable | None = None,
) -> Callable[[Callable], Primitive]:
    """Declare a primitive from its forward function (NumPy arrays in, one array out).

    ``kind`` groups primitives for checkpoint policies (``"matmul"``, ``"elementwise"``,
    ``"reduce"``, ``"movement"``...). ``view=True`` marks a forward that returns a view of
    its first input. ``differentiable=False`` marks ops (comparisons, argmax) whose outputs
    never require grad. ``accumulates`` lists inputs whose gradient the VJP can add straight
    into an existing ``.grad`` (NOTE [ Accumulate in place ] in autograd/engine.py): its VJP
    then takes ``sinks``, a dict from those input indices to the ``.grad`` tensors, and
    ``sink_block_bytes`` says how many bytes at a time it adds there (its transient).
    ``array_params`` names keyword parameters that may hold arrays (index arrays): a
    recorded node keeps private copies of them. ``public=True`` makes the primitive itself
    ``mg.<name>`` and, for a primitive of one tensor input, ``Tensor.<name>`` (NOTE
    [ Public names ] in ops/__init__.py). ``ufunc`` names the NumPy ufunc a forward of
    one call (``return np.add(x, y)``) is: the dispatcher calls it directly.
    """

    def wrap(forward: Callable) -> Primitive:
        if name in REGISTRY:
            raise ValueError(f"primitive {name!r} is declared twice")
        prim = Primitive(
            name, forward, saves=saves or {}, broadcasting=broadcasting, view=view, kind=kind,
            differentiable=differentiable, accumulates=accumulates,
            sink_block_bytes=sink_block_bytes, array_params=array_params, ufunc=ufunc,
        )
        REGISTRY[name] = prim
        if public:
            PUBLIC[name] = prim
            METHODS[name] = _unary_method(prim)
        return prim

    return wrap


def public(fn: Callable | None = None, *, method: bool = True) -> Any:
    """Declare a public function of the op table (a composite of primitives): it becomes
    ``mg.<name>`` and, with ``method=True``, ``Tensor.<name>`` (its first argument is then
    the tensor). NOTE [ Public names ] in ops/__init__.py.

    Example:
        >>> from memgrad.ops.registry import PUBLIC
        >>> PUBLIC["mean"].__name__
        'mean'
    """

    def wrap(f: Callable) -> Callable:
        PUBLIC[f.__name__] = f
        if method:
            METHODS[f.__name__] = f
        return f

    return wrap(fn) if fn is not None else wrap


def _unary_method(prim: Primitive) -> Callable:
    method = prim.call1
    method.__name__ = prim.name
    method.__doc__ = (prim.forward.__doc__ or "").strip().split("\n")[0] or None
    return method


_NO_PARAMS: dict = {}


_RELEASED: list = []


class OpNode(Node):
    """The backward of one primitive call.

    The meta of each input in ``_inputs`` (NOTE [ A node's inputs ] in autograd/graph.py)
    is the Meta of a tensor, or a Python scalar (or array) constant as its value; what the
    VJP gets, except at the indices ``_keep``, where it gets the saved inputs, ``_saved``
    (in ``_keep``'s order). A saved input is the Tensor itself when it had no version
    counter yet (it is unchanged as long as its version is still 0), else a SavedTensor.
    """

    __slots__ = ("prim", "_saved", "_keep", "_out_saved", "_needs", "_params", "sink_inputs")

    def name(self) -> str:
        return self.prim.node_name

    def apply(self, grads: tuple, sinks: dict | None = None) -> tuple:
        prim = self.prim
        saved = self._saved
        if saved is _RELEASED:
            raise RuntimeError(_RELEASED_MSG)
        links = self._inputs  # the metas at 2, 5, ... (NOTE [ A node's inputs ])
        n = len(links)
        keep = self._keep
        if keep:
            args = [links[2], links[5]] if n == 6 else list(links[2::3])
            j = 0  # an index, not zip(keep, saved): cheaper for one or two values
            for i in keep:
                s = saved[j]
                j += 1
                if not isinstance(s, Tensor):
                    s = s.unpack(self, prim.node_name)
                elif s._vc is not None:
                    s = unpack_input(s, prim.node_name)
                args[i] = s
        out = self._out_saved
        if out is not None:
            out = out.unpack(self, prim.node_name)
        # one and two inputs passed as they are, without a star-call's tuple (3% of a
        # backward)
        if n <= 6 and not sinks and not self._params:
            if n == 6:
                if keep:
                    return prim.vjp_fn(grads[0], out, self._needs, args[0], args[1])
                return prim.vjp_fn(grads[0], out, self._needs, links[2], links[5])
            return prim.vjp_fn(grads[0], out, self._needs, args[0] if keep else links[2])
        if not keep:
            args = links[2::3]
        if sinks:
            return prim.vjp_fn(grads[0], out, self._needs, *args, sinks=sinks, **self._params)
        return prim.vjp_fn(grads[0], out, self._needs, *args, **self._params)

    @property
    def broadcasts(self) -> bool:
        """Whether gradients of the broadcast shape are summed back to the input's shape."""
        return self.prim.broadcasting

    def release(self) -> None:
        # only a node that saved tensors refuses a second backward (as in PyTorch)
        if self._keep or self._out_saved is not None:
            self._saved = _RELEASED
            self._out_saved = None


def apply(prim: Primitive, args: tuple, params: dict, _dispatched: bool = False) -> Tensor:
    """Run primitive ``prim`` on ``args`` (tensors and Python scalars), through this
    thread's interpreters if any (NOTE [ Interpreters ]), recording a node when grad mode is
    on and an input requires grad."""
    if interpreters.active and not _dispatched:
        stack = interpreters.current()
        if stack:
            return _dispatch(stack, prim, args, params)
        _dispatched = True  # interpreters in other threads only: this thread has none
    datas = []
    grad = False
    for a in args:
        if isinstance(a, Tensor):
            if a._base is not None and a._vc.gen != a._view_gen and state.grad_enabled:
                refresh_view(a)  # its base was changed in place with a graph since
            datas.append(a._data)
            if a._requires_grad:
                grad = True
        else:
            datas.append(a)
    try:
        out_data = prim.run(*datas, **params) if params else prim.run(*datas)
    except (ValueError, IndexError, TypeError) as e:
        raise _op_error(prim, args, e) from e
    if out_data.__class__ is not _NDARRAY:
        out_data = np.asarray(out_data)  # a NumPy scalar from a full reduction
    out = _new(Tensor)  # wrap(out_data), inline on the per-op path
    out._data = out_data
    out._requires_grad = False
    out.grad = out.grad_fn = out._vc = out._acc = out._hooks = out._base = out._meta = None
    out.output_nr = 0
    if prim.view:
        _make_view(out, args[0], prim, params)
    if _dispatched and interpreters.watching_made():  # new storage: not a view of an input
        owns = out_data.base is None  # two owners of memory share it only if they are one
        if not any(d.__class__ is _NDARRAY and (d is out_data or not (owns and d.base is None)
                   and np.may_share_memory(d, out_data)) for d in datas):
            interpreters.tensor_made(out)
    if grad and state.grad_enabled and prim.differentiable and out_data.dtype.kind == "f":
        _record(prim, args, params, out)
    return out


# NOTE [ Calls of one and two operands ]
# A Tensor operator (``y * a``, ``y + 0.5``, ``-y``), a unary method (``y.tanh()``) and a
# primitive called without parameters (``tanh_backward(g, out)`` in a VJP) go through
# ``prim.call1``/``prim.call2``: ``apply`` for that one call shape, without the loops over
# the arguments, the list of their arrays and the star-call of the forward. They take the
# calls ``apply`` would run without an interpreter and without refreshing a view: operands
# that are Tensors (a view only while its base has not changed in place since it was made)
# or Python floats and ints (constants), and a primitive that makes no view; every other
# call goes to ``apply``. A call they take makes the same result and records its node with
# ``_record1``/``_record2``: ``_record`` without its loop and lists (tests/ops/test_dispatch.py
# compares the paths call shape by call shape, node by node). They are closures with the
# primitive bound and are the operators themselves: one Python call an op. Callgrind, the
# benchmarks/overhead.py chain, tensor operands, instructions an op against ``apply``:
# 44,054 -> 42,145 forward and backward, 9,281 -> 7,630 no_grad; recording a node of ``mul``
# or ``tanh`` in a loop, with ``_record1``/``_record2`` against ``_record``: 0.5 us, 0.7.


def _short_path2(prim: Primitive) -> Callable:
    """``apply(prim, (self, other), {})`` as ``prim.call2(self, other)``, and the Tensor
    operator of ``prim`` (NOTE [ Calls of one and two operands ])."""

    def call2(self: Any, other: Any) -> Tensor:
        if interpreters.active or prim.view:
            return apply(prim, (self, other), _NO_PARAMS)
        if isinstance(self, Tensor):
            if self._base is not None and self._vc.gen != self._view_gen:
                return apply(prim, (self, other), _NO_PARAMS)  # a view to refresh, perhaps
            dx = self._data
            grad = self._requires_grad
        elif self.__class__ is float or self.__class__ is int:
            dx = self
            grad = False
        else:
            return apply(prim, (self, other), _NO_PARAMS)
        if isinstance(other, Tensor):
            if other._base is not None and other._vc.gen != other._view_gen:
                return apply(prim, (self, other), _NO_PARAMS)  # a view to refresh, perhaps
            dy = other._data
            if other._requires_grad:
                grad = True
        elif other.__class__ is float or other.__class__ is int:
            dy = other
        else:
            return apply(prim, (self, other), _NO_PARAMS)
        try:
            out_data = prim.run(dx, dy)
        except (ValueError, IndexError, TypeError) as e:
            raise _op_error(prim, (self, other), e) from e
        if out_data.__class__ is not _NDARRAY:
            out_data = np.asarray(out_data)  # a NumPy scalar
        out = _new(Tensor)
        out._data = out_data
        out._requires_grad = False
        out.grad = out.grad_fn = out._vc = out._acc = out._hooks = out._base = out._meta = None
        out.output_nr = 0
        if grad and state.grad_enabled and prim.differentiable and out_data.dtype.kind == "f":
            _record2(prim, self, other, out)
        return out

    return call2


def _short_path1(prim: Primitive) -> Callable:
    """``apply(prim, (self,), {})`` as ``prim.call1(self)``, and the unary Tensor method."""

    def call1(self: Any) -> Tensor:
        if interpreters.active or prim.view or not isinstance(self, Tensor) \
                or (self._base is not None and self._vc.gen != self._view_gen):
            return apply(prim, (self,), _NO_PARAMS)
        try:
            out_data = prim.run(self._data)
        except (ValueError, IndexError, TypeError) as e:
            raise _op_error(prim, (self,), e) from e
        if out_data.__class__ is not _NDARRAY:
            out_data = np.asarray(out_data)  # a NumPy scalar from a full reduction
        out = _new(Tensor)
        out._data = out_data
        out._requires_grad = False
        out.grad = out.grad_fn = out._vc = out._acc = out._hooks = out._base = out._meta = None
        out.output_nr = 0
        if self._requires_grad and state.grad_enabled and prim.differentiable \
                and out_data.dtype.kind == "f":
            _record1(prim, self, out)
        return out

    return call1


def _dispatch(stack: tuple, prim: Primitive, args: tuple, params: dict) -> Tensor:
    if state.grad_enabled:
        for a in args:  # replayed view ops reach the interpreters before this op
            if isinstance(a, Tensor) and a._base is not None and a._vc.gen != a._view_gen:
                refresh_view(a)
    return _Next(stack, len(stack) - 1)(prim, args, params)


class _Next:
    """``call_next`` of the interpreter at ``level - 1``: the next interpreter out, or the
    primitive itself past the outermost one."""

    __slots__ = ("stack", "level")

    def __init__(self, stack: tuple, level: int) -> None:
        self.stack = stack
        self.level = level

    def __call__(self, prim: Primitive, args: tuple, params: dict) -> Tensor:
        level = self.level
        if level < 0:
            return apply(prim, args, params, True)
        return self.stack[level].process(prim, args, params, _Next(self.stack, level - 1))


def _record(prim: Primitive, args: tuple, params: dict, out: Tensor) -> None:
    """Make ``out``'s node: its edges, and what it saves for backward."""
    inputs: list = []  # NOTE [ A node's inputs ] in autograd/graph.py
    key = 1  # the save rule's key (see Primitive._rule): two bits per argument
    for a in args:
        if isinstance(a, Tensor):
            m = a._meta or _meta_of(a)
            if a._requires_grad:
                key = key * 4 + 3
                fn = a.grad_fn
                inputs += (fn, a.output_nr, m) if fn is not None else (accumulator(a), 0, m)
            else:
                key = key * 4 + 1
                inputs += (None, 0, m)
        else:
            # a constant reaches the VJP as its value; an array is copied, so that a change
            # to the caller's array after forward cannot change the gradient
            inputs += (None, 0, a.copy() if a.__class__ is _NDARRAY else a)
            key *= 4
    _link(prim, key, tuple(inputs), args,
          prim.own_params(params) if prim.array_params else params, out)


def _record1(prim: Primitive, x: Tensor, out: Tensor) -> None:
    """``_record(prim, (x,), {}, out)`` for ``call1``'s operand, a Tensor that requires grad
    (NOTE [ Calls of one and two operands ]); key 0b1_11."""
    fn = x.grad_fn
    m = x._meta or _meta_of(x)
    _link(prim, 7, (fn, x.output_nr, m) if fn is not None else (accumulator(x), 0, m), (x,),
          _NO_PARAMS, out)
    if prim.ufunc and out._data.dtype is m[1]:  # NOTE [ An output's Meta from its operand ]
        out._meta = m


def _record2(prim: Primitive, x: Any, y: Any, out: Tensor) -> None:
    """``_record(prim, (x, y), {}, out)`` for ``call2``'s operands, each a Tensor or a Python
    float or int (NOTE [ Calls of one and two operands ]); key 0b1_xx_yy."""
    if isinstance(x, Tensor):
        mx = x._meta or _meta_of(x)
        if x._requires_grad:
            key, cx, nx = 28, x.grad_fn, x.output_nr
            if cx is None:
                cx, nx = accumulator(x), 0
        else:
            key, cx, nx = 20, None, 0
    else:
        mx, key, cx, nx = x, 16, None, 0
    if isinstance(y, Tensor):
        my = y._meta or _meta_of(y)
        if y._requires_grad:
            key, cy, ny = key + 3, y.grad_fn, y.output_nr
            if cy is None:
                cy, ny = accumulator(y), 0
        else:
            key, cy, ny = key + 1, None, 0
    else:
        my, cy, ny = y, None, 0
    _link(prim, key, (cx, nx, mx, cy, ny, my), (x, y), _NO_PARAMS, out)
    if prim.ufunc:  # NOTE [ An output's Meta from its operand ]
        if mx.__class__ is not Meta:  # x a number: the output is y's shape
            m = my
        elif my is mx or my.__class__ is not Meta:  # y a number, or of x's Meta
            m = mx
        else:
            m = None
        if m is not None and out._data.dtype is m[1]:
            out._meta = m


# NOTE [ An output's Meta from its operand ]
# A node records its inputs' Metas, and a tensor keeps the Meta its first recorded use made
# for it (``_meta_of``: a dict lookup by shape, some 0.1 us). The output of a NumPy ufunc
# on one tensor, or on a tensor and a Python number, or on two tensors of one Meta, has
# that tensor's shape (broadcasting changes nothing there) and, when its dtype is the
# operand's, its Meta too: the short paths hand it that Meta as they record the node, so
# the op that uses the output next does not look it up. Which primitives are ufuncs is
# ``Primitive.ufunc`` (False again once ``forward`` is replaced).


def _link(prim: Primitive, key: int, inputs: tuple, args: tuple, params: dict,
          out: Tensor) -> None:
    """Make ``out``'s node from its ``inputs`` (NOTE [ A node's inputs ] in
    autograd/graph.py) and the save rule's ``key``."""
    rule = prim._rules.get(key)
    keep, keep_out, needs = prim._rule(key, len(args)) if rule is None else rule
    node = _new(OpNode)
    node._inputs = inputs
    node._sequence_nr = next(_seq)
    node._hooks = None
    plain = state.plain  # no anomaly mode, no saved-tensor hooks
    node._trace = None if plain or not state.anomaly else _anomaly_trace()
    node.prim, node._needs = prim, needs
    node._params = params
    node.sink_inputs = prim.accumulates
    node._keep = keep
    out.grad_fn = node
    out._requires_grad = True
    if keep or keep_out:
        plain = plain and not interpreters.active
    if keep:
        saved = []
        for i in keep:
            a = args[i]
            if not plain:
                a = save(a, False, prim, i)
            elif a._vc is not None:
                a = saved_input(a)
            saved.append(a)  # a Tensor without a version counter is kept as it is
        node._saved = saved
    else:
        node._saved = ()
    node._out_saved = (saved_output(out) if plain else save(out, True, prim)) if keep_out \
        else None


# shape -> (dtype, Meta), the last Meta made per shape: shared by the nodes (a bounded cache)
_METAS: dict[tuple, tuple[np.dtype, Meta]] = {}


def _meta_of(t: Tensor) -> Meta:
    """The Meta of ``t``'s data, kept on ``t`` (a Tensor's ``_meta`` is None until then)."""
    d = t._data
    dt, m = _METAS.get(d.shape, _NO_META)  # the dtype by identity: hashing is slow
    if dt is not d.dtype:
        if len(_METAS) > 4096:
            _METAS.clear()
        m = Meta((d.shape, d.dtype))
        _METAS[d.shape] = (d.dtype, m)
    t._meta = m
    return m


_NO_META = (None, None)


def _make_view(out: Tensor, base: Tensor, prim: Primitive, params: dict) -> None:
    d, b = out._data, base._data
    owner = d.base  # NumPy gives a view the array that owns the memory: the usual case
    # is told by identity, as may_share_memory costs some microseconds
    if not ((owner is not None and d.size and (owner is b or owner is b.base))
            or np.may_share_memory(d, b)):
        return
    vc = base._version_counter()
    out._vc = vc
    if base._base is not None:
        out._base = base._base
        out._view_fn = base._view_fn + ((prim, params),)
    else:
        out._base = base
        out._view_fn = ((prim, params),)
    out._view_gen = vc.gen


def _copy_arrays(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return v.copy()
    if isinstance(v, tuple):
        return tuple(_copy_arrays(x) for x in v)
    return v


def _op_error(prim: Primitive, args: tuple, e: Exception) -> Exception:
    shapes = ", ".join(str(tuple(a.shape)) if isinstance(a, Tensor) else repr(a) for a in args)
    text = str(e)
    if isinstance(e, ValueError) and ("broadcast" in text or "shape" in text or "align" in text):
        return ShapeError(f"{prim.name}: input shapes {shapes} do not fit: {text}")
    kind = next(k for k in (IndexError, TypeError, ValueError) if isinstance(e, k))
    return kind(f"{prim.name}: {text} (inputs: {shapes})")
