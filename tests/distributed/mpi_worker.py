"""The rank side of the data-parallel tests: ``test_ddp.py`` runs this file under
``mpiexec -n 2`` (and alone, as the one-process reference). Rank 0 writes what it found to
``--out`` as JSON (and the final parameters to ``--out`` + ``.npz``)."""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

import memgrad as mg
import memgrad.distributed as dist
from memgrad import nn
from memgrad.checkpoint import checkpoint
from memgrad.distributed import comm

N_FEATURES = 6


class CountingComm:
    """A communicator, counting the non-blocking all-reduces and all-gathers started
    through it."""

    def __init__(self, inner):
        self.inner = inner
        self.iallreduce = 0
        self.iallgather = 0

    def Iallreduce(self, *args, **kwargs):  # noqa: N802 (mpi4py's name)
        self.iallreduce += 1
        return self.inner.Iallreduce(*args, **kwargs)

    def Iallgather(self, *args, **kwargs):  # noqa: N802 (mpi4py's name)
        self.iallgather += 1
        return self.inner.Iallgather(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class Net(nn.Module):
    """A small net in float64 whose middle layer is used twice, with an optional unused
    parameter, and optional checkpoint regions around each use of the middle layer."""

    def __init__(self, ckpt: str, unused: bool) -> None:
        super().__init__()
        self.first = nn.Linear(N_FEATURES, 12)
        self.middle = nn.Linear(12, 12)
        self.last = nn.Linear(12, 1)
        if unused:
            self.spare = nn.Parameter(mg.ones(3, dtype=mg.float64))
        self.ckpt = ckpt
        self.repeats = 2  # uses of the middle layer
        self.use_spare = False  # add the spare parameter's sum to the output
        for p in self.parameters():
            p.data = p.to(mg.float64)

    def _middle(self, h):
        return self.middle(h).tanh()

    def forward(self, x):
        h = self.first(x).tanh()
        for _ in range(self.repeats):  # the same parameters several times
            if self.ckpt == "none":
                h = self._middle(h)
            else:
                h = checkpoint(self._middle, h, use_reentrant=self.ckpt == "reentrant")
        if self.use_spare:
            return self.last(h) + self.spare.sum()
        return self.last(h)


def data(n: int) -> tuple[mg.Tensor, mg.Tensor]:
    rng = np.random.default_rng(1234)
    x = rng.standard_normal((n, N_FEATURES))
    y = np.sin(x.sum(axis=1, keepdims=True))
    return mg.tensor(x), mg.tensor(y)


def train(args: argparse.Namespace) -> dict:
    r, w = dist.rank(), dist.world_size()
    mg.manual_seed(100 + r)  # every rank starts from other weights: DDP broadcasts rank 0's
    net = Net(args.ckpt, args.unused)
    if r == 0:
        mg.manual_seed(100)
        reference = Net(args.ckpt, args.unused)
        net.load_state_dict(reference.state_dict())
    model = dist.DistributedDataParallel(net, bucket_bytes=args.bucket_bytes,
                                         gradient_as_bucket_view=args.view)
    counting = records = None
    if w > 1:
        counting = CountingComm(comm._get().comm)
        comm._get().comm = counting
        records = CountingComm(comm._get().records)  # NOTE [ In step ]
        comm._get().records = records
    weights = {n: p.numpy().copy() for n, p in model.module.named_parameters()}
    gathered = dist.all_gather_object(weights)
    same_start = all(
        all(np.array_equal(g[n], gathered[0][n]) for n in g) for g in gathered
    )
    opt = mg.optim.SGD(model.parameters(), lr=0.2, momentum=0.5)
    micro = args.accumulate
    global_batch = args.batch * w * micro
    x_all, y_all = data(global_batch * args.steps)
    log = []
    views = []
    for step in range(args.steps):
        opt.zero_grad(set_to_none=not args.zero_in_place)
        net.use_spare = args.alternate and step % 2 == 1  # used in odd steps only
        start = counting.iallreduce if counting else 0
        records_start = records.iallgather if records else 0
        # the global batch of this step, cut into micro-batches, each cut between the ranks
        lo = step * global_batch
        for m in range(micro):
            a = lo + (m * w + r) * args.batch
            x, y = x_all[a:a + args.batch], y_all[a:a + args.batch]
            if m < micro - 1:
                with model.no_sync():
                    (((model(x) - y) ** 2).mean() / micro).backward()
            else:
                (((model(x) - y) ** 2).mean() / micro).backward()
        opt.step()
        if w > 1:  # is each .grad a view of DDP's buckets?
            views.append({
                n: p.grad is not None
                and any(np.shares_memory(p.grad.numpy(), b.flat) for b in model._buckets)
                for n, p in model.module.named_parameters()
            })
        log.append({
            "iallreduce": (counting.iallreduce - start) if counting else 0,
            "records": (records.iallgather - records_start) if records else 0,
            "buckets": model.stats.buckets,
            "during_backward": model.stats.during_backward,
            "reductions": sorted(set(model.stats.reductions.values())),
        })
    final = {n: p.numpy() for n, p in model.module.named_parameters()}
    moved = max(float(np.abs(final[n] - gathered[0][n]).max()) for n in final)
    if r == 0:
        np.savez(args.out + ".npz", **final)
    spare = getattr(model.module, "spare", None)
    return {
        "world": w,
        "same_start": same_start,
        "moved": moved,
        "steps": log,
        "spare_grad_is_none": spare is not None and spare.grad is None,
        "grads_are_views": views,
    }


def collectives(args: argparse.Namespace) -> dict:
    r, w = dist.rank(), dist.world_size()
    s = dist.all_reduce(mg.tensor([r + 1.0, 10.0 * r]))
    m = dist.all_reduce(mg.tensor([r + 1.0, 10.0 * r]), op="mean")
    i = dist.all_reduce(mg.tensor([r + 1, 2], dtype=mg.int64))
    b = dist.broadcast(mg.tensor([float(r), -float(r)]), src=w - 1)
    dist.barrier()
    sampler = dist.DistributedSampler(11, seed=3)
    sampler.set_epoch(2)
    obj = dist.broadcast_object({"from": r, "pad": "x" * (100 * r + 1)}, src=w - 1)
    gathered = dist.all_gather_object("x" * (100 * r + 1))
    parts = [mg.zeros(2, 3) for _ in range(w)]
    dist.all_gather(parts, mg.tensor([[r, 1.0, 2.0], [3.0, 4.0, -r]]))
    ints = [mg.zeros(2, dtype=mg.int32) for _ in range(w)]
    dist.all_gather(ints, mg.tensor([r, 7 * r], dtype=mg.int32))
    # rank q's input_list[k] is 10 q + k + [0, 0.5]: rank k receives sum_q (10 q + k) + [0, w/2]
    scattered = dist.reduce_scatter(mg.zeros(2), [mg.tensor([10.0 * r + k, 10.0 * r + k + 0.5])
                                                  for k in range(w)])
    averaged = dist.reduce_scatter(mg.zeros(2), [mg.tensor([10.0 * r + k, 1.0])
                                                 for k in range(w)], op="mean")
    dist.destroy_process_group()
    destroyed = dist.is_initialized()
    again = dist.all_reduce(mg.tensor([1.0]))  # joins the world again
    mine = {"sum": s.tolist(), "mean": m.tolist(), "int": i.tolist(), "bcast": b.tolist(),
            "indices": sampler.indices().tolist(), "object": obj, "gathered": gathered,
            "all_gather": [t.tolist() for t in parts], "all_gather_int": [t.tolist() for t in ints],
            "int_dtype": str(ints[0].dtype), "reduce_scatter": scattered.tolist(),
            "reduce_scatter_mean": averaged.tolist(), "destroyed": destroyed,
            "again": again.tolist()}
    return {"world": w, "ranks": dist.all_gather_object(mine)}


def accounting(args: argparse.Namespace) -> dict:
    """What memgrad.memory counts for DDP's buckets, against their sizes by arithmetic."""
    net = Net("none", unused=False)
    sizes = [p.numel() for p in net.parameters()]
    with mg.memory.track() as t:
        model = dist.DistributedDataParallel(net, bucket_bytes=1000)
    grown = t.end_bytes - t.start_bytes
    x = mg.ones(4, N_FEATURES, dtype=mg.float64)
    model(x).sum().backward()  # the first step rebuilds the buckets: the old ones go
    held = mg.memory.allocated_bytes()  # accounting off: every tensor memgrad holds now
    return {"grown": grown, "sizes": sizes, "buckets": len(model._buckets),
            "after_rebuild": held - sum(p.numpy().nbytes for p in net.parameters())}


def mismatch(args: argparse.Namespace) -> dict:
    net = nn.Linear(4, 2 + dist.rank())
    dist.DistributedDataParallel(net)
    return {}


def mismatch_order(args: argparse.Namespace) -> dict:
    net = nn.Module()
    names = ["a", "b"] if dist.rank() == 0 else ["b", "a"]
    for name in names:  # the same tensors, registered in another order on rank 1
        setattr(net, name, nn.Linear(3, 3))
    dist.DistributedDataParallel(net)
    return {}


def overuse(args: argparse.Namespace) -> dict:
    """The middle layer runs in one reentrant region in the first step, in two later: its
    gradient then arrives after its bucket was reduced."""
    net = Net("reentrant", unused=False)
    model = dist.DistributedDataParallel(net, bucket_bytes=1)  # a bucket per parameter
    x = mg.ones(2, N_FEATURES, dtype=mg.float64)
    for repeats in (1, 2):
        net.repeats = repeats
        model(x).sum().backward()
    return {}


def interrupt(args: argparse.Namespace) -> dict:
    dist.barrier()
    raise KeyboardInterrupt  # as Ctrl-C, which mpiexec passes to every rank


def fault(args: argparse.Namespace) -> dict:
    model = dist.DistributedDataParallel(nn.Linear(4, 2))
    for step in range(3):
        out = model(mg.ones(2, 4)).sum()
        if step == 1 and dist.rank() == 1:
            raise RuntimeError("injected failure on rank 1")
        out.backward()
    return {}


def _small_ddp(bucket_bytes: int = 1, view: bool = False):
    """A float64 Linear(3, 2) wrapped with a bucket per parameter, the same weights on every
    rank, and SGD without momentum."""
    mg.manual_seed(7)
    net = nn.Linear(3, 2)
    for p in net.parameters():
        p.data = p.to(mg.float64)
    model = dist.DistributedDataParallel(net, bucket_bytes=bucket_bytes,
                                         gradient_as_bucket_view=view)
    return model, mg.optim.SGD(model.parameters(), lr=0.1)


def _batch(r: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Rank r's k-th batch: its own examples, and as many as its rank plus 2."""
    rng = np.random.default_rng([r, k])
    return rng.standard_normal((2 + r, 3)), rng.standard_normal((2 + r, 2))


def _step(model, opt, r: int, k: int) -> mg.Tensor:
    x, y = _batch(r, k)
    opt.zero_grad()
    loss = ((model(mg.tensor(x)) - mg.tensor(y)) ** 2).mean()
    loss.backward()
    opt.step()
    return loss


def left_early(args: argparse.Namespace) -> dict:
    """Rank 1 leaves the training loop after 2 steps, rank 0 runs 4; then rank 1 ends its
    program (--then exit) or works on alone for longer than the timeout (--then sleep)."""
    model, opt = _small_ddp()
    r = dist.rank()
    for k in range(4 if r == 0 else 2):
        start, cpu = time.monotonic(), time.process_time()
        try:
            _step(model, opt, r, k)
        except dist.DistributedError:
            # how much of a core the waiting rank used while it waited
            sys.stderr.write(f"waited {time.monotonic() - start:.2f} s, "
                             f"cpu {time.process_time() - cpu:.2f} s\n")
            raise
    if args.then == "sleep":
        time.sleep(60)
    return {}


def out_of_step(args: argparse.Namespace) -> dict:
    """At step 2, rank 1's forward raises; rank 1 catches the error and carries on: into the
    next step (--then step), into an all_reduce of its loss (--then all_reduce), or it leaves
    the world (--then destroy)."""
    model, opt = _small_ddp()
    r = dist.rank()
    for k in range(4):
        if r == 1 and k == 1:
            try:
                model(mg.tensor(_batch(r, k)[0]))
                raise ValueError("injected failure on rank 1")
            except ValueError:
                if args.then == "all_reduce":
                    dist.all_reduce(mg.tensor([0.5], dtype=mg.float64))
                elif args.then == "destroy":
                    dist.destroy_process_group()
                continue
        _step(model, opt, r, k)
    return {}


def join(args: argparse.Namespace) -> dict:
    """Uneven inputs inside join(): rank r has --batches[r] batches. Every rank reports its
    data, its .grad after each of its steps, and its final weights."""
    model, opt = _small_ddp(bucket_bytes=args.bucket_bytes, view=args.view)
    r = dist.rank()
    start = {n: p.numpy().tolist() for n, p in model.module.named_parameters()}
    batches = [int(b) for b in args.batches.split(",")][r]
    steps = []
    with model.join(divide_by_initial_world_size=args.divide == "initial"):
        for k in range(batches):
            x, y = _batch(r, k)
            _step(model, opt, r, k)
            steps.append({"x": x.tolist(), "y": y.tolist(),
                          "grads": {n: p.grad.numpy().tolist()
                                    for n, p in model.module.named_parameters()}})
    final = {n: p.numpy().tolist() for n, p in model.module.named_parameters()}
    return {"start": start, "ranks": dist.all_gather_object({"steps": steps, "final": final})}


def main() -> None:
    parser = argparse.ArgumentParser()
    scenarios = ["train", "collectives", "accounting", "mismatch", "mismatch_order", "overuse",
                 "interrupt", "fault", "left_early", "out_of_step", "join"]
    parser.add_argument("scenario", choices=scenarios)
    parser.add_argument("--out", required=True)
    parser.add_argument("--ckpt", choices=["none", "reentrant", "nonreentrant"], default="none")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--bucket-bytes", type=int, default=25 * 2**20)
    parser.add_argument("--unused", action="store_true")
    parser.add_argument("--alternate", action="store_true",
                        help="with --unused: use the spare parameter in odd steps")
    parser.add_argument("--view", action="store_true", help="gradient_as_bucket_view")
    parser.add_argument("--zero-in-place", action="store_true",
                        help="zero_grad(set_to_none=False)")
    parser.add_argument("--timeout", type=float, help="dist.init(timeout=...) in seconds")
    parser.add_argument("--then", default="exit",
                        help="left_early: exit or sleep; out_of_step: step, all_reduce or "
                             "destroy")
    parser.add_argument("--batches", default="3,5", help="join: batches of rank 0,1")
    parser.add_argument("--divide", choices=["initial", "active"], default="initial")
    args = parser.parse_args()
    if args.timeout is not None:
        dist.init(timeout=args.timeout)
    result = globals()[args.scenario](args)
    if dist.rank() == 0:
        with open(args.out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
