"""Helpers shared by the benchmark scripts (run them as `python bench/NAME.py`, which puts this folder on sys.path)."""
import os, time

def blas_threads() -> int:
    "Threads numpy's BLAS uses (threadpoolctl when available, else the OpenBLAS/OMP environment, else all cores)."
    try:
        from threadpoolctl import threadpool_info
        n = [i['num_threads'] for i in threadpool_info() if i.get('user_api') == 'blas']
        if n: return n[0]
    except ImportError: pass
    for var in ('OPENBLAS_NUM_THREADS', 'OMP_NUM_THREADS', 'MKL_NUM_THREADS'):
        if os.environ.get(var, '').isdigit(): return int(os.environ[var])
    return os.cpu_count() or 1

def timeit_pair(a, b, repeat, steps, clock=time.perf_counter, stat=min, warmup=2):
    """Seconds per step of `a` and `b`: `stat` (best-of by default, or e.g. `statistics.median`) over `repeat`
    interleaved rounds of `steps` calls, so that background load hits both alike."""
    for _ in range(warmup): a(); b()
    ta, tb = [], []
    for _ in range(repeat):
        t0 = clock()
        for _ in range(steps): a()
        ta.append((clock() - t0) / steps)
        t0 = clock()
        for _ in range(steps): b()
        tb.append((clock() - t0) / steps)
    return stat(ta), stat(tb)

def profile(step, warmup=2, calls=5, rows=25):
    "Print where `step` spends its time: cProfile over `calls` calls after `warmup`, sorted by own time."
    import cProfile, pstats
    for _ in range(warmup): step()
    pr = cProfile.Profile(); pr.enable()
    for _ in range(calls): step()
    pr.disable()
    pstats.Stats(pr).sort_stats('tottime').print_stats(rows)
