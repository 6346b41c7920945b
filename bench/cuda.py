"""Benchmarks of minima's CUDA kernels against torch CUDA, measured in the same process.

Device-side timing with CUDA events, warm-up runs first, the median of several runs. TF32 is off for both matmuls.
Prints a markdown table; never gates CI (it exits 0 with a message when there is no GPU).

    python bench/cuda.py [--json results.json] [--reps 10]
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
    opt, loss_fn = optim.SGD(model.parameters(), lr=0.1), nn.SoftmaxLoss()
    def step():
        opt.reset_grad(); loss = loss_fn(model(X), Y); loss.backward(); opt.step()
    ms = dev.time_ms(lambda: [step() for _ in range(steps)], warmup=1, reps=reps) / steps
    tm = torch.nn.Sequential(torch.nn.Linear(64, 100), torch.nn.ReLU(), torch.nn.Linear(100, 10)).cuda()
    topt, tloss = torch.optim.SGD(tm.parameters(), lr=0.1), torch.nn.CrossEntropyLoss()
    tx, ty = torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda()
    def tstep():
        topt.zero_grad(); loss = tloss(tm(tx), ty); loss.backward(); topt.step()
    tms = torch_ms(torch, lambda: [tstep() for _ in range(steps)], warmup=1, reps=reps) / steps
    return dict(name=f'MLP training step, batch {batch} (64-100-10)', minima=f'{ms:.3f} ms', torch=f'{tms:.3f} ms',
                ratio=ms / tms, ratio_text=f'{ms / tms:.2f}x torch time', target='≤ 2x torch time', ok=ms / tms <= 2)

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--json', help='also write the results to this file')
    ap.add_argument('--reps', type=int, default=10)
    args = ap.parse_args(argv)
    dev = minima.cuda()
    if not dev.enabled():
        print(f'bench/cuda.py: CUDA device not available, nothing to measure: {dev.why_disabled()}')
        return 0
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    info = dev.device_info()
    print(f"GPU: {info['name']} (compute capability {info['compute_capability']}, {info['sms']} SMs), torch {torch.__version__}\n")
    rows = [bench_matmul(dev, torch, args.reps)] + bench_bandwidth(dev, torch, args.reps) + [bench_mlp(dev, torch, args.reps)]
    print('| benchmark | minima | torch CUDA | ratio | target | met |\n|---|---|---|---|---|---|')
    for r in rows:
        print(f"| {r['name']} | {r['minima']} | {r['torch']} | {r['ratio_text']} | {r['target']} | "
              f"{'' if not r['target'] else ('yes' if r['ok'] else 'no')} |")
    if args.json:
        with open(args.json, 'w') as f: json.dump(dict(device=info, torch=torch.__version__, rows=rows), f, indent=1)
    return 0

if __name__ == '__main__': sys.exit(main())
