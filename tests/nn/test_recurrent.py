"""nn.RNN / nn.LSTM / nn.GRU and their cells against torch with copied weights (forward, backward with random
upstream gradients, float32 and float64), the recurrence op's finite differences, and the error messages."""
import math, numpy as np, pytest, torch
import minima as mi
from minima import nn
from minima.testing import gradcheck

TOL = {'float32': dict(rtol=1e-4, atol=1e-5), 'float64': dict(rtol=1e-7, atol=1e-9)}

@pytest.fixture(autouse=True)
def _threads(one_blas_thread): torch.set_num_threads(1); yield

def _torch_twin(m, cls, kw, dtype):
    t = getattr(torch.nn, cls)(m.input_size, m.hidden_size, **kw).to(getattr(torch, dtype))
    t.load_state_dict({k: torch.tensor(v.numpy()) for k, v in m.state_dict().items()})
    return t

def _close(a, b, dtype, what):
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else b
    np.testing.assert_allclose(a, b, err_msg=what, **TOL[dtype])

LAYERS = [('RNN', {}), ('RNN', dict(nonlinearity='relu')), ('RNN', dict(num_layers=2, bias=False)),
          ('RNN', dict(nonlinearity='relu', num_layers=3, batch_first=True)),
          ('LSTM', {}), ('LSTM', dict(num_layers=2)), ('LSTM', dict(bias=False, batch_first=True)),
          ('LSTM', dict(num_layers=3, batch_first=True)),
          ('GRU', {}), ('GRU', dict(num_layers=2)), ('GRU', dict(bias=False)), ('GRU', dict(num_layers=2, batch_first=True))]

@pytest.mark.parametrize('dtype', ['float32', 'float64'])
@pytest.mark.parametrize('h0', [True, False], ids=['h0', 'no_h0'])
@pytest.mark.parametrize('cls,kw', LAYERS, ids=[f'{c}-{k}' for c, k in LAYERS])
def test_layer_matches_torch(cls, kw, h0, dtype):
    rng = np.random.default_rng(0)
    T, B, d, H = 6, 3, 4, 5
    mi.init.manual_seed(1)
    m = getattr(nn, cls)(d, H, dtype=dtype, **kw)
    t = _torch_twin(m, cls, kw, dtype)
    L, bf, lstm = kw.get('num_layers', 1), kw.get('batch_first', False), cls == 'LSTM'
    x = rng.standard_normal((B, T, d) if bf else (T, B, d)).astype(dtype)
    st = [rng.standard_normal((L, B, H)).astype(dtype) for _ in range(2 if lstm else 1)]
    xm, xt = mi.Tensor(x, dtype=dtype), torch.tensor(x, requires_grad=True)
    sm = [mi.Tensor(s, dtype=dtype) for s in st]
    stt = [torch.tensor(s, requires_grad=True) for s in st]
    arg_m = (tuple(sm) if lstm else sm[0]) if h0 else None
    arg_t = (tuple(stt) if lstm else stt[0]) if h0 else None
    om, hm = m(xm, arg_m)
    ot, ht = t(xt, arg_t)
    ys_m, ys_t = [om] + (list(hm) if lstm else [hm]), [ot] + (list(ht) if lstm else [ht])
    for a, b, n in zip(ys_m, ys_t, ('output', 'h_n', 'c_n')):
        assert a.shape == tuple(b.shape) and a.dtype == dtype
        _close(a.detach().numpy(), b, dtype, n)
    gs = [rng.standard_normal(y.shape).astype(dtype) for y in ys_m]
    sum((y * mi.Tensor(g, dtype=dtype)).sum() for y, g in zip(ys_m, gs)).backward()
    sum((y * torch.tensor(g)).sum() for y, g in zip(ys_t, gs)).backward()
    tp = dict(t.named_parameters())
    assert [k for k, _ in m.named_parameters()] == list(tp)
    for k, p in m.named_parameters():
        assert p.grad.dtype == dtype
        _close(p.grad.numpy(), tp[k].grad, dtype, f'grad {k}')
    _close(xm.grad.numpy(), xt.grad, dtype, 'grad input')
    if h0:
        for a, b in zip(sm, stt): _close(a.grad.numpy(), b.grad, dtype, 'grad h0/c0')

CELLS = [('RNNCell', {}), ('RNNCell', dict(nonlinearity='relu', bias=False)), ('LSTMCell', {}),
         ('LSTMCell', dict(bias=False)), ('GRUCell', {}), ('GRUCell', dict(bias=False))]

@pytest.mark.parametrize('dtype', ['float32', 'float64'])
@pytest.mark.parametrize('hx', [True, False], ids=['hx', 'no_hx'])
@pytest.mark.parametrize('batched', [True, False], ids=['batched', 'unbatched'])
@pytest.mark.parametrize('cls,kw', CELLS, ids=[f'{c}-{k}' for c, k in CELLS])
def test_cell_matches_torch(cls, kw, batched, hx, dtype):
    rng = np.random.default_rng(2)
    B, d, H = 4, 3, 5
    m = getattr(nn, cls)(d, H, dtype=dtype, **kw)
    t = _torch_twin(m, cls, kw, dtype)
    lstm = cls == 'LSTMCell'
    x = rng.standard_normal((B, d) if batched else (d,)).astype(dtype)
    st = [rng.standard_normal((B, H) if batched else (H,)).astype(dtype) for _ in range(2 if lstm else 1)]
    xm, xt = mi.Tensor(x, dtype=dtype), torch.tensor(x, requires_grad=True)
    arg_m = (tuple(mi.Tensor(s, dtype=dtype) for s in st) if lstm else mi.Tensor(st[0], dtype=dtype)) if hx else None
    arg_t = (tuple(torch.tensor(s) for s in st) if lstm else torch.tensor(st[0])) if hx else None
    ym, yt = m(xm, arg_m), t(xt, arg_t)
    ym, yt = (list(ym), list(yt)) if lstm else ([ym], [yt])
    gs = [rng.standard_normal(y.shape).astype(dtype) for y in ym]
    for a, b in zip(ym, yt): _close(a.detach().numpy(), b, dtype, 'forward')
    sum((y * mi.Tensor(g, dtype=dtype)).sum() for y, g in zip(ym, gs)).backward()
    sum((y * torch.tensor(g)).sum() for y, g in zip(yt, gs)).backward()
    tp = dict(t.named_parameters())
    for k, p in m.named_parameters(): _close(p.grad.numpy(), tp[k].grad, dtype, f'grad {k}')
    _close(xm.grad.numpy(), xt.grad, dtype, 'grad input')

@pytest.mark.parametrize('cls', ['RNN', 'LSTM', 'GRU'])
def test_unbatched_sequence(cls):
    rng = np.random.default_rng(3)
    m = getattr(nn, cls)(3, 4, num_layers=2)
    t = _torch_twin(m, cls, dict(num_layers=2), 'float32')
    x = rng.standard_normal((5, 3)).astype('float32')
    om, hm = m(mi.Tensor(x))
    ot, ht = t(torch.tensor(x))
    _close(om.detach().numpy(), ot, 'float32', 'output')
    for a, b in zip(hm if cls == 'LSTM' else [hm], ht if cls == 'LSTM' else [ht]):
        assert a.shape == (2, 4)
        _close(a.detach().numpy(), b, 'float32', 'state')

def test_torch_init_and_names():
    mi.init.manual_seed(0)
    H = 50
    m = nn.LSTM(7, H, num_layers=2)
    k = 1 / math.sqrt(H)
    t = torch.nn.LSTM(7, H, num_layers=2)
    assert [(n, p.shape) for n, p in m.named_parameters()] == [(n, tuple(p.shape)) for n, p in t.named_parameters()]
    w = np.concatenate([p.detach().numpy().ravel() for p in m.parameters()])
    assert w.min() >= -k and w.max() <= k
    assert abs(w.std() - k / math.sqrt(3)) < 0.02 * k      # uniform(-k, k) has std k / sqrt(3)
    assert all(p.dtype == 'float32' for p in m.parameters())

def test_dropout_between_layers():
    mi.init.manual_seed(0)
    m = nn.LSTM(3, 4, num_layers=2, dropout=0.5)
    t = _torch_twin(m, 'LSTM', dict(num_layers=2, dropout=0.5), 'float32').eval()
    x = np.random.default_rng(0).standard_normal((6, 2, 3)).astype('float32')
    m.eval()
    _close(m(mi.Tensor(x))[0].detach().numpy(), t(torch.tensor(x))[0], 'float32', 'eval mode: no dropout')
    m.train()
    a, b = m(mi.Tensor(x))[0].detach().numpy(), m(mi.Tensor(x))[0].detach().numpy()
    assert not np.allclose(a, b)      # a fresh mask each call in training mode

def test_backward_twice_accumulates():
    "The op keeps its saved activations intact, so a second backward through the same graph gives the same gradient."
    mi.init.manual_seed(0)
    m = nn.LSTM(3, 4)
    x = mi.Tensor(np.random.default_rng(0).standard_normal((5, 2, 3)))
    out, _ = m(x)
    loss = (out * out).sum()
    loss.backward(retain_graph=True)   # torch's rule: a second backward needs the graph kept
    g1 = m.weight_hh_l0.grad.numpy().copy()
    loss.backward()
    np.testing.assert_allclose(m.weight_hh_l0.grad.numpy(), 2 * g1, rtol=1e-5, atol=1e-6)

def test_truncated_bptt_detach():
    "A detached carried state stops the gradient at the batch boundary."
    mi.init.manual_seed(0)
    m = nn.GRU(3, 4)
    rng = np.random.default_rng(0)
    _, h = m(mi.Tensor(rng.standard_normal((4, 2, 3))))
    x2 = mi.Tensor(rng.standard_normal((4, 2, 3)))
    out, _ = m(x2, h.detach())
    out.sum().backward()
    assert h.grad is None and x2.grad is not None

@pytest.mark.parametrize('mode', ['LSTM', 'GRU', 'RNN_TANH'])
def test_layer_gradcheck_float64(mode):
    "Finite differences in float64 through the input projection and the recurrence op, w.r.t. all inputs."
    rng = np.random.default_rng(4)
    T, B, d, H, G = 4, 2, 3, 3, {'LSTM': 4, 'GRU': 3, 'RNN_TANH': 1}[mode]
    P = lambda *s: mi.Tensor(rng.standard_normal(s) * 0.5, dtype='float64')
    x, w_ih, w_hh, b_ih, b_hh, h0, c0 = P(T, B, d), P(G * H, d), P(G * H, H), P(G * H), P(G * H), P(B, H), P(B, H)
    def f(x, w_ih, w_hh, b_ih, b_hh, h0, c0):
        gx = x @ w_ih.transpose() + b_ih
        res = mi.ops.recurrence(mode, gx, h0, w_hh, b_hh, c0=c0 if mode == 'LSTM' else None)
        return tuple(res)
    assert gradcheck(f, x, w_ih, w_hh, b_ih, b_hh, h0, c0, atol=1e-7, rtol=1e-5)

def test_module_gradcheck_float64():
    mi.init.manual_seed(0)
    m = nn.LSTM(3, 2, num_layers=2, dtype='float64')
    rng = np.random.default_rng(5)
    x, h0, c0 = (mi.Tensor(rng.standard_normal(s), dtype='float64') for s in ((3, 2, 3), (2, 2, 2), (2, 2, 2)))
    assert gradcheck(lambda x, h0, c0: (m(x, (h0, c0))[0],), x, h0, c0, atol=1e-7, rtol=1e-5)

def test_float32_stays_float32():
    m = nn.GRU(3, 4, num_layers=2)
    out, h = m(mi.Tensor(np.ones((2, 2, 3), dtype='float32')))
    assert out.dtype == h.dtype == 'float32'

BAD = [
    (lambda: nn.LSTM(4, 6)(mi.Tensor(np.zeros((5, 3, 7)))), ValueError, r'LSTM: expected input of shape .*\(T, B, 4\).*got \(5, 3, 7\)'),
    (lambda: nn.RNN(4, 6)(mi.Tensor(np.zeros((5, 3, 2, 4)))), ValueError, r'RNN: expected input'),
    (lambda: nn.GRU(4, 6, num_layers=2)(mi.Tensor(np.zeros((5, 3, 4))), mi.Tensor(np.zeros((1, 3, 6)))),
     ValueError, r'GRU: expected hx of shape \(2, 3, 6\), got \(1, 3, 6\)'),
    (lambda: nn.LSTM(4, 6)(mi.Tensor(np.zeros((5, 3, 4))), (mi.Tensor(np.zeros((1, 3, 6))), mi.Tensor(np.zeros((1, 3, 5))))),
     ValueError, r'LSTM: expected c_0 of shape \(1, 3, 6\), got \(1, 3, 5\)'),
    (lambda: nn.LSTM(4, 6)(mi.Tensor(np.zeros((5, 3, 4))), mi.Tensor(np.zeros((1, 3, 6)))), TypeError, r'LSTM: hx must be a tuple'),
    (lambda: nn.RNN(4, 6)(mi.Tensor(np.zeros((5, 3, 4))), mi.Tensor(np.zeros((1, 3, 6)), dtype='float64')),
     TypeError, r'RNN: hx has dtype float64 but the input has float32'),
    (lambda: nn.RNN(4, 6)(np.zeros((5, 3, 4))), TypeError, r'RNN: input must be a Tensor'),
    (lambda: nn.RNN(4, 6, nonlinearity='sigmoid'), ValueError, r"nonlinearity must be 'tanh' or 'relu'"),
    (lambda: nn.GRU(4, 0), ValueError, r'GRU: hidden_size must be a positive integer, got 0'),
    (lambda: nn.LSTM(4, 6, dropout=1.5), ValueError, r'LSTM: dropout must be a probability'),
    (lambda: nn.LSTMCell(4, 6)(mi.Tensor(np.zeros((3, 4))), mi.Tensor(np.zeros((3, 6)))), TypeError, r'LSTMCell: hx must be a tuple'),
    (lambda: nn.GRUCell(4, 6)(mi.Tensor(np.zeros((3, 5)))), ValueError, r'GRUCell: expected input of shape \(4,\) or \(B, 4\), got \(3, 5\)'),
    (lambda: nn.RNNCell(4, 6)(mi.Tensor(np.zeros((3, 4))), mi.Tensor(np.zeros((2, 6)))), ValueError, r'RNNCell: expected hx of shape \(3, 6\)'),
    (lambda: mi.ops.recurrence('LSTM', mi.Tensor(np.zeros((2, 3, 8))), mi.Tensor(np.zeros((3, 2))), mi.Tensor(np.zeros((8, 2)))),
     ValueError, r'recurrence\(LSTM\): c0 is required'),
    (lambda: mi.ops.recurrence('GRU', mi.Tensor(np.zeros((2, 3, 8))), mi.Tensor(np.zeros((3, 2))), mi.Tensor(np.zeros((8, 2)))),
     ValueError, r'recurrence\(GRU\): gx \(2, 3, 8\) needs h0 of shape \(3, 2\)'),
    (lambda: mi.ops.recurrence('LSTMX', mi.Tensor(np.zeros((2, 3, 8))), mi.Tensor(np.zeros((3, 2))), mi.Tensor(np.zeros((8, 2)))),
     ValueError, r'recurrence: unknown mode'),
]

@pytest.mark.parametrize('i', range(len(BAD)))
def test_errors(i):
    fn, exc, msg = BAD[i]
    with pytest.raises(exc, match=msg): fn()
