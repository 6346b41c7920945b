"""The fourth torch audit's findings that had no test of their own (`../shared/audits/torch-audit-4.md`): N5 and M34.
(M7, M8, M22 and M37 are tested in test_torch_run.py and test_torch_surface.py, C8 in test_state_dict_numpy.py.)"""
import numpy as np
import pytest
import torch
import minima

LIBS = [minima, torch]

def test_n5_binary_cross_entropy_refuses_a_target_outside_0_1():
    for L in LIBS:
        F = L.nn.functional
        with pytest.raises((RuntimeError, ValueError), match='target|between 0 and 1'):
            F.binary_cross_entropy(L.tensor([.5]), L.tensor([1.5]))
        with pytest.raises((RuntimeError, ValueError)):
            F.binary_cross_entropy(L.tensor([.5, .5]), L.tensor([0., -0.1]))
    ok = [L.nn.functional.binary_cross_entropy(L.tensor([.3, .9]), L.tensor([0., 1.])).item() for L in LIBS]
    assert abs(ok[0] - ok[1]) < 1e-6
    with pytest.raises(ValueError, match=r'binary_cross_entropy: every target must be in \[0, 1\], got -0.1..0.0'):
        minima.nn.functional.binary_cross_entropy(minima.tensor([.5, .5]), minima.tensor([0., -0.1]))

@pytest.mark.parametrize('kw', [dict(scale_factor=-2), dict(scale_factor=0.1), dict(size=(0, 3))])
def test_n5_upsample_refuses_a_non_positive_output_size(kw):
    for L in LIBS:
        with pytest.raises((RuntimeError, ValueError)):
            L.nn.Upsample(**kw)(L.ones(1, 1, 2, 2))
    with pytest.raises(ValueError, match=r'interpolate: the output size .* must be positive'):
        minima.nn.functional.interpolate(minima.ones(1, 1, 2, 2), **kw)

def _both(f):
    return [np.asarray(f(L).detach().numpy()) for L in LIBS]

@pytest.mark.parametrize('dim,idx', [(1, [[0, 3], [1, 1], [2, 0]]), (0, [[1, 0, 2, 2]]), (1, [[3]]),
                                     (-1, [[2, 0, 1, 3]]), (None, [0, 11, 5])])
def test_m34_take_along_dim_matches_torch_values_and_gradient(dim, idx):
    x = np.random.default_rng(0).standard_normal((3, 4))
    g = np.random.default_rng(1)
    out = {}
    for L in LIBS:
        t = L.tensor(x, requires_grad=True)
        y = L.take_along_dim(t, L.tensor(idx), dim) if dim is not None else L.take_along_dim(t, L.tensor(idx))
        up = g.standard_normal(tuple(y.shape)); g = np.random.default_rng(1)
        (y * L.tensor(up)).sum().backward()
        out[L.__name__] = (y.detach().numpy().copy(), t.grad.numpy().copy())
    (ya, ga), (yb, gb) = out['minima'], out['torch']
    assert ya.shape == yb.shape and np.allclose(ya, yb, atol=1e-12) and np.allclose(ga, gb, atol=1e-12)

def test_m34_take_along_dim_method_and_bad_dims():
    x = minima.arange(6.).reshape(2, 3)
    assert x.take_along_dim(minima.tensor([[2], [0]]), 1).tolist() == [[2.], [3.]]
    with pytest.raises(ValueError, match='take_along_dim: indices have 1 dims but input has 2'):
        minima.take_along_dim(x, minima.tensor([0]), 1)

def test_m34_small_dtype_api():
    a, b = _both(lambda L: L.where(L.tensor([True, False]), 1.0, 0))
    assert np.array_equal(a, b) and a.dtype == b.dtype == np.float32
    a, b = _both(lambda L: L.softmax(L.tensor([1., 2., 3.]), 0, dtype=L.float64))
    assert a.dtype == b.dtype == np.float64 and np.allclose(a, b)
    a, b = _both(lambda L: L.tensor([1.5, -2.]).type(L.float64))
    assert a.dtype == b.dtype == np.float64 and np.array_equal(a, b)
    assert minima.tensor([1.5]).type() == torch.tensor([1.5]).type() == 'torch.FloatTensor'
    a, b = _both(lambda L: (L.ones(3, dtype=L.bfloat16) * 3).float())
    assert np.array_equal(a, b)
