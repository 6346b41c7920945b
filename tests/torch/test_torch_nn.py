"""torch's face of nn, functional, init, optim and data (issue 21, 21b's part): each finding of the third torch audit
that concerns these modules, and each layer, loss, optimizer and schedule added for it, against torch 2.13 (forward
and backward with random upstream gradients, float64 where the layer allows it)."""
import io, math
from collections import OrderedDict
import numpy as np, pytest, torch
import minima as mi
from minima import nn, optim, init
import minima.nn.functional as F

TF = torch.nn.functional
RNG = np.random.default_rng

def M(a, grad=True): return mi.Tensor(np.asarray(a, dtype='float64'), dtype='float64', requires_grad=grad)
def T(a, grad=True): return torch.tensor(np.asarray(a, dtype='float64'), requires_grad=grad)
def close(a, b, tol=1e-9):
    a = a.detach().numpy() if hasattr(a, 'numpy') and not isinstance(a, np.ndarray) and not isinstance(a, torch.Tensor) else a
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else b
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)

def to_torch(m, tm):
    "Copy minima module `m`'s state into torch module `tm` (same names, same layouts) and return `tm`."
    tm.load_state_dict({k: torch.tensor(v.numpy()) for k, v in m.state_dict().items()}, strict=True)
    return tm

# --- nn.Linear: torch's layout -------------------------------------------------------------------------------------
def test_linear_has_torch_layout_and_loads_torch_state_dict():
    tl = torch.nn.Linear(6, 4).double()
    m = nn.Linear(6, 4).double()
    assert m.weight.shape == (4, 6) and m.bias.shape == (4,)
    m.load_state_dict(tl.state_dict())                    # torch tensors load as they are
    x = RNG(0).standard_normal((3, 2, 6)); g = RNG(1).standard_normal((3, 2, 4))
    xm, xt = M(x), T(x)
    ym, yt = m(xm), tl(xt)
    ym.backward(M(g, False)); yt.backward(torch.tensor(g))
    close(ym, yt); close(xm.grad, xt.grad); close(m.weight.grad, tl.weight.grad); close(m.bias.grad, tl.bias.grad)
    b = 1 / math.sqrt(300)
    w = nn.Linear(300, 200).weight.detach().numpy()
    assert np.abs(w).max() <= b and np.abs(w).max() > 0.9 * b    # torch's init bound 1/sqrt(in)
    import minima.needle as ndl
    assert ndl.nn.Linear(6, 4).weight.shape == (6, 4)            # needle keeps (in, out)

# --- silent wrong answers ------------------------------------------------------------------------------------------
def test_bce_gradient_is_finite_where_sigmoid_saturates():
    x = mi.Tensor(np.array([20., -20., .5], 'float32')); tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    F.binary_cross_entropy(mi.ops.sigmoid(x), mi.Tensor(np.array([0., 1., 1.], 'float32'))).backward()
    TF.binary_cross_entropy(torch.sigmoid(tx), torch.tensor([0., 1., 1.])).backward()
    assert np.isfinite(x.grad.numpy()).all(); close(x.grad, tx.grad, 1e-6)
    p, tp = M([0., 1., .3]), T([0., 1., .3])
    F.binary_cross_entropy(p, M([.5, .5, 1.], False)).backward()
    TF.binary_cross_entropy(tp, torch.tensor([.5, .5, 1.], dtype=torch.float64)).backward()
    close(p.grad, tp.grad, 1e-6)

def _qkv(seed, L=3, S=4, E=2):
    r = RNG(seed)
    return [r.standard_normal(s) for s in ((2, L, E), (2, S, E), (2, S, E))]

def test_sdpa_fully_masked_row_gives_zero_and_finite_grads():
    q, k, v = _qkv(0)
    mask = np.ones((3, 4), bool); mask[1] = False
    g = RNG(1).standard_normal((2, 3, 2))
    ms, ts = [M(a) for a in (q, k, v)], [T(a) for a in (q, k, v)]
    o = F.scaled_dot_product_attention(*ms, mi.Tensor(mask)); o.backward(M(g, False))
    to = TF.scaled_dot_product_attention(*ts, torch.tensor(mask)); to.backward(torch.tensor(g))
    assert np.all(o.detach().numpy()[:, 1] == 0)
    close(o, to)
    for a, b in zip(ms, ts): assert np.isfinite(a.grad.numpy()).all(); close(a.grad, b.grad)

def test_mha_padding_that_hides_a_whole_row_keeps_parameter_grads_finite():
    mi.init.manual_seed(0)
    mha = nn.MultiheadAttention(4, 2, batch_first=True).double()
    x = M(RNG(0).standard_normal((2, 3, 4)))
    causal = np.triu(np.ones((3, 3), bool), 1)
    pad = np.array([[True, False, False], [False, False, False]])   # sequence 0: its first key is padding
    out, _ = mha(x, x, x, attn_mask=causal, key_padding_mask=pad, need_weights=False)
    out.sum().backward()
    assert np.isfinite(out.detach().numpy()).all() and np.isfinite(mha.in_proj_weight.grad.detach().numpy()).all()

def test_sdpa_learned_float_mask_gets_its_gradient():
    q, k, v = _qkv(2)
    bias = RNG(3).standard_normal((3, 4)); g = RNG(4).standard_normal((2, 3, 2))
    b, tb = M(bias), T(bias)
    F.scaled_dot_product_attention(M(q), M(k), M(v), b).backward(M(g, False))
    TF.scaled_dot_product_attention(T(q), T(k), T(v), tb).backward(torch.tensor(g))
    assert b.grad is not None; close(b.grad, tb.grad)

def test_sdpa_integer_mask_raises_as_torch():
    q, k, v = _qkv(5)
    with pytest.raises(TypeError, match='attn_mask must be bool'):
        F.scaled_dot_product_attention(M(q), M(k), M(v), mi.Tensor(np.ones((3, 4), 'int64')))
    with pytest.raises(Exception):
        TF.scaled_dot_product_attention(T(q), T(k), T(v), torch.ones(3, 4, dtype=torch.int64))

@pytest.mark.parametrize('norm_type', [1, 2, 3.5, math.inf])
def test_clip_grad_norm_positional_norm_type(norm_type):
    gs = [RNG(6).standard_normal(s) * 3 for s in [(4, 3), (5,)]]
    ps = [nn.Parameter(M(np.zeros(g.shape))) for g in gs]; tps = [torch.nn.Parameter(T(np.zeros(g.shape))) for g in gs]
    for p, tp, g in zip(ps, tps, gs): p.grad = M(g, False); tp.grad = torch.tensor(g)
    n, tn = nn.utils.clip_grad_norm_(ps, 1.0, norm_type), torch.nn.utils.clip_grad_norm_(tps, 1.0, norm_type)
    assert abs(n - tn.item()) < 1e-9 and n.item() == float(n)
    for p, tp in zip(ps, tps): close(p.grad, tp.grad)

def test_clip_grad_of_a_single_tensor_and_by_value():
    g = RNG(7).standard_normal((3, 4)) * 3
    p, tp = nn.Parameter(M(np.zeros((3, 4)))), torch.nn.Parameter(T(np.zeros((3, 4))))
    p.grad, tp.grad = M(g, False), torch.tensor(g)
    assert abs(optim.clip_grad_norm_(p, 1.0) - torch.nn.utils.clip_grad_norm_(tp, 1.0).item()) < 1e-9
    close(p.grad, tp.grad)
    p.grad, tp.grad = M(g, False), torch.tensor(g)
    nn.utils.clip_grad_value_([p], 0.5); torch.nn.utils.clip_grad_value_([tp], 0.5)
    close(p.grad, tp.grad)

def test_label_smoothing_with_every_target_ignored_gives_zero_grad():
    x, tx = M(RNG(8).standard_normal((3, 4))), T(RNG(8).standard_normal((3, 4)))
    l = F.cross_entropy(x, mi.Tensor(np.full(3, -100)), label_smoothing=0.1); l.backward()
    tl = TF.cross_entropy(tx, torch.full((3,), -100), label_smoothing=0.1); tl.backward()
    assert np.isnan(l.item()) == math.isnan(tl.item()) and np.all(x.grad.numpy() == 0)
    close(x.grad, tx.grad)

def _sched_lrs(make, n, poke=None):
    out = []
    for lib in (optim, torch.optim):
        p = nn.Parameter(init.ones(2)) if lib is optim else torch.nn.Parameter(torch.ones(2))
        o = lib.SGD([p], lr=0.1)
        s = make(lib.lr_scheduler, o)
        lrs = []
        for i in range(n):
            if poke and i == poke[0]:
                for g in o.param_groups: g['lr'] = poke[1]
            o.step(); s.step(); lrs.append(o.param_groups[0]['lr'])
        out.append(lrs)
    return out

@pytest.mark.parametrize('name,make', [
    ('StepLR', lambda L, o: L.StepLR(o, 2, 0.5)),
    ('MultiStepLR', lambda L, o: L.MultiStepLR(o, [1, 4, 4], 0.3)),
    ('ExponentialLR', lambda L, o: L.ExponentialLR(o, 0.9)),
    ('LambdaLR', lambda L, o: L.LambdaLR(o, lambda e: 0.95 ** e)),
    ('MultiplicativeLR', lambda L, o: L.MultiplicativeLR(o, lambda e: 0.9)),
    ('ConstantLR', lambda L, o: L.ConstantLR(o, 0.25, 3)),
    ('LinearLR', lambda L, o: L.LinearLR(o, 0.2, 1.0, 4)),
    ('PolynomialLR', lambda L, o: L.PolynomialLR(o, 5, 1.5)),
    ('CosineAnnealingLR', lambda L, o: L.CosineAnnealingLR(o, 4, 0.01)),
    ('CosineAnnealingWarmRestarts', lambda L, o: L.CosineAnnealingWarmRestarts(o, 2, 2, 0.001)),
    ('SequentialLR', lambda L, o: L.SequentialLR(o, [L.ConstantLR(o, 0.1, 2), L.ExponentialLR(o, 0.8)], [3])),
])
@pytest.mark.parametrize('poke', [None, (3, 0.05)])
def test_schedulers_match_torch_and_keep_an_lr_set_by_hand(name, make, poke):
    ours, theirs = _sched_lrs(make, 9, poke)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-15)

def test_lr_find_restores_eval_mode():
    from minima.learner import Learner
    from minima import data
    X = RNG(9).standard_normal((64, 2)).astype('float32'); y = (X[:, 0] > 0).astype('int64')
    dl = data.DataLoader(data.NDArrayDataset(X, y), batch_size=16)
    model = nn.Sequential(nn.Linear(2, 8), nn.Dropout(0.5), nn.ReLU(), nn.Linear(8, 2))
    model.eval()
    Learner(model, dl, dl).lr_find(num_it=10, show_plot=False)
    assert not any(m.training for m in model.modules())

def _net(N):
    class Net(N.Module):
        def __init__(self):
            super().__init__()
            self.body = N.Sequential(N.Linear(3, 4), N.BatchNorm1d(4), N.ReLU(), N.Linear(4, 2))
            self.scale = N.Parameter(init.ones(2) if N is nn else torch.ones(2))
            self.head = N.Linear(2, 2)
    return Net()

def test_state_dict_key_order_is_torch():
    assert list(_net(nn).state_dict()) == list(_net(torch.nn).state_dict())
    assert list(_net(nn).state_dict())[:2] == ['scale', 'body.0.weight']
    assert [k for k, _ in _net(nn).named_parameters()] == [k for k, _ in _net(torch.nn).named_parameters()]

def test_tied_weights_listed_under_every_name_and_torch_dict_loads():
    def build(N):
        m = N.Sequential(N.Embedding(5, 3), N.Linear(3, 5, bias=False))
        m[1].weight = m[0].weight
        return m
    m, tm = build(nn), build(torch.nn)
    assert list(m.state_dict()) == list(tm.state_dict()) == ['0.weight', '1.weight']
    assert len(m.parameters()) == 1
    m.load_state_dict(tm.state_dict())
    close(m[1].weight, tm[1].weight.detach().numpy(), 1e-7)

# --- crashes and missing API ---------------------------------------------------------------------------------------
def test_optimizers_take_frozen_and_named_parameters_and_torch_positional_order():
    m = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 1))
    m[0].requires_grad_(False)
    opt = optim.Adam(m.parameters(), 1e-2, (0.8, 0.9), 1e-6, 0.01)
    assert opt.param_groups[0]['betas'] == (0.8, 0.9) and opt.param_groups[0]['eps'] == 1e-6
    m(init.randn(5, 3)).sum().backward()
    w0 = m[0].weight.numpy().copy(); opt.step()
    assert np.array_equal(m[0].weight.numpy(), w0) and m[0].weight.grad is None
    named = optim.AdamW(m.named_parameters(), lr=1e-3)
    assert named.param_groups[0]['param_names'] == [k for k, _ in m.named_parameters()]
    with pytest.raises(TypeError, match='betas must be a pair'): optim.Adam(m.parameters(), 1e-3, 0.9)
    assert optim.SGD(m.parameters()).param_groups[0]['lr'] == torch.optim.SGD([torch.zeros(1)]).defaults['lr']

def test_torch_adam_state_dict_loads_and_steps():
    w0 = RNG(10).standard_normal((3, 2))
    tp = torch.nn.Parameter(torch.tensor(w0)); p = nn.Parameter(M(w0))
    topt = torch.optim.Adam([tp], lr=0.1, amsgrad=True)
    for i in range(3):
        tp.grad = torch.tensor(RNG(20 + i).standard_normal((3, 2))); topt.step()
    p.cached_data = M(tp.detach().numpy()).cached_data
    opt = optim.Adam([p], lr=0.5)
    opt.load_state_dict(topt.state_dict())
    g = RNG(30).standard_normal((3, 2))
    tp.grad, p.grad = torch.tensor(g), M(g, False)
    topt.step(); opt.step()
    close(p, tp.detach().numpy())

def test_dataloader_collates_lists_dicts_and_nested_tuples():
    from minima.utils.data import Dataset, DataLoader
    class D(Dataset):
        def __len__(self): return 6
        def __getitem__(self, i): return {'x': [np.full(2, i, 'float32'), i], 'y': (i % 2, (np.ones(3) * i, 'id'))}
    class TD(torch.utils.data.Dataset):
        def __len__(self): return 6
        def __getitem__(self, i): return D()[i]
    b, tb = next(iter(DataLoader(D(), batch_size=4))), next(iter(torch.utils.data.DataLoader(TD(), batch_size=4)))
    close(b['x'][0], tb['x'][0]); close(b['x'][1], tb['x'][1]); close(b['y'][0], tb['y'][0])
    close(b['y'][1][0], tb['y'][1][0]); assert b['y'][1][1] == list(tb['y'][1][1])

def test_utils_data_tensordataset_random_split_samplers_generator():
    from minima.utils import data
    X, y = np.arange(20.).reshape(10, 2), np.arange(10)
    ds = data.TensorDataset(mi.Tensor(X, requires_grad=False), mi.Tensor(y, requires_grad=False))
    assert [t.shape for t in ds[3]] == [(2,), ()]
    a, b = data.random_split(ds, [7, 3], generator=np.random.default_rng(0))
    assert sorted(list(a.indices) + list(b.indices)) == list(range(10)) and len(a) == 7
    o1 = [int(v.item()) for _, v in data.DataLoader(ds, shuffle=True, generator=np.random.default_rng(5))]
    o2 = [int(v.item()) for _, v in data.DataLoader(ds, shuffle=True, generator=np.random.default_rng(5))]
    assert o1 == o2 and sorted(o1) == list(range(10))
    bs = data.BatchSampler(data.SequentialSampler(ds), 4, drop_last=False)
    assert [yb.numpy().tolist() for _, yb in data.DataLoader(ds, batch_sampler=bs)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    one = list(data.DataLoader(ds, batch_size=None))
    assert len(one) == 10 and one[2][1].item() == 2

def test_sequential_from_ordereddict_and_append():
    seq = nn.Sequential(OrderedDict([('fc', nn.Linear(3, 4)), ('act', nn.ReLU())]))
    tseq = torch.nn.Sequential(OrderedDict([('fc', torch.nn.Linear(3, 4)), ('act', torch.nn.ReLU())]))
    assert [k for k, _ in seq.named_parameters()] == ['fc.weight', 'fc.bias'] and isinstance(seq.fc, nn.Linear)
    seq.append(nn.Linear(4, 2)); tseq.append(torch.nn.Linear(4, 2))
    assert list(seq.state_dict()) == list(tseq.state_dict())
    to_torch(seq, tseq)
    x = RNG(11).standard_normal((5, 3)).astype('float32')
    close(seq(mi.Tensor(x)), tseq(torch.tensor(x)), 1e-6)

def test_int32_indices_uint8_targets_soft_targets():
    w = RNG(12).standard_normal((6, 3))
    idx = np.array([[1, 5], [0, 5]], 'int32')
    close(F.embedding(mi.Tensor(idx), M(w)), TF.embedding(torch.tensor(idx), T(w)))
    x = RNG(13).standard_normal((4, 5)); y = np.array([1, 0, 4, 2], 'uint8')
    close(F.cross_entropy(M(x), mi.Tensor(y)), TF.cross_entropy(T(x), torch.tensor(y.astype('int64'))))
    p = RNG(14).uniform(0.1, 1, (4, 5)); p /= p.sum(1, keepdims=True)
    xm, xt, pm, pt = M(x), T(x), M(p), T(p)
    l, tl = F.cross_entropy(xm, pm, label_smoothing=0.1), TF.cross_entropy(xt, pt, label_smoothing=0.1)
    l.backward(); tl.backward()
    close(l, tl); close(xm.grad, xt.grad); close(pm.grad, pt.grad)

def test_clear_errors_for_bad_ids_and_empty_sequences():
    from minima.text import CharTokenizer
    from minima.bpe import BPETokenizer
    tok = CharTokenizer('abc')
    with pytest.raises(TypeError, match='integers'): tok.decode([1.7, 2.2])
    bpe = BPETokenizer.train('hello hello world', 260) if hasattr(BPETokenizer, 'train') else BPETokenizer()
    with pytest.raises(ValueError, match=r'id 9999 is not in the vocabulary'): bpe.decode([9999])
    with pytest.raises(TypeError, match='integers'): bpe.decode([1.5])
    for cls in (nn.RNN, nn.GRU, nn.LSTM):
        with pytest.raises(ValueError, match='sequence length'): cls(3, 4)(mi.Tensor(np.zeros((0, 2, 3), 'float32')))

def test_inplace_flags_are_accepted():
    x = M(RNG(15).standard_normal(5)).detach()     # in place on a leaf that requires grad is refused, as in torch
    want = np.maximum(x.numpy(), 0)
    close(nn.ReLU(inplace=True)(x), want); close(x, want); nn.Dropout(0.1, inplace=True)

# --- nn.init, Module API, save/load --------------------------------------------------------------------------------
@pytest.mark.parametrize('name,kw,std', [('xavier_uniform_', {}, math.sqrt(2 / 700)), ('xavier_normal_', {}, math.sqrt(2 / 700)),
                                         ('kaiming_uniform_', dict(nonlinearity='relu'), math.sqrt(2 / 400)),
                                         ('kaiming_normal_', dict(mode='fan_out', nonlinearity='relu'), math.sqrt(2 / 300)),
                                         ('normal_', dict(std=0.02), 0.02), ('trunc_normal_', dict(std=0.5), None),
                                         ('uniform_', dict(a=-1, b=1), 1 / math.sqrt(3))])
def test_nn_init_in_place_matches_torch_statistics(name, kw, std):
    lin, tw = nn.Linear(400, 300), torch.empty(300, 400)
    w = lin.weight
    getattr(nn.init, name)(lin.weight, **kw); getattr(torch.nn.init, name)(tw, **kw)
    s, ts = lin.weight.detach().numpy().std(), tw.std().item()
    assert lin.weight is w and lin.weight.dtype == 'float32' and abs(s - ts) / ts < 0.03
    if std: assert abs(s - std) / std < 0.03
    if name == 'trunc_normal_': assert np.abs(lin.weight.detach().numpy()).max() <= 2.0
    nn.init.zeros_(lin.bias); nn.init.constant_(lin.weight, 0.5)
    assert lin.bias.detach().numpy().max() == 0 and np.all(lin.weight.detach().numpy() == 0.5)

def test_module_apply_to_requires_grad_register():
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    seen = []
    m.apply(lambda mod: seen.append(type(mod).__name__))
    assert seen == ['Linear', 'BatchNorm1d', 'Sequential']
    m.double(); assert all(p.dtype == 'float64' for p in m.parameters()) and m[1].num_batches_tracked.dtype == 'int64'
    m.to('float32'); assert all(p.dtype == 'float32' for p in m.parameters())
    m.requires_grad_(False); assert not any(p.requires_grad for p in m.parameters())
    m.register_parameter('extra', nn.Parameter(init.zeros(2)))
    m.register_buffer('tmp', init.zeros(3), persistent=False)
    assert 'extra' in dict(m.named_parameters()) and 'tmp' in dict(m.named_buffers()) and 'tmp' not in m.state_dict()
    assert len(m.buffers()) == 4

def test_save_load_state_dict_and_checkpoint(tmp_path):
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    opt = optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    m(init.randn(6, 3)).sum().backward(); opt.step()
    mi.save({'model': m.state_dict(), 'opt': opt.state_dict(), 'epoch': 2, 'w': m[0].weight}, tmp_path / 'ck.pt')
    ck = mi.load(tmp_path / 'ck.pt')
    m2 = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    assert m2.load_state_dict(ck['model']) == ([], [])   # torch's (missing_keys, unexpected_keys)
    assert ck['epoch'] == 2 and isinstance(ck['w'], mi.Tensor) and list(ck['model']) == list(m.state_dict())
    for a, b in zip(m.state_dict().values(), m2.state_dict().values()): assert np.array_equal(a, b)
    opt2 = optim.SGD(m2.parameters(), lr=0.1, momentum=0.9); opt2.load_state_dict(ck['opt'])
    with pytest.raises(TypeError, match='cannot save'): mi.save({'f': lambda: 0}, io.BytesIO())

# --- new layers and losses against torch ---------------------------------------------------------------------------
LAYERS = [
    ('LeakyReLU', lambda N: N.LeakyReLU(0.2), (3, 5)),
    ('GroupNorm', lambda N: N.GroupNorm(2, 6), (2, 6, 3, 3)),
    ('GroupNorm no affine', lambda N: N.GroupNorm(3, 6, affine=False), (2, 6, 4)),
    ('Conv1d', lambda N: N.Conv1d(4, 6, 3, stride=2, padding=1), (2, 4, 9)),
    ('Conv1d groups dilation', lambda N: N.Conv1d(4, 6, 2, dilation=2, groups=2, bias=False), (2, 4, 7)),
    ('ConvTranspose2d', lambda N: N.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1), (2, 3, 4, 4)),
    ('ConvTranspose2d groups', lambda N: N.ConvTranspose2d(4, 6, (2, 3), stride=(1, 2), groups=2), (1, 4, 3, 3)),
    ('MaxPool1d', lambda N: N.MaxPool1d(3, 2, 1), (2, 3, 8)),
    ('AvgPool1d', lambda N: N.AvgPool1d(2), (2, 3, 8)),
    ('AdaptiveAvgPool2d', lambda N: N.AdaptiveAvgPool2d((3, 2)), (2, 3, 7, 5)),
    ('AdaptiveAvgPool2d global', lambda N: N.AdaptiveAvgPool2d(1), (2, 3, 4, 4)),
    ('Upsample scale', lambda N: N.Upsample(scale_factor=2), (1, 2, 3, 4)),
    ('Upsample size', lambda N: N.Upsample(size=(5, 7)), (1, 2, 3, 4)),
    ('Embedding padding_idx', lambda N: N.Embedding(6, 3, padding_idx=2), None),
    ('BatchNorm1d no affine', lambda N: N.BatchNorm1d(4, affine=False), (8, 4)),
    ('BatchNorm2d no running stats', lambda N: N.BatchNorm2d(3, track_running_stats=False), (4, 3, 2, 2)),
]

@pytest.mark.parametrize('name,make,shape', LAYERS, ids=[l[0] for l in LAYERS])
def test_new_layers_match_torch_forward_backward(name, make, shape):
    mi.init.manual_seed(0); torch.manual_seed(0)
    m, tm = make(nn).double(), make(torch.nn).double()
    if m.state_dict(): to_torch(m, tm)
    r = RNG(16)
    if shape is None:
        idx = np.array([[0, 2, 5], [2, 2, 1]])
        xm, xt = mi.Tensor(idx), torch.tensor(idx)
    else:
        a = r.standard_normal(shape); xm, xt = M(a), T(a)
    y, ty = m(xm), tm(xt)
    assert y.shape == tuple(ty.shape) and y.dtype == 'float64'
    close(y, ty)
    g = r.standard_normal(y.shape)
    y.backward(M(g, False)); ty.backward(torch.tensor(g))
    if shape is not None: close(xm.grad, xt.grad)
    for (k, p), (tk, tp) in zip(m.named_parameters(), tm.named_parameters()):
        assert k == tk; close(p.grad, tp.grad)

LOSSES = [
    ('NLLLoss', lambda N: N.NLLLoss(ignore_index=1), 'nll'),
    ('L1Loss sum', lambda N: N.L1Loss(reduction='sum'), 'real'),
    ('BCELoss', lambda N: N.BCELoss(), 'prob'),
    ('BCEWithLogitsLoss', lambda N: N.BCEWithLogitsLoss(reduction='none'), 'logit'),
    ('SmoothL1Loss', lambda N: N.SmoothL1Loss(beta=0.5), 'real'),
    ('SmoothL1Loss beta 0', lambda N: N.SmoothL1Loss(beta=0.0), 'real'),
    ('HuberLoss', lambda N: N.HuberLoss(delta=0.7), 'real'),
    ('KLDivLoss batchmean', lambda N: N.KLDivLoss(reduction='batchmean'), 'kl'),
    ('KLDivLoss log_target', lambda N: N.KLDivLoss(reduction='sum', log_target=True), 'kllog'),
]

@pytest.mark.parametrize('name,make,kind', LOSSES, ids=[l[0] for l in LOSSES])
def test_loss_modules_match_torch(name, make, kind):
    r = RNG(17)
    x = r.standard_normal((4, 5))
    if kind == 'nll': x = x - np.log(np.exp(x).sum(1, keepdims=True)); t = np.array([0, 1, 4, 2])
    elif kind == 'prob': x = r.uniform(0.05, 0.95, (4, 5)); t = r.uniform(0, 1, (4, 5))
    elif kind == 'kl':
        x = x - np.log(np.exp(x).sum(1, keepdims=True)); t = r.uniform(0, 1, (4, 5)); t[0, 0] = 0; t /= t.sum(1, keepdims=True)
    elif kind == 'kllog': x = x - np.log(np.exp(x).sum(1, keepdims=True)); t = np.log(r.dirichlet(np.ones(5), 4))
    else: t = r.standard_normal((4, 5)) * (2 if kind == 'real' else 1)
    xm, xt = M(x), T(x)
    tm_, tt = (mi.Tensor(t), torch.tensor(t)) if kind == 'nll' else (M(t, False), torch.tensor(t))
    l, tl = make(nn)(xm, tm_), make(torch.nn)(xt, tt)
    close(l, tl)
    g = r.standard_normal(l.shape)
    l.backward(M(g, False)); tl.backward(torch.tensor(g))
    close(xm.grad, xt.grad)

@pytest.mark.parametrize('name,kw', [('RMSprop', dict(lr=0.01, momentum=0.5, centered=True, weight_decay=0.1)),
                                     ('Adagrad', dict(lr=0.1, lr_decay=0.01)), ('Adadelta', dict(weight_decay=0.1)),
                                     ('Adamax', dict(lr=0.01)), ('NAdam', dict(lr=0.01, weight_decay=0.1)),
                                     ('RAdam', dict(lr=0.01, decoupled_weight_decay=True, weight_decay=0.1)),
                                     ('Adam', dict(lr=0.01, amsgrad=True, maximize=True)),
                                     ('SGD', dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True))])
def test_optimizers_match_torch(name, kw):
    r = RNG(18)
    w = r.standard_normal((4, 3))
    p, tp = nn.Parameter(M(w)), torch.nn.Parameter(T(w))
    o, to = getattr(optim, name)([p], **kw), getattr(torch.optim, name)([tp], **kw)
    for _ in range(12):
        g = r.standard_normal((4, 3)); p.grad, tp.grad = M(g, False), torch.tensor(g)
        o.step(); to.step()
    close(p, tp.detach().numpy(), 1e-8)

@pytest.mark.parametrize('batch_first', [True, False])
def test_multihead_attention_with_kdim_vdim_matches_torch(batch_first):
    mi.init.manual_seed(0)
    m = nn.MultiheadAttention(8, 2, batch_first=batch_first, kdim=5, vdim=3).double()
    tm = torch.nn.MultiheadAttention(8, 2, batch_first=batch_first, kdim=5, vdim=3).double()
    assert list(m.state_dict()) == list(tm.state_dict())
    to_torch(m, tm)
    r = RNG(19)
    sh = (lambda n, d: (2, n, d)) if batch_first else (lambda n, d: (n, 2, d))
    q, k, v = r.standard_normal(sh(4, 8)), r.standard_normal(sh(6, 5)), r.standard_normal(sh(6, 3))
    ms, ts = [M(a) for a in (q, k, v)], [T(a) for a in (q, k, v)]
    (o, w), (to, tw) = m(*ms), tm(*ts)
    close(o, to); close(w, tw)
    g = r.standard_normal(o.shape)
    o.backward(M(g, False)); to.backward(torch.tensor(g))
    for a, b in zip(ms, ts): close(a.grad, b.grad)
    for (k_, p), (_, tp) in zip(m.named_parameters(), tm.named_parameters()): close(p.grad, tp.grad)

@pytest.mark.parametrize('cls', ['RNN', 'LSTM', 'GRU'])
@pytest.mark.parametrize('batch_first,unbatched', [(False, False), (True, False), (False, True)])
def test_bidirectional_recurrent_layers_match_torch(cls, batch_first, unbatched):
    mi.init.manual_seed(0)
    m = getattr(nn, cls)(3, 4, num_layers=2, bidirectional=True, batch_first=batch_first).double()
    tm = getattr(torch.nn, cls)(3, 4, num_layers=2, bidirectional=True, batch_first=batch_first).double()
    assert list(m.state_dict()) == list(tm.state_dict())
    to_torch(m, tm)
    r = RNG(20)
    shape = (5, 3) if unbatched else ((2, 5, 3) if batch_first else (5, 2, 3))
    hshape = (4, 4) if unbatched else (4, 2, 4)
    x, h0 = r.standard_normal(shape), r.standard_normal(hshape)
    xm, xt, hm, ht = M(x), T(x), M(h0), T(h0)
    if cls == 'LSTM':
        c0 = r.standard_normal(hshape); cm, ct = M(c0), T(c0)
        (o, (h, c)), (to, (th, tc)) = m(xm, (hm, cm)), tm(xt, (ht, ct))
        close(c, tc)
    else: (o, h), (to, th) = m(xm, hm), tm(xt, ht)
    close(o, to); close(h, th)
    g, gh = r.standard_normal(o.shape), r.standard_normal(h.shape)
    ((o * M(g, False)).sum() + (h * M(gh, False)).sum()).backward()
    ((to * torch.tensor(g)).sum() + (th * torch.tensor(gh)).sum()).backward()
    close(xm.grad, xt.grad); close(hm.grad, ht.grad)
    for (k, p), (_, tp) in zip(m.named_parameters(), tm.named_parameters()): close(p.grad, tp.grad)


def test_sdpa_broadcasts_batch_dims_as_torch():
    "Audit: scaled_dot_product_attention with batch dims that broadcast (key (1, H, S, E), value (H, S, Ev)) crashed."
    import minima as mi
    from minima.testing import gradcheck
    F = mi.nn.functional
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((1, 3, 6, 5)), rng.standard_normal((3, 6, 7))
    g = rng.standard_normal((2, 3, 4, 7))
    mq, mk, mv = (mi.tensor(a, requires_grad=True) for a in (q, k, v))
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    out = F.scaled_dot_product_attention(mq, mk, mv, is_causal=True)
    tout = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    np.testing.assert_allclose(out.detach().numpy(), tout.detach().numpy(), rtol=1e-10, atol=1e-12)
    (out * mi.tensor(g)).sum().backward(); (tout * torch.tensor(g)).sum().backward()
    for a, b in ((mq, tq), (mk, tk), (mv, tv)):
        assert a.grad.shape == tuple(b.shape)
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-10, atol=1e-12)
    assert gradcheck(lambda a, b, c: F.scaled_dot_product_attention(a, b, c), *(mi.tensor(a[..., :3, :], requires_grad=True) for a in (q, k, v)))
    with pytest.raises(ValueError, match='do not broadcast'):
        F.scaled_dot_product_attention(mi.randn(2, 3, 4, 5), mi.randn(3, 3, 6, 5), mi.randn(3, 3, 6, 7))


# --- Module hooks as torch's (s2-21) -------------------------------------------------------------------------------
def _np(g): return None if g is None else (g.detach().numpy() if isinstance(g, torch.Tensor) else g.numpy())

def _mlp_pair(seed):
    tm = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3)).double()
    m = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).double()
    m.load_state_dict(tm.state_dict())
    return m, tm

@pytest.mark.parametrize('replace', ['none', 'pre', 'full', 'both'])
def test_full_backward_hooks_see_and_replace_gradients_like_torch(replace):
    """The full backward hook gets (grad_input, grad_output) of every layer, the pre-hook grad_output; a tuple they
    return replaces those gradients, and the input, parameter grads that follow agree with torch's."""
    r = RNG(3)
    x, g = r.standard_normal((4, 5)), r.standard_normal((4, 3))
    sx = M(r.standard_normal((4, 7)), False)   # what the replacing hooks multiply by
    logs = {}
    m, tm = _mlp_pair(0)
    for lib, net, X, G, S in [('mi', m, M(x), M(g, False), M(sx.numpy(), False)),
                              ('torch', tm, T(x), torch.tensor(g), torch.tensor(sx.numpy()))]:
        log = logs[lib] = []
        for name, layer in zip('abc', net):
            layer.register_full_backward_hook(lambda mod, gi, go, name=name: log.append(
                (name, 'full', [_np(t) for t in gi], [_np(t) for t in go])))
            layer.register_full_backward_pre_hook(lambda mod, go, name=name: log.append(
                (name, 'pre', [_np(t) for t in go])))
        if replace in ('pre', 'both'):   # scale the gradient arriving at the tanh
            net[1].register_full_backward_pre_hook(lambda mod, go, S=S: (go[0] * S,))
        if replace in ('full', 'both'):  # send a changed gradient on from the tanh to the first layer
            net[1].register_full_backward_hook(lambda mod, gi, go, S=S: (gi[0] * S + 1,))
        y = net(X)
        y.backward(G)
        logs[lib + '_grads'] = [_np(X.grad)] + [_np(p.grad) for p in net.parameters()]
    assert [e[:2] for e in logs['mi']] == [e[:2] for e in logs['torch']] == \
        [('c', 'pre'), ('c', 'full'), ('b', 'pre'), ('b', 'full'), ('a', 'pre'), ('a', 'full')]
    for em, et in zip(logs['mi'], logs['torch']):
        for lm, lt in zip(em[2:], et[2:]):
            assert len(lm) == len(lt)
            for a, b in zip(lm, lt):
                assert (a is None) == (b is None)
                if a is not None: close(a, b)
    for a, b in zip(logs['mi_grads'], logs['torch_grads']): close(a, b)

def test_backward_hooks_with_several_inputs_and_outputs_like_torch():
    "grad_input has one entry per positional argument, grad_output one per output: None where no tensor, no gradient."
    class Two:
        def forward(self, x, k, y): return x * 2 + y.sum(), y * 3, 5
    class TwoM(Two, nn.Module): pass
    class TwoT(Two, torch.nn.Module): pass
    r = RNG(4); x, y, g = r.standard_normal(3), r.standard_normal(2), r.standard_normal(3)
    res = {}
    for lib, mod, X, Y, G in [('mi', TwoM(), M(x), M(y), M(g, False)), ('torch', TwoT(), T(x), T(y), torch.tensor(g))]:
        log = res[lib] = []
        mod.register_full_backward_pre_hook(lambda m, go: log.append(('pre', [_np(t) for t in go])))
        mod.register_full_backward_hook(lambda m, gi, go: log.append(('full', [_np(t) for t in gi], [_np(t) for t in go])))
        a, b, c = mod(X, 7, Y)
        a.backward(G)                         # b unused: its grad_output is None; y still gets a gradient through a
        log.append(('grads', [_np(X.grad), _np(Y.grad)]))
    for em, et in zip(res['mi'], res['torch']):
        assert em[0] == et[0]
        for lm, lt in zip(em[1:], et[1:]):
            assert [a is None for a in lm] == [b is None for b in lt]
            for a, b in zip(lm, lt):
                if a is not None: close(a, b)
    assert len(res['mi']) == len(res['torch']) == 3

def test_backward_hook_when_no_input_requires_grad_and_bad_returns():
    "No input requiring grad: the full hook runs at the outputs with grad_input all None (torch warns too)."
    lin = nn.Linear(2, 3)
    seen = []
    lin.register_full_backward_hook(lambda m, gi, go: seen.append((gi, go[0].shape)))
    with pytest.warns(UserWarning, match='no inputs require gradients'):
        lin(mi.ones(4, 2)).sum().backward()
    assert seen == [((None,), (4, 3))] and lin.weight.grad is not None
    lin2 = nn.Linear(2, 3)
    lin2.register_full_backward_hook(lambda m, gi, go: (mi.ones(4, 2),))
    with pytest.warns(UserWarning), pytest.raises(RuntimeError, match='should always return None'):
        lin2(mi.ones(4, 2)).sum().backward()
    lin3 = nn.Linear(2, 3)
    h = lin3.register_full_backward_hook(lambda m, gi, go: (gi[0], gi[0]))
    x = mi.ones(4, 2, requires_grad=True)
    with pytest.raises(RuntimeError, match='invalid number of gradients: got 2, but expected 1'):
        lin3(x).sum().backward()
    h.remove()
    h = lin3.register_full_backward_pre_hook(lambda m, go: (mi.ones(5, 5),))
    with pytest.raises(RuntimeError, match=r'entry 0 must be None or a Tensor of shape \(4, 3\)'):
        lin3(x).sum().backward()
    h.remove()
    lin3(x).sum().backward()                  # removed: plain backward again
    assert np.allclose(x.grad.detach().numpy(), np.tile(lin3.weight.detach().numpy().sum(0), (4, 1)))

def test_backward_hooks_removed_by_handle_and_context_and_no_grad():
    lin, calls = nn.Linear(2, 2), []
    x = mi.ones(1, 2, requires_grad=True)
    with lin.register_full_backward_hook(lambda m, gi, go: calls.append(1)):
        lin(x).sum().backward()
    lin(x).sum().backward()
    assert calls == [1]
    lin.register_full_backward_hook(lambda m, gi, go: calls.append(2))
    with mi.no_grad(): y = lin(x)             # no graph: nothing to hook, as torch
    assert y.grad_fn is None and calls == [1]
    y = lin(x); y.sum().backward(retain_graph=True); y.sum().backward()   # each backward runs the hook
    assert calls == [1, 2, 2]

def test_backward_hook_on_lstm_and_second_order_like_torch():
    "An LSTM's output (out, (h, c)): only the top-level tensor is hooked, as torch; double backward is unchanged."
    r = RNG(5)
    tl = torch.nn.LSTM(3, 4).double(); ml = nn.LSTM(3, 4).double(); ml.load_state_dict(tl.state_dict())
    x, g = r.standard_normal((5, 2, 3)), r.standard_normal((5, 2, 4))
    res = {}
    for lib, mod, X, G in [('mi', ml, M(x), M(g, False)), ('torch', tl, T(x), torch.tensor(g))]:
        log = res[lib] = []
        mod.register_full_backward_hook(lambda m, gi, go: log.append(([_np(t) for t in gi], [_np(t) for t in go])))
        out, (h, c) = mod(X)
        (out * G).sum().backward()
        log.append([_np(X.grad)])
    for em, et in zip(res['mi'], res['torch']):
        for lm, lt in zip(em, et):
            assert [a is None for a in lm] == [b is None for b in lt]
            for a, b in zip(lm, lt):
                if a is not None: close(a, b)
    # second order through a hooked module (the hook returns None): grad of the gradient's norm, as torch
    m, tm = _mlp_pair(0)
    for net in (m, tm): net[0].register_full_backward_hook(lambda mod, gi, go: None)
    x2 = r.standard_normal((2, 5))
    X, TX = M(x2), T(x2)
    gm, = mi.autograd.grad(m(X).pow(2).sum(), X, create_graph=True)
    gt = torch.autograd.grad(tm(TX).pow(2).sum(), TX, create_graph=True)[0]
    (gm * gm).sum().backward(); (gt * gt).sum().backward()
    close(X.grad, TX.grad, 1e-8)

def test_forward_hooks_prepend_with_kwargs_always_call_like_torch():
    order = {}
    for lib, lin in [('mi', nn.Linear(2, 2)), ('torch', torch.nn.Linear(2, 2))]:
        log = order[lib] = []
        lin.register_forward_pre_hook(lambda m, a: log.append('pre1'))
        lin.register_forward_pre_hook(lambda m, a: log.append('pre0'), prepend=True)
        lin.register_forward_pre_hook(lambda m, a, kw: log.append(('kw', sorted(kw))) or None, with_kwargs=True)
        lin.register_forward_hook(lambda m, a, kw, out: log.append(('fkw', type(out).__name__ != 'NoneType')),
                                  with_kwargs=True)
        lin.register_forward_hook(lambda m, a, out: log.append('always'), always_call=True)
        lib_ = mi if lib == 'mi' else torch
        lin(lib_.ones(1, 2))
        with pytest.raises(Exception): lin(lib_.ones(1, 5))     # forward raises: always_call still runs
    assert order['mi'] == order['torch'] == ['pre0', 'pre1', ('kw', []), ('fkw', True), 'always',
                                             'pre0', 'pre1', ('kw', []), 'always']
    lin = nn.Linear(2, 2)   # a pre-hook with kwargs replaces both
    lin.register_forward_pre_hook(lambda m, a, kw: ((a[0] * 0,), kw), with_kwargs=True)
    assert np.allclose(lin(mi.ones(1, 2)).detach().numpy(), lin.bias.detach().numpy())
    with pytest.raises(TypeError, match='expected a callable'): lin.register_full_backward_hook(3)


# --- LSTM(proj_size=) as torch's (s2-21) ---------------------------------------------------------------------------
@pytest.mark.parametrize('layers,bidir,batch_first,unbatched', [(1, False, False, False), (2, False, True, False),
                                                                (2, True, False, False), (1, True, False, True)])
def test_lstm_with_projection_matches_torch(layers, bidir, batch_first, unbatched):
    "weight_hr_l{k} (P, H), h of size P, c of size H; outputs, states and every gradient as torch's (float64)."
    m = nn.LSTM(3, 5, num_layers=layers, bidirectional=bidir, batch_first=batch_first, proj_size=2).double()
    tm = torch.nn.LSTM(3, 5, num_layers=layers, bidirectional=bidir, batch_first=batch_first, proj_size=2).double()
    assert [(k, p.shape) for k, p in m.named_parameters()] == [(k, tuple(p.shape)) for k, p in tm.named_parameters()]
    to_torch(m, tm)
    assert repr(m) == repr(tm)
    r, D = RNG(22), 2 if bidir else 1
    shape = (4, 3) if unbatched else ((2, 4, 3) if batch_first else (4, 2, 3))
    hs, cs = ((layers * D, 2), (layers * D, 5)) if unbatched else ((layers * D, 2, 2), (layers * D, 2, 5))
    x, h0, c0 = r.standard_normal(shape), r.standard_normal(hs), r.standard_normal(cs)
    xm, hm, cm, xt, ht, ct = M(x), M(h0), M(c0), T(x), T(h0), T(c0)
    (o, (h, c)), (to, (th, tc)) = m(xm, (hm, cm)), tm(xt, (ht, ct))
    assert o.shape == tuple(to.shape) and h.shape == tuple(th.shape) and c.shape == tuple(tc.shape)
    close(o, to); close(h, th); close(c, tc)
    gs = [r.standard_normal(t.shape) for t in (o, h, c)]
    sum((a * M(g, False)).sum() for a, g in zip((o, h, c), gs)).backward()
    sum((a * torch.tensor(g)).sum() for a, g in zip((to, th, tc), gs)).backward()
    close(xm.grad, xt.grad); close(hm.grad, ht.grad); close(cm.grad, ct.grad)
    for (k, p), (_, tp) in zip(m.named_parameters(), tm.named_parameters()): close(p.grad, tp.grad)
    m2 = nn.LSTM(3, 5, proj_size=2)                         # no state given: zeros of the right sizes
    assert m2(mi.randn(4, 2, 3))[1][0].shape == (1, 2, 2)

def test_lstm_projection_bad_sizes_raise_as_torch():
    with pytest.raises(ValueError, match='proj_size has to be smaller than hidden_size'): nn.LSTM(3, 5, proj_size=5)
    with pytest.raises(ValueError, match='proj_size should be a positive integer or zero'): nn.LSTM(3, 5, proj_size=-1)
    with pytest.raises(ValueError, match=r'expected h_0 of shape \(1, 2, 2\)'):
        nn.LSTM(3, 5, proj_size=2)(mi.randn(4, 2, 3), (mi.zeros(1, 2, 5), mi.zeros(1, 2, 5)))
