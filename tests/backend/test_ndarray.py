"""NDArray semantics against numpy: views share storage, compact copies only when needed, reductions and matmul."""
import numpy as np, pytest
from hypothesis import given, settings, strategies as st, HealthCheck
from minima.backend_ndarray import NDArray

def test_views_share_storage():
    a = NDArray(np.arange(24.).reshape(2, 3, 4))
    for v in [a.reshape(6, 4), a.permute(2, 0, 1), a[:, ::2, ::-1], a[1], a.flip(1), a.broadcast_to((5, 2, 3, 4))]:
        assert v._handle is a._handle
    assert a.compact() is a
    assert a.permute(2, 0, 1).compact()._handle is not a._handle

def test_dtypes():
    assert NDArray([1.0]).dtype == 'float32'
    for dt in ['float32', 'float64', 'int64', 'bool']:
        assert NDArray(np.zeros(3), dtype=dt).numpy().dtype == np.dtype(dt)
    assert (NDArray([1.0]) + NDArray(np.array([1]))).dtype == 'float32'
    assert (NDArray([1.0]) + NDArray([1.0], dtype='float64')).dtype == 'float64'

def test_fill_to_numpy_setitem_scalar():
    a = NDArray(np.zeros((3, 4)))
    a[1:, ::3] = 7
    x = np.zeros((3, 4)); x[1:, ::3] = 7
    assert np.array_equal(a.numpy(), x)
    assert np.array_equal(a.fill(2).numpy(), np.full((3, 4), 2))
    assert a.to('cpu') is a

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data())
def test_random_slicing_matches_numpy(shape, data):
    x = np.arange(int(np.prod(shape)), dtype='float32').reshape(shape)
    idx = []
    for n in shape:
        if data.draw(st.booleans()): idx.append(data.draw(st.integers(-n, n - 1)))
        else:
            idx.append(slice(data.draw(st.one_of(st.none(), st.integers(-n - 1, n + 1))),
                             data.draw(st.one_of(st.none(), st.integers(-n - 1, n + 1))),
                             data.draw(st.sampled_from([None, 1, 2, 3, -1, -2]))))
    idx = tuple(idx)
    a = NDArray(x)
    assert np.array_equal(a[idx].numpy(), x[idx])
    assert np.array_equal(a[idx].compact().numpy(), x[idx])

@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=1, max_size=4), st.data())
def test_random_reductions_match_numpy(shape, data):
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype('float32')
    axes = tuple(sorted(data.draw(st.sets(st.integers(-len(shape), len(shape) - 1).map(lambda a: a % len(shape))))))
    keep = data.draw(st.booleans())
    a = NDArray(x)
    np.testing.assert_allclose(a.sum(axes or None, keep).numpy(), x.sum(axes or None, keepdims=keep), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(a.max(axes or None, keep).numpy(), x.max(axes or None, keepdims=keep))

def test_argmax_first_occurrence():
    x = np.array([[1, 3, 3], [2, 2, 0]], dtype='float32')
    assert NDArray(x).argmax(1).numpy().tolist() == [1, 0] and NDArray(x).argmin(1).numpy().tolist() == [0, 2]

def test_inplace_operators_write_into_the_buffer():
    a = NDArray(np.arange(6.).reshape(2, 3)); h = a._handle
    a += NDArray([1., 1., 1.]); a -= 1; a *= NDArray([[2.], [3.]]); a /= 2
    assert a._handle is h and np.allclose(a.numpy(), np.arange(6.).reshape(2, 3) * [[1.], [1.5]])
    x = np.zeros((2, 3), 'float32'); b = NDArray(x)
    r = b[1]; r += 1; x[1] += 1                                        # a view writes through, as in numpy
    t = b.permute(1, 0); t *= NDArray([2., 3.]); x.T[...] *= [2., 3.]   # a non-compact view too
    assert np.array_equal(b.numpy(), x)
    f = NDArray(np.ones(3), dtype='float32'); f += NDArray(np.ones(3), dtype='float64')
    assert f.dtype == 'float32' and f.numpy().tolist() == [2, 2, 2]      # same-kind cast, stays float32
    y = NDArray(np.ones(3)); yy = y; yy += y.flip()                       # overlapping operand
    assert yy is y and y.numpy().tolist() == [2, 2, 2]
    with pytest.raises(TypeError, match='cannot write a float32 result into a int64 array'):
        i = NDArray(np.array([1, 2])); i += 1.5
    with pytest.raises(ValueError, match='would not keep shape'):
        s = NDArray(np.ones(3)); s += NDArray(np.ones((2, 3)))
