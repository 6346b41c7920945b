"""Bad input gets a specific exception naming the op and the values, never a wrong answer."""
import numpy as np, pytest
import minima as mi
from minima.backend_ndarray import NDArray, get_device

def test_matmul_shape_mismatch():
    with pytest.raises(ValueError, match=r'matmul.*\(2, 3\).*\(4, 5\)'):
        mi.Tensor(np.ones((2, 3))) @ mi.Tensor(np.ones((4, 5)))
    with pytest.raises(ValueError, match='matmul.*cannot be broadcast'):
        mi.Tensor(np.ones((2, 3, 4))) @ mi.Tensor(np.ones((3, 4, 5)))

def test_broadcast_mismatch():
    with pytest.raises(ValueError, match=r'add.*\(2, 3\).*\(4,\)'): mi.Tensor(np.ones((2, 3))) + mi.Tensor(np.ones(4))
    with pytest.raises(ValueError, match='broadcast_to'): mi.ops.broadcast_to(mi.Tensor(np.ones((2, 3))), (4, 3))

def test_axis_out_of_range():
    with pytest.raises(ValueError, match='axis 2 is out of range.*2 dimensions'): mi.Tensor(np.ones((2, 3))).sum(2)
    with pytest.raises(ValueError, match='axis -3'): mi.ops.summation(mi.Tensor(np.ones((2, 3))), (-3,))
    with pytest.raises(ValueError, match='repeated'): NDArray(np.ones((2, 3))).sum((1, -1))

def test_reshape_incompatible():
    with pytest.raises(ValueError, match=r'reshape.*\(2, 3\).*\(4, 2\)'): mi.Tensor(np.ones((2, 3))).reshape((4, 2))
    with pytest.raises(ValueError, match='only one dimension can be -1'): NDArray(np.ones(6)).reshape(-1, -1)

def test_unknown_device():
    with pytest.raises(ValueError, match="unknown device 'tpu'"): mi.Tensor([1.0], device='tpu')
    with pytest.raises(ValueError, match='unknown device'): get_device(3)

class FakeDevice(type(mi.cpu())):
    name = 'fake'

def test_mixing_devices():
    a = NDArray(np.ones(3), device=mi.cpu())
    b = NDArray(np.ones(3), device=FakeDevice())
    with pytest.raises(RuntimeError, match=r'add: arrays are on different devices \(minima.cpu\(\) and minima.fake\(\)\)'): a + b
    with pytest.raises(RuntimeError, match='matmul.*different devices'): a @ b
    with pytest.raises(RuntimeError, match='different devices'): mi.Tensor(a) * mi.Tensor(b)

def test_non_float_dtype_where_floats_needed():
    with pytest.raises(TypeError, match=r'exp: expected a floating dtype.*int64'): NDArray(np.array([1, 2])).exp()
    assert mi.Tensor(np.array([1, 2])).exp().dtype == 'float32'   # the Tensor op promotes, as torch (issue 21)
    with pytest.raises(TypeError, match='log: expected a floating dtype.*bool'): NDArray(np.array([True])).log()
    with pytest.raises(TypeError, match='unsupported dtype'): NDArray([1.0], dtype='complex64')

def test_backward_without_grad():
    with pytest.raises(RuntimeError, match='does not require grad'): mi.Tensor([1.0], requires_grad=False).backward()

def test_getitem_out_of_range():
    with pytest.raises(IndexError, match='index 5 is out of range for axis 0 with size 3'): NDArray(np.ones(3))[5]
    with pytest.raises(IndexError, match='too many indices'): NDArray(np.ones(3))[0, 0]

def test_take_bad_indices():
    with pytest.raises(IndexError, match='take: index 7'): NDArray(np.ones((3, 2))).take([0, 7], 0)
    with pytest.raises(TypeError, match='take: indices must be int64'): NDArray(np.ones((3, 2))).take(NDArray([0.0]), 0)
