"""minima.distributed and DistributedDataParallel on 2 MPI ranks: each test launches `mpiexec -n 2` on
tests/nn/mpi_worker.py (skipped, with the reason, only when MPI cannot start). In one process: the sampler against
torch's, and the grad_hook op that DDP's gradient averaging rides on."""
import os, shutil, subprocess, sys, tempfile, time
from pathlib import Path
import numpy as np
import pytest
import minima as mi

WORKER = Path(__file__).with_name('mpi_worker.py')
ROOT = Path(__file__).resolve().parents[2]


def _mpiexec():
    "The mpiexec next to this Python (the venv's, from the mpich wheel), else the one on PATH."
    here = Path(sys.executable).with_name('mpiexec')
    return str(here) if here.exists() else shutil.which('mpiexec')


def _env():
    env = dict(os.environ, OMP_NUM_THREADS='1', OPENBLAS_NUM_THREADS='1')
    env['PYTHONPATH'] = os.pathsep.join([str(ROOT)] + [p for p in env.get('PYTHONPATH', '').split(os.pathsep) if p])
    return env


def launch(*args, timeout=60, n=2, env=None):
    "(return code, stdout + stderr, seconds) of `mpiexec -n N python tests/nn/mpi_worker.py ARGS`."
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as d:   # a failing rank also writes its message here (MINIMA_LAUNCH_DIR):
        # mpiexec's forwarding of stderr can be cut by MPI_Abort, as `dist.launch` knows
        r = subprocess.run([_mpiexec(), '-n', str(n), sys.executable, str(WORKER), *args], capture_output=True,
                           text=True, timeout=timeout, env={**_env(), **(env or {}), 'MINIMA_LAUNCH_DIR': d}, cwd=ROOT)
        out = r.stdout + r.stderr
        for f in sorted(Path(d).glob('rank*.err')):
            if (msg := f.read_text()) not in out: out += msg
    return r.returncode, out, time.monotonic() - t0


@pytest.fixture(scope='module')
def mpi():
    "Skip, saying why, when mpi4py or mpiexec is missing or cannot start 2 ranks."
    try: import mpi4py  # noqa: F401
    except ImportError: pytest.skip('mpi4py is not installed (pip install mpi4py mpich)')
    if _mpiexec() is None: pytest.skip('no mpiexec next to this Python or on PATH (pip install mpich)')
    try:
        r = subprocess.run([_mpiexec(), '-n', '2', sys.executable, '-c',
                            'from mpi4py import MPI; c = MPI.COMM_WORLD; c.Get_rank() or print(c.Get_size())'],
                           capture_output=True, text=True, timeout=60, env=_env())
    except subprocess.TimeoutExpired: pytest.skip('mpiexec -n 2 did not start within 60 s')
    if r.returncode != 0 or r.stdout.split() != ['2']:
        pytest.skip(f'mpiexec -n 2 cannot start MPI here: {(r.stdout + r.stderr).strip()[-300:]}')


CHECKS = ['collectives', 'ring', 'sampler', 'ddp mlp', 'ddp mlp small buckets', 'ddp cnn', 'no_sync', 'unused',
          'mismatch', 'checkpoint']


def test_two_ranks(mpi):
    """Collectives against their definition; the hand-written ring against MPI's all-reduce (sizes 1 to 100,003,
    most not divisible by 2); the sampler partitions the indices; DDP on 2 ranks gives the weights of one process on
    the whole batch to 1e-5 after 10 SGD steps (an MLP, with one bucket and with many, and a CNN with batch norm,
    whose statistics stay per rank); no_sync accumulates; unused parameters, shape mismatches and failed
    checkpoints raise on every rank."""
    rc, out, _ = launch('main')
    assert rc == 0, out[-3000:]
    for c in CHECKS:
        for r in (0, 1): assert f'OK {c} rank {r}' in out, f'{c} did not pass on rank {r}:\n{out[-3000:]}'


def test_two_ranks_on_cuda(mpi):
    "DDP with the model and data on the CUDA device (2 ranks may share one GPU): the weights of one CPU process."
    dev = mi.cuda()
    if not dev.enabled(): pytest.skip(f'CUDA device not available: {dev.why_disabled()}')
    rc, out, _ = launch('cuda', timeout=300)
    assert rc == 0, out[-3000:]
    for c in ('collectives mpi cuda', 'ddp mlp cuda', 'ddp cnn cuda'):
        for r in (0, 1): assert f'OK {c} rank {r}' in out, f'{c} did not pass on rank {r}:\n{out[-3000:]}'


def _gpu_count() -> int:
    "How many GPUs this machine has (torch's count; 0 without a CUDA build of torch or without a driver)."
    try: import torch
    except ImportError: return 0
    return torch.cuda.device_count()


def test_nccl_on_the_gpus(mpi):
    """backend='nccl': every collective on CUDA tensors, GPU to GPU, one rank per GPU (2 ranks where there are 2 GPUs,
    then DDP too; 1 rank with one GPU); CPU tensors in the same group still go through MPI."""
    import minima.distributed as dist
    if not mi.cuda().enabled(): pytest.skip(f'CUDA device not available: {mi.cuda().why_disabled()}')
    if dist.find_nccl() is None: pytest.skip('libnccl not found (pip install nvidia-nccl-cu13, or MINIMA_NCCL_LIB)')
    n = min(2, _gpu_count()) or 1
    rc, out, _ = launch('nccl', timeout=300, n=n)
    assert rc == 0, out[-3000:]
    for r in range(n):
        for c in ['collectives nccl cuda', 'collectives'] + (['ddp mlp cuda', 'ddp cnn cuda'] if n > 1 else []):
            assert f'OK {c} rank {r}' in out, f'{c} did not pass on rank {r}:\n{out[-3000:]}'


def test_nccl_without_a_gpu_says_why(mpi):
    "Where NCCL's library is found but there is no GPU, every rank stops at init with the reason (not a hang)."
    import minima.distributed as dist
    if mi.cuda().enabled(): pytest.skip('this machine has a GPU (test_nccl_on_the_gpus runs instead)')
    if dist.find_nccl() is None: pytest.skip('libnccl not found (pip install nvidia-nccl-cu13, or MINIMA_NCCL_LIB)')
    rc, out, secs = launch('nccl without a gpu')
    assert rc != 0 and secs < 90, (rc, secs, out[-2000:])
    assert "init_process_group('nccl'): rank" in out and 'has no working CUDA device' in out, out[-2000:]


def test_nccl_library_missing_says_how_to_get_it(monkeypatch):
    import minima.distributed as dist
    monkeypatch.setattr(dist, 'find_nccl', lambda: None)
    with pytest.raises(RuntimeError, match='libnccl not found; pip install nvidia-nccl-cu13'): dist.Nccl()
    assert not dist.is_initialized()


def test_a_failing_rank_ends_every_rank(mpi):
    rc, out, secs = launch('raise')   # rank 0 waits in a barrier with a 600 s timeout meanwhile
    assert rc != 0 and secs < 90, (rc, secs)   # far below the 600 s the survivors would wait
    assert 'ValueError: rank one fails on purpose' in out and 'rank 1 of 2 failed' in out, out[-2000:]


def test_a_collective_times_out(mpi):
    rc, out, secs = launch('timeout')   # rank 1 sleeps 120 s instead of joining; the timeout is 2 s
    assert rc != 0 and secs < 90, (rc, secs)   # far below the 600 s the survivors would wait
    assert 'TimeoutError: all_reduce: rank 0 of 2 waited 2 s' in out, out[-2000:]


def test_sampler_matches_torch():
    "Without shuffling, the indices are torch's exactly (padding and drop_last included); no process group needed."
    pytest.importorskip('torch')
    from torch.utils.data import DistributedSampler as TorchSampler
    from minima.distributed import DistributedSampler
    for n in [1, 5, 10, 11, 13]:
        for p in [1, 2, 3, 4]:
            for drop_last in [False, True]:
                if drop_last and n < p: continue
                for r in range(p):
                    ours = DistributedSampler(range(n), num_replicas=p, rank=r, shuffle=False, drop_last=drop_last)
                    theirs = TorchSampler(range(n), num_replicas=p, rank=r, shuffle=False, drop_last=drop_last)
                    assert list(ours) == list(theirs) and len(ours) == len(theirs), (n, p, r, drop_last)
    s = DistributedSampler(range(20), num_replicas=2, rank=0, seed=5)
    a = list(s); s.set_epoch(1); b = list(s); s.set_epoch(0)
    assert a != b and list(s) == a and sorted(a) != a
    with pytest.raises(ValueError, match='rank must be in'): DistributedSampler(range(4), num_replicas=2, rank=2)


def test_grad_hook_sees_the_whole_gradient_and_runs_in_order():
    "grad_hook: identity forward; its fn gets the gradient summed over every use; hooks of `after` inputs run later."
    rng = np.random.default_rng(0)
    w = mi.Tensor(rng.standard_normal((3, 2)).astype('float32'))
    up = rng.standard_normal((3, 2)).astype('float32')
    seen = []
    last = mi.ops.grad_hook(mi.Tensor(np.zeros((), 'float32')), lambda g: seen.append('last'))
    h = mi.ops.grad_hook(w, lambda g: (seen.append(g.numpy().copy()), g * 2)[1], last)
    assert h.shape == w.shape and h.dtype == 'float32' and np.array_equal(h.detach().numpy(), w.detach().numpy())
    (h * 3 + h * h).backward(mi.Tensor(up))
    np.testing.assert_allclose(seen[0], up * (3 + 2 * w.detach().numpy()), rtol=1e-6)
    assert seen[1] == 'last' and len(seen) == 2
    np.testing.assert_allclose(w.grad.detach().numpy(), 2 * up * (3 + 2 * w.detach().numpy()), rtol=1e-6)


def test_no_process_group_errors():
    import minima.distributed as dist
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match='all_reduce: the default process group is not initialized'):
        dist.all_reduce(mi.Tensor([1.0]))
    with pytest.raises(RuntimeError, match='DistributedDataParallel: the default process group'):
        mi.nn.parallel.DistributedDataParallel(mi.nn.Linear(2, 2))
    with pytest.raises(ValueError, match="backend 'gloo' is not available"): dist.init_process_group('gloo')


# --- the ranks must agree on every collective, and end together (reliability audit D3.1, D3.2)

DISAGREE = {   # case -> what every rank's message must name: the exception and both ranks' calls
    'dtype': ('TypeError', 'all_reduce #', 'of float32 (4,)', 'of float64 (4,)'),
    'length': ('ValueError', 'of float32 (3,)', 'of float32 (5,)'),
    'op': ('RuntimeError', 'all_reduce #', '(sum)', '(max)'),
    'kind': ('RuntimeError', 'all_reduce #', 'barrier #'),
    'gather': ('ValueError', 'all_gather #', '(3,)', '(4,)'),
    'broadcast': ('ValueError', 'broadcast #', '(3,)', '(5,)'),
    'root': ('ValueError', 'from rank 0', 'from rank 1'),
    'async': ('TypeError', 'float32', 'float64'),
}

@pytest.mark.parametrize('what', list(DISAGREE))
def test_ranks_that_disagree_fail_with_both_calls_named(mpi, what):
    "Mismatched dtype, length, op, collective or root: no rank finishes, each names its call and the other's."
    rc, out, secs = launch(f'disagree {what}', env={'MINIMA_CHECK_COLLECTIVES': '1'})
    assert rc != 0 and secs < 60 and 'finished the' not in out, (rc, secs, out[-2000:])
    assert 'the ranks disagree: rank 0 calls' in out or 'the ranks disagree: rank 1 calls' in out, out[-2000:]
    for s in DISAGREE[what]: assert s in out, (s, out[-2000:])

@pytest.mark.parametrize('checks', ['0', '1'])
@pytest.mark.parametrize('how', ['os_exit', 'sys_exit', 'return'])
def test_a_rank_that_ends_early_fails_the_job_naming_it(mpi, how, checks):
    """Rank 1 ends at step 5 of 50 (os._exit(0), sys.exit(0), or leaving its loop): rc != 0 at once, rank 1 named,
    with the agreement check on or off."""
    rc, out, secs = launch(f'early {how}', env={'MINIMA_CHECK_COLLECTIVES': checks})   # timeout 600 s: not from it
    assert rc != 0 and secs < 60, (rc, secs, out[-2000:])
    assert 'rank 1 of 2 has ended' in out and 'while rank 0 waits in this collective' in out, out[-2000:]
    assert 'rank 0 left the loop' not in out

@pytest.mark.parametrize('how', ['', 'os_exit'])
def test_ranks_that_end_together_succeed(mpi, how):
    rc, out, _ = launch('all end', *([how] if how else []))
    assert rc == 0 and 'rank 0 done' in out and 'rank 1 done' in out, out[-2000:]

@pytest.mark.parametrize('checks', ['0', '1'])
def test_the_switch_turns_the_check_on_and_off(mpi, checks):
    "MINIMA_CHECK_COLLECTIVES: with it off, a dtype mismatch goes through unchecked (MPI's undefined result)."
    rc, out, _ = launch('all end', env={'MINIMA_CHECK_COLLECTIVES': checks})
    assert rc == 0, out[-2000:]
    rc, out, _ = launch('disagree op', env={'MINIMA_CHECK_COLLECTIVES': checks})
    assert ('the ranks disagree' in out) == (checks == '1'), out[-2000:]

def test_default_timeout_is_minutes():
    import datetime, minima.distributed as dist
    assert datetime.timedelta(minutes=1) <= dist.DEFAULT_TIMEOUT <= datetime.timedelta(minutes=10)
