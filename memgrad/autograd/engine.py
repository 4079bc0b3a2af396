"""The backward engine: ``backward`` and ``grad`` over any set of roots.

NOTE [ Engine ]
1. Dependencies are counted over the graph reachable from the roots, iteratively (a
   100,000-op chain needs no recursion).
2. With ``inputs`` (``autograd.grad`` or ``backward(inputs=...)``), a node runs only if it
   lies on a path from a root to an input: nothing else runs and no other ``.grad`` changes.
   Every parent of such a node lies on such a path too, so its dependency count is complete.
3. Ready nodes run in decreasing ``_sequence_nr`` order (later forward ops first;
   accumulators as soon as they are ready). Gradients for the same input are summed.
4. Once a node has run its saved tensors are freed, unless ``retain_graph``.
5. NOTE [ Accumulate in place ]: in a plain ``backward()`` (no ``inputs``, no
   ``create_graph``), a node whose op declares ``accumulates`` gets, for those inputs that
   are leaves with an existing ``.grad`` (a plain, contiguous tensor of the leaf's shape and
   dtype, no hooks on the leaf or its accumulator), that ``.grad`` as a sink: it adds its
   gradient there itself and returns None for it. A linear layer's weight gradient is then
   never a whole separate array (it is added in row blocks), which is the largest transient
   of a step whose gradients are zeroed in place.
6. The engine keeps no state between calls: a node's backward may call ``backward`` or
   ``grad`` again (the reentrant checkpoint does), threads may run it at once on separate
   graphs, and nothing needs resetting after ``fork``.
7. After a leaf's accumulator has run, whether the gradient arrived in its buffer or was
   added into ``.grad`` by a sink (point 5), the leaf's post-accumulate hooks see the
   updated ``.grad``. Callbacks queued (``queue_callback``) while a backward runs run once
   the outermost backward of this thread has finished, in the order queued; reentrant
   backward calls inside it (the reentrant checkpoint's) are part of it. Data-parallel
   training uses both: a hook per parameter, and a callback that waits for the reductions.
8. Backward passes in several threads may share leaves (one model, a batch per thread):
   each leaf has one AccumulateGrad while a graph holds it (made under a lock), and every
   update of its ``.grad`` (AccumulateGrad, a sink of point 5) holds that accumulator's
   lock, so no addition is lost.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from memgrad.autograd.grad_mode import state
from memgrad.autograd.graph import (
    AccumulateGrad,
    Node,
    accumulate_into,
    accumulator,
    refresh_view,
)
from memgrad.tensor import Tensor

__all__ = ["backward", "grad", "accumulate_into", "queue_callback", "backward_recomputed"]

Edge = tuple[Node, int]


def _as_tuple(x: Any) -> tuple:
    if x is None:
        return ()
    if isinstance(x, Tensor):
        return (x,)
    return tuple(x)


def _root_edge(t: Tensor, api: str, i: int) -> Edge:
    if not isinstance(t, Tensor):
        raise TypeError(f"{api}: expected Tensors as outputs, got {type(t).__name__} at index {i}")
    _refresh(t)
    if t.grad_fn is not None:
        return (t.grad_fn, t.output_nr)
    if t._requires_grad:
        return (accumulator(t), 0)
    raise RuntimeError(
        f"{api}: element {i} of tensors does not require grad and does not have a grad_fn. "
        "Make sure a leaf it depends on has requires_grad=True and that it was not computed "
        "under no_grad()."
    )


def _root_grads(api: str, outputs: tuple, grads: tuple, create_graph: bool) -> list:
    if grads and len(grads) != len(outputs):
        raise RuntimeError(
            f"{api}: got {len(grads)} gradients for {len(outputs)} outputs; pass one per output"
        )
    result = []
    for i, t in enumerate(outputs):
        g = grads[i] if grads else None
        if g is None:
            if t._data.size != 1:
                raise RuntimeError(
                    f"{api} needs a scalar output or an explicit gradient; got shape "
                    f"{tuple(t.shape)} for output {i}. Pass gradient=mg.ones_like(out) (or "
                    "the vector you want a vector-Jacobian product with), or reduce the output "
                    "first, e.g. out.sum()."
                )
            g = Tensor(np.ones(t._data.shape, dtype=t._data.dtype))
        else:
            if not isinstance(g, Tensor):
                g = Tensor(np.asarray(g, dtype=t._data.dtype))
            if g._data.shape != t._data.shape:
                raise RuntimeError(
                    f"{api}: the gradient for output {i} has shape {tuple(g.shape)} but the "
                    f"output has shape {tuple(t.shape)}; pass a gradient of the output's shape"
                )
            if g._data.dtype != t._data.dtype:
                g = g.to(t._data.dtype)
            if not create_graph and g._requires_grad:
                g = g.detach()
        result.append(g)
    return result


def backward(
    tensors: Tensor | Sequence[Tensor],
    grad_tensors: Tensor | Sequence[Tensor | None] | None = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    inputs: Tensor | Sequence[Tensor] | None = None,
) -> None:
    """Accumulate the gradients of ``tensors`` into the ``.grad`` of the leaves (or only of
    ``inputs`` when given).

    Example:
        >>> import memgrad as mg
        >>> x = mg.tensor([1.0, 2.0], requires_grad=True)
        >>> mg.autograd.backward([(x * x).sum()])
        >>> x.grad
        tensor([2., 4.])
    """
    outputs = _as_tuple(tensors)
    if not outputs:
        raise RuntimeError("backward(): got no tensors to differentiate")
    grads = _root_grads("backward()", outputs, _as_tuple(grad_tensors), create_graph)
    edges = [_root_edge(t, "backward()", i) for i, t in enumerate(outputs)]
    if retain_graph is None:
        retain_graph = create_graph
    inputs = _as_tuple(inputs)
    if not inputs:
        _execute(edges, grads, retain_graph, create_graph, None, None, True, "backward")
        return
    captures: dict[Node, list] = {}
    exec_targets = set()
    for i, t in enumerate(inputs):
        edge = _input_edge(t, "backward(inputs=...)", i)
        if edge[0].__class__ is AccumulateGrad:
            exec_targets.add(edge[0])
        else:
            # a tensor that retains grad gets it from its retain_grad hook
            fn = _ignore if getattr(t, "_retains_grad", False) else _accumulate_fn(t)
            captures.setdefault(edge[0], []).append((edge[1], fn))
    _execute(edges, grads, retain_graph, create_graph, captures, exec_targets, True,
             "backward_inputs")


def backward_recomputed(tensors: Sequence[Tensor], grad_tensors: Sequence[Tensor],
                        release_from: int) -> None:
    """``backward(tensors, grad_tensors)`` run from inside a node's backward through a graph
    recomputed there (the reentrant checkpoint): only nodes made since ``release_from`` (a
    ``_sequence_nr``) are freed. Nodes of the enclosing graph that it reaches (through a
    tensor the recomputed function closes over) are left for the enclosing backward, which
    runs them again with its own gradient."""
    outputs = tuple(tensors)
    grads = _root_grads("backward()", outputs, tuple(grad_tensors), False)
    edges = [_root_edge(t, "backward()", i) for i, t in enumerate(outputs)]
    _execute(edges, grads, False, False, None, None, True, "backward", release_from)


def queue_callback(fn: Callable[[], None]) -> None:
    """Call ``fn()`` once the outermost backward running in this thread has finished (NOTE
    [ Engine ] point 7). Only valid while a backward runs, e.g. from a hook; if the backward
    fails, queued callbacks are dropped.

    Example:
        >>> import memgrad as mg
        >>> from memgrad.autograd.engine import queue_callback
        >>> x = mg.ones(2, requires_grad=True)
        >>> done = []
        >>> h = x.register_hook(lambda g: queue_callback(lambda: done.append(x.grad.sum().item())))
        >>> (x * 3).sum().backward()
        >>> done
        [6.0]
    """
    if state.engine_call is None:
        raise RuntimeError(
            "queue_callback: no backward is running in this thread; call it from a hook or a "
            "node's backward while .backward() runs"
        )
    state.final_callbacks.append(fn)


def _refresh(t: Tensor) -> None:
    # a view whose base was changed in place with a graph since gets the base's graph
    # (NOTE [ Views and in-place ops ] in ops/inplace.py)
    if t._base is not None and t._vc.gen != t._view_gen:
        refresh_view(t)


def _ignore(g: Tensor) -> None:
    return None


def _accumulate_fn(t: Tensor) -> Callable[[Tensor], None]:
    return lambda g: accumulate_into(t, g)


def _input_edge(t: Any, api: str, i: int) -> Edge:
    if not isinstance(t, Tensor):
        raise TypeError(f"{api}: expected Tensors as inputs, got {type(t).__name__} at index {i}")
    _refresh(t)
    if not t._requires_grad:
        raise RuntimeError(
            f"{api}: input {i} does not require grad; set requires_grad=True on it (or drop it "
            "from the inputs)"
        )
    if t.grad_fn is not None:
        return (t.grad_fn, t.output_nr)
    return (accumulator(t), 0)


def grad(
    outputs: Tensor | Sequence[Tensor],
    inputs: Tensor | Sequence[Tensor],
    grad_outputs: Tensor | Sequence[Tensor | None] | None = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool = False,
) -> tuple[Tensor | None, ...]:
    """Return the gradients of ``outputs`` with respect to ``inputs``. Touches no ``.grad``
    and runs only the part of the graph between the outputs and the inputs.

    Example:
        >>> import memgrad as mg
        >>> x = mg.tensor(2.0, requires_grad=True)
        >>> (g,) = mg.autograd.grad(x ** 3, x)
        >>> g.item()
        12.0
    """
    outs = _as_tuple(outputs)
    ins = _as_tuple(inputs)
    if not outs:
        raise RuntimeError("grad(): got no outputs to differentiate")
    if not ins:
        raise RuntimeError("grad(): got no inputs to differentiate with respect to")
    grads = _root_grads("grad()", outs, _as_tuple(grad_outputs), create_graph)
    edges = [_root_edge(t, "grad()", i) for i, t in enumerate(outs)]
    if retain_graph is None:
        retain_graph = create_graph
    results: list[Tensor | None] = [None] * len(ins)
    captures: dict[Node, list] = {}
    for i, t in enumerate(ins):
        node, nr = _input_edge(t, "grad()", i)
        captures.setdefault(node, []).append((nr, _store_fn(results, i)))
    _execute(edges, grads, retain_graph, create_graph, captures, set(), False, "grad")
    if not allow_unused:
        for i, r in enumerate(results):
            if r is None:
                raise RuntimeError(
                    f"grad(): input {i} (shape {tuple(ins[i].shape)}) appears to not have been "
                    "used in the graph of the outputs. Set allow_unused=True if this is the "
                    "desired behavior."
                )
    if not create_graph:
        results = [r if r is None or not r._requires_grad else r.detach() for r in results]
    return tuple(results)


def _store_fn(results: list, i: int) -> Callable[[Tensor], None]:
    def store(g: Tensor) -> None:
        results[i] = g if results[i] is None else results[i] + g

    return store


_tiebreak = itertools.count()


def _execute(
    edges: list[Edge],
    grads: list[Tensor],
    keep_graph: bool,
    create_graph: bool,
    captures: dict[Node, list] | None,
    exec_targets: set | None,
    accumulate: bool,
    call: str,
    release_from: int = 0,
) -> None:
    roots = []
    buffers: dict[Node, list] = {}
    for (node, nr), g in zip(edges, grads):
        buf = buffers.get(node)
        if buf is None:
            buf = buffers[node] = [None] * node.num_outputs
            roots.append(node)
        buf[nr] = g if buf[nr] is None else buf[nr] + g

    deps, seen = _dependencies(roots)
    if captures is None:
        runs = None  # everything runs
        relevant = None
    else:
        runs = _nodes_to_run(roots, deps, seen, set(captures) | exec_targets, exec_targets)
        relevant = runs | set(captures)

    # `ready` is a heap of (-sequence_nr, tiebreak, node); `nxt` holds the one ready node
    # while the heap is empty, which spares a chain-shaped graph all heap operations
    ready: list = []
    nxt = None
    for node in roots:
        if not deps.get(node):
            heapq.heappush(ready, (-node._sequence_nr, next(_tiebreak), node))

    prev = state.grad_enabled
    prev_call = state.engine_call
    outermost = prev_call is None
    if outermost:
        state.final_callbacks = []
    state.grad_enabled = create_graph
    state.engine_call = call
    anomaly = state.anomaly
    heappop, heappush = heapq.heappop, heapq.heappush
    direct = captures is None and not create_graph and call == "backward"
    sunk: set = set()  # accumulators whose .grad a sink added into (point 7)
    try:
        while True:
            if nxt is not None:
                node = nxt
                nxt = None
            elif ready:
                node = heappop(ready)[2]
            else:
                break
            buf = buffers.pop(node, None)
            if buf is not None:
                if node._hooks is not None or node.__class__ is AccumulateGrad:
                    _tensor_hooks(node, buf, accumulate)
                if captures is not None:
                    for nr, fn in captures.get(node, ()):
                        if buf[nr] is not None:
                            fn(buf[nr])
            if runs is not None and node not in runs:
                continue
            if buf is None:
                out = (None,) * len(node.next_functions)
            elif node._hooks is None and not anomaly:
                if direct and node.sink_inputs:
                    out = _apply_with_sinks(node, buf, sunk)
                else:
                    out = node.apply(buf)
                meta = node._input_meta
                if len(out) != len(meta):
                    out = _validate(node, out)
                else:
                    for g, m in zip(out, meta):
                        if g is not None and (
                            m is None
                            or g.__class__ is not Tensor
                            or g._data.shape != m[0]
                            or g._data.dtype != m[1]
                        ):
                            out = _validate(node, out)
                            break
            else:
                out = _run_node(node, buf, anomaly)
            if not keep_graph and node._sequence_nr >= release_from:
                node.release()
            if node.__class__ is AccumulateGrad:
                if accumulate and (buf is not None or node in sunk):
                    _post_accumulate_hooks(node.variable)
                continue
            for (child, nr), g in zip(node.next_functions, out):
                if child is None:
                    continue
                if relevant is not None and child not in relevant:
                    continue
                if g is not None:
                    cbuf = buffers.get(child)
                    if cbuf is None:
                        cbuf = buffers[child] = [None] * child.num_outputs
                        cbuf[nr] = g
                    elif cbuf[nr] is None:
                        cbuf[nr] = g
                    else:
                        cbuf[nr] = cbuf[nr] + g
                d = deps[child] - 1
                deps[child] = d
                if d == 0:
                    if nxt is None and not ready:
                        nxt = child
                    else:
                        if nxt is not None:
                            heappush(ready, (-nxt._sequence_nr, next(_tiebreak), nxt))
                            nxt = None
                        heappush(ready, (-child._sequence_nr, next(_tiebreak), child))
            g = out = None  # NOTE [ Gradient ownership ]: hold no gradient between nodes
        if outermost:
            callbacks = state.final_callbacks
            while callbacks:
                callbacks.pop(0)()
    finally:
        state.grad_enabled = prev
        state.engine_call = prev_call
        if outermost:
            state.final_callbacks = None


def _post_accumulate_hooks(leaf: Tensor) -> None:
    hooks = getattr(leaf, "_post_acc_hooks", None)
    if hooks:
        for fn in list(hooks):
            fn(leaf)


def _apply_with_sinks(node: Node, buf: list, sunk: set) -> tuple:
    """Run ``node``, letting it add into the existing ``.grad`` of the leaves it may sink
    into (NOTE [ Accumulate in place ]), under those leaves' accumulator locks."""
    locks = {}
    for i in node.sink_inputs:
        acc = node.next_functions[i][0]
        if acc.__class__ is AccumulateGrad:
            locks[id(acc)] = acc.lock
    held = [locks[k] for k in sorted(locks)]  # one order in every thread: no deadlock
    for lock in held:
        lock.acquire()
    try:
        sinks = _sinks(node)
        if not sinks:
            return node.apply(buf)
        out = node.apply(buf, sinks)
        for i, t in sinks.items():
            t._bump_version()
            sunk.add(node.next_functions[i][0])
        return out
    finally:
        for lock in held:
            lock.release()


def _sinks(node: Node) -> dict[int, Tensor]:
    """The existing ``.grad`` tensors ``node`` may add into (NOTE [ Accumulate in place ])."""
    sinks = {}
    for i in node.sink_inputs:
        acc = node.next_functions[i][0]
        if acc.__class__ is not AccumulateGrad or acc._hooks is not None:
            continue
        leaf = acc.variable
        g = leaf.grad
        if (
            g is None
            or g.__class__ is not Tensor
            or g._requires_grad
            or getattr(leaf, "_hooks", None)
            or g._data.shape != leaf._data.shape
            or g._data.dtype != leaf._data.dtype
            or not g._data.flags.c_contiguous
            or not g._data.flags.writeable
        ):
            continue
        sinks[i] = g
    return sinks


def _dependencies(roots: list[Node]) -> tuple[dict[Node, int], set]:
    deps: dict[Node, int] = {}
    seen = set(roots)
    stack = list(roots)
    while stack:
        for child, _ in stack.pop().next_functions:
            if child is None:
                continue
            deps[child] = deps.get(child, 0) + 1
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return deps, seen


def _nodes_to_run(roots: list, deps: dict, seen: set, targets: set, exec_targets: set) -> set:
    """The nodes on a path from a root to a target (NOTE [ Engine ] point 2)."""
    indeg = dict(deps)
    order = []
    stack = [n for n in seen if not indeg.get(n)]
    while stack:
        node = stack.pop()
        order.append(node)
        for child, _ in node.next_functions:
            if child is not None:
                indeg[child] -= 1
                if indeg[child] == 0:
                    stack.append(child)
    runs = set(exec_targets)
    for node in reversed(order):
        for child, _ in node.next_functions:
            if child is not None and (child in runs or child in targets):
                runs.add(node)
                break
    return runs


def _tensor_hooks(node: Node, buf: list, accumulate: bool) -> None:
    if node.__class__ is AccumulateGrad:
        hooks = getattr(node.variable, "_hooks", None)
        if hooks and buf[0] is not None:
            buf[0] = _call_tensor_hooks(hooks, buf[0], node.variable.shape)
        return
    for nr, (hooks, retain) in node._hooks.tensor.items():
        g = buf[nr]
        if g is None:
            continue
        if hooks:
            g = buf[nr] = _call_tensor_hooks(hooks, g, g.shape)
        if accumulate:
            for fn in list(retain):
                fn(g)


def _call_tensor_hooks(hooks: list, g: Tensor, shape: tuple) -> Tensor:
    for fn in list(hooks):
        r = fn(g)
        if r is None:
            continue
        if not isinstance(r, Tensor) or r.shape != shape:
            got = tuple(r.shape) if isinstance(r, Tensor) else type(r).__name__
            raise RuntimeError(
                f"hook {getattr(fn, '__name__', fn)!r} returned a gradient of shape {got} for "
                f"a tensor of shape {tuple(shape)}; a tensor hook must return None or a Tensor "
                "of the same shape"
            )
        g = r
    return g


def _run_node(node: Node, buf: list, anomaly: bool) -> tuple:
    grads = buf  # a list: AccumulateGrad takes its gradient out of it (NOTE [ Gradient ownership ])
    hooks = node._hooks
    if hooks is not None:
        for fn in list(hooks.pre):
            r = fn(tuple(grads))
            if r is not None:
                grads = list(r)
    grad_outputs = tuple(grads) if hooks is not None and hooks.post else None
    if anomaly:
        from memgrad.autograd.anomaly import run_checked

        out = run_checked(node, grads)
    else:
        out = node.apply(grads)
    if grad_outputs is not None:
        out = _validate(node, out)  # post hooks see the final gradients
        for fn in list(hooks.post):
            r = fn(out, grad_outputs)
            if r is not None:
                out = tuple(r)
    return _validate(node, out)


def _validate(node: Node, out: tuple) -> tuple:
    meta = node._input_meta
    if len(out) != len(meta):
        raise RuntimeError(
            f"{node.name()} returned {len(out)} gradients but its forward had {len(meta)} "
            "inputs; return one gradient (or None) per input"
        )
    fixed = None
    for i, g in enumerate(out):
        if g is None:
            continue
        m = meta[i]
        if m is None:
            continue
        shape, dtype = m
        data = g._data if isinstance(g, Tensor) else None
        if data is None:
            raise TypeError(
                f"{node.name()} returned a {type(g).__name__} as gradient {i}; expected a "
                "Tensor or None"
            )
        if data.shape != shape and node.broadcasts and _broadcastable(shape, data.shape):
            if fixed is None:
                fixed = list(out)
            g = fixed[i] = g.sum_to(shape)
            data = g._data
        if data.shape != shape:
            raise RuntimeError(
                f"{node.name()} returned an invalid gradient at index {i}: got shape "
                f"{tuple(data.shape)} but expected shape {tuple(shape)} (the shape of input "
                f"{i} of its forward)"
            )
        if data.dtype != dtype:
            if fixed is None:
                fixed = list(out)
            fixed[i] = g.to(dtype)
    return out if fixed is None else tuple(fixed)


def _broadcastable(shape: tuple, big: tuple) -> bool:
    """Whether ``shape`` broadcasts to ``big``."""
    if len(shape) > len(big):
        return False
    return all(s == 1 or s == b for s, b in zip(shape[::-1], big[::-1]))
