"""The eager hot path stays lean (chapter 23, *Lean dispatch*): the Python function calls of one
op, one training step and one decoded token, counted with `sys.setprofile` (deterministic, unlike
time), stay under bounds. A layer of wrappers added to every op, or work done for hooks, versions or
views when there are none, fails here. The bounds sit a few percent above the counts of 2026-11-28
(before the lean dispatch: 25, 35, 22, 122, 1698, 8409 and 5387; after it: 10, 12, 10, 41, 622,
2878 and 1719; after the host paths of layer norm, attention, linear, batch norm, max pooling and
conv2d, chapters 08, 08c and 15: 10, 12, 10, 41, 608, 1737 and 995); raise one only with a
reason written beside it. Also: the fast paths answer as the general ones do, and a backward does no work for an
input that needs no gradient."""
import sys, warnings
import numpy as np, pytest
import minima as mi
from minima import nn, optim, init
from minima.backend_ndarray.ndarray import NDArray
from minima.profiler import python_calls

BOUNDS = dict(add=11, matmul=13, add_no_grad=11, add_forward_backward=48, mlp_step=650,
              cnn_step=1850, gpt_decode_token=1070)


def test_python_calls_counts_python_frames():
    def leaf(): return 1
    def mid(): return leaf() + leaf()
    def top(): return mid() + len([1, 2])   # a builtin is not a Python frame
    assert python_calls(top) == 3   # mid, leaf, leaf (top itself is not counted)
    assert python_calls(lambda: None) == 0
    sys.setprofile(lambda *a: None)
    try:
        with pytest.raises(RuntimeError, match='another profiler'): python_calls(top)
    finally: sys.setprofile(None)


@pytest.fixture(scope='module')
def small():
    rng = np.random.default_rng(0)
    x = mi.Tensor(rng.random((4, 4), dtype=np.float32))
    y = mi.Tensor(rng.random((4, 4), dtype=np.float32))
    return x, y, mi.Tensor(np.ones((4, 4), 'float32'), requires_grad=False)


def test_one_op(small):
    x, y, g = small
    assert python_calls(lambda: x + y) <= BOUNDS['add']
    assert python_calls(lambda: x @ y) <= BOUNDS['matmul']
    with mi.no_grad(): n = python_calls(lambda: x + y)
    assert n <= BOUNDS['add_no_grad']
    def fwd_bwd():
        x.grad = y.grad = None
        (x + y).backward(g)
    assert python_calls(fwd_bwd) <= BOUNDS['add_forward_backward']


def _step(model, xb, yb):
    opt, lossf = optim.SGD(model.parameters(), lr=0.01, momentum=0.9), nn.CrossEntropyLoss()
    def step():
        opt.zero_grad(); lossf(model(xb), yb).backward(); opt.step()
    return step


def test_training_steps():
    "The small MLP and the digits CNN of bench/train.py (the count does not depend on the sizes)."
    init.manual_seed(0)
    rng = np.random.default_rng(0)
    labels = mi.Tensor(rng.integers(0, 10, 16))
    mlp = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    x = mi.Tensor(rng.standard_normal((16, 64)).astype('float32'))
    assert python_calls(_step(mlp, x, labels)) <= BOUNDS['mlp_step']
    cnn = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 4 * 4, 10))
    x = mi.Tensor(rng.standard_normal((16, 1, 8, 8)).astype('float32'))
    assert python_calls(_step(cnn, x, labels)) <= BOUNDS['cnn_step']


def test_kv_cached_decoding():
    "One token of a 2-layer GPT with its KV cache, under no_grad."
    init.manual_seed(0)
    gpt = nn.GPT(65, 64, 2, 4, 64)
    gpt.eval()
    cache, pos = gpt.make_cache(1), [0]
    def token():
        with mi.no_grad(): gpt(np.array([[pos[0] % 65]]), cache)
        pos[0] += 1
    assert python_calls(token) <= BOUNDS['gpt_decode_token']


def test_fast_paths_agree_with_the_general_rules():
    a = NDArray(np.full((2, 3), 3e38, 'float32'))
    with warnings.catch_warnings():
        warnings.simplefilter('error')   # numpy's overflow warning stays off on the fast paths too
        assert np.isinf((a + a).numpy()).all() and np.isinf((a * 10.0).numpy()).all()
    h = NDArray(np.ones((2, 3), 'float16'))
    assert (h * np.float64(2.0)).dtype == 'float16' and (h + 1).dtype == 'float16'   # a weak number
    assert (NDArray(np.ones(3, 'int64')) / 2).dtype == 'float32'                    # int / number
    with pytest.raises(TypeError, match='sub'): NDArray(np.ones(3, 'float32')) - True
    b = NDArray(np.ones(3, 'bool'))
    with pytest.raises(TypeError, match='sub'): b - b
    r = NDArray(np.arange(6, dtype='float32')).reshape(2, 3)
    assert r.is_compact() and r.reshape(-1, 2).shape == (3, 2) and r.permute((1, 0)).shape == (3, 2)
    with pytest.raises(AttributeError): r.shape = (6,)   # the C-level getters stay read-only
    with pytest.raises(AttributeError): r.ndim = 1
    t = mi.Tensor(np.ones((2, 3), 'float32'))
    with pytest.raises(AttributeError): t.shape = (3, 2)
    assert (t.shape, t.dtype, t.ndim, t.device) == ((2, 3), 'float32', 2, mi.cpu())


def test_conv_backward_skips_the_input_adjoint_of_a_batch(monkeypatch):
    "The first layer's input is data: its transposed convolution (ConvInput) is never computed."
    from minima.ops import layers
    calls = []
    real = layers.ConvInput.compute
    def counted(self, *a):
        calls.append(1)
        return real(self, *a)
    monkeypatch.setattr(layers.ConvInput, 'compute', counted)
    rng = np.random.default_rng(0)
    w = mi.Tensor(rng.standard_normal((4, 2, 3, 3)).astype('float32'))
    for needs in (False, True):
        x = mi.Tensor(rng.standard_normal((2, 2, 5, 5)).astype('float32'), requires_grad=needs)
        w.grad = None
        nn.functional.conv2d(x, w, padding=1).sum().backward()
        assert len(calls) == int(needs) and w.grad is not None and (x.grad is not None) == needs
