"""All-reduce bandwidth and data-parallel step time on MPI ranks, minima against torch.distributed (gloo) in the same
processes. Never gates CI.

    python bench/allreduce.py [--repeat 5] [--max-mb 64]

The script launches itself with the mpiexec next to this Python (the mpich wheel's):
  1. `mpiexec -n 2`: all-reduce of float32 messages from 1 KB to 64 MB, best of `--repeat` timed calls (more for small
     messages), for minima's hand-written ring (`ring_all_reduce`, MPI Sendrecv), minima's `all_reduce`
     (MPI Iallreduce, waited with a deadline) and torch.distributed's gloo `all_reduce`; prints time and algorithm
     bandwidth N/T.
  2. `mpiexec -n 1` and `-n 2`: one training step of the digits CNN (bench/train.py's, global batch 64, SGD momentum)
     with minima's DistributedDataParallel and torch's DistributedDataParallel (gloo), same weights and data; best of
     `--repeat` rounds of 10 steps.
Both parts also time minima with its agreement check off (every collective first exchanges a 16-integer fingerprint
of itself, `MINIMA_CHECK_COLLECTIVES`), interleaved with the checked runs, to give the check's cost. The tables and the
machine (CPU, load average, date, commit) go to bench/results/allreduce_<date>.json (`_common.write_results`).
Each rank uses one BLAS thread (2 ranks on this 2-core machine).
"""
import argparse, json, os, socket, subprocess, sys, time
from pathlib import Path
import numpy as np

HERE = Path(__file__).resolve()


def mpiexec():
    exe = Path(sys.executable).with_name('mpiexec')
    return str(exe) if exe.exists() else 'mpiexec'


def worker_init():
    import minima.distributed as dist
    import torch, torch.distributed as tdist
    torch.set_num_threads(1)
    dist.init_process_group('mpi', timeout=600)
    r, p = dist.get_rank(), dist.get_world_size()
    port = dist.broadcast_object(_free_port() if r == 0 else None)
    tdist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=r, world_size=p)
    return dist, torch, tdist, r, p


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def best(f, reps, dist):
    t = []
    for _ in range(reps):
        dist.barrier()
        t0 = time.perf_counter(); f(); t.append(time.perf_counter() - t0)
    return min(t)


def unchecked(f, dist):
    "`f()` with minima's agreement check off on every rank (all ranks switch together, between collectives)."
    g = dist._WORLD[0]
    dist.barrier(); was, g.check = g.check, False
    try: return f()
    finally: dist.barrier(); g.check = was


def comm(args):
    dist, torch, tdist, r, p = worker_init()
    sizes = [2 ** k for k in range(10, 27, 2) if 2 ** k <= args.max_mb * 2 ** 20]
    for n in sizes:
        x = np.ones(n // 4, 'float32')
        tx = torch.ones(n // 4)
        reps = max(args.repeat, min(200, 2 ** 22 // n))
        checked, plain = [], []
        for _ in range(reps):   # checked and unchecked calls alternate, so background load hits both alike
            checked.append(best(lambda: dist.all_reduce_array(x), 1, dist))
            plain.append(unchecked(lambda: best(lambda: dist.all_reduce_array(x), 1, dist), dist))
        row = dict(bytes=n,
                   ring=best(lambda: dist.ring_all_reduce(x), reps, dist),
                   mpi=min(checked), mpi_unchecked=min(plain),
                   paired_ratio_median=float(np.median(np.array(checked) / np.array(plain))),
                   torch=best(lambda: tdist.all_reduce(tx), reps, dist))
        if r == 0: print(json.dumps(row), flush=True)
    tdist.destroy_process_group()


def cnn(args):
    dist, torch, tdist, r, p = worker_init()
    sys.path.insert(0, str(HERE.parent))
    import minima as mi
    from minima import nn, optim, init
    from minima.nn.parallel import DistributedDataParallel
    from train import build
    init.manual_seed(0)
    m, t, shape, bs = build('cnn', mi, nn, torch)
    bs //= p
    m, t = DistributedDataParallel(m), torch.nn.parallel.DistributedDataParallel(t)
    rng = np.random.default_rng(r)
    xn = rng.standard_normal((bs,) + shape).astype('float32'); yn = rng.integers(0, 10, bs)
    x, y, tx, ty = mi.Tensor(xn, requires_grad=False), mi.Tensor(yn), torch.tensor(xn), torch.tensor(yn)
    opt = optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    topt = torch.optim.SGD(t.parameters(), lr=0.01, momentum=0.9)
    lossf, tlossf = nn.CrossEntropyLoss(), torch.nn.CrossEntropyLoss()
    def mi_steps():
        for _ in range(10): opt.zero_grad(); lossf(m(x), y).backward(); opt.step()
    def torch_steps():
        for _ in range(10): topt.zero_grad(); tlossf(t(tx), ty).backward(); topt.step()
    mi_steps(); torch_steps()
    seq0 = dist._WORLD[0].seq; mi_steps()
    per_step = (dist._WORLD[0].seq - seq0) / 10   # collectives (fingerprints) per step; 0 on one rank (no check)
    tm, tu, tt = [], [], []
    for _ in range(args.repeat):   # interleaved, so background load hits all three alike
        tm.append(best(mi_steps, 1, dist) / 10)
        tu.append(unchecked(lambda: best(mi_steps, 1, dist), dist) / 10)
        tt.append(best(torch_steps, 1, dist) / 10)
    # the check's cost, from single steps alternating checked / unchecked: the median of the pairs' ratios is what a
    # loaded machine (whose slow-downs last longer than a step) leaves least disturbed
    def one(): opt.zero_grad(); lossf(m(x), y).backward(); opt.step()
    ratios = []
    for _ in range(20 * args.repeat):
        a = best(one, 1, dist); b = unchecked(lambda: best(one, 1, dist), dist)
        ratios.append(dist.broadcast_object(a / b))   # rank 0's pair, the same on every rank
    if r == 0: print(json.dumps(dict(ranks=p, batch_per_rank=bs, minima=min(tm), minima_unchecked=min(tu),
                                     torch=min(tt), collectives_per_step=per_step,
                                     paired_ratio_median=float(np.median(ratios)), pairs=len(ratios))), flush=True)
    tdist.destroy_process_group()


def launch(n, what, args):
    env = dict(os.environ, OMP_NUM_THREADS='1', OPENBLAS_NUM_THREADS='1', MKL_NUM_THREADS='1')
    cmd = [mpiexec(), '-n', str(n), sys.executable, str(HERE), '--worker', what,
           '--repeat', str(args.repeat), '--max-mb', str(args.max_mb)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    if out.returncode: sys.exit(f'{" ".join(cmd)} failed:\n{out.stdout}{out.stderr}')
    return [json.loads(l) for l in out.stdout.splitlines() if l.startswith('{')]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--repeat', type=int, default=5)
    ap.add_argument('--max-mb', type=int, default=64)
    ap.add_argument('--worker', choices=['comm', 'cnn'])
    args = ap.parse_args()
    if args.worker: return {'comm': comm, 'cnn': cnn}[args.worker](args)
    sys.path.insert(0, str(HERE.parent))
    from _common import machine
    start = machine()
    print('All-reduce of float32 on 2 ranks, best time (ms) and algorithm bandwidth N/T (GB/s); "check" is the cost of '
          "minima's agreement check (the median over alternating calls of checked / unchecked - 1)\n")
    print('| size | ring ms | ring GB/s | minima all_reduce (MPI) ms | MPI GB/s | unchecked ms | check | torch gloo ms | '
          'gloo GB/s | MPI / gloo |')
    print('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
    comm_rows = launch(2, 'comm', args)
    for row in comm_rows:
        n = row['bytes']
        size = f'{n // 2**20} MB' if n >= 2**20 else f'{n // 1024} KB'
        print(f"| {size} | {row['ring'] * 1e3:.3f} | {n / row['ring'] / 1e9:.2f} | {row['mpi'] * 1e3:.3f} | "
              f"{n / row['mpi'] / 1e9:.2f} | {row['mpi_unchecked'] * 1e3:.3f} | "
              f"{row['paired_ratio_median'] - 1:+.0%} | {row['torch'] * 1e3:.3f} | "
              f"{n / row['torch'] / 1e9:.2f} | {row['mpi'] / row['torch']:.2f} |")
    print('\nDigits CNN, one training step with DistributedDataParallel, global batch 64, best of '
          f'{args.repeat} x 10 steps (ms)\n')
    print('| ranks | batch per rank | minima ms | unchecked ms | check (best of) | check (median of paired steps) | '
          'collectives per step | check (estimated) | torch ms | ratio |')
    print('|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|')
    # one check's cost: the median over messages up to 64 KB, where it is not lost in the data's own time
    small = sorted(row['mpi_unchecked'] * (row['paired_ratio_median'] - 1) for row in comm_rows
                   if row['bytes'] <= 64 * 1024)
    per_check = max(small[len(small) // 2], 0.0)
    cnn_rows = [row for n in (1, 2) for row in launch(n, 'cnn', args)]
    for row in cnn_rows:
        row['check_estimated'] = row['collectives_per_step'] * per_check / row['minima_unchecked']
        print(f"| {row['ranks']} | {row['batch_per_rank']} | {row['minima'] * 1e3:.2f} | "
              f"{row['minima_unchecked'] * 1e3:.2f} | {row['minima'] / row['minima_unchecked'] - 1:+.1%} | "
              f"{row['paired_ratio_median'] - 1:+.1%} ({row['pairs']} pairs) | "
              f"{row['collectives_per_step']:g} | {row['check_estimated']:+.2%} | "
              f"{row['torch'] * 1e3:.2f} | {row['minima'] / row['torch']:.2f} |")
    print(f'\nOne check: {per_check * 1e6:.1f} us (median over all-reduces up to 64 KB). With one rank there is no check, '
          'so that row\'s "measured" column is the noise of this machine.')
    save_results(args, comm_rows, cnn_rows, per_check, start)


def save_results(args, comm_rows, cnn_rows, per_check, start):
    "The rows and the machine they were measured on, through `_common.write_results` (bench/results/allreduce_DATE.json)."
    sys.path.insert(0, str(HERE.parent))
    from _common import write_results
    write_results('allreduce', comm_rows, ddp_step=cnn_rows, seconds_per_check=per_check, repeat=args.repeat,
                  load_1m_at_start=start['load_1m'],
                  note='2 ranks, 1 BLAS thread each; times in seconds (best of repeats); "_unchecked": with the '
                       'agreement check off, alternating with the checked runs; paired_ratio_median: the median of '
                       'checked / unchecked over those pairs')

if __name__ == '__main__':
    main()
