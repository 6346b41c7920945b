"""torch's autograd API on minima (issue 34): `autograd.grad` always returns a tuple (SW2), `detach_` (M17),
`retains_grad` (M18), `autograd.backward` (M19), `register_post_accumulate_grad_hook` (M20), `autograd.Function` (M23),
`requires_grad_(False)` on a non-leaf (N1), and grad mode per thread (reliability D6.1). Checked against torch."""
import threading
import numpy as np, pytest, torch

import minima as mi

def M(a, rg=True): return mi.tensor(np.asarray(a, dtype='float64'), dtype=mi.float64, requires_grad=rg)
def T(a, rg=True): return torch.tensor(np.asarray(a, dtype='float64'), requires_grad=rg)
def close(a, b, tol=1e-12):
    a = a.detach().numpy() if isinstance(a, mi.Tensor) else np.asarray(a)
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)

def test_grad_of_one_tensor_is_a_tuple():
    "SW2: `grad(y, x)[0]` is the gradient, not its first element; `g, = grad(y, x)` unpacks."
    for L, mk in ((mi, M), (torch, T)):
        x = mk([1., 2., 3.])
        r = L.autograd.grad((x * x).sum(), x)
        assert isinstance(r, tuple) and len(r) == 1
        close(r[0], [2., 4., 6.])
        g, = L.autograd.grad((x * x).sum(), x)
        close(g, [2., 4., 6.])

def test_detach_in_place():
    "M17: detach_ makes the tensor a leaf without grad; a view cannot be detached in place (as torch)."
    for L, mk in ((mi, M), (torch, T)):
        x = mk([1., 2.])
        y = x * 2
        assert y.detach_() is y and y.is_leaf and not y.requires_grad and y.grad_fn is None
        with pytest.raises(RuntimeError, match='[Cc]an.t detach views in-place'): (x * 2)[0].detach_()

def test_retains_grad():
    "M18."
    for L, mk in ((mi, M), (torch, T)):
        x = mk([1., 2.])
        y, z = x * 2, x * 3
        y.retain_grad()
        assert y.retains_grad and not z.retains_grad and not x.retains_grad

def test_autograd_backward_several_outputs():
    "M19: one pass from several outputs, each with its upstream gradient (None for a scalar)."
    rng = np.random.default_rng(0)
    x0, g0 = rng.normal(size=(3, 2)), rng.normal(size=(3, 2))
    res = []
    for L, mk in ((mi, M), (torch, T)):
        x = mk(x0)
        a, b = x.exp(), (x * x).sum()
        L.autograd.backward([a, b], [mk(g0, False), None])
        res.append(x.grad)
        x.grad = None
        L.autograd.backward((x * x).sum())
        res.append(x.grad)
    close(res[0], res[2]); close(res[1], res[3])
    with pytest.raises(RuntimeError, match='grad_tensors'): mi.autograd.backward([M([1.]) * 2], [None, None])

def test_post_accumulate_grad_hook():
    "M20: called with the leaf once its .grad holds the accumulated sum; refused on a non-leaf."
    seen = {}
    for L, mk in ((mi, M), (torch, T)):
        x = mk([1., 2.])
        h = x.register_post_accumulate_grad_hook(lambda p: seen.setdefault(L.__name__, []).append(p.grad.clone()))
        (x * x).sum().backward(); (x * 3).sum().backward()
        h.remove(); (x * 3).sum().backward()
        with pytest.raises(RuntimeError, match='non-leaf'): (x * 2).register_post_accumulate_grad_hook(print)
    assert len(seen['minima']) == len(seen['torch']) == 2
    for a, b in zip(seen['minima'], seen['torch']): close(a, b)

def test_requires_grad_false_on_a_non_leaf_raises():
    "N1: as torch (use detach)."
    for mk in (M, T):
        with pytest.raises(RuntimeError, match='leaf'): (mk([1.]) * 2).requires_grad_(False)

# ------------------------------------------------------------------------------------------- autograd.Function
def _functions(L):
    class Exp(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp(); ctx.save_for_backward(y); return y
        @staticmethod
        def backward(ctx, g):
            y, = ctx.saved_tensors; return g * y
    class Pair(L.autograd.Function):
        @staticmethod
        def forward(ctx, a, k, b):
            ctx.save_for_backward(a, b); ctx.k = k
            ctx.flags = ctx.needs_input_grad
            return a * b * k, (a + b).sin()
        @staticmethod
        def backward(ctx, g1, g2):
            a, b = ctx.saved_tensors
            c = g2 * (a + b).cos()
            return g1 * b * ctx.k + c, None, g1 * a * ctx.k + c
    class Cube(L.autograd.Function):   # torch 2's style: forward without ctx, then setup_context
        @staticmethod
        def forward(x): return x * x * x
        @staticmethod
        def setup_context(ctx, inputs, output): ctx.save_for_backward(inputs[0])
        @staticmethod
        def backward(ctx, g):
            x, = ctx.saved_tensors; return 3 * g * x * x
    return Exp, Pair, Cube

def test_autograd_function_matches_torch():
    "M23: custom forward/backward with save_for_backward, two outputs, a non-tensor argument, setup_context,"
    " and gradients of gradients (random upstream gradients, float64)."
    rng = np.random.default_rng(1)
    a0, b0, g1, g2, g3 = (rng.normal(size=(2, 3)) for _ in range(5))
    res = {}
    for L, mk in ((mi, M), (torch, T)):
        Exp, Pair, Cube = _functions(L)
        a, b = mk(a0), mk(b0, rg=False)
        b.requires_grad_(True)
        p, s = Pair.apply(a, 2.5, b)
        e, c = Exp.apply(a), Cube.apply(b)
        assert e.grad_fn is not None and p.requires_grad
        ge, = L.autograd.grad((e * mk(g3, False)).sum() + (c * mk(g3, False)).sum(), a, create_graph=True)
        L.autograd.backward([p, s, ge], [mk(g1, False), mk(g2, False), mk(g3, False)])
        res[L.__name__] = (p, s, e, c, a.grad, b.grad)
    for m, t in zip(res['minima'], res['torch']): close(m, t)

def test_autograd_function_guards():
    Exp, Pair, Cube = _functions(mi)
    x = M([1., 2.])
    y = Exp.apply(x)
    y.mul_(2)
    with pytest.raises(RuntimeError, match='modified by an inplace operation'): y.sum().backward()
    z = Exp.apply(x).sum()
    z.backward()
    with pytest.raises(RuntimeError, match='second time'): z.backward()
    with mi.no_grad(): assert not Exp.apply(x).requires_grad
    class Bad(mi.autograd.Function):
        @staticmethod
        def forward(ctx, x, k): return x * k
        @staticmethod
        def backward(ctx, g): return g
    with pytest.raises(RuntimeError, match='incorrect number of gradients'): Bad.apply(x, 2.).sum().backward()
    class Bad2(Bad):
        @staticmethod
        def backward(ctx, g): return g, g
    with pytest.raises(RuntimeError, match='not a Tensor'): Bad2.apply(x, 2.).sum().backward()
    assert type(Exp.apply(x).grad_fn).__name__ == 'ExpBackward'

# ------------------------------------------------------------------------------------------- grad mode per thread
def _setup(seed):
    "A model of its own, made before the threads start (initialisation draws from the global generator)."
    rng = np.random.default_rng(seed)
    X, Y = rng.normal(size=(16, 4)).astype('float32'), rng.normal(size=(16, 1)).astype('float32')
    mi.manual_seed(seed)
    model = mi.nn.Sequential(mi.nn.Linear(4, 8), mi.nn.ReLU(), mi.nn.Linear(8, 1))
    return model, mi.optim.SGD(model.parameters(), lr=0.05), mi.tensor(X), mi.tensor(Y)

def _train(setup, steps, out, errors, key):
    try:
        model, opt, x, y = setup
        for _ in range(steps):
            opt.zero_grad()
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            with mi.no_grad(): model(x)   # an evaluation in between
        out[key] = [p.detach().numpy().copy() for p in model.parameters()]
    except Exception as e: errors.append(repr(e))

def test_grad_mode_is_per_thread():
    "D6.1: four threads train their own models while a fifth evaluates under no_grad; all as when run alone."
    import sys
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        alone, errors = {}, []
        for k in range(4): _train(_setup(k), 30, alone, errors, k)
        together, stop = {}, threading.Event()
        def evaluate():
            m = mi.nn.Linear(4, 1); x = mi.tensor(np.ones((2, 4), 'float32'))
            while not stop.is_set():
                with mi.no_grad(): assert not m(x).requires_grad
        ev = threading.Thread(target=evaluate); ev.start()
        setups = [_setup(k) for k in range(4)]
        ts = [threading.Thread(target=_train, args=(setups[k], 30, together, errors, k)) for k in range(4)]
        for t in ts: t.start()
        for t in ts: t.join()
        stop.set(); ev.join()
    finally: sys.setswitchinterval(old)
    assert not errors, errors
    for k in range(4):
        for a, b in zip(alone[k], together[k]): np.testing.assert_array_equal(a, b)

def test_no_grad_in_one_thread_leaves_another_recording():
    entered, release, seen = threading.Event(), threading.Event(), []
    def hold():
        with mi.no_grad():
            entered.set(); release.wait(5)
    t = threading.Thread(target=hold); t.start(); entered.wait(5)
    try:
        seen.append(mi.is_grad_enabled())
        seen.append((M([1.]) * 2).requires_grad)
    finally: release.set(); t.join()
    assert seen == [True, True]


def test_compute_gradient_of_variables_can_replace_instead_of_accumulating():
    "`accumulate=False` (needle's rule): each `.grad` is this pass's gradient (a graph here)."
    from minima.autograd import compute_gradient_of_variables as cgv
    x = M([1.0, 2.0])
    for accumulate, want in ((True, [4.0, 8.0]), (False, [2.0, 4.0])):
        x.grad = None
        for _ in range(2):
            cgv((x * x).sum(), M(1.0, False), create_graph=True, accumulate=accumulate)
        np.testing.assert_allclose(x.grad.detach().numpy(), want)
    assert x.grad.requires_grad   # a graph: a second derivative can follow
