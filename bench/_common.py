"""Helpers shared by the benchmark scripts (run them as `python bench/NAME.py`, which puts this folder on sys.path)."""
import os

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
