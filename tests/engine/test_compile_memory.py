"""Capture is lean (speed audit F2): the peak of Python allocations (tracemalloc, numpy's included) while capturing
and building a program stays within 2x an eager step's, and after the build nothing is kept beyond the program's own
buffers."""
import gc, tracemalloc
import numpy as np
import minima as mi
from minima import nn, optim, init

def test_capture_peak_within_twice_eager_and_nothing_retained():
    init.manual_seed(0)
    m = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.Tanh(), nn.Linear(512, 10))
    opt, lossf = optim.AdamW(m.parameters(), lr=1e-3, capturable=True), nn.CrossEntropyLoss()
    x = mi.Tensor(np.random.default_rng(0).standard_normal((512, 256)).astype('float32'), requires_grad=False)
    y = mi.Tensor(np.random.default_rng(1).integers(0, 10, 512))
    def step(x, y):
        opt.zero_grad(); loss = lossf(m(x), y); loss.backward(); opt.step()
        return loss
    f = mi.compile(step)
    f(x, y); gc.collect()   # the optimizer's state exists from here on
    tracemalloc.start()
    try:
        peaks, after = [], []
        for _ in range(4):
            gc.collect(); base = tracemalloc.get_traced_memory()[0]; tracemalloc.reset_peak()
            f(x, y)
            peaks.append(tracemalloc.get_traced_memory()[1] - base)
            gc.collect(); after.append(tracemalloc.get_traced_memory()[0] - base)
    finally: tracemalloc.stop()
    eager = step_peak(step, x, y)
    prog = f.program.stats['planned_bytes']
    # calls: eager (reference above), capture, capture + build, replay
    assert f.captures == 2 and f.program is not None
    assert max(peaks[:2]) <= 2 * eager, (peaks, eager)
    # what stays after the build and a replay: the program's buffers and the live parameters and gradients (arrays the
    # capture made, as eager makes them), a little bookkeeping; none of the captures' temporaries
    params = sum(p.cached_data.size * 4 for p in m.parameters())
    assert sum(after) <= prog + 2 * params + (1 << 20), (after, prog, params)

def step_peak(step, x, y):
    tracemalloc.start()
    try:
        gc.collect(); base = tracemalloc.get_traced_memory()[0]; tracemalloc.reset_peak()
        step(x, y)
        return tracemalloc.get_traced_memory()[1] - base
    finally: tracemalloc.stop()
