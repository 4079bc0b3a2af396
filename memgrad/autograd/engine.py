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
6. Each call is one :class:`Backward` object holding its walk's state (buffers, dependency
   counts, the ready queue); the engine keeps nothing between calls but this thread's stack
   of running calls. A node's backward may call ``backward`` or ``grad`` again (the
   reentrant checkpoint does), threads may run it at once, and nothing needs resetting
   after ``fork``. Gradients are summed, cast and reduced with the op table's ``add``,
   ``to`` and ``sum_to`` (recorded under ``create_graph``), which is why the engine sits
   above the op table while the graph it walks sits below it.
7. After a leaf's accumulator has run, whether the gradient arrived in its buffer or was
   added into ``.grad`` by a sink (point 5), the leaf's post-accumulate hooks see the
   updated ``.grad``. Callbacks queued (``queue_callback``) while a backward runs run once
   the outermost backward of this thread has finished, in the order queued; reentrant
   backward calls inside it (the reentrant checkpoint's) are part of it. Data-parallel
   training uses both: a hook per parameter, and a callback that waits for the reductions.
8. Backward passes in several threads may share leaves (one model, a batch per thread):
   each leaf has one AccumulateGrad while a graph holds it (made under a lock), and every
   update of its ``.grad`` (the accumulation, a sink of point 5) holds that accumulator's
   lock, so no addition is lost.
9. NOTE [ Gradient ownership ]: the first gradient a leaf receives becomes its ``.grad``
   without a copy when nothing else can see it: the engine has handed it over (taken out of
   the buffer, no other reference kept between nodes), no other Tensor object refers to it
   (a gradient passed to two edges, kept by a hook, or given by the caller), and its array
   owns its memory with no views of it. Otherwise the gradient is copied, so that later
   in-place accumulation into ``.grad`` can never change a tensor someone else holds.
"""

from __future__ import annotations

import heapq
import itertools
import sys
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from memgrad.autograd.anomaly import run_checked
from memgrad.autograd.grad_mode import state
from memgrad.autograd.graph import (
    AccumulateGrad,
    Meta,
    Node,
    RetainGrad,
    accumulator,
    refresh_view,
)
from memgrad.ops.elementwise import add, to
from memgrad.ops.reduce import sum_to
from memgrad.tensor import Tensor

__all__ = [
    "Backward",
    "backward",
    "grad",
    "accumulate_into",
    "queue_callback",
    "backward_recomputed",
    "current_backward",
]

Edge = tuple[Node, int]


# ---------------------------------------------------------------------------- entry points


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
    keep = create_graph if retain_graph is None else retain_graph
    inputs = _as_tuple(inputs)
    if not inputs:
        Backward(keep_graph=keep, create_graph=create_graph).run(edges, grads)
        return
    captures: dict[Node, list] = {}
    targets = set()
    for i, t in enumerate(inputs):
        node, nr = _input_edge(t, "backward(inputs=...)", i)
        if node.__class__ is AccumulateGrad:
            targets.add(node)
        elif not getattr(t, "_retains_grad", False):  # a retaining tensor gets its own
            captures.setdefault(node, []).append((nr, _accumulate_fn(t)))
        else:
            captures.setdefault(node, [])
    Backward(keep_graph=keep, create_graph=create_graph, captures=captures,
             targets=targets).run(edges, grads)


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
    results: list[Tensor | None] = [None] * len(ins)
    captures: dict[Node, list] = {}
    for i, t in enumerate(ins):
        node, nr = _input_edge(t, "grad()", i)
        captures.setdefault(node, []).append((nr, _store_fn(results, i)))
    keep = create_graph if retain_graph is None else retain_graph
    Backward(keep_graph=keep, create_graph=create_graph, captures=captures,
             accumulate=False).run(edges, grads)
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
    Backward(keep_graph=False, create_graph=False, release_from=release_from).run(edges, grads)


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
    running = _running.calls
    if not running:
        raise RuntimeError(
            "queue_callback: no backward is running in this thread; call it from a hook or a "
            "node's backward while .backward() runs"
        )
    running[0].callbacks.append(fn)


def current_backward() -> Backward | None:
    """The innermost backward (or ``grad``) call running in this thread, if any."""
    running = _running.calls
    return running[-1] if running else None


def accumulate_into(t: Tensor, g: Tensor | None) -> None:
    """Add ``g`` into ``t.grad``: in place when no graph is being built, else out of place
    (so that the sum is differentiable)."""
    if g is None:
        return
    current = t.grad
    if current is None:
        t.grad = g if state.grad_enabled else Tensor(g._data.copy())
    elif state.grad_enabled or current._requires_grad:
        t.grad = add(current, g)
    else:
        np.add(current._data, g._data, out=current._data)
        current._bump_version()


class _Running(threading.local):
    calls: list = []

    def __init__(self) -> None:
        self.calls = []


_running = _Running()
_tiebreak = itertools.count()


# ---------------------------------------------------------------------------- one call


class Backward:
    """One call of ``backward`` or ``grad``: the walk of the graph from its roots (NOTE
    [ Engine ]). ``into_leaves`` is True for a plain ``backward()``, which accumulates into
    every leaf's ``.grad`` (no ``inputs``, not ``grad``)."""

    __slots__ = (
        "keep_graph", "create_graph", "captures", "targets", "accumulate", "release_from",
        "into_leaves", "direct", "anomaly", "general", "callbacks", "buffers", "deps", "runs",
        "relevant", "sunk", "ready", "nxt", "__weakref__",
    )

    def __init__(
        self,
        *,
        keep_graph: bool,
        create_graph: bool,
        captures: dict[Node, list] | None = None,
        targets: set | None = None,
        accumulate: bool = True,
        release_from: int = 0,
    ) -> None:
        self.keep_graph = keep_graph
        self.create_graph = create_graph
        self.captures = captures
        self.targets = targets or set()
        self.accumulate = accumulate
        self.release_from = release_from
        self.into_leaves = captures is None and accumulate
        # sinks (point 5) only in a plain backward that builds no graph
        self.direct = self.into_leaves and not create_graph
        self.anomaly = state.anomaly
        self.general = captures is not None or self.anomaly  # run_node's general path
        self.callbacks: deque[Callable[[], None]] = deque()
        self.buffers: dict[Node, list] = {}
        self.deps: dict[Node, int] = {}
        self.runs: set | None = None  # None: every node runs
        self.relevant: set | None = None  # None: every child gets gradients
        self.sunk: set = set()  # accumulators whose .grad a sink added into (point 7)
        self.ready: list = []  # heap of (-sequence_nr, tiebreak, node)
        self.nxt: Node | None = None  # the one ready node while the heap is empty

    def run(self, edges: list[Edge], grads: list[Tensor]) -> None:
        """Walk the graph from ``edges`` seeded with ``grads``."""
        roots = self._seed(edges, grads)
        for node in roots:
            if not self.deps.get(node):
                heapq.heappush(self.ready, (-node._sequence_nr, next(_tiebreak), node))
        prev = state.grad_enabled
        state.grad_enabled = self.create_graph
        running = _running.calls
        running.append(self)
        try:
            self._walk()
            if len(running) == 1:
                while self.callbacks:
                    self.callbacks.popleft()()
        finally:
            state.grad_enabled = prev
            running.pop()

    def _seed(self, edges: list[Edge], grads: list[Tensor]) -> list[Node]:
        roots = []
        for (node, nr), g in zip(edges, grads):
            buf = self.buffers.get(node)
            if buf is None:
                buf = self.buffers[node] = [None] * node.num_outputs
                roots.append(node)
            buf[nr] = g if buf[nr] is None else add(buf[nr], g)
        self.deps = _dependencies(roots)
        if self.captures is not None:
            wanted = set(self.captures) | self.targets
            seen = self.deps.keys() | roots
            self.runs = _nodes_to_run(self.deps, seen, wanted, self.targets)
            self.relevant = self.runs | set(self.captures)
        return roots

    def _walk(self) -> None:
        """Run the ready nodes until none is left: the usual one (an op's node without
        hooks, outside anomaly mode, that runs and captures nothing) here, the others by
        run_node."""
        ready, buffers, deps = self.ready, self.buffers, self.deps
        usual = not self.anomaly
        captures, runs, relevant = self.captures, self.runs, self.relevant
        direct = self.direct
        free = not self.keep_graph
        release_from = self.release_from
        node = None
        while True:
            if node is None:
                node = self._next()
                if node is None:
                    break
            buf = buffers.pop(node, None)
            if (not usual or buf is None or node._hooks is not None
                    or node.__class__ is AccumulateGrad
                    or (captures is not None and (node in captures or node not in runs))):
                self.run_node(node, buf)
                node = None
                continue
            if direct and node.sink_inputs:
                out = _apply_with_sinks(node, buf, self.sunk)
            else:
                out = node.apply(buf)
            links = node._inputs  # NOTE [ A node's inputs ] in autograd/graph.py
            if 3 * len(out) != len(links):
                _validate(node, out)  # raises
            if free and node._sequence_nr >= release_from:
                node.release()
            nxt = None  # a chain-shaped graph never touches the heap
            # (every relevant child gets gradients, checked as _checked does)
            j = -3
            for g in out:
                j += 3
                child = links[j]
                if child is None or (relevant is not None and child not in relevant):
                    continue
                if g is not None:
                    # the dtype by identity (NumPy's are singletons; another falls to
                    # _validate, which compares by value): a tuple compare costs twice
                    m = links[j + 2]
                    if g.__class__ is not Tensor or g._data.dtype is not m[1] \
                            or g._data.shape != m[0]:
                        g = _validate(node, out)[j // 3]
                    nr = links[j + 1]
                    cbuf = buffers.get(child)
                    if cbuf is None:
                        cbuf = buffers[child] = [None] * child.num_outputs
                        cbuf[nr] = g
                    else:
                        cbuf[nr] = g if cbuf[nr] is None else add(cbuf[nr], g)
                d = deps[child] - 1
                deps[child] = d
                if d == 0:
                    if nxt is None and not ready:
                        nxt = child
                    else:
                        nxt = _queue(ready, nxt, child)
            # no gradient stays referenced from here while the next node runs (a step's
            # peak would hold one more)
            buf = out = g = cbuf = None
            node = nxt

    def _next(self) -> Node | None:
        node, self.nxt = self.nxt, None
        if node is None and self.ready:
            node = heapq.heappop(self.ready)[2]
        return node

    def run_node(self, node: Node, buf: list | None) -> None:
        """Run one ready node whose gradients ``buf`` were taken from the buffers: its
        hooks, its backward, and hand its gradients on."""
        if self.general or buf is None or node._hooks is not None:
            self._run_general(node, buf)
            return
        # else an AccumulateGrad (_walk runs every other node itself)
        if node.variable._hooks:
            _tensor_hooks(node, buf, self.accumulate)
        self._accumulate(node, buf)

    def _run_general(self, node: Node, buf: list | None) -> None:
        # hooks, captures, a node no gradient reached, anomaly mode
        if buf is not None:
            self._before(node, buf)
        if self.runs is not None and node not in self.runs:
            return
        if node.__class__ is AccumulateGrad:
            self._accumulate(node, buf)
            return
        if buf is None:
            out: tuple = (None,) * (len(node._inputs) // 3)
        elif node._hooks is not None or self.anomaly:
            out = _run_hooked(node, buf, self.anomaly)
        elif self.direct and node.sink_inputs:
            out = _checked(node, _apply_with_sinks(node, buf, self.sunk))
        else:
            out = _checked(node, node.apply(buf))
        self._hand_on(node, out)

    def _hand_on(self, node: Node, out: tuple) -> None:
        """Free ``node``'s saved values and add its gradients into its children's buffers."""
        if not self.keep_graph and node._sequence_nr >= self.release_from:
            node.release()
        relevant, buffers, deps = self.relevant, self.buffers, self.deps
        links = node._inputs
        for child, nr, g in zip(links[0::3], links[1::3], out):
            if child is None or (relevant is not None and child not in relevant):
                continue
            if g is not None:
                cbuf = buffers.get(child)
                if cbuf is None:
                    cbuf = buffers[child] = [None] * child.num_outputs
                cbuf[nr] = g if cbuf[nr] is None else add(cbuf[nr], g)
            d = deps[child] - 1
            deps[child] = d
            if d == 0:
                if self.nxt is None and not self.ready:
                    self.nxt = child  # a chain-shaped graph never touches the heap
                else:
                    self._push(child)

    def _push(self, node: Node) -> None:
        _queue(self.ready, self.nxt, node)
        self.nxt = None

    def _before(self, node: Node, buf: list) -> None:
        """Tensor hooks (and retain_grad) on the gradients reaching ``node``, then the
        captures of ``grad``/``backward(inputs=...)``."""
        if node._hooks is not None or node.__class__ is AccumulateGrad:
            _tensor_hooks(node, buf, self.accumulate)
        if self.captures is not None:
            for nr, fn in self.captures.get(node, ()):
                if buf[nr] is not None:
                    fn(buf[nr])

    def _accumulate(self, acc: AccumulateGrad, buf: list | None) -> None:
        if buf is not None and self.accumulate:
            if acc._hooks is not None:
                buf = _accumulator_hooks(acc, buf)
            g = buf[0]
            buf[0] = None  # the only reference the engine keeps (point 9)
            if g is not None:
                t = acc.variable
                with acc.lock:
                    if t.grad is None and not state.grad_enabled and _owned(g):
                        t.grad = g
                    else:
                        accumulate_into(t, g)
            g = None
        if self.accumulate and (buf is not None or acc in self.sunk):
            _post_accumulate_hooks(acc.variable)


# ---------------------------------------------------------------------------- pieces


def _queue(ready: list, nxt: Node | None, node: Node) -> None:
    """Push ``nxt`` (if any) and ``node`` on the heap of ready nodes."""
    if nxt is not None:
        heapq.heappush(ready, (-nxt._sequence_nr, next(_tiebreak), nxt))
    heapq.heappush(ready, (-node._sequence_nr, next(_tiebreak), node))


def _as_tuple(x: Any) -> tuple:
    if x is None:
        return ()
    if isinstance(x, Tensor):
        return (x,)
    return tuple(x)


def _refresh(t: Tensor) -> None:
    # a view whose base was changed in place with a graph since gets the base's graph
    # (NOTE [ Views and in-place ops ] in ops/inplace.py)
    if t._base is not None and t._vc.gen != t._view_gen:
        refresh_view(t)


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


def _root_grads(api: str, outputs: tuple, grads: tuple, create_graph: bool) -> list:
    if grads and len(grads) != len(outputs):
        raise RuntimeError(
            f"{api}: got {len(grads)} gradients for {len(outputs)} outputs; pass one per output"
        )
    return [_root_grad(api, i, t, grads[i] if grads else None, create_graph)
            for i, t in enumerate(outputs)]


def _root_grad(api: str, i: int, t: Tensor, g: Any, create_graph: bool) -> Tensor:
    if g is None:
        if t._data.size != 1:
            raise RuntimeError(
                f"{api} needs a scalar output or an explicit gradient; got shape "
                f"{tuple(t.shape)} for output {i}. Pass gradient=mg.ones_like(out) (or the "
                "vector you want a vector-Jacobian product with), or reduce the output first, "
                "e.g. out.sum()."
            )
        return Tensor(np.ones(t._data.shape, dtype=t._data.dtype))
    if not isinstance(g, Tensor):
        g = Tensor(np.asarray(g, dtype=t._data.dtype))
    if g._data.shape != t._data.shape:
        raise RuntimeError(
            f"{api}: the gradient for output {i} has shape {tuple(g.shape)} but the output has "
            f"shape {tuple(t.shape)}; pass a gradient of the output's shape"
        )
    if g._data.dtype != t._data.dtype:
        g = to(g, dtype=t._data.dtype)
    if not create_graph and g._requires_grad:
        g = g.detach()
    return g


def _accumulate_fn(t: Tensor) -> Callable[[Tensor], None]:
    return lambda g: accumulate_into(t, g)


def _store_fn(results: list, i: int) -> Callable[[Tensor], None]:
    def store(g: Tensor) -> None:
        results[i] = g if results[i] is None else add(results[i], g)

    return store


def _owned(g: Any) -> bool:
    # point 9: the references left are the local name in _accumulate, this function's
    # argument and getrefcount's; the array's are the Tensor's slot and the argument
    data = g._data
    return (
        sys.getrefcount(g) == 3
        and sys.getrefcount(data) == 3
        and data.base is None
        and data.flags.writeable
        and g.__class__ is Tensor
    )


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
        acc = node._inputs[3 * i]
        # a leaf without .grad yet is no sink (read unlocked: a .grad set meanwhile by
        # another thread is then added to as usual, not sunk into)
        if acc.__class__ is AccumulateGrad and acc.variable.grad is not None:
            locks[id(acc)] = acc.lock
    if not locks:
        return node.apply(buf)
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
            sunk.add(node._inputs[3 * i])
        return out
    finally:
        for lock in held:
            lock.release()


def _sinks(node: Node) -> dict[int, Tensor]:
    """The existing ``.grad`` tensors ``node`` may add into (NOTE [ Accumulate in place ])."""
    sinks = {}
    for i in node.sink_inputs:
        acc = node._inputs[3 * i]
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


def _dependencies(roots: list[Node]) -> dict[Node, int]:
    """How many edges reach each node below the roots (a root reached from another root
    too is counted; it is walked once). Every root is a key, at 0 if no edge reaches it."""
    deps: dict[Node, int] = dict.fromkeys(roots, 0)
    stack = list(roots)
    push, pop = stack.append, stack.pop
    while stack:
        links = pop()._inputs  # a child every three entries (NOTE [ A node's inputs ])
        n = len(links)
        j = 0
        while j < n:  # no slice made: the fewest instructions of the forms tried
            child = links[j]
            j += 3
            if child is None:
                continue
            if child in deps:
                deps[child] += 1
            else:
                deps[child] = 1
                push(child)
    return deps


def _nodes_to_run(deps: dict, seen: set, wanted: set, targets: set) -> set:
    """The nodes on a path from a root to a wanted node (NOTE [ Engine ] point 2)."""
    indeg = dict(deps)
    order = []
    stack = [n for n in seen if not indeg.get(n)]
    while stack:
        node = stack.pop()
        order.append(node)
        for child in node._inputs[0::3]:
            if child is not None:
                indeg[child] -= 1
                if indeg[child] == 0:
                    stack.append(child)
    runs = set(targets)
    for node in reversed(order):
        for child in node._inputs[0::3]:
            if child is not None and (child in runs or child in wanted):
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
            for r in list(retain):
                _retain(r, g)


def _retain(r: RetainGrad, g: Tensor) -> None:
    """``retain_grad()``: keep the final gradient of the tensor, summed over backwards."""
    t = r.tensor()
    if t is None or t.grad_fn is not r.node:
        return
    if t.grad is None:
        t.grad = g if g.requires_grad else Tensor(g._data.copy())
    else:
        t.grad = add(t.grad, g)


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


def _accumulator_hooks(acc: AccumulateGrad, buf: list) -> list:
    """A leaf accumulator's node hooks: pre-hooks may replace the gradient; post hooks see
    it (there are no input gradients)."""
    grads = buf
    for fn in list(acc._hooks.pre):
        r = fn(tuple(grads))
        if r is not None:
            grads = list(r)
    for fn in list(acc._hooks.post):
        fn((), tuple(grads))
    return grads


def _run_hooked(node: Node, buf: list, anomaly: bool) -> tuple:
    grads = buf
    hooks = node._hooks
    if hooks is not None:
        for fn in list(hooks.pre):
            r = fn(tuple(grads))
            if r is not None:
                grads = list(r)
    grad_outputs = tuple(grads) if hooks is not None and hooks.post else None
    out = run_checked(node, grads) if anomaly else node.apply(grads)
    if grad_outputs is not None:
        out = _validate(node, out)  # post hooks see the final gradients
        for fn in list(hooks.post):
            r = fn(out, grad_outputs)
            if r is not None:
                out = tuple(r)
    return _validate(node, out)


def _checked(node: Node, out: tuple) -> tuple:
    """``out`` if every gradient already fits its input's shape and dtype (the usual case,
    checked cheaply), else ``_validate(node, out)``."""
    meta = node._inputs[2::3]
    if len(out) != len(meta):
        return _validate(node, out)
    for g, m in zip(out, meta):
        if g is not None and (g.__class__ is not Tensor or m.__class__ is not Meta
                              or (g._data.shape, g._data.dtype) != m):
            return _validate(node, out)
    return out


def _validate(node: Node, out: tuple) -> tuple:
    meta = node._inputs[2::3]
    if len(out) != len(meta):
        raise RuntimeError(
            f"{node.name()} returned {len(out)} gradients but its forward had {len(meta)} "
            "inputs; return one gradient (or None) per input"
        )
    fixed = None
    for i, g in enumerate(out):
        if g is None or meta[i].__class__ is not Meta:  # no check for a constant input
            continue
        g2 = _fit(node, i, g, meta[i])
        if g2 is not g:
            if fixed is None:
                fixed = list(out)
            fixed[i] = g2
    return out if fixed is None else tuple(fixed)


def _fit(node: Node, i: int, g: Any, m: Any) -> Tensor:
    """Gradient ``i`` of ``node`` checked against its input's shape and dtype: summed back
    to the shape for a broadcasting node, cast to the dtype."""
    shape, dtype = m
    if not isinstance(g, Tensor):
        raise TypeError(
            f"{node.name()} returned a {type(g).__name__} as gradient {i}; expected a Tensor or "
            "None"
        )
    if g._data.shape != shape and node.broadcasts and _broadcastable(shape, g._data.shape):
        g = sum_to(g, shape=tuple(shape))
    if g._data.shape != shape:
        raise RuntimeError(
            f"{node.name()} returned an invalid gradient at index {i}: got shape "
            f"{tuple(g._data.shape)} but expected shape {tuple(shape)} (the shape of input {i} "
            "of its forward)"
        )
    if g._data.dtype != dtype:
        g = to(g, dtype=dtype)
    return g


def _broadcastable(shape: tuple, big: tuple) -> bool:
    """Whether ``shape`` broadcasts to ``big``."""
    if len(shape) > len(big):
        return False
    return all(s == 1 or s == b for s, b in zip(shape[::-1], big[::-1]))


def _tensor_backward(
    self: Tensor,
    gradient: Tensor | None = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    inputs: Any = None,
) -> None:
    """Accumulate the gradient of this tensor into the leaves' ``.grad``.

    Example:
        >>> import memgrad as mg
        >>> x = mg.tensor(3.0, requires_grad=True)
        >>> (x ** 2).backward()
        >>> x.grad.item()
        6.0
    """
    backward(self, gradient, retain_graph, create_graph, inputs)


# the methods of Tensor that need the engine (the engine sits above tensor.py)
Tensor.backward = _tensor_backward  # type: ignore[method-assign]
