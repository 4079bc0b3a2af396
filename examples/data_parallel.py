"""Data-parallel training of a checkpointed MLP: the same script on one process or several.

    python examples/data_parallel.py                 # one process
    mpiexec -n 2 python examples/data_parallel.py    # two ranks (pip install ".[dist]")

Each rank takes its share of every batch (DistributedSampler), the model's layers run
through checkpoint_sequential (CheckpointedSequential, a Module), and DistributedDataParallel
averages the gradients, so every rank takes the same step as one process on the whole
batch would. Only rank 0 prints.
"""

import numpy as np

import memgrad as mg
import memgrad.distributed as dist
from memgrad import nn
from memgrad.checkpoint import CheckpointedSequential
from memgrad.distributed import DistributedDataParallel, DistributedSampler
from memgrad.nn import functional as F


def main() -> None:
    dist.init()
    rank, world = dist.rank(), dist.world_size()
    rng = np.random.default_rng(0)  # the same data on every rank
    x_all = rng.standard_normal((1024, 8)).astype(np.float32)
    y_all = np.tanh(x_all @ rng.standard_normal((8, 1))).astype(np.float32)

    mg.manual_seed(0)
    layers = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(8, 8), nn.Tanh())],
                           nn.Linear(8, 1))
    model = DistributedDataParallel(CheckpointedSequential(layers, segments=3))
    opt = mg.optim.Adam(model.parameters(), lr=0.01)
    sampler = DistributedSampler(len(x_all), seed=0)
    batch = 64 // world  # per rank: a global batch of 64 however many ranks
    if rank == 0:
        print(f"{world} rank(s), {batch} examples per rank and step")

    first = last = 0.0
    for epoch in range(8):
        sampler.set_epoch(epoch)
        rows = sampler.indices()
        for start in range(0, len(rows) - batch + 1, batch):
            take = rows[start:start + batch]
            opt.zero_grad()
            loss = F.mse_loss(model(mg.tensor(x_all[take])), mg.tensor(y_all[take]))
            loss.backward()  # .grad is the mean over ranks
            opt.step()
        mean = dist.all_reduce(mg.tensor([loss.item()]), op="mean").item()
        first = mean if epoch == 0 else first
        last = mean
        if rank == 0:
            print(f"epoch {epoch}: loss {mean:.4f}")
    weights = dist.all_gather_object(layers[0].weight.numpy())
    if rank == 0:
        print(f"loss went down: {last < first / 2}")
        same = all(np.array_equal(w, weights[0]) for w in weights)
        print(f"every rank holds the same weights: {same}")


if __name__ == "__main__":
    main()
