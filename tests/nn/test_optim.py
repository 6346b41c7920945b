"minima.optim against torch.optim, step for step."
import numpy as np, pytest, torch
import minima as mi
from minima import nn, optim, init

def _run(make, tmake, steps=25, shapes=((4, 3), (3,))):
    rng = np.random.default_rng(0)
    w0 = [rng.standard_normal(s).astype('float32') for s in shapes]
    ps = [nn.Parameter(mi.Tensor(w)) for w in w0]; tps = [torch.nn.Parameter(torch.tensor(w)) for w in w0]
    opt, topt = make(ps), tmake(tps)
    for _ in range(steps):
        opt.zero_grad(); topt.zero_grad()
        for p, tp in zip(ps, tps):
            g = rng.standard_normal(p.shape).astype('float32')
            p.grad = mi.Tensor(g, requires_grad=False); tp.grad = torch.tensor(g)
        opt.step(); topt.step()
    for p, tp in zip(ps, tps):
        assert p.dtype == 'float32' and p.op is None and p.inputs == ()
        assert np.allclose(p.detach().numpy(), tp.detach().numpy(), atol=2e-6, rtol=1e-5)

@pytest.mark.parametrize('kw', [dict(lr=0.1), dict(lr=0.05, momentum=0.9), dict(lr=0.05, momentum=0.9, nesterov=True),
                                dict(lr=0.05, momentum=0.8, weight_decay=0.1), dict(lr=0.05, momentum=0.9, dampening=0.5)])
def test_sgd(kw): _run(lambda ps: optim.SGD(ps, **kw), lambda ps: torch.optim.SGD(ps, **kw))

@pytest.mark.parametrize('kw', [dict(lr=0.01), dict(lr=0.02, betas=(0.8, 0.99), eps=1e-6), dict(lr=0.01, weight_decay=0.1)])
def test_adam(kw): _run(lambda ps: optim.Adam(ps, **kw), lambda ps: torch.optim.Adam(ps, **kw))

def test_adamw(): _run(lambda ps: optim.AdamW(ps, lr=0.01, weight_decay=0.2), lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.2))

@pytest.mark.parametrize('make', [lambda ps, **k: optim.Adam(ps, lr=0.02, betas=(0.8, 0.99), **k),
                                  lambda ps, **k: optim.AdamW(ps, lr=0.01, weight_decay=0.2, amsgrad=True, **k)])
def test_adam_capturable(make):
    "`capturable=True`: the step count is a device array counted in place; the trajectory is the Python-float one."
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((4, 3)).astype('float32')
    p, q = nn.Parameter(mi.Tensor(w0)), nn.Parameter(mi.Tensor(w0))
    o1, o2 = make([p]), make([q], capturable=True)
    for i in range(30):
        g = rng.standard_normal((4, 3)).astype('float32')
        p.grad, q.grad = mi.Tensor(g, requires_grad=False), mi.Tensor(g, requires_grad=False)
        o1.step(); o2.step()
        if i == 0: t = o2.state[q]['step']
    assert o2.state[q]['step'] is t and float(t.numpy()) == 30   # one array, updated in place
    assert q.dtype == 'float32'
    np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), rtol=1e-6, atol=1e-7)
    sd = o2.state_dict()   # saved as a number, restored onto the device on the next step
    o3 = make([q], capturable=True); o3.load_state_dict(sd)
    assert o3.state[q]['step'] == 30
    q.grad = mi.Tensor(np.ones((4, 3), 'float32'), requires_grad=False); o3.step()
    assert float(o3.state[q]['step'].numpy()) == 31

def test_real_gradients_never_grow_graph():
    init.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = optim.Adam(m.parameters(), lr=0.01)
    for _ in range(3):
        opt.reset_grad()
        m(init.randn(5, 3)).sum().backward()
        opt.step()
    for p in m.parameters(): assert p.op is None and p.dtype == 'float32' and p.grad.op is None
    opt.reset_grad(); assert all(p.grad is None for p in m.parameters())

def test_float64_params_stay_float64():
    p = nn.Parameter(mi.Tensor(np.ones(3), dtype='float64'))
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = mi.Tensor(np.ones(3), dtype='float64', requires_grad=False)
    opt.step(); assert p.dtype == 'float64'

def test_schedulers_match_torch():
    for make, tmake, n in [(lambda o: optim.StepLR(o, 2, 0.3), lambda o: torch.optim.lr_scheduler.StepLR(o, 2, 0.3), 9),
                           (lambda o: optim.CosineAnnealingLR(o, 7, 0.05), lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 7, 0.05), 20)]:   # past T_max too
        p, tp = nn.Parameter(init.ones(1)), torch.nn.Parameter(torch.ones(1))
        o, to = optim.SGD([p], lr=0.5), torch.optim.SGD([tp], lr=0.5)
        s, ts = make(o), tmake(to)
        for _ in range(n):
            to.step(); s.step(); ts.step()
            assert abs(o.lr - ts.get_last_lr()[0]) < 1e-12

def test_clip_grad_norm():
    rng = np.random.default_rng(1)
    gs = [rng.standard_normal(s).astype('float32') * 3 for s in [(5, 2), (7,)]]
    ps = [nn.Parameter(init.zeros(*g.shape)) for g in gs]; tps = [torch.nn.Parameter(torch.zeros(g.shape)) for g in gs]
    for p, tp, g in zip(ps, tps, gs): p.grad = mi.Tensor(g, requires_grad=False); tp.grad = torch.tensor(g)
    assert abs(optim.clip_grad_norm_(ps, 2.0) - torch.nn.utils.clip_grad_norm_(tps, 2.0).item()) < 1e-4
    for p, tp in zip(ps, tps): assert np.allclose(p.grad.numpy(), tp.grad.numpy(), atol=1e-6)

def test_bad_input():
    with pytest.raises(ValueError, match='SGD: got an empty parameter list'): optim.SGD([], lr=0.1)
    with pytest.raises(ValueError, match='Adam: got an empty parameter list'): optim.Adam(iter([]))
    with pytest.raises(TypeError, match='parameters must be Tensors'): optim.SGD([np.ones(3)], lr=0.1)
    with pytest.raises(ValueError, match='Nesterov'): optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1, nesterov=True)
