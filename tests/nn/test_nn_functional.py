"""minima.nn.functional: bad input is rejected with messages naming the op and the values; pooling geometry and
conv parameters match torch over random combinations (forward and backward); the registry covers every op."""
import numpy as np, pytest
import minima as mi
from minima.nn import functional as F
from hypothesis import given, settings, strategies as st, HealthCheck

T = lambda a, **kw: mi.Tensor(np.asarray(a), **kw)
x4 = T(np.ones((1, 3, 5, 5)))

# ---- bad input -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize('call, exc, msg', [
    (lambda: F.conv2d(T(np.ones((3, 5))), T(np.ones((2, 3, 3, 3)))), ValueError, 'conv2d: expected a 4-D input'),
    (lambda: F.conv2d(x4, T(np.ones((2, 3, 3)))), ValueError, 'conv2d: expected a 4-D weight'),
    (lambda: F.conv2d(x4, T(np.ones((2, 4, 3, 3)))), ValueError, 'input has 3 channels but weight (2, 4, 3, 3)'),
    (lambda: F.conv2d(T(np.ones((1, 4, 5, 5))), T(np.ones((3, 2, 3, 3))), groups=2), ValueError, 'C_out=3'),
    (lambda: F.conv2d(x4, T(np.ones((2, 3, 9, 9))), padding=1), ValueError, 'kernel 9x9 is larger than the padded input 7x7'),
    (lambda: F.conv2d(x4, T(np.ones((2, 3, 3, 3))), dilation=3), ValueError, 'kernel 7x7 is larger than the padded input 5x5'),
    (lambda: F.conv2d(x4, T(np.ones((2, 3, 3, 3))), stride=0), ValueError, 'stride must be >= 1'),
    (lambda: F.conv2d(x4, T(np.ones((2, 3, 3, 3))), padding=-1), ValueError, 'padding must be non-negative'),
    (lambda: F.conv2d(x4, T(np.ones((2, 3, 3, 3))), padding='same', stride=2), ValueError, "padding='same' needs stride 1"),
    (lambda: F.conv2d(x4, T(np.ones((2, 3, 3, 3))), T(np.ones(3))), ValueError, 'bias must have shape (2,)'),
    (lambda: F.conv2d(x4, T(np.ones((2, 3, 3, 3)), dtype='float64')), TypeError, 'float32 and weight dtype float64'),
    (lambda: F.conv(T(np.ones((1, 5, 5))), T(np.ones((3, 3, 3, 4)))), ValueError, 'conv: expected NHWC'),
    (lambda: F.max_pool2d(T(np.ones((5, 5))), 2), ValueError, 'max_pool2d: expected a 4-D input'),
    (lambda: F.max_pool2d(x4, 7), ValueError, 'max_pool2d: the (dilated) kernel 7 is larger than the padded input 5'),
    (lambda: F.max_pool2d(x4, 3, padding=2), ValueError, 'at most half'),
    (lambda: F.avg_pool2d(x4, 2, stride=0), ValueError, 'avg_pool2d: kernel_size, stride and dilation must be >= 1'),
    (lambda: F.avg_pool2d(x4, (2, 2, 2)), ValueError, 'kernel_size must be an int or a pair'),
    (lambda: F.take(T(np.ones(4)), T(np.array([0.5]))), TypeError, 'take: indices must be integers'),
    (lambda: F.take(T(np.ones(4)), [4]), IndexError, 'take: index 4 is out of range'),
    (lambda: F.take(T(np.ones(4)), [-5]), IndexError, 'take: index -5 is out of range'),
    (lambda: F.take(T(np.ones(4)), [0], axis=1), ValueError, 'take: axis 1 is out of range'),
    (lambda: F.embedding(T(np.array([1.0])), T(np.ones((3, 2)))), TypeError, 'embedding: indices must be integers'),
    (lambda: F.embedding(T(np.array([3])), T(np.ones((3, 2)))), IndexError, 'index 3 is out of range'),
    (lambda: F.embedding(T(np.array([0])), T(np.ones(3))), ValueError, 'embedding: weight must be 2-D'),
    (lambda: F.nll_loss(T(np.zeros((3, 4))), T(np.array([0, 1]))), ValueError, 'nll_loss: target shape (2,) does not match input shape (3, 4): expected (3,)'),
    (lambda: F.nll_loss(T(np.zeros((3, 4))), T(np.array([0., 1, 2]))), TypeError, 'nll_loss: target must hold integer class indices'),
    (lambda: F.nll_loss(T(np.zeros((3, 4))), T(np.array([0, 1, 4]))), IndexError, 'nll_loss: target 4 is out of bounds for 4 classes'),
    (lambda: F.nll_loss(T(np.zeros((3, 4))), T(np.array([0, -1, 2]))), IndexError, 'target -1 is out of bounds'),
    (lambda: F.nll_loss(T(np.zeros((3, 4))), T(np.array([0, 1, 2])), weight=T(np.ones(3))), ValueError, 'weight must have shape (4,)'),
    (lambda: F.nll_loss(T(np.zeros((3, 4))), T(np.array([0, 1, 2])), reduction='avg'), ValueError, "reduction must be 'none', 'mean' or 'sum'"),
    (lambda: F.cross_entropy(T(np.zeros((3, 4, 2))), T(np.array([0, 1, 2]))), ValueError, 'cross_entropy: target shape (3,)'),
    (lambda: F.cross_entropy(T(np.zeros((2, 4))), T(np.array([5, 1]))), IndexError, 'cross_entropy: target 5 is out of bounds'),
    (lambda: F.dropout(x4, 1.5), ValueError, 'dropout: p must be in [0, 1], got 1.5'),
    (lambda: F.checkpoint(lambda a: a, np.ones(3)), TypeError, 'checkpoint: argument 0 must be a Tensor'),
])
def test_bad_input(call, exc, msg):
    with pytest.raises(exc) as e: call()
    assert msg in str(e.value), str(e.value)

def test_ignored_targets_are_not_range_checked():
    lp = T(np.log(np.full((3, 4), 0.25)))
    assert abs(F.nll_loss(lp, T(np.array([-100, 1, -100]))).item() - np.log(4)) < 1e-6
    assert np.isnan(F.nll_loss(lp, T(np.array([-100, -100, -100]))).item()), "all ignored -> 0/0 = nan, as in torch"

# ---- random parameter combinations against torch -----------------------------------------------------------------
torch = pytest.importorskip('torch')
tF = torch.nn.functional

def _both(shape, rng, dtype='float64'):
    a = rng.standard_normal(shape)
    return mi.Tensor(a, dtype=dtype), torch.tensor(a, dtype=getattr(torch, dtype), requires_grad=True)

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 2), st.integers(1, 3), st.integers(3, 9), st.integers(3, 9), st.integers(1, 4), st.integers(1, 4),
       st.integers(1, 3), st.integers(1, 3), st.integers(0, 2), st.integers(1, 2), st.booleans(), st.booleans(), st.data())
def test_pooling_matches_torch(n, c, h, w, kh, kw, sh, sw, p, d, ceil, cip, data):
    p = min(p, kh // 2, kw // 2)
    if h + 2 * p < d * (kh - 1) + 1 or w + 2 * p < d * (kw - 1) + 1: return
    rng = np.random.default_rng(data.draw(st.integers(0, 10**6)))
    x, tx = _both((n, c, h, w), rng)
    kw_ = dict(kernel_size=(kh, kw), stride=(sh, sw), padding=p, ceil_mode=ceil)
    for ours, ref in [(F.max_pool2d(x, dilation=d, **kw_), tF.max_pool2d(tx, dilation=d, **kw_)),
                      (F.avg_pool2d(x, count_include_pad=cip, **kw_), tF.avg_pool2d(tx, count_include_pad=cip, **kw_))]:
        assert ours.shape == tuple(ref.shape), (ours.shape, ref.shape, kw_)
        np.testing.assert_allclose(ours.detach().numpy(), ref.detach().numpy(), rtol=1e-10, atol=1e-12)
        g = rng.standard_normal(ours.shape)
        x.grad = None; tx.grad = None
        ours.backward(mi.Tensor(g, dtype='float64')); ref.backward(torch.tensor(g))
        np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    _, idx = F.max_pool2d(x, dilation=d, return_indices=True, **kw_)
    _, tidx = tF.max_pool2d(tx, dilation=d, return_indices=True, **kw_)
    assert np.array_equal(idx.numpy(), tidx.numpy())

@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 2), st.sampled_from([1, 2, 3]), st.sampled_from([1, 2, 3]), st.integers(3, 8), st.integers(3, 8),
       st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(0, 3), st.integers(1, 2), st.booleans(), st.data())
def test_conv2d_matches_torch(n, cig, cog, h, w, kh, kw, s, p, d, bias, data):
    groups = data.draw(st.sampled_from([1, 2]))
    c, co = cig * groups, cog * groups
    if h + 2 * p < d * (kh - 1) + 1 or w + 2 * p < d * (kw - 1) + 1: return
    rng = np.random.default_rng(data.draw(st.integers(0, 10**6)))
    x, tx = _both((n, c, h, w), rng)
    wt, twt = _both((co, cig, kh, kw), rng)
    b, tb = _both((co,), rng) if bias else (None, None)
    y = F.conv2d(x, wt, b, stride=s, padding=p, dilation=d, groups=groups)
    ty = tF.conv2d(tx, twt, tb, stride=s, padding=p, dilation=d, groups=groups)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-10, atol=1e-10)
    g = rng.standard_normal(y.shape)
    y.backward(mi.Tensor(g, dtype='float64')); ty.backward(torch.tensor(g))
    for a, t in [(x, tx), (wt, twt)] + ([(b, tb)] if bias else []):
        np.testing.assert_allclose(a.grad.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-10)

def test_float32_stays_float32():
    x = mi.Tensor(np.ones((1, 2, 5, 5)))
    w = mi.Tensor(np.ones((3, 2, 3, 3)))
    for y in [F.conv2d(x, w), F.max_pool2d(x, 2), F.avg_pool2d(x, 2), F.dropout(x, 0.5, seed=0),
              F.cross_entropy(mi.Tensor(np.zeros((2, 3))), mi.Tensor(np.array([0, 1])))]:
        assert y.dtype == 'float32'

def test_dropout_generator_and_global_seed():
    x = mi.Tensor(np.ones((50,)))
    g1, g2 = np.random.default_rng(3), np.random.default_rng(3)
    assert np.array_equal(F.dropout(x, 0.5, generator=g1).detach().numpy(), F.dropout(x, 0.5, generator=g2).detach().numpy())
    init = pytest.importorskip('minima.init')
    init.manual_seed(5); a = F.dropout(x, 0.5).detach().numpy()
    init.manual_seed(5); b = F.dropout(x, 0.5).detach().numpy()
    assert np.array_equal(a, b)
    assert set(np.unique(a)) <= {0.0, 2.0}
    assert np.array_equal(F.dropout(x, 1.0).detach().numpy(), np.zeros(50))

def test_needle_conv_is_registered_in_ops():
    assert mi.ops.conv is F.conv
    y = mi.ops.conv(mi.Tensor(np.ones((2, 6, 6, 3))), mi.Tensor(np.ones((3, 3, 3, 4))), stride=2, padding=1)
    assert y.shape == (2, 3, 3, 4)

@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 5), st.integers(1, 5), st.lists(st.integers(1, 3), max_size=2), st.sampled_from(['none', 'mean', 'sum']),
       st.booleans(), st.sampled_from([-100, 0, 1]), st.floats(0, 1), st.data())
def test_losses_match_torch(n, c, extra, reduction, use_w, ignore_index, p_ignore, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 10**6)))
    shape, tshape = (n, c) + tuple(extra), (n,) + tuple(extra)
    t = rng.integers(0, c, tshape)
    t[rng.random(tshape) < p_ignore] = ignore_index
    if ignore_index >= c: t[t == ignore_index] = 0
    x, tx = _both(shape, rng)
    w = rng.uniform(0.5, 2, c) if use_w else None
    kw = dict(reduction=reduction, ignore_index=ignore_index)
    for ours_f, ref_f in [(F.cross_entropy, tF.cross_entropy), (F.nll_loss, tF.nll_loss)]:
        x.grad = None; tx.grad = None
        ours = ours_f(x, mi.Tensor(t), weight=None if w is None else mi.Tensor(w, dtype='float64'), **kw)
        ref = ref_f(tx, torch.tensor(t), weight=None if w is None else torch.tensor(w), **kw)
        np.testing.assert_allclose(ours.detach().numpy(), ref.detach().numpy(), rtol=1e-10, atol=1e-12, equal_nan=True)
        if np.all(np.isfinite(ref.detach().numpy())):
            g = rng.standard_normal(ours.shape)
            ours.backward(mi.Tensor(g, dtype='float64')); ref.backward(torch.tensor(g))
            np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)

def test_max_pool_propagates_nan_like_torch():
    x = np.arange(16.).reshape(1, 1, 4, 4); x[0, 0, 1, 0] = np.nan
    t, tt = mi.Tensor(x, dtype='float64'), torch.tensor(x, requires_grad=True)
    y, ty = F.max_pool2d(t, 2, return_indices=True), tF.max_pool2d(tt, 2, return_indices=True)
    np.testing.assert_array_equal(y[0].detach().numpy(), ty[0].detach().numpy())
    np.testing.assert_array_equal(y[1].numpy(), ty[1].numpy())
    y[0].sum().backward(); ty[0].sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), tt.grad.numpy())
