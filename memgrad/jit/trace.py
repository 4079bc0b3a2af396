"""``trace``: record one run of a function as a Graph of primitive calls."""

from __future__ import annotations

import contextlib
import inspect
import itertools
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from memgrad import interpreters
from memgrad.autograd.grad_mode import enable_grad
from memgrad.errors import TraceError
from memgrad.interpreters import Interpreter
from memgrad.jit.graph import Graph
from memgrad.jit.ir import Binding, Const, Value
from memgrad.tensor import Tensor

__all__ = ["trace", "record", "trace_stages"]


class _Tracer(Interpreter):
    def __init__(self, names: dict[int, str]) -> None:
        # id(tensor) -> (tensor, its Value or Const)
        self.values: dict[int, tuple[Tensor, Value | Const]] = {}
        self.inputs: list[Value] = []
        self.params: list[Value] = []
        self.bound: dict[str, Tensor] = {}
        self.bindings: list[Binding] = []
        self.constants: list[Const] = []
        self.param_names = names
        self.regions: list[str] = []
        self.region_count = itertools.count(1)
        self.counter = itertools.count()

    def value_of(self, t: Tensor, kind: str, name: str) -> Value:
        v = Value(name, tuple(t.shape), t.dtype.name, kind)
        self.values[id(t)] = (t, v)
        return v

    def arg(self, a: Any) -> Any:
        if not isinstance(a, Tensor):
            return a
        known = self.values.get(id(a))
        if known is not None and known[0] is a:
            return known[1]  # a Value, or the Const made on the first use
        if a.requires_grad and a.grad_fn is None:
            name = self.param_names.get(id(a)) or f"param{len(self.params)}"
            v = self.value_of(a, "param", name)
            self.params.append(v)
            self.bound[name] = a
            return v
        if a.requires_grad:
            raise TraceError(
                f"memgrad.jit.trace: the function uses a tensor of shape {a.shape} that requires "
                "grad and was computed outside it; the graph could not recompute it. Pass it "
                "as an input, or compute it inside the function."
            )
        c = Const(f"c{len(self.constants)}", a.numpy())
        self.values[id(a)] = (a, c)
        self.constants.append(c)
        return c

    def process(self, prim: Any, args: tuple, params: dict, call_next: Callable) -> Any:
        recorded = [self.arg(a) for a in args]
        out = call_next(prim, args, params)
        v = self.value_of(out, "local", str(next(self.counter)))
        region = self.regions[-1] if self.regions else None
        self.bindings.append(Binding(v, prim.name, recorded, dict(params), region))
        return out

    def value_read(self, t: Tensor, what: str) -> None:
        warnings.warn(
            f"memgrad.jit.trace: {what} on a tensor reads its value while tracing; if Python "
            "control flow depends on it, the trace is specialised to the branch taken now "
            "and will not follow other inputs",
            stacklevel=4,
        )

    @contextlib.contextmanager
    def region(self, function: Callable) -> Iterator[None]:
        name = getattr(function, "__name__", None) or type(function).__name__
        name = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
        self.regions.append(f"{name}_{next(self.region_count)}")
        try:
            yield
        finally:
            self.regions.pop()


def _parameter_names(fn: Any) -> dict[int, str]:
    names: dict[int, str] = {}
    named = getattr(fn, "named_parameters", None)
    if callable(named):
        for name, p in named():
            names[id(p)] = name
        return names
    code = getattr(fn, "__code__", None)
    if code is None:
        return names
    glob = getattr(fn, "__globals__", {})
    # global names used by fn or by functions defined inside it (a lambda passed to checkpoint)
    codes = [code]
    while codes:
        c = codes.pop()
        for var in c.co_names:
            value = glob.get(var)
            if isinstance(value, Tensor):
                names.setdefault(id(value), var)
        codes.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    for var, cell in zip(code.co_freevars, getattr(fn, "__closure__", None) or ()):
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if isinstance(value, Tensor):
            names[id(value)] = var
    return names


def _input_names(fn: Any, n: int) -> list[str]:
    try:
        target = fn.forward if hasattr(fn, "forward") else fn
        params = [
            p.name
            for p in inspect.signature(target).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        params = []
    names = params[:n]
    return names + [f"input{i}" for i in range(len(names), n)]


def trace(fn: Callable[..., Any], *example_inputs: Any, dynamic: bool = False) -> Graph:
    """Run ``fn(*example_inputs)`` once and record it as a Graph: a closed program whose
    formal parameters are the tensor inputs and the tensors ``fn`` uses that require grad
    (module parameters, by name), with one binding per primitive call. Checkpoint regions
    show as blocks. With ``dynamic=True`` the graph retraces when called on inputs of other
    shapes or dtypes instead of raising.

    Example:
        >>> import memgrad as mg
        >>> w = mg.ones(3, 2, requires_grad=True)
        >>> g = mg.jit.trace(lambda x: (x @ w).tanh(), mg.ones(4, 3))
        >>> print(g.code, end="")
        graph(%x: float32[4, 3], param %w: float32[3, 2]):
          %0 = matmul %x, %w
          %1 = tanh %0
          return %1
    """
    return record(fn, example_inputs, dynamic)[0]


def record(fn: Callable[..., Any], example_inputs: tuple, dynamic: bool = False) -> tuple:
    """``trace``, also returning what ``fn`` returned."""
    if any(isinstance(i, _Tracer) for i in interpreters.current()):
        raise TraceError(
            "memgrad.jit.trace: already tracing in this thread; a trace inside a trace is not "
            "supported. Trace the outer function once, or call the inner one untraced."
        )
    for i, x in enumerate(example_inputs):
        if not isinstance(x, Tensor):
            raise TypeError(
                f"memgrad.jit.trace: example input {i} is a {type(x).__name__}; pass Tensors "
                "(close over other values in fn instead)"
            )
    tracer = _Tracer(_parameter_names(fn))
    for name, x in zip(_input_names(fn, len(example_inputs)), example_inputs):
        tracer.inputs.append(tracer.value_of(x, "input", name))
    with interpreters.push(tracer):
        result = fn(*example_inputs)
    outputs = result if isinstance(result, tuple) else (result,)
    values = []
    for i, out in enumerate(outputs):
        known = tracer.values.get(id(out)) if isinstance(out, Tensor) else None
        if known is None or known[0] is not out or not isinstance(known[1], Value):
            raise TraceError(
                f"memgrad.jit.trace: output {i} ({type(out).__name__}) was not computed from "
                "the inputs by memgrad ops; return tensors the function computed"
            )
        values.append(known[1])
    graph = Graph(
        tracer.inputs,
        tracer.params,
        tracer.bindings,
        values,
        tuple_output=isinstance(result, tuple),
        constants=tracer.constants,
        bound=tracer.bound,
        dynamic=dynamic,
        retrace=(lambda *xs: trace(fn, *xs, dynamic=True)) if dynamic else None,
        requires_grad=frozenset(
            v.name for v, x in zip(tracer.inputs, example_inputs) if x.requires_grad
        ),
    )
    return graph, result


def trace_stages(functions: Sequence[Callable[[Any], Any]], input: Any) -> list[Graph]:
    """Trace each stage of a chain on the output of the one before (grad mode, forward
    only); each Graph's ``seconds`` holds its traced forward time.

    Example:
        >>> import memgrad as mg
        >>> w = mg.ones(4, 4, requires_grad=True)
        >>> gs = mg.jit.trace_stages([lambda h: h @ w, lambda h: h.relu()], mg.ones(2, 4))
        >>> [g.bindings[0].op for g in gs]
        ['matmul', 'relu']
    """
    graphs = []
    h = input
    with enable_grad():
        for f in functions:
            start = time.perf_counter()
            g, h = record(f, (h,))
            g.seconds = time.perf_counter() - start
            graphs.append(g)
    return graphs
