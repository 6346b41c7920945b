"""The host paths (chapters 08, 08c, 15: one numpy pass over `NDArray.host_view()` on the
numpy device) answer as the composed ops they stand in for, which still run on a GPU, for 16-bit
floats and while `minima.compile` captures a step: the same values (bitwise where the arithmetic is
the same), the same indices, ties, NaN and infinities included, and the same saved state for the
backward."""

import numpy as np, pytest
import minima as mi
from minima.backend_ndarray.ndarray import NDArray
from minima.ops import attention as A, fused as FU, layers as LY
from minima.nn import functional as F


def _nd(a):
    return NDArray(a, dtype=a.dtype.name)


class _ComposedLayerNorm(FU.LayerNormOp):
    "The op with its composed forward (what a capture or a GPU without row kernels runs)."

    def compute(self, x, w, b):
        return FU._ln_compute(self, x, w, b)


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
@pytest.mark.parametrize('shape,ns', [((5, 8), (8,)), ((2, 3, 4, 6), (4, 6)), ((3, 16), (16,))])
def test_layer_norm_host_matches_composed(dtype, shape, ns):
    rng = np.random.default_rng(0)
    x, w, b = (_nd(rng.standard_normal(s).astype(dtype)) for s in (shape, ns, ns))
    host, comp = FU.LayerNormOp(1e-5), FU.LayerNormOp(1e-5)
    y, yc = host.compute(x, w, b), FU._ln_compute(comp, x, w, b)
    assert host.saved[0] == 'host' and y.dtype == dtype
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == 'float32' else dict(rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(y.numpy(), yc.numpy(), **tol)
    # the plain backward from the host's saved (x_hat, r) against the composed one,
    # with a random upstream gradient
    xt, wt, bt = (mi.Tensor(a.numpy(), dtype=dtype, requires_grad=True) for a in (x, w, b))
    g = rng.standard_normal(shape).astype(dtype)
    outs = []
    for op in (FU.LayerNormOp(1e-5), _ComposedLayerNorm(1e-5)):
        for t in (xt, wt, bt):
            t.grad = None
        op(xt, wt, bt).backward(mi.Tensor(g, dtype=dtype))
        outs.append([t.grad.numpy() for t in (xt, wt, bt)])
    for h, c in zip(*outs):
        np.testing.assert_allclose(h, c, **tol)


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
def test_linear_host_is_the_composed_path_bitwise(dtype):
    rng = np.random.default_rng(1)
    x, w, b = (_nd(rng.standard_normal(s).astype(dtype)) for s in ((2, 5, 7), (3, 7), (3,)))
    for transposed, wt in ((True, w), (False, _nd(w.numpy().T.copy()))):
        op = FU.LinearOp(transposed)
        for bias in (b, None):
            y, yc = op.compute(x, wt, bias), FU._linear_compute(op, x, wt, bias)
            assert y.shape == yc.shape == (2, 5, 3) and y.dtype == dtype
            np.testing.assert_array_equal(y.numpy(), yc.numpy())
    xs = _nd(rng.standard_normal((4, 7)).astype(dtype)).permute((1, 0))  # a strided input
    w2, op = _nd(rng.standard_normal((3, 4)).astype(dtype)), FU.LinearOp(True)
    np.testing.assert_array_equal(
        op.compute(xs, w2, None).numpy(), FU._linear_compute(op, xs, w2, None).numpy()
    )


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
@pytest.mark.parametrize('kind', ['none', 'causal', 'dead', 'keep'])
def test_sdpa_host_matches_composed(dtype, kind):
    rng = np.random.default_rng(2)
    q, k, v = (
        _nd(rng.standard_normal(s).astype(dtype))
        for s in ((2, 3, 4, 5), (2, 3, 6, 5), (2, 3, 6, 4))
    )
    mask = keep = None
    if kind == 'causal':
        mask = A.causal_mask(4, 6, dtype=dtype, offset=2)
    if kind == 'dead':  # query row 1 sees no key: torch's safe softmax gives it 0
        m = np.where(rng.random((4, 6)) > 0.3, 0.0, -np.inf)
        m[:, 0] = 0
        m[1] = -np.inf
        mask = _nd(m.astype(dtype))
    if kind == 'keep':
        keep = _nd((rng.random((2, 3, 4, 6)) > 0.3).astype(dtype) / 0.7)
    host, comp = (
        A.ScaledDotProductAttention(0.5, mask, keep),
        A.ScaledDotProductAttention(0.5, mask, keep),
    )
    y, yc = host.compute(q, k, v), A._sdpa_compute(comp, q, k, v, mask)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == 'float32' else dict(rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(y.numpy(), yc.numpy(), **tol)
    (p, live), (pc, livec) = host.saved, comp.saved  # what the backward reads
    np.testing.assert_allclose(p.numpy(), pc.numpy(), **tol)
    assert (live is None) == (livec is None) == (kind != 'dead')
    if live is not None:
        np.testing.assert_array_equal(live.numpy(), livec.numpy())


def _pool_inputs():
    rng = np.random.default_rng(3)
    ties = rng.integers(0, 3, (2, 3, 6, 6)).astype('float64')  # many equal values in a window
    inf = rng.standard_normal((1, 2, 6, 6))
    inf[0, 0, :2, :2] = -np.inf
    inf[0, 1, 2, 2] = np.inf
    nan = rng.standard_normal((1, 2, 6, 6))
    nan[0, 0, 0, 1] = np.inf
    nan[0, 0, 1, 1] = np.nan  # inf, then NaN
    nan[0, 1, 3, 3] = nan[0, 1, 3, 2] = np.nan
    return [ties, inf, nan]


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
@pytest.mark.parametrize(
    'kw',
    [
        dict(kernel_size=2),
        dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=3, stride=1, padding=1, dilation=2),
        dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), ceil_mode=True),
    ],
)
def test_max_pool_host_matches_composed(dtype, kw):
    import torch

    for x in _pool_inputs():
        xt = mi.Tensor(x, dtype=dtype, requires_grad=False)
        y, idx = F.max_pool2d(xt, return_indices=True, **kw)
        ty, tidx = torch.nn.functional.max_pool2d(
            torch.tensor(x.astype(dtype)), return_indices=True, **kw
        )
        np.testing.assert_array_equal(
            y.numpy(), ty.numpy()
        )  # NaN wins its window, after a +inf too
        k, s, p, d, o = LY._pool_setup(
            'max_pool2d',
            xt,
            kw['kernel_size'],
            kw.get('stride'),
            kw.get('padding', 0),
            kw.get('dilation', 1),
            kw.get('ceil_mode', False),
        )
        comp = LY.MaxPool(k, s, p, d, o)
        yc = LY._maxpool_compute(comp, xt.cached_data).numpy()
        N, C, H, W = x.shape
        local = comp.saved[0].numpy() - (np.arange(N * C) * (H * W)).reshape(N, C, 1, 1)
        num = ~np.isnan(
            y.numpy()
        )  # the composed op lets a +inf before a NaN win: compare where no NaN
        np.testing.assert_array_equal(y.numpy()[num], yc[num])
        np.testing.assert_array_equal(idx.numpy()[num], local[num])
        np.testing.assert_array_equal(
            idx.numpy()[num], tidx.numpy()[num]
        )  # ties: the first, as torch
        picked = np.take_along_axis(x.reshape(N, C, -1), idx.numpy().reshape(N, C, -1), 2)
        assert np.isnan(
            picked.reshape(y.shape)[~num]
        ).all()  # a NaN's own index (torch: the last NaN)


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
@pytest.mark.parametrize(
    'xs,ws,pad,dil,groups,in_extra',
    [((4, 16, 8, 8), (32, 16, 3, 3), ((1, 1), (1, 1)), (1, 1), 1, 0),
     ((2, 4, 9, 7), (6, 2, 3, 3), ((2, 2), (2, 2)), (2, 2), 2, 0),
     ((2, 6, 5, 7), (6, 2, 2, 3), ((0, 1), (1, 1)), (1, 1), 3, 0),  # even kernel, 'same'
     ((1, 3, 6, 6), (4, 3, 3, 3), ((0, 0), (0, 0)), (1, 1), 1, 1)],  # rows the conv never reaches
)
def test_conv_input_host_matches_composed(dtype, xs, ws, pad, dil, groups, in_extra):
    rng = np.random.default_rng(4)
    (N, _, H, W), (Co, _, kh, kw) = xs, ws
    oh = H + sum(pad[0]) - dil[0] * (kh - 1) - in_extra
    ow = W + sum(pad[1]) - dil[1] * (kw - 1) - in_extra
    g, w = (_nd(rng.standard_normal(s).astype(dtype)) for s in ((N, Co, oh, ow), ws))
    op = LY.ConvInput((H, W), (1, 1), pad, dil, groups)
    y, yc = op.compute(g, w), LY._conv_input_compute(op, g, w)
    assert y.shape == yc.shape == xs and y.dtype == dtype
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == 'float32' else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(y.numpy(), yc.numpy(), **tol)


class _ComposedBatchNorm(FU.BatchNormOp):
    "The op with its composed forward and backward."
    def compute(self, x, w, b): return FU._bn_compute(self, x, w, b)
    def gradient(self, g, node): return FU._bn_gradient(self, g, node)


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
@pytest.mark.parametrize('shape', [(6, 5), (4, 3, 5, 6), (2, 4, 7)])
def test_batch_norm_host_matches_composed(dtype, shape):
    rng = np.random.default_rng(5)
    C = shape[1]
    x, w, b = (rng.standard_normal(s).astype(dtype) for s in (shape, (C,), (C,)))
    g = rng.standard_normal(shape).astype(dtype)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == 'float32' else dict(rtol=1e-12, atol=1e-12)
    res = []
    for op in (FU.BatchNormOp(1e-5), _ComposedBatchNorm(1e-5)):
        ts = [mi.Tensor(a, dtype=dtype, requires_grad=True) for a in (x, w, b)]
        y = op(*ts)
        y.backward(mi.Tensor(g, dtype=dtype))
        stats = [y.detach().numpy(), op.mean.numpy(), op.var.numpy()]
        res.append(stats + [t.grad.numpy() for t in ts])
    for h, c in zip(*res): np.testing.assert_allclose(h, c, **tol)


@pytest.mark.parametrize('dtype', ['float32', 'float64'])
@pytest.mark.parametrize(
    'xs,ws,pad,dil,groups',
    [((4, 16, 8, 8), (32, 16, 3, 3), ((1, 1), (1, 1)), (1, 1), 1),
     ((2, 4, 9, 7), (6, 2, 3, 3), ((2, 2), (2, 2)), (2, 2), 2),
     ((2, 6, 5, 7), (6, 2, 2, 3), ((0, 1), (1, 1)), (1, 1), 3),
     ((1, 3, 6, 6), (4, 3, 1, 1), ((0, 0), (0, 0)), (1, 1), 1)],   # a 1x1 kernel: no wide columns
)
def test_conv_host_is_the_composed_path(dtype, xs, ws, pad, dil, groups):
    rng = np.random.default_rng(6)
    x, w = (_nd(rng.standard_normal(s).astype(dtype)) for s in (xs, ws))
    op = LY.Conv((1, 1), pad, dil, groups)
    y, yc = op.compute(x, w), LY._conv_compute(op, x, w)
    assert y.shape == yc.shape and y.dtype == dtype
    np.testing.assert_array_equal(y.numpy(), yc.numpy())


def test_layer_norm_fused_rows_path_matches_host(monkeypatch):
    "The GPU's row-kernel path (run on chapter 22's numpy reference kernels) answers the same."
    from minima.backend_ndarray.device import NumpyDevice
    rng = np.random.default_rng(7)
    shapes = ((3, 4, 16), (16,), (16,), (3, 4, 16))
    x, w, b, g = (rng.standard_normal(s).astype('float32') for s in shapes)
    res = []
    for rows in (False, True):
        monkeypatch.setattr(NumpyDevice, 'fused_rows', rows)
        ts = [mi.Tensor(a, requires_grad=True) for a in (x, w, b)]
        op = FU.LayerNormOp(1e-5)
        y = op(*ts)
        assert op.saved[0] == ('rows' if rows else 'host')
        y.backward(mi.Tensor(g))
        res.append([y.detach().numpy()] + [t.grad.numpy() for t in ts])
    for h, r in zip(*res): np.testing.assert_allclose(h, r, rtol=1e-5, atol=1e-5)
