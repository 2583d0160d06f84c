"""cagrad.utils.data against torch.utils.data 2.13: collation, datasets, samplers,
random_split and DataLoader (argument checks, batch counts and sizes, len) where the
results are deterministic; and DataLoader worker processes (same batches as without
workers under a seed, worker exceptions, worker_init_fn, get_worker_info, shutdown).

Datasets used by worker processes are defined at module level so that they also work
under the spawn start method."""

import collections
import os
import pickle
import random
import time

import numpy as np
import pytest
import torch
import torch.utils.data as tdata

from helpers import ca, needs_cagrad

cdata = ca.utils.data  # through helpers, so that stand-in mode can still collect this file
DataLoader, get_worker_info = cdata.DataLoader, cdata.get_worker_info

pytestmark = needs_cagrad

Point = collections.namedtuple("Point", ["x", "y"])


def lib_data(L):
    return cdata if L is ca else tdata


def outcome(fn):
    """(exception type name, message) of fn(), or ("ok", None) when it returns."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - any error is compared with torch's
        return type(e).__name__, str(e)
    return "ok", None


def assert_same_structure(c, t):
    """The same containers (types and keys) with tensors of the same dtype, shape and
    values, and equal leaves elsewhere."""
    if isinstance(t, torch.Tensor):
        assert isinstance(c, ca.Tensor), type(c)
        assert str(c.dtype).split(".")[1] == str(t.dtype).split(".")[1]
        assert tuple(c.shape) == tuple(t.shape)
        assert c.tolist() == t.tolist()
        return
    assert type(c) is type(t), (type(c), type(t))
    if isinstance(t, dict):
        assert list(c) == list(t)
        for key in t:
            assert_same_structure(c[key], t[key])
    elif isinstance(t, (list, tuple)):
        assert len(c) == len(t)
        for ci, ti in zip(c, t):
            assert_same_structure(ci, ti)
    else:
        assert c == t


def tensors_of(L, values):
    """values with every numpy array made a tensor of library L."""
    if isinstance(values, np.ndarray):
        return L.tensor(values)
    if isinstance(values, dict):
        return {k: tensors_of(L, v) for k, v in values.items()}
    if isinstance(values, Point):
        return Point(*(tensors_of(L, v) for v in values))
    if isinstance(values, (list, tuple)):
        return type(values)(tensors_of(L, v) for v in values)
    return values


# ------------------------------------------------------------------------------ collate
F32 = np.arange(6, dtype=np.float32).reshape(2, 3)
F64 = np.linspace(0, 1, 4)
I64 = np.array([3, -1], dtype=np.int64)

# batches whose leaves are plain data or numpy arrays (kept as arrays)
RAW_BATCHES = {
    "ints": [1, 2, 3],
    "floats": [0.5, 1.5],
    "strings": ["a", "bc"],
    "bytes": [b"a", b"b"],
    "numpy_f32": [F32, F32 + 1],
    "numpy_f64": [F64, F64 * 2],
    "numpy_i64": [I64, I64 + 5],
    "numpy_scalars_f64": [np.float64(1.5), np.float64(2.5)],
    "numpy_scalars_i64": [np.int64(4), np.int64(5)],
    "tuples": [(1, 2.0, "a"), (3, 4.0, "b")],
    "lists": [[1, 2], [3, 4]],
    "dicts": [{"a": 1, "b": [1.0, 2.0]}, {"a": 2, "b": [3.0, 4.0]}],
    "namedtuples": [Point(1, 2.0), Point(3, 4.0)],
    "nested": [{"p": (F64, [1, "s"]), "q": {"r": 1.0}}, {"p": (F64, [2, "t"]), "q": {"r": 2.0}}],
}
# batches with tensors of each library (built from the same numpy arrays)
TENSOR_BATCHES = {
    "tensors_f32": [F32, F32 * 2],
    "tensors_i64": [I64, I64],
    "tensor_tuples": [(F64, 1), (F64 + 1, 2)],
    "tensor_dicts": [{"x": F32, "y": I64}, {"x": F32, "y": I64}],
    "tensor_namedtuples": [Point(F64, 1.0), Point(F64, 2.0)],
}


@pytest.mark.parametrize("name", list(RAW_BATCHES))
def test_default_collate_plain_data_as_torch(name):
    batch = RAW_BATCHES[name]
    assert_same_structure(cdata.default_collate(batch), tdata.default_collate(batch))


@pytest.mark.parametrize("name", list(TENSOR_BATCHES))
def test_default_collate_tensors_as_torch(name):
    c = cdata.default_collate(tensors_of(ca, TENSOR_BATCHES[name]))
    t = tdata.default_collate(tensors_of(torch, TENSOR_BATCHES[name]))
    assert_same_structure(c, t)


@pytest.mark.parametrize("batch", [
    [[1, 2], [3]],
    [object(), object()],
    [np.array(["a", "b"]), np.array(["c", "d"])],
    [None, None],
], ids=["unequal_lists", "objects", "string_arrays", "none"])
def test_default_collate_errors_as_torch(batch):
    c, t = outcome(lambda: cdata.default_collate(batch)), \
        outcome(lambda: tdata.default_collate(batch))
    assert c[0] != "ok" and c == t


def test_default_collate_keeps_mapping_and_sequence_types():
    class Record(dict):
        pass
    batch = [Record(a=1.0), Record(a=2.0)]
    for data in (cdata, tdata):
        assert type(data.default_collate(batch)) is Record
    ranges = [range(2), range(2)]  # a Sequence that cannot be rebuilt: a list comes back
    assert_same_structure(cdata.default_collate(ranges), tdata.default_collate(ranges))


@pytest.mark.parametrize("data", [
    F32, F64, I64, np.float64(2.5), 3, "s", (F64, 1), [F32, "a"], {"k": I64},
    Point(F64, 2), np.array(["x"]),
], ids=lambda d: type(d).__name__)
def test_default_convert_as_torch(data):
    c, t = cdata.default_convert(data), tdata.default_convert(data)
    if isinstance(t, np.ndarray):
        assert isinstance(c, np.ndarray) and c is data
    else:
        assert_same_structure(c, t)


def test_default_convert_leaves_tensors_alone():
    x = ca.ones(2)
    assert cdata.default_convert(x) is x


# ------------------------------------------------------------------------------ datasets
def test_tensor_dataset_items_and_len():
    x, y = ca.arange(12.0).reshape(6, 2), ca.arange(6)
    ds = cdata.TensorDataset(x, y)
    assert len(ds) == 6
    assert ds[4][0].tolist() == [8.0, 9.0] and ds[4][1].item() == 4


def test_tensor_dataset_size_mismatch_as_torch():
    for L in (ca, torch):
        with pytest.raises(AssertionError, match="Size mismatch between tensors"):
            lib_data(L).TensorDataset(L.ones(3), L.ones(4))


class Squares(cdata.Dataset):
    """A map-style dataset: item i is i * i (plain ints, comparable across libraries)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return i * i


@pytest.mark.parametrize("idx", [0, 2, 3, 6, 8, -1, -9])
def test_concat_dataset_indexing_as_torch(idx):
    parts = [[0, 1, 2], [10, 11, 12], [20, 21, 22]]
    c, t = cdata.ConcatDataset(parts), tdata.ConcatDataset(parts)
    assert len(c) == len(t) == 9 and c.cumulative_sizes == t.cumulative_sizes
    assert c[idx] == t[idx]


@pytest.mark.parametrize("make", [
    lambda data: data.ConcatDataset([[1, 2]])[-3],
    lambda data: data.ConcatDataset([]),
    lambda data: data.ConcatDataset([[1], data.ChainDataset([])]),
    lambda data: data.IterableDataset(),
], ids=["index_too_negative", "empty", "iterable", "abstract_iterable"])
def test_concat_dataset_errors_as_torch(make):
    c, t = outcome(lambda: make(cdata)), outcome(lambda: make(tdata))
    assert c == t and c[0] != "ok"


def test_dataset_add_concatenates_and_base_getitem_raises():
    both = Squares(3) + Squares(2)
    assert isinstance(both, cdata.ConcatDataset) and [both[i] for i in range(5)] == \
        [0, 1, 4, 0, 1]
    assert outcome(lambda: cdata.Dataset()[0]) == outcome(lambda: tdata.Dataset()[0])


class Count(cdata.IterableDataset):
    """An iterable dataset: start, start+1, ..., end-1; each worker takes every
    num_workers-th item from its id on."""

    def __init__(self, start, end):
        self.start, self.end = start, end

    def __iter__(self):
        info = get_worker_info()
        first, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(self.start + first, self.end, step))

    def __len__(self):
        return self.end - self.start


class TorchCount(tdata.IterableDataset):
    """Count, for torch (the same code on torch's base class)."""

    __init__ = Count.__init__
    __len__ = Count.__len__

    def __iter__(self):
        info = tdata.get_worker_info()
        first, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(self.start + first, self.end, step))


def test_chain_dataset_and_iterable_add():
    chained = Count(0, 3) + Count(10, 12)
    assert isinstance(chained, cdata.ChainDataset)
    assert list(chained) == [0, 1, 2, 10, 11] and len(chained) == 5
    with pytest.raises(AssertionError, match="ChainDataset only supports IterableDataset"):
        list(cdata.ChainDataset([[1, 2]]))


def test_subset_indexing_and_getitems():
    sub = cdata.Subset(Squares(10), [9, 2, 5])
    assert len(sub) == 3 and sub[0] == 81 and sub[-1] == 25
    assert sub.__getitems__([2, 0]) == [25, 81]


def test_subset_subclass_overriding_getitem_only_raises_as_torch():
    def make(data):
        class Shifted(data.Subset):
            def __getitem__(self, i):
                return super().__getitem__(i) + 1
        return Shifted([1, 2], [0])
    assert outcome(lambda: make(cdata))[0] == outcome(lambda: make(tdata))[0] == \
        "NotImplementedError"


# ------------------------------------------------------------------------------ random_split
@pytest.mark.filterwarnings("ignore:Length of split at index")
@pytest.mark.parametrize("n, lengths", [
    (10, [3, 7]), (10, [0.3, 0.7]), (11, [0.5, 0.5]), (7, [0.2, 0.2, 0.6]),
    (30, [0.3, 0.3, 0.4]), (5, [1.0]), (3, [0.1, 0.1, 0.8]), (4, [4, 0]),
])
def test_random_split_lengths_as_torch(n, lengths):
    c = cdata.random_split(range(n), lengths)
    t = tdata.random_split(range(n), lengths)
    assert [len(s) for s in c] == [len(s) for s in t]
    chosen = [i for s in c for i in s]
    assert sorted(chosen) == list(range(n))  # disjoint and complete


def test_random_split_warns_about_empty_splits_as_torch():
    for data in (cdata, tdata):
        with pytest.warns(UserWarning, match="Length of split at index 0 is 0"):
            data.random_split(range(3), [0.0, 1.0])


@pytest.mark.parametrize("lengths", [[3, 3], [0.5, 0.6], [1.2, -0.2], [0.5, 0.4]])
def test_random_split_errors_as_torch(lengths):
    c = outcome(lambda: cdata.random_split(range(10), lengths))
    assert c[0] != "ok" and c == outcome(lambda: tdata.random_split(range(10), lengths))


def test_random_split_generator_reproducible():
    def split(seed):
        parts = cdata.random_split(range(20), [5, 15], generator=ca.Generator().manual_seed(seed))
        return [list(p) for p in parts]
    assert split(1) == split(1) and split(1) != split(2)


# ------------------------------------------------------------------------------ samplers
def test_sequential_sampler():
    assert list(cdata.SequentialSampler(range(5))) == [0, 1, 2, 3, 4]
    assert len(cdata.SequentialSampler(range(5))) == 5


@pytest.mark.parametrize("n, batch_size, drop_last", [
    (10, 3, False), (10, 3, True), (9, 3, True), (2, 5, False), (2, 5, True), (0, 2, False),
])
def test_batch_sampler_as_torch(n, batch_size, drop_last):
    c = cdata.BatchSampler(range(n), batch_size, drop_last)
    t = tdata.BatchSampler(range(n), batch_size, drop_last)
    assert list(c) == list(t) and len(c) == len(t)


@pytest.mark.parametrize("make", [
    lambda data: data.BatchSampler(range(3), 0, False),
    lambda data: data.BatchSampler(range(3), True, False),
    lambda data: data.BatchSampler(range(3), 2.0, False),
    lambda data: data.BatchSampler(range(3), 2, 1),
    lambda data: data.RandomSampler(range(3), replacement=1),
    lambda data: data.RandomSampler(range(3), num_samples=0),
    lambda data: data.RandomSampler(range(3), num_samples=1.5),
    lambda data: data.RandomSampler([]),
    lambda data: data.WeightedRandomSampler([1.0, 2.0], 0),
    lambda data: data.WeightedRandomSampler([1.0, 2.0], True),
    lambda data: data.WeightedRandomSampler([1.0, 2.0], 2, replacement=None),
    lambda data: data.WeightedRandomSampler([[1.0, 2.0]], 2),
    lambda data: list(data.WeightedRandomSampler([1.0, 2.0], 3, replacement=False)),
    lambda data: list(data.Sampler()),
    lambda data: data.Sampler([1, 2]),
], ids=["bs_zero", "bs_bool", "bs_float", "drop_last_int", "replacement_int", "ns_zero",
        "ns_float", "empty_source", "w_ns_zero", "w_ns_bool", "w_replacement", "w_2d",
        "w_too_many", "base_iter", "base_with_data_source"])
def test_sampler_errors_as_torch(make):
    c = outcome(lambda: make(cdata))
    assert c[0] != "ok" and c == outcome(lambda: make(tdata))


@pytest.mark.parametrize("n, num_samples, replacement", [
    (7, None, False), (5, 12, False), (5, 3, False), (6, 40, True), (4, None, True),
])
def test_random_sampler_lengths_and_coverage(n, num_samples, replacement):
    c = cdata.RandomSampler(range(n), replacement, num_samples)
    t = tdata.RandomSampler(range(n), replacement, num_samples)
    picks = list(c)
    assert len(picks) == len(c) == len(t) == len(list(t))
    assert all(0 <= i < n for i in picks)
    if not replacement:  # whole permutations, then the start of one more
        counts = np.bincount(picks, minlength=n)
        assert counts.max() - counts.min() <= 1 and counts.min() == len(picks) // n


def test_random_sampler_follows_manual_seed_and_generator():
    ca.manual_seed(4)
    a = list(cdata.RandomSampler(range(30)))
    ca.manual_seed(4)
    assert list(cdata.RandomSampler(range(30))) == a
    g1, g2 = ca.Generator().manual_seed(9), ca.Generator().manual_seed(9)
    assert list(cdata.RandomSampler(range(30), generator=g1)) == \
        list(cdata.RandomSampler(range(30), generator=g2))


def test_subset_random_sampler_permutes_its_indices():
    indices = [3, 8, 1, 20]
    s = cdata.SubsetRandomSampler(indices)
    assert sorted(s) == sorted(indices) and len(s) == 4


def test_weighted_random_sampler_follows_weights():
    ca.manual_seed(2)
    n = 20000
    picks = list(cdata.WeightedRandomSampler([1.0, 0.0, 3.0], n))
    assert len(picks) == n and 1 not in picks
    # binomial frequency of category 2 (p = 0.75), six standard deviations
    assert abs(picks.count(2) / n - 0.75) < 6 * (0.75 * 0.25 / n) ** 0.5
    no_repeat = list(cdata.WeightedRandomSampler([1.0, 2.0, 3.0], 3, replacement=False))
    assert sorted(no_repeat) == [0, 1, 2]


# ------------------------------------------------------------------------------ DataLoader
def batches(loader):
    """A loader's batches as plain Python values (tensors as nested lists)."""
    def plain(x):
        if isinstance(x, (ca.Tensor, torch.Tensor)):
            return x.tolist()
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [plain(v) for v in x]
        return x
    return [plain(b) for b in loader]


def both_loaders(make_dataset, **kw):
    """The same DataLoader built with each library."""
    return (cdata.DataLoader(make_dataset(ca), **kw),
            tdata.DataLoader(make_dataset(torch), **kw))


def pairs(L, n=10):
    return lib_data(L).TensorDataset(L.arange(2.0 * n).reshape(n, 2), L.arange(n))


@pytest.mark.parametrize("n", [1, 7, 12])
@pytest.mark.parametrize("batch_size", [1, 3, 5, 12, 20])
@pytest.mark.parametrize("drop_last", [False, True])
def test_batches_and_len_as_torch(n, batch_size, drop_last):
    c, t = both_loaders(lambda L: pairs(L, n), batch_size=batch_size, drop_last=drop_last)
    assert len(c) == len(t)
    assert batches(c) == batches(t)


def test_batch_size_none_converts_samples_as_torch():
    c, t = both_loaders(pairs, batch_size=None)
    cb, tb = list(c), list(t)
    assert len(c) == len(t) == 10 and len(cb) == len(tb)
    for x, y in zip(cb, tb):
        assert_same_structure(x, y)


def test_numpy_and_dict_samples_collate_as_torch():
    class Records(cdata.Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return {"x": np.full(3, i, dtype=np.float64), "label": i, "name": f"r{i}"}
    c, t = cdata.DataLoader(Records(), batch_size=2), tdata.DataLoader(Records(), batch_size=2)
    for x, y in zip(c, t):
        assert_same_structure(x, y)


def test_custom_sampler_batch_sampler_and_collate_fn_as_torch():
    kws = [dict(sampler=[4, 1, 3], batch_size=2),
           dict(batch_sampler=[[0, 1], [5], [2, 9, 3]]),
           dict(batch_size=4, collate_fn=lambda items: len(items))]
    for kw in kws:
        c, t = both_loaders(pairs, **kw)
        assert batches(c) == batches(t) and len(c) == len(t)


def test_shuffle_gives_a_permutation_that_follows_manual_seed():
    def epoch():
        return [i for b in cdata.DataLoader(Squares(20), batch_size=6, shuffle=True)
                for i in b.tolist()]
    ca.manual_seed(0)
    first, second = epoch(), epoch()
    assert sorted(first) == sorted(i * i for i in range(20)) and first != second
    ca.manual_seed(0)
    assert epoch() == first


def test_iterable_dataset_batches_and_len_as_torch():
    for kw in (dict(batch_size=3), dict(batch_size=3, drop_last=True), dict(batch_size=None)):
        c, t = cdata.DataLoader(Count(0, 8), **kw), tdata.DataLoader(TorchCount(0, 8), **kw)
        assert len(c) == len(t) and batches(c) == batches(t)


ARGUMENT_ERRORS = {
    "negative_workers": lambda data, ds: data.DataLoader(ds, num_workers=-1),
    "negative_timeout": lambda data, ds: data.DataLoader(ds, timeout=-1),
    "prefetch_without_workers": lambda data, ds: data.DataLoader(ds, prefetch_factor=2),
    "negative_prefetch": lambda data, ds: data.DataLoader(ds, num_workers=1,
                                                          prefetch_factor=-1),
    "persistent_without_workers": lambda data, ds: data.DataLoader(ds,
                                                                   persistent_workers=True),
    "sampler_with_shuffle": lambda data, ds: data.DataLoader(ds, sampler=[0, 1], shuffle=True),
    "batch_sampler_with_batch_size": lambda data, ds: data.DataLoader(
        ds, batch_sampler=[[0]], batch_size=2),
    "batch_sampler_with_shuffle": lambda data, ds: data.DataLoader(
        ds, batch_sampler=[[0]], shuffle=True),
    "batch_sampler_with_sampler": lambda data, ds: data.DataLoader(
        ds, batch_sampler=[[0]], sampler=[0]),
    "batch_sampler_with_drop_last": lambda data, ds: data.DataLoader(
        ds, batch_sampler=[[0]], drop_last=True),
    "no_batching_with_drop_last": lambda data, ds: data.DataLoader(ds, batch_size=None,
                                                                   drop_last=True),
    "bad_batch_size": lambda data, ds: data.DataLoader(ds, batch_size=0),
    "context_without_workers": lambda data, ds: data.DataLoader(
        ds, multiprocessing_context="spawn"),
    "unknown_context": lambda data, ds: data.DataLoader(ds, num_workers=1,
                                                        multiprocessing_context="nope"),
    "bad_context": lambda data, ds: data.DataLoader(ds, num_workers=1,
                                                    multiprocessing_context=3),
    "timeout_without_workers": lambda data, ds: next(iter(data.DataLoader(ds, timeout=1))),
}


@pytest.mark.parametrize("name", list(ARGUMENT_ERRORS))
def test_argument_errors_as_torch(name):
    c = outcome(lambda: ARGUMENT_ERRORS[name](cdata, list(range(4))))
    assert c[0] != "ok" and c == outcome(lambda: ARGUMENT_ERRORS[name](tdata, list(range(4))))


@pytest.mark.parametrize("kw", [dict(shuffle=True), dict(sampler=[0]),
                                dict(batch_sampler=[[0]])], ids=lambda kw: list(kw)[0])
def test_iterable_dataset_argument_errors_as_torch(kw):
    c = outcome(lambda: cdata.DataLoader(Count(0, 3), **kw))
    t = outcome(lambda: tdata.DataLoader(TorchCount(0, 3), **kw))
    assert c[0] == t[0] == "ValueError"
    assert c[1].split(", but got")[0] == t[1].split(", but got")[0]


@pytest.mark.parametrize("attr", ["batch_size", "sampler", "dataset", "drop_last"])
def test_attributes_are_frozen_after_init_as_torch(attr):
    def assign(data):
        setattr(data.DataLoader(list(range(3))), attr, None)
    assert outcome(lambda: assign(cdata)) == outcome(lambda: assign(tdata)) != ("ok", None)


def test_pin_memory_is_a_warned_no_op_as_torch():
    for data, L in ((cdata, ca), (tdata, torch)):
        loader = data.DataLoader(pairs(L), batch_size=4, pin_memory=True)
        with pytest.warns(UserWarning, match="no accelerator is found"):
            got = batches(loader)
        assert got == batches(data.DataLoader(pairs(L), batch_size=4))


def test_iterator_cannot_be_pickled():
    with pytest.raises(NotImplementedError):
        pickle.dumps(iter(cdata.DataLoader(list(range(3)))))


def test_tensors_pickle_for_worker_transport():
    x = ca.arange(6.0, dtype=ca.float64).reshape(2, 3)
    y = pickle.loads(pickle.dumps(x))
    assert y.tolist() == x.tolist() and y.dtype == x.dtype


# ------------------------------------------------------------------------------ workers
class Noisy(cdata.Dataset):
    """Each item draws from the RNGs of the process that reads it: cagrad's C RNG, its
    default generator, numpy's and Python's global ones."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return {"i": i, "randn": ca.randn(2), "randperm": ca.randperm(6),
                "numpy": np.random.rand(), "python": random.random()}


class FailsAt(cdata.Dataset):
    def __init__(self, bad):
        self.bad = bad

    def __len__(self):
        return 8

    def __getitem__(self, i):
        if i == self.bad:
            raise ValueError(f"item {i} is broken")
        return i


class WhoAmI(cdata.Dataset):
    """Items report the worker that read them and its seed."""

    def __len__(self):
        return 6

    def __getitem__(self, i):
        info = get_worker_info()
        return {"i": i, "worker": info.id, "num_workers": info.num_workers,
                "seed": info.seed, "mark": getattr(info.dataset, "mark", None),
                "same_dataset": info.dataset is self}


def mark_worker(worker_id):
    """worker_init_fn: records in this worker's copy of the dataset that it ran."""
    get_worker_info().dataset.mark = f"init{worker_id}"


def collect(loader):
    return batches(loader)


def test_workers_give_the_same_shuffled_batches_as_the_main_process():
    ds = pairs(ca, 23)
    ca.manual_seed(11)
    without = collect(DataLoader(ds, batch_size=4, shuffle=True))
    ca.manual_seed(11)
    with_workers = collect(DataLoader(ds, batch_size=4, shuffle=True, num_workers=2))
    assert with_workers == without
    g = ca.Generator().manual_seed(5)
    by_generator = collect(DataLoader(ds, batch_size=4, shuffle=True, generator=g))
    g.manual_seed(5)
    assert collect(DataLoader(ds, batch_size=4, shuffle=True, generator=g,
                              num_workers=2)) == by_generator


def test_workers_keep_order_with_any_prefetch_factor():
    expected = collect(DataLoader(pairs(ca, 11), batch_size=2))
    for prefetch_factor in (1, 3):
        assert collect(DataLoader(pairs(ca, 11), batch_size=2, num_workers=2,
                                  prefetch_factor=prefetch_factor)) == expected


def noisy_epoch(seed):
    ca.manual_seed(seed)
    return collect(DataLoader(Noisy(), batch_size=None, num_workers=2))


def test_worker_rngs_are_seeded_from_the_loader_and_differ_between_workers():
    first = noisy_epoch(1)
    assert noisy_epoch(1) == first  # every RNG in the workers follows manual_seed
    again = noisy_epoch(2)
    for key in ("randn", "randperm", "numpy", "python"):
        assert first[0][key] != again[0][key], key
        # items 0 and 1 are the first draws of workers 0 and 1: seeded differently
        assert first[0][key] != first[1][key], key


def test_worker_exception_is_raised_in_main_process_with_its_traceback():
    loader = DataLoader(FailsAt(5), batch_size=2, num_workers=2)
    with pytest.raises(ValueError) as err:
        list(loader)
    text = str(err.value)
    assert "Caught ValueError in DataLoader worker process" in text
    assert "Original Traceback (most recent call last)" in text
    assert "item 5 is broken" in text and "__getitem__" in text


def test_worker_exception_in_main_process_as_torch_without_workers():
    c = outcome(lambda: list(DataLoader(FailsAt(1), batch_size=2)))
    t = outcome(lambda: list(tdata.DataLoader(FailsAt(1), batch_size=2)))
    assert c == t == ("ValueError", "item 1 is broken")


def test_worker_init_fn_and_get_worker_info():
    assert get_worker_info() is None
    ca.manual_seed(3)
    items = [item for b in DataLoader(WhoAmI(), batch_size=None, num_workers=2,
                                      worker_init_fn=mark_worker)
             for item in [b]]
    assert [it["i"] for it in items] == list(range(6))
    by_worker = {it["worker"]: it for it in items}
    assert sorted(by_worker) == [0, 1]  # round-robin: both workers worked
    for worker_id, it in by_worker.items():
        assert it["num_workers"] == 2 and it["mark"] == f"init{worker_id}"
        assert it["same_dataset"]
    seed0 = by_worker[0]["seed"]
    assert by_worker[1]["seed"] == seed0 + 1  # base seed + worker id, as in PyTorch
    ca.manual_seed(3)
    again = list(DataLoader(WhoAmI(), batch_size=None, num_workers=2))
    assert again[0]["seed"] == seed0  # the base seed follows manual_seed


@pytest.mark.parametrize("kw", [dict(batch_size=2), dict(batch_size=2, drop_last=True),
                                dict(batch_size=None)], ids=["batched", "drop_last", "none"])
def test_iterable_dataset_with_workers_interleaves_their_streams_as_torch(kw):
    c = collect(DataLoader(Count(0, 9), num_workers=2, **kw))
    t = collect(tdata.DataLoader(TorchCount(0, 9), num_workers=2, **kw))
    assert c == t


def test_dropping_the_iterator_early_stops_the_workers():
    it = iter(DataLoader(pairs(ca, 40), batch_size=2, num_workers=2))
    next(it)
    workers = list(it._workers)
    assert all(w.is_alive() for w in workers)
    del it
    deadline = time.monotonic() + 10
    while any(w.is_alive() for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(w.is_alive() for w in workers)


def test_workers_end_with_the_epoch():
    it = iter(DataLoader(pairs(ca, 6), batch_size=2, num_workers=2))
    workers = list(it._workers)
    assert len(list(it)) == 3
    assert not any(w.is_alive() for w in workers)


def test_persistent_workers_serve_several_epochs():
    loader = DataLoader(pairs(ca, 7), batch_size=3, num_workers=2, persistent_workers=True)
    expected = collect(DataLoader(pairs(ca, 7), batch_size=3))
    first = collect(loader)
    workers = list(loader._iterator._workers)
    half = iter(loader)
    next(half)  # stop an epoch early: the next one must still start from the beginning
    assert collect(loader) == first == expected
    assert loader._iterator._workers == workers and all(w.is_alive() for w in workers)
    loader._iterator._shutdown_workers()


def test_spawned_workers():
    ds = pairs(ca, 8)
    expected = collect(DataLoader(ds, batch_size=3))
    assert collect(DataLoader(ds, batch_size=3, num_workers=2,
                              multiprocessing_context="spawn")) == expected


class Slow(cdata.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        time.sleep(1)
        return i


class Dies(cdata.Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        os._exit(3)  # a worker that crashes without a Python exception


def test_timeout_raises_as_torch():
    c = outcome(lambda: next(iter(DataLoader(Slow(), num_workers=1, timeout=0.2))))
    t = outcome(lambda: next(iter(tdata.DataLoader(Slow(), num_workers=1, timeout=0.2))))
    assert c == t == ("RuntimeError", "DataLoader timed out after 0.2 seconds")


def test_a_worker_that_dies_is_reported(monkeypatch):
    import cagrad.utils.data.multiprocess as mp_iter
    monkeypatch.setattr(mp_iter, "MP_STATUS_CHECK_INTERVAL", 0.2)  # notice it quickly
    it = iter(DataLoader(Dies(), num_workers=1))
    pid = it._workers[0].pid
    with pytest.raises(RuntimeError, match=rf"DataLoader worker \(pid\(s\) {pid}\) exited "
                                           r"unexpectedly"):
        next(it)


def test_persistent_workers_restart_an_iterable_dataset_each_epoch():
    loader = DataLoader(Count(0, 7), batch_size=2, num_workers=2, persistent_workers=True)
    expected = collect(tdata.DataLoader(TorchCount(0, 7), batch_size=2, num_workers=2))
    assert collect(loader) == expected
    assert collect(loader) == expected
    loader._iterator._shutdown_workers()


def test_in_order_false_returns_every_batch():
    got = collect(DataLoader(pairs(ca, 13), batch_size=2, num_workers=2, in_order=False))
    expected = collect(DataLoader(pairs(ca, 13), batch_size=2))
    assert sorted(got, key=lambda b: b[1]) == expected
