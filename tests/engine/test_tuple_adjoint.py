"""A TensorTuple's adjoint is sparse (`TupleGetItem` contributes only its own position): the backward of a
split-then-index loop over T steps allocates O(T) arrays, not O(T^2), and the gradients are torch's."""
import numpy as np, pytest, torch
import minima as mi
from minima import ops
from minima.backend_ndarray import ndarray as nd

def rnn(T, seed=0, twice=False):
    "h_t = tanh(x_t W + h_{t-1}) over the slices of one split; the last slice is never selected when `twice`."
    rng = np.random.default_rng(seed)
    xn, wn = rng.standard_normal((T, 3, 4)).astype('float32'), rng.standard_normal((4, 4)).astype('float32') * 0.5
    gn = rng.standard_normal((3, 4)).astype('float32')
    x, w = mi.Tensor(xn, requires_grad=True), mi.Tensor(wn, requires_grad=True)
    tx, tw = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True)
    xs, txs = ops.split(x, 0), torch.unbind(tx, 0)
    steps = [0] + list(range(T - 1)) if twice else range(T)   # slice 0 selected twice, slice T-1 never
    h = th = None
    for t in steps:
        z, tz = xs[t] @ w, txs[t] @ tw
        h, th = (z.tanh(), tz.tanh()) if h is None else ((z + h).tanh(), (tz + th).tanh())
    return x, w, tx, tw, h, th, gn

def allocations_in_backward(T):
    x, w, _, _, h, _, gn = rnn(T)
    count, make = [0], nd.NDArray.make
    def counting(*a, **k):
        count[0] += 1
        return make(*a, **k)
    nd.NDArray.make = staticmethod(counting)
    try: h.backward(mi.Tensor(gn))
    finally: nd.NDArray.make = make
    return count[0]

def test_backward_of_split_then_index_is_linear():
    a16, a64 = allocations_in_backward(16), allocations_in_backward(64)
    assert a64 < 4.5 * a16, (a16, a64)   # linear: 4x the steps, ~4x the arrays (it was ~16x: T zero arrays per step)

@pytest.mark.parametrize('twice', [False, True])
def test_gradients_match_torch(twice):
    x, w, tx, tw, h, th, gn = rnn(12, seed=1, twice=twice)
    h.backward(mi.Tensor(gn)); th.backward(torch.tensor(gn))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-6)
    if twice: assert not x.grad.numpy()[-1].any()   # the slice never selected gets a zero gradient

def test_second_order_through_a_split():
    "create_graph=True: the sparse adjoint's pieces keep their graph, so a gradient can be differentiated again."
    rng = np.random.default_rng(2)
    xn = rng.standard_normal((4, 3))
    x, tx = mi.Tensor(xn, dtype='float64', requires_grad=True), torch.tensor(xn, requires_grad=True)
    a, b = ops.split(x, 0)[1], ops.split(x, 0)[3]
    (g,) = mi.grad(((a * a * b).sum()), [x], create_graph=True)
    ta, tb = torch.unbind(tx, 0)[1], torch.unbind(tx, 0)[3]
    (tg,) = torch.autograd.grad((ta * ta * tb).sum(), [tx], create_graph=True)
    (g * g).sum().backward(); (tg * tg).sum().backward()
    np.testing.assert_allclose(g.detach().numpy(), tg.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-12)
