"""The autograder's tests for the units that are not ops (modules, optimizers, the DataLoader, the NDArray's views).
Each is tagged `@pytest.mark.grade('Unit')` with the unit it grades (see the instructors' chapter); ops are graded
by the op registry instead. They run in the normal suite too, against the solutions."""
import numpy as np, pytest, torch
import minima as mi
from minima import nn, optim, data
from minima.backend_ndarray.ndarray import NDArray

grade = pytest.mark.grade
TOL = dict(rtol=1e-5, atol=1e-6)


def _nd(a): return NDArray(np.ascontiguousarray(a))


# --- the strided NDArray ------------------------------------------------------------------------------------------
@grade('NDArray.compact')
def test_compact_of_strided_views(rng):
    a = rng.standard_normal((4, 5, 6)).astype('float32')
    x = _nd(a)
    for view, ref in [(x.permute((2, 0, 1)), a.transpose(2, 0, 1)), (x[1:4:2, ::-1, 2:], a[1:4:2, ::-1, 2:]),
                      (x[:, 1:2].broadcast_to((4, 3, 6)), np.broadcast_to(a[:, 1:2], (4, 3, 6)))]:
        c = view.compact()
        assert c.shape == ref.shape and c.strides == tuple(s // 4 for s in np.ascontiguousarray(ref).strides)
        np.testing.assert_array_equal(c.numpy(), ref)


@grade('NDArray.reshape')
def test_reshape_is_a_view(rng):
    a = rng.standard_normal((2, 3, 4)).astype('float32')
    x = _nd(a)
    r = x.reshape((6, 4))
    np.testing.assert_array_equal(r.numpy(), a.reshape(6, 4))
    assert r._handle is x._handle, 'a view must not copy'
    assert r.strides == (4, 1)
    with pytest.raises(ValueError): x.reshape((5, 5))


@grade('NDArray.permute')
def test_permute_is_a_view(rng):
    a = rng.standard_normal((2, 3, 4)).astype('float32')
    x = _nd(a)
    p = x.permute((1, 2, 0))
    np.testing.assert_array_equal(p.numpy(), a.transpose(1, 2, 0))
    assert p._handle is x._handle, 'a view must not copy'
    assert p.strides == (4, 1, 12)


@grade('NDArray.broadcast_to')
def test_broadcast_to_is_a_view(rng):
    a = rng.standard_normal((2, 1, 4)).astype('float32')
    x = _nd(a)
    b = x.broadcast_to((2, 5, 4))
    np.testing.assert_array_equal(b.numpy(), np.broadcast_to(a, (2, 5, 4)))
    assert b._handle is x._handle, 'a view must not copy'
    assert b.strides[1] == 0
    with pytest.raises(ValueError): x.broadcast_to((2, 3, 5))


# --- modules --------------------------------------------------------------------------------------------------------
@grade('Linear.forward')
def test_linear(rng):
    m, tm = nn.Linear(5, 3), torch.nn.Linear(5, 3)
    with torch.no_grad():
        tm.weight.copy_(torch.tensor(m.weight.numpy())); tm.bias.copy_(torch.tensor(m.bias.numpy()))
    x = rng.standard_normal((4, 5)).astype('float32')
    xt = mi.Tensor(x)
    y = m(xt)
    tx = torch.tensor(x, requires_grad=True)
    ty = tm(tx)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), **TOL)
    g = rng.standard_normal((4, 3)).astype('float32')
    y.backward(mi.Tensor(g)); ty.backward(torch.tensor(g))
    np.testing.assert_allclose(m.weight.grad.numpy(), tm.weight.grad.numpy(), **TOL)
    np.testing.assert_allclose(m.bias.grad.numpy().ravel(), tm.bias.grad.numpy(), **TOL)
    np.testing.assert_allclose(xt.grad.numpy(), tx.grad.numpy(), **TOL)


@grade('Flatten.forward')
def test_flatten(rng):
    x = rng.standard_normal((3, 2, 4)).astype('float32')
    np.testing.assert_array_equal(nn.Flatten()(mi.Tensor(x)).numpy(), x.reshape(3, 8))


@grade('ReLU.forward')
def test_relu(rng):
    x = rng.standard_normal((3, 2, 4)).astype('float32')
    np.testing.assert_array_equal(nn.ReLU()(mi.Tensor(x)).numpy(), np.maximum(x, 0))


@grade('Sequential.forward')
def test_sequential(rng):
    x = rng.standard_normal((3, 8)).astype('float32')
    a, b = nn.Linear(8, 5), nn.Linear(5, 2)
    ref = b(a(mi.Tensor(x))).numpy()     # Linear is graded on its own: here it is the reference
    np.testing.assert_allclose(nn.Sequential(a, b)(mi.Tensor(x)).numpy(), ref, **TOL)
    np.testing.assert_array_equal(nn.Sequential()(mi.Tensor(x)).numpy(), x)


@grade('Residual.forward')
def test_residual(rng):
    x = rng.standard_normal((3, 8)).astype('float32')
    lin = nn.Linear(8, 8)
    ref = x + lin(mi.Tensor(x)).numpy()
    np.testing.assert_allclose(nn.Residual(lin)(mi.Tensor(x)).numpy(), ref, **TOL)


@grade('_BatchNorm.forward')
def test_batchnorm_train_and_eval(rng):
    m, tm = nn.BatchNorm1d(4), torch.nn.BatchNorm1d(4)
    for _ in range(3):
        x = (rng.standard_normal((8, 4)) * 3 + 1).astype('float32')
        y, ty = m(mi.Tensor(x)), tm(torch.tensor(x))
        np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(m.running_mean.numpy(), tm.running_mean.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m.running_var.numpy(), tm.running_var.numpy(), rtol=1e-5, atol=1e-6)
    m.eval(); tm.eval()
    x = rng.standard_normal((5, 4)).astype('float32')
    np.testing.assert_allclose(m(mi.Tensor(x)).numpy(), tm(torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-5)


@grade('LayerNorm1d.forward')
def test_layernorm(rng):
    m, tm = nn.LayerNorm1d(6), torch.nn.LayerNorm(6)
    x = rng.standard_normal((4, 6)).astype('float32') * 2
    xt, tx = mi.Tensor(x), torch.tensor(x, requires_grad=True)
    y, ty = m(xt), tm(tx)
    np.testing.assert_allclose(y.numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-5)
    g = rng.standard_normal((4, 6)).astype('float32')
    y.backward(mi.Tensor(g)); ty.backward(torch.tensor(g))
    np.testing.assert_allclose(xt.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)


@grade('Dropout.forward')
def test_dropout():
    x = mi.Tensor(np.ones((200, 50), dtype='float32'))
    d = nn.Dropout(0.25)
    y = d(x).numpy()
    kept = y != 0
    assert 0.7 < kept.mean() < 0.8, kept.mean()
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)
    d.eval()
    np.testing.assert_array_equal(d(x).numpy(), x.numpy())


@grade('SoftmaxLoss.forward')
def test_softmax_loss(rng):
    z = rng.standard_normal((6, 5)).astype('float32') * 3
    y = rng.integers(0, 5, 6)
    zt, tz = mi.Tensor(z), torch.tensor(z, requires_grad=True)
    loss, tl = nn.SoftmaxLoss()(zt, mi.Tensor(y)), torch.nn.functional.cross_entropy(tz, torch.tensor(y))
    np.testing.assert_allclose(loss.numpy(), tl.detach().numpy(), **TOL)
    loss.backward(); tl.backward()
    np.testing.assert_allclose(zt.grad.numpy(), tz.grad.numpy(), **TOL)


# --- optimizers -----------------------------------------------------------------------------------------------------
def _run_opt(make, tmake, rng, steps=5):
    w0 = rng.standard_normal((4, 3)).astype('float32')
    data_ = [rng.standard_normal((4, 3)).astype('float32') for _ in range(steps)]
    p, tp = nn.Parameter(mi.Tensor(w0)), torch.nn.Parameter(torch.tensor(w0))
    opt, topt = make([p]), tmake([tp])
    for d in data_:
        opt.zero_grad(); topt.zero_grad()
        ((p * p * mi.Tensor(d)).sum()).backward()
        (tp * tp * torch.tensor(d)).sum().backward()
        opt.step(); topt.step()
    np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-6)


@grade('SGD.step')
def test_sgd(rng):
    _run_opt(lambda ps: optim.SGD(ps, lr=0.1), lambda ps: torch.optim.SGD(ps, lr=0.1), rng)
    _run_opt(lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=0.01),
             lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=0.01), rng)
    _run_opt(lambda ps: optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True),
             lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True), rng)


@grade('Adam.step')
def test_adam(rng):
    _run_opt(lambda ps: optim.Adam(ps, lr=0.01), lambda ps: torch.optim.Adam(ps, lr=0.01), rng)
    _run_opt(lambda ps: optim.Adam(ps, lr=0.01, weight_decay=0.1),
             lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=0.1), rng)


# --- the data loader ------------------------------------------------------------------------------------------------
@grade('DataLoader.__iter__')
def test_dataloader_batches():
    X, y = np.arange(20, dtype='float32').reshape(10, 2), np.arange(10)
    ds = data.NDArrayDataset(X, y)
    batches = list(data.DataLoader(ds, batch_size=4))
    assert [b[0].shape for b in batches] == [(4, 2), (4, 2), (2, 2)]
    np.testing.assert_array_equal(np.concatenate([b[1].numpy() for b in batches]), y)
    assert all(isinstance(t, mi.Tensor) for b in batches for t in b)
    mi.init.manual_seed(0)
    seen = np.concatenate([b[1].numpy() for b in data.DataLoader(ds, batch_size=3, shuffle=True)])
    assert sorted(seen) == list(range(10)) and list(seen) != list(range(10))
    assert len(list(data.DataLoader(ds, batch_size=4, drop_last=True))) == 2
