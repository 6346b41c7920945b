"""Issue 21 (torch's face, Tensor/ops/autograd side): each audit finding (torch-audit-3) as a check against torch 2.13.
Each test failed before the fix (the finding's id is in its docstring) and passes after."""
import numpy as np, pytest, torch
import minima as mi

RNG = np.random.default_rng(21)
def r(*shape, dtype='float64'): return RNG.standard_normal(shape).astype(dtype)
def close(a, b, tol=1e-6): return np.allclose(np.asarray(a.detach().numpy() if hasattr(a, 'detach') else a),
                                              np.asarray(b.detach().numpy() if hasattr(b, 'detach') else b), atol=tol, rtol=tol)


# ------------------------------------------------------------------ silent wrong answers
def test_inplace_operators_write_into_the_same_tensor():
    "SW1: `a += 1` writes in place (an alias sees it), and so do -=, *=, /=."
    a = mi.Tensor([1., 2.], requires_grad=False); b = a
    a += 1; assert b is a and b.numpy().tolist() == [2., 3.]
    a -= 0.5; a *= 2; a /= 4
    assert b.numpy().tolist() == [0.75, 1.25] and b._version == 4

def test_manual_sgd_loop_updates_the_model_as_torch():
    "SW1: `p -= lr * p.grad` under no_grad updates the module's parameters, exactly as torch."
    x = r(5, 3, dtype='float32')
    m = mi.nn.Linear(3, 2); tm = torch.nn.Linear(3, 2)
    with torch.no_grad():
        tm.weight.copy_(torch.tensor(m.weight.detach().numpy())); tm.bias.copy_(torch.tensor(m.bias.detach().numpy()))
    for _ in range(3):
        (m(mi.tensor(x)) ** 2).sum().backward(); (tm(torch.tensor(x)) ** 2).sum().backward()
        with mi.no_grad():
            for p in m.parameters(): p -= 0.1 * p.grad; p.grad.zero_()
        with torch.no_grad():
            for p in tm.parameters(): p -= 0.1 * p.grad; p.grad.zero_()
    assert close(m.weight, tm.weight, 1e-5) and close(m.bias, tm.bias, 1e-5)

def test_inplace_on_a_leaf_that_requires_grad_raises():
    "N1: `w += 1` (and add_, zero_, ...) on a leaf requiring grad, outside no_grad, raises as torch; inside, it writes."
    w = mi.tensor([1., 2.], requires_grad=True)
    for f in [lambda: w.__iadd__(1), lambda: w.add_(1), lambda: w.zero_(), lambda: w.fill_(3.), lambda: w.mul_(2),
              lambda: w.uniform_(), lambda: w.normal_(), lambda: w.copy_(mi.tensor([0., 0.])), lambda: w.clamp_(0, 1)]:
        with pytest.raises(RuntimeError, match='leaf Variable that requires grad'): f()
    assert w.is_leaf and w.detach().numpy().tolist() == [1., 2.]
    with mi.no_grad(): w += 1
    assert w.is_leaf and w.requires_grad and w.detach().numpy().tolist() == [2., 3.]

def test_inplace_methods_match_torch():
    "M5: add_, sub_, mul_, div_, zero_, fill_, copy_, clamp_ write in place with the version counter, as torch."
    a = r(3, 4)
    for name, args in [('add_', (2.5,)), ('sub_', (r(4),)), ('mul_', (r(3, 4),)), ('div_', (3.0,)), ('zero_', ()),
                       ('fill_', (1.5,)), ('copy_', (r(3, 4),)), ('clamp_', (-0.5, 0.5))]:
        m, t = mi.tensor(a), torch.tensor(a)
        margs = [mi.tensor(v) if isinstance(v, np.ndarray) else v for v in args]
        targs = [torch.tensor(v) if isinstance(v, np.ndarray) else v for v in args]
        v0 = m._version
        assert getattr(m, name)(*margs) is m
        getattr(t, name)(*targs)
        assert close(m, t) and m._version == v0 + 1, name
    m = mi.tensor(a); m.add_(mi.tensor(a), alpha=2.0)
    assert close(m, 3 * a)
    mi.manual_seed(0); u = mi.zeros(2000).uniform_(-2., 3.); n = mi.zeros(2000).normal_(1., 0.5)
    assert -2 <= u.numpy().min() and u.numpy().max() < 3 and abs(n.numpy().mean() - 1) < 0.05 and abs(n.numpy().std() - 0.5) < 0.05

def test_inplace_on_a_non_leaf_keeps_the_graph_like_torch():
    "SW1: `out += identity` in a forward pass is recorded: gradients match torch's."
    xa, wa = r(4, 3), r(3, 3)
    x, w = mi.tensor(xa, requires_grad=True), mi.tensor(wa, requires_grad=True)
    tx, tw = torch.tensor(xa, requires_grad=True), torch.tensor(wa, requires_grad=True)
    h = x @ w; h += x; h *= 2; h -= 1
    th = tx @ tw; th += tx; th *= 2; th -= 1
    g = r(4, 3)
    h.backward(mi.tensor(g)); th.backward(torch.tensor(g))
    assert not h.is_leaf and close(h, th) and close(x.grad, tx.grad) and close(w.grad, tw.grad)

def test_second_backward_accumulates_into_the_same_grad_tensor():
    "SW16: an earlier reference `g = x.grad` sees the accumulated sum, as torch."
    x = mi.Tensor([1., 2.], requires_grad=True)
    (x * 2).sum().backward(); g = x.grad
    (x * 3).sum().backward()
    tx = torch.tensor([1., 2.], requires_grad=True)
    (tx * 2).sum().backward(); tg = tx.grad; (tx * 3).sum().backward()
    assert g is x.grad and g.numpy().tolist() == [5., 5.] == tg.tolist() and tg is tx.grad
    y = mi.Tensor([1., 1.], requires_grad=False); x.grad = y      # a .grad set by hand is added to in place too
    (x * 3).sum().backward()
    assert x.grad is y and y.numpy().tolist() == [4., 4.]

def test_from_numpy_keeps_dtype_and_shares_memory():
    "SW11: `Tensor.from_numpy` / `minima.from_numpy` keep float64 and share memory, as torch."
    for f in (mi.Tensor.from_numpy, mi.from_numpy):
        a = np.arange(6.).reshape(2, 3)
        t, tt = f(a), torch.from_numpy(a)
        assert t.dtype == 'float64' == str(tt.dtype).split('.')[1]
        a[0, 0] = 42.
        assert t.numpy()[0, 0] == 42. == tt[0, 0].item()
        t[1, 1] = -1.
        assert a[1, 1] == -1.
    for dt in ['float32', 'float16', 'int32', 'uint8', 'bool']:
        assert mi.from_numpy(np.zeros(3, dt)).dtype == dt
    assert mi.from_numpy(np.arange(6.)[::2]).numpy().tolist() == [0., 2., 4.]   # strided: a copy, same values

def test_float16_mean_accumulates_wider():
    "SW8: float16 mean of 1000 x 100 is 100 (torch accumulates in float32), also along a dim."
    a = np.full((2, 1000), 100., 'float16')
    m, t = mi.Tensor(a, dtype='float16'), torch.tensor(a)
    assert m.mean().item() == t.mean().item() == 100. and m.mean().dtype == 'float16'
    assert m.mean(1).detach().numpy().tolist() == t.mean(1).tolist()

def test_nested_list_index_reads_as_torch():
    "SW14: `x[[[0, 1], [1, 2]]]` is a tuple of index lists, as torch 2.13 reads it."
    a = r(3, 4)
    for idx in ([[0, 1], [1, 2]], [[0, 2]], [[0, 1], slice(None)]):
        got, want = mi.Tensor(a, dtype='float64')[list(idx)], torch.tensor(a)[list(idx)]
        assert got.shape == tuple(want.shape) and close(got, want), idx
    assert mi.tensor(a)[[0, 2]].shape == (2, 4)   # a flat list stays one index array


# ------------------------------------------------------------------ crashes
def test_setitem_through_a_mask_or_an_integer_array():
    "C1: `x[x > 5] = 0`, `x[idx] = v` (tensor, numpy, list, broadcast value, duplicates) write as torch."
    a = np.arange(12.).reshape(3, 4)
    cases = [lambda X, T: X > 5, lambda X, T: T(np.array([0, 2])), lambda X, T: (T(np.array([0, 2])), T(np.array([1, 3]))),
             lambda X, T: (slice(None), T(np.array([3, 0]))), lambda X, T: T(np.array([1, 1]))]
    for i, make in enumerate(cases):
        for value in (0., 7, r(4) if i in (1, 4) else 5.):
            m, t = mi.tensor(a), torch.tensor(a)
            m[make(m, mi.tensor)] = mi.tensor(value) if isinstance(value, np.ndarray) else value
            t[make(t, torch.tensor)] = torch.tensor(value) if isinstance(value, np.ndarray) else value
            assert close(m, t), (i, value)
    m = mi.tensor(a); m[np.arange(12.).reshape(3, 4) > 5] = 0.
    assert m.numpy()[2].tolist() == [0.] * 4
    m = mi.tensor(a); m[[0, 2]] = -1.
    assert m.numpy()[[0, 2]].tolist() == [[-1.] * 4] * 2
    w = mi.tensor(a, requires_grad=True)
    with pytest.raises(RuntimeError, match='requires grad'): w[w > 0] = 0.

def test_uint8_setitem_wraps_around():
    "C14: `uint8_t[0] = -1` is 255 as torch; a mask assignment wraps too."
    for idx in (0, np.array([True, False, True])):
        m, t = mi.Tensor(np.zeros(3, 'uint8')), torch.zeros(3, dtype=torch.uint8)
        m[idx] = -1; t[torch.tensor(idx) if isinstance(idx, np.ndarray) else idx] = -1
        assert m.numpy().tolist() == t.tolist()

def test_two_index_arrays_pick_and_differentiate_as_torch():
    "C2: `logp[arange(N), y]` reads and backpropagates as torch (duplicates add up)."
    a, y = r(5, 4), np.array([1, 3, 0, 3, 3])
    m, t = mi.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    for mi_idx, t_idx in [((mi.arange(5), mi.tensor(y)), (torch.arange(5), torch.tensor(y))),
                          ((np.array([0, 0, 4]), np.array([1, 1, 2])), (torch.tensor([0, 0, 4]), torch.tensor([1, 1, 2]))),
                          ((np.array([[0], [2]]), np.array([1, 3])), (torch.tensor([[0], [2]]), torch.tensor([1, 3])))]:
        got, want = m[mi_idx], t[t_idx]
        g = r(*want.shape)
        assert got.shape == tuple(want.shape) and close(got, want)
        gm, = mi.grad(got, [m], mi.tensor(g)); gt, = torch.autograd.grad(want, [t], torch.tensor(g))
        assert close(gm, gt)

def test_backward_and_grad_take_torchs_keywords():
    "C3, N2, N3: backward(gradient=, retain_graph=), grad(allow_unused=, retain_graph=); torch's errors."
    a, g = r(3), r(3)
    x, tx = mi.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    y, ty = x * x, tx * tx
    y.backward(gradient=mi.tensor(g), retain_graph=True); ty.backward(gradient=torch.tensor(g), retain_graph=True)
    y.backward(mi.tensor(g)); ty.backward(torch.tensor(g))
    assert close(x.grad, tx.grad)
    with pytest.raises(RuntimeError, match='second time'): y.backward(mi.tensor(g))
    with pytest.raises(RuntimeError, match='second time'): ty.backward(torch.tensor(g))
    z = (x * 3).sum()   # mul by a number saves nothing: torch lets it run twice, so does minima
    z.backward(); z.backward()
    u = mi.tensor([1.], requires_grad=True)
    s = (x * x).sum()
    with pytest.raises(RuntimeError, match='not used'): mi.grad(s, [x, u], retain_graph=True)
    gx, gu = mi.grad(s, [x, u], allow_unused=True, retain_graph=True)
    assert gu is None and close(gx, 2 * a)
    assert mi.grad(s, [x, u], allow_unused=True, materialize_grads=True)[1].numpy().tolist() == [0.]
    with pytest.raises(RuntimeError, match='does not require grad'):
        mi.grad((x * 2).sum(), [mi.tensor([1.])])
    w = mi.tensor([2.], requires_grad=True); v = mi.tensor([5.], requires_grad=True)
    (w * v).sum().backward(inputs=[w])
    assert w.grad.numpy().tolist() == [5.] and v.grad is None

def test_dim_keyword_everywhere():
    "C5: cat/stack/reductions/softmax take `dim=` (method and top level), as torch."
    a, b = r(2, 3), r(2, 3)
    m, t = [mi.tensor(a), mi.tensor(b)], [torch.tensor(a), torch.tensor(b)]
    assert close(mi.cat(m, dim=1), torch.cat(t, dim=1)) and close(mi.stack(m, dim=1), torch.stack(t, dim=1))
    assert close(mi.concat(m, dim=-1), torch.concat(t, dim=-1))
    for name in ['sum', 'mean', 'amax', 'amin', 'logsumexp', 'softmax', 'log_softmax', 'argmax', 'argmin', 'std', 'var',
                 'cumsum', 'prod']:
        assert close(getattr(m[0], name)(dim=1), getattr(t[0], name)(dim=1)), name
        assert close(getattr(mi, name)(m[0], dim=0), getattr(torch, name)(t[0], dim=0)), name

def test_cat_and_stack_promote_mixed_dtypes():
    "C7: cat/stack of int32 and float64 give float64, as torch."
    m = [mi.tensor(np.array([1, 2], 'int32')), mi.tensor(np.array([.5, 1.5]))]
    t = [torch.tensor(np.array([1, 2], 'int32')), torch.tensor(np.array([.5, 1.5]))]
    for f in ('cat', 'stack'):
        got, want = getattr(mi, f)(m), getattr(torch, f)(t)
        assert got.dtype == 'float64' and str(want.dtype) == 'torch.float64' and close(got, want)

@pytest.mark.parametrize('op', ['exp', 'log', 'sqrt', 'sin', 'cos', 'tanh', 'sigmoid'])
@pytest.mark.parametrize('dtype', ['int64', 'int32', 'bool', 'float16'])
def test_unary_float_ops_promote_integers_and_run_in_float16(op, dtype):
    "C6: exp/log/sqrt/sin/cos/tanh/sigmoid of integer tensors are float32, of float16 stay float16, as torch."
    a = np.array([1, 4, 2, 0]).astype(dtype)
    got, want = getattr(mi.tensor(a), op)(), getattr(torch.tensor(a), op)()
    assert got.dtype == str(want.dtype).split('.')[1]
    assert np.allclose(got.numpy().astype('float64'), want.double().numpy(), rtol=2e-3, equal_nan=True)

def test_zero_dim_reductions_take_dim_0_and_minus_1():
    "C16: amax(-1), softmax(0), sum(-1), max(0) on a 0-d tensor work as torch."
    m, t = mi.tensor(2.5), torch.tensor(2.5)
    for name in ['amax', 'amin', 'sum', 'mean', 'softmax', 'log_softmax', 'logsumexp']:
        for d in (0, -1):
            assert close(getattr(m, name)(d), getattr(t, name)(d)), (name, d)
    assert m.max(0).values.item() == 2.5 and m.max(-1).indices.item() == 0

def test_grad_modes_like_torch():
    "C10, M17: @no_grad without parentheses; set_grad_enabled (call, context, decorator); inference_mode."
    x = mi.tensor([1.], requires_grad=True)
    @mi.no_grad
    def f(v): return v * 2
    @mi.no_grad()
    def g(v): return v * 2
    @mi.inference_mode
    def h(v): return v * 2
    @mi.set_grad_enabled(False)
    def k(v): return v * 2
    assert mi.is_grad_enabled() and f.__name__ == 'f'
    for fn in (f, g, h, k): assert not fn(x).requires_grad
    assert (x * 2).requires_grad
    with mi.set_grad_enabled(False): assert not (x * 2).requires_grad
    assert mi.is_grad_enabled()
    mi.set_grad_enabled(False); assert not mi.is_grad_enabled()
    mi.set_grad_enabled(True); assert mi.is_grad_enabled()
    with mi.inference_mode(): assert not (x * 2).requires_grad
    with mi.inference_mode(False): assert (x * 2).requires_grad

def test_integer_powers_like_torch():
    "C13: int ** negative int scalar raises as torch; int_t ** int_t and 2 ** int_t give torch's integers."
    a, b = np.array([2, 1, -1, -1, 0, 3]), np.array([-1, -3, -3, -2, -1, 2])
    assert (mi.tensor(a) ** mi.tensor(b)).numpy().tolist() == (torch.tensor(a) ** torch.tensor(b)).tolist()
    assert (2 ** mi.tensor(b)).numpy().tolist() == (2 ** torch.tensor(b)).tolist()
    with pytest.raises(RuntimeError, match='negative integer powers'): mi.tensor(a) ** -1
    with pytest.raises(RuntimeError, match='negative integer powers'): torch.tensor(a) ** -1
    assert (mi.tensor(a) ** 2).numpy().tolist() == (torch.tensor(a) ** 2).tolist()

def test_bad_input_raises_as_torch():
    "N4, N6, U1: mean of an integer tensor, mixed-dtype matmul and `-bool` raise with clear messages."
    with pytest.raises(TypeError, match='mean: could not infer output dtype'): mi.tensor([1, 2]).mean()
    with pytest.raises(TypeError, match='mean'): mi.tensor([True, False]).mean()
    for a, b in [(np.ones((2, 2), 'float32'), np.ones((2, 2))), (np.ones((2, 2), 'int32'), np.ones((2, 2), 'int64'))]:
        with pytest.raises(TypeError, match='matmul: expected both operands to have the same dtype'):
            mi.tensor(a) @ mi.tensor(b)
        with pytest.raises(RuntimeError): torch.tensor(a) @ torch.tensor(b)
    with pytest.raises(TypeError, match=r'~mask'): -mi.tensor([True, False])
    assert (~mi.tensor([True, False])).numpy().tolist() == [False, True]


# ------------------------------------------------------------------ missing API
def test_top_level_functions_and_dtypes_like_torch():
    "Missing API: tensor, as_tensor, zeros/ones/full/empty(_like), arange, linspace, eye, rand*, dtypes."
    for name in ['float32', 'float64', 'float16', 'int64', 'int32', 'int16', 'int8', 'uint8', 'bool', 'long', 'int',
                 'float', 'double', 'half', 'short']:
        assert getattr(mi, name) == str(getattr(torch, name)).split('.')[1], name
    for data in ([1, 2], [1., 2.], [True, False], [[1, 2], [3, 4]], 3.5, np.arange(3.), np.arange(3, dtype='int32')):
        assert mi.tensor(data).dtype == str(torch.tensor(data).dtype).split('.')[1], data
        assert close(mi.tensor(data).numpy().astype('float64'), torch.tensor(data).double())
    assert mi.tensor([1., 2.], requires_grad=True).requires_grad and not mi.tensor([1., 2.]).requires_grad
    a = np.arange(4.); t = mi.as_tensor(a); a[0] = 9.; assert t.numpy()[0] == 9.
    for f, args in [('zeros', (2, 3)), ('ones', ((2, 3),)), ('empty', (4,)), ('eye', (3,)), ('eye', (2, 3))]:
        assert getattr(mi, f)(*args).shape == tuple(getattr(torch, f)(*args).shape) and getattr(mi, f)(*args).dtype == 'float32'
    assert close(mi.zeros(2, dtype=mi.long), torch.zeros(2, dtype=torch.long)) and mi.zeros(2, dtype=mi.long).dtype == 'int64'
    for fv in (7, 2.5, True):
        assert mi.full((2,), fv).dtype == str(torch.full((2,), fv).dtype).split('.')[1]
    x = mi.tensor(np.ones((2, 3), 'int32'))
    for f in ('zeros_like', 'ones_like', 'empty_like', 'rand_like', 'randn_like'):
        y = getattr(mi, f)(mi.zeros(2, 3))
        assert y.shape == (2, 3) and y.dtype == 'float32'
    assert mi.zeros_like(x).dtype == 'int32' and mi.full_like(x, 3).numpy().tolist() == [[3] * 3] * 2
    for args in [(5,), (1, 7, 2), (0., 1., 0.25), (5, 0, -2), (0, 1, 0.1)]:
        got, want = mi.arange(*args), torch.arange(*args)
        assert got.dtype == str(want.dtype).split('.')[1] and close(got, want.double().numpy()), args
    assert close(mi.linspace(0, 1, 5), torch.linspace(0, 1, 5))
    mi.manual_seed(3); a1 = mi.rand(2, 3).numpy(); b1 = mi.randn(4).numpy(); c1 = mi.randint(2, 5, (3,)).numpy()
    mi.manual_seed(3); assert (mi.rand(2, 3).numpy() == a1).all() and (mi.randn(4).numpy() == b1).all()
    assert ((2 <= c1) & (c1 < 5)).all() and mi.randint(10, (2, 2)).dtype == 'int64'
    assert sorted(mi.randperm(6).numpy().tolist()) == list(range(6))
    s = mi.multinomial(mi.tensor([[0., 1., 0.], [0.5, 0., 0.5]]), 4, replacement=True)
    assert s.shape == (2, 4) and (s.numpy()[0] == 1).all() and set(s.numpy()[1].tolist()) <= {0, 2}
    assert sorted(mi.multinomial(mi.tensor([1., 1., 1.]), 3).numpy().tolist()) == [0, 1, 2]

def test_tensor_methods_like_torch():
    "Missing API: size(), dim(), numel(), view, casts, float(t), int(t), __index__, mT, clone, chunk, repeat, ..."
    a = r(2, 3, 4)
    m, t = mi.tensor(a), torch.tensor(a)
    assert m.size() == tuple(t.size()) and m.size(1) == t.size(1) and m.size(-1) == 4 and m.dim() == 3 == m.ndim
    assert m.numel() == t.numel() == mi.numel(m) and m.size == 24   # needle's/numpy's `size` is still the count
    assert close(m.view(6, 4), t.view(6, 4)) and close(m.view(-1), t.view(-1)) and close(m.mT, t.mT)
    for c in ('float', 'double', 'long', 'int', 'bool', 'half'):
        assert getattr(m, c)().dtype == str(getattr(t, c)().dtype).split('.')[1], c
    assert m.to(mi.float32).dtype == 'float32' and m.to('cpu', mi.int64).dtype == 'int64' and m.to(mi.zeros(1)).dtype == 'float32'
    assert float(mi.tensor([2.5])) == 2.5 and int(mi.tensor(3.7)) == 3 and [0, 1, 2][mi.tensor(2)] == 2
    with pytest.raises(TypeError, match='only integer tensors'): [0, 1][mi.tensor(1.)]
    c = m.clone(); c[0] = 0.
    assert m.numpy()[0, 0, 0] == a[0, 0, 0] and m.contiguous().shape == m.shape
    for got, want in zip(m.chunk(3, 2), t.chunk(3, 2)): assert close(got, want)
    for got, want in zip(m.split(2, 2), t.split(2, 2)): assert close(got, want)
    for got, want in zip(m.split([1, 3], dim=-1), t.split([1, 3], dim=-1)): assert close(got, want)
    assert close(m.repeat(2, 1, 1, 3), t.repeat(2, 1, 1, 3)) and close(m.transpose(0, 2), t.transpose(0, 2))
    assert close(m.squeeze(1), t.squeeze(1)) and m.squeeze(1).shape == (2, 3, 4)   # not size 1: a no-op
    assert close(m.clamp(min=0), t.clamp(min=0)) and close(m.clamp(max=0.1), t.clamp(max=0.1))
    for name in ['std', 'var', 'norm', 'prod', 'all', 'any']:
        assert close(getattr(m, name)(), getattr(t, name)()), name
    assert close(m.norm(1, dim=1), t.norm(1, dim=1)) and close(m.var(1, unbiased=False), t.var(1, unbiased=False))
    assert close(m.cumsum(1), t.cumsum(1)) and close(m.prod(2, keepdim=True), t.prod(2, keepdim=True))
    v, i = m.max(1); tv, ti = t.max(1)
    assert close(v, tv) and (i.numpy() == ti.numpy()).all() and close(m.max(), t.max()) and close(m.min(-1).values, t.min(-1).values)
    w = mi.tensor(a, requires_grad=True)
    assert w.is_leaf is True and (w * 2).is_leaf is False and w.grad_fn is None and (m * 2).is_leaf is True
    assert [p for p in (w, w * 2) if p.is_leaf] == [w]   # a property: `if t.is_leaf` no longer always holds (SW10)

def test_bitwise_and_integer_arithmetic_like_torch():
    "M3, M4: &, |, ^, ~ on bool and int tensors; //, % with torch's rounding and signs."
    p, q = np.array([True, False, True, False]), np.array([True, True, False, False])
    i, j = np.array([6, -7, 5, 12]), np.array([4, 3, -2, 5])
    for f in [lambda a, b: a & b, lambda a, b: a | b, lambda a, b: a ^ b, lambda a, b: ~a]:
        for x, y in [(p, q), (i, j)]:
            assert f(mi.tensor(x), mi.tensor(y)).numpy().tolist() == f(torch.tensor(x), torch.tensor(y)).tolist()
    x = mi.tensor(np.array([.5, -1.5, 2.])); assert ((x > 0) & (x < 1)).numpy().tolist() == [True, False, False]
    for a, b in [(i, j), (i.astype('float64') + .5, j.astype('float64')), (i, 3)]:
        for f in [lambda u, v: u // v, lambda u, v: u % v]:
            bm = mi.tensor(b) if isinstance(b, np.ndarray) else b
            bt = torch.tensor(b) if isinstance(b, np.ndarray) else b
            got, want = f(mi.tensor(a), bm), f(torch.tensor(a), bt)
            assert got.dtype == str(want.dtype).split('.')[1] and close(got.numpy().astype('float64'), want.double())
    with pytest.raises(TypeError, match='floating'): mi.tensor([1.]) & mi.tensor([1.])

def test_bitwise_not_of_every_integer_dtype_at_its_limits_like_torch():
    "~ on integers runs on the device as -x - 1: the same bits as torch's for each dtype, at its limits too."
    for dt in ['uint8', 'int8', 'int16', 'int32', 'int64']:
        info = np.iinfo(dt)
        a = np.array([info.min, info.min + 1, 0, 1, 5, info.max - 1, info.max], dtype=dt)
        got = ~mi.tensor(a)
        assert got.dtype == dt and got.numpy().tolist() == (~torch.tensor(a)).tolist(), dt

def test_new_gradients_match_torch():
    "Missing API with gradients: gather, scatter, index_select, masked_fill, masked_select, std, var, norm, cumsum, prod,"
    " sort, topk, max(dim), repeat, clone, remainder: random upstream gradient against torch's autograd."
    a, idx = r(4, 5), RNG.integers(0, 5, (4, 3))
    mask, pos = RNG.random((4, 5)) < 0.5, np.argsort(RNG.random((4, 5)), 1)[:, :2]
    progs = [lambda T, x: x.gather(1, T.tensor(idx)), lambda T, x: x.index_select(0, T.tensor([3, 0, 3])),
             lambda T, x: x.masked_fill(T.tensor(mask), -2.0), lambda T, x: x.masked_select(T.tensor(mask)),
             lambda T, x: x.std(1), lambda T, x: x.var(0, keepdim=True), lambda T, x: x.norm(dim=1),
             lambda T, x: x.norm(3), lambda T, x: x.cumsum(1), lambda T, x: x.prod(1), lambda T, x: x.sort(1)[0],
             lambda T, x: x.sort(0, descending=True).values, lambda T, x: x.topk(2, 1).values,
             lambda T, x: x.max(1).values, lambda T, x: x.min(0, keepdim=True)[0], lambda T, x: x.repeat(2, 3),
             lambda T, x: x.clone() * x, lambda T, x: x % 0.7, lambda T, x: x.transpose(0, 1) @ x,
             lambda T, x: T.stack(x.split(2, 1)[:2], 0), lambda T, x: T.cat(x.chunk(2, 0), 1),
             lambda T, x: x.scatter(1, T.tensor(pos), x[:, :2] * 3)]
    for k, f in enumerate(progs):
        m, t = mi.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        ym, yt = f(mi, m), f(torch, t)
        g = r(*yt.shape)
        assert ym.shape == tuple(yt.shape) and close(ym, yt), k
        gm, = mi.grad(ym, [m], mi.tensor(g)); gt, = torch.autograd.grad(yt, [t], torch.tensor(g))
        assert close(gm, gt), k

def test_prod_gradient_with_zeros_like_torch():
    "prod multiplies slice by slice, so a zero entry gets the product of the others (exp(sum(log)) would not)."
    a = np.array([[2., 0., 3.], [0., 0., 5.], [1., 2., 3.]])
    m, t = mi.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    m.prod(1).sum().backward(); t.prod(1).sum().backward()
    assert close(m.grad, t.grad)

def test_register_hook_and_grad_fn():
    "M18: register_hook sees and may replace a gradient; handles remove; grad_fn is the op."
    x, tx = mi.tensor([1., 2.], requires_grad=True), torch.tensor([1., 2.], requires_grad=True)
    seen = []
    y, ty = x * 3, tx * 3
    h = y.register_hook(lambda g: seen.append(g.numpy().copy()) or g * 2); ty.register_hook(lambda g: g * 2)
    y.sum().backward(); ty.sum().backward()
    assert close(x.grad, tx.grad) and seen[0].tolist() == [1., 1.] and y.grad_fn is not None
    h.remove(); x.grad = None; (x * 3).sum().backward()
    assert x.grad.numpy().tolist() == [3., 3.]

def test_top_level_namespace_is_torchs():
    "`dir(minima)` lists torch's functions and dtypes; op classes stay in minima.ops."
    names = set(dir(mi))
    for n in ['tensor', 'zeros', 'cat', 'stack', 'where', 'float32', 'long', 'no_grad', 'set_grad_enabled', 'manual_seed',
              'nn', 'optim', 'ops', 'Tensor']:
        assert n in names, n
    assert not [n for n in names if n[0].isupper() and n not in ('Tensor', 'TensorTuple', 'Generator')]
    assert 'EWiseAdd' not in names and not hasattr(mi, 'EWiseAdd') and hasattr(mi.ops, 'EWiseAdd')
    assert len([n for n in names if not n.startswith('_')]) < 200
    assert mi.ops.split(mi.zeros(2, 3), 1)[0].shape == (2,)   # needle's functional split stays in minima.ops
    assert mi.ops.transpose(mi.zeros(2, 3)).shape == (3, 2)


def test_a_minima_folder_beside_a_script_does_not_shadow_the_package(tmp_path):
    "Also (issue 21): the README's install is `editable_mode=compat`, which puts the clone on sys.path, so an empty"
    " `minima/` folder beside the user's script (the clone itself) no longer makes `import minima` a namespace package."
    import pathlib, subprocess, sys
    root = pathlib.Path(__file__).resolve().parents[2]
    for f in ('README.md', '.ci/run'):
        cmds = [l for l in (root / f).read_text().splitlines() if 'pip install -e' in l]
        assert cmds and all('editable_mode=compat' in l for l in cmds), f
    (tmp_path / 'minima').mkdir()
    code = f"import sys; sys.path.append({str(root)!r}); import minima; print(minima.__file__); minima.zeros(1)"
    out = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, capture_output=True, text=True,
                         env={'PATH': '/usr/bin:/bin'})
    assert out.returncode == 0 and out.stdout.strip() == str(root / 'minima' / '__init__.py'), out.stderr

def test_max_with_dim_sends_the_gradient_to_the_returned_index_like_torch():
    "torch's `max(dim)`: on ties the gradient goes to the index it returns; `amax` splits it (both as torch)."
    a = np.array([[1., 3., 3.], [2., 2., 0.]])
    for kind in ('max', 'min'):
        for dim in (0, 1):
            m, t = mi.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
            g = r(*getattr(t, kind)(dim).values.shape)
            getattr(m, kind)(dim).values.backward(mi.tensor(g)); getattr(t, kind)(dim).values.backward(torch.tensor(g))
            assert close(m.grad, t.grad) and (getattr(m, kind)(dim).indices.numpy() == getattr(t, kind)(dim).indices.numpy()).all()
    m, t = mi.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    m.amax(1).sum().backward(); t.amax(1).sum().backward()
    assert close(m.grad, t.grad)

def test_norm_of_zeros_has_torchs_zero_gradient():
    "The 2-norm at an all-zero vector: value 0 and gradient 0, as torch (sqrt alone would give NaN)."
    for shape, dim in [((3,), None), ((2, 3), 1)]:
        a = np.zeros(shape); a[-1:] = 0.0
        if len(shape) == 2: a[0] = [1., 2., 2.]
        m, t = mi.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
        m.norm(dim=dim).sum().backward(); t.norm(dim=dim).sum().backward()
        assert close(m.norm(dim=dim), t.norm(dim=dim)) and close(m.grad, t.grad)

def test_needle_keeps_its_conventions_beside_torchs():
    "The torch face changed Tensor's methods; `minima.needle.Tensor` keeps needle's (is_leaf(), split(axis), +=)."
    import minima.needle as ndl
    a = np.arange(6.).reshape(2, 3)
    n, t = ndl.Tensor(a), mi.tensor(a, requires_grad=True)
    assert n.is_leaf() and t.is_leaf
    assert len(n.split(1)) == 3 and n.split(1)[0].shape == (2,)       # needle: the slices along axis 1
    assert len(t.split(1)) == 2 and t.split(1)[0].shape == (1, 3)     # torch: chunks of size 1 along dim 0
    assert n.transpose().shape == (3, 2) == t.transpose(0, 1).shape == tuple(torch.tensor(a).transpose(0, 1).shape)
    m = n; n += 1
    assert m is not n and m.numpy()[0, 0] == 0.                         # needle's `+=` rebinds


# ------------------------------------------------------------------ in place through views (torch's CopySlices; s2-21)
def _p(fn):   # a program: fn(lib, x, w) -> out, with x (3, 4) and w (2, 4) requiring grad
    return fn

INPLACE_PROGRAMS = {
    # a node that used `a` before the in-place change keeps the old `a`
    'consumer_before_inplace': lambda L, x, w: (lambda a: (lambda z: (a.mul_(2), z + a)[1])(a * 3))(x * 1),
    'mul_by_w_saves_old_self': lambda L, x, w: (lambda a: (a[:2].mul_(w), a)[1])(x * 1),
    'view_column_mul': lambda L, x, w: (lambda y: (y[:, 0].mul_(2), y * y)[1])(x.clone()),
    'view_rows_add_w': lambda L, x, w: (lambda y: (y[1:].add_(w), y.exp())[1])(x.clone()),
    'view_add_then_use_view': lambda L, x, w: (lambda y: (lambda v: (v.add_(w), y * v.sum())[1])(y[1:]))(x.clone()),
    'chained_view': lambda L, x, w: (lambda y: (y[1:][0].mul_(w[1]), y.sin())[1])(x.clone()),
    'transposed_view': lambda L, x, w: (lambda y: (y.T[1].add_(x[:, 2] * 2), y * 1)[1])(x * 1),
    'reshaped_strided_view': lambda L, x, w: (lambda y: (y.view(-1)[::3].mul_(3), y ** 2)[1])(x.clone()),
    'sibling_view_taken_before': lambda L, x, w: (lambda y: (lambda v: (y.mul_(2), v * 3 + y[0])[1])(y[0]))(x * 1),
    'sibling_used_before': lambda L, x, w: (lambda y: (lambda a: (y[1].mul_(2), a + y[0] * y[1])[1])(y[0] * 3))(x * 1),
    'zero_on_view': lambda L, x, w: (lambda y: (y[:, 1].zero_(), y * x)[1])(x * 1),
    'fill_non_view': lambda L, x, w: (lambda a: (a.fill_(2.), a * x)[1])(x * 1),
    'twice': lambda L, x, w: (lambda y: (y[0].mul_(2), y[0].add_(w[0]), y.mul_(3), y)[3])(x.clone()),
    'setitem_rows_w': lambda L, x, w: (lambda y: (y.__setitem__(slice(1, None), w * 2), y)[1])(x.clone()),
    'setitem_into_no_graph_base': lambda L, x, w: (lambda y: (y.__setitem__(0, w[1]), y * x)[1])(L.zeros(3, 4, dtype=L.float64)),
    'setitem_mask_constant': lambda L, x, w: (lambda y: (y.__setitem__(y > 0, 0.), y * 2)[1])(x.clone()),
    'setitem_index_array_w': lambda L, x, w: (lambda y: (y.__setitem__(L.tensor([2, 0]), w[[1, 0]] * w), y)[1])(x * 1),
    'copy_from_leaf_w': lambda L, x, w: (lambda y: (y[1:].copy_(w), y)[1])(x * 1),
    # a residual block: the op whose output is changed in place keeps its values for its own backward
    'residual_add_after_linear': lambda L, x, w: (lambda o: (o.__iadd__(x), o.relu())[1])(
        L.nn.functional.linear(x, w[:, :4].T @ w[:, :4] + x[:, :4].T @ x[:, :4])),
}

@pytest.mark.parametrize('name', sorted(INPLACE_PROGRAMS))
def test_inplace_through_views_gives_torchs_gradients(name):
    """In-place writes through views reach the base's graph (torch's CopySlices), earlier users keep the old values,
    views taken before follow the base: values and gradients of x and w as torch's (random upstream gradient)."""
    prog = INPLACE_PROGRAMS[name]
    x0, w0, g0 = r(3, 4), r(2, 4), r(3, 4)
    res = {}
    for L in (mi, torch):
        x, w = L.tensor(x0, requires_grad=True), L.tensor(w0, requires_grad=True)
        out = prog(L, x, w)
        (out * L.tensor(g0)).sum().backward()
        res[L.__name__] = (out, x.grad, w.grad)
    (om, xm, wm), (ot, xt, wt) = res['minima'], res['torch']
    assert close(om, ot, 1e-10)
    assert close(xm, xt, 1e-10)
    assert (wm is None) == (wt is None) and (wm is None or close(wm, wt, 1e-10))

def test_inplace_through_views_errors_and_version_counter():
    "torch's errors: a view of a leaf that requires grad; a value backward needs was changed; and minima's own one."
    x = mi.tensor(r(3, 4), requires_grad=True)
    with pytest.raises(RuntimeError, match='a view of a leaf Variable that requires grad'): x[0].mul_(2)
    for piece in (lambda y: y.chunk(2, 1)[1], lambda y: y.unbind(0)[2], lambda y: y.split(1, 0)[0]):
        with pytest.raises(RuntimeError, match='of Split is a view and is being modified inplace'):
            piece(x * 1).mul_(2)          # torch: a function that returns multiple views
        with pytest.raises(RuntimeError, match='is a view and is being modified inplace'):
            piece(torch.tensor(x.detach().numpy(), requires_grad=True) * 1).mul_(2)
    with pytest.raises(RuntimeError, match='setitem: cannot assign in place'): x[0] = 1.
    y = x.exp()                       # exp's gradient reads its output: with a graph, the old values are kept
    y[0].mul_(2)
    assert y._version == 1
    g = r(3, 4); (y * mi.tensor(g)).sum().backward()
    tx = torch.tensor(x.detach().numpy(), requires_grad=True); ty = tx.exp().clone(); ty[0].mul_(2)   # (torch raises without the clone)
    (ty * torch.tensor(g)).sum().backward()
    assert close(x.grad, tx.grad, 1e-10)
    z = (x * 1).exp()
    with mi.no_grad(): z[0] = 0.          # without a graph: torch's version check
    with pytest.raises(RuntimeError, match='modified in place'): z.sum().backward()
    with pytest.raises(RuntimeError, match='is a view of a tensor that has no graph'):
        mi.zeros(3, 4)[1:].add_(mi.tensor(r(2, 4), requires_grad=True))
    b = mi.zeros(3, 4); b[1:] = mi.tensor(r(2, 4), requires_grad=True)   # setitem works for that case
    assert b.requires_grad and b.grad_fn is not None
    with mi.no_grad():                # without a graph nothing is recorded, as before
        z = x * 1; z[0].mul_(2)
    assert z.grad_fn is None and z._version == 1
