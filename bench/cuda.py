"""Benchmarks of minima's CUDA kernels against torch CUDA, measured in the same process.

Device-side timing with CUDA events, warm-up runs first, the median of several runs. TF32 is off for both matmuls.
Rows: float32 matmul and bandwidth; float16/bfloat16 matmul on the tensor cores against cuBLAS and int8 against
`torch._int_mm`; the fused row ops (softmax, log-softmax, layer norm, cross-entropy) over (4096, 4096); the MLP and GPT
training steps eager (with their calls into the kernel library per step, with and without the fused row kernels) and
compiled; the float32 matmul ladder. A row that fails prints its error and the run goes on. Prints a markdown table
and writes bench/results/cuda_<gpu>_<date>.json (`_common.write_results`); never gates CI (it exits 0 with a message
when there is no GPU).

    python bench/cuda.py [--json results.json] [--reps 10] [--plot ladder.png] [--profile] [--only rows,lowp,...]
"""
import argparse, json, sys
import numpy as np
import minima
from minima.backend_ndarray import NDArray

def torch_ms(torch, fn, warmup=3, reps=10):
    "Median CUDA-event time of `fn()` in ms, on torch's current stream."
    for _ in range(warmup): fn()
    ts = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); fn(); e1.record(); e1.synchronize()
        ts.append(e0.elapsed_time(e1))
    return float(np.median(ts))

def bench_matmul(dev, torch, reps, M=4096):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((M, M), dtype='float32'), rng.standard_normal((M, M), dtype='float32')
    A, B, C = NDArray(a, device=dev), NDArray(b, device=dev), dev.alloc(M * M, 'float32')
    ms = dev.time_ms(lambda: dev.matmul(A._handle, B._handle, C, 1, M, M, M), reps=reps)
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    tc = torch.empty_like(ta)
    tms = torch_ms(torch, lambda: torch.matmul(ta, tb, out=tc), reps=reps)
    err = np.abs(NDArray.make((M, M), device=dev, handle=C).numpy() - tc.cpu().numpy()).max()
    flop = 2 * M ** 3
    return dict(name=f'matmul float32 {M}³ (TF32 off)', minima=f'{flop / ms / 1e9:.1f} TFLOP/s ({ms:.2f} ms)',
                torch=f'{flop / tms / 1e9:.1f} TFLOP/s ({tms:.2f} ms)', ratio=tms / ms, ratio_text=f'{tms / ms:.0%} of cuBLAS',
                target='≥ 50% of cuBLAS', ok=tms / ms >= 0.5, max_abs_diff=float(err))

def bench_bandwidth(dev, torch, reps, n=64 * 2 ** 20):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(n, dtype='float32'), rng.standard_normal(n, dtype='float32')
    A, B, C, S = NDArray(a, device=dev)._handle, NDArray(b, device=dev)._handle, dev.alloc(n, 'float32'), dev.alloc(1, 'float32')
    copy = dev.time_ms(lambda: dev.lib.mc_d2d(C.ptr, A.ptr, n * 4), reps=reps)
    add = dev.time_ms(lambda: dev.ewise('add', A, B, C), reps=reps)
    red = dev.time_ms(lambda: dev.reduce_sum(A, S, n), reps=reps)
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    tc, ts = torch.empty_like(ta), torch.empty((), device='cuda')
    tcopy = torch_ms(torch, lambda: tc.copy_(ta), reps=reps)
    tadd = torch_ms(torch, lambda: torch.add(ta, tb, out=tc), reps=reps)
    tsum = torch_ms(torch, lambda: torch.sum(ta, dim=0, out=ts), reps=reps)
    bw = lambda nbytes, ms: nbytes / ms / 1e6
    copy_bw = bw(2 * n * 4, copy)
    got = NDArray.make((), device=dev, handle=S).item()
    rows = [dict(name=f'device-to-device copy, {n // 2**20}M float32', minima=f'{copy_bw:,.0f} GB/s ({copy:.3f} ms)',
                 torch=f'{bw(2 * n * 4, tcopy):,.0f} GB/s ({tcopy:.3f} ms)', ratio=1.0, ratio_text='(reference)', target='', ok=True)]
    r = bw(3 * n * 4, add) / copy_bw
    rows.append(dict(name=f'ewise add, {n // 2**20}M float32', minima=f'{bw(3 * n * 4, add):,.0f} GB/s ({add:.3f} ms)',
                     torch=f'{bw(3 * n * 4, tadd):,.0f} GB/s ({tadd:.3f} ms)', ratio=r, ratio_text=f'{r:.0%} of copy bw',
                     target='≥ 70% of copy bw', ok=r >= 0.7))
    r = bw(n * 4, red) / copy_bw
    rows.append(dict(name=f'sum reduction, {n // 2**20}M float32', minima=f'{bw(n * 4, red):,.0f} GB/s ({red:.3f} ms)',
                     torch=f'{bw(n * 4, tsum):,.0f} GB/s ({tsum:.3f} ms)', ratio=r, ratio_text=f'{r:.0%} of copy bw',
                     target='≥ 60% of copy bw', ok=r >= 0.6, rel_err=abs(got - float(ts)) / max(1.0, abs(float(ts)))))
    return rows

def bench_mlp(dev, torch, reps, batch=1024, steps=20):
    "One SGD step of a 64-100-10 ReLU MLP with softmax cross-entropy (the digits shapes), minima vs torch."
    import minima.nn as nn, minima.optim as optim
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((batch, 64)).astype('float32'), rng.integers(0, 10, batch)
    X, Y = minima.Tensor(x, device=dev, requires_grad=False), minima.Tensor(y, device=dev, requires_grad=False)
    model = nn.Sequential(nn.Linear(64, 100, device=dev), nn.ReLU(), nn.Linear(100, 10, device=dev))
    opt, loss_fn = optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss()
    def step():
        opt.zero_grad(); loss = loss_fn(model(X), Y); loss.backward(); opt.step()
    ms = dev.time_ms(lambda: [step() for _ in range(steps)], warmup=1, reps=reps) / steps
    tm = torch.nn.Sequential(torch.nn.Linear(64, 100), torch.nn.ReLU(), torch.nn.Linear(100, 10)).cuda()
    topt, tloss = torch.optim.SGD(tm.parameters(), lr=0.1), torch.nn.CrossEntropyLoss()
    tx, ty = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
    def tstep():
        topt.zero_grad(); loss = tloss(tm(tx), ty); loss.backward(); topt.step()
    tms = torch_ms(torch, lambda: [tstep() for _ in range(steps)], warmup=1, reps=reps) / steps
    calls = count_calls(dev, step)
    with unfused(dev): calls_unfused = count_calls(dev, step)
    return dict(name=f'MLP training step, batch {batch} (64-100-10)', minima=f'{ms:.3f} ms', torch=f'{tms:.3f} ms',
                ratio=ms / tms, ratio_text=f'{ms / tms:.2f}x torch time', target='≤ 1.5x torch time', ok=ms / tms <= 1.5,
                device_calls_per_step=calls, launches=f'{calls} device calls per step ({calls_unfused} without the '
                                                      f'fused row kernels)')

def _tflops(M, ms): return f'{2 * M ** 3 / ms / 1e9:.1f} TFLOP/s ({ms:.2f} ms)'

def bench_matmul_low(dev, torch, reps, dtype, M=4096):
    "float16/bfloat16 matmul M³ with float32 accumulation: minima's default (tensor cores, WMMA) vs cuBLAS."
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal((M, M)).astype('float32') for _ in range(2))
    A, B = NDArray(a, device=dev).astype(dtype), NDArray(b, device=dev).astype(dtype)
    C = dev.alloc(M * M, dtype)
    ms = dev.time_ms(lambda: dev.matmul(A._handle, B._handle, C, 1, M, M, M), reps=reps)
    reg = dev.time_ms(lambda: dev.matmul(A._handle, B._handle, C, 1, M, M, M, algo='reg128'), warmup=1, reps=3)
    one = dev.time_ms(lambda: dev.matmul(A._handle, B._handle, C, 1, M, M, M, algo='wmma1'), warmup=1, reps=reps)
    dev.matmul(A._handle, B._handle, C, 1, M, M, M)
    tdt = getattr(torch, dtype)
    ta, tb = torch.from_numpy(a).cuda().to(tdt), torch.from_numpy(b).cuda().to(tdt)
    tc = torch.empty_like(ta)
    tms = torch_ms(torch, lambda: torch.matmul(ta, tb, out=tc), reps=reps)
    got = NDArray.make((M, M), device=dev, handle=C).astype('float32').numpy()
    err = float(np.abs(got - tc.float().cpu().numpy()).max() / np.abs(tc.float().cpu().numpy()).max())
    r = tms / ms
    return dict(name=f'matmul {dtype} {M}³ (float32 accumulation)', minima=_tflops(M, ms), torch=_tflops(M, tms),
                ratio=r, ratio_text=f'{r:.0%} of cuBLAS', target='≥ 50% of cuBLAS', ok=r >= 0.5,
                register_blocked=_tflops(M, reg), wmma_one_block_per_sm=_tflops(M, one), max_rel_diff=err)

def bench_matmul_int8(dev, torch, reps, M=4096):
    "int8 @ int8 -> int32 M³: minima's tensor-core (WMMA) and dp4a kernels vs torch._int_mm (when torch has it)."
    rng = np.random.default_rng(6)
    a, b = (rng.integers(-128, 128, (M, M)).astype('int8') for _ in range(2))
    A, B = NDArray(a, device=dev, dtype='int8'), NDArray(b, device=dev, dtype='int8')
    C = dev.alloc(M * M, 'int32')
    ms = dev.time_ms(lambda: dev.matmul_int8(A._handle, B._handle, C, M, M, M, algo='wmma'), reps=reps)
    dp = dev.time_ms(lambda: dev.matmul_int8(A._handle, B._handle, C, M, M, M, algo='dp4a'), warmup=1, reps=3)
    one = dev.time_ms(lambda: dev.matmul_int8(A._handle, B._handle, C, M, M, M, algo='wmma1'), warmup=1, reps=reps)
    row = dict(name=f'matmul int8 {M}³ -> int32 (tensor cores)', minima=_tflops(M, ms).replace('FLOP', 'OP'),
               dp4a=_tflops(M, dp).replace('FLOP', 'OP'), wmma_one_block_per_sm=_tflops(M, one).replace('FLOP', 'OP'),
               torch='(torch._int_mm missing)', ratio=float('nan'),
               ratio_text='', target='', ok=True)
    if hasattr(torch, '_int_mm'):
        ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
        tms = torch_ms(torch, lambda: torch._int_mm(ta, tb), reps=reps)
        dev.matmul_int8(A._handle, B._handle, C, M, M, M, algo='wmma')
        same = np.array_equal(NDArray.make((M, M), device=dev, handle=C).numpy(), torch._int_mm(ta, tb).cpu().numpy())
        row.update(torch=_tflops(M, tms).replace('FLOP', 'OP'), ratio=tms / ms, ratio_text=f'{tms / ms:.0%} of torch',
                   target='(report)', exact=bool(same))
    return row

def bench_rows(dev, torch, reps, R=4096, C=4096):
    """The row ops over (R, C) float32, each one fused kernel per pass (chapter 22): softmax, log-softmax, layer
    norm and cross-entropy, forward (and forward + backward for the last two) against torch's kernels."""
    import minima.nn.functional as F
    rng = np.random.default_rng(3)
    x, g = rng.standard_normal((R, C)).astype('float32'), rng.standard_normal((R, C)).astype('float32')
    y = rng.integers(0, C, R)
    X, G, Y = (minima.Tensor(v, device=dev, requires_grad=False) for v in (x, g, y))
    W, B = minima.Tensor(np.ones(C, 'float32'), device=dev), minima.Tensor(np.zeros(C, 'float32'), device=dev)
    tx, tg, ty = torch.from_numpy(x).cuda(), torch.from_numpy(g).cuda(), torch.from_numpy(y).cuda()
    tw, tb = torch.ones(C, device='cuda'), torch.zeros(C, device='cuda')
    tF = torch.nn.functional
    def fwd_bwd(f):
        Xg = minima.Tensor(x, device=dev, requires_grad=True)
        return lambda: f(Xg).backward(G if f is not cross else None)
    xent = minima.nn.CrossEntropyLoss()   # the plain case (2-D, mean, no weights): the fused op
    def cross(Xg): return xent(Xg, Y)
    def t_fwd_bwd(f, grad=True):
        txg = tx.clone().requires_grad_(True)
        return lambda: f(txg).backward(tg if grad else None)
    cases = [('softmax', lambda: F.softmax(X, dim=-1), lambda: torch.softmax(tx, -1), 0.5),
             ('log_softmax', lambda: F.log_softmax(X, dim=-1), lambda: torch.log_softmax(tx, -1), 0.5),
             ('layer_norm', lambda: F.layer_norm(X, (C,), W, B), lambda: tF.layer_norm(tx, (C,), tw, tb), 0.5),
             ('cross_entropy', lambda: xent(X, Y), lambda: tF.cross_entropy(tx, ty), 0.5)]
    rows = []
    with minima.no_grad():
        got = F.softmax(X, dim=-1).cached_data.numpy()
    err = float(np.abs(got - torch.softmax(tx, -1).cpu().numpy()).max())
    for name, f, tf, target in cases:
        with minima.no_grad(): ms = dev.time_ms(f, reps=reps)
        with torch.no_grad(): tms = torch_ms(torch, tf, reps=reps)
        r = tms / ms
        rows.append(dict(name=f'{name} over rows, ({R}, {C}) float32, forward', minima=f'{ms:.3f} ms',
                         torch=f'{tms:.3f} ms', ratio=r, ratio_text=f'{r:.0%} of torch speed',
                         target=f'≥ {target:.0%} of torch', ok=r >= target))
    rows[0]['max_abs_diff'] = err
    for name, f, tf in [('softmax', lambda t: F.softmax(t, dim=-1), lambda t: torch.softmax(t, -1)),
                        ('layer_norm', lambda t: F.layer_norm(t, (C,), W, B), lambda t: tF.layer_norm(t, (C,), tw, tb)),
                        ('cross_entropy', cross, lambda t: tF.cross_entropy(t, ty))]:
        ms = dev.time_ms(fwd_bwd(f), reps=reps)
        tms = torch_ms(torch, t_fwd_bwd(tf, grad=name != 'cross_entropy'), reps=reps)
        r = tms / ms
        rows.append(dict(name=f'{name} over rows, ({R}, {C}) float32, forward + backward', minima=f'{ms:.3f} ms',
                         torch=f'{tms:.3f} ms', ratio=r, ratio_text=f'{r:.0%} of torch speed', target='(report)',
                         ok=True))
    return rows

class _CountingLibrary:
    "The kernel library, with a count of the calls into it that launch work (every `mc_*` entry but events/sync)."
    QUIET = ('mc_last_error', 'mc_sync', 'mc_event_create', 'mc_event_record', 'mc_event_elapsed', 'mc_event_destroy',
             'mc_malloc', 'mc_free', 'mc_d2h', 'mc_probe', 'mc_device_info')
    def __init__(self, lib): self._lib, self.calls = lib, 0
    def __getattr__(self, name):
        f = getattr(self._lib, name)
        if not name.startswith('mc_') or name in self.QUIET: return f
        def counted(*a):
            self.calls += 1
            return f(*a)
        return counted

def count_calls(dev, fn):
    """How many calls into the kernel library (one kernel launch each, a few launch two) one call of `fn()` makes.
    The library is swapped, not the device's methods, so the ops still see a device with fused row kernels."""
    real = dev._lib
    dev._lib = counting = _CountingLibrary(real)
    try: fn()
    finally: dev._lib = real
    return counting.calls

class unfused:
    "Within the block, the CUDA device's ops take their composed form (no fused row kernels): the before picture."
    def __init__(self, dev): self.dev = dev
    def __enter__(self):
        self.prop = type(self.dev).__dict__['fused_rows']
        type(self.dev).fused_rows = property(lambda self: False)
    def __exit__(self, *exc): type(self.dev).fused_rows = self.prop

def bench_gpt(dev, torch, reps, steps=5):
    "One AdamW training step of bench/gpt.py's GPT (4 layers, 4 heads, d=128, T=128, batch 16) on the GPU."
    import gpt as g   # bench/gpt.py: the same model shapes and torch's twin
    from minima import nn, optim
    rng = np.random.default_rng(0)
    xb, yb = rng.integers(0, g.V, (g.B, g.T)), rng.integers(0, g.V, (g.B * g.T,))
    m = nn.GPT(g.V, g.BLOCK, g.L, g.H, g.C, device=dev)
    x, y = minima.Tensor(xb, device=dev, requires_grad=False), minima.Tensor(yb, device=dev, requires_grad=False)
    opt, lossf = optim.AdamW(m.parameters(), lr=1e-3), nn.CrossEntropyLoss()
    def step():
        opt.zero_grad(); loss = lossf(m(x).reshape((g.B * g.T, g.V)), y); loss.backward(); opt.step()
    ms = dev.time_ms(lambda: [step() for _ in range(steps)], warmup=1, reps=reps) / steps
    t = g.torch_gpt(torch).cuda()
    tx, ty = torch.tensor(xb).cuda(), torch.tensor(yb).cuda()
    topt = torch.optim.AdamW(t.parameters(), lr=1e-3)
    def tstep():
        topt.zero_grad(); loss = torch.nn.functional.cross_entropy(t(tx).view(g.B * g.T, g.V), ty); loss.backward()
        topt.step()
    tms = torch_ms(torch, lambda: [tstep() for _ in range(steps)], warmup=1, reps=reps) / steps
    calls = count_calls(dev, step)
    with unfused(dev):
        calls_unfused = count_calls(dev, step)
        ms_unfused = dev.time_ms(lambda: [step() for _ in range(steps)], warmup=1, reps=reps) / steps
    return dict(name=f'GPT training step ({g.L} layers, d={g.C}, T={g.T}, batch {g.B}, AdamW)', minima=f'{ms:.2f} ms',
                torch=f'{tms:.2f} ms', ratio=ms / tms, ratio_text=f'{ms / tms:.2f}x torch time',
                target='≤ 3x torch time', ok=ms / tms <= 3, device_calls_per_step=calls,
                unfused=dict(ms=ms_unfused, device_calls_per_step=calls_unfused, ratio=ms_unfused / tms),
                launches=f'{calls} device calls per step with the fused row kernels, {calls_unfused} without '
                         f'({ms_unfused:.2f} ms, {ms_unfused / tms:.2f}x torch)')

def _compiled_row(dev, torch, reps, name, step, args, tstep, target, steps=5, profile=False):
    """Issue 39 item 1: `step(*args)` compiled and replayed on the GPU (one call per step) against torch eager's
    `tstep()`, with the calls per step: minima's device primitives eager, the replay's calls, and the fused kernels."""
    f = minima.compile(step)
    for _ in range(3): f(*args)   # one eager call, two captures: the next ones replay
    p = f.program
    if p is None: raise RuntimeError('the step was not compiled (no program after three calls)')
    seen = []
    prims = sys.modules['minima.compile']._recorded(dev)   # (the module: `minima.compile` is the function)
    for n in prims: setattr(dev, n, (lambda real, n: lambda *a: (seen.append(n), real(*a))[1])(getattr(dev, n), n))
    try: step(*args)
    finally:
        for n in prims: dev.__dict__.pop(n, None)
    ms = dev.time_ms(lambda: [f(*args) for _ in range(steps)], warmup=1, reps=reps) / steps
    tms = torch_ms(torch, lambda: [tstep() for _ in range(steps)], warmup=1, reps=reps) / steps
    r = ms / tms
    row = dict(name=name, minima=f'{ms:.3f} ms', torch=f'{tms:.3f} ms', ratio=r,
               ratio_text=f'{r:.2f}x torch time', target=f'≤ {target}x torch time', ok=r <= target,
               eager_primitives=len(seen), replay_calls=len(p.instrs), fused_kernels=p.stats['kernels'],
               launches=f'{len(seen)} primitives eager, {len(p.instrs)} calls per replay '
                        f'({p.stats["kernels"]} fused kernels), one call from Python')
    if profile:   # kernel launches per step as CUPTI counts them, the replay's and torch's
        row['profile'] = profile_kernels(dev, torch, f'{name}, replayed', lambda: f(*args), steps=2, top=8)
        row['torch_profile'] = profile_kernels(dev, torch, f'{name}, torch eager', tstep, steps=2, top=8)
    return row

def bench_mlp_compiled(dev, torch, reps, batch=1024, profile=False):
    "MLP step, compiled: bench_mlp's SGD step (64-100-10, batch 1024) replayed on the GPU vs torch eager."
    import minima.nn as nn, minima.optim as optim
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((batch, 64)).astype('float32'), rng.integers(0, 10, batch)
    X, Y = minima.Tensor(x, device=dev, requires_grad=False), minima.Tensor(y, device=dev, requires_grad=False)
    model = nn.Sequential(nn.Linear(64, 100, device=dev), nn.ReLU(), nn.Linear(100, 10, device=dev))
    opt, loss_fn = optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss()
    def step(x, y):
        opt.zero_grad(); loss = loss_fn(model(x), y); loss.backward(); opt.step()
        return loss
    tm = torch.nn.Sequential(torch.nn.Linear(64, 100), torch.nn.ReLU(), torch.nn.Linear(100, 10)).cuda()
    topt, tloss = torch.optim.SGD(tm.parameters(), lr=0.1), torch.nn.CrossEntropyLoss()
    tx, ty = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
    def tstep():
        topt.zero_grad(); loss = tloss(tm(tx), ty); loss.backward(); topt.step()
    return _compiled_row(dev, torch, reps, f'MLP step, compiled, batch {batch} (64-100-10)', step, (X, Y), tstep,
                         1.5, steps=20, profile=profile)

def bench_gpt_compiled(dev, torch, reps, profile=False):
    "GPT training step, compiled: bench_gpt's AdamW step (capturable: the step count on the device) replayed."
    import gpt as g
    from minima import nn, optim
    rng = np.random.default_rng(0)
    xb, yb = rng.integers(0, g.V, (g.B, g.T)), rng.integers(0, g.V, (g.B * g.T,))
    m = nn.GPT(g.V, g.BLOCK, g.L, g.H, g.C, device=dev)
    x, y = minima.Tensor(xb, device=dev, requires_grad=False), minima.Tensor(yb, device=dev, requires_grad=False)
    opt, lossf = optim.AdamW(m.parameters(), lr=1e-3, capturable=True), nn.CrossEntropyLoss()
    def step(x, y):
        opt.zero_grad(); loss = lossf(m(x).reshape((g.B * g.T, g.V)), y); loss.backward(); opt.step()
        return loss
    t = g.torch_gpt(torch).cuda()
    tx, ty = torch.tensor(xb).cuda(), torch.tensor(yb).cuda()
    topt = torch.optim.AdamW(t.parameters(), lr=1e-3)
    def tstep():
        topt.zero_grad(); loss = torch.nn.functional.cross_entropy(t(tx).view(g.B * g.T, g.V), ty); loss.backward()
        topt.step()
    return _compiled_row(dev, torch, reps, f'GPT training step, compiled ({g.L} layers, d={g.C}, T={g.T}, '
                         f'batch {g.B}, AdamW)', step, (x, y), tstep, 1.2, profile=profile)

def compiled_rows(dev, torch, reps, profile=False):
    "The compiled rows; one that fails prints its error and the others go on."
    rows = []
    for fn in (bench_mlp_compiled, bench_gpt_compiled):
        try: rows.append(fn(dev, torch, reps, profile=profile))
        except Exception as e:
            import traceback; traceback.print_exc()
            name = fn.__doc__.split(':')[0]
            print(f'bench/cuda.py: {name} failed: {type(e).__name__}: {e}', flush=True)
            rows.append(dict(name=name, minima='failed', torch='', ratio=float('nan'), ok=False,
                             ratio_text=f'{type(e).__name__}', target='', error=f'{type(e).__name__}: {e}'))
    return rows

def bench_ladder(dev, torch, M=4096):
    "GFLOP/s of each matmul kernel of the chapter's ladder at M³, and cuBLAS (TF32 off)."
    rng = np.random.default_rng(0)
    A = NDArray(rng.standard_normal((M, M), dtype='float32'), device=dev)
    B = NDArray(rng.standard_normal((M, M), dtype='float32'), device=dev)
    C, flop, out = dev.alloc(M * M, 'float32'), 2 * M ** 3, []
    for algo, reps in [('naive_uncoalesced', 2), ('naive', 3), ('smem', 5), ('reg64', 10), ('reg128', 10)]:
        ms = dev.time_ms(lambda: dev.matmul(A._handle, B._handle, C, 1, M, M, M, algo=algo), warmup=1, reps=reps)
        out.append(dict(kernel=algo, ms=ms, gflops=flop / ms / 1e6))
    ta, tb = torch.from_numpy(A.numpy()).cuda(), torch.from_numpy(B.numpy()).cuda()
    ms = torch_ms(torch, lambda: torch.matmul(ta, tb))
    out.append(dict(kernel='cuBLAS', ms=ms, gflops=flop / ms / 1e6))
    for r in out: r['pct_cublas'] = 100 * r['gflops'] / out[-1]['gflops']
    return out

def profile_kernels(dev, torch, what, fn, steps=3, top=12):
    "CUPTI's view (through torch.profiler) of the CUDA kernels that `fn` launches: where device time goes."
    from torch.profiler import profile, ProfilerActivity
    fn(); dev.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps): fn()
        dev.synchronize()
    ev = [e for e in prof.key_averages() if e.device_type.name == 'CUDA' or getattr(e, 'self_device_time_total', 0) > 0]
    kern = sorted(ev, key=lambda e: -getattr(e, 'self_device_time_total', 0))
    total = sum(getattr(e, 'self_device_time_total', 0) for e in kern) / steps / 1000
    launches = sum(e.count for e in kern) / steps
    wall = dev.time_ms(fn, warmup=1, reps=5)
    print(f"\nprofile of {what}: {launches:.0f} kernel launches per call, {total:.3f} ms of kernel time, "
          f"{wall:.3f} ms between events ({100 * total / wall:.0f}% of it busy)")
    print('| kernel | calls per step | device ms per step |\n|---|---|---|')
    for e in kern[:top]:
        print(f"| {e.key[:70]} | {e.count / steps:.0f} | {getattr(e, 'self_device_time_total', 0) / steps / 1000:.3f} |")
    return dict(what=what, launches=launches, kernel_ms=total, event_ms=wall)

def failed_row(name, e):
    "A row for a benchmark that raised: its error printed, the run goes on."
    import traceback; traceback.print_exc()
    print(f'bench/cuda.py: {name} failed: {type(e).__name__}: {e}', flush=True)
    return dict(name=name, minima='failed', torch='', ratio=None, ok=False, ratio_text=type(e).__name__, target='',
                error=f'{type(e).__name__}: {e}')

def safe(fn, *args):
    "`fn(*args)` as a list of rows; a failure becomes one row that says so."
    try:
        r = fn(*args)
        return r if isinstance(r, list) else [r]
    except Exception as e: return [failed_row(fn.__doc__.split(':')[0].split('.')[0].strip(), e)]

def gpu_model(name: str) -> str:
    "A short, file-name-safe GPU model: 'NVIDIA H200' -> 'h200', 'NVIDIA A100-SXM4-80GB' -> 'a100-sxm4-80gb'."
    words = [w for w in name.replace('NVIDIA', '').replace('GeForce', '').split() if w]
    return ''.join(c for c in (words[0] if words else 'gpu').lower() if c.isalnum() or c == '-') or 'gpu'

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--json', help='also write the results to this file')
    ap.add_argument('--reps', type=int, default=10)
    ap.add_argument('--profile', action='store_true', help='also profile the softmax and the GPT step (torch.profiler)')
    ap.add_argument('--plot', help='draw the matmul ladder into this PNG')
    ap.add_argument('--only', help='comma-separated row groups to run (matmul,bandwidth,lowp,int8,rows,mlp,gpt,'
                                   'compiled,ladder); default all')
    args = ap.parse_args(argv)
    dev = minima.cuda()
    if not dev.enabled():
        print(f'bench/cuda.py: CUDA device not available, nothing to measure: {dev.why_disabled()}')
        return 0
    import torch
    from _common import machine, write_results
    start = machine()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    info = dev.device_info()
    print(f"GPU: {info['name']} (compute capability {info['compute_capability']}, {info['sms']} SMs), torch {torch.__version__}\n")
    want = set(args.only.split(',')) if args.only else None
    on = lambda k: want is None or k in want
    rows = []
    if on('matmul'): rows += safe(bench_matmul, dev, torch, args.reps)
    if on('bandwidth'): rows += safe(bench_bandwidth, dev, torch, args.reps)
    if on('lowp'):
        for dt in ('float16', 'bfloat16'): rows += safe(bench_matmul_low, dev, torch, args.reps, dt)
    if on('int8'): rows += safe(bench_matmul_int8, dev, torch, args.reps)
    if on('rows'): rows += safe(bench_rows, dev, torch, args.reps)
    if on('mlp'): rows += safe(bench_mlp, dev, torch, args.reps)
    if on('gpt'): rows += safe(bench_gpt, dev, torch, args.reps)
    if on("compiled"): rows += compiled_rows(dev, torch, args.reps, profile=args.profile)
    ladder = []
    if on('ladder'):
        try: ladder = bench_ladder(dev, torch)
        except Exception as e: failed_row('matmul ladder', e)
    print('| benchmark | minima | torch CUDA | ratio | target | met |\n|---|---|---|---|---|---|')
    for r in rows:
        print(f"| {r['name']} | {r['minima']} | {r['torch']} | {r['ratio_text']} | {r['target']} | "
              f"{'' if not r['target'] or r['target'] == '(report)' else ('yes' if r['ok'] else 'no')} |")
    for r in rows:
        for k in ('launches', 'register_blocked', 'wmma_one_block_per_sm', 'dp4a', 'error'):
            if k in r: print(f"{r['name']}: {k.replace('_', ' ')}: {r[k]}")
    if ladder:
        print('\n| matmul kernel (4096³ float32) | ms | GFLOP/s | % of cuBLAS |\n|---|---|---|---|')
        for r in ladder: print(f"| {r['kernel']} | {r['ms']:.2f} | {r['gflops']:,.0f} | {r['pct_cublas']:.1f}% |")
    if args.plot and ladder:
        import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 2.6))
        names, gf = [r['kernel'] for r in ladder][::-1], [r['gflops'] / 1000 for r in ladder][::-1]
        ax.barh(names, gf, color=['#888' if n == 'cuBLAS' else '#3a7' for n in names])
        for i, (v, r) in enumerate(zip(gf, ladder[::-1])): ax.text(v, i, f" {v:.1f} ({r['pct_cublas']:.0f}%)", va='center')
        ax.set_xlabel('TFLOP/s, float32 4096³ (TF32 off)'); ax.set_xlim(0, max(gf) * 1.3)
        ax.set_title(f"matmul ladder on {info['name']}"); fig.tight_layout(); fig.savefig(args.plot, dpi=120)
    profiles = []
    if args.profile:
        try: profiles = run_profiles(dev, torch)
        except Exception as e: failed_row('profile', e)
    meta = dict(device=info, load_1m_at_start=start['load_1m'], ladder=ladder, profiles=profiles)
    if args.json:
        with open(args.json, 'w') as f: json.dump(dict(torch=torch.__version__, rows=rows, **meta), f, indent=1)
    write_results(f"cuda_{gpu_model(info['name'])}", rows, **meta)
    dev.synchronize(); torch.cuda.synchronize()
    return 0

def run_profiles(dev, torch):
    "torch.profiler's kernel tables of the softmax and of the eager GPT step."
    import minima.nn.functional as F
    X = minima.Tensor(np.random.default_rng(3).standard_normal((4096, 4096)).astype('float32'), device=dev,
                      requires_grad=False)
    out = []
    with minima.no_grad(): out.append(profile_kernels(dev, torch, 'minima softmax (4096, 4096)', lambda: F.softmax(X, dim=-1)))
    Y = minima.Tensor(np.random.default_rng(4).integers(0, 4096, 4096), device=dev, requires_grad=False)
    xent = minima.nn.CrossEntropyLoss()
    with minima.no_grad(): out.append(profile_kernels(dev, torch, 'minima CrossEntropyLoss (4096, 4096)', lambda: xent(X, Y)))
    Xg = minima.Tensor(X.cached_data, device=dev, requires_grad=True)
    out.append(profile_kernels(dev, torch, 'minima CrossEntropyLoss (4096, 4096) fwd+bwd', lambda: xent(Xg, Y).backward()))
    import gpt as g
    from minima import nn, optim
    rng = np.random.default_rng(0)
    m = nn.GPT(g.V, g.BLOCK, g.L, g.H, g.C, device=dev)
    x = minima.Tensor(rng.integers(0, g.V, (g.B, g.T)), device=dev, requires_grad=False)
    y = minima.Tensor(rng.integers(0, g.V, (g.B * g.T,)), device=dev, requires_grad=False)
    opt, lossf = optim.AdamW(m.parameters(), lr=1e-3), nn.CrossEntropyLoss()
    def step():
        opt.zero_grad(); loss = lossf(m(x).reshape((g.B * g.T, g.V)), y); loss.backward(); opt.step()
    out.append(profile_kernels(dev, torch, 'minima GPT training step', step, steps=2, top=15))
    return out

if __name__ == '__main__': sys.exit(main())
