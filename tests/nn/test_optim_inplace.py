"""Optimizers as torch's (issue 34): updates in place of the parameter and of its state (SW13; compile's SW3),
gradient clipping in place (SW11, SW12), `step(closure)` (C5), `opt.state[p]` (C6), `.grad` shape and dtype checked
(reliability D5.1), lr as a float, a 0-d tensor or a 0-d numpy value, torch's `foreach=`/`fused=`/`differentiable=`/
`capturable=` keywords (M1, M2), and the hyper-parameter checks of the newer optimizers (N2)."""
import numpy as np, pytest, torch

import minima as mi
from minima import nn, optim

OPTS = {   # name: (keyword arguments both libraries take, the name of one state buffer)
    'SGD': (dict(lr=0.1, momentum=0.9), 'momentum_buffer'),
    'Adam': (dict(lr=0.1), 'exp_avg'),
    'AdamW': (dict(lr=0.1), 'exp_avg_sq'),
    'RMSprop': (dict(lr=0.1, momentum=0.5, centered=True), 'square_avg'),
    'Adagrad': (dict(lr=0.1), 'sum'),
    'Adadelta': (dict(lr=1.0), 'acc_delta'),
    'Adamax': (dict(lr=0.1), 'exp_inf'),
    'NAdam': (dict(lr=0.1), 'exp_avg'),
    'RAdam': (dict(lr=0.1), 'exp_avg_sq'),
}

def tol(name):
    "torch keeps NAdam's mu_product as a float32 scalar tensor, which moves its float64 steps by ~1e-9."
    return 1e-8 if name == 'NAdam' else 1e-12

def _pair(w0):
    return nn.Parameter(mi.tensor(w0, dtype=mi.float64)), torch.nn.Parameter(torch.tensor(w0))

def _grads(n, shape, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=shape) for _ in range(n)]

@pytest.mark.parametrize('name', list(OPTS))
def test_step_updates_parameter_and_state_in_place(name):
    "SW13: an alias of the parameter and of a state buffer sees every step; the values are torch's."
    kw, buf = OPTS[name]
    p, tp = _pair(np.array([1., -2., 3.]))
    o, to = getattr(optim, name)([p], **kw), getattr(torch.optim, name)([tp], **kw)
    alias, talias = p.detach(), tp.detach()
    state = None
    for i, g in enumerate(_grads(4, (3,))):
        p.grad, tp.grad = mi.tensor(g, dtype=mi.float64), torch.tensor(g)
        o.step(); to.step()
        if state is None: state = o.state[p][buf]
        assert o.state[p][buf] is state   # the same buffer, updated in place
        np.testing.assert_allclose(alias.numpy(), talias.numpy(), rtol=tol(name), atol=1e-14)
        np.testing.assert_allclose(p.detach().numpy(), tp.detach().numpy(), rtol=tol(name), atol=1e-14)
        np.testing.assert_allclose(np.asarray(state.numpy()), to.state[tp][buf].numpy(), rtol=tol(name), atol=1e-14)

@pytest.mark.parametrize('name', ['RMSprop', 'Adagrad', 'Adadelta'])
def test_compiled_step_matches_eager(name):
    "compile's SW3: with the state updated in place, the replayed step follows eager."
    kw, _ = OPTS[name]
    losses = []
    for compiled in (False, True):
        mi.manual_seed(0)
        m = nn.Linear(4, 1)
        o = getattr(optim, name)(m.parameters(), **kw)
        x = mi.tensor(np.linspace(-1, 1, 32, dtype='float32').reshape(8, 4))
        y = mi.tensor(np.linspace(0, 1, 8, dtype='float32').reshape(8, 1))
        def step():
            o.zero_grad()
            loss = ((m(x) - y) ** 2).mean()
            loss.backward(); o.step()
            return loss
        f = mi.compile(step) if compiled else step
        losses.append([f().item() for _ in range(8)])
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5, atol=1e-7)

def test_clip_grad_norm_and_value_write_grad_in_place():
    "SW11, SW12."
    for L, P in ((mi, nn.Parameter), (torch, torch.nn.Parameter)):
        p = P(L.zeros(2, dtype=L.float64)); p.grad = L.tensor([3., 4.], dtype=L.float64)
        g = p.grad
        L.nn.utils.clip_grad_norm_([p], 1.0)
        np.testing.assert_allclose(np.asarray(g.tolist()), [.6, .8], rtol=1e-6)
        q = P(L.zeros(3, dtype=L.float64)); q.grad = L.tensor([10., -10., .5], dtype=L.float64)
        h = q.grad
        L.nn.utils.clip_grad_value_([q], 1.0)
        assert h.tolist() == [1., -1., .5]

@pytest.mark.parametrize('name', list(OPTS))
def test_step_with_closure(name):
    "C5: step(closure) calls the closure with gradients recorded and returns its loss, as torch."
    kw, _ = OPTS[name]
    res = []
    for L, P, O in ((mi, nn.Parameter, optim), (torch, torch.nn.Parameter, torch.optim)):
        p = P(L.tensor([1., -2.], dtype=L.float64))
        o = getattr(O, name)([p], **kw)
        def closure():
            o.zero_grad()
            loss = (p * p * L.tensor([1., 3.], dtype=L.float64)).sum()
            loss.backward()
            return loss
        losses = [float(o.step(closure)) for _ in range(3)]
        with L.no_grad(): o.step(closure)   # the closure records its graph even under no_grad, as torch's
        res.append((losses, p.detach().numpy().copy()))
    np.testing.assert_allclose(res[0][0], res[1][0], rtol=tol(name))
    np.testing.assert_allclose(res[0][1], res[1][1], rtol=tol(name))

def test_state_is_keyed_by_the_parameter():
    "C6."
    p = nn.Parameter(mi.tensor([1., 2.]))
    o = optim.Adam([p], lr=0.1)
    p.grad = mi.tensor([1., 1.]); o.step()
    assert set(o.state[p]) == {'exp_avg', 'exp_avg_sq', 'step'}
    sd = o.state_dict()
    o2 = optim.Adam([p], lr=0.1); o2.load_state_dict(sd)
    assert np.array_equal(o2.state[p]['exp_avg'].numpy(), o.state[p]['exp_avg'].numpy())

@pytest.mark.parametrize('name', list(OPTS))
def test_grad_of_the_wrong_shape_or_dtype_is_refused(name):
    "D5.1: a .grad that would reshape or recast the parameter raises, and the parameter is untouched."
    kw, _ = OPTS[name]
    for grad, err in ((mi.ones(3, 2), ValueError), (mi.ones(1), ValueError), (mi.ones(2, dtype=mi.float64), TypeError)):
        p = nn.Parameter(mi.ones(2))
        o = getattr(optim, name)([p], **kw)
        p.grad = grad
        with pytest.raises(err, match=r'\.grad of shape'): o.step()
        assert p.shape == (2,) and p.dtype == 'float32' and p.tolist() == [1., 1.]

@pytest.mark.parametrize('lr', [0.1, mi.tensor(0.1, dtype=mi.float64), np.float64(0.1), np.array(0.1)])
@pytest.mark.parametrize('name', list(OPTS))
def test_lr_as_float_tensor_or_numpy(name, lr):
    kw, _ = OPTS[name]
    kw = {**kw, 'lr': lr}
    p, tp = _pair(np.array([1., -2., 3.]))
    o, to = getattr(optim, name)([p], **kw), getattr(torch.optim, name)([tp], **{**kw, 'lr': 0.1})
    for g in _grads(3, (3,)):
        p.grad, tp.grad = mi.tensor(g, dtype=mi.float64), torch.tensor(g)
        o.step(); to.step()
    assert type(p.cached_data).__name__ == 'NDArray' and p.dtype == 'float64'
    np.testing.assert_allclose(p.detach().numpy(), tp.detach().numpy(), rtol=tol(name))

@pytest.mark.parametrize('name', list(OPTS))
def test_torch_implementation_keywords_are_accepted(name):
    "M1, M2: foreach=, fused=, differentiable=False, capturable= as torch accepts them; the numbers do not change."
    kw, _ = OPTS[name]
    import inspect
    sig = inspect.signature(getattr(torch.optim, name)).parameters
    extra = {k: v for k, v in dict(foreach=False, fused=False, differentiable=False, capturable=False).items() if k in sig}
    assert 'foreach' in extra and 'differentiable' in extra
    p, tp = _pair(np.array([1., -2.]))
    o, to = getattr(optim, name)([p], **kw, **extra), getattr(torch.optim, name)([tp], **kw, **extra)
    for g in _grads(3, (2,)):
        p.grad, tp.grad = mi.tensor(g, dtype=mi.float64), torch.tensor(g)
        o.step(); to.step()
    np.testing.assert_allclose(p.detach().numpy(), tp.detach().numpy(), rtol=tol(name))
    with pytest.raises(NotImplementedError, match='differentiable'):
        getattr(optim, name)([nn.Parameter(mi.ones(2))], **kw, differentiable=True)

@pytest.mark.parametrize('make', [lambda L, ps: L.optim.RMSprop(ps, alpha=-.5),
                                  lambda L, ps: L.optim.Adagrad(ps, lr_decay=-1),
                                  lambda L, ps: L.optim.Adagrad(ps, initial_accumulator_value=-1),
                                  lambda L, ps: L.optim.Adadelta(ps, rho=1.5),
                                  lambda L, ps: L.optim.NAdam(ps, momentum_decay=-.1)])
def test_bad_hyperparameters_of_the_newer_optimizers(make):
    "N2: refused as torch refuses them."
    with pytest.raises(ValueError): make(torch, [torch.nn.Parameter(torch.ones(2))])
    with pytest.raises(ValueError): make(mi, [nn.Parameter(mi.ones(2))])

# ------------------------------------------------------------------------------------------------------ LBFGS
def _lbfgs_run(L, P, O, line_search, steps=4, **kw):
    "A least-squares fit plus a quartic term, float64, two parameters: the iterates after each step(closure)."
    rng = np.random.default_rng(3)
    A, b = rng.normal(size=(8, 3)), rng.normal(size=8)
    w, c = P(L.tensor(np.zeros(3), dtype=L.float64)), P(L.tensor([0.5], dtype=L.float64))
    o = O.LBFGS([w, c], line_search_fn=line_search, **kw)
    At, bt = L.tensor(A, dtype=L.float64), L.tensor(b, dtype=L.float64)
    def closure():
        o.zero_grad()
        r = At @ w + c - bt
        loss = (r * r).sum() + (w ** 4).sum() * 0.1
        loss.backward()
        return loss
    out = []
    for _ in range(steps):
        loss = o.step(closure)
        out.append((float(loss), np.concatenate([w.detach().numpy(), c.detach().numpy()])))
    return out, o.state[w]['func_evals'], o.state[w]['n_iter']

@pytest.mark.parametrize('line_search', [None, 'strong_wolfe'])
@pytest.mark.parametrize('kw', [dict(), dict(lr=0.5, max_iter=3, history_size=2), dict(max_iter=50, max_eval=30)])
def test_lbfgs_matches_torch(line_search, kw):
    ours, ne, ni = _lbfgs_run(mi, nn.Parameter, optim, line_search, **kw)
    theirs, te, ti = _lbfgs_run(torch, torch.nn.Parameter, torch.optim, line_search, **kw)
    assert (ne, ni) == (te, ti)
    for (l1, x1), (l2, x2) in zip(ours, theirs):
        np.testing.assert_allclose(l1, l2, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(x1, x2, rtol=1e-8, atol=1e-10)

def test_lbfgs_bad_input():
    p = nn.Parameter(mi.ones(2))
    with pytest.raises(ValueError, match='line_search_fn'): optim.LBFGS([p], line_search_fn='armijo')
    with pytest.raises(ValueError, match='parameter groups'):
        optim.LBFGS([{'params': [p]}, {'params': [nn.Parameter(mi.ones(1))]}])
    with pytest.raises(RuntimeError, match='closure'): optim.LBFGS([p]).step(None)

def test_a_hyperparameter_of_the_wrong_type_is_named():
    "reliability D5.4: SGD(lr='0.1') says which argument is wrong (torch's error is a bare comparison TypeError)."
    with pytest.raises(TypeError, match="lr must be a number"): optim.SGD([nn.Parameter(mi.ones(2))], lr='0.1')
    with pytest.raises(TypeError, match="weight_decay must be a number"):
        optim.Adam([nn.Parameter(mi.ones(2))], weight_decay=[0.1])
