"""torch's nn and Tensor surface that public programs and the fourth audit reached (issue 34): each test compares
with torch, and each failed before the change it covers."""
import numpy as np, pytest, torch

import minima as mi
from minima import nn

def test_loss_weights_are_buffers():   # SW14
    w = [1., 2., 3.]
    for M, kw in [('CrossEntropyLoss', {}), ('NLLLoss', {}), ('BCELoss', {}), ('BCEWithLogitsLoss', {'pos_weight': 1})]:
        kw = {k: mi.tensor(w) for k in kw}
        tkw = {k: torch.tensor(w) for k in kw}
        m, t = getattr(nn, M)(weight=mi.tensor(w), **kw).double(), getattr(torch.nn, M)(weight=torch.tensor(w), **tkw).double()
        assert list(m.state_dict()) == list(t.state_dict()) and m.weight.dtype == 'float64', M
    assert list(nn.CrossEntropyLoss().state_dict()) == list(torch.nn.CrossEntropyLoss().state_dict()) == []

def test_module_cast_keeps_and_casts_grads():   # SW22
    m, t = nn.Linear(2, 3), torch.nn.Linear(2, 3)
    m.load_state_dict({k: v.detach().numpy() for k, v in t.state_dict().items()})
    m(mi.ones(4, 2)).sum().backward(); t(torch.ones(4, 2)).sum().backward()
    g = m.weight.grad
    m.double(); t.double()
    assert m.weight.grad is g and g.dtype == 'float64' and t.weight.grad.dtype == torch.float64
    assert np.array_equal(m.weight.grad.numpy(), t.weight.grad.numpy())

def test_load_state_dict_returns_incompatible_keys():   # C7, M32 (assign)
    m, t = nn.Linear(2, 3), torch.nn.Linear(2, 3)
    sd = {'weight': np.ones((3, 2), 'float32'), 'extra': np.zeros(1, 'float32')}
    missing, unexpected = m.load_state_dict(sd, strict=False)
    tm, tu = t.load_state_dict({k: torch.tensor(v) for k, v in sd.items()}, strict=False)
    assert (missing, unexpected) == (tm, tu) == (['bias'], ['extra'])
    assert m.load_state_dict(dict(m.state_dict())).missing_keys == []
    w = mi.full((3, 2), 7.)
    m.load_state_dict({'weight': w, 'bias': mi.zeros(3)}, assign=True)
    assert m.weight.detach().numpy()[0, 0] == 7 and isinstance(m.weight, nn.Parameter)

def test_state_dict_keep_vars_and_prefix():   # M9
    m, t = nn.Sequential(nn.Linear(2, 2)), torch.nn.Sequential(torch.nn.Linear(2, 2))
    assert list(m.state_dict(prefix='net.')) == list(t.state_dict(prefix='net.'))
    sd = m.state_dict(keep_vars=True)
    assert sd['0.weight'] is m[0].weight and t.state_dict(keep_vars=True)['0.weight'] is t[0].weight

@pytest.mark.parametrize('kind', ['relu', 'leaky_relu', 'dropout'])
def test_inplace_activations_write_into_the_input_and_keep_gradients(kind):   # M21
    x0 = np.array([[-1., 2., -3.], [4., -5., 6.]])
    out = {}
    for L in (torch, mi):
        F = L.nn.functional
        w = L.tensor(x0, requires_grad=True)
        x = w * 2.
        if kind == 'relu': y = F.relu(x, inplace=True)
        elif kind == 'leaky_relu': y = F.leaky_relu(x, 0.1, inplace=True)
        else: y = F.dropout(x, p=0.0, training=True, inplace=True) * 1.
        (x * L.tensor(np.arange(6.).reshape(2, 3))).sum().backward()   # x was overwritten: its new value
        out[L.__name__] = (x.detach().numpy().copy(), y.detach().numpy().copy(), w.grad.numpy().copy())
    for a, b in zip(out['torch'], out['minima']): assert np.array_equal(a, b)
    mod = {'relu': nn.ReLU(inplace=True), 'leaky_relu': nn.LeakyReLU(0.1, inplace=True),
           'dropout': nn.Dropout(0.5, inplace=True)}[kind]
    x = mi.tensor(x0)
    assert mod(x) is x or np.array_equal(mod(x).numpy(), x.numpy())
    if kind != 'dropout': assert x.numpy().min() >= -0.6   # the negatives were overwritten

def test_dropout2d_drops_whole_channels():
    x = mi.ones(6, 20, 4, 4)
    y = nn.Dropout2d(0.3)(x).numpy()
    per_channel = y.reshape(6, 20, 16)
    assert (per_channel.std(axis=2) == 0).all() and set(np.unique(y)) <= {0., np.float32(1 / 0.7)}
    assert 0 < (per_channel[..., 0] == 0).mean() < 1
    d = nn.Dropout2d(0.3); d.eval()
    assert d(x) is x
    with pytest.warns(UserWarning, match='dropout2d'): nn.functional.dropout2d(mi.ones(3, 3), 0.5)   # as torch
    with pytest.raises(ValueError): nn.functional.dropout2d(mi.ones(3), 0.5)

def test_containers():   # M36
    ml, tl = nn.ModuleList([nn.Linear(1, 1), nn.Linear(1, 2), nn.Linear(2, 3)]), torch.nn.ModuleList(
        [torch.nn.Linear(1, 1), torch.nn.Linear(1, 2), torch.nn.Linear(2, 3)])
    del ml[1]; del tl[1]
    assert list(ml.state_dict()) == list(tl.state_dict())
    md = nn.ModuleDict({'a': nn.ReLU(), 'b': nn.Tanh()})
    assert isinstance(md.pop('a'), nn.ReLU) and list(md) == ['b']
    md.update({'c': nn.Linear(1, 1)}); assert list(md) == ['b', 'c']
    pl, tpl = nn.ParameterList([mi.ones(2), mi.zeros(3)]), torch.nn.ParameterList([torch.ones(2), torch.zeros(3)])
    pd, tpd = nn.ParameterDict({'x': mi.ones(1)}), torch.nn.ParameterDict({'x': torch.ones(1)})
    pl.append(mi.ones(1)); tpl.append(torch.ones(1))
    pd['y'] = mi.ones(2); tpd['y'] = torch.ones(2)
    for a, b in [(pl, tpl), (pd, tpd)]:
        assert list(a.state_dict()) == list(b.state_dict()) and len(a.parameters()) == len(list(b.parameters()))
    assert isinstance(pl[-1], nn.Parameter) and pl[-1].shape == (1,) and len(pl[0:2]) == 2
    assert isinstance(pd.pop('x'), nn.Parameter) and list(pd.keys()) == ['y']
    lstm = nn.LSTM(2, 3); lstm.flatten_parameters()

def test_small_tensor_api_matches_torch():
    # audit 4, M22: index_add_ (below, with alpha)
    a = np.arange(12., dtype='float32').reshape(3, 4) - 5.5
    m, t = mi.tensor(a), torch.tensor(a)
    same = lambda x, y: np.array_equal(np.asarray(x.numpy()), y.numpy()) and tuple(x.shape) == tuple(y.shape)
    assert same(m.t(), t.t()) and same(m.narrow(1, 1, 2), t.narrow(1, 1, 2)) and same(m.narrow(0, -2, 2), t.narrow(0, -2, 2))
    assert m.type() == t.type() == 'torch.FloatTensor' and same(m.type(mi.int64), t.type(torch.int64))
    assert same(m.round(), t.round()) and same((m / 7).round(decimals=2), (t / 7).round(decimals=2))
    assert same(mi.roll(m, 1), torch.roll(t, 1)) and same(mi.roll(m, (1, -2), (0, 1)), torch.roll(t, (1, -2), (0, 1)))
    assert same(mi.where(m > 0, 1, 0), torch.where(t > 0, 1, 0)) and same(mi.where(m > 0, 1., 0), torch.where(t > 0, 1., 0))
    assert np.allclose(mi.log1p(mi.tensor([1e-10, 3.])).numpy(), torch.log1p(torch.tensor([1e-10, 3.])).numpy(), rtol=1e-6)
    assert same(mi.einsum('ij,kj->ik', m, m), torch.einsum('ij,kj->ik', t, t))
    assert same(mi.einsum('ij->', m), torch.einsum('ij->', t)) and same(mi.einsum('ij', m), torch.einsum('ij', t))
    x, tx = mi.zeros(4, 2), torch.zeros(4, 2)
    i, ti = mi.tensor([0, 3, 0]), torch.tensor([0, 3, 0])
    x.index_add_(0, i, mi.tensor(a[:3, :2]), alpha=2); tx.index_add_(0, ti, torch.tensor(a[:3, :2]), alpha=2)
    assert same(x, tx)
    with pytest.raises(ValueError): mi.einsum('ii->i', m)
    with pytest.raises(NotImplementedError): mi.set_default_dtype(mi.float64)
    mi.set_default_dtype(mi.float32)
    assert mi.get_default_dtype() == 'float32'

LOSSES = [('MarginRankingLoss', dict(margin=0.3), 'x1 x2 y'), ('HingeEmbeddingLoss', dict(margin=0.7), 'x1 y'),
          ('SoftMarginLoss', {}, 'x1 y'), ('CosineEmbeddingLoss', dict(margin=0.2), 'x1 x2 yr'),
          ('TripletMarginLoss', dict(margin=1.0, swap=True), 'x1 x2 x3'), ('MultiLabelSoftMarginLoss', {}, 'x1 b'),
          ('GaussianNLLLoss', dict(full=True), 'x1 x2 v'), ('PoissonNLLLoss', dict(full=True), 'x1 c')]

@pytest.mark.parametrize('name,kw,args', LOSSES)
@pytest.mark.parametrize('reduction', ['none', 'mean', 'sum'])
def test_more_loss_modules_match_torch(name, kw, args, reduction):   # M16
    rng = np.random.default_rng(3)
    data = dict(x1=rng.standard_normal((5, 4)), x2=rng.standard_normal((5, 4)), x3=rng.standard_normal((5, 4)),
                y=rng.choice([-1., 1.], (5, 4)), yr=rng.choice([-1., 1.], 5), b=(rng.random((5, 4)) < .5) * 1.,
                v=np.abs(rng.standard_normal((5, 4))) + .1, c=rng.integers(0, 5, (5, 4)) * 1.)
    res = []
    for L in (torch, mi):
        xs = [L.tensor(data[a], requires_grad=a in ('x1', 'x2', 'x3', 'v')) for a in args.split()]
        out = getattr(L.nn, name)(reduction=reduction, **kw)(*xs)
        (out * L.tensor(np.linspace(-1, 1, int(np.prod(out.shape))).reshape(tuple(out.shape)))).sum().backward()
        res.append([out.detach().numpy()] + [x.grad.numpy() for x in xs if x.requires_grad])
    for a, b in zip(*res): assert np.allclose(a, b, rtol=1e-9, atol=1e-12), name

@pytest.mark.parametrize('name,size,shape', [('AdaptiveMaxPool2d', (2, 3), (2, 3, 7, 5)), ('AdaptiveMaxPool2d', 1, (3, 6, 6)),
                                             ('AdaptiveAvgPool1d', 3, (2, 3, 7)), ('AdaptiveMaxPool1d', 4, (2, 3, 7))])
def test_adaptive_pools_match_torch(name, size, shape):   # M31
    x = np.random.default_rng(0).standard_normal(shape)
    res = []
    for L in (torch, mi):
        t = L.tensor(x, requires_grad=True)
        out = getattr(L.nn, name)(size)(t)
        (out * L.tensor(np.arange(float(np.prod(out.shape))).reshape(tuple(out.shape)))).sum().backward()
        res.append((out.detach().numpy(), t.grad.numpy()))
    for a, b in zip(*res): assert np.allclose(a, b, atol=1e-12)

def test_embedding_from_pretrained():   # M15
    w = np.arange(6.).reshape(3, 2)
    for freeze in (True, False):
        t, m = (L.nn.Embedding.from_pretrained(L.tensor(w), freeze=freeze, padding_idx=1) for L in (torch, mi))
        assert t.weight.requires_grad == m.weight.requires_grad == (not freeze)
        assert np.array_equal(t(torch.tensor([1, 2])).detach().numpy(), m(mi.tensor([1, 2])).detach().numpy())
