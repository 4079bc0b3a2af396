"""Differential test: random programs run eagerly, checkpointed and in NumPy must agree.

The program model (``tests/helpers/programs.py``) is a small register machine. Its inputs
are float64 leaves that require grad (sides 1-4, ndim 0-3), int64 index tensors and bool
masks. Each instruction applies one op to earlier registers: broadcasting arithmetic
(``+ - * /`` on safe domains, ``maximum``/``minimum``), unary ops (``exp``, ``tanh``,
``sigmoid``, ``relu``, ``abs``, ``log``/``sqrt`` on safe domains), views (``reshape``/
``view``, ``transpose``/``permute``, ``unsqueeze``/``squeeze``, ``expand``, basic slicing),
advanced indexing with an index tensor or a mask, reductions with ``dim``/``keepdim``
(``sum``, ``mean``, ``amax``/``amin``, ``max(dim).values``, ``var``/``std``,
``logsumexp``), batched ``@``, ``softmax``/``log_softmax``, ``F.layer_norm``,
``F.cross_entropy`` with an int target, ``F.mse_loss``, ``cat``/``stack``; and, in the
in-place programs, ``add_``/``mul_``/``fill_``/``t[index] = v`` on non-leaf registers,
zeros buffers filled row by row with values that require grad (sometimes with a view of
the buffer taken before the writes and read by the loss) and in-place changes to index and
mask tensors. Random
contiguous instruction ranges run as ``memgrad.checkpoint.checkpoint`` regions (reentrant,
or non-reentrant with a random ``policy=``) that take some registers as arguments and read
others by closure. The loss is ``sum((out * w).sum())`` over a few registers, with fixed
random weights ``w``.

Every example runs the program in NumPy (the reference), eagerly in memgrad, and with its
checkpoint regions. The rules:

A. Without in-place changes: the eager forward values match NumPy, the eager gradients
   match central finite differences of the NumPy program (directional derivatives along two
   random directions; examples whose finite-difference points straddle a kink or a tie are
   rejected), and the checkpointed run's forward values and leaf gradients are bit-identical
   to the eager run's (with a reentrant region, gradients agree to rtol 1e-11: its inner
   backward sums a leaf's gradient terms in another order).
B. An in-place change between the forward and ``backward()`` (of an intermediate, a leaf
   under ``no_grad``, an index tensor or a mask): eager either raises a RuntimeError that
   says "modified by an inplace operation" or gives exactly the gradient it gives without
   the change (the gradient of the computation as it happened). The checkpointed run with
   the same change raises when eager raises (that RuntimeError, or a ``CheckpointError``);
   when eager gives gradients it gives the same bits or raises ``CheckpointError`` (its
   recomputation would read a value changed since the forward).
C. In-place changes inside the program are ordinary eager code: the rules of A hold, except
   that eager may refuse with a clear RuntimeError (in the forward, e.g. an in-place change
   of a view of a tensor that requires grad; or "modified by an inplace operation" in
   backward, where a saved value was changed), and the checkpointed run must then refuse
   too; a checkpointed run may raise ``CheckpointError`` when the program changes something
   in place after a region started. A view taken of a buffer before the buffer is
   written sees the write, with its graph, as in PyTorch.

``MEMGRAD_THOROUGH=1`` runs thousands of examples instead of a few hundred, on longer
programs. The tests at the end are the smallest programs the generator found for each
distinct failure (kept as plain tests, so that each one names its rule).
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

import memgrad as mg
import memgrad.nn.functional as F
from memgrad.checkpoint import checkpoint, policy
from memgrad.errors import CheckpointError
from tests.helpers.programs import (
    MgRun,
    NpRun,
    Program,
    leaf_values,
    mutations,
    programs,
    run_mg,
    run_np,
)

THOROUGH = os.environ.get("MEMGRAD_THOROUGH") == "1"
MODIFIED = "modified by an inplace operation"
EPS = 1e-6
RTOL = 1e-5
ATOL = 1e-7  # times (1 + sum of |loss terms|): the round-off of the differences


@pytest.fixture(autouse=True, scope="module")
def _small_causal_blocks_and_kernels():
    """Attention's causal products skip the blocks of rows above the diagonal; at the
    generator's short sequences, blocks of 2 rows make them skip some. The compiled
    elementwise kernels (relu, where, float32 exp) run from 16,384 elements, and batches of
    products as jobs on the helper threads (NOTE [ Products as jobs ]) from 2^20
    multiply-adds: here on every size, so that the programs' small tensors take them too. A
    3x3 convolution takes the Winograd path from 16 channels and 256 tiles (NOTE [ Winograd
    convolution ]): here on every size too, its bias gradient then from the weight
    gradient's op, and its loops over the batch as jobs on the helpers from 2^23
    multiply-adds (NOTE [ Winograd convolution as jobs ]): here on every size of two or more
    samples. Other convolutions of at most 64 output positions a sample take one product per
    chunk of samples (NOTE [ Few output positions ]): here of at most 4, so that the
    programs' small images take both that and the per-sample paths. A linear layer with a
    bias fills its output with the bias and has BLAS add the product, in one compiled call or
    through NumPy and ``parts.Gemm`` (NOTE [ A linear layer's bias first ]): here the two
    ways call by call in turn, so that the programs take both; the compiled way runs in parts
    of the rows as jobs from 2^23 multiply-adds (NOTE [ A linear layer's bias in parts of its
    rows ]): here on every size; a product added into a
    weight's ``.grad`` goes to ``Gemm`` from ``GEMM_MIN_MACS`` multiply-adds: here on every
    size. The row softmax and log_softmax run in parts of their rows from 2^18 elements: here
    on every size. Self-attention runs as one job per
    part of its (sample, head) pairs from 2^20 multiply-adds (NOTE [ Fused self-attention as
    jobs ]): here from 48, so that the programs take both that and its separate products.
    The layer norm kernels run as jobs from 2^23 multiply-adds, 16 an element (NOTE [ Layer
    norm as jobs ]): here from 256, so that the programs' forwards and input gradients take
    both ways (the gradients' sums over chunks of 64 rows need more rows than they have)."""
    import memgrad.ops.conv as conv_ops
    import memgrad.ops.elementwise as ew_ops
    import memgrad.ops.nn as nn_ops
    import memgrad.ops.reduce as reduce_ops
    from memgrad.ops import parts

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(nn_ops, "CAUSAL_BLOCK", 2)
        patch.setattr(ew_ops, "_KERNEL_MIN", 0)
        patch.setattr(parts, "JOB_PARTS_MIN_MACS", 0)
        patch.setattr(conv_ops, "_WINOGRAD_CHANNELS", ((1, 1 << 30),) * 2)
        patch.setattr(conv_ops, "_WINOGRAD_MIN_TILES", (1, 1))
        patch.setattr(conv_ops, "_WINOGRAD_MAX_BYTES", (1 << 60, 1 << 60))
        patch.setattr(conv_ops, "batch_as_jobs", lambda n, macs, job, words_of:
                      parts.batch_as_jobs(n, parts.PARTS_MIN_MACS, job, words_of))
        patch.setattr(conv_ops, "_BATCHED_MAX_POSITIONS", 4)
        patch.setattr(nn_ops, "GEMM_MIN_MACS", 0)
        patch.setattr(parts, "addmm", _addmm_both_ways(parts.addmm))
        patch.setattr(parts, "ADDMM_JOB_MIN_MACS", 0)
        patch.setattr(reduce_ops, "SOFTMAX_COST", parts.PARTS_MIN_MACS)
        patch.setattr(nn_ops, "ATTENTION_JOB_MIN_MACS", 48)
        patch.setattr(nn_ops, "NORM_JOB_MIN_MACS", 256)
        yield


def _addmm_both_ways(addmm):
    """``parts.addmm`` compiled and through NumPy's fill and ``Gemm`` (as with
    ``NUMBA_DISABLE_JIT=1``), call by call in turn."""
    from memgrad.ops import parts

    calls = itertools.count()

    def both_ways(a, b, v):
        if next(calls) % 2 == 0:
            return addmm(a, b, v)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(parts.Parts, "addmm", None)
            return addmm(a, b, v)

    return both_ways


def _settings(ci: int, thorough: int) -> settings:
    return settings(
        max_examples=thorough if THOROUGH else ci,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                               HealthCheck.data_too_large],
    )


def _size() -> dict:
    return {"max_instrs": 14, "max_regions": 3} if THOROUGH else {}


def _reference(prog: Program) -> tuple[list[np.ndarray], NpRun]:
    leaves = leaf_values(prog)
    base = run_np(prog, leaves)
    assume(base.safe)
    return leaves, base


def _check_values(prog: Program, run: MgRun, base: NpRun) -> None:
    for r, got in run.values.items():
        expected = base.values[r]
        assert got.shape == expected.shape, (prog.names[r], got.shape, expected.shape)
        if prog.kinds[r] == "f":
            scale = 1.0 + float(np.max(np.abs(expected), initial=0.0))
            np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12 * scale,
                                       err_msg=f"forward value of {prog.names[r]}")
        else:
            np.testing.assert_array_equal(got, expected, err_msg=prog.names[r])


def _same_sides(a: NpRun, b: NpRun) -> bool:
    return len(a.sides) == len(b.sides) and all(
        x.shape == y.shape and np.array_equal(x, y) for x, y in zip(a.sides, b.sides))


def _check_finite_differences(prog: Program, leaves: list[np.ndarray], base: NpRun,
                              grads: list[np.ndarray]) -> None:
    rng = np.random.default_rng([prog.seed, 11])
    for k in range(2):
        vs = [rng.standard_normal(a.shape) for a in leaves]
        norm = float(np.sqrt(sum(float((v * v).sum()) for v in vs)))
        vs = [v / norm for v in vs]
        hi = run_np(prog, [a + EPS * v for a, v in zip(leaves, vs)])
        lo = run_np(prog, [a - EPS * v for a, v in zip(leaves, vs)])
        assume(hi.safe and lo.safe and _same_sides(base, hi) and _same_sides(base, lo))
        numeric = (hi.loss - lo.loss) / (2 * EPS)
        analytic = sum(float((g * v).sum()) for g, v in zip(grads, vs))
        tol = RTOL * max(abs(numeric), abs(analytic)) + ATOL * (1.0 + base.scale)
        assert abs(analytic - numeric) <= tol, (
            f"directional derivative {k}: backward gives {analytic!r}, finite differences "
            f"give {numeric!r}"
        )


def _raised(run: MgRun) -> str:
    return f"{type(run.error).__name__}: {run.error}"


def _compare(prog: Program, eager: MgRun, ckpt: MgRun, may_refuse: bool) -> None:
    """The checkpointed run against the eager one (rules A-C)."""
    if eager.stage != "ok":
        assert ckpt.stage != "ok", (
            f"the checkpointed run gave gradients where eager raised {_raised(eager)}")
        # the same refusal, a CheckpointError, or a clear refusal in the forward pass (C)
        assert (MODIFIED in str(ckpt.error) or isinstance(ckpt.error, CheckpointError)
                or ("forward" in (eager.stage, ckpt.stage)
                    and type(ckpt.error) is RuntimeError)), (
            f"eager raised {_raised(eager)}; the checkpointed run raised {_raised(ckpt)}")
        return
    if ckpt.stage != "ok":
        assert may_refuse and isinstance(ckpt.error, CheckpointError), (
            f"eager gave gradients; the checkpointed run raised {_raised(ckpt)}")
        return
    hidden = prog.internal()
    for r, v in eager.values.items():
        if r not in hidden:
            assert np.array_equal(ckpt.values[r], v), f"forward value of {prog.names[r]}"
    # a reentrant region is one node whose inner backward sums its inputs' gradients
    # before the outer backward adds the rest: the same terms, summed in another order
    reentrant = any(reg.reentrant or (reg.inner is not None and reg.inner.reentrant)
                    for reg in prog.regions)
    for r, g, ref in zip(prog.leaves, ckpt.grads, eager.grads):
        same = (np.allclose(g, ref, rtol=1e-11, atol=1e-11 * (1.0 + np.abs(ref).max()))
                if reentrant else np.array_equal(g, ref))
        assert same, (
            f"gradient of {prog.names[r]}: checkpointed {g.tolist()} != eager {ref.tolist()}")


def _check_eager(prog: Program, eager: MgRun, leaves: list[np.ndarray], base: NpRun) -> None:
    if eager.stage == "ok":
        _check_values(prog, eager, base)
        _check_finite_differences(prog, leaves, base, eager.grads)
        return
    assert prog.has_inplace, f"eager raised on a program without in-place ops: {_raised(eager)}"
    if eager.stage == "forward":
        assert type(eager.error) is RuntimeError, _raised(eager)
    else:
        assert MODIFIED in str(eager.error), _raised(eager)


def _check_program(prog: Program) -> None:
    leaves, base = _reference(prog)
    eager = run_mg(prog, [])
    _check_eager(prog, eager, leaves, base)
    if prog.regions:
        ckpt = run_mg(prog, prog.regions)
        first = min(reg.start for reg in prog.regions)
        _compare(prog, eager, ckpt, may_refuse=prog.inplace_after(first))


@_settings(ci=200, thorough=3000)
@given(prog=programs(**_size()))
def test_programs_eager_checkpointed_and_finite_differences_agree(prog):
    """Rule A."""
    _check_program(prog)


@_settings(ci=200, thorough=3000)
@given(prog=programs(inplace=True, **_size()))
def test_programs_with_inplace_changes_agree(prog):
    """Rule C."""
    _check_program(prog)


@_settings(ci=300, thorough=4000)
@given(data=st.data())
def test_inplace_change_between_forward_and_backward(data):
    """Rule B."""
    prog = data.draw(programs(inplace=data.draw(st.booleans(), label="inplace"), **_size()),
                     label="program")
    mutation = data.draw(mutations(prog), label="mutation")
    note(prog.source(mutation))
    leaves, base = _reference(prog)
    plain = run_mg(prog, [])
    assume(plain.stage == "ok")
    _check_finite_differences(prog, leaves, base, plain.grads)
    eager = run_mg(prog, [], mutation)
    if eager.stage == "ok":
        for r, g, ref in zip(prog.leaves, eager.grads, plain.grads):
            assert np.array_equal(g, ref), (
                f"an in-place change after the forward changed eager's gradient of "
                f"{prog.names[r]}: {g.tolist()} instead of {ref.tolist()}")
    else:
        assert eager.stage == "backward" and MODIFIED in str(eager.error), _raised(eager)
    if prog.regions:
        _compare(prog, eager, run_mg(prog, prog.regions, mutation), may_refuse=True)


# ---------------------------------------------------------------------------- smallest cases


def _t(values) -> mg.Tensor:
    return mg.tensor(np.asarray(values, dtype=np.float64), dtype=mg.float64,
                     requires_grad=True)


def _outcome(fn) -> tuple[str, object]:
    """("ok", gradients as lists) or ("raised", the RuntimeError)."""
    try:
        return "ok", fn()
    except RuntimeError as e:
        return "raised", e


def _assert_refused(kind: str, result: object, ckpt: bool) -> None:
    assert kind == "raised", f"gave {result} where eager raises"
    assert MODIFIED in str(result) or (ckpt and isinstance(result, CheckpointError)), result


def test_view_of_a_buffer_taken_before_the_writes_sees_them():
    """C: PyTorch's semantics, or a clear error; never the view read as zeros."""
    def run():
        x = _t([[1.0, 1.0], [1.0, 1.0]])
        out = mg.zeros(2, 2, dtype=mg.float64)
        row0 = out[0]
        out[0] = x[0] * 2
        out[1] = x[1] * 5
        (row0.sum() + out.sum()).backward()
        return x.grad.numpy().tolist()

    kind, result = _outcome(run)
    assert kind == "raised" or result == [[4.0, 4.0], [5.0, 5.0]], result


def _index_case(case: str):
    x = _t(np.arange(8.0).reshape(4, 2))
    w = mg.tensor(np.array([[1.0, 2.0], [3.0, 4.0]]), dtype=mg.float64)
    if case == "index":
        idx = mg.tensor([0, 1])
        loss = (x[idx] * w).sum()
        idx.add_(2)
        return x, loss, [[1.0, 2.0], [3.0, 4.0], [0.0, 0.0], [0.0, 0.0]]
    if case == "index dim 1":
        idx = mg.tensor([0, 1])
        loss = (x.T[:, idx] * w).sum()
        idx.fill_(3)
        return x, loss, [[1.0, 3.0], [2.0, 4.0], [0.0, 0.0], [0.0, 0.0]]
    if case == "mask":
        mask = mg.tensor([True, False, True, False])
        loss = (x[mask] * w).sum()
        mask.copy_(mg.tensor([False, True, False, True]))
        return x, loss, [[1.0, 2.0], [0.0, 0.0], [3.0, 4.0], [0.0, 0.0]]
    x = _t(np.zeros((4, 2)))  # cross_entropy
    target = mg.tensor([0, 1, 0, 1])
    loss = F.cross_entropy(x, target, reduction="sum")
    target.copy_(mg.tensor([1, 0, 1, 0]))
    return x, loss, [[-0.5, 0.5], [0.5, -0.5], [-0.5, 0.5], [0.5, -0.5]]


@pytest.mark.parametrize("case", ["index", "index dim 1", "mask", "cross_entropy"])
def test_index_tensor_changed_after_the_forward(case):
    """B: the gradient of the rows the forward read, or the in-place error."""
    x, loss, expected = _index_case(case)
    kind, result = _outcome(lambda: loss.backward())
    if kind == "raised":
        assert MODIFIED in str(result), result
    else:
        assert x.grad.numpy().tolist() == expected


def test_index_tensor_changed_between_two_uses():
    """C: each use differentiates the rows it read."""
    x = _t([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    idx = mg.tensor([0, 1])
    y = x[idx]
    idx.add_(1)
    z = x[idx]
    w = mg.tensor(np.array([[1.0, 10.0], [100.0, 1000.0]]), dtype=mg.float64)
    kind, result = _outcome(lambda: ((y * w).sum() + z.sum()).backward())
    if kind == "raised":
        assert MODIFIED in str(result), result
    else:
        assert x.grad.numpy().tolist() == [[1.0, 10.0], [101.0, 1001.0], [1.0, 1.0]]


def _kept_argument():
    x, w = _t([1.0, 2.0]), _t([3.0, 4.0])
    y = checkpoint(lambda a, b: a * b, x, w, use_reentrant=False)
    with mg.no_grad():
        w.mul_(10.0)
    y.sum().backward()
    return x.grad.numpy().tolist()


def _kept_output():
    x = _t([0.5, -1.0])
    y = checkpoint(lambda a: a.amin(), x, use_reentrant=False, policy=policy.save_all)
    with mg.no_grad():
        y.add_(0.5)
    y.backward()
    return x.grad.numpy().tolist()


def _kept_output_changed_inside():
    x, b = _t(0.5), _t(0.25)

    def region(a, c):
        v = a.tanh()
        v.add_(c)
        return v

    checkpoint(region, x, b, use_reentrant=False, policy=policy.save_all).backward()
    return x.grad.numpy().tolist()


@pytest.mark.parametrize("run", [_kept_argument, _kept_output, _kept_output_changed_inside],
                         ids=["argument", "policy-kept output", "changed inside the region"])
def test_checkpoint_kept_tensor_changed_in_place(run):
    """B, C: eager raises (the saved tensor changed); so must the checkpointed run."""
    _assert_refused(*_outcome(run), ckpt=True)


@pytest.mark.parametrize("pol", ["save_all", "save_only(add)"])
def test_checkpoint_policy_kept_output_changed_later_in_the_region(pol):
    """C: eager is right (mul_ keeps a copy of the old values); the recomputation must not
    reuse the kept output of ``a + 1`` with the values mul_ wrote into it."""
    keep = policy.save_all if pol == "save_all" else policy.save_only("add")

    def region(a, c):
        v = a + 1.0
        v.mul_(c)
        return v

    x, b = _t([0.5, 2.0]), _t([3.0, -1.0])
    checkpoint(region, x, b, use_reentrant=False, policy=keep).sum().backward()
    assert b.grad.numpy().tolist() == [1.5, 3.0]
    assert x.grad.numpy().tolist() == [3.0, -1.0]


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpoint_closure_changed_after_the_forward(use_reentrant):
    """B: a recomputation that would read a changed closure value must raise."""
    def run(ckpt: bool):
        x, z = _t([0.5, -1.0]), _t([1.0, 1.0])
        if ckpt:
            y = checkpoint(lambda a: a * x.sigmoid(), z, use_reentrant=use_reentrant)
        else:
            y = z * x.sigmoid()
        with mg.no_grad():
            x.mul_(3.0)
        y.sum().backward()
        return z.grad.numpy().tolist()

    eager = run(False)
    kind, result = _outcome(lambda: run(True))
    assert kind == "ok" and result == eager or isinstance(result, CheckpointError), result


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpoint_output_changed_after_the_forward(use_reentrant):
    """B: eager raises (tanh saved its output); the checkpointed run must not give a
    gradient."""
    def run(ckpt: bool):
        x = _t([0.5, -1.0])
        y = checkpoint(lambda a: a.tanh(), x, use_reentrant=use_reentrant) if ckpt else x.tanh()
        with mg.no_grad():
            y.mul_(2.0)
        y.sum().backward()
        return x.grad.numpy().tolist()

    _assert_refused(*_outcome(lambda: run(False)), ckpt=False)
    _assert_refused(*_outcome(lambda: run(True)), ckpt=True)


def test_reentrant_argument_changed_after_the_forward():
    """B: eager gives gradients (tanh keeps its output, not its input): the reentrant run
    gives the same or raises CheckpointError."""
    def run(ckpt: bool):
        x = _t([0.5, -1.0])
        y = checkpoint(lambda a: a.tanh(), x, use_reentrant=True) if ckpt else x.tanh()
        with mg.no_grad():
            x.mul_(3.0)
        y.sum().backward()
        return x.grad.numpy().tolist()

    eager = run(False)
    kind, result = _outcome(lambda: run(True))
    assert kind == "ok" and result == eager or isinstance(result, CheckpointError), result


def test_reentrant_view_output_changed_in_place():
    """C: the reentrant region returns a view (cross_entropy(reduction="none") reshapes its
    losses) and it is filled in place, then the target the region read is changed: eager
    raises in backward (nll_loss kept the target); the reentrant run must not give
    gradients. It refuses the write itself (a CheckpointError): written, the view would get
    its base's graph and the region's backward would never run."""
    def run(ckpt: bool):
        x = _t([[0.1], [-0.1], [0.6]])
        i = mg.tensor([0, 0, 0])

        def region(a, t):
            return F.cross_entropy(a.tanh(), t, reduction="none")

        y = checkpoint(region, x, i, use_reentrant=True) if ckpt else region(x, i)
        y.fill_(1.5)
        i.fill_(0)
        (y * 2.0).sum().backward()
        return x.grad.numpy()

    kind, error = _outcome(lambda: run(False))
    assert kind != "ok" and MODIFIED in str(error), error
    with pytest.raises(CheckpointError, match="is a view and is being modified in place"):
        run(True)


def test_reentrant_closure_of_a_non_leaf_used_outside():
    """A: a tensor read by closure inside the region and also outside it."""
    def run(ckpt: bool):
        x, z = _t([0.5, -1.0]), _t([2.0, 3.0])
        h = x.tanh()
        y = checkpoint(lambda a: a * h, z, use_reentrant=True) if ckpt else z * h
        (y.sum() + h.sum()).backward()
        return x.grad.numpy(), z.grad.numpy()

    for got, ref in zip(run(True), run(False)):
        np.testing.assert_allclose(got, ref, rtol=1e-12)


def test_reentrant_output_without_a_gradient():
    """C: an output that the loss does not read is not differentiated (eager never
    visits it; here its saved value was changed inside the region)."""
    def run(ckpt: bool):
        x = _t([0.5, -0.3])

        def region(a):
            w = a.exp()
            w.mul_(2.0)
            return a.tanh(), w

        u, _ = checkpoint(region, x, use_reentrant=True) if ckpt else region(x)
        u.sum().backward()
        return x.grad.numpy()

    np.testing.assert_array_equal(run(True), run(False))


@pytest.mark.parametrize("op", ["logsumexp", "cross_entropy"])
def test_inplace_change_of_a_reduction_result(op):
    """C: logsumexp(keepdim=False) and cross_entropy(reduction="none") return new
    tensors, as in PyTorch, so they can be changed in place."""
    x = _t([[0.5, -0.3, 0.1]])
    if op == "logsumexp":
        y = x.logsumexp(dim=1)
        expected = 2.0 * np.exp(x.numpy()) / np.exp(x.numpy()).sum()
    else:
        y = F.cross_entropy(x, mg.tensor([1]), reduction="none")
        expected = 2.0 * (np.exp(x.numpy()) / np.exp(x.numpy()).sum() - [[0.0, 1.0, 0.0]])
    y.mul_(2.0)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-12)
