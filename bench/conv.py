"""conv2d forward+backward against torch CPU, same process, same thread count.

    python bench/conv.py [--repeat 5]

Prints a table with the best time per call (minima and torch interleaved) and the ratio minima / torch (target: within 3x)."""
import argparse, time
import numpy as np

from _common import blas_threads, machine, write_results

def timeit_pair(a, b, repeat):
    "Best-of-`repeat` seconds for `a` and `b`, interleaved so that background load hits both alike."
    a(); b()  # warm-up
    ta, tb = [], []
    for _ in range(repeat):
        t = time.perf_counter(); a(); ta.append(time.perf_counter() - t)
        t = time.perf_counter(); b(); tb.append(time.perf_counter() - t)
    return min(ta), min(tb)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--repeat', type=int, default=7)
    ap.add_argument('--N', type=int, default=32)
    ap.add_argument('--C', type=int, default=64)
    ap.add_argument('--HW', type=int, default=32)
    args = ap.parse_args()
    import torch
    import minima as mi
    from minima.nn.functional import conv2d
    nt = blas_threads()
    torch.set_num_threads(nt)
    N, C, HW = args.N, args.C, args.HW
    rng = np.random.default_rng(0)
    xn = rng.standard_normal((N, C, HW, HW)).astype('float32')
    wn = (rng.standard_normal((C, C, 3, 3)) / np.sqrt(C * 9)).astype('float32')
    gn = rng.standard_normal((N, C, HW, HW)).astype('float32')

    x, w, g = mi.Tensor(xn), mi.Tensor(wn), mi.Tensor(gn, requires_grad=False)
    def mi_fwd():
        with mi.no_grad(): conv2d(x, w, padding=1)
    def mi_fb():
        x.grad = w.grad = None
        conv2d(x, w, padding=1).backward(g)

    tx, tw, tg = torch.tensor(xn, requires_grad=True), torch.tensor(wn, requires_grad=True), torch.tensor(gn)
    def t_fwd():
        with torch.no_grad(): torch.nn.functional.conv2d(tx, tw, padding=1)
    def t_fb():
        tx.grad = tw.grad = None
        torch.nn.functional.conv2d(tx, tw, padding=1).backward(tg)

    # sanity: same numbers
    mi_fb(); t_fb()
    assert np.allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-3, atol=1e-3)
    assert np.allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-3, atol=1e-2)

    print(f"conv2d N={N}, C={C}->{C}, {HW}x{HW}, 3x3, padding=1, float32; {nt} thread(s) for numpy BLAS and torch "
          f"(torch {torch.__version__}), best of {args.repeat}, interleaved")
    print(f"| {'what':<22} | {'minima (ms)':>11} | {'torch (ms)':>10} | {'ratio':>6} |")
    print(f"|{'-' * 24}|{'-' * 13}|{'-' * 12}|{'-' * 8}|")
    start, rows = machine(), []
    for name, a, b in [('forward', mi_fwd, t_fwd), ('forward + backward', mi_fb, t_fb)]:
        ta, tb = timeit_pair(a, b, args.repeat)
        print(f"| {name:<22} | {ta * 1e3:11.1f} | {tb * 1e3:10.1f} | {ta / tb:5.2f}x |")
        rows.append(dict(what=name, minima_ms=ta * 1e3, torch_ms=tb * 1e3, ratio=ta / tb))
    write_results('conv', rows, load_1m_at_start=start['load_1m'],
                  settings=dict(N=N, C=C, HW=HW, repeat=args.repeat, clock='wall', stat='best of interleaved'))

if __name__ == '__main__': main()
