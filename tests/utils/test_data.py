"""memgrad.utils.data against PyTorch's documented semantics: batches are the dataset's rows
in the sampler's order (checked against NumPy slicing), shuffling is a permutation that a
seeded generator replays, collate merges nested samples as default_collate does, and
DistributedSampler gives each rank its own shard."""

from __future__ import annotations

import math
from collections import OrderedDict, namedtuple

import numpy as np
import pytest

import memgrad as mg
from memgrad.distributed import DistributedSampler
from memgrad.utils import data
from memgrad.utils.data import (
    BatchSampler,
    ConcatDataset,
    DataLoader,
    Dataset,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    Subset,
    SubsetRandomSampler,
    TensorDataset,
    default_collate,
    default_convert,
    random_split,
)


def _dataset(n=10, features=3):
    x = np.arange(n * features, dtype=np.float32).reshape(n, features)
    return x, TensorDataset(mg.tensor(x), mg.arange(n))


def _order(loader):
    """The sample indices a pass yields, from the label column (label i is sample i)."""
    return [i for _, y in loader for i in y.tolist()]


def test_the_package_is_reachable_as_in_pytorch():
    assert mg.utils.data is data
    assert mg.utils.data.DataLoader is DataLoader


# ------------------------------------------------------------------------------ datasets


def test_tensor_dataset_indexes_rows_of_every_tensor():
    x, ds = _dataset()
    assert len(ds) == 10
    row, label = ds[3]
    np.testing.assert_array_equal(row.numpy(), x[3])
    assert label.item() == 3


@pytest.mark.parametrize("tensors, error, match", [
    ((), ValueError, "at least one tensor"),
    ((mg.zeros(3), mg.zeros(4)), ValueError, r"first dimensions are \[3, 4\]"),
    ((np.zeros(3),), TypeError, "argument 0 must be a Tensor, got ndarray"),
    ((mg.tensor(1.0),), ValueError, "0-d tensor"),
])
def test_tensor_dataset_refuses_bad_tensors(tensors, error, match):
    with pytest.raises(error, match=match):
        TensorDataset(*tensors)


def test_subset_and_concat_map_indices():
    _, ds = _dataset()
    sub = Subset(ds, [7, 2, 5])
    assert len(sub) == 3 and sub[1][1].item() == 2
    assert [s[1].item() for s in sub.__getitems__([2, 0])] == [5, 7]
    both = ds + TensorDataset(mg.arange(100, 103))
    assert isinstance(both, ConcatDataset) and len(both) == 13
    assert both[9][1].item() == 9 and both[10][0].item() == 100 and both[-1][0].item() == 102
    with pytest.raises(IndexError, match="index 13 is out of range for 13 samples"):
        both[13]


def test_a_dataset_without_getitem_says_so():
    with pytest.raises(NotImplementedError, match="must define __getitem__"):
        Dataset()[0]


# ------------------------------------------------------------------------------ batches


@pytest.mark.parametrize("n, batch, drop_last", [
    (10, 3, False), (10, 3, True), (9, 3, False), (9, 3, True), (2, 5, False), (2, 5, True),
])
def test_sequential_batches_are_numpy_slices(n, batch, drop_last):
    x, ds = _dataset(n)
    loader = DataLoader(ds, batch_size=batch, drop_last=drop_last)
    batches = list(loader)
    expected = (n // batch) if drop_last else math.ceil(n / batch)
    assert len(loader) == len(batches) == expected
    for k, (xb, yb) in enumerate(batches):
        np.testing.assert_array_equal(xb.numpy(), x[k * batch : (k + 1) * batch])
        np.testing.assert_array_equal(yb.numpy(), np.arange(n)[k * batch : (k + 1) * batch])
        assert xb.dtype == np.float32 and yb.dtype == np.int64


def test_shuffle_is_a_permutation_that_a_seeded_generator_replays():
    x, ds = _dataset(50)

    def loader(seed):
        g = mg.Generator().manual_seed(seed)
        return DataLoader(ds, batch_size=8, shuffle=True, generator=g)

    first = _order(loader(3))
    assert sorted(first) == list(range(50)) and first != list(range(50))
    assert _order(loader(3)) == first
    assert _order(loader(4)) != first
    # the rows travel with their labels
    for xb, yb in loader(3):
        np.testing.assert_array_equal(xb.numpy(), x[yb.numpy()])


def test_each_pass_draws_a_new_order_and_the_generator_replays_the_sequence():
    _, ds = _dataset(30)
    g = mg.Generator().manual_seed(0)
    loader = DataLoader(ds, batch_size=4, shuffle=True, generator=g)
    one, two = _order(loader), _order(loader)
    assert one != two and sorted(one) == sorted(two) == list(range(30))
    g.manual_seed(0)
    assert [_order(loader), _order(loader)] == [one, two]


def test_a_generator_leaves_the_global_generator_alone():
    _, ds = _dataset(20)
    mg.manual_seed(5)
    before = mg.get_rng_state()
    _order(DataLoader(ds, batch_size=4, shuffle=True, generator=mg.Generator()))
    assert mg.get_rng_state() == before


def test_without_a_generator_the_global_seed_replays_the_order():
    _, ds = _dataset(20)
    mg.manual_seed(11)
    a = _order(DataLoader(ds, batch_size=4, shuffle=True))
    mg.manual_seed(11)
    b = _order(DataLoader(ds, batch_size=4, shuffle=True))
    c = _order(DataLoader(ds, batch_size=4, shuffle=True))
    assert a == b and sorted(a) == list(range(20)) and c != a


def test_batch_size_none_yields_samples_one_by_one_converted():
    class Arrays(Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return {"x": np.full(2, i, dtype=np.int32), "i": i}

    samples = list(DataLoader(Arrays(), batch_size=None))
    assert len(DataLoader(Arrays(), batch_size=None)) == 3
    assert [s["i"] for s in samples] == [0, 1, 2]
    assert all(isinstance(s["x"], mg.Tensor) and s["x"].dtype == np.int32 for s in samples)
    assert samples[2]["x"].tolist() == [2, 2]


def test_a_sampler_and_a_batch_sampler_choose_the_indices():
    _, ds = _dataset(10)
    assert _order(DataLoader(ds, batch_size=2, sampler=[9, 1, 4])) == [9, 1, 4]
    batches = [[0, 5], [7], [2, 3, 8]]
    got = [y.tolist() for _, y in DataLoader(ds, batch_sampler=batches)]
    assert got == batches
    assert len(DataLoader(ds, batch_sampler=batches)) == 3


def test_distributed_sampler_gives_each_rank_its_shard():
    _, ds = _dataset(11)
    world, seen = 3, []
    for rank in range(world):
        sampler = DistributedSampler(ds, num_replicas=world, rank=rank, seed=4)
        sampler.set_epoch(2)
        loader = DataLoader(ds, batch_size=2, sampler=sampler)
        order = _order(loader)
        assert order == sampler.indices().tolist()
        assert len(loader) == math.ceil(len(sampler) / 2) == 2
        seen.append(order)
    flat = [i for shard in seen for i in shard]
    assert len(flat) == len(set(flat)) == 9  # disjoint; the remainder (11 % 3) is dropped
    one = DistributedSampler(ds, num_replicas=1, rank=0, seed=4)
    one.set_epoch(2)
    # NOTE [ Sampler order and the global batch ]: the ranks' k-th batches together are the
    # k-th batch of one process with world times the batch
    whole = [y.tolist() for _, y in DataLoader(ds, batch_size=2 * world, sampler=one)]
    assert sorted(seen[0][:2] + seen[1][:2] + seen[2][:2]) == sorted(whole[0])
    padded = [_order(DataLoader(ds, batch_size=2, sampler=DistributedSampler(
        ds, num_replicas=world, rank=rank, shuffle=False, drop_last=False)))
        for rank in range(world)]
    # PyTorch's padding: range(11) + [0] is dealt out rank by rank
    assert padded == [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8, 0]]


def test_iterable_datasets_are_batched_in_order():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(7))

    assert [b.tolist() for b in DataLoader(Stream(), batch_size=3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [b.tolist() for b in DataLoader(Stream(), batch_size=3, drop_last=True)] == [
        [0, 1, 2], [3, 4, 5]]
    assert list(DataLoader(Stream(), batch_size=None)) == list(range(7))
    with pytest.raises(ValueError, match="expected unspecified shuffle option"):
        DataLoader(Stream(), shuffle=True)
    with pytest.raises(ValueError, match="expected unspecified sampler"):
        DataLoader(Stream(), sampler=[0])
    with pytest.raises(TypeError):
        len(DataLoader(Stream()))


def test_a_custom_collate_fn_gets_the_list_of_samples():
    _, ds = _dataset(5)
    sizes = [len(b) for b in DataLoader(ds, batch_size=2, collate_fn=lambda b: b)]
    assert sizes == [2, 2, 1]


def test_num_workers_above_zero_is_refused_not_ignored():
    _, ds = _dataset(9)
    with pytest.raises(ValueError, match=r"DataLoader: memgrad loads batches in the calling "
                       r"process only, got num_workers=2; pass num_workers=0"):
        DataLoader(ds, batch_size=4, num_workers=2)
    assert _order(DataLoader(ds, batch_size=4, num_workers=0)) == list(range(9))


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(shuffle=True, sampler=[0]), ValueError, "sampler option is mutually exclusive"),
    (dict(batch_sampler=[[0]], batch_size=2), ValueError, "batch_sampler option is mutually"),
    (dict(batch_sampler=[[0]], drop_last=True), ValueError, "batch_sampler option is mutually"),
    (dict(batch_size=None, drop_last=True), ValueError, "disables auto-batching"),
    (dict(batch_size=0), ValueError, "batch_size must be a positive int or None, got "
                                     "batch_size=0"),
    (dict(batch_size=2.0), ValueError, "batch_size must be a positive int"),
    (dict(num_workers=-1), ValueError, "num_workers option should be non-negative"),
    (dict(prefetch_factor=2), ValueError, "prefetch_factor option could only be specified"),
    (dict(persistent_workers=True), ValueError, "persistent_workers option needs"),
    (dict(shuffle="yes"), TypeError, "shuffle must be a bool or None"),
    (dict(generator=np.random.default_rng(0)), TypeError,
     "generator must be an mg.Generator or None, got numpy.random._generator.Generator"),
    (dict(collate_fn=3), TypeError, "collate_fn must be callable"),
])
def test_option_conflicts_are_refused_as_in_pytorch(kwargs, error, match):
    _, ds = _dataset(4)
    with pytest.raises(error, match=match):
        DataLoader(ds, **kwargs)


# ------------------------------------------------------------------------------ samplers


def test_samplers():
    assert list(SequentialSampler(range(4))) == [0, 1, 2, 3]
    perm = list(RandomSampler(range(6), generator=mg.Generator().manual_seed(1)))
    assert sorted(perm) == list(range(6))
    longer = list(RandomSampler(range(4), num_samples=10, generator=mg.Generator()))
    assert len(longer) == 10 and sorted(longer[:4]) == sorted(longer[4:8]) == [0, 1, 2, 3]
    drawn = list(RandomSampler(range(3), replacement=True, num_samples=50,
                               generator=mg.Generator().manual_seed(2)))
    assert len(drawn) == 50 and set(drawn) == {0, 1, 2}
    assert sorted(SubsetRandomSampler([8, 3, 5], generator=mg.Generator())) == [3, 5, 8]
    assert list(BatchSampler(range(5), 2, drop_last=True)) == [[0, 1], [2, 3]]
    assert len(BatchSampler(range(5), 2, drop_last=False)) == 3
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        BatchSampler(range(5), True, drop_last=False)
    with pytest.raises(ValueError, match="num_samples must be a positive int"):
        RandomSampler(range(3), num_samples=0)


# ------------------------------------------------------------------------------ collate


def test_default_collate_stacks_tensors_arrays_and_numbers():
    out = default_collate([mg.tensor([1.0, 2.0]), mg.tensor([3.0, 4.0])])
    np.testing.assert_array_equal(out.numpy(), [[1.0, 2.0], [3.0, 4.0]])
    arrays = default_collate([np.array([1, 2], dtype=np.int16), np.array([3, 4], dtype=np.int16)])
    assert isinstance(arrays, mg.Tensor) and arrays.dtype == np.int16 and arrays.shape == (2, 2)
    scalars = default_collate([np.float32(1.5), np.float32(2.5)])
    assert scalars.dtype == np.float32 and scalars.tolist() == [1.5, 2.5]
    floats = default_collate([0.5, 1.0])
    assert floats.dtype == np.float64 and floats.tolist() == [0.5, 1.0]
    ints = default_collate([3, 4])
    assert ints.dtype == np.int64 and ints.tolist() == [3, 4]
    assert default_collate([True, False]).dtype == np.bool_
    assert default_collate(["a", "b"]) == ["a", "b"]


def test_default_collate_merges_nested_samples():
    Pair = namedtuple("Pair", "x y")
    batch = [
        {"pair": Pair(mg.zeros(2), 1), "meta": ("a", 0.5), "ids": [1, 2]},
        {"pair": Pair(mg.ones(2), 2), "meta": ("b", 1.5), "ids": [3, 4]},
    ]
    out = default_collate(batch)
    assert isinstance(out["pair"], Pair)
    assert out["pair"].x.tolist() == [[0.0, 0.0], [1.0, 1.0]] and out["pair"].y.tolist() == [1, 2]
    assert isinstance(out["meta"], list)  # a tuple of columns is a list, as in PyTorch
    assert out["meta"][0] == ["a", "b"] and out["meta"][1].tolist() == [0.5, 1.5]
    assert [c.tolist() for c in out["ids"]] == [[1, 3], [2, 4]]
    ordered = default_collate([OrderedDict(b=1, a=2), OrderedDict(b=3, a=4)])
    assert isinstance(ordered, OrderedDict) and list(ordered) == ["b", "a"]


@pytest.mark.parametrize("batch, error, match", [
    ([[1, 2], [3]], RuntimeError, "each element in list of batch should be of equal size"),
    ([object(), object()], TypeError, "found object"),
    ([np.array(["a"]), np.array(["b"])], TypeError, "NumPy array of dtype <U1"),
    ([{"a": 1}, {"b": 2}], KeyError, "every sample of a batch needs the same keys"),
    ([], ValueError, "non-empty list of samples"),
])
def test_default_collate_refuses_what_it_cannot_merge(batch, error, match):
    with pytest.raises(error, match=match):
        default_collate(batch)


def test_default_convert_shares_array_memory():
    a = np.zeros(3)
    out = default_convert((a, 1, "s"))
    assert isinstance(out, list) and out[1:] == [1, "s"]
    a[0] = 7.0
    assert out[0].tolist() == [7.0, 0.0, 0.0]


# ------------------------------------------------------------------------------ random_split


def test_random_split_by_counts_is_a_partition_replayed_by_the_generator():
    _, ds = _dataset(10)
    parts = random_split(ds, [3, 7], generator=mg.Generator().manual_seed(0))
    assert [len(p) for p in parts] == [3, 7]
    indices = parts[0].indices + parts[1].indices
    assert sorted(indices) == list(range(10)) and indices != list(range(10))
    again = random_split(ds, [3, 7], generator=mg.Generator().manual_seed(0))
    assert [p.indices for p in again] == [p.indices for p in parts]
    assert [y.item() for _, y in parts[0]] == parts[0].indices


@pytest.mark.parametrize("n, fractions, sizes", [
    (10, [0.8, 0.2], [8, 2]),
    (10, [0.33, 0.33, 0.34], [4, 3, 3]),  # floors 3, 3, 3; the one left goes to the first
    (5, [0.5, 0.5], [3, 2]),
    (7, [1 / 3] * 3, [3, 2, 2]),
])
def test_random_split_by_fractions_follows_pytorchs_rounding(n, fractions, sizes):
    parts = random_split(range(n), fractions, generator=mg.Generator())
    assert [len(p) for p in parts] == sizes
    assert sorted(i for p in parts for i in p) == list(range(n))


def test_random_split_warns_about_an_empty_split_and_uses_the_global_generator():
    with pytest.warns(UserWarning, match="length of split at index 1 is 0"):
        random_split(range(1), [0.9, 0.1])
    mg.manual_seed(3)
    a = [p.indices for p in random_split(range(8), [4, 4])]
    mg.manual_seed(3)
    assert [p.indices for p in random_split(range(8), [4, 4])] == a


@pytest.mark.parametrize("lengths, error, match", [
    ([3, 3], ValueError, "sum of input lengths does not equal the length of the input "
                         r"dataset: 6 != 10"),
    ([-1, 11], ValueError, "non-negative ints or fractions"),
    ([1.5, -0.5], ValueError, "fraction at index 0 is not between 0 and 1"),
    (["a", "b"], TypeError, "lengths must be ints or fractions"),
    (5, TypeError, "non-empty list"),
])
def test_random_split_refuses_bad_lengths(lengths, error, match):
    with pytest.raises(error, match=match):
        random_split(range(10), lengths)


# ------------------------------------------------------------------------------ Generator


def test_generator_seeds_states_and_independence():
    g = mg.Generator()
    assert g.manual_seed(9) is g and g.initial_seed() == 9 and g.device == "cpu"
    state = g.get_state()
    a = mg.random.generator(g).random(4)
    assert g.set_state(state) is g
    np.testing.assert_array_equal(mg.random.generator(g).random(4), a)
    # the same seed as the global generator draws the same numbers, from its own state
    mg.manual_seed(9)
    np.testing.assert_array_equal(mg.random.generator().random(4), a)
    assert isinstance(g.seed(), int)
    with pytest.raises(TypeError, match="Generator.manual_seed: seed must be an int"):
        g.manual_seed(1.5)
    with pytest.raises(ValueError, match="memgrad runs on the CPU"):
        mg.Generator("cuda")
    with pytest.raises(TypeError, match="expected a state returned by"):
        g.set_state([1, 2])
