"""minima.utils.data as torch.utils.data (issue 34): batches that are not wrapped in 1-tuples (SW8), float64 kept
(SW9, SW16), RandomSampler's num_samples and lazy samplers (SW21), `minima.Generator` (M24), Sampler,
WeightedRandomSampler and SubsetRandomSampler (M25), IterableDataset, ConcatDataset and get_worker_info (M26),
and DataLoader's argument checks (reliability D5.3, U2)."""
import itertools
import numpy as np, pytest, torch
import torch.utils.data as tud

import minima as mi
import minima.utils.data as mud

def _np(b):
    if isinstance(b, (list, tuple)): return [_np(x) for x in b]
    if isinstance(b, dict): return {k: _np(v) for k, v in b.items()}
    return b.numpy() if hasattr(b, 'numpy') else b

class Arrays:   # a map-style dataset of single float32 arrays (plain class: both libraries accept it)
    def __len__(self): return 5
    def __getitem__(self, i): return np.full(3, i, 'float32')

def test_single_array_items_give_tensor_batches():
    "SW8: the batch is the Tensor itself, as torch's, not a 1-tuple."
    for U, T in ((mud, mi.Tensor), (tud, torch.Tensor)):
        b = next(iter(U.DataLoader(Arrays(), batch_size=2)))
        assert isinstance(b, T) and tuple(b.shape) == (2, 3)
        b = next(iter(U.DataLoader(list(range(5)), batch_size=2)))
        assert isinstance(b, T) and b.tolist() == [0, 1]
    for U, T in ((mud, mi.Tensor), (tud, torch.Tensor)):
        assert isinstance(next(iter(U.DataLoader(Arrays(), batch_size=2, collate_fn=lambda s: np.stack(s)))), T) \
            or U is tud   # torch leaves a collate_fn's numpy result alone (pin_memory off)
        assert next(iter(U.DataLoader(Arrays(), batch_size=2, collate_fn=lambda s: len(s)))) == 2

def test_float64_and_python_floats_stay_float64():
    "SW9, SW16."
    x = np.arange(12, dtype='float64').reshape(6, 2)
    for L, U in ((mi, mud), (torch, tud)):
        ds = U.TensorDataset(L.tensor(x, dtype=L.float64), L.tensor(np.arange(6)))
        assert str(ds[0][0].dtype).endswith('float64') and str(ds[0][1].dtype).endswith('int64')
        xb, yb = next(iter(U.DataLoader(ds, batch_size=4)))
        assert str(xb.dtype).endswith('float64') and str(yb.dtype).endswith('int64')
        for items, want in (([0.5, 1.5, 2.5], 'float64'), ([1, 2, 3], 'int64'), ([True, False], 'bool'),
                            ([np.float32(1), np.float32(2)], 'float32'), (list(x), 'float64')):
            b = next(iter(U.DataLoader(items, batch_size=2)))
            assert str(b.dtype).endswith(want), (L.__name__, items, b.dtype)

def test_random_sampler_num_samples_without_replacement():
    "SW21: 12 indices from 5 items: whole permutations one after another, as torch."
    for U in (mud, tud):
        s = U.RandomSampler(range(5), num_samples=12)
        idx = list(s)
        assert len(s) == len(idx) == 12
        assert sorted(idx[:5]) == sorted(idx[5:10]) == list(range(5)) and len(set(idx[10:])) == 2
        assert len(list(U.DataLoader(range(5), batch_size=5, sampler=s))) == 3

def test_huge_sampler_is_lazy():
    "A sampler of 10**10 indices is read batch by batch: nothing of that size is ever made."
    s = mud.RandomSampler(range(7), replacement=True, num_samples=int(1e10))
    dl = mud.DataLoader(list(range(7)), batch_size=4, sampler=s)
    assert len(dl) == 2_500_000_000
    batches = list(itertools.islice(iter(dl), 3))
    assert [tuple(b.shape) for b in batches] == [(4,)] * 3 and all(0 <= v < 7 for b in batches for v in b.tolist())
    w = mud.WeightedRandomSampler([0., 1., 3.], num_samples=10 ** 12)
    assert set(itertools.islice(iter(w), 1000)) <= {1, 2}

def test_generator_is_accepted_everywhere():
    "M24: `minima.Generator().manual_seed(42)`, torch's idiom, in random_split, DataLoader, samplers and init."
    g = lambda: mi.Generator().manual_seed(42)
    assert isinstance(g(), mi.Generator) and g().initial_seed() == 42
    a, b = mud.random_split(range(10), [7, 3], generator=g())
    c, d = mud.random_split(range(10), [7, 3], generator=g())
    assert list(a) == list(c) and sorted(list(a) + list(b)) == list(range(10))
    runs = [next(iter(mud.DataLoader(list(range(8)), batch_size=8, shuffle=True, generator=g()))).tolist()
            for _ in range(2)]
    assert runs[0] == runs[1] and sorted(runs[0]) == list(range(8))
    for S in (lambda: mud.RandomSampler(range(6), generator=g()), lambda: mud.SubsetRandomSampler([3, 5, 7], g()),
              lambda: mud.WeightedRandomSampler([1., 2., 3.], 5, generator=g())):
        assert list(S()) == list(S())
    w1, w2 = mi.empty(3, 4), mi.empty(3, 4)
    mi.nn.init.normal_(w1, generator=g()); mi.nn.init.normal_(w2, generator=g())
    assert np.array_equal(w1.numpy(), w2.numpy())

def test_samplers_of_torch():
    "M25: Sampler is the base; WeightedRandomSampler and SubsetRandomSampler draw as torch's do (in law)."
    for U in (mud, tud):
        assert all(issubclass(getattr(U, n), U.Sampler) for n in
                   ('SequentialSampler', 'RandomSampler', 'BatchSampler', 'WeightedRandomSampler', 'SubsetRandomSampler'))
        assert sorted(U.SubsetRandomSampler([4, 8, 9])) == [4, 8, 9]
        assert sorted(U.WeightedRandomSampler([0., 5., 0., 1.], 2, replacement=False)) == [1, 3]
    mi.manual_seed(0)
    counts = np.bincount(list(mud.WeightedRandomSampler([1., 0., 3.], 40000)), minlength=3) / 40000
    np.testing.assert_allclose(counts, [.25, 0., .75], atol=0.01)
    class Evens(mud.Sampler):
        def __init__(self, n): self.n = n
        def __iter__(self): return iter(range(0, self.n, 2))
        def __len__(self): return (self.n + 1) // 2
    assert next(iter(mud.DataLoader(list(range(10)), batch_size=5, sampler=Evens(10)))).tolist() == [0, 2, 4, 6, 8]
    with pytest.raises(RuntimeError): list(tud.WeightedRandomSampler([1., 1.], 3, replacement=False))
    with pytest.raises(ValueError, match='without replacement'): mud.WeightedRandomSampler([1., 1.], 3, replacement=False)
    for U in (mud, tud):
        with pytest.raises(ValueError): U.RandomSampler(range(3), num_samples=0)

class Stream:
    def __init__(self, U, n): self.U, self.n = U, n
    def make(self):
        n = self.n
        class S(self.U.IterableDataset):
            def __iter__(self): return iter(np.full(2, i, 'float32') for i in range(n))
        return S()

def test_iterable_and_concat_datasets():
    "M26."
    for U in (mud, tud):
        got = [_np(b).tolist() for b in U.DataLoader(Stream(U, 5).make(), batch_size=2)]
        assert got == [[[0, 0], [1, 1]], [[2, 2], [3, 3]], [[4, 4]]]
        assert len(list(U.DataLoader(Stream(U, 5).make(), batch_size=2, drop_last=True))) == 2
        with pytest.raises(ValueError): U.DataLoader(Stream(U, 5).make(), shuffle=True)
        c = U.ConcatDataset([list(range(3)), list(range(10, 12))])
        assert len(c) == 5 and [c[i] for i in range(5)] == [0, 1, 2, 10, 11] and c[-1] == 11 and c.cumulative_sizes == [3, 5]
        with pytest.raises(IndexError): c[5]
        assert U.get_worker_info() is None
    ds = mud.TensorDataset(mi.tensor([1., 2.])) + mud.TensorDataset(mi.tensor([3.]))
    assert isinstance(ds, mud.ConcatDataset) and float(ds[2][0]) == 3.

@pytest.mark.parametrize('kw', [dict(num_workers=-1), dict(timeout=-1), dict(batch_size=True),
                                dict(prefetch_factor=2), dict(batch_size=0)])
def test_dataloader_refuses_bad_arguments_like_torch(kw):
    "D5.3."
    with pytest.raises(ValueError): tud.DataLoader(list(range(4)), **kw)
    with pytest.raises(ValueError): mud.DataLoader(list(range(4)), **kw)

def test_batch_sampler_refuses_a_zero_batch_size():
    "U2: a ValueError naming batch_size, not a ZeroDivisionError."
    for U in (mud, tud):
        with pytest.raises(ValueError, match='batch_size'): U.BatchSampler(range(5), 0, False)
