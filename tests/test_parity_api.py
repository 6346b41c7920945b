"""Issue 11, second half: the torch names and options users reach for (optimizers, schedulers, modules, functional
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
        assert np.isfinite(p.numpy()).all() and np.array_equal(p.numpy(), q.numpy())

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
    for p, tp in zip(ps, tps): assert np.allclose(p.numpy(), tp.detach().numpy(), atol=1e-6)
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
