"""Shard a dataset's indices across the ranks of a data-parallel job.

:class:`DistributedSampler` plays the part of ``torch.utils.data.distributed.DistributedSampler``:
every rank builds one with the same ``seed`` and calls :meth:`DistributedSampler.set_epoch` with
the same epoch, and each then draws a disjoint, deterministic slice of the indices. No process
talks to another; they agree because they compute the same permutation.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized

import numpy as np

from memgrad.utils.data import Sampler

__all__ = ["DistributedSampler"]

_API = "DistributedSampler"

# NOTE [ Sampler order and the global batch ]
# For epoch ``e`` every rank computes the same ``order`` (a seeded permutation of ``range(n)``,
# or ``range(n)`` itself without shuffling), cuts it to ``total = (n // W) * W`` entries and
# takes the stride ``order[r:total:W]``. Position ``p`` of ``order`` goes to rank ``p % W`` as
# that rank's item ``p // W``, so the k-th per-rank batch of size ``B`` on all ``W`` ranks
# together holds exactly ``order[k*B*W:(k+1)*B*W]``: the k-th global batch of one process that
# uses batch ``B*W``. Data-parallel training on ``W`` ranks therefore sees the same examples per
# step as single-process training with the ``W``-times larger batch.


def _is_int(value: object) -> bool:
    # bool is an int subclass, but True as a size, rank or epoch is always a mistake.
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


class DistributedSampler(Sampler):
    """Give each rank a disjoint, deterministic slice of a dataset's indices per epoch.

    Args:
        dataset: the number of examples (an ``int >= 0``) or any object with ``__len__``; its
            length is read once, here.
        num_replicas: how many ranks share the data; defaults to
            ``memgrad.distributed.world_size()``.
        rank: this process's rank in ``[0, num_replicas)``; defaults to
            ``memgrad.distributed.rank()``.
        shuffle: draw a fresh permutation every epoch (``True``) or keep ``range(n)`` order.
        seed: a non-negative int; all ranks must pass the same one.
        drop_last: ``True`` (the default) drops the remainder as described below;
            ``False`` pads as PyTorch's ``drop_last=False`` does: the order is extended by
            repeating its head until it is a multiple of ``num_replicas``, so every example
            is seen and each rank gets ``ceil(n / num_replicas)`` indices (a few examples
            go to two ranks).

    For epoch ``e`` the order is ``np.random.default_rng([seed, e]).permutation(n)`` (or
    ``np.arange(n)`` when ``shuffle=False``). It is cut to the largest multiple of
    ``num_replicas``, dropping the last ``n % num_replicas`` entries of the order, and rank ``r``
    gets ``order[r::num_replicas]`` of what is left. So every rank gets ``n // num_replicas``
    indices and no index appears on two ranks. PyTorch instead pads the order by repeating its
    head, which keeps every example but hands some of them to two ranks in the same epoch; here
    the (at most ``num_replicas - 1``) dropped examples change from epoch to epoch when
    shuffling.

    Because rank ``r`` takes every ``num_replicas``-th entry, the k-th per-rank batch of size
    ``B`` on all ``W`` ranks together is exactly ``order[k*B*W:(k+1)*B*W]``: the same global
    batch that one process with batch ``B*W`` (same seed and epoch) sees at step ``k``. This holds
    for every full batch; in a short last batch the ``W`` ranks see a subset of the single
    process's last batch (the dropped tail). See NOTE [ Sampler order and the global batch ].

    Call :meth:`set_epoch` at the start of every epoch, with the same value on every rank;
    otherwise every epoch repeats epoch 0's order.

    Example:
        >>> s0 = DistributedSampler(10, num_replicas=3, rank=0, shuffle=False)
        >>> s1 = DistributedSampler(10, num_replicas=3, rank=1, shuffle=False)
        >>> list(s0), list(s1), len(s0)
        ([0, 3, 6], [1, 4, 7], 3)
        >>> ranks = [DistributedSampler(10, num_replicas=2, rank=r, seed=7) for r in (0, 1)]
        >>> for s in ranks:
        ...     s.set_epoch(3)
        >>> sorted(list(ranks[0]) + list(ranks[1])) == list(range(10))
        True
        >>> list(DistributedSampler(5, num_replicas=2, rank=1, shuffle=False, drop_last=False))
        [1, 3, 0]
    """

    def __init__(
        self,
        dataset: int | Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
    ) -> None:
        self.dataset_len: int = _dataset_len(dataset)
        if num_replicas is None or rank is None:
            # Imported here so that a sampler with explicit arguments needs no process group.
            from memgrad.distributed.comm import rank as comm_rank
            from memgrad.distributed.comm import world_size as comm_world_size

            if num_replicas is None:
                num_replicas = comm_world_size()
            if rank is None:
                rank = comm_rank()

        if not _is_int(num_replicas):
            raise TypeError(
                f"{_API}: num_replicas must be an int >= 1, got {num_replicas!r} of type "
                f"{type(num_replicas).__name__}; pass the number of processes "
                "(memgrad.distributed.world_size())"
            )
        if num_replicas < 1:
            raise ValueError(
                f"{_API}: num_replicas must be an int >= 1, got {num_replicas}; pass the number "
                "of processes (memgrad.distributed.world_size())"
            )
        if not _is_int(rank):
            raise TypeError(
                f"{_API}: rank must be an int in [0, num_replicas) = [0, {num_replicas}), got "
                f"{rank!r} of type {type(rank).__name__}; pass the rank of this process "
                "(memgrad.distributed.rank())"
            )
        if not 0 <= rank < num_replicas:
            raise ValueError(
                f"{_API}: rank must be in [0, num_replicas) = [0, {num_replicas}), got {rank}; "
                "pass the rank of this process (memgrad.distributed.rank())"
            )
        if not _is_int(seed):
            raise TypeError(
                f"{_API}: seed must be a non-negative int, got {seed!r} of type "
                f"{type(seed).__name__}; pass the same non-negative int on every rank, e.g. seed=0"
            )
        if seed < 0:
            raise ValueError(
                f"{_API}: seed must be a non-negative int, got {seed}; pass the same "
                "non-negative int on every rank, e.g. seed=0"
            )

        if not isinstance(drop_last, (bool, np.bool_)):
            raise TypeError(
                f"{_API}: drop_last must be a bool, got {drop_last!r} of type "
                f"{type(drop_last).__name__}; pass True to drop the remainder or False to pad"
            )

        self.num_replicas: int = int(num_replicas)
        self.rank: int = int(rank)
        self.shuffle: bool = bool(shuffle)
        self.seed: int = int(seed)
        self.drop_last: bool = bool(drop_last)
        self.epoch: int = 0
        if self.drop_last:
            self.num_samples: int = self.dataset_len // self.num_replicas
        else:
            self.num_samples = -(-self.dataset_len // self.num_replicas)
        self.total_size: int = self.num_samples * self.num_replicas

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next iteration uses (same value on every rank).

        Example:
            >>> s = DistributedSampler(8, num_replicas=2, rank=0)
            >>> s.set_epoch(1)
        """
        if not _is_int(epoch):
            raise TypeError(
                f"{_API}.set_epoch: epoch must be a non-negative int, got {epoch!r} of type "
                f"{type(epoch).__name__}; pass the epoch number counting from 0"
            )
        if epoch < 0:
            raise ValueError(
                f"{_API}.set_epoch: epoch must be a non-negative int, got {epoch}; pass the "
                "epoch number counting from 0"
            )
        self.epoch = int(epoch)

    def indices(self) -> np.ndarray:
        """This rank's indices for the current epoch, as a fresh int64 array.

        Example:
            >>> DistributedSampler(7, num_replicas=2, rank=1, shuffle=False).indices()
            array([1, 3, 5])
        """
        n = self.dataset_len
        if self.shuffle:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(n)
        else:
            order = np.arange(n)
        if self.total_size > n:  # drop_last=False: pad with the head, repeated as needed
            order = np.resize(order, self.total_size)
        # See NOTE [ Sampler order and the global batch ].
        return np.array(order[self.rank : self.total_size : self.num_replicas], dtype=np.int64)

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices().tolist())

    def __len__(self) -> int:
        return self.num_samples

    def __repr__(self) -> str:
        return (
            f"{_API}(dataset={self.dataset_len}, num_replicas={self.num_replicas}, "
            f"rank={self.rank}, shuffle={self.shuffle}, seed={self.seed}, "
            f"drop_last={self.drop_last}, epoch={self.epoch})"
        )


def _dataset_len(dataset: object) -> int:
    if _is_int(dataset):
        if dataset < 0:
            raise ValueError(
                f"{_API}: dataset must be a length >= 0 or an object with __len__, got "
                f"{dataset}; pass the number of examples"
            )
        return int(dataset)
    if isinstance(dataset, (bool, np.bool_)) or not hasattr(dataset, "__len__"):
        raise TypeError(
            f"{_API}: dataset must be a length (int >= 0) or an object with __len__, got "
            f"{dataset!r} of type {type(dataset).__name__}; pass len(your_dataset) or the "
            "dataset itself"
        )
    return len(dataset)
