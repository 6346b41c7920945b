"""In-place ops through views, reused views, views of views, and interleaved base/view writes, against torch
(issue 34: SW1, C3, SW19). Every program runs twice, once with `L = minima` and once with `L = torch`, in float64
with random upstream gradients; values and every gradient must agree, and neither may raise a version error that
the other does not."""
import numpy as np, pytest, torch

import minima

def M(a): return minima.tensor(np.asarray(a, dtype='float64'), dtype=minima.float64)
W = [[1., 2., 3.], [4., 5., 6.]]

def leaf(L, a):
    return (torch.tensor(a, dtype=torch.float64) if L is torch else M(a)).requires_grad_(True)

def close(a, b, tol=1e-10):
    a = a.detach().numpy() if isinstance(a, minima.Tensor) else a
    b = b.detach().numpy() if isinstance(b, torch.Tensor) else b
    np.testing.assert_allclose(np.asarray(a, dtype='float64'), np.asarray(b, dtype='float64'), rtol=tol, atol=tol)

def both(prog, *arrays):
    "Run `prog(L, *leaves)` with minima and torch; return the two (value, grads) pairs."
    res = []
    for L in (minima, torch):
        xs = [leaf(L, a) for a in arrays]
        out = prog(L, *xs)
        res.append((out, [x.grad for x in xs]))
    return res

def _keep(seen, key):
    def hook(g): seen[key] = g.detach().clone()
    return hook

# ---------------------------------------------------------------- the audit's repros (SW1, C3, SW19)
def test_second_inplace_op_on_the_same_view_reaches_the_base():
    "SW1: `v.mul_(2); v.pow_(2)` on one view object: both ops are in the base's graph."
    def prog(L, x):
        y = x * 1.; v = y[1]; v.mul_(2); v.pow_(2)
        (y * L.tensor(W, dtype=L.float64)).sum().backward()
        return y
    (mv, mg), (tv, tg) = both(prog, [[1., 2., 3.], [-4., 0.5, -0.3]])
    close(mv, tv); close(mg[0], tg[0])

@pytest.mark.parametrize('second', ['mul_', 'clamp_', 'pow_', 'masked_fill_', 'setitem', 'add_'])
def test_any_second_inplace_op_on_a_view(second):
    def prog(L, x, o):
        y = x * 1.; v = y[1]; v.mul_(2)
        if second == 'mul_': v.mul_(o[0])
        elif second == 'clamp_': v.clamp_(min=-0.5)
        elif second == 'pow_': v.pow_(3)
        elif second == 'masked_fill_': v.masked_fill_(L.tensor([True, False, True]), 0.25)
        elif second == 'setitem': v[0] = o[1, 0]
        else: v.add_(o[1])
        (y * L.tensor(W, dtype=L.float64)).sum().backward()
        return y
    (mv, mg), (tv, tg) = both(prog, [[1., 2., 3.], [-4., 0.5, -0.3]], [[.5, -1., 2.], [3., .25, -.75]])
    close(mv, tv); close(mg[0], tg[0]); close(mg[1], tg[1])

def test_box_decoding_offset_gets_its_gradient():
    "SW1's typical victim: `b = y[:, :2]; b.mul_(2.); b.add_(o)` must give the learnable offset its gradient."
    def prog(L, x, o):
        y = x * 1.; b = y[:, :2]; b.mul_(2.); b.add_(o)
        (y * L.tensor(W, dtype=L.float64)).sum().backward()
        return y
    (mv, mg), (tv, tg) = both(prog, [[1., 2., 3.], [4., 5., 6.]], [[.1, .2], [.3, .4]])
    assert mg[1] is not None
    close(mv, tv); close(mg[0], tg[0]); close(mg[1], tg[1])

def test_no_spurious_version_error_after_reusing_a_view():
    "C3: clamp_ on the base between two writes through a view is not a modification of anything clamp saved."
    def prog(L, x):
        y = x * 1.; v = y[1]; v.mul_(2); y.clamp_(min=-.5); v.mul_(3)
        y.sum().backward()
        return y
    (mv, mg), (tv, tg) = both(prog, [[1., -2.], [3., -4.]])
    close(mv, tv); close(mg[0], tg[0])

def test_hook_registered_before_an_inplace_op_sees_the_old_value_gradient():
    "SW19: the hook belongs to the value it was registered on, as torch's."
    seen = {}
    def prog(L, x):
        y = x * 2; y.register_hook(_keep(seen, L.__name__))
        y.mul_(3); (y * L.tensor([1., 10.], dtype=L.float64)).sum().backward()
        return y
    (mv, mg), (tv, tg) = both(prog, [1., 2.])
    close(seen['minima'], seen['torch']); close(seen['minima'], [3., 30.]); close(mg[0], tg[0])

def test_hook_registered_after_an_inplace_op_sees_the_new_value_gradient():
    seen = {}
    def prog(L, x):
        y = x * 2; y.mul_(3)
        y.register_hook(_keep(seen, L.__name__))
        (y * L.tensor([1., 10.], dtype=L.float64)).sum().backward()
        return y
    both(prog, [1., 2.])
    close(seen['minima'], seen['torch'])

# ---------------------------------------------------------------- random programs
def _random_program(rng: np.random.Generator, n_ops: int):
    """A list of steps over a base `y` (4x3) and views of it (rows, columns, slices, transposes, views of views).
    Each step is data (so the same program replays on both libraries)."""
    steps, n_views = [], 0
    for _ in range(n_ops):
        k = rng.integers(0, 12)
        src = int(rng.integers(-1, n_views)) if n_views else -1   # -1: the base
        if k <= 2:   # a new view of the base or of an existing view
            kind = ['row', 'col', 'rows', 'T', 'step', 'flat'][rng.integers(0, 6)]
            steps.append(('view', src, kind, int(rng.integers(0, 8)))); n_views += 1
        elif k == 3: steps.append(('op', src, 'mul_', float(rng.choice([-1.5, 0.5, 2.]))))
        elif k == 4: steps.append(('op', src, 'add_', float(rng.normal())))
        elif k == 5: steps.append(('op', src, 'add_o', int(rng.integers(0, 4))))
        elif k == 6: steps.append(('op', src, 'clamp_', float(rng.normal())))
        elif k == 7: steps.append(('op', src, 'pow_', 2))
        elif k == 8: steps.append(('op', src, 'setitem', float(rng.normal())))
        elif k <= 10: steps.append(('use', src, None, float(rng.normal())))
        else: steps.append(('use', src, 'square', 1.))   # saves t, which later steps may overwrite
    return steps

def _view(t, kind, r):
    if t.ndim == 0: return t
    if kind == 'row': return t[r % t.shape[0]]
    if kind == 'col': return t[:, r % t.shape[1]] if t.ndim == 2 else t[r % t.shape[0]:]
    if kind == 'rows': return t[r % t.shape[0]:]
    if kind == 'T': return t.T if t.ndim == 2 else t[:]
    if kind == 'step': return t[::2]
    return t[:]

def _run(L, steps, x0, o0, g0, c0, clones=False):
    x, o = leaf(L, x0), leaf(L, o0)
    y = x * 1.
    views, acc = [], 0
    for kind, src, what, arg in steps:
        t = y if src < 0 else views[src]
        if kind == 'view':
            views.append(y.view(-1) if what == 'flat' and src < 0 else _view(t, what, arg)); continue
        if kind == 'use':
            if what != 'square': acc = acc + (t * arg).sum()
            elif clones: acc = acc + (t.clone() * t.clone()).sum()
            else: acc = acc + (t * t).sum()
            continue
        if what == 'mul_': t.mul_(arg)
        elif what == 'add_': t.add_(arg)
        elif what == 'add_o':   # a learnable operand, broadcast to the view's shape
            t.add_((o.reshape(-1)[arg] * 1.).expand(t.shape) if t.ndim else o.reshape(-1)[arg] * 1.)
        elif what == 'clamp_': t.clamp_(min=arg)
        elif what == 'pow_': t.pow_(2)
        elif what == 'setitem':
            if t.ndim == 0: t.fill_(arg)
            else: t[0] = o.reshape(-1)[0] * arg
        t.clamp_(min=-3., max=3.)   # keeps pow_ from overflowing
    loss = (y * L.tensor(g0)).sum() + acc + sum((v * L.tensor(c0[: v.numel()].reshape(v.shape))).sum() for v in views)
    loss.backward()
    return y, x.grad, o.grad

@pytest.mark.parametrize('chunk', range(4))
def test_random_inplace_view_programs_match_torch(chunk):
    "2,200 random programs (4 chunks of 550): values and both gradients as torch's, and no spurious error."
    rng = np.random.default_rng(1000 + chunk)
    for i in range(550):
        steps = _random_program(rng, int(rng.integers(2, 9)))
        x0, o0 = rng.normal(size=(4, 3)), rng.normal(size=(2, 2))
        g0, c0 = rng.normal(size=(4, 3)), rng.normal(size=12)
        where = f'program {chunk}:{i}: {steps}'
        try: t = _run(torch, steps, x0, o0, g0, c0)
        except RuntimeError as e:
            # torch refuses a write to a value that a node saved. minima refuses too, or, where it already keeps a
            # copy of the old value (an op that reads its own output, chapter 18), gives the gradient that torch
            # gives with explicit clones
            assert 'modified by an inplace operation' in str(e), f'{where}: torch raised {e}'
            t = _run(torch, steps, x0, o0, g0, c0, clones=True)
            try: m = _run(minima, steps, x0, o0, g0, c0)
            except RuntimeError as e:
                assert 'modified in place' in str(e), f'{where}: minima raised {e}'
                continue
        else:
            try: m = _run(minima, steps, x0, o0, g0, c0)
            except RuntimeError as e: raise AssertionError(f'{where}: minima raised {e}, torch did not') from None
        for a, b, name in zip(m, t, ('y', 'x.grad', 'o.grad')):
            if b is None: assert a is None or np.all(a.numpy() == 0), f'{where}: {name}'; continue
            assert a is not None, f'{where}: {name} is None'
            np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-9, atol=1e-9, err_msg=f'{where}: {name}')
