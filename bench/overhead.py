"""Python overhead per op on tiny tensors: minima vs torch eager, measured in the same run.

    python bench/overhead.py

Prints microseconds per call (median of several repeats) and the ratio minima / torch, and writes them with the machine
(CPU, load, date, commit) to bench/results/overhead_DATE.json. Not a test: nothing here gates CI.
"""
import time, statistics
import numpy as np
import minima as mi
import torch
from _common import machine, write_results

torch.set_num_threads(1)

def per_call(fn, n=2000, repeats=7):
    fn()
    ts = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n): fn()
        ts.append((time.perf_counter() - t0) / n)
    return statistics.median(ts) * 1e6

def main():
    start = machine()
    x_np, y_np = np.random.rand(4, 4).astype('float32'), np.random.rand(4, 4).astype('float32')
    mx, my = mi.Tensor(x_np), mi.Tensor(y_np)
    tx, ty = torch.tensor(x_np, requires_grad=True), torch.tensor(y_np, requires_grad=True)
    mg, tg = mi.Tensor(np.ones((4, 4), 'float32'), requires_grad=False), torch.ones(4, 4)
    rows = []
    def fwd_m(): return mx + my
    def fwd_t(): return tx + ty
    rows.append(('add forward (4x4)', per_call(fwd_m), per_call(fwd_t)))
    def nograd_m():
        with mi.no_grad(): return mx + my
    def nograd_t():
        with torch.no_grad(): return tx + ty
    rows.append(('add forward, no_grad', per_call(nograd_m), per_call(nograd_t)))
    def fb_m():
        mx.grad = my.grad = None
        (mx + my).backward(mg)
    def fb_t():
        tx.grad = ty.grad = None
        (tx + ty).backward(tg)
    rows.append(('add forward + backward', per_call(fb_m, 1000), per_call(fb_t, 1000)))
    def mm_m(): return mx @ my
    def mm_t(): return tx @ ty
    rows.append(('matmul forward (4x4)', per_call(mm_m), per_call(mm_t)))
    print(f"minima {mi.__version__} vs torch {torch.__version__}, numpy {np.__version__}, 1 thread, times in microseconds per call")
    print(f"| {'op':28s} | {'minima us':>10s} | {'torch us':>10s} | {'ratio':>6s} |")
    print(f"|{'-'*30}|{'-'*12}|{'-'*12}|{'-'*8}|")
    for name, m, t in rows: print(f"| {name:28s} | {m:10.2f} | {t:10.2f} | {m / t:6.2f} |")
    write_results('overhead', [dict(op=n, minima_us=round(m, 3), torch_us=round(t, 3), ratio=round(m / t, 3))
                               for n, m, t in rows], load_1m_at_start=start['load_1m'], threads=1)

if __name__ == '__main__': main()
