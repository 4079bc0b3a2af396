"""Data-parallel training across processes and machines, on MPI (the ``dist`` extra:
mpi4py and Open MPI).

Launch the same script on every rank with ``mpiexec -n 2 python train.py`` (or
``memgrad train --nproc 2``). Without ``mpiexec`` the world is this process alone and
everything still works. See docs/distributed.md.

Example:
    >>> import memgrad as mg
    >>> import memgrad.distributed as dist
    >>> dist.init()
    >>> dist.world_size()
    1
    >>> dist.all_reduce(mg.tensor([2.0]), op="mean")
    tensor([2.])
"""

from memgrad.distributed.comm import (
    DistributedError,
    all_gather,
    all_gather_object,
    all_reduce,
    barrier,
    broadcast,
    broadcast_object,
    destroy_process_group,
    init,
    is_initialized,
    launched_by_mpi,
    rank,
    reduce_scatter,
    world_size,
)
from memgrad.distributed.ddp import DEFAULT_BUCKET_BYTES, DDPStats, DistributedDataParallel
from memgrad.distributed.sampler import DistributedSampler

__all__ = [
    "DistributedError",
    "init",
    "destroy_process_group",
    "is_initialized",
    "launched_by_mpi",
    "rank",
    "world_size",
    "barrier",
    "all_reduce",
    "broadcast",
    "all_gather",
    "reduce_scatter",
    "all_gather_object",
    "broadcast_object",
    "DistributedDataParallel",
    "DDPStats",
    "DEFAULT_BUCKET_BYTES",
    "DistributedSampler",
]
