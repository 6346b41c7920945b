"""`minima.compile` against eager for each silent-wrong or crash item of the fourth torch audit (SW3-SW7, C1, C2, C4,
M27): returned tensors are fresh, every hyperparameter, module attribute, closure tensor and `requires_grad` flag a
step reads is guarded, a compiled forward takes an eager backward."""
import numpy as np
import pytest
import minima as mi
from minima import nn, optim, init

def data(n=8, d=6, k=3, seed=1, device='cpu'):
    rng = np.random.default_rng(seed)
    x = mi.Tensor(rng.standard_normal((n, d)).astype('float32'), requires_grad=False, device=device)
    return x, mi.Tensor(rng.integers(0, k, n), device=device)

def run(compiled, make_opt, steps=8, after=None, seed=0, device='cpu'):
    "Losses and parameters of `steps` SGD-like steps; `after(i, model, opt)` runs after step i (a change)."
    init.manual_seed(seed)
    m = nn.Sequential(nn.Linear(6, 7), nn.ReLU(), nn.Linear(7, 3)).to(device)
    opt, lossf = make_opt(m.parameters()), nn.CrossEntropyLoss()
    x, y = data(device=device)
    def step(x, y):
        opt.zero_grad(); loss = lossf(m(x), y); loss.backward(); opt.step()
        return loss
    f = mi.compile(step) if compiled else step
    losses = []
    for i in range(steps):
        losses.append(f(x, y))            # held, not read: a later replay must not change it
        if after is not None: after(i, m, opt)
    return np.array([float(l.detach().numpy()) for l in losses]), [p.detach().numpy().copy() for p in m.parameters()], f

def same(make_opt, after=None, steps=8, tol=1e-5, device='cpu'):
    le, pe, _ = run(False, make_opt, steps, after, device=device)
    lc, pc, f = run(True, make_opt, steps, after, device=device)
    np.testing.assert_allclose(lc, le, rtol=tol, atol=tol)
    for a, b in zip(pc, pe): np.testing.assert_allclose(a, b, rtol=tol, atol=tol)
    return f

def test_sw4_returned_tensors_are_not_overwritten():
    init.manual_seed(0)
    lin = nn.Linear(4, 2)
    f = mi.compile(lambda x: (lin(x) ** 2).sum())
    xs = [mi.Tensor(np.random.default_rng(i).standard_normal((3, 4)).astype('float32')) for i in range(7)]
    with mi.no_grad(): outs = [f(x) for x in xs]
    assert f.program is not None
    want = [float((lin(x) ** 2).sum().detach().numpy()) for x in xs]
    np.testing.assert_allclose([float(o.numpy()) for o in outs], want, rtol=1e-6)

@pytest.mark.parametrize('name', ['sgd', 'sgd_nesterov', 'adamw_capturable', 'adam_capturable'])
def test_sw5_learning_rate_changed_after_capture(name):
    make = dict(sgd=lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
                sgd_nesterov=lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
                adamw_capturable=lambda ps: optim.AdamW(ps, lr=0.05, weight_decay=0.1, capturable=True),
                adam_capturable=lambda ps: optim.Adam(ps, lr=0.05, capturable=True))[name]
    def after(i, m, opt):
        if i == 4: opt.param_groups[0]['lr'] = 0.0
    le, pe, _ = run(False, make, 8, after)
    lc, pc, f = run(True, make, 8, after)
    np.testing.assert_allclose(lc, le, rtol=1e-5, atol=1e-6)
    for a, b in zip(pc, pe): np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)

@pytest.mark.parametrize('key,value', [('momentum', 0.5), ('weight_decay', 0.3), ('dampening', 0.2)])
def test_sw5_other_hyperparameters_changed_after_capture(key, value):
    def after(i, m, opt):
        if i == 4: opt.param_groups[0][key] = value
    same(lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), after)

@pytest.mark.parametrize('key,value', [('betas', (0.5, 0.9)), ('eps', 1e-2), ('weight_decay', 0.5)])
def test_sw5_adam_hyperparameters_changed_after_capture(key, value):
    def after(i, m, opt):
        if i == 4: opt.param_groups[0][key] = value
    same(lambda ps: optim.AdamW(ps, lr=0.05, capturable=True), after)

def test_sw5_scheduler_every_few_steps():
    "A StepLR that changes the rate every 3 steps (outside the compiled step): each new rate is a new program."
    scheds = {}
    def after(i, m, opt):
        if id(opt) not in scheds: scheds[id(opt)] = optim.lr_scheduler.StepLR(opt, 3, gamma=0.5)
        scheds[id(opt)].step()
    same(lambda ps: optim.SGD(ps, lr=0.2, momentum=0.9), after, steps=14)

def test_sw6_rebound_closure_tensor():
    init.manual_seed(0)
    lin = nn.Linear(3, 2)
    scale = [mi.Tensor(np.full((2,), 2.0, 'float32'))]
    fn = lambda x: (lin(x) * scale[0]).sum()
    f = mi.compile(fn)
    x = mi.Tensor(np.ones((4, 3), 'float32'))
    with mi.no_grad():
        for _ in range(5): f(x)
        assert f.program is not None
        scale[0] = mi.Tensor(np.full((2,), 10.0, 'float32'))
        for _ in range(4): np.testing.assert_allclose(f(x).numpy(), fn(x).numpy(), rtol=1e-6)

def test_sw6_rebound_closure_tensor_in_a_training_step():
    "A rebound closure tensor inside a whole SGD step (the program exists before the change)."
    scale = [mi.Tensor(np.full((3,), 1.0, 'float32'))]
    def run_(compiled):
        init.manual_seed(0)
        m = nn.Linear(6, 3)
        opt, (x, y) = optim.SGD(m.parameters(), lr=0.1), data()
        def step(x, y):
            opt.zero_grad(); loss = nn.functional.cross_entropy(m(x) * scale[0], y); loss.backward(); opt.step()
            return loss
        f = mi.compile(step) if compiled else step
        scale[0] = mi.Tensor(np.full((3,), 1.0, 'float32'))
        out = []
        for i in range(8):
            out.append(float(f(x, y).detach().numpy()))
            if i == 4:
                assert not compiled or f.program is not None
                scale[0] = mi.Tensor(np.full((3,), 3.0, 'float32'))
        return out
    np.testing.assert_allclose(run_(True), run_(False), rtol=1e-5)

def test_sw6_closure_number_changed():
    init.manual_seed(0)
    lin = nn.Linear(3, 2)
    k = {'alpha': 2.0}
    fn = lambda x: (lin(x) * k['alpha']).sum()
    f = mi.compile(fn)
    x = mi.Tensor(np.ones((4, 3), 'float32'))
    with mi.no_grad():
        for _ in range(5): f(x)
        assert f.program is not None
        k['alpha'] = 5.0
        for _ in range(4): np.testing.assert_allclose(f(x).numpy(), fn(x).numpy(), rtol=1e-6)

def test_sw6_module_attribute_changed_after_capture():
    "`Dropout.p` set after capture: the next calls follow the new p."
    init.manual_seed(0)
    m = nn.Sequential(nn.Linear(5, 5), nn.Dropout(0.5))
    x = mi.Tensor(np.ones((3, 5), 'float32'))
    f = mi.compile(lambda x: m(x).sum())
    with mi.no_grad():
        for _ in range(5): f(x)
        assert f.program is not None
        m[1].p = 0.0
        want = m(x).sum().numpy()           # p = 0: no randomness
        for _ in range(4): np.testing.assert_allclose(f(x).numpy(), want, rtol=1e-6)

def test_sw7_parameter_frozen_after_capture():
    def after(i, m, opt):
        if i == 3: m[0].weight.requires_grad = False
    same(lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), after)

def test_sw3_rmsprop_adagrad_adadelta_follow_eager():
    for make in (lambda ps: optim.RMSprop(ps, lr=0.01), lambda ps: optim.Adagrad(ps, lr=0.1),
                 lambda ps: optim.Adadelta(ps, lr=1.0)):
        same(make, steps=10)

class _nothing:
    def __enter__(self): return self
    def __exit__(self, *a): return False

def test_c1_compiled_forward_eager_backward():
    init.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 5), nn.Tanh(), nn.Linear(5, 1))
    f = mi.compile(lambda x: (m(x) ** 2).sum())
    x = mi.Tensor(np.random.default_rng(0).standard_normal((3, 4)).astype('float32'))
    for i in range(6):
        for p in m.parameters(): p.grad = None
        with pytest.warns(UserWarning, match='backward') if i == 1 else _nothing(): f(x).backward()
        got = [p.grad.numpy().copy() for p in m.parameters()]
        for p in m.parameters(): p.grad = None
        (m(x) ** 2).sum().backward()
        for a, p in zip(got, m.parameters()): np.testing.assert_allclose(a, p.grad.numpy(), rtol=1e-5, atol=1e-6)

@pytest.mark.parametrize('fuse', [True, False])
def test_c2_inplace_write_through_a_view(fuse):
    init.manual_seed(0)
    lin = nn.Linear(3, 4)
    def fn(x):
        h = lin(x) * 1.0
        h[:, 0].mul_(2.0)
        return h.sum()
    f = mi.compile(fn, fuse=fuse)
    x = mi.Tensor(np.random.default_rng(0).standard_normal((5, 3)).astype('float32'))
    with mi.no_grad():
        for _ in range(5): np.testing.assert_allclose(f(x).numpy(), fn(x).numpy(), rtol=1e-6)
    assert f.program is not None

def test_c4_clip_grad_norm_inside_the_step():
    def make(ps):
        opt = optim.SGD(ps, lr=0.5)
        step = opt.step
        def clipped_step():
            optim.clip_grad_norm_([p for g in opt.param_groups for p in g['params']], 0.05)
            step()
        opt.step = clipped_step
        return opt
    f = same(make, steps=8)
    assert f.program is not None

@pytest.mark.parametrize('norm_type', [2.0, 1.0, 3.0, float('inf')])
def test_c4_clip_grad_norm_returns_a_fresh_norm_and_clips_only_when_above(norm_type, device='cpu'):
    """The standard step: zero_grad, backward, clip, step, returning (loss, norm); the batch alternates between one
    whose norm is above `max_norm` and one below it, so the program must decide on the device, call by call."""
    rng = np.random.default_rng(3)
    xs = [mi.Tensor(rng.standard_normal((8, 6)).astype('float32') * s, device=device) for s in (0.05, 5.0)]
    y = mi.Tensor(rng.integers(0, 3, 8), device=device)
    def run_(compiled):
        init.manual_seed(0)
        m = nn.Sequential(nn.Linear(6, 7), nn.ReLU(), nn.Linear(7, 3)).to(device)
        opt, lossf = optim.SGD(m.parameters(), lr=0.3, momentum=0.9), nn.CrossEntropyLoss()
        def step(x, y):
            opt.zero_grad(); loss = lossf(m(x), y); loss.backward()
            n = optim.clip_grad_norm_(m.parameters(), 0.4, norm_type)
            opt.step()
            return loss, n
        f = mi.compile(step) if compiled else step
        out = [f(xs[i % 2], y) for i in range(10)]   # held: later calls must not change them
        return np.array([[float(l.detach().numpy()), float(n)] for l, n in out]), [p.detach().numpy() for p in m.parameters()], f
    (a, pa, _), (b, pb, f) = run_(False), run_(True)
    assert f.program is not None
    assert (a[:, 1] > 0.4).any() and (a[:, 1] < 0.4).any()   # both sides of max_norm were exercised
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    for u, v in zip(pb, pa): np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)

def test_c4_clip_grad_norm_nan_spreads_in_a_compiled_step():
    "A NaN gradient after capture: the norm is NaN and every gradient becomes NaN, as eager (and torch)."
    init.manual_seed(0)
    w = nn.Parameter(mi.Tensor(np.ones(3, 'float32'))); v = nn.Parameter(mi.Tensor(np.ones(2, 'float32')))
    def step(x):
        w.grad = v.grad = None
        ((w * x).sum() + (v * 2.0).sum()).backward()
        return optim.clip_grad_norm_([w, v], 1.0), w.grad * 1.0, v.grad * 1.0
    f = mi.compile(step)
    ok = mi.Tensor(np.array([1., 2., 3.], 'float32'))
    for _ in range(4): f(ok)
    assert f.program is not None
    n, gw, gv = f(mi.Tensor(np.array([1., np.nan, 3.], 'float32')))
    assert np.isnan(float(n)) and np.isnan(gw.numpy()).all() and np.isnan(gv.numpy()).all()
    n, gw, gv = f(ok)
    want = np.array([1., 2., 3., 2., 2.]); want = want / (np.linalg.norm(want) + 1e-6)
    np.testing.assert_allclose(np.concatenate([gw.numpy(), gv.numpy()]), want, rtol=1e-5)

def test_c4_error_if_nonfinite_is_refused_in_a_compiled_step():
    init.manual_seed(0)
    lin = nn.Linear(3, 1)
    def step(x):
        lin.weight.grad = lin.bias.grad = None
        lin(x).sum().backward()
        return optim.clip_grad_norm_(lin.parameters(), 1.0, error_if_nonfinite=True)
    f = mi.compile(step)
    x = mi.Tensor(np.ones((2, 3), 'float32'))
    f(x)
    from minima.compile import CaptureError
    with pytest.raises(CaptureError, match='error_if_nonfinite=True reads the norm back'):
        f(x)

def test_m27_compiled_module_proxies_the_module():
    init.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.5))
    cm = mi.compile(m)
    assert [id(p) for p in cm.parameters()] == [id(p) for p in m.parameters()]
    assert list(cm.state_dict().keys()) == list(m.state_dict().keys())
    assert cm.eval() is not None and not m.training
    cm.train()
    assert m.training
    x = mi.Tensor(np.ones((2, 3), 'float32'))
    cm.eval()
    with mi.no_grad():
        for _ in range(4): np.testing.assert_allclose(cm(x).numpy(), m(x).numpy(), rtol=1e-6)
        assert cm.program is not None

class Rebinding(optim.Optimizer):
    "A toy optimizer whose step replaces its state tensor instead of updating it in place."
    def __init__(self, ps): super().__init__(ps, dict(lr=0.1))
    def step(self):
        for g in self.param_groups:
            for p in g['params']:
                st = self.state.setdefault(id(p), {'avg': p.grad.cached_data * 0.0})
                st['avg'] = st['avg'] * 0.9 + p.grad.cached_data
                p.cached_data = p.cached_data - st['avg'] * g['lr']

def test_optimizer_that_replaces_its_state_is_refused():
    from minima.compile import CaptureError
    with pytest.raises(CaptureError, match="Rebinding.step replaces its state 'avg'.*in place"):
        run(True, Rebinding, steps=4)
    run(False, Rebinding, steps=4)   # eager runs

@pytest.mark.parametrize('draw', ['randn', 'rand', 'randint', 'normal_', 'uniform_', 'init_randn', 'randn_like'])
def test_torch_face_random_draws_inside_a_compiled_step(draw):
    "`import minima as torch`: torch.randn/rand/randint/normal_/uniform_ in a compiled step draw afresh on each replay."
    import minima as torch
    def noise(x):
        if draw == 'randn': return torch.randn(*x.shape)
        if draw == 'rand': return torch.rand(x.shape)
        if draw == 'randint': return torch.randint(0, 100, x.shape).float()
        if draw == 'normal_': return torch.empty(*x.shape).normal_(0.0, 2.0)
        if draw == 'uniform_': return torch.zeros(x.shape).uniform_(-1.0, 1.0)
        if draw == 'init_randn': return init.randn(*x.shape, std=3.0)
        return torch.randn_like(x)
    fn = lambda x: x * 2.0 + noise(x)
    f = torch.compile(fn)
    x = torch.ones(5, 4)
    def outs(g):
        torch.manual_seed(0)
        with torch.no_grad(): return [g(x).numpy().copy() for _ in range(7)]
    got, want = outs(f), outs(fn)
    assert f.program is not None and any(i.random is not None for i in f.program.instrs)
    np.testing.assert_allclose(np.array(got), np.array(want), rtol=1e-6)
    assert not np.array_equal(got[5], got[6])   # fresh on every replay

def test_undeclared_random_source_is_refused_in_words():
    from minima.compile import CaptureError
    lin = nn.Linear(3, 3)
    f = mi.compile(lambda x: lin(x) + mi.Tensor(np.random.rand(3).astype('float32')))
    x = mi.Tensor(np.ones((2, 3), 'float32'))
    with mi.no_grad(), pytest.raises(CaptureError, match='@draws_random') as e:
        for _ in range(3): f(x)
    assert "b'" not in str(e.value)

def test_module_list_element_replaced_after_capture():
    "A block swapped inside a module's list (one level down) is seen by the guard's quick check too."
    init.manual_seed(0)
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = [nn.Linear(3, 3), nn.Linear(3, 3)]
        def forward(self, x):
            for b in self.blocks: x = b(x)
            return x.sum()
    net = Net()
    f = mi.compile(net)
    x = mi.Tensor(np.ones((2, 3), 'float32'))
    with mi.no_grad():
        for _ in range(4): f(x)
        assert f.program is not None
        net.blocks[1] = nn.Linear(3, 3)
        for _ in range(4): np.testing.assert_allclose(f(x).numpy(), net(x).numpy(), rtol=1e-6)

def test_guard_quick_check_after_equal_value_rebinding():
    "A scheduler that sets the same learning rate again (a new float object) keeps the program."
    def after(i, m, opt):
        opt.param_groups[0]['lr'] = float(str(opt.param_groups[0]['lr']))   # equal value, new object
    f = same(lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), after)
    assert f.captures == 2

def test_device_method_a_capture_cannot_record_is_refused():
    "A device method outside the recorded primitives (the int8 product) would be left out of the program: refused."
    from minima.compile import CaptureError
    d = mi.cpu()
    a, b, out = d.alloc(8, 'int8'), d.alloc(8, 'int8'), d.alloc(4, 'int32')
    a[:], b[:] = 1, 2
    def step(x):
        d.matmul_int8(a, b, out, 2, 4, 2)
        return x * 2.0
    f = mi.compile(step)
    x = mi.Tensor(np.ones(3, 'float32'))
    f(x)
    with pytest.raises(CaptureError, match='matmul_int8 on the cpu device'): f(x)
