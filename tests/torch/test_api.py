"""The torch names and options users reach for (optimizers, schedulers, modules, functional
API, indexing, saving, clean public namespaces), each checked against torch where torch defines the behaviour."""
import numpy as np, pytest, torch
import minima as mi
from minima import nn, optim, init

S = torch.optim.lr_scheduler


# ---------------------------------------------------------------- optimizers
def _model(seed=0):
    init.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))

def _batches(n=8, seed=0):
    rng = np.random.default_rng(seed)
    return [(mi.Tensor(rng.standard_normal((6, 4)).astype('float32')),
             mi.Tensor(rng.standard_normal((6, 2)).astype('float32'))) for _ in range(n)]

def _train(m, o, batches):
    for x, y in batches:
        o.zero_grad()
        ((m(x) - y) ** 2).sum().backward()
        o.step()

@pytest.mark.parametrize('make', [lambda ps: optim.SGD(ps, lr=0.005, momentum=0.9, nesterov=True, weight_decay=1e-3),
                                  lambda ps: optim.Adam(ps, lr=0.01, weight_decay=0.01),
                                  lambda ps: optim.AdamW(ps, lr=0.01)])
def test_optimizer_state_dict_resumes_identically(make):
    b = _batches()
    m1 = _model(); o1 = make(m1.parameters()); _train(m1, o1, b)
    m2 = _model(); o2 = make(m2.parameters()); _train(m2, o2, b[:5])
    sm, so = m2.state_dict(), o2.state_dict()
    m3 = _model(1); o3 = make(m3.parameters())
    m3.load_state_dict(sm); o3.load_state_dict(so)
    _train(m3, o3, b[5:])
    for p, q in zip(m1.parameters(), m3.parameters()):
        assert np.isfinite(p.detach().numpy()).all() and np.array_equal(p.detach().numpy(), q.detach().numpy())

def test_optimizer_state_dict_layout_like_torch():
    m = _model(); o = optim.SGD(m.parameters(), lr=0.1, momentum=0.9); _train(m, o, _batches(2))
    sd = o.state_dict()
    assert sorted(sd) == ['param_groups', 'state'] and sd['param_groups'][0]['params'] == [0, 1, 2, 3]
    assert sorted(sd['state'][0]) == ['momentum_buffer'] and sd['param_groups'][0]['lr'] == 0.1
    with pytest.raises(ValueError, match='load_state_dict'):
        optim.SGD(nn.Linear(4, 8).parameters(), lr=0.1).load_state_dict(sd)

def test_zero_grad_set_to_none():
    p, tp = nn.Parameter(init.ones(3)), torch.nn.Parameter(torch.ones(3))
    o, to = optim.SGD([p], lr=0.1), torch.optim.SGD([tp], lr=0.1)
    (p * 2).sum().backward(); (tp * 2).sum().backward()
    o.zero_grad(set_to_none=False); to.zero_grad(set_to_none=False)
    assert p.grad is not None and np.array_equal(p.grad.numpy(), tp.grad.numpy())
    o.zero_grad(); to.zero_grad()
    assert p.grad is None and tp.grad is None

def test_param_groups_with_their_own_lr_match_torch():
    rng = np.random.default_rng(0)
    w = [rng.standard_normal(s).astype('float32') for s in [(3, 2), (2,), (4,)]]
    ps = [nn.Parameter(mi.Tensor(a)) for a in w]; tps = [torch.nn.Parameter(torch.tensor(a)) for a in w]
    o = optim.Adam([{'params': ps[:2], 'lr': 0.1}, {'params': ps[2:], 'weight_decay': 0.5}], lr=0.01)
    to = torch.optim.Adam([{'params': tps[:2], 'lr': 0.1}, {'params': tps[2:], 'weight_decay': 0.5}], lr=0.01)
    for _ in range(5):
        for p, tp in zip(ps, tps):
            g = rng.standard_normal(p.shape).astype('float32')
            p.grad, tp.grad = mi.Tensor(g, requires_grad=False), torch.tensor(g)
        o.step(); to.step()
    for p, tp in zip(ps, tps): assert np.allclose(p.detach().numpy(), tp.detach().numpy(), atol=1e-6)
    assert [g['lr'] for g in o.param_groups] == [g['lr'] for g in to.param_groups]

@pytest.mark.parametrize('make', [lambda ps, kw: optim.SGD(ps, **kw), lambda ps, kw: torch.optim.SGD(ps, **kw)])
@pytest.mark.parametrize('kw', [dict(lr=-0.1), dict(lr=0.1, momentum=-0.5), dict(lr=0.1, weight_decay=-1)])
def test_sgd_rejects_negative_hyperparameters(make, kw):
    ps = [nn.Parameter(init.ones(2))] if make.__code__.co_names[0] == 'optim' else [torch.nn.Parameter(torch.ones(2))]
    with pytest.raises(ValueError): make(ps, kw)

@pytest.mark.parametrize('kw', [dict(lr=-1e-3), dict(eps=-1e-8), dict(weight_decay=-0.1), dict(betas=(1.0, 0.999)),
                                dict(betas=(0.9, -0.1)), dict(betas=(0.9, 1.5))])
def test_adam_rejects_bad_hyperparameters_like_torch(kw):
    with pytest.raises(ValueError): torch.optim.Adam([torch.nn.Parameter(torch.ones(2))], **kw)
    with pytest.raises(ValueError, match='Adam: invalid'): optim.Adam([nn.Parameter(init.ones(2))], **kw)
    with pytest.raises(ValueError, match='AdamW: invalid'): optim.AdamW([nn.Parameter(init.ones(2))], **kw)


def _lrs(make, tmake, n, metrics=None, opt='SGD'):
    p, tp = nn.Parameter(init.ones(2)), torch.nn.Parameter(torch.ones(2))
    o = optim.SGD([p], lr=0.5, momentum=0.9) if opt == 'SGD' else optim.Adam([p], lr=0.5)
    to = torch.optim.SGD([tp], lr=0.5, momentum=0.9) if opt == 'SGD' else torch.optim.Adam([tp], lr=0.5)
    s, ts = make(o), tmake(to)
    for i in range(n + 1):
        assert abs(o.lr - to.param_groups[0]['lr']) <= 1e-12 * abs(to.param_groups[0]['lr']) + 1e-15, i
        assert s.get_last_lr() == pytest.approx(ts.get_last_lr(), rel=1e-12)
        key = 'momentum' if opt == 'SGD' else 'betas'
        assert o.param_groups[0][key] == pytest.approx(to.param_groups[0][key], rel=1e-12)
        if i == n: break
        to.step()
        if metrics is None: s.step(); ts.step()
        else: s.step(metrics[i]); ts.step(metrics[i])

@pytest.mark.parametrize('kw', [dict(), dict(start_factor=0.1, end_factor=0.5, total_iters=3)])
def test_linear_lr_matches_torch(kw): _lrs(lambda o: optim.LinearLR(o, **kw), lambda o: S.LinearLR(o, **kw), 8)

@pytest.mark.parametrize('opt', ['SGD', 'Adam'])
@pytest.mark.parametrize('kw', [dict(max_lr=1.0, total_steps=20), dict(max_lr=0.2, total_steps=15, pct_start=0.25,
                                three_phase=True), dict(max_lr=0.5, epochs=3, steps_per_epoch=5, anneal_strategy='linear',
                                div_factor=10, final_div_factor=100), dict(max_lr=0.1, total_steps=9, cycle_momentum=False)])
def test_one_cycle_lr_matches_torch(kw, opt):
    n = kw.get('total_steps') or kw['epochs'] * kw['steps_per_epoch']
    _lrs(lambda o: optim.OneCycleLR(o, **kw), lambda o: S.OneCycleLR(o, **kw), n - 1, opt=opt)

def test_one_cycle_lr_past_the_end_raises():
    o = optim.SGD([nn.Parameter(init.ones(1))], lr=0.1, momentum=0.9)
    s = optim.OneCycleLR(o, 1.0, total_steps=3)
    for _ in range(3): s.step()
    with pytest.raises(ValueError, match='total_steps=3'): s.step()

@pytest.mark.parametrize('kw', [dict(factor=0.5, patience=2), dict(mode='max', factor=0.2, patience=1, cooldown=2),
                                dict(patience=0, threshold=0.1, threshold_mode='abs', min_lr=0.1)])
def test_reduce_lr_on_plateau_matches_torch(kw):
    rng = np.random.default_rng(0)
    metrics = list(np.round(rng.uniform(0.5, 1.0, 30), 2))
    _lrs(lambda o: optim.ReduceLROnPlateau(o, **kw), lambda o: S.ReduceLROnPlateau(o, **kw), 30, metrics)


# ---------------------------------------------------------------- modules
def _copy_conv(m, tm):
    with torch.no_grad():
        tm.weight.copy_(torch.tensor(m.weight.detach().numpy()))
        if m.bias is not None: tm.bias.copy_(torch.tensor(m.bias.detach().numpy()))

@pytest.mark.parametrize('kw', [dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2)),
                                dict(kernel_size=3, groups=2, stride=2), dict(kernel_size=3, groups=4, padding=1),
                                dict(kernel_size=(2, 4), padding='same'), dict(kernel_size=3, padding='valid'),
                                dict(kernel_size=4, padding='same', padding_mode='reflect', dilation=2),
                                dict(kernel_size=3, padding=2, padding_mode='circular'),
                                dict(kernel_size=3, padding=(1, 2), padding_mode='replicate', bias=False),
                                dict(kernel_size=3, padding=1, padding_mode='reflect', stride=2)])
def test_conv2d_module_options_match_torch(kw):
    init.manual_seed(0)
    m, tm = nn.Conv2d(4, 8, **kw), torch.nn.Conv2d(4, 8, **kw)
    assert m.weight.shape == tuple(tm.weight.shape)
    _copy_conv(m, tm)
    x = init.randn(2, 4, 9, 8, requires_grad=True); tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    y, ty = m(x), tm(tx)
    g = np.random.default_rng(1).standard_normal(ty.shape).astype('float32')
    (y * mi.Tensor(g)).sum().backward(); (ty * torch.tensor(g)).sum().backward()
    assert np.allclose(y.detach().numpy(), ty.detach().numpy(), atol=1e-4)
    assert np.allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-4)
    assert np.allclose(m.weight.grad.numpy(), tm.weight.grad.numpy(), atol=1e-3)

def test_conv2d_module_rejects_what_torch_rejects():
    for kw in [dict(padding='same', stride=2), dict(groups=3), dict(padding_mode='mirror')]:
        with pytest.raises(ValueError): torch.nn.Conv2d(4, 8, 3, **kw)
        with pytest.raises(ValueError, match='Conv2d'): nn.Conv2d(4, 8, 3, **kw)

@pytest.mark.parametrize('make', [lambda M: M.MaxPool2d(3, 2, 1, dilation=2, ceil_mode=True),
                                  lambda M: M.MaxPool2d((2, 3), (1, 2), ceil_mode=True),
                                  lambda M: M.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),
                                  lambda M: M.AvgPool2d((3, 2), 2, (1, 1), ceil_mode=True)])
def test_pool_module_options_match_torch(make):
    x = init.randn(2, 3, 9, 8, requires_grad=True); tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    y, ty = make(nn)(x), make(torch.nn)(tx)
    g = np.random.default_rng(0).standard_normal(ty.shape).astype('float32')
    (y * mi.Tensor(g)).sum().backward(); (ty * torch.tensor(g)).sum().backward()
    assert np.allclose(y.detach().numpy(), ty.detach().numpy(), atol=1e-5) and np.allclose(x.grad.detach().numpy(), tx.grad.detach().numpy(), atol=1e-5)

def test_max_pool_return_indices_module():
    x = init.randn(1, 2, 6, 6)
    y, i = nn.MaxPool2d(2, return_indices=True)(x)
    ty, ti = torch.nn.MaxPool2d(2, return_indices=True)(torch.tensor(x.numpy()))
    assert np.array_equal(i.numpy(), ti.numpy()) and np.allclose(y.numpy(), ty.numpy())

def test_batchnorm1d_on_sequences_matches_torch():
    bn, tbn = nn.BatchNorm1d(3), torch.nn.BatchNorm1d(3)
    for step in range(3):
        x = init.randn(4, 3, 6, mean=step, std=2.0, requires_grad=True); tx = torch.tensor(x.detach().numpy(), requires_grad=True)
        y, ty = bn(x), tbn(tx)
        g = np.random.default_rng(step).standard_normal(ty.shape).astype('float32')
        (y * mi.Tensor(g)).sum().backward(); (ty * torch.tensor(g)).sum().backward()
        assert np.allclose(y.detach().numpy(), ty.detach().numpy(), atol=1e-4) and np.allclose(x.grad.detach().numpy(), tx.grad.detach().numpy(), atol=1e-4)
    assert np.allclose(bn.running_mean.numpy(), tbn.running_mean.numpy(), atol=1e-5)
    assert np.allclose(bn.running_var.numpy(), tbn.running_var.numpy(), atol=1e-5)
    bn.eval(); tbn.eval()
    x = init.randn(2, 3, 5)
    assert np.allclose(bn(x).detach().numpy(), tbn(torch.tensor(x.detach().numpy())).detach().numpy(), atol=1e-5)
    assert list(bn.state_dict()) == list(tbn.state_dict())

@pytest.mark.parametrize('M,shape', [('BatchNorm1d', (6, 3)), ('BatchNorm2d', (4, 3, 2, 2))])
def test_batchnorm_momentum_none_is_a_cumulative_average(M, shape):
    bn, tbn = getattr(nn, M)(3, momentum=None), getattr(torch.nn, M)(3, momentum=None)
    for step in range(5):
        x = init.randn(*shape, mean=step, std=1 + step)
        assert np.allclose(bn(x).detach().numpy(), tbn(torch.tensor(x.detach().numpy())).detach().numpy(), atol=1e-4)
    assert np.allclose(bn.running_mean.numpy(), tbn.running_mean.numpy(), atol=1e-5)
    assert np.allclose(bn.running_var.numpy(), tbn.running_var.numpy(), atol=1e-4)
    assert bn.num_batches_tracked.item() == tbn.num_batches_tracked.item() == 5

def test_float32_batchnorm_rejects_float64_batch_like_torch():
    x = np.random.default_rng(0).standard_normal((4, 3))
    with pytest.raises(RuntimeError): torch.nn.BatchNorm1d(3)(torch.tensor(x))
    bn = nn.BatchNorm1d(3)
    with pytest.raises(TypeError, match=r'BatchNorm1d\(3\): input dtype float64 and running_mean dtype float32 differ'):
        bn(mi.Tensor(x, dtype='float64'))
    assert bn.running_mean.dtype == 'float32' and bn.running_var.dtype == 'float32'

@pytest.mark.parametrize('kw', [dict(), dict(label_smoothing=0.1), dict(ignore_index=2), dict(reduction='sum', label_smoothing=0.3),
                                dict(weight=True, ignore_index=1, label_smoothing=0.2), dict(reduction='none', weight=True)])
@pytest.mark.parametrize('shape', [(6, 4), (3, 4, 5), (2, 4, 3, 2)])
def test_cross_entropy_loss_module_matches_torch(kw, shape):
    rng = np.random.default_rng(0)
    z = mi.Tensor(rng.standard_normal(shape).astype('float32'), requires_grad=True)
    tz = torch.tensor(z.detach().numpy(), requires_grad=True)
    y = rng.integers(0, shape[1], (shape[0],) + shape[2:])
    kw = dict(kw)
    if kw.get('weight'):
        w = rng.uniform(0.5, 2, shape[1]).astype('float32')
        kw['weight'] = w
    mkw = {k: (mi.Tensor(v, requires_grad=False) if k == 'weight' else v) for k, v in kw.items()}
    tkw = {k: (torch.tensor(v) if k == 'weight' else v) for k, v in kw.items()}
    l, tl = nn.CrossEntropyLoss(**mkw)(z, mi.Tensor(y)), torch.nn.CrossEntropyLoss(**tkw)(tz, torch.tensor(y))
    g = rng.standard_normal(tl.shape).astype('float32')
    (l * mi.Tensor(g)).sum().backward(); (tl * torch.tensor(g)).sum().backward()
    assert np.allclose(l.detach().numpy(), tl.detach().numpy(), atol=1e-5)
    assert np.allclose(z.grad.numpy(), tz.grad.numpy(), atol=1e-5)

def test_dropout_p1_and_flatten_on_empty_batch_like_torch():
    x = init.randn(4, 5, requires_grad=True)
    y = nn.Dropout(p=1)(x)
    assert np.array_equal(y.detach().numpy(), torch.nn.Dropout(p=1)(torch.tensor(x.detach().numpy())).detach().numpy())
    y.sum().backward(); assert np.array_equal(x.grad.numpy(), np.zeros((4, 5), 'float32'))
    e = mi.Tensor(np.zeros((0, 3, 4), 'float32'))
    assert nn.Flatten()(e).shape == tuple(torch.nn.Flatten()(torch.zeros(0, 3, 4)).shape) == (0, 12)
    assert nn.Flatten(0, 1)(init.randn(2, 3, 4)).shape == (6, 4)
    with pytest.raises(ValueError): nn.Dropout(1.5)

def test_module_list_dict_identity():
    ml = nn.ModuleList([nn.Linear(2, 3), nn.ReLU()])
    ml.append(nn.Linear(3, 1))
    md = nn.ModuleDict({'enc': nn.Linear(4, 2), 'act': nn.Tanh()})
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers, self.parts, self.skip = ml, md, nn.Identity(54, unused='ok')
        def forward(self, x): return x
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ['layers.0.weight', 'layers.0.bias', 'layers.2.weight', 'layers.2.bias', 'parts.enc.weight', 'parts.enc.bias']
    assert len(ml) == 3 and isinstance(ml[1], nn.ReLU) and len(ml[1:]) == 2 and 'enc' in md and list(md) == ['enc', 'act']
    x = init.randn(3, 2)
    assert net.skip(x) is x
    with pytest.raises(TypeError, match='ModuleList: expected a Module'): ml.append(3)
    with pytest.raises(TypeError, match='ModuleDict'): md['x'] = 'not a module'

def test_forward_hooks_like_torch():
    init.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    seen = []
    h = m[1].register_forward_hook(lambda mod, inp, out: seen.append((type(mod).__name__, inp[0].shape, out.shape)))
    h2 = m[2].register_forward_hook(lambda mod, inp, out: out * 0)   # a returned value replaces the output
    y = m(init.randn(5, 3))
    assert seen == [('ReLU', (5, 4), (5, 4))] and np.array_equal(y.detach().numpy(), np.zeros((5, 2), 'float32'))
    h.remove(); h2.remove()
    assert m(init.randn(5, 3)).detach().numpy().any() and len(seen) == 1

def test_save_then_load_round_trips_under_the_same_name(tmp_path):
    init.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    path = str(tmp_path / 'm')
    m.save(path)
    assert (tmp_path / 'm').exists()
    other = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).load(path)
    for (k, a), (_, b) in zip(m.state_dict().items(), other.state_dict().items()): assert np.array_equal(a, b), k
    np.savez(str(tmp_path / 'n'), **m.state_dict())            # numpy appends .npz: load finds it too
    nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).load(str(tmp_path / 'n'))

def test_gelu_module_and_function_follow_torch_default():
    x = init.randn(20)
    tx = torch.tensor(x.numpy())
    import minima.nn.functional as F
    assert np.allclose(F.gelu(x).numpy(), torch.nn.functional.gelu(tx).numpy(), atol=1e-6)
    assert np.allclose(nn.GELU()(x).numpy(), torch.nn.GELU()(tx).numpy(), atol=1e-6)
    assert np.allclose(nn.GELU('tanh')(x).numpy(), torch.nn.GELU('tanh')(tx).numpy(), atol=1e-6)
    assert F.gelu is mi.ops.gelu


# ---------------------------------------------------------------- functional API
import minima.nn.functional as F
TF = torch.nn.functional

def _pair(*shapes, seed=0, kind='real'):
    rng = np.random.default_rng(seed)
    out = []
    for s in shapes:
        a = rng.uniform(0.05, 0.95, s) if kind == 'prob' else rng.standard_normal(s)
        out.append(a.astype('float32'))
    return out

def _grad_check(f, tf, arrays, diff=(0,), tol=1e-5, **kw):
    ms = [mi.Tensor(a, requires_grad=i in diff) for i, a in enumerate(arrays)]
    ts = [torch.tensor(a, requires_grad=i in diff) for i, a in enumerate(arrays)]
    y, ty = f(*ms, **kw), tf(*ts, **kw)
    g = np.random.default_rng(9).standard_normal(ty.shape).astype('float32')
    (y * mi.Tensor(g)).sum().backward(); (ty * torch.tensor(g)).sum().backward()
    assert y.dtype == 'float32' and np.allclose(y.detach().numpy(), ty.detach().numpy(), atol=tol, rtol=tol)
    for i in diff: assert np.allclose(ms[i].grad.numpy(), ts[i].grad.numpy(), atol=tol, rtol=tol)

@pytest.mark.parametrize('name', ['relu', 'gelu', 'silu', 'sigmoid', 'tanh', 'softplus'])
def test_activations_match_torch(name):
    _grad_check(getattr(F, name), getattr(TF, name), _pair((4, 5)))

@pytest.mark.parametrize('name', ['softmax', 'log_softmax'])
def test_softmax_dim_keyword(name):
    _grad_check(getattr(F, name), getattr(TF, name), _pair((3, 4, 5)), dim=1)
    x = init.randn(2, 3)
    assert np.allclose(getattr(x, name)(dim=0).numpy(), getattr(torch.tensor(x.numpy()), name)(dim=0).numpy(), atol=1e-6)

@pytest.mark.parametrize('bias', [True, False])
def test_linear_torch_layout(bias):
    arrays = _pair((2, 5, 4), (3, 4), (3,))
    _grad_check(lambda x, w, b: F.linear(x, w, b if bias else None), lambda x, w, b: TF.linear(x, w, b if bias else None),
                arrays, diff=(0, 1, 2) if bias else (0, 1))

@pytest.mark.parametrize('name', ['mse_loss', 'l1_loss'])
@pytest.mark.parametrize('reduction', ['mean', 'sum', 'none'])
def test_regression_losses(name, reduction):
    _grad_check(getattr(F, name), getattr(TF, name), _pair((4, 3), (4, 3)), diff=(0, 1), reduction=reduction)

def test_regression_losses_refuse_to_broadcast():
    with pytest.raises(ValueError, match='mse_loss: target shape'): F.mse_loss(init.randn(4, 1), init.randn(4))

@pytest.mark.parametrize('reduction', ['mean', 'sum', 'none'])
def test_binary_cross_entropy(reduction):
    x, t, w = _pair((4, 3), (4, 3), (3,), kind='prob')
    _grad_check(lambda x, t, w: F.binary_cross_entropy(x, t, w, reduction=reduction),
                lambda x, t, w: TF.binary_cross_entropy(x, t, w, reduction=reduction), [x, t, np.abs(w)])
    with pytest.raises(ValueError, match='probability'): F.binary_cross_entropy(mi.Tensor([1.5]), mi.Tensor([1.0]))

@pytest.mark.parametrize('pos', [False, True])
def test_binary_cross_entropy_with_logits_is_stable(pos):
    x = np.array([[0.0, -1e4, 1e4], [30.0, -30.0, 2.0]], 'float32')
    t = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 0.3]], 'float32')
    pw = np.array([2.0, 0.5, 1.5], 'float32')
    f = lambda x, t, pw: F.binary_cross_entropy_with_logits(x, t, pos_weight=pw if pos else None, reduction='none')
    tf = lambda x, t, pw: TF.binary_cross_entropy_with_logits(x, t, pos_weight=pw if pos else None, reduction='none')
    _grad_check(f, tf, [x, t, pw])
    # a zero logit: the gradient is sigmoid(0) - t = 0.5 - t (a composition of relu and abs would give -t)
    z = mi.Tensor(np.zeros(3, 'float32'), requires_grad=True)
    F.binary_cross_entropy_with_logits(z, mi.Tensor(np.array([0., 1., 0.5], 'float32')), reduction='sum').backward()
    assert np.allclose(z.grad.numpy(), [0.5, -0.5, 0.0])

@pytest.mark.parametrize('ns,affine', [((5,), True), ((3, 5), False), (5, True)])
def test_layer_norm(ns, affine):
    shape = ns if isinstance(ns, tuple) else (ns,)
    arrays = _pair((2, 3, 5), shape, shape)
    tns = shape
    _grad_check(lambda x, w, b: F.layer_norm(x, ns, w if affine else None, b if affine else None),
                lambda x, w, b: TF.layer_norm(x, tns, w if affine else None, b if affine else None), arrays,
                diff=(0, 1, 2) if affine else (0,), tol=1e-4)

@pytest.mark.parametrize('training', [True, False])
def test_batch_norm_torch_signature(training):
    x, w, b = _pair((6, 3, 4), (3,), (3,))
    rm, rv = np.zeros(3, 'float32') + 0.3, np.ones(3, 'float32') * 2
    mrm, mrv = mi.Tensor(rm.copy(), requires_grad=False), mi.Tensor(rv.copy(), requires_grad=False)
    trm, trv = torch.tensor(rm.copy()), torch.tensor(rv.copy())
    _grad_check(lambda x, w, b: F.batch_norm(x, mrm, mrv, w, b, training=training, momentum=0.3),
                lambda x, w, b: TF.batch_norm(x, trm, trv, w, b, training=training, momentum=0.3), [x, w, b],
                diff=(0, 1, 2), tol=1e-4)
    assert np.allclose(mrm.numpy(), trm.numpy(), atol=1e-6) and np.allclose(mrv.numpy(), trv.numpy(), atol=1e-5)

@pytest.mark.parametrize('pad,mode', [((1, 2), 'constant'), ((2, 0, 1, 3), 'reflect'), ((1, 1, 2, 2), 'replicate'),
                                      ((2, 1, 1, 2), 'circular'), ((1, 1, 0, 2, 1, 0), 'constant')])
def test_pad_torch_order_and_modes(pad, mode):
    _grad_check(lambda x: F.pad(x, pad, mode), lambda x: TF.pad(x, pad, mode), _pair((2, 3, 4, 5)))
    assert np.allclose(F.pad(init.ones(2, 2), (1, 1), value=3.0).numpy(), TF.pad(torch.ones(2, 2), (1, 1), value=3.0).numpy())

def test_one_hot_like_torch():
    y = np.array([[2, 0, 1], [1, 1, 4]])
    for n in (-1, 6):
        a, b = F.one_hot(mi.Tensor(y), n), TF.one_hot(torch.tensor(y), n)
        assert a.dtype == 'int64' and np.array_equal(a.numpy(), b.numpy())
    with pytest.raises(TypeError, match='one_hot'): F.one_hot(mi.Tensor([1.5]), 3)
    with pytest.raises(ValueError, match='out of range'): F.one_hot(mi.Tensor(np.array([3])), 3)

def test_functional_names_exist():
    for name in ['relu', 'gelu', 'silu', 'sigmoid', 'tanh', 'softmax', 'log_softmax', 'linear', 'mse_loss', 'l1_loss',
                 'binary_cross_entropy', 'binary_cross_entropy_with_logits', 'layer_norm', 'batch_norm', 'pad', 'one_hot']:
        assert callable(getattr(F, name)) and name in F.__all__


# ---------------------------------------------------------------- Tensor API
@pytest.mark.parametrize('method', ['sum', 'mean', 'logsumexp', 'amax', 'amin'])
def test_reduction_axis_and_dim_keywords(method):
    x = init.randn(2, 3, 4); tx = torch.tensor(x.numpy())
    for kw, tkw in [(dict(axis=1), dict(dim=1)), (dict(dim=(0, 2), keepdim=True), dict(dim=(0, 2), keepdim=True)),
                    (dict(axis=-1, keepdims=True), dict(dim=-1, keepdim=True))]:
        assert np.allclose(getattr(x, method)(**kw).numpy(), getattr(torch, method)(tx, **tkw).numpy(), atol=1e-5), (method, kw)
    with pytest.raises(TypeError, match='give the axes once'): getattr(x, method)(1, axis=1)

@pytest.mark.parametrize('method', ['max', 'min'])
def test_max_min_with_dim_return_values_and_indices(method):
    "torch's convention (issue 21): `x.max(dim)` is the named tuple (values, indices); without dim, the value."
    x = init.randn(2, 3, 4); tx = torch.tensor(x.numpy())
    for kw in [dict(dim=1), dict(dim=-1, keepdim=True)]:
        got, want = getattr(x, method)(**kw), getattr(tx, method)(**kw)
        assert np.allclose(got.values.numpy(), want.values.numpy()) and np.array_equal(got.indices.numpy(), want.indices.numpy())
        v, i = getattr(x, method)(**kw)
        assert v.shape == tuple(want.values.shape) and i.dtype == 'int64'
    assert np.isclose(getattr(x, method)().item(), getattr(tx, method)().item())
    with pytest.raises(TypeError, match='give the dim once'): getattr(x, method)(1, axis=1)

def test_argmax_dim_keyword():
    x = init.randn(3, 4)
    assert np.array_equal(x.argmax(dim=1).numpy(), torch.tensor(x.numpy()).argmax(dim=1).numpy())

@pytest.mark.parametrize('index', [lambda m: m([1, 0, 2, 1]), lambda m: m([-1, 0]), lambda m: (slice(None), m([2, 0])),
                                   lambda m: (0, m([[1, 1], [0, 2]]))])
def test_integer_array_indexing_with_gradients(index):
    x = init.randn(3, 4, requires_grad=True); tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    y, ty = x[index(np.array)], tx[index(torch.tensor)]
    assert y.shape == tuple(ty.shape) and np.allclose(y.detach().numpy(), ty.detach().numpy())
    g = np.random.default_rng(0).standard_normal(ty.shape).astype('float32')
    (y * mi.Tensor(g)).sum().backward(); (ty * torch.tensor(g)).sum().backward()
    assert np.allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-6)

def test_boolean_mask_indexing_with_gradients():
    x = init.randn(3, 4, requires_grad=True); tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    for mask in [x.detach().numpy() > 0, (x.detach().numpy() > 0)[:, 0], np.zeros((3, 4), bool)]:
        y, ty = x[mi.Tensor(mask)], tx[torch.tensor(mask)]
        assert y.shape == tuple(ty.shape) and np.allclose(y.detach().numpy(), ty.detach().numpy())
        g = np.random.default_rng(0).standard_normal(ty.shape).astype('float32')
        x.grad = None; tx.grad = None
        (y * mi.Tensor(g)).sum().backward(); (ty * torch.tensor(g)).sum().backward()
        assert np.allclose(x.grad.numpy(), tx.grad.numpy())
    assert x[x > 0].shape == (int((x.detach().numpy() > 0).sum()),)


# ---------------------------------------------------------------- clean public namespaces
def _public_modules():
    import importlib, pkgutil
    for info in pkgutil.walk_packages(mi.__path__, prefix='minima.'):
        if not any(p.startswith('_') for p in info.name.split('.')):
            yield importlib.import_module(info.name)

def test_public_modules_show_only_their_api():
    import types
    leaks = {}
    for mod in [mi] + list(_public_modules()):
        names = [k for k in dir(mod) if not k.startswith('_')]
        api = set(getattr(mod, '__all__', names))
        bad = [k for k in names if k not in api and not (isinstance(getattr(mod, k), types.ModuleType)
                                                          and getattr(mod, k).__name__.startswith('minima.'))]
        bad += [k for k in names if isinstance(getattr(mod, k, None), types.ModuleType)
                and not getattr(mod, k).__name__.startswith('minima.')]
        if bad: leaks[mod.__name__] = bad
    assert not leaks, leaks
    import minima.data
    assert not {'np', 'gzip', 'struct', 'math', 'Path'} & set(dir(minima.data))
    assert 'DataLoader' in dir(minima.data) and 'gzip' in vars(minima.data)   # still imported, just not shown
