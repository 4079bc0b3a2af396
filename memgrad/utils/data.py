"""Datasets, samplers and batches with the names and semantics of ``torch.utils.data``:
``Dataset``, ``IterableDataset``, ``TensorDataset``, ``Subset``, ``ConcatDataset``, the
samplers, ``DataLoader``, ``default_collate``, ``default_convert`` and ``random_split``.

A ``DataLoader`` draws indices from a sampler, groups them into batches, fetches the
samples from the dataset and merges each batch with ``collate_fn``. Shuffling draws from the
``generator`` passed in (an ``mg.Generator``) or, without one, from the global generator
(``mg.manual_seed``). Loading happens in the calling process: ``num_workers > 0`` is refused
with an error rather than ignored.

Example:
    >>> import memgrad as mg
    >>> ds = TensorDataset(mg.arange(6).reshape(3, 2), mg.tensor([0, 1, 0]))
    >>> [tuple(x.shape) for x, y in DataLoader(ds, batch_size=2)]
    [(2, 2), (1, 2)]
"""

from __future__ import annotations

import bisect
import itertools
import math
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from typing import Any

import numpy as np

from memgrad import random as _random
from memgrad.factories import from_numpy, tensor
from memgrad.ops import stack
from memgrad.tensor import Tensor, float64

__all__ = [
    "Dataset",
    "IterableDataset",
    "TensorDataset",
    "Subset",
    "ConcatDataset",
    "Sampler",
    "SequentialSampler",
    "RandomSampler",
    "SubsetRandomSampler",
    "BatchSampler",
    "DataLoader",
    "default_collate",
    "default_convert",
    "random_split",
]


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


# ------------------------------------------------------------------------------ datasets


class Dataset:
    """A map-style dataset: ``dataset[i]`` is sample ``i``; subclasses define
    ``__getitem__`` and, for the default samplers, ``__len__``. ``a + b`` concatenates.

    Example:
        >>> class Squares(Dataset):
        ...     def __len__(self): return 4
        ...     def __getitem__(self, i): return i * i
        >>> list(DataLoader(Squares(), batch_size=None))
        [0, 1, 4, 9]
    """

    def __getitem__(self, index: Any) -> Any:
        raise NotImplementedError(
            f"{type(self).__name__}: a Dataset subclass must define __getitem__"
        )

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset that is a stream: subclasses define ``__iter__``. ``DataLoader`` batches
    what it yields, in order; it takes no sampler and no shuffling.

    Example:
        >>> class Count(IterableDataset):
        ...     def __iter__(self): return iter(range(5))
        >>> [b.tolist() for b in DataLoader(Count(), batch_size=2)]
        [[0, 1], [2, 3], [4]]
    """

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError(
            f"{type(self).__name__}: an IterableDataset subclass must define __iter__"
        )

    def __add__(self, other: Dataset) -> ConcatDataset:
        raise TypeError("IterableDataset: + concatenates map-style datasets only; chain "
                        "iterable ones with itertools.chain inside an IterableDataset")


class TensorDataset(Dataset):
    """Samples are slices along the first dimension of equally long tensors: sample ``i`` is
    ``(t[i] for t in tensors)``.

    Example:
        >>> import memgrad as mg
        >>> ds = TensorDataset(mg.zeros(5, 3), mg.arange(5))
        >>> len(ds), ds[2][1].item()
        (5, 2)
    """

    def __init__(self, *tensors: Tensor) -> None:
        if not tensors:
            raise ValueError("TensorDataset: expected at least one tensor, got none; pass "
                             "TensorDataset(inputs, targets)")
        for i, t in enumerate(tensors):
            if not isinstance(t, Tensor):
                raise TypeError(f"TensorDataset: argument {i} must be a Tensor, got "
                                f"{type(t).__name__}; convert it with mg.tensor(...)")
            if t.ndim == 0:
                raise ValueError(f"TensorDataset: argument {i} is a 0-d tensor; every tensor "
                                 "needs a first dimension to index samples by")
        sizes = [t.shape[0] for t in tensors]
        if len(set(sizes)) > 1:
            raise ValueError(f"TensorDataset: size mismatch between tensors: their first "
                             f"dimensions are {sizes}; every tensor needs one row per sample")
        self.tensors = tensors

    def __getitem__(self, index: Any) -> tuple[Tensor, ...]:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order.

    Example:
        >>> import memgrad as mg
        >>> s = Subset(TensorDataset(mg.arange(10)), [7, 3])
        >>> len(s), s[0][0].item()
        (2, 7)
    """

    def __init__(self, dataset: Dataset, indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx: Any) -> Any:
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices: list[int]) -> list[Any]:
        inner = [self.indices[i] for i in indices]
        fetch = getattr(self.dataset, "__getitems__", None)
        if fetch is not None:
            return list(fetch(inner))
        return [self.dataset[i] for i in inner]

    def __len__(self) -> int:
        return len(self.indices)


class ConcatDataset(Dataset):
    """Map-style datasets one after another: index ``len(a)`` is ``b[0]``.

    Example:
        >>> import memgrad as mg
        >>> ds = TensorDataset(mg.arange(3)) + TensorDataset(mg.arange(10, 12))
        >>> len(ds), ds[3][0].item(), ds[-1][0].item()
        (5, 10, 11)
    """

    def __init__(self, datasets: Iterable[Dataset]) -> None:
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset: expected at least one dataset, got none")
        for d in self.datasets:
            if isinstance(d, IterableDataset):
                raise TypeError("ConcatDataset: concatenates map-style datasets only, got an "
                                f"IterableDataset ({type(d).__name__})")
        self.cumulative_sizes = list(itertools.accumulate(len(d) for d in self.datasets))

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx: int) -> Any:
        n = len(self)
        if not _is_int(idx):
            raise TypeError(f"ConcatDataset: an index must be an int, got {type(idx).__name__}")
        if not -n <= idx < n:
            raise IndexError(f"ConcatDataset: index {idx} is out of range for {n} samples")
        idx = idx + n if idx < 0 else int(idx)
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][idx - start]


# ------------------------------------------------------------------------------ samplers


class Sampler:
    """Base class of samplers: an iterable of dataset indices (or, for a batch sampler, of
    lists of indices), usually with ``__len__``.

    Example:
        >>> class Evens(Sampler):
        ...     def __iter__(self): return iter([0, 2, 4])
        ...     def __len__(self): return 3
        >>> list(Evens())
        [0, 2, 4]
    """

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError(f"{type(self).__name__}: a Sampler must define __iter__")


class SequentialSampler(Sampler):
    """``0, 1, ..., len(data_source) - 1``.

    Example:
        >>> list(SequentialSampler(range(3)))
        [0, 1, 2]
    """

    def __init__(self, data_source: Sized) -> None:
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


def _epoch_generator(generator: _random.Generator | None) -> np.random.Generator:
    """The draws of one pass: from ``generator``, or, as in PyTorch, from a fresh generator
    seeded by one draw of the global generator (so each pass differs, and a seed set with
    ``mg.manual_seed`` replays them all)."""
    if generator is not None:
        return _random.generator(generator)
    seed = int(_random.generator().integers(0, 2**63 - 1))
    return np.random.Generator(np.random.PCG64(seed))


def _check_generator(api: str, generator: object) -> None:
    if generator is not None and not isinstance(generator, _random.Generator):
        kind = type(generator)
        raise TypeError(f"{api}: generator must be an mg.Generator or None, got "
                        f"{kind.__module__}.{kind.__qualname__}; make one with "
                        "mg.Generator().manual_seed(seed)")


class RandomSampler(Sampler):
    """A random order of ``range(len(data_source))``, new on every pass.

    Args:
        data_source: the dataset (anything with ``__len__``).
        replacement: draw ``num_samples`` indices with replacement instead of a permutation.
        num_samples: how many indices a pass yields (default: ``len(data_source)``).
        generator: an ``mg.Generator`` to draw from; without one each pass is seeded by a
            draw of the global generator.

    Example:
        >>> import memgrad as mg
        >>> order = list(RandomSampler(range(5), generator=mg.Generator().manual_seed(0)))
        >>> sorted(order)
        [0, 1, 2, 3, 4]
    """

    def __init__(
        self,
        data_source: Sized,
        replacement: bool = False,
        num_samples: int | None = None,
        generator: _random.Generator | None = None,
    ) -> None:
        if not isinstance(replacement, bool):
            raise TypeError(f"RandomSampler: replacement must be a bool, got {replacement!r}")
        if num_samples is not None and (not _is_int(num_samples) or num_samples <= 0):
            raise ValueError(f"RandomSampler: num_samples must be a positive int, got "
                             f"{num_samples!r}")
        _check_generator("RandomSampler", generator)
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator

    @property
    def num_samples(self) -> int:
        """How many indices one pass yields."""
        return len(self.data_source) if self._num_samples is None else int(self._num_samples)

    def __iter__(self) -> Iterator[int]:
        n, k = len(self.data_source), self.num_samples
        rng = _epoch_generator(self.generator)
        if self.replacement:
            return iter(rng.integers(0, n, size=k).tolist() if n else [])
        if n == 0:
            return iter([])
        full, rest = divmod(k, n)
        orders = [rng.permutation(n) for _ in range(full)] + [rng.permutation(n)[:rest]]
        return iter(np.concatenate(orders).tolist())

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """The given indices in a random order, new on every pass.

    Example:
        >>> import memgrad as mg
        >>> sorted(SubsetRandomSampler([5, 1, 3], generator=mg.Generator()))
        [1, 3, 5]
    """

    def __init__(self, indices: Sequence[int],
                 generator: _random.Generator | None = None) -> None:
        _check_generator("SubsetRandomSampler", generator)
        self.indices = indices
        self.generator = generator

    def __iter__(self) -> Iterator[int]:
        order = _epoch_generator(self.generator).permutation(len(self.indices))
        return iter([self.indices[i] for i in order.tolist()])

    def __len__(self) -> int:
        return len(self.indices)


class BatchSampler(Sampler):
    """Groups the indices of ``sampler`` into lists of ``batch_size``; the last, shorter
    list is dropped when ``drop_last``.

    Example:
        >>> list(BatchSampler(SequentialSampler(range(5)), batch_size=2, drop_last=False))
        [[0, 1], [2, 3], [4]]
        >>> len(BatchSampler(range(5), batch_size=2, drop_last=True))
        2
    """

    def __init__(self, sampler: Iterable[int], batch_size: int, drop_last: bool) -> None:
        if not _is_int(batch_size) or batch_size <= 0:
            raise ValueError(f"BatchSampler: batch_size must be a positive int, got "
                             f"batch_size={batch_size!r}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"BatchSampler: drop_last must be a bool, got "
                             f"drop_last={drop_last!r}")
        self.sampler = sampler
        self.batch_size = int(batch_size)
        self.drop_last = drop_last

    def __iter__(self) -> Iterator[list[int]]:
        it = iter(self.sampler)
        while batch := list(itertools.islice(it, self.batch_size)):
            if len(batch) < self.batch_size and self.drop_last:
                return
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)  # type: ignore[arg-type]
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


# ------------------------------------------------------------------------------ collate

_COLLATE_TYPES = ("tensors, NumPy arrays, numbers, strings, dicts, lists or tuples; "
                  "pass collate_fn= to merge other types")


def _numeric_array(a: np.ndarray, api: str) -> np.ndarray:
    if a.dtype.kind not in "biufc":
        raise TypeError(f"{api}: found a NumPy array of dtype {a.dtype}; batches hold "
                        f"{_COLLATE_TYPES}")
    return a


def _collate_sequences(batch: Sequence[Sequence[Any]]) -> Any:
    elem = batch[0]
    sizes = {len(s) for s in batch}
    if len(sizes) > 1:
        raise RuntimeError(f"default_collate: each element in list of batch should be of "
                           f"equal size; the samples have lengths {sorted(sizes)}")
    columns = [default_collate(list(samples)) for samples in zip(*batch)]
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # a namedtuple keeps its type
        return type(elem)(*columns)
    if isinstance(elem, tuple):
        return columns  # a list, as in PyTorch
    try:
        return type(elem)(columns)
    except TypeError:
        return columns


def _collate_mappings(batch: Sequence[Mapping[Any, Any]]) -> Any:
    elem = batch[0]
    merged = {}
    for key in elem:
        try:
            column = [d[key] for d in batch]
        except KeyError:
            raise KeyError(f"default_collate: the first sample has the key {key!r} and another "
                           "does not; every sample of a batch needs the same keys") from None
        merged[key] = default_collate(column)
    try:
        return type(elem)(merged)
    except TypeError:
        return merged


def default_collate(batch: Sequence[Any]) -> Any:
    """Merge a list of samples into a batch, as ``torch.utils.data.default_collate``:
    tensors are stacked along a new first dimension, NumPy arrays and scalars become
    stacked tensors, Python floats a float64 tensor, ints (and bools) an int64 (bool)
    tensor, strings stay a list; dicts, namedtuples and sequences are merged entry by entry
    (a tuple of columns comes back as a list, as in PyTorch).

    Example:
        >>> import memgrad as mg
        >>> out = default_collate([{"x": mg.zeros(2), "y": 1}, {"x": mg.ones(2), "y": 0}])
        >>> out["x"].shape, out["y"].tolist()
        ((2, 2), [1, 0])
        >>> [c.tolist() for c in default_collate([(1, 2.0), (3, 4.0)])]
        [[1, 3], [2.0, 4.0]]
    """
    if not isinstance(batch, Sequence) or isinstance(batch, (str, bytes)) or not batch:
        raise ValueError(f"default_collate: expected a non-empty list of samples, got "
                         f"{batch!r:.60}")
    elem = batch[0]
    if isinstance(elem, Tensor):
        return stack(list(batch), 0)
    if isinstance(elem, (np.ndarray, np.generic)):
        return from_numpy(np.stack([_numeric_array(np.asarray(b), "default_collate")
                                    for b in batch]))
    if isinstance(elem, int):  # bools too: all bools make a bool tensor, as in PyTorch
        return tensor(list(batch))
    if isinstance(elem, float):
        return tensor(list(batch), dtype=float64)
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, Mapping):
        return _collate_mappings(batch)
    if isinstance(elem, Sequence):
        return _collate_sequences(batch)
    raise TypeError(f"default_collate: batches hold {_COLLATE_TYPES}; found "
                    f"{type(elem).__name__}")


def default_convert(data: Any) -> Any:
    """What ``DataLoader(batch_size=None)`` does to each sample, as
    ``torch.utils.data.default_convert``: NumPy arrays and scalars become tensors (arrays
    share memory), inside dicts and sequences too (a tuple comes back as a list, as in
    PyTorch); everything else is left as it is.

    Example:
        >>> import numpy as np
        >>> default_convert({"x": np.zeros(2), "n": 3})
        {'x': tensor([0., 0.], dtype=float64), 'n': 3}
    """
    if isinstance(data, np.ndarray) and data.dtype.kind in "biufc":
        return from_numpy(data)
    if isinstance(data, np.generic) and np.asarray(data).dtype.kind in "biufc":
        return tensor(np.asarray(data))
    if isinstance(data, Mapping):
        converted = {k: default_convert(v) for k, v in data.items()}
        try:
            return type(data)(converted)
        except TypeError:
            return converted
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, Sequence) and not isinstance(data, (str, bytes)):
        items = [default_convert(d) for d in data]
        try:
            return type(data)(items)
        except TypeError:
            return items
    return data


# ------------------------------------------------------------------------------ the loader


def _check_loader_options(dataset: Any, batch_size: int | None, shuffle: bool | None,
                          sampler: Any, batch_sampler: Any, drop_last: bool) -> None:
    """PyTorch's rules about which options go together, with its messages."""
    if shuffle not in (None, True, False):
        raise TypeError(f"DataLoader: shuffle must be a bool or None, got {shuffle!r}")
    if isinstance(dataset, IterableDataset):
        if shuffle:
            raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle "
                             "option, but got shuffle=True; shuffle inside the dataset")
        if sampler is not None or batch_sampler is not None:
            raise ValueError("DataLoader with IterableDataset: expected unspecified sampler "
                             "and batch_sampler options; an IterableDataset yields its own "
                             "order")
    if sampler is not None and shuffle:
        raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle; "
                         "shuffle inside the sampler (DistributedSampler(shuffle=True))")
    if batch_sampler is not None and (batch_size != 1 or shuffle or sampler is not None
                                      or drop_last):
        raise ValueError("DataLoader: batch_sampler option is mutually exclusive with "
                         "batch_size, shuffle, sampler, and drop_last")
    if batch_sampler is None and batch_size is None and drop_last:
        raise ValueError("DataLoader: batch_size=None option disables auto-batching and is "
                         "mutually exclusive with drop_last")
    if batch_size is not None and (not _is_int(batch_size) or batch_size <= 0):
        raise ValueError(f"DataLoader: batch_size must be a positive int or None, got "
                         f"batch_size={batch_size!r}")


def _check_worker_options(num_workers: int, timeout: float, prefetch_factor: int | None,
                          persistent_workers: bool) -> None:
    if not _is_int(num_workers) or num_workers < 0:
        raise ValueError(f"DataLoader: num_workers option should be non-negative, got "
                         f"{num_workers!r}; use num_workers=0")
    if num_workers > 0:
        raise ValueError(
            f"DataLoader: memgrad loads batches in the calling process only, got "
            f"num_workers={num_workers}; pass num_workers=0 (worker processes are not "
            "supported)"
        )
    if not isinstance(timeout, (int, float)) or timeout < 0:
        raise ValueError(f"DataLoader: timeout option should be non-negative, got {timeout!r}")
    if prefetch_factor is not None:
        raise ValueError("DataLoader: prefetch_factor option could only be specified with "
                         "num_workers > 0; set prefetch_factor to None")
    if persistent_workers:
        raise ValueError("DataLoader: persistent_workers option needs num_workers > 0; "
                         "leave it False")


class DataLoader:
    """Iterate over a dataset in batches, as ``torch.utils.data.DataLoader``.

    Args:
        dataset: a map-style dataset (``__getitem__`` and ``__len__``) or an
            ``IterableDataset``.
        batch_size: samples per batch; ``None`` turns batching off (each sample goes through
            ``collate_fn``, by default ``default_convert``, on its own).
        shuffle: a new random order every pass (from ``generator``); exclusive with
            ``sampler``.
        sampler: the order of indices, e.g. ``memgrad.distributed.DistributedSampler`` to
            give each rank its shard.
        batch_sampler: yields lists of indices; exclusive with ``batch_size``, ``shuffle``,
            ``sampler`` and ``drop_last``.
        num_workers: must be 0: batches are loaded in this process (a value above 0 is
            refused with a ``ValueError``, never ignored).
        collate_fn: merges a list of samples into a batch (default: ``default_collate``).
        pin_memory: accepted; memgrad's tensors already live in host memory.
        drop_last: drop the last batch when it is short.
        timeout: accepted for PyTorch's signature, with its checks (worker processes,
            which memgrad does not start).
        worker_init_fn: likewise.
        prefetch_factor: likewise.
        persistent_workers: likewise.
        generator: an ``mg.Generator`` for the shuffling order (default: the global
            generator).

    ``len(loader)`` is the number of batches a pass yields.

    Example:
        >>> import memgrad as mg
        >>> ds = TensorDataset(mg.arange(10))
        >>> loader = DataLoader(ds, batch_size=4, shuffle=True,
        ...                     generator=mg.Generator().manual_seed(0), drop_last=True)
        >>> len(loader), [b.shape for (b,) in loader]
        (2, [(4,), (4,)])
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Iterable[Any] | None = None,
        batch_sampler: Iterable[list[Any]] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], None] | None = None,
        generator: _random.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
    ) -> None:
        _check_loader_options(dataset, batch_size, shuffle, sampler, batch_sampler, drop_last)
        _check_worker_options(num_workers, timeout, prefetch_factor, persistent_workers)
        _check_generator("DataLoader", generator)
        if collate_fn is not None and not callable(collate_fn):
            raise TypeError(f"DataLoader: collate_fn must be callable, got "
                            f"{type(collate_fn).__name__}")
        iterable = isinstance(dataset, IterableDataset)
        if batch_sampler is not None:
            batch_size, drop_last = None, False
        elif sampler is None and not iterable:
            sampler = (RandomSampler(dataset, generator=generator) if shuffle
                       else SequentialSampler(dataset))
        if batch_size is not None and not iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)  # type: ignore[arg-type]
        auto_batch = batch_sampler is not None or (iterable and batch_size is not None)
        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.collate_fn = collate_fn or (default_collate if auto_batch else default_convert)
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.generator = generator
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = persistent_workers

    def _fetch(self, indices: list[Any]) -> list[Any]:
        fetch = getattr(self.dataset, "__getitems__", None)
        if fetch is not None:
            return list(fetch(indices))
        return [self.dataset[i] for i in indices]

    def __iter__(self) -> Iterator[Any]:
        collate = self.collate_fn
        if isinstance(self.dataset, IterableDataset):
            stream = iter(self.dataset)
            if self.batch_size is None:
                yield from (collate(sample) for sample in stream)
                return
            while batch := list(itertools.islice(stream, self.batch_size)):
                if len(batch) < self.batch_size and self.drop_last:
                    return
                yield collate(batch)
        elif self.batch_sampler is not None:
            for indices in self.batch_sampler:
                yield collate(self._fetch(list(indices)))
        else:
            for index in self.sampler:  # type: ignore[union-attr]
                yield collate(self.dataset[index])

    def __len__(self) -> int:
        if isinstance(self.dataset, IterableDataset):
            n = len(self.dataset)  # a TypeError names the dataset's type when it has no len
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        counted = self.batch_sampler if self.batch_sampler is not None else self.sampler
        return len(counted)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ splitting


def _split_lengths(n: int, lengths: Sequence[int | float]) -> list[int]:
    for i, length in enumerate(lengths):
        if not isinstance(length, (int, float, np.integer, np.floating)) or isinstance(
            length, (bool, np.bool_)
        ):
            raise TypeError(f"random_split: lengths must be ints or fractions, got "
                            f"{length!r} at index {i}")
    total = sum(lengths)
    if math.isclose(total, 1) and total <= 1:  # fractions, as in PyTorch
        sizes = []
        for i, frac in enumerate(lengths):
            if not 0 <= frac <= 1:
                raise ValueError(f"random_split: fraction at index {i} is not between 0 and "
                                 f"1: {frac}")
            sizes.append(int(math.floor(n * frac)))
        for i in range(n - sum(sizes)):  # the rest, one at a time from the first split on
            sizes[i % len(sizes)] += 1
        for i, size in enumerate(sizes):
            if size == 0:
                warnings.warn(f"random_split: length of split at index {i} is 0; this "
                              "split is an empty dataset", stacklevel=3)
        return sizes
    for i, length in enumerate(lengths):
        if not _is_int(length) and not float(length).is_integer() or length < 0:
            raise ValueError(f"random_split: lengths must be non-negative ints or fractions "
                             f"summing to 1, got {length!r} at index {i}")
    sizes = [int(length) for length in lengths]
    if sum(sizes) != n:
        raise ValueError(f"random_split: sum of input lengths does not equal the length of "
                         f"the input dataset: {sum(sizes)} != {n}; pass lengths summing to "
                         f"{n}, or fractions summing to 1")
    return sizes


def random_split(
    dataset: Dataset,
    lengths: Sequence[int | float],
    generator: _random.Generator | None = None,
) -> list[Subset]:
    """Split ``dataset`` into non-overlapping random subsets, as
    ``torch.utils.data.random_split``.

    Args:
        dataset: a map-style dataset with ``__len__``.
        lengths: the subsets' sizes, summing to ``len(dataset)``, or fractions summing to 1
            (each subset gets ``floor(frac * len(dataset))`` and the remainder goes one at a
            time to the first subsets).
        generator: an ``mg.Generator`` for the permutation (default: the global generator).

    Example:
        >>> import memgrad as mg
        >>> train, val = random_split(range(10), [0.8, 0.2], generator=mg.Generator())
        >>> len(train), len(val), sorted(list(train) + list(val)) == list(range(10))
        (8, 2, True)
    """
    _check_generator("random_split", generator)
    if isinstance(lengths, (str, bytes)) or not isinstance(lengths, Sequence) or not lengths:
        raise TypeError(f"random_split: lengths must be a non-empty list of ints or fractions, "
                        f"got {lengths!r}")
    sizes = _split_lengths(len(dataset), lengths)  # type: ignore[arg-type]
    order = _random.generator(generator).permutation(sum(sizes)).tolist()
    return [Subset(dataset, order[end - size : end])
            for end, size in zip(itertools.accumulate(sizes), sizes)]
