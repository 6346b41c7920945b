import gc, sys, subprocess, weakref, numpy as np, pytest
import minima as mi
from minima.autograd import find_topo_sort

def test_import_does_not_import_torch():
    code = "import sys, minima; assert 'torch' not in sys.modules, 'minima imported torch'"
    subprocess.run([sys.executable, '-c', code], check=True)

def test_deep_chain_is_iterative():
    x = mi.Tensor([1.0, 2.0]); h = x
    for _ in range(10_000): h = h + 1.0
    h.sum().backward()
    assert x.grad.numpy().tolist() == [1.0, 1.0]

def test_adjoints_are_summed_over_paths():
    x = mi.Tensor([3.0])
    y = x * x + x * 2.0 + x       # dy/dx = 2x + 3
    y.backward()
    assert x.grad.numpy().tolist() == [9.0]

def test_backward_non_scalar_needs_out_grad():
    x = mi.Tensor([[1.0, 2.0]])
    with pytest.raises(RuntimeError, match=r'out_grad can be omitted only.*\(1, 2\)'): (x * 2).backward()
    g = np.array([[0.3, -1.7]], dtype='float32')
    (x * 2).backward(mi.Tensor(g))
    assert np.allclose(x.grad.numpy(), 2 * g)

def test_backward_requires_grad():
    x = mi.Tensor([1.0], requires_grad=False)
    with pytest.raises(RuntimeError, match='does not require grad'): (x * 2).sum().backward()

def test_no_grad_records_nothing_and_enable_grad_restores():
    x = mi.Tensor([1.0, 2.0])
    with mi.no_grad():
        y = x * 3
        with mi.enable_grad(): z = x * 3
    assert y.op is None and not y.requires_grad and y.inputs == ()
    assert z.op is not None and z.requires_grad
    assert mi.is_grad_enabled()
    @mi.no_grad()
    def f(t): return t * 2
    assert f(x).op is None

def test_detach_and_data():
    x = mi.Tensor([1.0, 2.0])
    d = x.detach()
    assert d.op is None and not d.requires_grad and d.cached_data is x.cached_data
    x.data = mi.Tensor([5.0, 6.0])
    assert x.detach().numpy().tolist() == [5.0, 6.0] and x.requires_grad
    with pytest.raises(TypeError, match='dtype'): x.data = mi.Tensor([1.0], dtype='float64')

def test_grad_accumulates_without_growing_graph():
    x = mi.Tensor([1.0, 2.0])
    for _ in range(3): (x * x).sum().backward()
    assert np.allclose(x.grad.detach().numpy(), 3 * 2 * x.detach().numpy())
    assert x.grad.op is None and not x.grad.requires_grad

def test_higher_order_via_create_graph():
    x = mi.Tensor([0.5, -1.5], dtype='float64')
    y = (x.exp() * x).sum()            # y' = e^x (1 + x), y'' = e^x (2 + x)
    (g,) = mi.grad(y, [x], create_graph=True)
    assert g.requires_grad
    (h,) = mi.grad(g.sum(), [x])
    xs = x.detach().numpy()
    assert np.allclose(g.detach().numpy(), np.exp(xs) * (1 + xs)) and np.allclose(h.detach().numpy(), np.exp(xs) * (2 + xs))
    x2 = mi.Tensor([2.0])
    (x2 ** 3).sum().backward(create_graph=True)
    assert x2.grad.requires_grad
    g1 = x2.grad
    x2.grad = None
    g1.sum().backward()
    assert np.allclose(x2.grad.numpy(), [12.0])

def test_broadcast_gradients_sum_back():
    a = mi.Tensor(np.ones((3, 1), 'float32')); b = mi.Tensor(np.ones((4,), 'float32'))
    g = np.random.default_rng(0).standard_normal((3, 4)).astype('float32')
    (a * b).backward(mi.Tensor(g))
    assert a.grad.shape == (3, 1) and np.allclose(a.grad.numpy(), g.sum(1, keepdims=True))
    assert b.grad.shape == (4,) and np.allclose(b.grad.numpy(), g.sum(0))

def test_float32_stays_float32_with_python_scalars():
    x = mi.Tensor([1.0, 2.0])
    for y in [x * 2.5, 2.5 * x, x + 1, x / 3, 2 - x, x ** 2, -x, (x @ x), x.exp(), x.sum()]:
        assert y.dtype == 'float32'
    (x * 2.5).sum().backward()
    assert x.grad.dtype == 'float32'
    assert mi.Tensor(np.ones(2)).dtype == 'float32'          # needle: float input -> float32
    assert mi.Tensor(np.ones(2), dtype='float64').dtype == 'float64'

def test_comparisons_are_not_differentiable():
    x = mi.Tensor([1.0, 2.0])
    c = x > 1.5
    assert not c.requires_grad and c.op is None and c.numpy().tolist() == [False, True]

def test_python_operators_and_reflected_forms():
    x = mi.Tensor([1.0, 2.0, 4.0])
    assert np.allclose((2 - x).detach().numpy(), [1, 0, -2]) and np.allclose((2 / x).detach().numpy(), [2, 1, 0.5])
    assert np.allclose((x - 1).detach().numpy(), [0, 1, 3]) and np.allclose((x / 2).detach().numpy(), [0.5, 1, 2])
    assert np.allclose((-x).detach().numpy(), [-1, -2, -4]) and np.allclose((x ** 2).detach().numpy(), [1, 4, 16])

def test_topo_sort_order():
    a = mi.Tensor([1.0]); b = a * 2; c = a + b; d = b * c
    order = find_topo_sort([d])
    pos = {id(n): i for i, n in enumerate(order)}
    for n in order:
        for x in n.inputs: assert pos[id(x)] < pos[id(n)]

def test_graph_is_freed():
    x = mi.Tensor(np.ones(100, 'float32'))
    y = (x * 2).exp(); r = weakref.ref(y)
    loss = y.sum(); loss.backward()
    del y, loss; gc.collect()
    assert r() is None

def test_int_tensors_do_not_require_grad():
    t = mi.Tensor(np.array([1, 2, 3]))
    assert t.dtype == 'int64' and not t.requires_grad
    with pytest.raises(TypeError, match='only floating'): t.requires_grad_()
