"""The backend contract, checked primitive by primitive against numpy on every device.
A new device passes this file unchanged (it is parametrized over `conftest.DEVICES`)."""
import math
import numpy as np, pytest
from minima.backend_ndarray import (BackendDevice, EWISE_OPS, SCALAR_OPS, UNARY_OPS, DTYPES, get_device, NDArray)
from conftest import DEVICES

pytestmark = pytest.mark.parametrize('dev', DEVICES)

def put(d, a):
    a = np.ascontiguousarray(a)
    h = d.alloc(a.size, a.dtype.name); d.from_numpy(a.reshape(-1), h); return h

def sample(rng, shape, dtype):
    if dtype == 'bool': return rng.random(shape) > 0.5
    if dtype == 'uint8': return rng.integers(0, 11, shape).astype('uint8')
    if dtype.startswith('int'): return rng.integers(-5, 6, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)

def held(d, dtype):
    "Skip a dtype the device does not hold (test_unsupported_dtypes checks that it says so clearly)."
    if dtype not in d.dtypes: pytest.skip(f'{d.name} holds {", ".join(d.dtypes)}, not {dtype}')

NUMERIC = [t for t in DTYPES if t != 'bool']
def _as_torch(torch, a):
    "torch.as_tensor, which cannot read numpy's bfloat16 (ml_dtypes): that one goes through float32 (exact)."
    a = np.asarray(a)
    return torch.as_tensor(a.astype('float32')).to(torch.bfloat16) if a.dtype.name == 'bfloat16' else torch.as_tensor(a)
def _rtol(dtype): return {'float16': 2e-3, 'bfloat16': 1.6e-2, 'float32': 1e-6}.get(dtype, 1e-12)

def test_unsupported_dtypes(dev):
    "Every dtype is either held (round-trips) or refused at allocation with a TypeError naming device and dtype."
    d = get_device(dev)
    assert set(d.dtypes) <= set(DTYPES) and {'float32', 'float64', 'int64', 'bool'} <= set(d.dtypes)
    for dtype in DTYPES:
        if dtype in d.dtypes: continue
        with pytest.raises(TypeError, match=f'{d.name}: dtype {dtype} is not supported'): d.alloc(4, dtype)
        with pytest.raises(TypeError, match=f'dtype {dtype} is not supported'): NDArray(np.zeros(4, dtype), device=dev)

def test_contract_complete(dev):
    d = get_device(dev)
    assert isinstance(d, BackendDevice) and d.enabled() and d.name in ('cpu', 'cuda')
    missing = [m for m in BackendDevice.__abstractmethods__ if getattr(type(d), m) is getattr(BackendDevice, m)]
    assert not missing

@pytest.mark.parametrize('dtype', DTYPES)
def test_roundtrip_fill_cast(dev, dtype, rng):
    d = get_device(dev)
    held(d, dtype)
    x = sample(rng, (3, 5), dtype)
    h = put(d, x)
    assert d.handle_dtype(h) == dtype and d.handle_size(h) == 15
    assert np.array_equal(d.to_numpy(h, (3, 5), (5, 1), 0), x)
    d.fill(h, 1); assert np.array_equal(d.to_numpy(h, (15,), (1,), 0), np.ones(15, dtype))
    for other in d.dtypes:
        # a negative float into an unsigned integer is undefined in C: numpy on x86 wraps (-1.3 -> 255), a GPU and
        # numpy on arm64 saturate (-> 0). The contract promises only what is defined: cast |x| there
        xo = np.abs(x) if other == 'uint8' and dtype in ('float16', 'float32', 'float64', 'bfloat16') else x
        h = put(d, xo); o = d.alloc(15, other); d.cast(h, o)
        assert np.array_equal(d.to_numpy(o, (3, 5), (5, 1), 0), xo.astype(other))

VIEWS = [  # (base shape, index) -> a strided view exercised through NDArray
    ((4, 5), (slice(None), slice(None, None, 2))),
    ((4, 5), (slice(None, None, -1), slice(4, 0, -3))),
    ((2, 3, 4), (1, slice(None), slice(None, None, -1))),
    ((2, 3, 4), (Ellipsis, 2)),
    ((3, 1, 4, 2, 1, 2, 3, 2, 2), (slice(None), 0, slice(1, 3))),   # more than 8 dimensions
]

@pytest.mark.parametrize('dtype', NUMERIC)
@pytest.mark.parametrize('shape,idx', VIEWS)
def test_compact_and_setitem(dev, dtype, shape, idx, rng):
    held(get_device(dev), dtype)
    x = sample(rng, shape, dtype)
    a = NDArray(x, device=dev, dtype=dtype)
    v = a[idx]
    assert np.array_equal(v.compact().numpy(), x[idx])
    t = a.permute(tuple(reversed(range(a.ndim))))
    assert np.array_equal(t.compact().numpy(), x.transpose())
    y = sample(rng, x[idx].shape, dtype)
    a[idx] = NDArray(y, device=dev, dtype=dtype); x[idx] = y
    assert np.array_equal(a.numpy(), x)
    a[idx] = 3; x[idx] = 3
    assert np.array_equal(a.numpy(), x)

def test_broadcast_and_flip_views(dev, rng):
    x = rng.standard_normal((3, 1, 4)).astype('float32')
    a = NDArray(x, device=dev)
    assert np.array_equal(a.broadcast_to((2, 3, 5, 4)).compact().numpy(), np.broadcast_to(x, (2, 3, 5, 4)))
    assert np.array_equal(a.flip((0, 2)).compact().numpy(), x[::-1, :, ::-1])

def _ref(op, a, b):
    f = dict(add=np.add, sub=np.subtract, mul=np.multiply, div=np.divide, pow=np.power, maximum=np.maximum,
             minimum=np.minimum, eq=np.equal, ne=np.not_equal, lt=np.less, le=np.less_equal, gt=np.greater,
             ge=np.greater_equal, rsub=lambda a, b: b - a, rdiv=lambda a, b: b / a, rpow=lambda a, b: np.power(b, a))[op]
    with np.errstate(all='ignore'): return f(a, b)

@pytest.mark.parametrize('dtype', NUMERIC)
@pytest.mark.parametrize('op', EWISE_OPS)
def test_ewise(dev, op, dtype, rng):
    d = get_device(dev)
    held(d, dtype)
    x, y = sample(rng, (37,), dtype), sample(rng, (37,), dtype)
    if op == 'div' and dtype[0] in 'iu': pytest.skip('integer division is done in float32 by NDArray, never on int buffers')
    if op == 'pow':
        # (ml_dtypes' bfloat16 + 0.5 is float32: cast back, the device takes operands of one dtype)
        x = (np.abs(x) + (1 if dtype[0] in 'iu' else 0.5)).astype(dtype); y = np.abs(y) % 3
    if op == 'div': y = np.where(np.abs(y) < 0.5, 1.0, y).astype(dtype)
    out_dt = 'bool' if op in ('eq', 'ne', 'lt', 'le', 'gt', 'ge') else dtype
    o = d.alloc(37, out_dt); d.ewise(op, put(d, x), put(d, y), o)
    got, want = d.to_numpy(o, (37,), (1,), 0), _ref(op, x, y).astype(out_dt)
    np.testing.assert_allclose(got, want, rtol=_rtol(dtype))

@pytest.mark.parametrize('dtype', ['float32', 'float64', 'float16'])
@pytest.mark.parametrize('op', SCALAR_OPS)
def test_scalar(dev, op, dtype, rng):
    d = get_device(dev)
    held(d, dtype)
    x = sample(rng, (29,), dtype)
    if op in ('pow', 'rdiv'): x = np.abs(x) + 0.5
    s = 1.5
    out_dt = 'bool' if op in ('eq', 'ne', 'lt', 'le', 'gt', 'ge') else dtype
    o = d.alloc(29, out_dt); d.scalar(op, put(d, x), s, o)
    np.testing.assert_allclose(d.to_numpy(o, (29,), (1,), 0), _ref(op, x, np.asarray(s, dtype)).astype(out_dt), rtol=_rtol(dtype) * 4)
    assert d.handle_dtype(o) == out_dt

@pytest.mark.parametrize('dtype', ['float32', 'float64'])
@pytest.mark.parametrize('op', UNARY_OPS)
def test_unary(dev, op, dtype, rng):
    d = get_device(dev)
    x = sample(rng, (41,), dtype)
    if op in ('log', 'sqrt'): x = np.abs(x) + 0.1
    if op == 'round': x[:6] = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5]   # ties go to the even neighbour
    o = d.alloc(41, dtype); d.unary(op, put(d, x), o)
    f = dict(neg=np.negative, exp=np.exp, log=np.log, sqrt=np.sqrt, sin=np.sin, cos=np.cos, tanh=np.tanh, abs=np.abs,
             sign=np.sign, round=np.rint, floor=np.floor, erf=np.vectorize(math.erf))[op]
    np.testing.assert_allclose(d.to_numpy(o, (41,), (1,), 0), f(x), rtol=2e-6 if dtype == 'float32' else 1e-12, atol=1e-7)

def test_where(dev, rng):
    d = get_device(dev)
    c, a, b = rng.random(50) > 0.5, rng.standard_normal(50).astype('float32'), rng.standard_normal(50).astype('float32')
    o = d.alloc(50, 'float32'); d.where(put(d, c), put(d, a), put(d, b), o)
    assert np.array_equal(d.to_numpy(o, (50,), (1,), 0), np.where(c, a, b))

@pytest.mark.parametrize('dtype', ['float32', 'float64', 'int64'])
@pytest.mark.parametrize('outer,r', [(1, 1), (7, 13), (3, 1000), (1, 70000), (300, 5)])
def test_reductions(dev, dtype, outer, r, rng):
    d = get_device(dev)
    x = sample(rng, (outer, r), dtype)
    h = put(d, x)
    o = d.alloc(outer, dtype); d.reduce_sum(h, o, r)
    np.testing.assert_allclose(d.to_numpy(o, (outer,), (1,), 0), x.sum(1), rtol=1e-4 if dtype == 'float32' else 1e-10, atol=1e-3)
    d.reduce_max(h, o, r)
    assert np.array_equal(d.to_numpy(o, (outer,), (1,), 0), x.max(1))

@pytest.mark.parametrize('dtype', ['float32', 'float64'])
@pytest.mark.parametrize('batch,m,n,p', [(1, 1, 1, 1), (1, 5, 7, 3), (3, 17, 33, 9), (2, 64, 64, 64), (1, 129, 65, 31)])
def test_matmul(dev, dtype, batch, m, n, p, rng):
    d = get_device(dev)
    a, b = sample(rng, (batch, m, n), dtype), sample(rng, (batch, n, p), dtype)
    o = d.alloc(batch * m * p, dtype); d.matmul(put(d, a), put(d, b), o, batch, m, n, p)
    np.testing.assert_allclose(d.to_numpy(o, (batch, m, p), (m * p, p, 1), 0), a @ b, rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize('dtype', ['float32', 'float64'])
def test_gather_scatter_add(dev, dtype, rng):
    d = get_device(dev)
    outer, n, inner = 3, 6, 4
    x = sample(rng, (outer, n, inner), dtype)
    idx = np.array([5, 0, 0, 2, 5, 5], dtype='int64')
    o = d.alloc(outer * len(idx) * inner, dtype)
    d.gather(put(d, x), put(d, idx), o, outer, n, inner, len(idx))
    assert np.array_equal(d.to_numpy(o, (outer, len(idx), inner), (len(idx) * inner, inner, 1), 0), x[:, idx])
    src = sample(rng, (outer, len(idx), inner), dtype)
    acc = d.alloc(outer * n * inner, dtype); d.fill(acc, 0)
    d.scatter_add(put(d, src), put(d, idx), acc, outer, n, inner, len(idx))
    want = np.zeros((outer, n, inner), dtype); np.add.at(want, (slice(None), idx), src)
    np.testing.assert_allclose(d.to_numpy(acc, (outer, n, inner), (n * inner, inner, 1), 0), want, rtol=1e-6)

@pytest.mark.parametrize('op', ['add', 'sub', 'mul', 'div', 'maximum', 'lt'])
def test_ewise_strided_fast_path(dev, op, rng):
    "The optional strided fast path (a device's own, or the default that gathers first) agrees with numpy."
    d = get_device(dev)
    x, y = rng.standard_normal((4, 6)).astype('float32'), rng.standard_normal((6,)).astype('float32') + 3
    ha, hb = put(d, x), put(d, y)
    shape = (3, 4, 6)
    out_dt = 'bool' if op == 'lt' else 'float32'
    o = d.alloc(72, out_dt)
    # a: x transposed-and-broadcast view (stride 0 on the new axis), b: y broadcast along two axes
    d.ewise_strided(op, ha, (0, 6, 1), 0, hb, (0, 0, 1), 0, o, shape)
    want = _ref(op, np.broadcast_to(x, shape), np.broadcast_to(y, shape)).astype(out_dt)
    np.testing.assert_allclose(d.to_numpy(o, shape, (24, 6, 1), 0), want, rtol=1e-6)

@pytest.mark.parametrize('kind', ['sum', 'max'])
def test_reduce_strided_fast_path(dev, kind, rng):
    d = get_device(dev)
    x = rng.standard_normal((5, 3, 4)).astype('float64')
    h = put(d, x)
    # reduce axes 0 and 2 of x: the view permutes them last -> shape (3, 5, 4), strides (4, 12, 1)
    o = d.alloc(3, 'float64')
    d.reduce_strided(kind, h, (3, 5, 4), (4, 12, 1), 0, o, 2)
    want = x.sum((0, 2)) if kind == 'sum' else x.max((0, 2))
    np.testing.assert_allclose(d.to_numpy(o, (3,), (1,), 0), want, rtol=1e-12)

def test_matmul_strided_fast_path(dev, rng):
    d = get_device(dev)
    x, y = rng.standard_normal((7, 5)).astype('float32'), rng.standard_normal((6, 7)).astype('float32')
    o = d.alloc(5 * 6, 'float32')
    # x.T (5, 7) has strides (1, 5); y.T (7, 6) has strides (1, 7)
    d.matmul_strided(put(d, x), (1, 5), 0, put(d, y), (1, 7), 0, o, 5, 7, 6)
    np.testing.assert_allclose(d.to_numpy(o, (5, 6), (6, 1), 0), x.T @ y.T, rtol=1e-5, atol=1e-5)

@pytest.mark.parametrize('dtype', ['int32', 'int16', 'int8', 'uint8', 'float16'])
def test_small_dtypes_scalar_wrap_and_max(dev, dtype, rng):
    "Integer scalars outside the dtype's range wrap (as torch), and reduce_max works on every held dtype."
    d = get_device(dev)
    held(d, dtype)
    x = sample(rng, (6, 9), dtype)
    h = put(d, x)
    o = d.alloc(6, dtype); d.reduce_max(h, o, 9)
    assert np.array_equal(d.to_numpy(o, (6,), (1,), 0), x.max(1))
    if dtype[0] in 'iu':
        o = d.alloc(54, dtype); d.scalar('add', h, -1, o)
        assert np.array_equal(d.to_numpy(o, (54,), (1,), 0), (x.astype('int64') - 1).astype(dtype).reshape(-1))

def test_promotion_on_device(dev, rng):
    "NDArray arithmetic and comparisons on the device give torch's result dtype and value for every held pair."
    torch = pytest.importorskip('torch')
    d = get_device(dev)
    for da in d.dtypes:
        for db in d.dtypes:
            for zero_d in (False, True):
                x, y = sample(rng, (5,), da), sample(rng, (5,), db)
                if zero_d: y = y[0]
                a, b = NDArray(x, device=dev, dtype=da), NDArray(np.asarray(y), device=dev, dtype=db)
                ta, tb = _as_torch(torch, x), _as_torch(torch, y)
                for f in (lambda p, q: p * q, lambda p, q: p < q, lambda p, q: p.maximum(q) if hasattr(p, 'maximum') and not
                          isinstance(p, torch.Tensor) else torch.maximum(p, q)):
                    got, want = f(a, b), f(ta, tb)
                    assert got.dtype == str(want.dtype).replace('torch.', ''), (da, db, zero_d)
                    w = (want.float() if want.dtype == torch.bfloat16 else want).numpy()
                    np.testing.assert_allclose(got.numpy().astype('float64'), w.astype('float64'), rtol=_rtol(got.dtype))

# ---- the optional fused row methods (chapter 22): every device that has them, against torch in float64
ROW_DTYPES = ['float32', 'float16', 'bfloat16']
ROW_TOL = {'float32': 2e-5, 'float16': 4e-3, 'bfloat16': 3e-2}
ROW_SHAPES = [(1, 1), (5, 7), (9, 40), (3, 1500)]   # a warp per row (up to 1024 columns), a block per row beyond

def rows_dev(dev):
    d = get_device(dev)
    if not hasattr(d, 'softmax_rows'): pytest.skip(f'{d.name} has no fused row methods')
    return d

def rows_get(d, h, shape, dtype='float32'):
    return d.to_numpy(h, shape, tuple(int(np.prod(shape[i + 1:])) for i in range(len(shape))), 0).astype('float64')

def close(got, want, dtype, what):
    tol = ROW_TOL[dtype] * max(1.0, float(np.abs(want).max()) if want.size else 1.0)
    np.testing.assert_allclose(got, want, rtol=ROW_TOL[dtype], atol=tol, err_msg=what)

@pytest.mark.parametrize('dtype', ROW_DTYPES)
@pytest.mark.parametrize('rows,cols', ROW_SHAPES)
def test_fused_softmax_rows(dev, dtype, rows, cols, rng):
    torch = pytest.importorskip('torch')
    d = rows_dev(dev)
    x = (3 * rng.standard_normal((rows, cols))).astype(dtype)
    g = rng.standard_normal((rows, cols)).astype(dtype)
    for log in (False, True):
        o = d.alloc(rows * cols, dtype)
        d.softmax_rows(put(d, x), o, rows, cols, log)
        tx = torch.tensor(x.astype('float64'))
        want = (torch.log_softmax if log else torch.softmax)(tx, -1).numpy()
        close(rows_get(d, o, (rows, cols)), want, dtype, f'forward log={log}')
        # backward from the device's own output y: dx = g - exp(y) sum(g), or y (g - sum(g y))
        y, g64 = rows_get(d, o, (rows, cols)), g.astype('float64')
        want = g64 - np.exp(y) * g64.sum(1, keepdims=True) if log else y * (g64 - (g64 * y).sum(1, keepdims=True))
        dx = d.alloc(rows * cols, dtype)
        d.softmax_rows_backward(o, put(d, g), dx, rows, cols, log)
        close(rows_get(d, dx, (rows, cols)), want, dtype, f'backward log={log}')

def test_fused_softmax_rows_extremes(dev):
    "Rows of -inf with one finite value, huge values (no overflow), and NaN (the row becomes NaN, as in torch)."
    d = rows_dev(dev)
    x = np.array([[-np.inf, 0.0, -np.inf, -np.inf], [1e30, 1e30, -1e30, 0.0], [0.0, np.nan, 1.0, 2.0]], 'float32')
    o = d.alloc(12, 'float32'); d.softmax_rows(put(d, x), o, 3, 4)
    got = rows_get(d, o, (3, 4))
    assert np.array_equal(got[0], [0, 1, 0, 0]) and np.allclose(got[1], [0.5, 0.5, 0, 0]) and np.isnan(got[2]).all()

@pytest.mark.parametrize('dtype', ROW_DTYPES)
@pytest.mark.parametrize('rows,cols', ROW_SHAPES)
def test_fused_cross_entropy_rows(dev, dtype, rows, cols, rng):
    torch = pytest.importorskip('torch')
    d = rows_dev(dev)
    z = (2 * rng.standard_normal((rows, cols))).astype(dtype)
    lab = rng.integers(0, cols, rows).astype('int64')
    loss, bad = d.alloc(rows, dtype), d.alloc(1, 'int32')
    d.cross_entropy_rows(put(d, z), put(d, lab), loss, bad, rows, cols)
    tz = torch.tensor(z.astype('float64'), requires_grad=True)
    tl = torch.nn.functional.cross_entropy(tz, torch.tensor(lab), reduction='none')
    close(rows_get(d, loss, (rows,)), tl.detach().numpy(), dtype, 'loss')
    assert d.to_numpy(bad, (1,), (1,), 0)[0] == 0
    gval = np.array([rng.standard_normal()], dtype)
    tl.sum().backward()
    want = tz.grad.numpy() * float(gval[0]) / rows
    dz = d.alloc(rows * cols, dtype)
    d.cross_entropy_rows_backward(put(d, z), put(d, lab), put(d, gval), dz, rows, cols, 1.0 / rows)
    close(rows_get(d, dz, (rows, cols)), want, dtype, 'backward')

def test_fused_cross_entropy_bad_labels(dev):
    d = rows_dev(dev)
    z = np.zeros((4, 3), 'float32'); lab = np.array([0, 3, -1, 2], 'int64')
    loss, bad = d.alloc(4, 'float32'), d.alloc(1, 'int32')
    d.cross_entropy_rows(put(d, z), put(d, lab), loss, bad, 4, 3)
    got = rows_get(d, loss, (4,))
    assert d.to_numpy(bad, (1,), (1,), 0)[0] == 2 and np.isnan(got[1:3]).all() and np.allclose(got[[0, 3]], np.log(3))

@pytest.mark.parametrize('dtype', ROW_DTYPES)
@pytest.mark.parametrize('rows,cols', ROW_SHAPES + [(300, 5)])
def test_fused_layer_norm_rows(dev, dtype, rows, cols, rng):
    torch = pytest.importorskip('torch')
    d = rows_dev(dev)
    x = (rng.standard_normal((rows, cols)) * 2 + 1).astype(dtype)
    w, b = rng.standard_normal(cols).astype(dtype), rng.standard_normal(cols).astype(dtype)
    g = rng.standard_normal((rows, cols)).astype(dtype)
    y, mean, rstd = d.alloc(rows * cols, dtype), d.alloc(rows, 'float32'), d.alloc(rows, 'float32')
    X, W = put(d, x), put(d, w)
    d.layer_norm_rows(X, W, put(d, b), y, mean, rstd, rows, cols, 1e-5)
    tx, tw, tb = (torch.tensor(a.astype('float64'), requires_grad=True) for a in (x, w, b))
    ty = torch.nn.functional.layer_norm(tx, (cols,), tw, tb, 1e-5)
    close(rows_get(d, y, (rows, cols)), ty.detach().numpy(), dtype, 'forward')
    ty.backward(torch.tensor(g.astype('float64')))
    dx, dw, db = d.alloc(rows * cols, dtype), d.alloc(cols, dtype), d.alloc(cols, dtype)
    d.layer_norm_rows_backward(put(d, g), X, W, mean, rstd, dx, dw, db, rows, cols)
    # a row of one element (or a constant row) has xhat = 0 and rstd = 1/sqrt(eps): dx is 0 up to float32 rounding
    close(rows_get(d, dx, (rows, cols)), tx.grad.numpy(), dtype, 'dx')
    close(rows_get(d, dw, (cols,)), tw.grad.numpy(), dtype, 'dw')
    close(rows_get(d, db, (cols,)), tb.grad.numpy(), dtype, 'db')

def test_fused_rows_refuse_other_dtypes(dev):
    d = rows_dev(dev)
    h = put(d, np.zeros((2, 3)))
    with pytest.raises(TypeError, match='softmax_rows: the fused row kernels take float32, float16 or bfloat16, got float64'):
        d.softmax_rows(h, d.alloc(6, 'float64'), 2, 3)
