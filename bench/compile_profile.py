"""Where a compiled step's replay spends its time: each lowered call of the program timed on its own, summed over
`--steps` replays and grouped by primitive (a fused kernel by its shape) and by the library line that made it.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python bench/compile_profile.py cnn [--steps 50] [--top 15]

The per-call timer adds ~0.1 us per call; shares, not absolute times, are the point. Never gates CI.
"""
import argparse, os, sys, time
from collections import defaultdict
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compile as B

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('name')
    ap.add_argument('--steps', type=int, default=50)
    ap.add_argument('--top', type=int, default=15)
    args = ap.parse_args()
    import torch, minima as mi
    _, step, _, _, (x, y), _ = B.make_steps(args.name, torch, capturable=True)
    f = mi.compile(step)
    for _ in range(5): f(x, y)
    P = f.program
    tot = [0.0] * len(P.calls)
    clock = time.perf_counter
    for _ in range(args.steps):
        for i, c in enumerate(P.calls):
            s = clock(); c(); tot[i] += clock() - s
    by_kind, by_origin = defaultdict(lambda: [0.0, 0]), defaultdict(lambda: [0.0, 0])
    for t, ins in zip(tot, P.instrs):
        k = ins.prim
        if k == 'fused': k = f"fused{tuple(ins.args[1])}"
        elif k in ('compact', 'matmul', 'matmul_strided', 'ewise_strided'):
            k = f"{k} {ins.args[2] if k == 'compact' else ins.args[3:] if k == 'matmul' else ''}"
        for d, key in ((by_kind, k), (by_origin, ins.origin)):
            d[key][0] += t; d[key][1] += 1
    all_ = sum(tot)
    print(f"{args.name}: {len(P.calls)} calls, {all_ / args.steps * 1e3:.3f} ms per replay (timed call by call); "
          f"stats {P.stats}")
    for title, d in (('by primitive', by_kind), ('by origin', by_origin)):
        print(f"\n{title}:")
        for k, (t, n) in sorted(d.items(), key=lambda kv: -kv[1][0])[:args.top]:
            print(f"  {t / all_ * 100:5.1f}%  {t / args.steps * 1e3:7.3f} ms  {n:4d} calls  {k}")

if __name__ == '__main__': main()
