"""`minima.compile`: compiled steps against eager minima (same losses and parameters over 50 steps, dropout and batch
norm included), guards, the capture errors, and random op programs (forward and gradient) compiled and compared."""
import numpy as np
import pytest
from hypothesis import given, settings, HealthCheck, strategies as st
import minima as mi
from minima import nn, optim, init
from minima.compile import CaptureError

def mlp(drop):
    return nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Dropout(drop), nn.Linear(16, 5))

def cnn(drop):
    return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Dropout(drop),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 3 * 3, 5))

def sgd(ps): return optim.SGD(ps, lr=0.05, momentum=0.9)

def train(make, shape, compiled, steps=50, drop=0.3, backend='c', make_opt=sgd, device='cpu'):
    "Losses and final parameters (and buffers) of `steps` optimizer steps, eager or compiled, from one seed."
    init.manual_seed(0)
    m = make(drop).to(device)
    opt = make_opt(m.parameters())
    lossf = nn.CrossEntropyLoss()
    rng = np.random.default_rng(1)
    xs = [mi.Tensor(rng.standard_normal(shape).astype('float32'), requires_grad=False, device=device) for _ in range(3)]
    ys = [mi.Tensor(rng.integers(0, 5, shape[0]), device=device) for _ in range(3)]
    def step(x, y):
        opt.zero_grad(); loss = lossf(m(x), y); loss.backward(); opt.step()
        return loss
    f = mi.compile(step, backend=backend) if compiled else step
    init.manual_seed(2)   # the dropout masks: compiled replays draw from the same generator, in the same order
    losses = [float(f(xs[i % 3], ys[i % 3]).detach().numpy()) for i in range(steps)]
    state = [p.detach().numpy() for p in m.parameters()] + [b.detach().numpy() for _, b in m.named_buffers()]
    return np.array(losses), state, f

@pytest.mark.parametrize('make,shape', [(mlp, (8, 12)), (cnn, (6, 1, 6, 6))], ids=['mlp', 'cnn'])
def test_compiled_matches_eager(make, shape):
    le, se, _ = train(make, shape, False)
    lc, sc, f = train(make, shape, True)
    assert f.program is not None and f.captures == 2   # one eager call, two captures, 47 replays
    np.testing.assert_allclose(lc, le, rtol=1e-6, atol=1e-6)
    for a, b in zip(sc, se): np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    assert f.program.stats['kernels'] > 0
    d = f.program.draw()
    assert d.n_nodes == len(f.program.instrs) and d.n_edges > d.n_nodes // 2 and d.svg.startswith('<svg')

def adamw(ps): return optim.AdamW(ps, lr=0.01, weight_decay=0.1, amsgrad=True, capturable=True)

def test_adam_capturable_compiled_matches_eager():
    "Adam(W) with `capturable=True` keeps its step count on the device: the step compiles and follows eager."
    le, se, _ = train(mlp, (8, 12), False, make_opt=adamw)
    lc, sc, f = train(mlp, (8, 12), True, make_opt=adamw)
    assert f.program is not None and f.captures == 2
    np.testing.assert_allclose(lc, le, rtol=1e-6, atol=1e-6)
    for a, b in zip(sc, se): np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)

def train_gpt(compiled, steps=50, B=3, T=8, V=11, device='cpu'):
    "A tiny GPT with dropout 0.1 everywhere (embeddings, attention output, MLP), AdamW: losses and parameters."
    init.manual_seed(0)
    # bias=False: the key projection's bias has a zero gradient in exact arithmetic (softmax ignores a constant
    # added to every score), so in float32 it is rounding noise, which Adam normalises into full-size steps
    m = nn.GPT(V, T, n_layer=2, n_head=2, n_embd=16, dropout=0.1, bias=False).to(device)
    opt = optim.AdamW(m.parameters(), lr=3e-3, capturable=True)
    lossf = nn.CrossEntropyLoss()
    rng = np.random.default_rng(1)
    xs = [mi.Tensor(rng.integers(0, V, (B, T)), requires_grad=False, device=device) for _ in range(2)]
    ys = [mi.Tensor(rng.integers(0, V, B * T), requires_grad=False, device=device) for _ in range(2)]
    def step(x, y):
        opt.zero_grad(); loss = lossf(m(x).reshape((B * T, V)), y); loss.backward(); opt.step()
        return loss
    f = mi.compile(step) if compiled else step
    init.manual_seed(2)
    losses = [float(f(xs[i % 2], ys[i % 2]).detach().numpy()) for i in range(steps)]
    return np.array(losses), [p.detach().numpy() for p in m.parameters()], f

def test_gpt_compiled_matches_eager():
    "The issue's GPT check: 50 AdamW steps with dropout on, compiled against eager, same seed and masks."
    le, se, _ = train_gpt(False)
    lc, sc, f = train_gpt(True)
    assert f.program is not None and f.captures == 2
    # per block attention weights, attention output and MLP output, and the embeddings: 7 fresh masks per replay
    assert sum(i.random is not None for i in f.program.instrs) == 2 * 3 + 1
    assert le[-1] < le[0] - 0.3   # it learns
    np.testing.assert_allclose(lc, le, rtol=1e-6, atol=1e-6)
    for a, b in zip(sc, se): np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)

def test_numba_backend_matches_eager():
    "The fallback backend (numba) generates the same kernels in Python; same check, fewer steps."
    pytest.importorskip('numba')
    le, se, _ = train(mlp, (8, 12), False, steps=10)
    lc, sc, f = train(mlp, (8, 12), True, steps=10, backend='numba')
    assert f.program.backend == 'numba' and all(k.lang == 'numba' for k in f.program.kernels)
    np.testing.assert_allclose(lc, le, rtol=1e-6, atol=1e-6)
    for a, b in zip(sc, se): np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)

def test_dropout_masks_change_between_replays():
    "Random ops draw fresh numbers on every replay (the same numbers as eager, but not the same every step)."
    init.manual_seed(0)
    x = mi.Tensor(np.ones((4, 50), 'float32'), requires_grad=False)
    f = mi.compile(lambda x: mi.nn.functional.dropout(x, 0.5) * 1.0)
    masks = [f(x).numpy().copy() for _ in range(6)]
    assert f.program is not None
    assert not np.array_equal(masks[4], masks[5]) and set(np.unique(masks[5])) <= {0.0, 2.0}

def test_shape_change_captures_again():
    init.manual_seed(0)
    lin = nn.Linear(3, 2)
    f = mi.compile(lambda x: (lin(x) * 2.0).sum())
    a, b = (mi.Tensor(np.random.default_rng(i).standard_normal((n, 3)).astype('float32')) for i, n in ((0, 4), (1, 7)))
    with mi.no_grad(): _shape_change(f, lin, a, b)   # forward only (a forward under grad runs eagerly)

def _shape_change(f, lin, a, b):
    for _ in range(4): f(a)
    assert f.captures == 2
    for _ in range(4): out = f(b)
    assert f.captures == 4 and len(f.programs) == 2
    np.testing.assert_allclose(out.numpy(), (lin(b) * 2.0).sum().numpy(), rtol=1e-6)
    np.testing.assert_allclose(f(a).numpy(), (lin(a) * 2.0).sum().numpy(), rtol=1e-6)   # the first program still
    assert f.captures == 4

def test_train_eval_and_grad_mode_are_guards():
    init.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    f = mi.compile(lambda x: m(x))
    x = mi.Tensor(np.ones((2, 3), 'float32'))
    with mi.no_grad():
        for _ in range(4): f(x)
        m.eval()
        for _ in range(4): y = f(x)
        assert f.captures == 4
        np.testing.assert_allclose(y.numpy(), m(x).numpy(), rtol=1e-6)
    with pytest.warns(UserWarning, match='backward'):   # under grad: a forward whose backward is eager
        for _ in range(4): y = f(x)
    assert f.captures == 5 and y.requires_grad
    np.testing.assert_allclose(y.detach().numpy(), m(x).detach().numpy(), rtol=1e-6)

def test_item_inside_is_a_clear_error():
    lin = nn.Linear(3, 1)
    def step(x):
        loss = lin(x).sum()
        if loss.item() > 0: loss = loss * 2.0
        return loss
    f = mi.compile(step)
    x = mi.Tensor(np.ones((2, 3), 'float32'))
    f(x)   # the first call runs eagerly
    with pytest.raises(CaptureError, match=r"test_compile.py:\d+ `if loss.item\(\) > 0: loss = loss \* 2.0`"):
        f(x)

def test_changing_python_numbers_are_an_error():
    "Adam's bias correction is a Python number that changes every step: capture says so instead of baking it in."
    init.manual_seed(0)
    lin = nn.Linear(3, 2)
    opt = optim.Adam(lin.parameters(), lr=0.01)
    x = mi.Tensor(np.ones((2, 3), 'float32'))
    def step(x):
        opt.zero_grad(); loss = lin(x).sum(); loss.backward(); opt.step(); return loss
    f = mi.compile(step)
    with pytest.raises(CaptureError, match='a value changed between two calls'):
        for _ in range(3): f(x)

# random programs: forward and gradient, compiled against eager
UNARY = {'exp': lambda h: (h * 0.3).exp(), 'tanh': lambda h: h.tanh(), 'relu': lambda h: h.relu(),
         'sigmoid': lambda h: h.sigmoid(), 'square': lambda h: h * h, 'log1p_abs': lambda h: (h.abs() + 1.0).log(),
         'neg': lambda h: -h, 'scale': lambda h: h * 1.7 - 0.2}
BINARY = {'add_b': lambda h, b: h + b.broadcast_to(h.shape), 'mul_b': lambda h, b: h * b.broadcast_to(h.shape),
          'max_b': lambda h, b: mi.maximum(h, b.broadcast_to(h.shape)),
          'div_b': lambda h, b: h / (b * b + 1.0).broadcast_to(h.shape),
          'matmul': lambda h, w: h @ w, 'rowsum': lambda h, b: h - h.sum(1, keepdims=True).broadcast_to(h.shape) / 4.0,
          'softmax': lambda h, b: mi.nn.functional.softmax(h, -1)}

@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None)
@given(ops=st.lists(st.sampled_from(sorted(UNARY) + sorted(BINARY)), min_size=1, max_size=6), seed=st.integers(0, 999),
       fuse=st.booleans())
def test_random_programs(ops, seed, fuse):
    rng = np.random.default_rng(seed)
    def fn(a, b, w, up):
        h = a
        for name in ops:
            if name in UNARY: h = UNARY[name](h)
            else: h = BINARY[name](h, w if name == 'matmul' else b)
        loss = (h * up).sum()
        return (loss,) + mi.grad(loss, [a, b, w], materialize_grads=True)
    T = lambda *s: mi.Tensor(rng.standard_normal(s).astype('float32'), requires_grad=True)
    f = mi.compile(fn, fuse=fuse)
    for i in range(5):   # calls 4 and 5 replay, on new arguments
        args = (T(3, 4), T(4), T(4, 4), T(3, 4))
        got = f(*args)
        want = fn(*args)
        for g, e in zip(got, want): np.testing.assert_allclose(g.detach().numpy(), e.detach().numpy(), rtol=2e-5, atol=2e-5)
    assert f.program is not None

def _fused_kernels_and_inputs():
    """The distinct fused kernels of a captured CNN training step, each with random contents for its buffers; the
    kernel's own (CPU) function has run on a copy of them, so the returned `cpu` arrays are the results to match."""
    from minima.compile import _c_arg
    _, _, f = train(cnn, (6, 1, 6, 6), True, steps=4)
    fused = list({i.args[0].name: i for i in f.program.instrs if i.prim == 'fused'}.values())
    assert len(fused) >= 4 and any(len(i.args[1]) > 1 for i in fused)   # strided (broadcast) loads included
    rng, out = np.random.default_rng(0), []
    for ins in fused:
        spec = ins.args[4]
        init_ = {v: (rng.random(v.size) > 0.5 if v.dtype == 'bool' else rng.standard_normal(v.size)).astype(v.dtype)
                 for t, v in spec if t == 'buf'}
        cpu = {b: a.copy() for b, a in init_.items()}
        ins.args[0].fn(*[_c_arg(t, v, cpu) for t, v in spec])
        out.append((ins, init_, cpu))
    return out

def test_fused_kernels_on_the_cuda_emulator(tmp_path):
    "The CUDA C generated for each fused kernel of a training step computes what the CPU kernel computes."
    import ctypes, shutil, subprocess, sys
    from pathlib import Path
    from minima.compile import cuda_source, _c_arg
    if not shutil.which('g++'): pytest.skip('the CUDA emulator needs g++')
    emu = Path(__file__).resolve().parents[2] / 'tools' / 'cuda_emu'
    sys.path.insert(0, str(emu))
    from build import translate
    kernels = _fused_kernels_and_inputs()
    src = ['#include "cuda_runtime.h"']
    for j, (ins, _, _) in enumerate(kernels):
        cu = translate(cuda_source(ins))
        src.append(cu.replace('kernel_body', f'body{j}').replace('void kernel(', f'void k{j}('))
    (tmp_path / 'k.cpp').write_text('\n'.join(src))
    subprocess.run(['g++', '-std=c++20', '-O1', '-shared', '-fPIC', '-w', f'-I{emu}', '-o', str(tmp_path / 'k.so'),
                    str(tmp_path / 'k.cpp')], check=True)
    lib = ctypes.CDLL(str(tmp_path / 'k.so'))
    for j, (ins, init_, cpu) in enumerate(kernels):
        gpu = {b: a.copy() for b, a in init_.items()}
        getattr(lib, f'k{j}')(*[_c_arg(t, v, gpu) for t, v in ins.args[4]])
        for b in gpu: np.testing.assert_allclose(gpu[b], cpu[b], rtol=1e-6, atol=1e-6, err_msg=ins.args[0].name)

def test_fused_kernels_on_a_gpu(tmp_path):
    "The same CUDA C, compiled by nvcc and run on a real GPU (minima's CUDA device holds the buffers): the CPU's results."
    import ctypes, subprocess
    from minima.compile import cuda_source, _c_arg
    from minima.backend_ndarray.cuda import find_nvcc
    dev = mi.cuda()
    if not dev.enabled(): pytest.skip(f'CUDA device not available: {dev.why_disabled()}')
    kernels = _fused_kernels_and_inputs()
    src = [cuda_source(ins).replace('kernel_body', f'body{j}').replace('void kernel(', f'void k{j}(')
           for j, (ins, _, _) in enumerate(kernels)]
    (tmp_path / 'k.cu').write_text('\n'.join(src))
    subprocess.run([find_nvcc(), '-O2', '-shared', '-Xcompiler', '-fPIC', '-w', '-o', str(tmp_path / 'k.so'),
                    str(tmp_path / 'k.cu')], check=True)
    lib = ctypes.CDLL(str(tmp_path / 'k.so'))
    for j, (ins, init_, cpu) in enumerate(kernels):
        on_gpu = {}
        for b, a in init_.items():
            on_gpu[b] = dev.alloc(a.size, a.dtype.name); dev.from_numpy(a, on_gpu[b])
        args = [ctypes.c_void_p(on_gpu[v].ptr) if t == 'buf' else _c_arg(t, v, cpu) for t, v in ins.args[4]]
        getattr(lib, f'k{j}')(*args)
        dev.synchronize()
        for b in init_:
            got = dev.to_numpy(on_gpu[b], (b.size,), (1,), 0)
            np.testing.assert_allclose(got, cpu[b], rtol=1e-5, atol=1e-6, err_msg=ins.args[0].name)

def test_attention_dropout_draws_like_eager():
    "scaled_dot_product_attention draws its dropout mask on the host (rng.random(shape) >= p): replayed afresh."
    sdpa = mi.nn.functional.scaled_dot_product_attention
    rng = np.random.default_rng(0)
    q, k, v = (mi.Tensor(rng.standard_normal((2, 3, 5, 4)).astype('float32')) for _ in range(3))
    fn = lambda q, k, v: sdpa(q, k, v, dropout_p=0.4, is_causal=True)
    outs = {}
    for compiled in (False, True):
        f = mi.compile(fn) if compiled else fn
        init.manual_seed(3)
        outs[compiled] = [f(q, k, v).detach().numpy().copy() for _ in range(6)]
    assert not np.allclose(outs[True][4], outs[True][5])
    for a, b in zip(outs[False], outs[True]): np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6)

def test_static_kv_cache_decoding():
    "Every decoded token replays one program; tokens and logits are those of eager decoding and the full forward."
    from minima.nn import StaticDecoder
    init.manual_seed(0)
    gpt = nn.GPT(13, 16, n_layer=2, n_head=2, n_embd=16)
    dec = StaticDecoder(gpt, B=2)
    prompt = np.array([[1, 2, 3], [4, 5, 6]])
    ids = dec.generate(prompt, 10, temperature=0)
    assert dec.step.captures == 2 and len(dec.step.programs) == 1   # 13 tokens, one program
    np.testing.assert_array_equal(ids, nn.generate(gpt, prompt, 10, temperature=0))
    dec.reset(); gpt.eval()
    with mi.no_grad(): full = gpt(mi.Tensor(ids, requires_grad=False)).numpy()
    for t in range(ids.shape[1]):
        np.testing.assert_allclose(dec(ids[:, t:t + 1]).numpy()[:, 0], full[:, t], rtol=1e-5, atol=1e-5)
    assert dec.step.captures == 2 and dec.cache.pos == ids.shape[1]
    for t in range(ids.shape[1], 16): dec(ids[:, :1])
    with pytest.raises(ValueError, match='the cache holds 16 positions'): dec(ids[:, :1])
    with pytest.raises(ValueError, match='need 17 positions; the cache holds 16'): dec.generate(prompt, 15)
    assert dec.generate(prompt, 14).shape == (2, 17)   # the last token is sampled, never fed
    s = dec.step.program.stats
    assert any(i.prim == 'scatter_add' for i in dec.step.program.instrs) and s['kernels'] > 0

def test_row_reductions_fuse_with_their_chain():
    "softmax then a row sum: three kernels, each ending in a row reduction; no broadcast copies, no softmax buffer."
    x = mi.Tensor(np.random.default_rng(0).standard_normal((64, 50)).astype('float32'))
    g = lambda x: (nn.functional.softmax(x * 2.0 + 1.0, -1) * 3.0).sum(1)
    f = mi.compile(g)
    with mi.no_grad():
        for _ in range(4): out = f(x)
    instrs = f.program.instrs
    assert [i.prim for i in instrs] == ['fused'] * 3   # max | sub, exp, sum | divide, scale, sum
    reduced = [i for i in instrs if isinstance(i.args[5][-1][4], str) and i.args[5][-1][4] == 'reduce']
    assert [m.args[5][-1][3][0] for m in reduced] == ['max', 'sum', 'sum']
    np.testing.assert_allclose(out.detach().numpy(), g(x).detach().numpy(), rtol=1e-6, atol=1e-6)

def test_strided_kernels_vectorise_and_overlap_falls_back():
    """An LSTM cell's gate slices (strided reads of one buffer): the C kernel has its strides as constants and an
    `ivdep` inner loop, and matches eager; bound to buffers where an output overlaps an input, the kernel is rebuilt
    without `ivdep` (a vectorised loop there could read what it already wrote)."""
    from minima.compile import _lower_one, _IVDEP
    rng = np.random.default_rng(0)
    def cell(g, c):
        i, f, gg, o = (g[:, k * 8:(k + 1) * 8] for k in range(4))
        c2 = i.sigmoid() * gg.tanh() + f.sigmoid() * c
        return c2, o.sigmoid() * c2.tanh()
    f = mi.compile(cell)
    with mi.no_grad():
        for _ in range(5):
            g, c = (mi.Tensor(rng.standard_normal(s).astype('float32')) for s in ((6, 32), (6, 8)))
            for a, b in zip(f(g, c), cell(g, c)): np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    fused = [i for i in f.program.instrs if i.prim == 'fused' and i.args[0].lang == 'c']
    if not fused: pytest.skip('no C compiler here')
    ins = max(fused, key=lambda i: len(i.args[2]))
    src = ins.args[0].source
    assert _IVDEP in src and ' * 32 + i1]' in src
    P = dict(f.program.P)
    assert _lower_one(ins, P).func is ins.args[0].fn
    out, inp = ins.args[3][0], next(b for b in ins.args[2] if b not in ins.args[3])
    big = np.zeros(P[out].size + P[inp].size, P[inp].dtype)
    P[inp], P[out] = big[:P[inp].size], big[P[inp].size - 1:][:P[out].size]   # the output starts in the input
    call = _lower_one(ins, P)
    assert call.func is not ins.args[0].fn

@pytest.mark.parametrize('n', [3, 8, 13, 256, 300, 517])
def test_row_reductions_in_lanes_and_chunks(n):
    """The C kernels reduce a row in chunks of 256 and in 8 lanes: rows shorter than a lane set, not a multiple of 8,
    across chunks; a NaN anywhere in a row makes its max and sum NaN, an inf its sum inf, as eager."""
    rng = np.random.default_rng(n)
    a = rng.standard_normal((6, n)).astype('float32')
    a[1, n // 2] = np.nan; a[2, -1] = np.inf; a[3, 0] = -np.inf; a[4, :] = -np.inf
    x = mi.Tensor(a)
    g = lambda x: ((x * 2.0 + 1.0).amax(1), (x * 0.5 - 1.0).sum(1), (x * 0.5).exp().sum(1))
    f = mi.compile(g)
    with mi.no_grad():
        for _ in range(4): got = f(x)
        want = g(x)
    assert sum(i.prim == 'fused' for i in f.program.instrs) >= 2 or f.program.backend != 'c'
    for u, v in zip(got, want):
        np.testing.assert_allclose(u.numpy(), v.numpy(), rtol=2e-6, atol=1e-6, equal_nan=True)
        assert np.array_equal(np.isnan(u.numpy()), np.isnan(v.numpy()))

def test_im2col_copies_become_c_loops():
    "A conv net's im2col copies (strided reads of rows) run as single-copy C kernels; the step still matches eager."
    init.manual_seed(0)
    conv = nn.Conv2d(2, 4, 3, padding=1)
    def fn(x): return (conv(x) ** 2).sum()
    f = mi.compile(fn)
    x = mi.Tensor(np.random.default_rng(0).standard_normal((8, 2, 12, 12)).astype('float32'))
    with mi.no_grad():
        for _ in range(5): np.testing.assert_allclose(f(x).numpy(), fn(x).numpy(), rtol=1e-5)
    if f.program.backend != 'c': pytest.skip('no C compiler here')
    copies = [i for i in f.program.instrs if i.prim == 'fused' and len(i.args[5]) == 1 and i.args[5][0][3][0] == 'cast']
    assert copies and all(i.args[5][0][1][0][1] is not None for i in copies)   # each reads through strides
    rows = [i for i in f.program.instrs if i.prim == 'compact' and i.args[1].size >= 4096 and i.args[3][-1] in (0, 1)]
    assert not rows   # no big row-reading copy is left to numpy

@pytest.mark.parametrize('m,n,q,tb', [(32, 256, 1024, True), (32, 1024, 256, False), (16, 288, 1100, False),
                                      (8, 9, 2048, False), (128, 256, 1024, False)])
def test_products_with_few_rows_are_the_same(m, n, q, tb):
    """The replay's matrix product (turned around for few rows and many columns) gives numpy's result (with OpenBLAS
    the same bits; another BLAS may sum in another order)."""
    from minima.compile import _product
    rng = np.random.default_rng(m + n + q)
    a = rng.standard_normal((m, n)).astype('float32')
    w = rng.standard_normal((q, n)).astype('float32')
    b = w.T if tb else np.ascontiguousarray(w.T)   # a transposed weight, as `h @ W.T`, or a plain one
    o = np.full((m, q), np.nan, 'float32')
    _product(a, b, o)()
    np.testing.assert_allclose(o, np.matmul(a, b), rtol=1e-5, atol=1e-4)
