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

def timeit_interleaved(fns, repeat, steps, clock=time.perf_counter, stat=min, warmup=2):
    """Seconds per call of each function in the dict `fns`: `stat` (best-of by default, or e.g. `statistics.median`)
    over `repeat` interleaved rounds of `steps` calls each, after `warmup` calls of each, so that background load
    hits every function alike. Returns a dict with the keys of `fns`."""
    for _ in range(warmup):
        for f in fns.values(): f()
    ts = {k: [] for k in fns}
    for _ in range(repeat):
        for k, f in fns.items():
            t0 = clock()
            for _ in range(steps): f()
            ts[k].append((clock() - t0) / steps)
    return {k: stat(v) for k, v in ts.items()}

def timeit_pair(a, b, repeat, steps, clock=time.perf_counter, stat=min, warmup=2):
    "Seconds per step of `a` and `b` (`timeit_interleaved` of the two)."
    t = timeit_interleaved({'a': a, 'b': b}, repeat, steps, clock, stat, warmup)
    return t['a'], t['b']

def profile(step, warmup=2, calls=5, rows=25):
    "Print where `step` spends its time: cProfile over `calls` calls after `warmup`, sorted by own time."
    import cProfile, pstats
    for _ in range(warmup): step()
    pr = cProfile.Profile(); pr.enable()
    for _ in range(calls): step()
    pr.disable()
    pstats.Stats(pr).sort_stats('tottime').print_stats(rows)

# ---------------------------------------------------------------------------------------------- results files
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'results')

def _cpu_model():
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'): return line.split(':', 1)[1].strip()
    except OSError: pass
    import platform
    return platform.processor() or platform.machine()

def _commit():
    import subprocess
    try:
        r = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True,
                           cwd=os.path.dirname(RESULTS), timeout=10)
        dirty = subprocess.run(['git', 'status', '--porcelain', '--untracked-files=no'], capture_output=True,
                               text=True, cwd=os.path.dirname(RESULTS), timeout=10).stdout.strip()
        return r.stdout.strip() + ('+changes' if dirty else '') if r.returncode == 0 else 'unknown'
    except (OSError, subprocess.SubprocessError): return 'unknown'

def machine():
    "Where and when a measurement ran: host, CPU model, cores, load average, date (UTC), commit, versions, threads."
    import datetime, platform
    info = dict(host=platform.node(), cpu=_cpu_model(), cores=os.cpu_count(),
                load_1m=round(os.getloadavg()[0], 2) if hasattr(os, 'getloadavg') else None,
                date=datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC'), commit=_commit(),
                python=platform.python_version(), blas_threads=blas_threads())
    for mod in ('numpy', 'torch'):
        try: info[mod] = __import__(mod).__version__
        except ImportError: pass
    return info

def write_results(name, rows, **meta):
    """Write `rows` (a list of dicts) to `bench/results/NAME_DATE.json` with `machine()` taken now (its load average
    beside the one `meta` may carry from the start of the run); returns the path. The README's speed table is
    generated from the newest of these files (`tools/speed_table`)."""
    import json
    m = machine()
    path = os.path.join(RESULTS, f"{name}_{m['date'][:10]}.json")
    os.makedirs(RESULTS, exist_ok=True)
    tmp = path + '.tmp'
    with open(tmp, 'w') as f: json.dump(dict(bench=name, machine=m, **meta, rows=rows), f, indent=1)
    os.replace(tmp, path)
    print(f'\nwrote {os.path.relpath(path)}')
    return path
