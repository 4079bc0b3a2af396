"""The graph planner's solvers: which values of a stage to keep (``solve_keep``), and the
optimal multi-level recomputation schedule of a chain of stages (``solve_chain``).

NOTE [ Keep or recompute ]
Inside a stage, a value its backward reads is either kept from the forward or recomputed
in backward from what is kept: the stage's input, the buffers chosen to keep, and tensors
from outside. A ``KeepProblem`` is the stage's ops as nodes in forward order: each node's
time, the bytes of the buffer it owns (0 for a view, whose root node owns it), its producers
inside the stage and whether backward reads it. Keeping a set K of roots costs their bytes;
every read node whose root is not in K is recomputed, with every producer it needs that is
neither kept nor outside, each op once (the runtime caches what it rebuilds until backward
has used it). ``solve_keep`` minimises the recomputed time with the kept bytes under a
budget: exactly by enumeration for up to ``BRUTE_FORCE_LIMIT`` candidate buffers, exactly
by an integer program when HiGHS (``highspy``) or ``scipy.optimize.milp`` is installed (the
``plan`` extra), else greedily (``keep_gap`` tells how far greedy is from exact).

NOTE [ Chain schedule ]
Stages run in a chain: stage j reads buffer a_j (made by stage j-1) and makes a_{j+1}. A
schedule is a list of actions: ``("fwd", j, v)`` runs stage j forward, keeping variant v of
its values (v None: keeps nothing, the values are rebuilt later); ``("drop", j)`` frees
a_j; ``("bwd", j)`` runs stage j's backward, which frees a_j, the kept values of stage j
and the gradient of a_{j+1}, and makes the gradient of a_j. Its memory is predicted at
each action (``simulate``): what is held (inputs a_j kept as sources, kept variants,
the gradient flowing back), plus, at a forward, the stage's output and forward transient,
and at a backward, the values rebuilt for it (all that it reads), the gradient of its
input and its backward transient, and always the parameter gradients made by the
backwards done so far. ``solve_chain`` is the dynamic program of Beaumont et al.
("Optimal checkpointing for heterogeneous chains", 2019) over sub-chains (s, t) and
memory m in slots: to run the backward of stages s..t-1 holding a_s and the gradient of
a_t within m, either run stage s keeping a variant of its values and solve (s+1, t) in
what is left, or run stages s..k-1 keeping nothing, keep a_k, solve (k, t) in m less a_s,
then (s, k) in m. It is exact for the model at the slot size: recomputation nests to any
depth, so budgets below any single-level segmentation's fit.
"""

from __future__ import annotations

import itertools
import math
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "KeepProblem",
    "keep_cost",
    "keep_closure",
    "solve_keep",
    "keep_frontier",
    "keep_gap",
    "ilp_available",
    "ChainStage",
    "ChainSolution",
    "solve_chain",
    "simulate",
    "schedules",
    "plain_schedule",
    "BRUTE_FORCE_LIMIT",
    "SLOTS",
]

BRUTE_FORCE_LIMIT = 12  # candidate buffers up to which solve_keep enumerates every subset
SLOTS = 600  # memory slots of the chain program (its exactness is at this resolution)


# ---------------------------------------------------------------------------- keep or recompute


@dataclass(frozen=True)
class KeepProblem:
    """One stage's values (NOTE [ Keep or recompute ]). Node ``i`` takes ``times[i]``
    seconds, owns ``sizes[i]`` bytes (0 for a view of ``roots[i]``; ``roots[i]`` is -1 for a
    view of something outside, which is always there), reads ``parents[i]`` (nodes of the
    stage) and is read by backward when ``read[i]``. Roots in ``always`` (the stage's input
    and output) are held anyway.

    Example:
        >>> p = KeepProblem((1.0, 2.0), (8, 8), (0, 1), ((), (0,)), (True, True))
        >>> keep_cost(p, frozenset({1}))
        1.0
    """

    times: tuple[float, ...]
    sizes: tuple[int, ...]
    roots: tuple[int, ...]
    parents: tuple[tuple[int, ...], ...]
    read: tuple[bool, ...]
    always: frozenset[int] = frozenset()

    @property
    def candidates(self) -> list[int]:
        """The buffers that may be kept: those backward reads (through any view)."""
        read = {self.roots[i] for i, r in enumerate(self.read) if r}
        return [i for i, r in enumerate(self.roots)
                if r == i and i in read and self.sizes[i] > 0 and i not in self.always]

    def available(self, i: int, kept: frozenset[int]) -> bool:
        r = self.roots[i]
        return r < 0 or r in kept or r in self.always


def keep_cost(problem: KeepProblem, kept: frozenset[int]) -> float:
    """Seconds of recomputation when the roots ``kept`` are kept."""
    return sum(problem.times[i] for i in keep_closure(problem, kept))


def keep_closure(problem: KeepProblem, kept: frozenset[int]) -> set[int]:
    """The nodes recomputed when the roots ``kept`` are kept."""
    need = [i for i, read in enumerate(problem.read)
            if read and not problem.available(i, kept)]
    done: set[int] = set()
    while need:
        i = need.pop()
        if i in done:
            continue
        done.add(i)
        need.extend(p for p in problem.parents[i] if not problem.available(p, kept))
    return done


def _bytes(problem: KeepProblem, kept: frozenset[int]) -> int:
    return sum(problem.sizes[i] for i in kept)


def ilp_available() -> str | None:
    """Which integer-program solver is installed: ``"highspy"``, ``"scipy"`` or None."""
    try:
        import highspy  # noqa: F401
        return "highspy"
    except ImportError:
        pass
    try:
        from scipy.optimize import milp  # noqa: F401
        return "scipy"
    except ImportError:
        return None


def solve_keep(
    problem: KeepProblem, budget: int, method: str = "auto"
) -> tuple[frozenset[int], float]:
    """The roots to keep, with at most ``budget`` bytes, that leave the least recomputation,
    and that recomputation's seconds. ``method`` is ``"brute"`` (every subset), ``"ilp"``,
    ``"greedy"`` or ``"auto"`` (brute force when small, else the integer program when
    installed, else greedy).

    Example:
        >>> p = KeepProblem((1.0, 5.0, 1.0), (4, 4, 4), (0, 1, 2), ((), (0,), (1,)),
        ...                 (True, True, True))
        >>> solve_keep(p, 4)
        (frozenset({1}), 2.0)
    """
    if method not in ("auto", "brute", "ilp", "greedy"):
        raise ValueError(f'solve_keep: method must be "auto", "brute", "ilp" or "greedy", '
                         f"got {method!r}")
    if method == "auto":
        if len(problem.candidates) <= BRUTE_FORCE_LIMIT:
            method = "brute"
        else:
            method = "ilp" if ilp_available() else "greedy"
    if method == "brute":
        return _brute(problem, budget)
    if method == "ilp":
        return _ilp(problem, budget)
    return _greedy(problem, budget)


def _brute(problem: KeepProblem, budget: int) -> tuple[frozenset[int], float]:
    cands = problem.candidates
    best: tuple[float, int, frozenset[int]] | None = None
    for r in range(len(cands) + 1):
        for combo in itertools.combinations(cands, r):
            kept = frozenset(combo)
            nbytes = _bytes(problem, kept)
            if nbytes > budget:
                continue
            key = (keep_cost(problem, kept), nbytes, kept)
            if best is None or key[:2] < best[:2]:
                best = key
    assert best is not None  # the empty set always fits
    return best[2], best[0]


def _greedy(problem: KeepProblem, budget: int) -> tuple[frozenset[int], float]:
    """The better of dropping from all (most bytes freed per second added) and adding to
    none (most seconds saved per byte), each under the budget."""
    cands = problem.candidates
    kept = frozenset(c for c in cands if problem.sizes[c] > 0)
    while _bytes(problem, kept) > budget:
        base = keep_cost(problem, kept)
        kept = kept - {max(kept, key=lambda c: problem.sizes[c] / (
            keep_cost(problem, kept - {c}) - base + 1e-12))}
    down = (kept, keep_cost(problem, kept))
    kept = frozenset()
    while True:
        base = keep_cost(problem, kept)
        room = budget - _bytes(problem, kept)
        options = [(base - keep_cost(problem, kept | {c})) / problem.sizes[c]
                   for c in cands if c not in kept and problem.sizes[c] <= room]
        choices = [c for c in cands if c not in kept and problem.sizes[c] <= room]
        if not choices or max(options) <= 0:
            break
        kept = kept | {choices[int(np.argmax(options))]}
    up = (kept, keep_cost(problem, kept))
    return min(down, up, key=lambda kc: (kc[1], _bytes(problem, kc[0])))


def _ilp(problem: KeepProblem, budget: int) -> tuple[frozenset[int], float]:
    """min sum t_i x_i  s.t.  x_i + k_root(i) >= 1 for read nodes, x_p + k_root(p) >= x_i
    for each producer p of i, sum bytes k <= budget; x (recompute) and k (keep) binary."""
    solver = ilp_available()
    if solver is None:
        raise ImportError(
            "solve_keep(method='ilp') needs highspy or scipy: pip install 'memgrad[plan]'"
        )
    n = len(problem.times)
    cands = problem.candidates
    kcol = {c: n + j for j, c in enumerate(cands)}
    rows: list[tuple[dict[int, float], float]] = []  # (coefficients, lower bound) of >= rows

    def avail(i: int, coef: dict[int, float]) -> float:
        """Add "i is there" terms to coef; returns the constant part (1 if always there)."""
        r = problem.roots[i]
        if r < 0 or r in problem.always:
            return 1.0
        coef[i] = coef.get(i, 0.0) + 1.0
        if r in kcol:
            coef[kcol[r]] = coef.get(kcol[r], 0.0) + 1.0
        return 0.0

    for i in range(n):
        if problem.read[i]:
            coef: dict[int, float] = {}
            const = avail(i, coef)
            if const < 1:
                rows.append((coef, 1.0))
        for p in problem.parents[i]:
            coef = {}
            const = avail(p, coef)
            if const < 1:
                coef[i] = coef.get(i, 0.0) - 1.0
                rows.append((coef, 0.0))
    cost = np.array(list(problem.times) + [0.0] * len(cands))
    size_row = np.zeros(n + len(cands))
    for c in cands:
        size_row[kcol[c]] = problem.sizes[c]
    x = _solve_binary(solver, cost, rows, size_row, float(budget))
    kept = frozenset(c for c in cands if x[kcol[c]] > 0.5)
    return kept, keep_cost(problem, kept)


def _solve_binary(solver: str, cost: np.ndarray, rows: list, size_row: np.ndarray,
                  budget: float) -> np.ndarray:
    nvar = len(cost)
    a = np.zeros((len(rows) + 1, nvar))
    lower = np.zeros(len(rows) + 1)
    upper = np.full(len(rows) + 1, np.inf)
    for j, (coef, lo) in enumerate(rows):
        for i, v in coef.items():
            a[j, i] = v
        lower[j] = lo
    a[-1] = size_row
    lower[-1], upper[-1] = -np.inf, budget
    if solver == "scipy":
        from scipy.optimize import Bounds, LinearConstraint, milp

        res = milp(cost, constraints=LinearConstraint(a, lower, upper),
                   integrality=np.ones(nvar), bounds=Bounds(0, 1))
        return np.round(res.x)
    import highspy

    h = _quiet_highs(highspy)
    inf = highspy.kHighsInf
    for i in range(nvar):
        h.addVar(0.0, 1.0)
        h.changeColCost(i, float(cost[i]))
        h.changeColIntegrality(i, highspy.HighsVarType.kInteger)
    for j in range(a.shape[0]):
        idx = np.nonzero(a[j])[0].astype(np.int32)
        lo = -inf if not np.isfinite(lower[j]) else float(lower[j])
        hi = inf if not np.isfinite(upper[j]) else float(upper[j])
        h.addRow(lo, hi, len(idx), idx, a[j, idx].astype(np.float64))
    h.run()
    return np.round(np.array(h.getSolution().col_value))


def _quiet_highs(highspy: Any) -> Any:
    """A HiGHS instance, made with the process's stdout closed: HiGHS writes its banner
    there (below Python), which would mix into a command's JSON."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
    h.setOptionValue("output_flag", False)
    return h


def keep_frontier(
    problem: KeepProblem, method: str = "auto", points: int = 8
) -> list[tuple[frozenset[int], int, float]]:
    """Pareto-optimal ``(kept roots, kept bytes, recompute seconds)`` from keeping every
    read buffer (no recomputation) to keeping none, at ``points`` budgets in between.

    Example:
        >>> p = KeepProblem((1.0, 5.0), (4, 4), (0, 1), ((), (0,)), (True, True))
        >>> [(b, s) for _, b, s in keep_frontier(p)]
        [(8, 0.0), (4, 1.0), (0, 6.0)]
    """
    read_roots = frozenset(problem.candidates)
    total = _bytes(problem, read_roots)
    found = {(read_roots, total, 0.0)}
    for j in range(points):
        budget = total * j // points
        kept, seconds = solve_keep(problem, budget, method)
        found.add((kept, _bytes(problem, kept), seconds))
    frontier: list[tuple[frozenset[int], int, float]] = []
    for kept, nbytes, seconds in sorted(found, key=lambda f: (f[1], f[2])):
        if not frontier or seconds < frontier[-1][2]:
            frontier.append((kept, nbytes, seconds))
    return frontier[::-1]


def keep_gap(problem: KeepProblem, budget: int) -> float:
    """Seconds by which greedy is worse than exact on ``problem`` under ``budget`` (exact:
    the integer program when installed, else every subset)."""
    exact = "ilp" if ilp_available() else "brute"
    return solve_keep(problem, budget, "greedy")[1] - solve_keep(problem, budget, exact)[1]


# ---------------------------------------------------------------------------- chain


@dataclass(frozen=True)
class ChainStage:
    """One stage of the chain as the schedule sees it (NOTE [ Chain schedule ]): bytes of
    its input a_j (0 for the model's input, which is held anyway) and output a_{j+1}, of the
    gradient of its input, whether its backward reads its output, the bytes of the other
    values its backward reads (``full``), its keep variants as ``(bytes kept, seconds
    recomputed)`` (the first keeps all: ``(full, 0.0)``), forward seconds, transients and
    the bytes of parameter gradients its backward makes. ``pinned[v]``: bytes of variant
    v's kept values that the runtime holds through the whole backward of the stage for the
    values it rebuilds, where the plain step (whose backward transient this is) had freed
    them before its peak."""

    x_in: int
    x_out: int
    g_in: int
    saves_out: bool
    full: int
    options: tuple[tuple[int, float], ...]
    seconds: float
    fwd_transient: int = 0
    bwd_transient: int = 0
    grads: int = 0
    saves_in: bool = True
    pinned: tuple[int, ...] = ()

    def pinned_bytes(self, v: int | None) -> int:
        """``pinned[v]``, 0 where not given."""
        return self.pinned[v] if v is not None and v < len(self.pinned) else 0

    def needs_input(self, v: int) -> bool:
        """Whether stage j's backward needs a_j when it ran with variant ``v``: it reads it,
        or rebuilds values from it."""
        return self.saves_in or self.options[v][1] > 0


@dataclass
class ChainSolution:
    """A schedule with its predicted peak and seconds (every forward run, the first
    included; ``extra`` is what recomputation adds)."""

    actions: list[tuple]
    peak: int
    seconds: float
    extra: float
    # least seconds at each budget of ``slot`` * i bytes (inf: none fits)
    frontier: np.ndarray | None = None
    slot: int = 1


Action = tuple


def simulate(stages: Sequence[ChainStage], actions: Sequence[Action]) -> tuple[int, float]:
    """Predicted peak bytes and forward seconds of ``actions`` (NOTE [ Chain schedule ]).

    Example:
        >>> s = ChainStage(0, 4, 0, False, 8, ((8, 0.0), (0, 1.0)), 1.0)
        >>> simulate([s], [("fwd", 0, 0), ("bwd", 0)])
        (16, 1.0)
    """
    n = len(stages)
    grads_after = _grads_after(stages)
    held: dict[str, int] = {f"g{n}": stages[-1].x_out}
    variant: dict[int, int] = {}
    done = n
    peak = 0
    seconds = 0.0
    for action in actions:
        kind, j = action[0], action[1]
        st = stages[j]
        if kind == "fwd":
            v = action[2]
            held[f"a{j + 1}"] = st.x_out
            if v is not None:
                held[f"k{j}"] = st.options[v][0]
                variant[j] = v
                seconds += st.options[v][1]
            peak = max(peak, sum(held.values()) + st.fwd_transient + grads_after[done])
            seconds += st.seconds
        elif kind == "drop":
            held.pop(f"a{j}", None)
        else:
            held.pop(f"a{j + 1}", None)  # the model's output, for the last stage
            kept = held.get(f"k{j}", 0)
            extra = (st.full - kept + (st.x_out if st.saves_out else 0)
                     + st.pinned_bytes(variant.pop(j, None)))
            peak = max(peak, sum(held.values()) + extra + st.g_in + st.bwd_transient
                       + grads_after[j])
            for key in (f"k{j}", f"a{j}", f"g{j + 1}"):
                held.pop(key, None)
            held[f"g{j}"] = st.g_in
            done = j
    return peak, seconds


def _grads_after(stages: Sequence[ChainStage]) -> list[int]:
    after = [0] * (len(stages) + 1)
    for j in range(len(stages) - 1, -1, -1):
        after[j] = after[j + 1] + stages[j].grads
    return after


def schedules(stages: Sequence[ChainStage], s: int = 0, t: int | None = None
              ) -> Iterator[list[Action]]:
    """Every schedule of the chain program's form for stages s..t-1 (for brute force)."""
    t = len(stages) if t is None else t
    for v in range(len(stages[s].options)):
        first = _run_keeping(stages, s, v)
        if t == s + 1:
            yield [*first, ("bwd", s)]
        else:
            for rest in schedules(stages, s + 1, t):
                yield [*first, *rest, ("bwd", s)]
    for k in range(s + 1, t):
        for right in schedules(stages, k, t):
            for left in schedules(stages, s, k):
                yield _advance(s, k) + right + left


def plain_schedule(stages: Sequence[ChainStage]) -> list[Action]:
    """The schedule of a plain step: every stage keeps all, nothing is recomputed."""
    actions = [a for j in range(len(stages)) for a in _run_keeping(stages, j, 0)]
    return actions + [("bwd", j) for j in range(len(stages) - 1, -1, -1)]


def _run_keeping(stages: Sequence[ChainStage], s: int, v: int) -> list[Action]:
    """Run stage s keeping variant v, and free its input if its backward does not need it."""
    return [("fwd", s, v)] if stages[s].needs_input(v) else [("fwd", s, v), ("drop", s)]


def _advance(s: int, k: int) -> list[Action]:
    actions: list[Action] = [("fwd", s, None)]
    for j in range(s + 1, k):
        actions += [("fwd", j, None), ("drop", j)]
    return actions


def _shift(arr: np.ndarray, d: int) -> np.ndarray:
    """``out[..., m] = arr[..., m - d]`` (infinite where m < d)."""
    if d == 0:
        return arr
    out = np.full_like(arr, np.inf)
    size = arr.shape[-1]
    if d < size:
        out[..., d:] = arr[..., : size - d]
    return out


def solve_chain(
    stages: Sequence[ChainStage], budget: int, slots: int = SLOTS, least: bool = False
) -> ChainSolution | None:
    """The schedule with the least forward seconds whose predicted peak fits ``budget``
    (NOTE [ Chain schedule ]), or None when none does; with ``least=True``, the one with the
    least peak (then the least seconds) among those that fit. Bytes are rounded up to slots
    of ``budget / slots`` (at least 1 byte), so the program is exact when sizes are
    multiples of the slot.

    Example:
        >>> s = ChainStage(0, 4, 0, False, 8, ((8, 0.0),), 1.0)
        >>> t = ChainStage(4, 4, 4, False, 8, ((8, 0.0),), 1.0)
        >>> solve_chain([s, t], 10**6).actions
        [('fwd', 0, 0), ('fwd', 1, 0), ('bwd', 1), ('bwd', 0)]
        >>> solve_chain([s, t], 20).actions[0]
        ('fwd', 0, None)
    """
    n = len(stages)
    slot = max(1, math.ceil(budget / slots))
    m_max = budget // slot

    def q(b: int) -> int:
        return -(-b // slot)

    x_in = [q(s.x_in) for s in stages]
    x_out = [q(s.x_out) for s in stages]
    grad = [q(s.g_in) for s in stages] + [x_out[-1]]  # grad[j]: of a_j
    ftr = [q(s.fwd_transient) for s in stages]
    after = [q(g) for g in _grads_after(stages)]
    m = np.arange(m_max + 1)
    seconds = np.array([s.seconds for s in stages])
    # what running stage j forward holds besides its block's input, its gradient and the
    # gradients after it: a_j (for j after the block's first), a_{j+1}, its transient
    ahead = np.array([x_in[j] + x_out[j] + ftr[j] for j in range(n)])
    cost: dict[tuple[int, int], np.ndarray] = {}
    choice: dict[tuple[int, int], np.ndarray] = {}
    for length in range(1, n + 1):
        for s in range(n - length + 1):
            t = s + length
            st = stages[s]
            g_t = grad[t]
            best = np.full(m_max + 1, np.inf)
            pick = np.full(m_max + 1, -1, dtype=np.int64)
            bwd_need = (x_in[s] + q(st.full) + (x_out[s] if st.saves_out else 0)
                        + grad[s + 1] + grad[s] + q(st.bwd_transient) + after[s])
            for v, (kept, extra) in enumerate(st.options):
                h = q(kept)
                held = x_in[s] if st.needs_input(v) else 0
                need = max(x_in[s] + g_t + h + x_out[s] + ftr[s] + after[t],
                           bwd_need - x_in[s] + held + q(st.pinned_bytes(v)))
                rest = 0.0 if length == 1 else _shift(cost[s + 1, t], held + h)
                cand = np.where(m >= need, st.seconds + extra + rest, np.inf)
                better = cand < best
                best[better], pick[better] = cand[better], v
            if length > 1:  # advance to each k in s+1..t-1 at once (rows), then right, left
                fwd = np.cumsum(seconds[s:t - 1])  # stages s..k-1, added in order
                reach = ahead[s:t - 1].copy()
                reach[0] = x_out[s] + ftr[s]
                fneed = x_in[s] + g_t + after[t] + np.maximum.accumulate(reach)
                right = _shift(np.stack([cost[k, t] for k in range(s + 1, t)]), x_in[s])
                cand = fwd[:, None] + right + np.stack([cost[s, k] for k in range(s + 1, t)])
                cand[m[None, :] < fneed[:, None]] = np.inf
                row = np.argmin(cand, axis=0)  # the first k of the least, as in order
                top = cand[row, m]
                better = top < best
                best[better], pick[better] = top[better], len(st.options) + s + 1 + row[better]
            cost[s, t], choice[s, t] = best, pick
    top = cost[0, n]
    if not np.isfinite(top[m_max]):
        return None
    at = int(np.argmax(np.isfinite(top))) if least else m_max
    actions = _expand(stages, choice, x_in, slot, 0, n, at)
    peak, seconds = simulate(stages, actions)
    return ChainSolution(actions, peak, seconds, seconds - sum(s.seconds for s in stages),
                         top, slot)


def _expand(stages: Sequence[ChainStage], choice: dict, x_in: list[int], slot: int,
            s: int, t: int, m: int) -> list[Action]:
    c = int(choice[s, t][m])
    options = stages[s].options
    if c < len(options):
        first = _run_keeping(stages, s, c)
        if t == s + 1:
            return [*first, ("bwd", s)]
        h = -(-options[c][0] // slot)
        held = x_in[s] if stages[s].needs_input(c) else 0
        inner = _expand(stages, choice, x_in, slot, s + 1, t, m - held - h)
        return [*first, *inner, ("bwd", s)]
    k = c - len(options)
    right = _expand(stages, choice, x_in, slot, k, t, m - x_in[s])
    left = _expand(stages, choice, x_in, slot, s, k, m)
    return _advance(s, k) + right + left
