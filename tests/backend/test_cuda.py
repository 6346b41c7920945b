"""The CUDA device beyond the shared conformance suite: every kernel variant, every dtype, views past the inline
dimension limit, multi-pass reductions, all matmul algorithms, errors. Without a GPU the GPU tests are skipped with
the probe's reason, and the clean-degradation tests run."""
import itertools, re
from pathlib import Path
import numpy as np, pytest
import minima
from minima.backend_ndarray import NDArray, EWISE_OPS, SCALAR_OPS, UNARY_OPS, cpu
from minima.backend_ndarray.cuda import cuda_device, kernel_source, KERNEL_DIR, MATMUL_ALGOS, CudaDevice
CUDA_DTYPES = CudaDevice.dtypes   # the kernels' dtypes; the others are refused (tests/backend/test_device_conformance.py)

DEV = cuda_device()
ENABLED = DEV.enabled()
# tools/cuda_emu runs these kernels on the CPU, thousands of times slower: keep its cases small
EMULATED = ENABLED and 'emulation' in DEV.device_info()['name']
gpu = pytest.mark.skipif(not ENABLED, reason=f'CUDA device not available: {DEV.why_disabled()}')
CPU = cpu()

FLOATS = ('float32', 'float64', 'float16', 'bfloat16')
INTS = ('int64', 'int32', 'int16', 'int8', 'uint8')
# float16 and bfloat16 kernels compute in float32 and round once, as numpy (and ml_dtypes) do: they agree with the
# numpy device to the last bit for + - * /, and within one unit in the last place (2**-10, 2**-7) for exp, pow, ...
RTOL = {'float32': 1e-6, 'float16': 2.0**-10, 'bfloat16': 2.0**-7}

def sample(rng, shape, dtype):
    if dtype == 'bool': return rng.random(shape) > 0.5
    if dtype == 'uint8': return rng.integers(0, 11, shape).astype('uint8')
    if dtype in INTS: return rng.integers(-5, 6, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)

def put(d, a):
    a = np.ascontiguousarray(a)
    h = d.alloc(a.size, a.dtype.name); d.from_numpy(a.reshape(-1), h); return h

def get(d, h, n): return d.to_numpy(h, (n,), (1,), 0)

# ---- without a GPU: clean degradation

def test_buffers_are_not_freed_while_the_interpreter_finalizes():
    """A device array that lives until exit (in a module-level cache) must not call into the CUDA runtime while the
    interpreter finalizes: the runtime, or torch.profiler's CUPTI hooked into it, may be gone (`bench/cuda.py
    --profile` crashed at exit). One freed at run time still frees."""
    import subprocess, sys
    code = """if True:
        import os, sys
        from minima.backend_ndarray.cuda import CudaBuffer
        def free(p, w=os.write, fin=sys.is_finalizing): w(1, b'finalizing %d\\n' % p if fin() else b'freed %d\\n' % p)
        keep = CudaBuffer(1, 4, 'float32', free)   # a module global: it dies while the interpreter finalizes
        CudaBuffer(2, 4, 'float32', free)          # garbage at once: freed
    """
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split('\n')[:-1] == ['freed 2'], r.stdout

def test_probe_never_raises():
    assert isinstance(DEV.enabled(), bool) and minima.cuda() is DEV and DEV.name == 'cuda'
    assert isinstance(DEV, CudaDevice)
    if not ENABLED: assert DEV.why_disabled()

@pytest.mark.skipif(ENABLED, reason='checks the disabled path; this machine has a working GPU')
def test_disabled_device_raises_clearly():
    with pytest.raises(RuntimeError, match='not available'): DEV.alloc(4, 'float32')
    with pytest.raises(RuntimeError, match='not available'): NDArray([1., 2.], device='cuda')
    assert minima.cpu() in minima.all_devices() and DEV not in minima.all_devices()

def test_kernel_sources_are_package_data():
    setup = (Path(__file__).parents[2] / 'setup.py').read_text()
    assert "backend_ndarray/*.cu" in setup and "backend_ndarray/*.cuh" in setup
    for f in ('cuda_kernels.cu', 'cuda_common.cuh'): assert (KERNEL_DIR / f).exists()
    text = kernel_source()
    sections = re.findall(r'^// ==== (\S+) ====$', text, re.M)
    assert {'strided', 'elementwise', 'reduce', 'matmul_naive', 'matmul_smem', 'matmul_reg', 'matmul_int8',
            'indexing'} <= set(sections)
    for s in sections: assert kernel_source(s)
    with pytest.raises(KeyError): kernel_source('no_such_section')

# ---- on a GPU

@gpu
@pytest.mark.parametrize('dtype', CUDA_DTYPES)
def test_views_compact_and_setitem(dtype):
    rng = np.random.default_rng(0)
    cases = [((6, 7), (slice(None, None, -1), slice(1, None, 3))),
             ((4, 5, 6), (slice(None), None, slice(None, None, -2), 3)),
             ((2,) * 14, (Ellipsis, slice(None, None, -1))),        # 14 dims: past the 12 passed by value
             ((1000, 300), (slice(3, None, 7), slice(None, None, -1)))]
    for shape, idx in cases:
        x = sample(rng, shape, dtype)
        a = NDArray(x, device='cuda', dtype=dtype)
        assert np.array_equal(a[idx].numpy(), x[idx])
        perm = tuple(rng.permutation(a.ndim))
        assert np.array_equal(a.permute(perm).compact().numpy(), x.transpose(perm))
        y = sample(rng, x[idx].shape, dtype)
        a[idx] = NDArray(y, device='cuda', dtype=dtype); x[idx] = y
        assert np.array_equal(a.numpy(), x)
        a[idx] = True if dtype == 'bool' else 7; x[idx] = True if dtype == 'bool' else 7
        assert np.array_equal(a.numpy(), x)
    b = NDArray(sample(rng, (3, 1, 4), dtype), device='cuda', dtype=dtype)
    assert np.array_equal(b.broadcast_to((2, 3, 5, 4)).numpy(), np.broadcast_to(b.numpy(), (2, 3, 5, 4)))
    assert NDArray(np.array(5, dtype=dtype), device='cuda', dtype=dtype).item() == np.array(5, dtype=dtype).item()

@gpu
def test_many_dims_unmergeable():
    x = np.random.default_rng(1).standard_normal((2,) * 16).astype('float32')
    a = NDArray(x, device='cuda')
    perm = tuple(reversed(range(16)))       # reversed axes: no two neighbours merge
    assert np.array_equal(a.permute(perm).compact().numpy(), x.transpose(perm))
    v = a.permute(perm)
    v[...] = 1.5
    assert np.all(a.numpy() == 1.5)

def _ref_or_none(fn):
    try:
        with np.errstate(all='ignore'): return fn()
    except (TypeError, np.exceptions.DTypePromotionError if hasattr(np, 'exceptions') else TypeError): return None

@gpu
@pytest.mark.parametrize('dtype', CUDA_DTYPES)
def test_ewise_all_ops_all_dtypes(dtype):
    rng = np.random.default_rng(2)
    n = 1000 + 3
    x, y = sample(rng, n, dtype), sample(rng, n, dtype)
    if dtype in INTS: y = np.where(y == 0, 2, y).astype(dtype)
    for op in EWISE_OPS:
        xx, yy = x, y
        if op == 'pow' and dtype in INTS: yy = np.abs(y) % 4
        if op == 'pow' and dtype in FLOATS: xx = (np.abs(x) + 0.5).astype(dtype)
        out_dt = 'bool' if op in ('eq', 'ne', 'lt', 'le', 'gt', 'ge') else dtype
        want = CPU.alloc(n, out_dt)
        if _ref_or_none(lambda: CPU.ewise(op, xx, yy, want) or True) is None: continue
        o = DEV.alloc(n, out_dt)
        DEV.ewise(op, put(DEV, xx), put(DEV, yy), o)
        np.testing.assert_allclose(get(DEV, o, n), want, rtol=RTOL.get(dtype, 1e-12), err_msg=op)

@gpu
@pytest.mark.parametrize('dtype', CUDA_DTYPES)
def test_scalar_all_ops_all_dtypes(dtype):
    rng = np.random.default_rng(3)
    n = 777
    x = sample(rng, n, dtype)
    for op, s in itertools.product(SCALAR_OPS, [2, -1.5, True]):
        if dtype not in FLOATS and isinstance(s, float): continue
        xx = (np.abs(x) + 0.5).astype(dtype) if op in ('pow', 'rdiv', 'rpow') and dtype in FLOATS else x
        if op in ('rdiv', 'div') and dtype in INTS: continue   # NDArray divides in float32
        if op == 'rpow' and dtype in INTS: xx = np.abs(x)
        out_dt = 'bool' if op in ('eq', 'ne', 'lt', 'le', 'gt', 'ge') else dtype
        want = CPU.alloc(n, out_dt)
        if _ref_or_none(lambda: CPU.scalar(op, xx, s, want) or True) is None: continue
        o = DEV.alloc(n, out_dt)
        DEV.scalar(op, put(DEV, xx), s, o)
        np.testing.assert_allclose(get(DEV, o, n), want, rtol=RTOL.get(dtype, 1e-12), err_msg=f'{op} {s}')

@gpu
@pytest.mark.parametrize('dtype', CUDA_DTYPES)
def test_unary_all_ops(dtype):
    rng = np.random.default_rng(4)
    x = sample(rng, 513, dtype)
    ops = UNARY_OPS if dtype in FLOATS else ('abs', 'sign') + (('neg',) if dtype in INTS else ())
    for op in ops:
        xx = (np.abs(x) + 0.1).astype(dtype) if op in ('log', 'sqrt') else x
        want = CPU.alloc(513, dtype)
        if _ref_or_none(lambda: CPU.unary(op, xx, want) or True) is None: continue
        o = DEV.alloc(513, dtype); DEV.unary(op, put(DEV, xx), o)
        np.testing.assert_allclose(get(DEV, o, 513), want, rtol=2 * RTOL.get(dtype, 5e-14), atol=1e-7, err_msg=op)
    if dtype in FLOATS:   # NaN handling matches numpy
        z = np.array([np.nan, -0.0, 0.0, -2.0, np.inf], dtype)
        for op in ('sign', 'abs', 'neg'):
            want = CPU.alloc(5, dtype); CPU.unary(op, z, want)
            o = DEV.alloc(5, dtype); DEV.unary(op, put(DEV, z), o)
            # (through float32: numpy's testing does not see ml_dtypes' bfloat16 NaN as a NaN)
            np.testing.assert_array_equal(get(DEV, o, 5).astype('float32'), want.astype('float32'), err_msg=op)

@gpu
def test_cast_all_pairs_and_where():
    # values every pair can hold: out-of-range float -> int conversions are undefined in C++ (and differ on a GPU)
    z = np.array([0.0, -1.7, 2.5, np.nan, 100.0, -0.0, 0.1, 65504.0], 'float64')
    for src, dst in itertools.product(CUDA_DTYPES, CUDA_DTYPES):
        v = z[~np.isnan(z)] if src not in FLOATS or dst not in FLOATS else z
        if 'uint8' in (src, dst): v = v[v >= 0]
        if src in ('int8', 'uint8') or dst in ('int8', 'uint8'): v = v[np.abs(v) < 128]
        x = v.astype(src)
        o = DEV.alloc(x.size, dst); DEV.cast(put(DEV, x), o)
        got, want = get(DEV, o, x.size), x.astype(dst)
        if dst == 'bfloat16': got, want = got.astype('float32'), want.astype('float32')   # NaN == NaN for numpy
        np.testing.assert_array_equal(got, want, err_msg=f'{src}->{dst}')
    rng = np.random.default_rng(5)
    for dtype in CUDA_DTYPES:
        c, a, b = rng.random(300) > 0.5, sample(rng, 300, dtype), sample(rng, 300, dtype)
        o = DEV.alloc(300, dtype); DEV.where(put(DEV, c), put(DEV, a), put(DEV, b), o)
        assert np.array_equal(get(DEV, o, 300), np.where(c, a, b))
    o = DEV.alloc(10, 'int64'); DEV.fill(o, 2**40 + 1)
    assert np.all(get(DEV, o, 10) == 2**40 + 1)
    for dtype, v in (('float16', 0.1), ('bfloat16', 0.1), ('int8', -7), ('uint8', 200), ('int32', -2**31)):
        o = DEV.alloc(5, dtype); DEV.fill(o, v)
        assert np.array_equal(get(DEV, o, 5), np.full(5, v, dtype)), dtype

@gpu
@pytest.mark.parametrize('dtype', ['float32', 'float64', 'int64'])
@pytest.mark.parametrize('outer,r', [(1, 1), (5, 16), (5000, 17), (300, 2048), (3, 2049), (2, 100003), (1, 2**22 + 3), (70000, 3)])
def test_reductions_every_path(dtype, outer, r):
    x = sample(np.random.default_rng(6), (outer, r), dtype)
    h = put(DEV, x)
    o = DEV.alloc(outer, dtype)
    DEV.reduce_sum(h, o, r)
    want = x.astype('float64').sum(1)
    np.testing.assert_allclose(get(DEV, o, outer), want, rtol=1e-4 if dtype == 'float32' else 1e-11,
                               atol=1e-2 if dtype == 'float32' else 1e-9)
    DEV.reduce_max(h, o, r)
    assert np.array_equal(get(DEV, o, outer), x.max(1))

@gpu
def test_reduce_max_nan_and_bool():
    x = np.array([[1, np.nan, 3], [-np.inf, -np.inf, -np.inf]], 'float32')
    o = DEV.alloc(2, 'float32'); DEV.reduce_max(put(DEV, x), o, 3)
    np.testing.assert_array_equal(get(DEV, o, 2), x.max(1))
    b = np.random.default_rng(7).random((40, 5000)) > 0.9995
    o = DEV.alloc(40, 'bool'); DEV.reduce_max(put(DEV, b), o, 5000)
    assert np.array_equal(get(DEV, o, 40), b.max(1))

@gpu
@pytest.mark.parametrize('algo', list(MATMUL_ALGOS))
@pytest.mark.parametrize('dtype', ['float32', 'float64', 'int64'])
def test_matmul_every_algo(algo, dtype):
    rng = np.random.default_rng(8)
    if algo.startswith('wmma'):   # the tensor cores multiply 16-bit floats (and int8, through matmul_int8) only
        with pytest.raises(RuntimeError, match=rf'matmul_wmma_kernel\[{dtype}\]: the tensor-core matmul takes float16'):
            DEV.matmul(put(DEV, np.ones((2, 2), dtype)), put(DEV, np.ones((2, 2), dtype)), DEV.alloc(4, dtype), 1, 2, 2, 2,
                       algo=algo)
        return
    for batch, m, n, p in [(1, 1, 1, 1), (2, 5, 7, 3), (3, 33, 65, 17), (1, 128, 64, 256), (2, 131, 36, 132),
                           (1, 300, 257, 129), (70000, 2, 3, 2)]:
        if batch > 1000 and (EMULATED or algo not in ('auto', 'naive')): continue   # grid.z loop: batch > 65535
        a, b = sample(rng, (batch, m, n), dtype), sample(rng, (batch, n, p), dtype)
        o = DEV.alloc(batch * m * p, dtype)
        DEV.matmul(put(DEV, a), put(DEV, b), o, batch, m, n, p, algo=algo)
        got = DEV.to_numpy(o, (batch, m, p), (m * p, p, 1), 0)
        want = a.astype('float64') @ b.astype('float64')
        if dtype == 'int64': assert np.array_equal(got, want.astype('int64')), (algo, batch, m, n, p)
        else: np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f'{algo} {(batch, m, n, p)}')

@gpu
@pytest.mark.parametrize('dtype', CUDA_DTYPES)
def test_gather_scatter_add(dtype):
    rng = np.random.default_rng(9)
    outer, n, inner = 4, 9, 5
    x = sample(rng, (outer, n, inner), dtype)
    idx = rng.integers(0, n, 50).astype('int64')
    o = DEV.alloc(outer * 50 * inner, dtype)
    DEV.gather(put(DEV, x), put(DEV, idx), o, outer, n, inner, 50)
    assert np.array_equal(DEV.to_numpy(o, (outer, 50, inner), (50 * inner, inner, 1), 0), x[:, idx])
    src = sample(rng, (outer, 50, inner), dtype)
    acc = DEV.alloc(outer * n * inner, dtype); DEV.fill(acc, 0)
    if dtype in ('float16', 'bfloat16', 'int16', 'int8', 'uint8'):   # CUDA has no atomic add for them: refused
        with pytest.raises(RuntimeError, match=rf'scatter_add_kernel\[{dtype}\]: unsupported dtype'):
            DEV.scatter_add(put(DEV, src), put(DEV, idx), acc, outer, n, inner, 50)
        return
    DEV.scatter_add(put(DEV, src), put(DEV, idx), acc, outer, n, inner, 50)
    want = np.zeros((outer, n, inner), dtype); np.add.at(want, (slice(None), idx), src)
    got = DEV.to_numpy(acc, (outer, n, inner), (n * inner, inner, 1), 0)
    if dtype.startswith('float'): np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    else: assert np.array_equal(got, want)

@gpu
def test_errors_name_the_kernel():
    i = DEV.alloc(4, 'int64'); DEV.fill(i, 1)
    with pytest.raises(RuntimeError, match=r'unary_kernel\[int64\]'): DEV.unary('exp', i, DEV.alloc(4, 'int64'))
    with pytest.raises(RuntimeError, match='cudaMallocAsync'): DEV.alloc(2**50, 'float32')
    with pytest.raises(RuntimeError, match=r'matmul_kernel\[bool\]'):
        b = DEV.alloc(4, 'bool'); DEV.matmul(b, b, DEV.alloc(4, 'bool'), 1, 2, 2, 2)
    DEV.synchronize()   # the device is still healthy afterwards

@gpu
def test_ndarray_and_autograd_on_cuda_match_cpu():
    rng = np.random.default_rng(10)
    x, w = rng.standard_normal((64, 33)).astype('float32'), rng.standard_normal((33, 7)).astype('float32')
    outs = []
    for d in ('cpu', 'cuda'):
        X, W = minima.Tensor(x, device=d), minima.Tensor(w, device=d)
        y = minima.ops.logsumexp(minima.ops.relu(X @ W) * 0.5 + 1, axes=(1,)).sum()
        y.backward()
        outs.append((y.detach().cpu().numpy(), X.grad.detach().cpu().numpy(), W.grad.detach().cpu().numpy()))
        assert X.grad.device.name == d
    for a, b in zip(*outs): np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)
    a = NDArray(x, device='cuda')
    assert np.array_equal(a.argmax(1).numpy(), x.argmax(1)) and np.allclose(a.sum(0).numpy(), x.sum(0), atol=1e-4)
    assert np.array_equal(a.to('cpu').numpy(), x) and a.to('cpu').device == cpu()
    t = a.take(NDArray(np.array([3, -1, 0]), device='cuda'), axis=1)
    assert np.array_equal(t.numpy(), x[:, [3, -1, 0]])

@gpu
def test_memory_is_recycled():
    for _ in range(2000): DEV.alloc(1 << 20, 'float32')   # 4 MB each; freed as soon as dropped
    DEV.synchronize()

@gpu
def test_matmul_taller_than_one_grid():
    m = 65535 * 8 + 100    # more row tiles than grid.y allows for the smallest tile: multiplied in bands
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((m, 4)).astype('float32'), rng.standard_normal((4, 4)).astype('float32')
    got = (NDArray(a, device='cuda') @ NDArray(b, device='cuda')).numpy()
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)

try:
    from hypothesis import given, settings, strategies as st, HealthCheck
except ImportError: given = None

if given is not None:
    @st.composite
    def strided_views(draw):
        "A random array plus a random chain of views: slices with any step, a permutation, a broadcast axis."
        nd = draw(st.integers(1, 5))
        shape = tuple(draw(st.lists(st.integers(1, 5), min_size=nd, max_size=nd)))
        idx = tuple(slice(draw(st.integers(0, n - 1)), None, draw(st.sampled_from([1, 2, -1, -2]))) for n in shape)
        perm = tuple(draw(st.permutations(range(nd))))
        return shape, idx, perm, draw(st.booleans()), draw(st.sampled_from(CUDA_DTYPES))

    @gpu
    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(strided_views())
    def test_random_views_match_numpy(view):
        shape, idx, perm, bcast, dtype = view
        x = sample(np.random.default_rng(12), shape, dtype)
        a = NDArray(x, device='cuda', dtype=dtype)
        v, w = a[idx].permute(perm), x[idx].transpose(perm)
        if bcast: v, w = v[None].broadcast_to((3,) + v.shape), np.broadcast_to(w[None], (3,) + w.shape)
        assert np.array_equal(v.compact().numpy(), w)
        if not bcast:
            y = sample(np.random.default_rng(13), w.shape, dtype)
            v[...] = NDArray(y, device='cuda', dtype=dtype)
            x2 = x.copy(); x2[idx] = y.transpose(np.argsort(perm))
            assert np.array_equal(a.numpy(), x2)

# ---- the 16-bit floats and int8: the kernels of mixed precision (chapter 24) and quantization (chapter 26)

@gpu
@pytest.mark.parametrize('dtype', ['float16', 'bfloat16', 'int32', 'int8', 'uint8'])
@pytest.mark.parametrize('outer,r', [(5, 16), (300, 2048), (3, 2049), (2, 100003)])
def test_reductions_small_dtypes(dtype, outer, r):
    "Every reduction path; the 16-bit floats sum in float32 and round once (their float64 sum, to one ulp)."
    x = sample(np.random.default_rng(20), (outer, r), dtype)
    h, o = put(DEV, x), DEV.alloc(outer, dtype)
    DEV.reduce_sum(h, o, r)
    got = get(DEV, o, outer)
    if dtype in FLOATS:
        want = x.astype('float64').sum(1)
        # one rounding to the dtype (RTOL / 2 relative) plus float32's accumulation error (n * 2**-24 of sum |x|)
        tol = RTOL[dtype] / 2 * np.abs(want) + r * 2.0**-24 * np.abs(x.astype('float64')).sum(1)
        assert np.all(np.abs(got.astype('float64') - want) <= tol), (got, want)
    else: assert np.array_equal(got, x.astype('int64').sum(1).astype(dtype))   # integers wrap, as numpy's
    DEV.reduce_max(h, o, r)
    assert np.array_equal(get(DEV, o, outer), x.max(1))

SHAPES = [(1, 1, 1, 1), (2, 5, 7, 3), (3, 33, 65, 17), (1, 128, 64, 256), (2, 131, 36, 132), (1, 300, 257, 129)]

@gpu
@pytest.mark.parametrize('algo', list(MATMUL_ALGOS))
@pytest.mark.parametrize('dtype', ['float16', 'bfloat16', 'int32'])
def test_matmul_small_dtypes_every_algo(algo, dtype):
    """float16/bfloat16 matmul accumulates in float32 and rounds once: within one rounding of the exact product
    plus float32's accumulation error; int32 is exact."""
    rng = np.random.default_rng(21)
    if algo.startswith('wmma') and dtype == 'int32':
        with pytest.raises(RuntimeError, match=r'matmul_wmma_kernel\[int32\]: the tensor-core matmul takes float16'):
            DEV.matmul(put(DEV, np.ones((2, 2), dtype)), put(DEV, np.ones((2, 2), dtype)), DEV.alloc(4, dtype), 1, 2, 2, 2,
                       algo=algo)
        return
    for batch, m, n, p in SHAPES:
        # the emulator runs each tensor-core tile once per lane of the warp: its biggest case alone costs a minute
        if EMULATED and algo in ('wmma', 'wmma1', 'auto') and m * n * p > 3_000_000: continue
        a, b = sample(rng, (batch, m, n), dtype), sample(rng, (batch, n, p), dtype)
        o = DEV.alloc(batch * m * p, dtype)
        DEV.matmul(put(DEV, a), put(DEV, b), o, batch, m, n, p, algo=algo)
        got = DEV.to_numpy(o, (batch, m, p), (m * p, p, 1), 0).astype('float64')
        a64, b64 = a.astype('float64'), b.astype('float64')
        want = a64 @ b64
        if dtype == 'int32': assert np.array_equal(got, want), (algo, batch, m, n, p); continue
        tol = RTOL[dtype] / 2 * np.abs(want) + 2 * n * 2.0**-24 * (np.abs(a64) @ np.abs(b64)) + 1e-7
        assert np.all(np.abs(got - want) <= tol), (algo, batch, m, n, p, np.abs(got - want).max())

@gpu
@pytest.mark.parametrize('dtype', ['float16', 'bfloat16'])
def test_matmul_wmma_exact_small_integers(dtype):
    """The tensor-core kernel on small integers: every product and partial sum is exact in float32 and the result
    fits the 16-bit float exactly, so it must equal the integer product bit for bit, at the tile edges (vectorised
    loads when n and p are multiples of 8, element loads otherwise), batched; and `auto` takes it."""
    rng = np.random.default_rng(23)
    for batch, m, n, p in [(1, 16, 16, 16), (2, 5, 7, 3), (1, 128, 64, 136), (2, 130, 40, 24), (1, 33, 48, 129)]:
        a, b = rng.integers(-2, 3, (batch, m, n)).astype(dtype), rng.integers(-2, 3, (batch, n, p)).astype(dtype)
        want = a.astype(np.int64) @ b.astype(np.int64)
        for algo in ('wmma', 'auto'):
            o = DEV.alloc(batch * m * p, dtype)
            DEV.matmul(put(DEV, a), put(DEV, b), o, batch, m, n, p, algo=algo)
            got = DEV.to_numpy(o, (batch, m, p), (m * p, p, 1), 0).astype(np.float64)
            assert np.array_equal(got, want), (dtype, algo, batch, m, n, p)

@gpu
def test_matmul_int8_wmma_exact():
    "The int8 tensor-core kernel: int8 @ int8 -> int32 exactly, extreme codes and edges included; uint8 is refused."
    rng = np.random.default_rng(24)
    for m, n, p in [(1, 1, 1), (5, 7, 3), (64, 32, 64), (130, 48, 20), (3, 0, 2), (2, 300, 5)]:
        a, b = rng.integers(-128, 128, (m, n)).astype('int8'), rng.integers(-128, 128, (n, p)).astype('int8')
        if m * n: a.flat[0] = -128; a.flat[-1] = 127
        if n * p: b.flat[0] = -128; b.flat[-1] = -128
        for algo in ('wmma', 'wmma1', 'auto'):   # auto takes the tensor cores for int8 A
            o = DEV.alloc(m * p, 'int32')
            DEV.matmul_int8(put(DEV, a), put(DEV, b), o, m, n, p, algo=algo)
            got = DEV.to_numpy(o, (m, p), (p, 1), 0)
            assert got.dtype == np.int32 and np.array_equal(got, a.astype(np.int64) @ b.astype(np.int64)), (m, n, p)
    with pytest.raises(RuntimeError, match=r'matmul_int8_wmma_kernel\[uint8\]: the tensor-core int8 matmul takes int8 A'):
        DEV.matmul_int8(put(DEV, np.zeros((1, 4), 'uint8')), put(DEV, np.zeros((4, 1), 'int8')), DEV.alloc(1, 'int32'),
                        1, 4, 1, algo='wmma')

@gpu
@pytest.mark.parametrize('adt', ['int8', 'uint8'])
def test_matmul_int8_exact(adt):
    "The dp4a kernel: int8 or uint8 @ int8 -> int32, exactly the integer product, edges and extreme codes included."
    rng = np.random.default_rng(22)
    lo, hi = (-128, 128) if adt == 'int8' else (0, 256)
    for m, n, p in [(1, 1, 1), (5, 7, 3), (64, 32, 64), (70, 37, 130), (65, 129, 63), (3, 0, 2), (2, 1000, 5)]:
        a = rng.integers(lo, hi, (m, n)).astype(adt)
        b = rng.integers(-128, 128, (n, p)).astype('int8')
        if m * n: a.flat[0] = lo; a.flat[-1] = hi - 1             # the extreme codes
        if n * p: b.flat[0] = -128; b.flat[-1] = 127
        o = DEV.alloc(m * p, 'int32')
        DEV.matmul_int8(put(DEV, a), put(DEV, b), o, m, n, p, algo='dp4a')
        got = DEV.to_numpy(o, (m, p), (p, 1), 0)
        assert got.dtype == np.int32 and np.array_equal(got, a.astype(np.int64) @ b.astype(np.int64)), (m, n, p)
    # the largest k whose uint8 x int8 sums cannot overflow int32, at the extremes: 65793 * 255 * -128 > -2**31
    n = 65793
    a, b = np.full((2, n), 255 if adt == 'uint8' else -128, adt), np.full((n, 3), -128, 'int8')
    o = DEV.alloc(6, 'int32'); DEV.matmul_int8(put(DEV, a), put(DEV, b), o, 2, n, 3, algo='dp4a')
    assert np.array_equal(DEV.to_numpy(o, (2, 3), (3, 1), 0), a.astype(np.int64) @ b.astype(np.int64))
    with pytest.raises(RuntimeError, match=r'matmul_int8_kernel\[.*\]: n > 65793 could overflow'):
        DEV.matmul_int8(put(DEV, np.zeros((1, n + 1), adt)), put(DEV, np.zeros((n + 1, 1), 'int8')),
                        DEV.alloc(1, 'int32'), 1, n + 1, 1)
    with pytest.raises(RuntimeError, match=r'matmul_int8_kernel\[float32\]: A must be int8 or uint8'):
        DEV.matmul_int8(put(DEV, np.zeros((1, 4), 'float32')), put(DEV, np.zeros((4, 1), 'int8')),
                        DEV.alloc(1, 'int32'), 1, 4, 1)

@gpu
def test_quantized_linear_and_autocast_run_on_cuda():
    """Chapter 26's dynamic int8 Linear and chapter 24's autocast on the CUDA device: the int8 matmul is the dp4a
    kernel (the same int32 accumulators as on the CPU), the autocast matmul the float16 kernel."""
    from minima.ao.quantization import quantize_dynamic, int8_matmul
    from minima.backend_ndarray.cuda import CudaDevice
    assert CudaDevice.matmul_int8 is not type(CPU).matmul_int8
    rng = np.random.default_rng(23)
    qa, qb = rng.integers(0, 256, (9, 40)).astype('uint8'), rng.integers(-128, 128, (40, 6)).astype('int8')
    got = int8_matmul(NDArray(qa, device='cuda', dtype='uint8'), NDArray(qb, device='cuda', dtype='int8'))
    assert got.device.name == 'cuda' and got.dtype == 'int32'
    assert np.array_equal(got.numpy(), int8_matmul(NDArray(qa, dtype='uint8'), NDArray(qb, dtype='int8')).numpy())
    x = rng.standard_normal((8, 32)).astype('float32')
    outs = {}
    for d in ('cpu', 'cuda'):
        minima.manual_seed(0)
        lin = minima.nn.Linear(32, 16).to(d)
        q = quantize_dynamic(lin, {minima.nn.Linear}, dtype='qint8')
        y = q(minima.Tensor(x, device=d))
        with minima.autocast(d, dtype='float16'): z = lin(minima.Tensor(x, device=d))
        assert y.device.name == d and z.dtype == 'float16'
        outs[d] = (y.detach().cpu().numpy(), z.detach().cpu().numpy().astype('float32'))
    # same integer codes and accumulators on both devices; only the float32 epilogue's rounding may differ
    np.testing.assert_allclose(outs['cuda'][0], outs['cpu'][0], rtol=1e-5, atol=1e-5)
    # float16 outputs of float32-accumulated products: equal up to one float16 rounding (2**-11 relative)
    np.testing.assert_allclose(outs['cuda'][1], outs['cpu'][1], rtol=2.0**-10, atol=1e-3)

@gpu
def test_deepcopy_copies_on_the_device():
    "copy.deepcopy of an array (and so of a model) on the GPU: a new device allocation, the same device object."
    import copy
    a = NDArray(np.arange(6, dtype='float32'), device='cuda')
    b = copy.deepcopy(a)
    assert b.device is a.device and b._handle.ptr != a._handle.ptr and np.array_equal(b.numpy(), a.numpy())
    a[:] = 0
    assert np.array_equal(b.numpy(), np.arange(6, dtype='float32'))

# ---- the ops on the fused row kernels (chapter 22): one kernel per pass, forward and backward against torch
def host(t):
    "A Tensor's values as a numpy array, wherever it lives (a GPU tensor's numpy() refuses, as torch's)."
    return t.detach().cpu().numpy()

def _spy(monkeypatch, names):
    "Count the calls of the device's fused row methods (an instance attribute each: the device stays fused)."
    calls = {n: 0 for n in names}
    for n in names:
        real = getattr(DEV, n)
        def f(*a, _n=n, _real=real): calls[_n] += 1; return _real(*a)
        monkeypatch.setattr(DEV, n, f, raising=False)
    return calls

@gpu
@pytest.mark.parametrize('shape', [(4, 7), (2, 3, 40), (3, 1100)])
@pytest.mark.parametrize('log', [False, True])
def test_softmax_ops_fused_against_torch(shape, log, monkeypatch):
    import torch
    calls = _spy(monkeypatch, ['softmax_rows', 'softmax_rows_backward'])
    rng = np.random.default_rng(30)
    x, g = (3 * rng.standard_normal(shape)).astype('float32'), rng.standard_normal(shape).astype('float32')
    X = minima.Tensor(x, device='cuda', requires_grad=True)
    Y = (minima.log_softmax if log else minima.softmax)(X, -1)
    Y.backward(minima.Tensor(g, device='cuda'))
    tx = torch.tensor(x.astype('float64'), requires_grad=True)
    ty = (torch.log_softmax if log else torch.softmax)(tx, -1)
    ty.backward(torch.tensor(g.astype('float64')))
    assert Y.dtype == 'float32' and Y.device == DEV
    np.testing.assert_allclose(host(Y), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(host(X.grad), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    assert calls == {'softmax_rows': 1, 'softmax_rows_backward': 1}
    # another axis, and the gradient of the gradient: the composed path, same answers
    Z = minima.softmax(X, 0).sum()
    assert calls['softmax_rows'] == 1 and np.allclose(Z.item(), torch.softmax(tx, 0).sum().item(), rtol=1e-5)

@gpu
@pytest.mark.parametrize('N,C', [(6, 5), (3, 1500)])
def test_cross_entropy_fused_against_torch(N, C, monkeypatch):
    import torch
    calls = _spy(monkeypatch, ['cross_entropy_rows', 'cross_entropy_rows_backward'])
    rng = np.random.default_rng(31)
    z, y = (2 * rng.standard_normal((N, C))).astype('float32'), rng.integers(0, C, N)
    Z = minima.Tensor(z, device='cuda', requires_grad=True)
    loss = minima.nn.CrossEntropyLoss()(Z, minima.Tensor(y, device='cuda'))
    gv = float(rng.standard_normal())
    loss.backward(minima.Tensor(np.float32(gv), device='cuda'))
    tz = torch.tensor(z.astype('float64'), requires_grad=True)
    tl = torch.nn.functional.cross_entropy(tz, torch.tensor(y))
    tl.backward(torch.tensor(gv, dtype=torch.float64))
    assert loss.shape == () and loss.dtype == 'float32'
    assert abs(loss.item() - tl.item()) <= 1e-5 * max(1, abs(tl.item()))
    np.testing.assert_allclose(host(Z.grad), tz.grad.numpy(), rtol=1e-4, atol=1e-6)
    assert calls == {'cross_entropy_rows': 1, 'cross_entropy_rows_backward': 1}
    with pytest.raises(ValueError, match=f'label {C} is out of range for {C} classes'):
        minima.ops.softmax_cross_entropy(Z, minima.Tensor(np.full(N, C), device='cuda'))
    # create_graph: the composed adjoint, differentiable again (matches torch's double backward)
    Z.grad = None
    loss = minima.ops.softmax_cross_entropy(Z, minima.Tensor(y, device='cuda'))
    (gz,) = minima.autograd.grad(loss, [Z], create_graph=True)
    (gz * gz).sum().backward()
    tz.grad = None
    (tg,) = torch.autograd.grad(torch.nn.functional.cross_entropy(tz, torch.tensor(y)), [tz], create_graph=True)
    (tg * tg).sum().backward()
    np.testing.assert_allclose(host(Z.grad), tz.grad.numpy(), rtol=1e-3, atol=1e-7)

@gpu
@pytest.mark.parametrize('shape,ns', [((5, 8), (8,)), ((2, 3, 4), (3, 4)), ((2, 1200), (1200,)), ((300, 6), (6,))])
def test_layer_norm_fused_against_torch(shape, ns, monkeypatch):
    import torch
    calls = _spy(monkeypatch, ['layer_norm_rows', 'layer_norm_rows_backward'])
    rng = np.random.default_rng(32)
    x, g = (rng.standard_normal(shape) * 2 + 1).astype('float32'), rng.standard_normal(shape).astype('float32')
    w, b = rng.standard_normal(ns).astype('float32'), rng.standard_normal(ns).astype('float32')
    X, W, B = (minima.Tensor(a, device='cuda', requires_grad=True) for a in (x, w, b))
    Y = minima.nn.functional.layer_norm(X, ns, W, B)
    Y.backward(minima.Tensor(g, device='cuda'))
    tx, tw, tb = (torch.tensor(a.astype('float64'), requires_grad=True) for a in (x, w, b))
    ty = torch.nn.functional.layer_norm(tx, ns, tw, tb)
    ty.backward(torch.tensor(g.astype('float64')))
    np.testing.assert_allclose(host(Y), ty.detach().numpy(), rtol=1e-4, atol=1e-5)
    for got, want in ((X, tx), (W, tw), (B, tb)):
        np.testing.assert_allclose(host(got.grad), want.grad.numpy(), rtol=1e-4, atol=2e-5 * np.sqrt(shape[0]))
    assert calls == {'layer_norm_rows': 1, 'layer_norm_rows_backward': 1}

@gpu
def test_fused_rows_step_aside_while_recording():
    "A recorder (chapter 21b) wraps the device's primitives as instance attributes: the fused methods step aside."
    assert DEV.fused_rows
    DEV.ewise = DEV.ewise   # what a Recorder's __enter__ does to every primitive
    try: assert not DEV.fused_rows
    finally: del DEV.ewise
    assert DEV.fused_rows and not cpu().fused_rows

@gpu
@pytest.mark.parametrize('causal', [False, True])
def test_attention_backward_takes_the_fused_softmax_adjoint(causal, monkeypatch):
    import torch
    calls = _spy(monkeypatch, ['softmax_rows_backward'])
    rng = np.random.default_rng(33)
    q, k, v, g = (rng.standard_normal((2, 3, 5, 4)).astype('float32') for _ in range(4))
    Q, K, Vt = (minima.Tensor(a, device='cuda', requires_grad=True) for a in (q, k, v))
    out = minima.nn.functional.scaled_dot_product_attention(Q, K, Vt, is_causal=causal)
    out.backward(minima.Tensor(g, device='cuda'))
    tq, tk, tv = (torch.tensor(a.astype('float64'), requires_grad=True) for a in (q, k, v))
    torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal).backward(torch.tensor(g.astype('float64')))
    for got, want in ((Q, tq), (K, tk), (Vt, tv)):
        np.testing.assert_allclose(host(got.grad), want.grad.numpy(), rtol=1e-4, atol=1e-5)
    assert calls == {'softmax_rows_backward': 1}
