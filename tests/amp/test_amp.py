"""Mixed precision (chapter 24): autocast's output dtypes against torch's CPU autocast, op by op, and GradScaler's
scale sequence and skipped steps against torch's GradScaler, step for step, with injected infs."""
import numpy as np, pytest
import minima as mi
import minima.nn.functional as F

torch = pytest.importorskip('torch')
TF = torch.nn.functional

def _inputs(lib, rng):
    "The same float32 inputs as minima and torch tensors."
    def t(a):
        return (mi.tensor(a) if lib is mi else torch.tensor(a))
    s = lambda *shape: rng.standard_normal(shape).astype('float32')
    return dict(x=t(s(2, 3, 8, 8)), w=t(s(4, 3, 3, 3)), a=t(s(4, 5)), b=t(s(5, 6)), A=t(s(2, 4, 5)), B=t(s(2, 5, 6)),
                lw=t(s(6, 5)), lb=t(s(6)), x1=t(s(2, 3, 10)), w1=t(s(4, 3, 3)), q=t(s(2, 2, 4, 8)),
                p=t(rng.uniform(0.1, 0.9, (4, 5)).astype('float32')), y=t(np.array([0, 1, 2, 4])))

def _ops(lib, f, d, low='bfloat16'):
    "Every op of the policy tables that minima has, called the same way in minima (lib=mi) and torch."
    return {
        'matmul': lambda: d['a'] @ d['b'], 'mm': lambda: lib.mm(d['a'], d['b']), 'bmm': lambda: lib.bmm(d['A'], d['B']),
        'linear': lambda: f.linear(d['a'], d['lw'], d['lb']), 'conv2d': lambda: f.conv2d(d['x'], d['w']),
        'conv1d': lambda: f.conv1d(d['x1'], d['w1']),
        'conv_transpose2d': lambda: f.conv_transpose2d(d['x'], d['w'].transpose(0, 1)),
        'sdpa': lambda: f.scaled_dot_product_attention(d['q'], d['q'], d['q']),
        'softmax': lambda: f.softmax(d['a'], -1), 'log_softmax': lambda: f.log_softmax(d['a'], -1),
        'layer_norm': lambda: f.layer_norm(d['a'], (5,)), 'group_norm': lambda: f.group_norm(d['x'], 1),
        'sum': lambda: d['a'].sum(), 'mean': lambda: d['a'].mean(), 'exp': lambda: d['a'].exp(),
        'log': lambda: d['p'].log(), 'tanh': lambda: d['a'].tanh(), 'pow': lambda: d['a'].pow(2),
        'sqrt': lambda: d['p'].sqrt(), 'rsqrt': lambda: d['p'].rsqrt(), 'reciprocal': lambda: d['p'].reciprocal(),
        'logsumexp': lambda: d['a'].logsumexp(-1), 'cumsum': lambda: d['a'].cumsum(-1), 'prod': lambda: d['a'].prod(),
        'norm': lambda: d['a'].norm(), 'relu': lambda: f.relu(d['a']), 'gelu': lambda: f.gelu(d['a']),
        'sigmoid': lambda: d['a'].sigmoid(), 'softplus': lambda: f.softplus(d['a']),
        'cross_entropy': lambda: f.cross_entropy(d['a'], d['y']), 'nll_loss': lambda: f.nll_loss(d['a'], d['y']),
        'mse_loss': lambda: f.mse_loss(d['a'], d['p']), 'l1_loss': lambda: f.l1_loss(d['a'], d['p']),
        'smooth_l1_loss': lambda: f.smooth_l1_loss(d['a'], d['p']), 'huber_loss': lambda: f.huber_loss(d['a'], d['p']),
        'binary_cross_entropy': lambda: f.binary_cross_entropy(d['p'], d['p']),
        'bce_with_logits': lambda: f.binary_cross_entropy_with_logits(d['a'], d['p']),
        'kl_div': lambda: f.kl_div(d['a'], d['p'], reduction='batchmean'),
        'max_pool2d': lambda: f.max_pool2d(d['x'], 2), 'avg_pool2d': lambda: f.avg_pool2d(d['x'], 2),
        'embedding': lambda: f.embedding(d['y'], d['lw']),
        'cat': lambda: lib.cat([d['a'].to(getattr(lib, low)), d['a']]),
        'stack': lambda: lib.stack([d['a'].to(getattr(lib, low)), d['a'].to(getattr(lib, low))]),
        'cat64': lambda: lib.cat([d['a'].to(getattr(lib, low)), d['a'].double()]),
    }

def _dtypes(lib, f, low, cast_inputs_to=None):
    d = _inputs(lib, np.random.default_rng(0))
    if cast_inputs_to is not None:
        d = {k: (v.to(getattr(lib, cast_inputs_to)) if v.dtype in (lib.float32, 'float32') else v) for k, v in d.items()}
    with lib.autocast('cpu', dtype=getattr(lib, low)):
        return {k: _dtype_or_error(op) for k, op in _ops(lib, f, d, low).items()}

def _dtype_or_error(op):
    "The output's dtype name, or the error's class where the op raises (it must then raise in both libraries)."
    try: return str(op().dtype).replace('torch.', '')
    except RuntimeError: return 'RuntimeError'

@pytest.mark.parametrize('inputs', [None, 'bfloat16', 'float16'])
@pytest.mark.parametrize('low', ['bfloat16', 'float16'])
def test_autocast_output_dtypes_equal_torchs(low, inputs):
    "Every op under CPU autocast gives torch's output dtype, from float32 inputs and from 16-bit inputs."
    got, want = _dtypes(mi, F, low, inputs), _dtypes(torch, TF, low, inputs)
    assert got == want, {k: (got[k], want[k]) for k in got if got[k] != want[k]}

def test_autocast_promote_refuses_the_other_16_bit_dtype_as_torch():
    "cat of a float16 and a float32 tensor inside a bfloat16 region: torch raises (at::autocast::prioritize); so do we."
    for lib in (mi, torch):
        a = lib.ones(3)
        with lib.autocast('cpu', dtype=lib.bfloat16):
            with pytest.raises(RuntimeError): lib.cat([a.half(), a])
            assert lib.cat([a, a.half()]).dtype in ('float32', torch.float32)   # float32 first: no error, as torch

def test_autocast_region_gradients_and_nesting():
    "Parameters stay float32 and get float32 gradients; autocast(enabled=False) inside turns it off; state restores."
    lin = mi.nn.Linear(5, 3)
    x = mi.randn(4, 5)
    with mi.autocast('cpu'):
        y = lin(x)
        assert y.dtype == 'bfloat16' and mi.is_autocast_enabled('cpu') and mi.get_autocast_dtype('cpu') == 'bfloat16'
        with mi.autocast('cpu', enabled=False): assert lin(x).dtype == 'float32'
        assert lin(x).dtype == 'bfloat16'
    assert not mi.is_autocast_enabled('cpu') and lin(x).dtype == 'float32'
    y.float().sum().backward()
    assert lin.weight.grad.dtype == 'float32' and lin.bias.grad.dtype == 'float32'
    with pytest.warns(UserWarning, match='not supported'):
        with mi.autocast('cpu', dtype=mi.float64): assert lin(x).dtype == 'float32'
    with pytest.raises(RuntimeError, match='device_type'): mi.autocast('tpu')
    @mi.autocast('cpu')
    def f(z): return lin(z)
    assert f(x).dtype == 'bfloat16' and mi.amp.autocast is mi.autocast

def _scaler_run(lib, infs, **kw):
    "Train a tiny model; at the steps in `infs` one gradient becomes inf. Record (scale, tracker, weight)."
    g = np.random.default_rng(1)
    w = lib.tensor(g.standard_normal((3, 2)).astype('float32'), requires_grad=True)
    opt = (lib.optim.SGD([w], lr=0.1))
    sc = (lib.amp.GradScaler('cpu', **kw))
    out = []
    for i in range(len(infs)):
        x = lib.tensor(g.standard_normal((4, 3)).astype('float32'))
        opt.zero_grad()
        sc.scale((x @ w).pow(2).mean()).backward()
        if infs[i]:
            gw = w.grad.numpy().copy(); gw[0, 0] = np.inf if infs[i] == 1 else np.nan
            w.grad = lib.tensor(gw)
        sc.step(opt); sc.update()
        out.append((sc.get_scale(), sc.state_dict()['_growth_tracker'], w.detach().numpy().copy()))
    return out, sc.state_dict()

@pytest.mark.parametrize('kw', [dict(), dict(init_scale=1024., growth_factor=2., backoff_factor=0.5, growth_interval=3),
                                dict(init_scale=3.0, growth_factor=1.7, backoff_factor=0.3, growth_interval=2)])
def test_gradscaler_matches_torch_step_for_step(kw):
    "Scale, growth tracker and weights after each step equal torch's; skipped steps leave the weights alone."
    infs = [0, 0, 1, 0, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0, 1, 0]
    got, gsd = _scaler_run(mi, infs, **kw)
    want, tsd = _scaler_run(torch, infs, **kw)
    assert [s for s, _, _ in got] == [s for s, _, _ in want]
    assert [t for _, t, _ in got] == [t for _, t, _ in want]
    for (_, _, a), (_, _, b) in zip(got, want): np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert gsd == tsd
    skipped = [i for i in range(1, len(infs)) if np.array_equal(got[i][2], got[i - 1][2])]
    assert skipped == [i for i, v in enumerate(infs) if v]

def test_gradscaler_refuses_what_torch_refuses():
    w = mi.tensor(np.ones((2, 2), 'float32'), requires_grad=True)
    opt, sc = mi.optim.SGD([w], lr=0.1), mi.amp.GradScaler('cpu')
    sc.scale(w.sum()).backward()
    sc.unscale_(opt)
    with pytest.raises(RuntimeError, match='already been called'): sc.unscale_(opt)
    sc.step(opt)
    with pytest.raises(RuntimeError, match='already been called'): sc.step(opt)
    sc.update()
    with pytest.raises(ValueError, match='growth_factor'): mi.amp.GradScaler(growth_factor=1.0)
    h = mi.tensor(np.ones(2, 'float16'), requires_grad=True)
    o2 = mi.optim.SGD([h], lr=0.1)
    sc.scale(h.float().sum()).backward()
    with pytest.raises(ValueError, match='FP16 gradients'): sc.unscale_(o2)
    off = mi.amp.GradScaler('cpu', enabled=False)
    assert off.get_scale() == 1.0 and off.state_dict() == {} and off.scale(w) is w
