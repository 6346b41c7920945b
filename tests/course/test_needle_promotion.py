"""needle's face promotes float32 @ float64 as needle's numpy backend does (issue 34 item 6); torch's face refuses."""
import numpy as np, pytest

import minima as mi
import minima.needle as ndl

def test_needle_matmul_promotes_like_numpy():
    a32, b64 = np.random.default_rng(0).random((2, 3), 'float32'), np.random.default_rng(1).random((3, 4))
    want = a32 @ b64
    a, b = ndl.Tensor(a32), ndl.Tensor(b64)
    assert a.dtype == 'float32' and b.dtype == 'float64'
    for r in (a @ b, ndl.matmul(a, b), ndl.ops.matmul(a, b), a.matmul(b), a @ b64, b.T @ a.T):
        assert isinstance(r, ndl.Tensor) and r.dtype == 'float64' == want.dtype
    np.testing.assert_allclose((a @ b).numpy(), want, rtol=1e-6)
    (a @ b).sum().backward()
    assert a.grad.dtype == 'float32' and b.grad.dtype == 'float64'
    np.testing.assert_allclose(b.grad.numpy(), np.broadcast_to(a32.sum(0)[:, None], (3, 4)), rtol=1e-6)
    with pytest.raises(TypeError, match='same dtype'): mi.ones(2, 3) @ mi.ones(3, 2, dtype=mi.float64)
