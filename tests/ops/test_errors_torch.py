"""Errors where torch raises too: bad input gets a clear error (named after the user-facing op), where torch raises too; the valid torch
configurations minima used to reject; no numpy RuntimeWarning out of ordinary arithmetic; a student's own op that
returns the wrong kind is caught at the boundary."""
import warnings
import numpy as np, pytest, torch
import minima as mi
from minima import nn, init, ops
from minima.autograd import TensorOp
from minima.backend_ndarray.device import NumpyDevice
import minima.nn.functional as F

TF = torch.nn.functional


class _OtherDevice(NumpyDevice):
    "A second numpy device, so that device mismatches can be tested without a GPU."
    name = 'other'
OTHER = _OtherDevice()

def T(*shape, device=None, dtype='float32'):
    return mi.Tensor(np.random.default_rng(0).standard_normal(shape).astype(dtype), device=device)


def test_tensor_of_none():
    with pytest.raises(RuntimeError): torch.tensor(None)
    with pytest.raises(TypeError, match='Tensor: cannot make a tensor from None'): mi.Tensor(None)

def test_init_one_hot_rejects_float_labels():
    with pytest.raises(RuntimeError): TF.one_hot(torch.tensor([1.7]), 3)
    with pytest.raises(TypeError, match='one_hot: labels must be integers'): init.one_hot(3, [1.7])
    assert init.one_hot(3, [2]).numpy().tolist() == [[0, 0, 1]]

@pytest.mark.parametrize('M', ['MaxPool2d', 'AvgPool2d'])
def test_pool_stride_zero(M):
    with pytest.raises(RuntimeError): getattr(torch.nn, M)(2, stride=0)(torch.ones(1, 1, 4, 4))
    with pytest.raises(ValueError, match=f'{M}: kernel_size, stride and dilation must be >= 1'): getattr(nn, M)(2, stride=0)

def test_conv_transpose2d_output_size_not_positive():
    x, w = T(1, 2, 3, 3), T(2, 1, 1, 1)
    with pytest.raises(RuntimeError, match='Output size is too small'):
        tx, tw = torch.tensor(x.detach().numpy()), torch.tensor(w.detach().numpy())
        TF.conv_transpose2d(tx, tw, padding=3)
    with pytest.raises(ValueError, match=r'conv_transpose2d: the output size \(-3, -3\) would not be positive'):
        F.conv_transpose2d(x, w, padding=3)

def test_conv_transpose2d_channel_mismatch_names_it():
    with pytest.raises(RuntimeError): TF.conv_transpose2d(torch.ones(1, 2, 3, 3), torch.ones(3, 1, 1, 1))
    with pytest.raises(ValueError, match=r'conv_transpose2d: input has 2 channels but weight \(3, 1, 1, 1\)'):
        F.conv_transpose2d(T(1, 2, 3, 3), T(3, 1, 1, 1))

@pytest.mark.parametrize('kw,xs', [(dict(stride=1, output_padding=1, dilation=2), (1, 2, 3, 3)),
                                   (dict(stride=(1, 2), output_padding=(1, 1), dilation=(2, 1), padding=1), (2, 2, 4, 5))])
def test_conv_transpose2d_output_padding_with_dilation_like_torch(kw, xs):
    x, w, b = T(*xs), T(2, 3, 3, 3), T(3)
    for t in (x, w, b): t.requires_grad_()
    tx, tw, tb = (torch.tensor(t.detach().numpy(), requires_grad=True) for t in (x, w, b))
    y, ty = F.conv_transpose2d(x, w, b, **kw), TF.conv_transpose2d(tx, tw, tb, **kw)
    assert y.shape == tuple(ty.shape) and np.allclose(y.detach().numpy(), ty.detach().numpy(), atol=1e-5)
    g = np.random.default_rng(2).standard_normal(ty.shape).astype('float32')
    (y * mi.Tensor(g)).sum().backward(); (ty * torch.tensor(g)).sum().backward()
    for a, t in ((x, tx), (w, tw), (b, tb)): assert np.allclose(a.grad.numpy(), t.grad.numpy(), atol=1e-4)

@pytest.mark.parametrize('call,tcall,op', [
    (lambda i, w: F.embedding(i, w), lambda i, w: TF.embedding(i, w), 'embedding'),
    (lambda i, w: ops.take(w, i, 0), lambda i, w: w.index_select(0, i), 'take')])
def test_negative_indices_raise_index_error_like_torch(call, tcall, op):
    w = T(5, 3)
    with pytest.raises(IndexError): tcall(torch.tensor([1, -1]), torch.tensor(w.detach().numpy()))
    with pytest.raises(IndexError, match=f'{op}: index -1 is out of range'): call(mi.Tensor(np.array([1, -1])), w)
    with pytest.raises(IndexError): tcall(torch.tensor([5]), torch.tensor(w.detach().numpy()))
    with pytest.raises(IndexError, match=f'{op}: index 5 is out of range'): call(mi.Tensor(np.array([5])), w)

def test_writing_through_a_broadcast_view_is_an_error_like_numpy():
    a = np.arange(3.0)
    with pytest.raises(ValueError, match='read-only'): np.broadcast_to(a, (2, 3))[0, 0] = 5
    b = mi.Tensor(a, requires_grad=False).broadcast_to((2, 3))
    with pytest.raises(ValueError, match='broadcast view .* read-only'): b[0, 0] = 5
    with pytest.raises(ValueError, match='read-only'): b.cached_data[1] = 7
    assert mi.Tensor(a).detach().numpy().tolist() == [0, 1, 2]

def test_clamp_with_tensor_bounds_like_torch():
    rng = np.random.default_rng(3)
    x, lo, hi = (mi.Tensor(a.astype('float32')) for a in (rng.standard_normal((3, 4)), rng.standard_normal((3, 4)) * 0.3 - 0.5,
                                                          rng.standard_normal(4) * 0.3 + 0.5))
    tx, tlo, thi = (torch.tensor(t.detach().numpy(), requires_grad=True) for t in (x, lo, hi))
    for args, targs in [((lo,), (tlo,)), ((lo, hi), (tlo, thi)), ((None, hi), (None, thi))]:
        y, ty = ops.clamp(x, *args), torch.clamp(tx, *targs)
        assert np.allclose(y.detach().numpy(), ty.detach().numpy())
        g = np.random.default_rng(1).standard_normal((3, 4)).astype('float32')
        for t in (x, lo, hi, tx, tlo, thi): t.grad = None
        (y * mi.Tensor(g)).sum().backward(); (ty * torch.tensor(g)).sum().backward()
        for a, t in zip((x,) + tuple(a for a in args if a is not None), (tx,) + tuple(t for t in targs if t is not None)):
            assert np.allclose(a.grad.numpy(), t.grad.numpy())
    with pytest.raises(TypeError, match='clamp: lo must be a number or a Tensor'): ops.clamp(x, 'low')

def test_logsumexp_of_bool_and_int_like_torch():
    for a in [np.array([True, False, True]), np.array([[1, 2], [3, 4]])]:
        y, ty = ops.logsumexp(mi.Tensor(a), 0 if a.ndim == 1 else (1,)), torch.logsumexp(torch.tensor(a), 0 if a.ndim == 1 else 1)
        assert y.dtype == 'float32' and np.allclose(y.numpy(), ty.numpy())

@pytest.mark.parametrize('name', ['conv2d', 'linear', 'cross_entropy', 'batch_norm', 'conv_transpose2d'])
def test_device_mismatch_names_the_user_facing_op(name):
    x = {'conv2d': T(1, 2, 4, 4), 'linear': T(3, 4), 'cross_entropy': T(3, 4), 'batch_norm': T(3, 4),
         'conv_transpose2d': T(1, 2, 4, 4)}[name]
    w = {'conv2d': T(3, 2, 2, 2, device=OTHER), 'linear': T(2, 4, device=OTHER), 'cross_entropy': T(4, device=OTHER),
         'batch_norm': T(4, device=OTHER), 'conv_transpose2d': T(2, 3, 2, 2, device=OTHER)}[name]
    call = {'conv2d': lambda: F.conv2d(x, w), 'linear': lambda: F.linear(x, w),
            'cross_entropy': lambda: F.cross_entropy(x, mi.Tensor(np.array([0, 1, 2])), weight=w),
            'batch_norm': lambda: F.batch_norm(x, w, w, training=False), 'conv_transpose2d': lambda: F.conv_transpose2d(x, w)}[name]
    with pytest.raises(RuntimeError, match=f'^{name}: .* is on minima.other\\(\\) but the input is on minima.cpu\\(\\)'): call()

def test_batch_norm_module_device_mismatch():
    bn = nn.BatchNorm1d(4)
    with pytest.raises(RuntimeError, match=r'BatchNorm1d\(4\): running_mean is on minima.cpu\(\) but the input is on minima.other\(\)'):
        bn(T(3, 4, device=OTHER))

def test_no_runtime_warning_from_arithmetic_with_inf():
    x = mi.Tensor(np.array([np.inf, -np.inf, 1.0, 0.0], 'float32'), requires_grad=True)
    tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter('error')
        cases = [(lambda a: a - a), (lambda a: a * 0), (lambda a: a / a), (lambda a: a.exp() - a.exp()),
                 (lambda a: (a * 0).log()), (lambda a: a ** 2 - a ** 2), (lambda a: a.sqrt()),
                 (lambda a: a.sum().reshape((1,)) * a), (lambda a: (a @ a).reshape((1,))), (lambda a: a.max().reshape((1,)) - a),
                 (lambda a: a.tanh()), (lambda a: a.sigmoid()), (lambda a: a.softmax(dim=0)), (lambda a: a.log_softmax(dim=0))]
        for f in cases:
            y, ty = f(x), f(tx)
            assert np.allclose(y.detach().numpy(), ty.detach().numpy(), equal_nan=True), f
            y.sum().backward()
        mi.Tensor(np.array([np.inf, np.nan], 'float32')).astype('int64')
        mi.Tensor([0.0]).log()


class NumpyCompute(TensorOp):
    def compute(self, a): return np.exp(a.numpy())

class NDArrayGradient(TensorOp):
    def compute(self, a): return a * 2
    def gradient(self, out_grad, node): return out_grad.cached_data * 2

class GoodOp(TensorOp):
    def compute(self, a): return a * 2
    def gradient(self, out_grad, node): return out_grad * 2

def test_student_op_returning_numpy_from_compute():
    with pytest.raises(TypeError, match=r'NumpyCompute.compute returned a ndarray; compute must return an NDArray \(wrap'):
        NumpyCompute()(mi.Tensor([1.0, 2.0]))

def test_student_op_returning_ndarray_from_gradient():
    y = NDArrayGradient()(mi.Tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match=r'NDArrayGradient.gradient returned a NDArray; gradient must return a Tensor per input'):
        y.backward(mi.Tensor([1.0, 1.0]))
    x = mi.Tensor([1.0, 2.0])
    GoodOp()(x).backward(mi.Tensor([1.0, 1.0]))
    assert x.grad.numpy().tolist() == [2.0, 2.0]
