"""torch's memory semantics for `state_dict()` (detached tensors sharing the module's memory; issue 34, C8) and for
`Tensor.numpy()` (the tensor's own memory, refused for a tensor that requires grad or lives on a GPU). Each program
runs with `L = minima` and `L = torch`, and the two must agree."""
import copy, io
import numpy as np
import pytest
import torch
import minima
import minima.needle as ndl

LIBS = [minima, torch]
W = [[1., 2.], [3., 4.], [5., 6.]]

def host(t): return np.array(t.detach().cpu().numpy()) if hasattr(t, 'detach') else np.array(t)

def linear(L):
    m = L.nn.Linear(2, 3)
    with L.no_grad(): m.weight.copy_(L.tensor(W)); m.bias.fill_(0.5)
    return m

def both(f):
    "f(L) for minima and torch, each result turned into numpy (nested lists and tuples kept)."
    def conv(r):
        if isinstance(r, (list, tuple)): return type(r)(conv(x) for x in r)
        return host(r) if hasattr(r, 'numpy') else r
    return [conv(f(L)) for L in LIBS]

def same(f):
    mine, theirs = both(f)
    assert _eq(mine, theirs), (mine, theirs)
    return mine

def _eq(a, b):
    if isinstance(a, (list, tuple)): return len(a) == len(b) and all(_eq(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray): return a.shape == np.shape(b) and np.allclose(a, b)
    return a == b

# state_dict()

def test_state_dict_values_are_detached_tensors_of_the_right_dtype_and_shape():
    for L in LIBS:
        sd = linear(L).state_dict()
        assert list(sd) == ['weight', 'bias']
        for v in sd.values():
            assert type(v) is L.Tensor and not v.requires_grad and v.is_leaf
        assert tuple(sd['weight'].shape) == (3, 2) and str(sd['weight'].dtype).endswith('float32')
    m = minima.nn.Linear(2, 3).double()
    assert m.state_dict()['weight'].dtype == 'float64'

def test_state_dict_values_clone_cpu_numel_as_the_audit_repro():
    # C8: `{k: v.clone() for k, v in m.state_dict().items()}` raised AttributeError on numpy arrays
    def f(L):
        sd = linear(L).state_dict()
        snap = {k: v.clone() for k, v in sd.items()}
        return snap['weight'], sd['bias'].cpu(), sd['weight'].numel(), sd['weight'].sum().item()
    same(f)

def test_state_dict_shares_memory_with_the_parameters():
    def f(L):
        m = linear(L)
        sd = m.state_dict()
        with L.no_grad(): m.weight.mul_(2)   # an in-place change of the parameter shows in the state_dict
        return sd['weight']
    assert same(f)[0, 0] == 2.

def test_copy_into_a_state_dict_value_writes_the_module():
    def f(L):
        m = linear(L)
        m.state_dict()['weight'].copy_(L.zeros(3, 2))
        m.state_dict()['bias'][1] = -7.
        return m.weight, m.bias, m(L.ones(1, 2))
    w, b, _ = same(f)
    assert not w.any() and b[1] == -7.

def test_clone_and_deepcopy_snapshots_are_independent():
    def f(L):
        m = linear(L)
        sd = m.state_dict()
        snap, deep = {k: v.clone() for k, v in sd.items()}, copy.deepcopy(sd)
        with L.no_grad(): m.weight.add_(10.)
        return snap['weight'], deep['weight'], sd['weight']
    snap, deep, live = same(f)
    assert np.array_equal(snap, W) and np.array_equal(deep, W) and live[0, 0] == 11.

def test_keep_vars_returns_the_parameters_and_buffers_themselves():
    for L in LIBS:
        m = L.nn.Sequential(L.nn.Linear(2, 3), L.nn.BatchNorm1d(3))
        sd = m.state_dict(keep_vars=True)
        assert sd['0.weight'] is m[0].weight and sd['1.running_mean'] is m[1].running_mean
        assert isinstance(sd['0.weight'], L.nn.Parameter) and sd['0.weight'].requires_grad

def test_load_state_dict_copies_in_place_so_earlier_aliases_see_it():
    def f(L):
        m, src = linear(L), L.nn.Linear(2, 3)
        alias = m.state_dict()['weight']
        m.load_state_dict(src.state_dict())
        with L.no_grad(): src.weight.add_(1.)   # the source stays separate: load copied its values
        return alias, m.weight, src.weight - 1.
    for alias, w, src in both(f):
        assert np.array_equal(alias, w) and np.allclose(w, src)

def test_load_state_dict_accepts_torch_tensors_and_numpy_arrays():
    t = torch.nn.Linear(2, 3)
    m = minima.nn.Linear(2, 3)
    m.load_state_dict(t.state_dict())
    assert np.allclose(m.weight.detach().numpy(), t.weight.detach().numpy())
    m.load_state_dict({'weight': np.full((3, 2), 2., 'float64'), 'bias': np.zeros(3)})   # minima's extension
    assert m.weight.dtype == 'float32' and (m.weight.detach().numpy() == 2.).all()
    m.load_state_dict(m.state_dict(keep_vars=True))   # tensors that require grad, loaded into themselves
    assert (m.weight.detach().numpy() == 2.).all()

def test_state_dict_round_trips_through_save_and_load(tmp_path):
    m = linear(minima)
    buf = io.BytesIO(); minima.save(m.state_dict(), buf); buf.seek(0)
    sd = minima.load(buf)
    assert all(isinstance(v, minima.Tensor) for v in sd.values())
    m2 = minima.nn.Linear(2, 3); m2.load_state_dict(sd)
    assert np.array_equal(m2.weight.detach().numpy(), W)
    m.save(tmp_path / 'm.npz'); m3 = minima.nn.Linear(2, 3); m3.load(tmp_path / 'm.npz')
    assert np.array_equal(m3.weight.detach().numpy(), W)

def test_files_with_numpy_state_dicts_still_load(tmp_path):
    # what minima.save wrote when state_dict() gave numpy arrays
    old = {'weight': np.array(W, 'float32'), 'bias': np.full(3, .5, 'float32')}
    minima.save(old, tmp_path / 'old.pt')
    sd = minima.load(tmp_path / 'old.pt')
    m = minima.nn.Linear(2, 3); m.load_state_dict(sd)
    assert np.array_equal(m.weight.detach().numpy(), W) and (m.bias.detach().numpy() == .5).all()

# optimizer.state_dict()

def _adam_run(L, steps, resume_after=None):
    torch.manual_seed(0); minima.manual_seed(0)
    m = linear(L)
    opt = L.optim.Adam(m.parameters(), lr=0.1)
    x = L.tensor([[1., -2.], [0.5, 3.]])
    for i in range(steps):
        if i == resume_after:   # a fresh optimizer from a deep copy of the state
            sd = copy.deepcopy(opt.state_dict())
            opt = L.optim.Adam(m.parameters(), lr=0.1); opt.load_state_dict(sd)
        opt.zero_grad(); (m(x) ** 2).sum().backward(); opt.step()
    return m.weight, opt.state_dict()

def test_optimizer_state_dict_holds_tensors_and_python_hyperparameters():
    for L in LIBS:
        _, sd = _adam_run(L, 2)
        st = sd['state'][0]
        assert set(st) == {'step', 'exp_avg', 'exp_avg_sq'}
        assert all(isinstance(v, L.Tensor) for v in st.values())
        assert float(st['step']) == 2. and str(st['step'].dtype).endswith('float32')
        g = sd['param_groups'][0]
        assert g['params'] == [0, 1] and type(g['lr']) is float and type(g['betas']) is tuple

def test_optimizer_state_dict_round_trip_resumes_as_torch():
    w, sd = both(lambda L: _adam_run(L, 5, resume_after=2)[0])
    assert np.allclose(w, sd, atol=1e-6)
    uninterrupted = host(_adam_run(minima, 5)[0])
    assert np.array_equal(host(_adam_run(minima, 5, resume_after=2)[0]), uninterrupted)

def test_optimizer_state_tensors_share_the_optimizers_memory():
    def f(L):
        m = linear(L)
        opt = L.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        for _ in range(2):
            opt.zero_grad(); m(L.ones(1, 2)).sum().backward(); opt.step()
            if _ == 0: buf = opt.state_dict()['state'][0]['momentum_buffer']
        return buf, opt.state_dict()['state'][0]['momentum_buffer']
    first, last = same(f)
    assert np.array_equal(first, last)   # the first step's tensor saw the second step's update

def test_loaded_optimizer_state_is_its_own_copy():
    # minima's deliberate difference (chapter 18): torch's load_state_dict keeps the very tensors it was given
    m = linear(minima)
    opt = minima.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    opt.zero_grad(); m(minima.ones(1, 2)).sum().backward(); opt.step()
    sd = opt.state_dict()
    opt2 = minima.optim.SGD(m.parameters(), lr=0.1, momentum=0.9); opt2.load_state_dict(sd)
    before = host(sd['state'][0]['momentum_buffer'])
    opt2.step()
    assert np.array_equal(host(sd['state'][0]['momentum_buffer']), before)

# Tensor.numpy()

def test_numpy_shares_memory_both_ways():
    def f(L):
        t = L.tensor([[1., 2., 3.], [4., 5., 6.]])
        a = t.numpy()
        a[0, 0] = 10.            # numpy -> tensor
        t[1, 1] = -5.            # tensor -> numpy
        t.add_(1.)
        return t, a, a.dtype == np.float32, a.shape
    t, a, f32, shape = same(f)
    assert np.array_equal(t, a) and f32 and shape == (2, 3)

@pytest.mark.parametrize('view', ['t', 'row', 'col', 'step', 'expand', 'scalar'])
def test_numpy_of_a_view_is_a_strided_view_of_the_same_memory(view):
    def f(L):
        x = L.arange(12.).reshape(3, 4)
        v = dict(t=lambda: x.t(), row=lambda: x[1], col=lambda: x[:, 2], step=lambda: x[::2, 1::2],
                 expand=lambda: x[:1].expand(3, 4), scalar=lambda: x[2, 3])[view]()
        a = v.numpy()
        shape, strides = a.shape, a.strides
        x.mul_(-1.)              # a write to the base shows through the array
        return a.copy(), shape, strides, v
    (a, shape, strides, v), (ta, tshape, tstrides, tv) = both(f)
    assert shape == tshape and strides == tstrides and np.array_equal(a, ta) and np.array_equal(a, v)

def test_numpy_refuses_a_tensor_that_requires_grad_as_torch():
    for L in LIBS:
        x = L.ones(3, requires_grad=True)
        for t in (x, x * 2):
            with pytest.raises(RuntimeError, match=r"Can't call numpy\(\) on Tensor that requires grad\. Use "
                                                   r"tensor\.detach\(\)\.numpy\(\) instead\."):
                t.numpy()
        a = x.detach().numpy(); a[0] = 5.
        assert x[0].item() == 5.
        b = x.numpy(force=True); assert b.tolist() == [5., 1., 1.]

def test_numpy_keeps_every_dtype_and_asarray_shares_while_array_copies():
    for dt in ['float16', 'float64', 'int8', 'uint8', 'int32', 'int64', 'bool']:
        assert minima.zeros(2, dtype=dt).numpy().dtype == np.dtype(dt)
    for L in LIBS:
        t = L.zeros(3)
        np.asarray(t)[0] = 1.; np.array(t)[1] = 1.
        assert t.tolist() == [1., 0., 0.]

@pytest.mark.skipif(not minima.cuda.is_available(), reason='no CUDA device (or emulator) here')
def test_numpy_of_a_cuda_tensor_says_to_copy_to_the_cpu_first():
    t = minima.ones(2, device='cuda')
    with pytest.raises(TypeError, match=r"can't convert .* device type tensor to numpy\. Use Tensor\.cpu\(\)"):
        t.numpy()
    assert t.cpu().numpy().tolist() == [1., 1.] and t.numpy(force=True).tolist() == [1., 1.]

def test_needle_numpy_keeps_needles_copy():
    x = ndl.Tensor([1., 2.])   # requires grad, as needle's default
    a = x.numpy(); a[0] = 9.
    assert x.numpy().tolist() == [1., 2.] and (x * 2).numpy().tolist() == [2., 4.]

def test_numpy_inside_a_compiled_function_is_still_refused():
    # the capture reads through the device's `to_numpy`: a shared view would slip past its guard
    from importlib import import_module
    f = minima.compile(lambda x: (x * 2).numpy())
    with pytest.raises(import_module('minima.compile').CaptureError, match="reads a tensor's value"):
        for _ in range(4): f(minima.ones(3))
