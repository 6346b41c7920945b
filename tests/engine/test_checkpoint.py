"""Gradient checkpointing: identical gradients, and on a deep stack the arrays held for backward drop by >= half."""
import numpy as np, pytest
import minima as mi
from minima.nn.functional import checkpoint, checkpoint_sequential, graph_memory, dropout

def _stack(n, d=32, seed=0):
    r = np.random.default_rng(seed)
    Ws = [(mi.Tensor(r.standard_normal((d, d)) / d**.5), mi.Tensor(r.standard_normal((d, d)) / d**.5)) for _ in range(n)]
    return Ws, [lambda h, W=W: h + mi.ops.relu(h @ W[0]) @ W[1] for W in Ws]

def _run(Ws, fwd, x0):
    for W in Ws: W[0].grad = W[1].grad = None
    x = mi.Tensor(x0)
    loss = fwd(x).sum()
    mem = graph_memory(loss)
    loss.backward()
    return mem, [x.grad.numpy()] + [W[i].grad.numpy() for W in Ws for i in (0, 1)]

def _plain(blocks):
    def f(h):
        for b in blocks: h = b(h)
        return h
    return f

def _every(blocks):
    def f(h):
        for b in blocks: h = checkpoint(b, h)
        return h
    return f

def test_identical_gradients_and_memory_drop():
    Ws, blocks = _stack(24)
    x0 = np.random.default_rng(1).standard_normal((16, 32))
    (n0, b0), g0 = _run(Ws, _plain(blocks), x0)
    (n1, b1), g1 = _run(Ws, _every(blocks), x0)
    (n2, b2), g2 = _run(Ws, lambda h: checkpoint_sequential(blocks, 5, h), x0)
    for a, b in zip(g0, g1): assert np.array_equal(a, b)
    for a, b in zip(g0, g2): assert np.array_equal(a, b)
    assert n1 <= n0 / 2 and b1 <= b0 / 2, (n0, b0, n1, b1)
    assert n2 <= n0 / 2 and b2 <= b0 / 2, (n0, b0, n2, b2)

def test_grad_api_and_params_found():
    W = mi.Tensor(np.random.default_rng(0).standard_normal((4, 4)))
    x = mi.Tensor(np.ones((2, 4)))
    y = checkpoint(lambda h: mi.ops.exp(h @ W * 0.1), x).sum()
    assert len(y.inputs[0].inputs) == 2, "the checkpoint node's inputs are x and the captured W"
    gx, gW = mi.grad(y, [x, W])
    y2 = mi.ops.exp(x @ W * 0.1).sum()
    hx, hW = mi.grad(y2, [x, W])
    assert np.array_equal(gx.numpy(), hx.numpy()) and np.array_equal(gW.numpy(), hW.numpy())

def test_second_order_through_checkpoint():
    x = mi.Tensor(np.array([0.3, -0.2, 0.5]), dtype='float64')
    f = lambda h: mi.ops.exp(h * h).sum()
    g, = mi.grad(checkpoint(f, x), x, create_graph=True)
    h, = mi.grad(g.sum(), x)
    g2, = mi.grad(f(x), x, create_graph=True)
    h2, = mi.grad(g2.sum(), x)
    np.testing.assert_allclose(h.numpy(), h2.numpy(), rtol=1e-12)

def test_dropout_is_replayed_on_recompute():
    init = pytest.importorskip('minima.init')
    W = mi.Tensor(np.random.default_rng(0).standard_normal((8, 8)))
    x0 = np.random.default_rng(1).standard_normal((4, 8))
    f = lambda h: dropout(h @ W, 0.5)
    init.manual_seed(0); x = mi.Tensor(x0); checkpoint(f, x).sum().backward(); a = (x.grad.numpy(), W.grad.numpy())
    W.grad = None
    init.manual_seed(0); x = mi.Tensor(x0); f(x).sum().backward(); b = (x.grad.numpy(), W.grad.numpy())
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])

def test_no_grad_is_plain_call():
    x = mi.Tensor(np.ones(3))
    with mi.no_grad(): y = checkpoint(lambda h: h * 2, x)
    assert y.op is None and np.array_equal(y.numpy(), 2 * np.ones(3))
