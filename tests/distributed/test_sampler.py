"""Tests of memgrad.distributed.sampler.DistributedSampler against hand-built references."""

from __future__ import annotations

import math
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memgrad.distributed.sampler import DistributedSampler

SIZES = [(0, 1), (0, 3), (1, 1), (2, 5), (4, 4), (7, 2), (10, 3), (100, 8), (101, 7), (1000, 1)]


def _all_ranks(n, world, *, shuffle=True, seed=0, epoch=0):
    samplers = [
        DistributedSampler(n, num_replicas=world, rank=r, shuffle=shuffle, seed=seed)
        for r in range(world)
    ]
    for s in samplers:
        s.set_epoch(epoch)
    return samplers


def _check_shards(n, world, *, shuffle, seed, epoch):
    shards = [list(s) for s in _all_ranks(n, world, shuffle=shuffle, seed=seed, epoch=epoch)]
    per_rank = n // world
    assert all(len(shard) == per_rank for shard in shards)
    everything = [i for shard in shards for i in shard]
    # Disjoint: no index on two ranks (or twice on one).
    assert len(set(everything)) == len(everything) == per_rank * world
    assert all(0 <= i < n for i in everything)
    # Coverage: only the n % world dropped indices are missing.
    assert n - len(everything) == n % world
    return shards


@pytest.mark.parametrize("n, world", SIZES)
@pytest.mark.parametrize("shuffle", [True, False])
def test_shards_are_disjoint_equal_and_cover_all_but_the_remainder(n, world, shuffle):
    _check_shards(n, world, shuffle=shuffle, seed=3, epoch=2)


@pytest.mark.parametrize("n, world", SIZES)
def test_len_is_floor_of_n_over_world_on_every_rank(n, world):
    for s in _all_ranks(n, world):
        assert len(s) == n // world == len(list(s)) == s.indices().size


def test_fewer_examples_than_ranks_gives_every_rank_nothing():
    for s in _all_ranks(3, 5):
        assert len(s) == 0
        assert list(s) == []
        assert s.indices().shape == (0,)
        assert s.indices().dtype == np.int64


def test_empty_dataset():
    s = DistributedSampler(0, num_replicas=1, rank=0)
    assert len(s) == 0 and list(s) == [] and s.indices().dtype == np.int64


def test_dropped_indices_are_the_tail_of_the_permutation():
    n, world, seed, epoch = 23, 4, 11, 5
    reference = np.random.default_rng([seed, epoch]).permutation(n)
    shards = _check_shards(n, world, shuffle=True, seed=seed, epoch=epoch)
    kept = {i for shard in shards for i in shard}
    assert set(range(n)) - kept == set(reference[20:].tolist())


def test_shuffled_order_matches_the_documented_recipe():
    n, world, seed, epoch = 50, 3, 9, 4
    reference = np.random.default_rng([seed, epoch]).permutation(n)
    for r, s in enumerate(_all_ranks(n, world, seed=seed, epoch=epoch)):
        # Rank r holds positions r, r + W, r + 2W, ... of the order, below 48.
        expected = [int(reference[p]) for p in range(48) if p % world == r]
        assert list(s) == expected


def test_no_shuffle_gives_the_strided_arange():
    shards = [list(s) for s in _all_ranks(11, 3, shuffle=False, epoch=7)]
    assert shards == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    single = DistributedSampler(5, num_replicas=1, rank=0, shuffle=False)
    assert list(single) == [0, 1, 2, 3, 4]


def test_same_seed_and_epoch_give_the_same_order_on_a_fresh_sampler():
    a = DistributedSampler(200, num_replicas=4, rank=2, seed=5)
    b = DistributedSampler(200, num_replicas=4, rank=2, seed=5)
    a.set_epoch(3)
    b.set_epoch(3)
    assert list(a) == list(b)
    # Iterating twice does not advance anything.
    assert list(a) == list(a)


def test_different_epoch_or_seed_gives_a_different_order():
    s = DistributedSampler(200, num_replicas=2, rank=0, seed=5)
    epoch0 = list(s)
    s.set_epoch(1)
    epoch1 = list(s)
    assert epoch0 != epoch1
    assert sorted(epoch0) != sorted(epoch1)  # a different subset, not only a reordering
    s.set_epoch(0)
    assert list(s) == epoch0
    other_seed = DistributedSampler(200, num_replicas=2, rank=0, seed=6)
    assert list(other_seed) != epoch0


def test_shuffle_actually_permutes():
    s = DistributedSampler(100, num_replicas=1, rank=0, seed=1)
    order = list(s)
    assert sorted(order) == list(range(100))
    assert order != list(range(100))


@pytest.mark.parametrize("n, world, batch", [(64, 4, 4), (50, 3, 4), (37, 2, 5), (10, 5, 1)])
@pytest.mark.parametrize("epoch", [0, 3])
def test_global_batch_equals_single_process_batch_times_world(n, world, batch, epoch):
    seed = 13
    ranks = [s.indices() for s in _all_ranks(n, world, seed=seed, epoch=epoch)]
    single = DistributedSampler(n, num_replicas=1, rank=0, seed=seed)
    single.set_epoch(epoch)
    single_order = single.indices()
    full_steps = (n // world) // batch
    assert full_steps >= 1
    for k in range(full_steps):
        global_batch = np.concatenate([idx[k * batch : (k + 1) * batch] for idx in ranks])
        single_batch = single_order[k * batch * world : (k + 1) * batch * world]
        assert len(global_batch) == batch * world
        assert set(global_batch.tolist()) == set(single_batch.tolist())
    # A short last batch on W ranks is a subset of the single process's last batch.
    last = [idx[full_steps * batch :] for idx in ranks]
    if any(len(part) for part in last):
        tail = set(np.concatenate(last).tolist())
        assert tail <= set(single_order[full_steps * batch * world :].tolist())


def test_iter_yields_python_ints_and_indices_is_a_fresh_int64_array():
    s = DistributedSampler(20, num_replicas=3, rank=1, seed=2)
    items = list(iter(s))
    assert all(type(i) is int for i in items)
    arr = s.indices()
    assert arr.dtype == np.int64 and arr.ndim == 1
    assert arr.tolist() == items
    arr[:] = -1
    assert s.indices().tolist() == items


class _Sized:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


@pytest.mark.parametrize("dataset", [_Sized(17), list(range(17)), np.zeros((17, 3)), "x" * 17])
def test_dataset_given_as_an_object_with_len(dataset):
    from_obj = [list(s) for s in _all_ranks(dataset, 4, seed=8, epoch=1)]
    from_int = [list(s) for s in _all_ranks(17, 4, seed=8, epoch=1)]
    assert from_obj == from_int
    assert [len(x) for x in from_obj] == [4, 4, 4, 4]


def test_numpy_integers_are_accepted():
    s = DistributedSampler(
        np.int64(9), num_replicas=np.int32(3), rank=np.int64(2), seed=np.int64(1)
    )
    s.set_epoch(np.int64(2))
    t = DistributedSampler(9, num_replicas=3, rank=2, seed=1)
    t.set_epoch(2)
    assert list(s) == list(t)
    assert all(type(i) is int for i in s)


def test_explicit_arguments_need_no_comm_module(monkeypatch):
    # With the module made unimportable, explicit num_replicas/rank must still work ...
    monkeypatch.setitem(sys.modules, "memgrad.distributed.comm", None)
    assert list(DistributedSampler(6, num_replicas=2, rank=1, shuffle=False)) == [1, 3, 5]
    # ... and the default path really does go to it.
    with pytest.raises(ImportError):
        DistributedSampler(6)


def test_defaults_come_from_memgrad_distributed_comm(monkeypatch):
    comm = pytest.importorskip("memgrad.distributed.comm")
    monkeypatch.setattr(comm, "world_size", lambda: 4)
    monkeypatch.setattr(comm, "rank", lambda: 3)
    s = DistributedSampler(13, shuffle=False)
    assert (s.num_replicas, s.rank) == (4, 3)
    assert list(s) == [3, 7, 11]
    # An explicit argument wins over the default.
    assert DistributedSampler(13, rank=1, shuffle=False).indices().tolist() == [1, 5, 9]


# --- errors -------------------------------------------------------------------------------------

def _pytorch_padded_shard(order, world, rank):
    """torch.utils.data.DistributedSampler.__iter__ with drop_last=False, as written there."""
    indices = list(order)
    total_size = math.ceil(len(indices) / world) * world
    padding_size = total_size - len(indices)
    if padding_size <= len(indices):
        indices += indices[:padding_size]
    else:
        indices += (indices * math.ceil(padding_size / len(indices)))[:padding_size]
    return indices[rank:total_size:world]


@pytest.mark.parametrize("n, world", [(n, w) for n, w in SIZES if n] + [(1, 4), (2, 7)])
@pytest.mark.parametrize("shuffle", [True, False])
def test_drop_last_false_pads_as_pytorch_does(n, world, shuffle):
    samplers = [DistributedSampler(n, num_replicas=world, rank=r, shuffle=shuffle, seed=3,
                                   drop_last=False) for r in range(world)]
    order = np.random.default_rng([3, 1]).permutation(n) if shuffle else np.arange(n)
    for r, s in enumerate(samplers):
        s.set_epoch(1)
        assert list(s) == _pytorch_padded_shard(order.tolist(), world, r)
        assert len(s) == math.ceil(n / world)
    # every example is seen; only the padding repeats some
    assert set().union(*(set(s) for s in samplers)) == set(range(n))


def test_drop_last_false_on_an_empty_dataset_yields_nothing():
    assert list(DistributedSampler(0, num_replicas=3, rank=1, drop_last=False)) == []


BAD_CONSTRUCTIONS = [
    # (kwargs, exception type, fragments the message must contain)
    ({"dataset": True}, TypeError, ["dataset", "True", "__len__"]),
    ({"dataset": 3.0}, TypeError, ["dataset", "3.0", "float"]),
    ({"dataset": None}, TypeError, ["dataset", "None"]),
    ({"dataset": -1}, ValueError, ["dataset", ">= 0", "-1"]),
    ({"num_replicas": 0}, ValueError, ["num_replicas", ">= 1", "got 0", "world_size()"]),
    ({"num_replicas": -2}, ValueError, ["num_replicas", "got -2"]),
    ({"num_replicas": True}, TypeError, ["num_replicas", "True", "bool"]),
    ({"num_replicas": 2.0}, TypeError, ["num_replicas", "2.0", "float"]),
    ({"num_replicas": "2"}, TypeError, ["num_replicas", "'2'", "str"]),
    ({"rank": 2}, ValueError, ["rank must be in [0, num_replicas) = [0, 2), got 2", "rank()"]),
    ({"rank": -1}, ValueError, ["[0, 2)", "got -1"]),
    ({"rank": True}, TypeError, ["rank", "True", "bool"]),
    ({"rank": 1.0}, TypeError, ["rank", "1.0", "float"]),
    ({"seed": -1}, ValueError, ["seed", "non-negative", "-1"]),
    ({"seed": 1.5}, TypeError, ["seed", "1.5", "float"]),
    ({"seed": False}, TypeError, ["seed", "False", "bool"]),
    ({"drop_last": 1}, TypeError, ["drop_last must be a bool", "got 1", "False to pad"]),
]


@pytest.mark.parametrize("kwargs, exc, fragments", BAD_CONSTRUCTIONS)
def test_constructor_errors_name_the_api_and_what_came(kwargs, exc, fragments):
    args = {"dataset": 10, "num_replicas": 2, "rank": 0} | kwargs
    with pytest.raises(exc) as info:
        DistributedSampler(**args)
    message = str(info.value)
    assert message.startswith("DistributedSampler: ")
    for fragment in fragments:
        assert fragment in message


def test_rank_error_reads_as_documented():
    with pytest.raises(ValueError) as info:
        DistributedSampler(10, num_replicas=2, rank=2)
    assert str(info.value) == (
        "DistributedSampler: rank must be in [0, num_replicas) = [0, 2), got 2; "
        "pass the rank of this process (memgrad.distributed.rank())"
    )


@pytest.mark.parametrize(
    "epoch, exc, fragment",
    [
        (-1, ValueError, "got -1"),
        (1.0, TypeError, "1.0"),
        (True, TypeError, "True"),
        ("1", TypeError, "'1'"),
        (None, TypeError, "None"),
    ],
)
def test_set_epoch_errors_name_the_api(epoch, exc, fragment):
    s = DistributedSampler(10, num_replicas=2, rank=0)
    s.set_epoch(4)
    with pytest.raises(exc) as info:
        s.set_epoch(epoch)
    message = str(info.value)
    assert message.startswith("DistributedSampler.set_epoch: ")
    assert "non-negative int" in message and fragment in message
    assert s.epoch == 4  # a rejected epoch leaves the sampler as it was


# --- property -----------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(0, 300),
    world=st.integers(1, 17),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
    epoch=st.integers(0, 10_000),
)
def test_property_disjoint_and_covering(n, world, shuffle, seed, epoch):
    shards = _check_shards(n, world, shuffle=shuffle, seed=seed, epoch=epoch)
    if shuffle:
        reference = np.random.default_rng([seed, epoch]).permutation(n)
    else:
        reference = np.arange(n)
    kept = sorted(i for shard in shards for i in shard)
    assert kept == sorted(reference[: (n // world) * world].tolist())
    # Interleaving the shards position by position rebuilds the kept prefix of the order.
    interleaved = [shard[j] for j in range(n // world) for shard in shards]
    assert interleaved == reference[: (n // world) * world].tolist()
