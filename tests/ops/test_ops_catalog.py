"""The operator catalog as a whole: the names autograd dispatches to exist, Tensor methods and Python operators work,
PyTorch's conventions hold at kinks and ties, the numerically delicate ops are stable, and every catalog op is
registered with the harness and passes it (second derivatives included for the smooth ones)."""
import numpy as np
import pytest
import torch
import minima as mi
from minima import ops
from minima.testing import REGISTRY, check_op

def close(a, b, rtol=1e-5, atol=1e-6): return np.allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)

# names that Tensor's Python operators and methods (minima.autograd) look up in minima.ops
DISPATCHED = ['add', 'add_scalar', 'multiply', 'mul_scalar', 'subtract', 'sub_scalar', 'rsub_scalar', 'divide',
              'divide_scalar', 'rdivide_scalar', 'power', 'power_scalar', 'rpower_scalar', 'negate', 'matmul', 'equal',
              'not_equal', 'less', 'less_equal', 'greater', 'greater_equal', 'summation', 'broadcast_to', 'reshape',
              'transpose', 'exp', 'log', 'relu']

@pytest.mark.parametrize('name', DISPATCHED)
def test_dispatched_names_exist(name): assert callable(getattr(ops, name))

CATALOG = {
    'unary': ['negate', 'exp', 'log', 'sqrt', 'sin', 'cos', 'tanh', 'sigmoid', 'relu', 'abs', 'square', 'power_scalar', 'silu', 'gelu', 'gelu_exact', 'erf'],
    'binary': ['add', 'subtract', 'multiply', 'divide', 'power', 'maximum', 'minimum', 'add_scalar', 'sub_scalar',
               'mul_scalar', 'divide_scalar', 'rsub_scalar', 'rdivide_scalar', 'rpower_scalar', 'clamp', 'clamp_bounds'],
    'compare': ['equal', 'not_equal', 'less', 'less_equal', 'greater', 'greater_equal', 'where'],
    'reduce': ['summation', 'mean', 'amax', 'amin', 'logsumexp', 'argmax', 'argmin'],
    'movement': ['reshape', 'transpose', 'permute', 'broadcast_to', 'expand', 'squeeze', 'unsqueeze', 'flip', 'pad',
                 'pad_reflect', 'pad_replicate',
                 'shrink', 'getitem', 'getitem_grad', 'stack', 'split', 'concatenate', 'dilate', 'undilate',
                 'contiguous', 'cast', 'to_device'],
    'linalg': ['matmul'],
    'softmax': ['softmax', 'log_softmax'],
}
ALL = [n for v in CATALOG.values() for n in v]

@pytest.mark.parametrize('name', ALL)
def test_catalog_op_registered(name): assert name in REGISTRY

SMOOTH = [n for n in ALL if n not in ('relu', 'abs', 'clamp', 'clamp_bounds', 'equal', 'not_equal', 'less', 'less_equal', 'greater',
                                      'greater_equal', 'argmax', 'argmin', 'cast_to_float32')]

@pytest.mark.parametrize('name', SMOOTH)
def test_second_derivative_checked(name):
    "Every smooth op runs the 2nd-order check against torch (no skip) on every case."
    rep = check_op(name, checks=('second',))
    assert rep.ok and all(r[2] == 'ok' for r in rep.rows if r[1] == 'second'), rep

def test_float32_stays_float32():
    x = mi.Tensor(np.random.default_rng(0).standard_normal((3, 4)))
    for f in [ops.sigmoid, ops.tanh, ops.gelu, ops.silu, ops.erf, lambda t: ops.gelu(t, 'none'), lambda t: ops.softmax(t, 1), lambda t: ops.mean(t, 0),
              lambda t: 2 - t, lambda t: 2 / (t.abs() + 1), lambda t: 2 ** t, lambda t: ops.pad(t, ((1, 1), (0, 0))),
              lambda t: ops.amax(t, 1), lambda t: ops.logsumexp(t, 0), lambda t: t[::-1, 1:]]:
        y = f(x)
        assert y.dtype == 'float32'
        x.grad = None
        y.backward(mi.Tensor(np.ones(y.shape, 'float32')))
        assert x.grad.dtype == 'float32'

# ---- PyTorch's conventions at kinks and ties

@pytest.mark.parametrize('f,tf', [(ops.relu, torch.relu), (ops.absolute, torch.abs)])
def test_kinks_follow_torch(f, tf):
    x = mi.Tensor([-1.0, 0.0, 0.0, 2.0]); f(x).sum().backward()
    t = torch.tensor([-1.0, 0.0, 0.0, 2.0], requires_grad=True); tf(t).sum().backward()
    assert x.grad.numpy().tolist() == t.grad.tolist()

@pytest.mark.parametrize('f,tf', [(ops.maximum, torch.maximum), (ops.minimum, torch.minimum)])
def test_binary_ties_split_like_torch(f, tf):
    a, b = [1.0, 2.0, 2.0, 3.0], [[2.0], [2.0]]
    x, y = mi.Tensor(a), mi.Tensor(b)
    g = np.arange(8.0).reshape(2, 4)
    f(x, y).backward(mi.Tensor(g))
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    tf(tx, ty).backward(torch.tensor(g, dtype=torch.float32))
    assert close(x.grad.numpy(), tx.grad) and close(y.grad.numpy(), ty.grad)

@pytest.mark.parametrize('axes', [None, 0, 1, (0, 1), -1])
@pytest.mark.parametrize('kind', ['max', 'min'])
def test_reduction_ties_split_like_torch(axes, kind):
    a = np.array([[1.0, 3.0, 3.0], [3.0, -1.0, 3.0]])
    x = mi.Tensor(a)
    getattr(x, "a" + kind)(axes).sum().backward()   # amax/amin split ties; max(dim) is torch's (values, indices)
    t = torch.tensor(a, requires_grad=True)
    dims = tuple(range(2)) if axes is None else axes
    (t.amax(dims) if kind == 'max' else t.amin(dims)).sum().backward()
    assert close(x.grad.numpy(), t.grad)

# ---- stability

def test_softmax_family_stable_at_1e4():
    x = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4 + 1, -1e4 - 1], [1e4, 1e4, 1e4 - 50]], dtype='float32')
    g = np.random.default_rng(0).standard_normal(x.shape).astype('float32')
    for f, tf in [(ops.softmax, torch.softmax), (ops.log_softmax, torch.log_softmax)]:
        for axis in (0, 1):
            m = mi.Tensor(x); y = f(m, axis); y.backward(mi.Tensor(g))
            t = torch.tensor(x, requires_grad=True); ty = tf(t, dim=axis); ty.backward(torch.tensor(g))
            assert np.all(np.isfinite(y.detach().numpy())) and np.all(np.isfinite(m.grad.detach().numpy()))
            assert close(y.detach().numpy(), ty.detach(), 1e-5, 1e-5) and close(m.grad.detach().numpy(), t.grad, 1e-5, 1e-5)

def test_logsumexp_stable():
    x = mi.Tensor([[1e4, 1e4], [-1e4, -1e4 - 1]])
    assert close(ops.logsumexp(x, 1).detach().numpy(), torch.logsumexp(torch.tensor(x.detach().numpy()), 1), 1e-6)

def test_sigmoid_stable_both_ways():
    x = mi.Tensor([-1e4, -200.0, -50.0, 0.0, 50.0, 200.0, 1e4]); y = ops.sigmoid(x); y.sum().backward()
    t = torch.tensor(x.detach().numpy(), requires_grad=True); ty = torch.sigmoid(t); ty.sum().backward()
    assert close(y.detach().numpy(), ty.detach(), 1e-6, 1e-30) and close(x.grad.detach().numpy(), t.grad, 1e-6, 1e-30)

# ---- operators and reflected scalars

def test_reflected_scalars_and_tensor_power():
    a = np.array([0.5, 1.5, 2.0]); b = np.array([-1.0, 0.5, 2.0])
    x, y = mi.Tensor(a), mi.Tensor(b)
    tx, ty = torch.tensor(a, dtype=torch.float32, requires_grad=True), torch.tensor(b, dtype=torch.float32, requires_grad=True)
    out = (2 - x) * (2 / x) + 2 ** y + x ** y - y / x + (x ** 2) * 3
    tout = (2 - tx) * (2 / tx) + 2 ** ty + tx ** ty - ty / tx + (tx ** 2) * 3
    out.sum().backward(); tout.sum().backward()
    assert close(out.detach().numpy(), tout.detach()) and close(x.grad.detach().numpy(), tx.grad) and close(y.grad.detach().numpy(), ty.grad)

def test_subtract_is_one_op():
    z = mi.Tensor([1.0]) - mi.Tensor([2.0])
    assert type(z.op).__name__ == 'EWiseSub'

def test_comparisons_are_bool_and_detached():
    x = mi.Tensor([[-1.0, 0.0, 2.0]])
    for m, want in [(x > 0, [False, False, True]), (x >= 0, [False, True, True]), (x < 0, [True, False, False]),
                    (x <= 0, [True, True, False]), (x == 0, [False, True, False]), (x != 0, [True, False, True])]:
        assert m.dtype == 'bool' and not m.requires_grad and m.op is None and m.numpy()[0].tolist() == want
    assert (x < mi.Tensor([[0.5], [3.0]])).shape == (2, 3)

def test_where_with_scalars_and_grad():
    x = mi.Tensor([-2.0, 3.0])
    y = ops.where(x > 0, x * 2, 0.5); y.sum().backward()
    assert y.detach().numpy().tolist() == [0.5, 6.0] and x.grad.detach().numpy().tolist() == [0.0, 2.0]

# ---- movement semantics

def test_getitem_matches_numpy_and_iterates():
    a = np.arange(60.0).reshape(3, 4, 5)
    x = mi.Tensor(a)
    for idx in [(1,), (slice(None), -1), (Ellipsis, slice(None, None, -2)), (None, 2, slice(3, 0, -1)), (slice(10, 20),)]:
        assert np.array_equal(x[idx].detach().numpy(), a[idx])
    assert [r.shape for r in x] == [(4, 5)] * 3

def test_getitem_gradient_accumulates_overlapping_reads():
    x = mi.Tensor(np.zeros(4))
    ((x[1:3] * 2).sum() + (x[::-1] * mi.Tensor([1.0, 2.0, 3.0, 4.0])).sum() + x[2]).backward()
    assert x.grad.numpy().tolist() == [4.0, 5.0, 5.0, 1.0]

def test_setitem_outside_autograd():
    w = mi.Tensor(np.zeros((2, 3)))
    with pytest.raises(RuntimeError): w[0] = 1.0
    with mi.no_grad(): w[0, ::2] = 5.0
    w.data[1] = mi.Tensor([1.0, 2.0, 3.0])
    assert w.detach().numpy().tolist() == [[5, 0, 5], [1, 2, 3]] and w.requires_grad

def test_split_pieces_and_tuple_adjoints():
    a = mi.Tensor(np.arange(12.0).reshape(3, 4))
    p = ops.split(a, 1, 2)
    assert [t.shape for t in p] == [(3, 2), (3, 2)]
    (p[0] * 2 + p[1] * 3 + p[0]).sum().backward()
    assert a.grad.numpy().tolist() == [[3, 3, 3, 3]] * 3

def test_stack_split_roundtrip_and_concat():
    xs = [mi.Tensor(np.full((2, 3), float(i))) for i in range(3)]
    s = ops.stack(xs, axis=1)
    assert s.shape == (2, 3, 3) and all(np.array_equal(t.detach().numpy(), x.detach().numpy()) for t, x in zip(ops.split(s, 1), xs))
    c = ops.concatenate(xs, axis=-1)
    assert c.shape == (2, 9) and ops.cat is ops.concatenate

def test_dilate_undilate_needle_semantics():
    a = mi.Tensor([[1.0, 2.0], [3.0, 4.0]])
    d = ops.dilate(a, (0, 1), 1)
    assert d.detach().numpy().tolist() == [[1, 0, 2, 0], [0, 0, 0, 0], [3, 0, 4, 0], [0, 0, 0, 0]]
    assert ops.undilate(d, (0, 1), 1).detach().numpy().tolist() == a.detach().numpy().tolist()
    assert ops.dilate(a, (1,), 2).shape == (2, 6)

def test_cast_and_to_move_gradients_back():
    x = mi.Tensor([1.0, 2.0])
    y = x.to('float64'); z = y.to('cpu'); (z * z).sum().backward()
    assert y.dtype == 'float64' and x.grad.dtype == 'float32' and x.grad.numpy().tolist() == [2.0, 4.0]
    i = ops.cast(x, 'int64')
    assert i.dtype == 'int64' and not i.requires_grad
    assert x.double().dtype == 'float64' and x.double().float().dtype == 'float32'

def test_contiguous_compacts_views():
    x = mi.Tensor(np.arange(6.0).reshape(2, 3)).transpose()
    c = x.contiguous()
    assert not x.cached_data.is_compact() and c.cached_data.is_compact() and np.array_equal(c.detach().numpy(), x.detach().numpy())

def test_tensor_methods():
    x = mi.Tensor(np.random.default_rng(0).standard_normal((2, 3, 4)))
    for name in ['mean', 'max', 'min', 'sum', 'logsumexp', 'argmax', 'argmin', 'exp', 'sqrt', 'sigmoid', 'tanh',
                 'softmax', 'log_softmax', 'abs', 'square', 'sin', 'cos', 'relu', 'silu', 'gelu', 'contiguous', 'flip', 'squeeze']:
        getattr(x.abs() + 0.1, name)()
    assert x.permute(2, 0, 1).shape == (4, 2, 3) and x.permute((2, 0, 1)).shape == (4, 2, 3)
    assert x.unsqueeze(0).shape == (1, 2, 3, 4) and x.reshape(6, 4).shape == (6, 4) and x.view(-1).shape == (24,)
    assert x.mean((0, -1), keepdims=True).shape == (1, 3, 1) and x.amax(-1).shape == (2, 3) and x.max(-1).values.shape == (2, 3)
    assert x.pad(((0, 0), (1, 1), (0, 0))).shape == (2, 5, 4) and x.T.shape == (2, 4, 3)

def test_clamp_bounds_pass_gradient_like_torch():
    x = mi.Tensor([-1.0, 0.0, 0.5, 1.0, 2.0]); ops.clamp(x, 0.0, 1.0).sum().backward()
    t = torch.tensor([-1.0, 0.0, 0.5, 1.0, 2.0], requires_grad=True); t.clamp(0.0, 1.0).sum().backward()
    assert x.grad.numpy().tolist() == t.grad.tolist() == [0.0, 1.0, 1.0, 1.0, 0.0]

@pytest.mark.parametrize('mode', ['reflect', 'replicate'])
def test_edge_padding_matches_numpy(mode):
    a = np.arange(12.0).reshape(3, 4)
    got = ops.pad(mi.Tensor(a), ((1, 2), (2, 1)), mode=mode).detach().numpy()
    assert np.array_equal(got, np.pad(a, ((1, 2), (2, 1)), mode='reflect' if mode == 'reflect' else 'edge'))
