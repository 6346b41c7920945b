"500 training steps leave the number of live Tensors and the process memory flat: no graph is kept alive."
import gc, os, numpy as np, pytest
import minima as mi
from minima import nn, optim, init
from minima.autograd import Tensor


pytestmark = pytest.mark.usefixtures('one_blas_thread')

def _live_tensors():
    gc.collect()
    return sum(1 for o in gc.get_objects() if issubclass(type(o), Tensor))  # type(): no lazy-module attribute hooks

def _rss_mb():
    with open('/proc/self/statm') as f: return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2**20

def test_500_steps_flat_tensors_and_memory():
    init.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.BatchNorm1d(128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 10))
    opt = optim.Adam(model.parameters(), lr=1e-3)
    lossf = nn.CrossEntropyLoss()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((128, 64)).astype('float32'); y = rng.integers(0, 10, 128)
    counts, rss = [], []
    for step in range(500):
        opt.reset_grad()
        loss = lossf(model(mi.Tensor(X, requires_grad=False)), mi.Tensor(y))
        loss.backward()
        opt.step()
        if step in (50, 499): counts.append(_live_tensors()); rss.append(_rss_mb())
    print(f"live Tensors after 50 / 500 steps: {counts}; RSS MB: {rss[0]:.1f} / {rss[1]:.1f}")
    assert counts[1] <= counts[0], f"live Tensors grew from {counts[0]} to {counts[1]}"
    assert rss[1] - rss[0] < 10, f"RSS grew by {rss[1] - rss[0]:.1f} MB over 450 steps"
    for p in model.parameters(): assert p.op is None and p.grad.op is None
