"""Run under `mpiexec -n 2 python tests/nn/mpi_worker.py CASE` by tests/nn/test_distributed.py. Each check asserts; the
main case prints `OK <name>` per check, so the test can tell which one failed (a failure aborts every rank)."""
import os, sys, tempfile, time
import numpy as np
import minima as mi
from minima import nn, optim, init
import minima.distributed as dist
from minima.nn.parallel import DistributedDataParallel as DDP


def say(what):
    print(f'OK {what} rank {dist.get_rank()}', flush=True)


def mlp(seed):
    init.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))


def cnn(seed):
    init.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(8 * 4 * 4, 10))


def batches(shape, steps=10, bs=16):
    rng = np.random.default_rng(1)
    return [(rng.standard_normal((bs,) + shape).astype('float32'), rng.integers(0, 10, bs)) for _ in range(steps)]


def train_ddp(make, shape, device=None, **kw):
    "10 SGD steps with DDP, rank r on its half of each batch; every rank builds the model from its own seed."
    r, p = dist.get_rank(), dist.get_world_size()
    m = make(seed=100 + r)
    if device is not None: m = m.to(device)
    model = DDP(m, **kw)   # different seeds: DDP must copy rank 0's weights
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for X, y in batches(shape):
        h = len(X) // p
        opt.zero_grad()
        xb, yb = mi.Tensor(X[r * h:(r + 1) * h], device=device), mi.Tensor(y[r * h:(r + 1) * h], device=device)
        loss = nn.CrossEntropyLoss()(model(xb), yb)
        loss.backward()
        opt.step()
    return model.module


def train_one(make, shape, chunks):
    """The same 10 steps in one process on the whole batch. With `chunks`, the batch goes through the model in that
    many pieces and the losses are averaged: batch norm then sees each rank's piece, as it does under DDP."""
    model = make(seed=100)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for X, y in batches(shape):
        opt.zero_grad()
        h = len(X) // chunks
        losses = [nn.CrossEntropyLoss()(model(mi.Tensor(X[i * h:(i + 1) * h])), mi.Tensor(y[i * h:(i + 1) * h]))
                  for i in range(chunks)]
        loss = losses[0]
        for l in losses[1:]: loss = loss + l
        (loss / chunks).backward()
        opt.step()
    return model


def same_weights(a, b, tol=1e-5):
    for (k, x), (_, y) in zip(a.named_parameters(), b.named_parameters()):
        d = np.abs(x.detach().cpu().numpy() - y.detach().cpu().numpy()).max()
        assert d <= tol, f'{k}: differs by {d:.3g} > {tol}'


def check_collectives(device=None):
    "Every collective against its definition, on the CPU or (NCCL, or MPI through host memory) the GPU."
    r, p = dist.get_rank(), dist.get_world_size()
    T = lambda a, **kw: mi.Tensor(a, device=device, **kw)
    base = np.arange(6, dtype='float32').reshape(2, 3)
    for op, want in [(dist.ReduceOp.SUM, base * p + sum(range(p))), (dist.ReduceOp.AVG, base + sum(range(p)) / p),
                     (dist.ReduceOp.MAX, base + p - 1), (dist.ReduceOp.MIN, base)]:
        t = T(base + r)
        v = t._version
        dist.all_reduce(t, op)
        assert t.dtype == 'float32' and t._version == v + 1
        np.testing.assert_allclose(t.detach().cpu().numpy(), want, rtol=1e-6)
    t = T(np.arange(5) * (r + 1), dtype='int64')
    dist.all_reduce(t)
    assert t.dtype == 'int64' and t.tolist() == [i * sum(range(1, p + 1)) for i in range(5)]
    with mi.no_grad(): v = T(base + r).transpose()   # a strided view: MPI works on a copy, written back
    assert not v.cached_data.is_compact()
    dist.all_reduce(v)
    np.testing.assert_allclose(v.detach().cpu().numpy(), (base * p + sum(range(p))).T)
    t = T(np.full(3, float(r)))
    dist.broadcast(t, src=p - 1)
    assert t.tolist() == [p - 1.0] * 3
    out = [T(np.zeros(2, 'float32')) for _ in range(p)]
    dist.all_gather(out, T(np.array([r, -r], 'float32')))
    assert [o.tolist() for o in out] == [[i, -i] for i in range(p)]
    out = T(np.zeros(2, 'float32'))
    dist.reduce_scatter(out, [T(np.full(2, 10.0 * i + r, 'float32')) for i in range(p)])
    assert out.tolist() == [10.0 * r * p + sum(range(p))] * 2
    w = dist.all_reduce(T(np.ones(3, 'float32')), async_op=True)
    assert w.wait() and w.is_completed()
    dist.barrier()
    try: dist.all_gather([T(np.zeros(2))] * (p + 1), T(np.zeros(2)))
    except ValueError as e: assert f'world_size = {p}' in str(e), e
    else: raise AssertionError('all_gather accepted a list of the wrong length')
    say('collectives' if device is None else f'collectives {dist.get_backend()} {device.name}')


def check_ring():
    comm = dist._group('test').comm
    rng = np.random.default_rng(dist.get_rank())
    for n in [1, 2, 3, 7, 1000, 4097, 100003]:
        for dt in ['float32', 'float64']:
            x = rng.standard_normal(n).astype(dt)
            ours, mpis = x.copy(), x.copy()
            dist.ring_all_reduce(ours, comm)
            dist.all_reduce_array(mpis)
            np.testing.assert_allclose(ours, mpis, rtol=1e-6 if dt == 'float32' else 1e-12, atol=1e-6)
    x = np.arange(12, dtype='int64').reshape(3, 4)
    dist.ring_all_reduce(x, comm)
    assert (x == np.arange(12).reshape(3, 4) * dist.get_world_size()).all()
    say('ring')


def check_sampler():
    p = dist.get_world_size()
    for n in [1, 7, 10, 11, 64]:
        for shuffle in [True, False]:
            for drop_last in [False, True]:
                if drop_last and n < p: continue
                for epoch in [0, 1]:
                    s = dist.DistributedSampler(range(n), shuffle=shuffle, seed=3, drop_last=drop_last)
                    s.set_epoch(epoch)
                    mine = list(s)
                    assert len(mine) == len(s)
                    every = [None] * p
                    dist.all_gather_object(every, mine)
                    allidx = sorted(i for part in every for i in part)
                    if drop_last:   # each index at most once, and only n % p of them left out
                        assert len(set(allidx)) == len(allidx) == n - n % p, (n, allidx)
                    else:           # every index, and the padding repeats only n - total of them
                        assert set(allidx) == set(range(n)) and len(allidx) == s.total_size, (n, allidx)
    a = dist.DistributedSampler(range(50), seed=3); b = dist.DistributedSampler(range(50), seed=3)
    b.set_epoch(1)
    assert list(a) != list(b)
    say('sampler')


def check_ddp():
    p = dist.get_world_size()
    same_weights(train_ddp(mlp, (64,)), train_one(mlp, (64,), chunks=1))
    say('ddp mlp')
    same_weights(train_ddp(mlp, (64,), bucket_cap_mb=0.004), train_one(mlp, (64,), chunks=1))
    say('ddp mlp small buckets')
    same_weights(train_ddp(cnn, (1, 8, 8)), train_one(cnn, (1, 8, 8), chunks=p))
    say('ddp cnn')


def check_ddp_cuda():
    "The same DDP runs with the model and batches on the CUDA device (both ranks may share one GPU)."
    p, dev = dist.get_world_size(), mi.cuda()
    same_weights(train_ddp(mlp, (64,), device=dev), train_one(mlp, (64,), chunks=1), tol=1e-4)
    say('ddp mlp cuda')
    same_weights(train_ddp(cnn, (1, 8, 8), device=dev), train_one(cnn, (1, 8, 8), chunks=p), tol=1e-4)
    say('ddp cnn cuda')


def check_no_sync():
    r, p = dist.get_rank(), dist.get_world_size()
    (X1, y1), (X2, y2) = batches((64,), steps=2)
    model = DDP(mlp(7))
    lossf, h = nn.CrossEntropyLoss(), len(X1) // p
    with model.no_sync():
        lossf(model(mi.Tensor(X1[r * h:(r + 1) * h])), mi.Tensor(y1[r * h:(r + 1) * h])).backward()
    local = model.module[0].bias.grad.cpu().numpy().copy()
    lossf(model(mi.Tensor(X2[r * h:(r + 1) * h])), mi.Tensor(y2[r * h:(r + 1) * h])).backward()
    ref = mlp(7)
    for X, y in [(X1, y1), (X2, y2)]: lossf(ref(mi.Tensor(X)), mi.Tensor(y)).backward()
    every = [None] * p
    dist.all_gather_object(every, local)
    assert not np.allclose(every[0], every[1]), 'no_sync averaged the gradients'
    for a, b in zip(model.module.parameters(), ref.parameters()):
        np.testing.assert_allclose(a.grad.cpu().numpy(), b.grad.cpu().numpy(), rtol=1e-5, atol=1e-6)
    say('no_sync')


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.head0, self.head1 = nn.Linear(4, 4), nn.Linear(4, 2), nn.Linear(4, 2)
    def forward(self, x, which):
        h = self.body(x)
        return self.head0(h) if which == 0 else self.head0(h) + self.head1(h)


def check_unused():
    r = dist.get_rank()
    x = mi.Tensor(np.ones((3, 4), 'float32'))
    model = DDP(TwoHeads())
    try: model(x, r).sum().backward()   # rank 0 never uses head1
    except RuntimeError as e:
        msg = str(e)
        if r == 0: assert "got no gradient on rank 0: ['head1.weight', 'head1.bias']" in msg, msg
        else: assert '2 parameter(s) got no gradient on another rank' in msg, msg
        assert 'find_unused_parameters=True' in msg
    else: raise AssertionError('an unused parameter went unnoticed')
    model = DDP(TwoHeads(), find_unused_parameters=True)
    model.zero_grad()
    model(x, r).sum().backward()
    g = model.module.head1.weight.grad.cpu().numpy()
    every = [None] * 2
    dist.all_gather_object(every, g)
    np.testing.assert_array_equal(every[0], every[1])
    assert np.abs(g).sum() > 0
    say('unused')


def check_mismatch():
    r = dist.get_rank()
    frozen = mlp(seed=r)
    frozen[0].weight.requires_grad_(False)   # not trained, but every replica must still start from rank 0's
    DDP(frozen)
    every = [None] * 2
    dist.all_gather_object(every, frozen[0].weight.detach().cpu().numpy())
    np.testing.assert_array_equal(every[0], every[1])
    try: DDP(nn.Linear(4, 3 + r))
    except ValueError as e:
        assert 'on rank 1' in str(e) and 'on rank 0' in str(e) and 'same model' in str(e), e
    else: raise AssertionError('DDP accepted different shapes')
    say('mismatch')


def check_checkpoint():
    r = dist.get_rank()
    folder = dist.broadcast_object(tempfile.mkdtemp() if r == 0 else None)
    path = os.path.join(folder, 'ckpt.npz')
    dist.save_checkpoint({'w': np.full(3, float(r))}, path)
    with np.load(path) as f: assert f['w'].tolist() == [0.0] * 3   # rank 0's
    if r == 0:   # a write that fails half-way leaves the old file whole and no temporary behind
        real = np.savez
        def broken(f, **kw): f.write(b'half a file'); raise OSError('disk full')
        np.savez = broken
    try: dist.save_checkpoint({'w': np.ones(3)}, path)
    except (OSError, RuntimeError) as e: assert 'disk full' in str(e), e
    else: raise AssertionError('a failed checkpoint went unnoticed')
    finally:
        if r == 0: np.savez = real
    with np.load(path) as f: assert f['w'].tolist() == [0.0] * 3
    dist.barrier()
    assert os.listdir(folder) == ['ckpt.npz'], os.listdir(folder)
    say('checkpoint')


def main():
    case = sys.argv[1]
    if case == 'main':
        dist.init_process_group('mpi', timeout=60)
        for f in [check_collectives, check_ring, check_sampler, check_ddp, check_no_sync, check_unused,
                  check_mismatch, check_checkpoint]:
            f()
        dist.destroy_process_group()
    elif case == 'cuda':   # only where the CUDA device works (tests/nn/test_distributed.py skips it otherwise)
        dist.init_process_group('mpi', timeout=120)
        check_collectives(mi.cuda())
        check_ddp_cuda()
        dist.destroy_process_group()
    elif case == 'nccl':   # one rank per GPU (tests/nn/test_distributed.py starts as many ranks as it sees GPUs, <= 2)
        dist.init_process_group('nccl', timeout=120)
        assert dist.get_backend() == 'nccl'
        check_collectives(mi.cuda())
        check_collectives()   # CPU tensors still go through MPI
        if dist.get_world_size() > 1: check_ddp_cuda()
        dist.destroy_process_group()
    elif case == 'nccl without a gpu':   # each rank reports why, then MPI_Abort ends both
        dist.init_process_group('nccl', timeout=60)
    elif case == 'raise':   # rank 1 fails while rank 0 waits in a collective with a long timeout
        dist.init_process_group('mpi', timeout=600)
        if dist.get_rank() == 1: raise ValueError('rank one fails on purpose')
        dist.barrier()
    elif case.startswith('disagree '):   # the ranks make different collectives: every rank raises, naming both
        dist.init_process_group('mpi', timeout=60)
        r, what = dist.get_rank(), case.split()[1]
        ones = lambda n, dt='float32': mi.Tensor(np.ones(n, dt), dtype=dt)
        if what == 'dtype': dist.all_reduce(ones(4, 'float32' if r == 0 else 'float64'))
        if what == 'length': dist.all_reduce(ones(3 if r == 0 else 5))
        if what == 'op': dist.all_reduce(ones(4), op='sum' if r == 0 else 'max')
        if what == 'kind': dist.all_reduce(ones(4)) if r == 0 else dist.barrier()
        if what == 'gather': dist.all_gather([ones(3 + r), ones(3 + r)], ones(3 + r))
        if what == 'broadcast': dist.broadcast(ones(3 + 2 * r), 0)
        if what == 'root': dist.broadcast(ones(3), r)
        if what == 'async':
            w = dist.all_reduce(ones(4, 'float32' if r == 0 else 'float64'), async_op=True); w.wait()
        print(f'rank {r} finished the {what} collective', flush=True)
    elif case.startswith('early '):   # rank 1 ends at step 5 while rank 0 keeps training: the job fails, naming it
        dist.init_process_group('mpi', timeout=600)
        r, how = dist.get_rank(), case.split()[1]
        model = DDP(mlp(seed=0)); opt = optim.SGD(model.parameters(), lr=0.1)
        for step, (x, y) in enumerate(batches((64,), steps=50)):
            if r == 1 and step == 5:
                if how == 'os_exit': os._exit(0)
                if how == 'sys_exit': sys.exit(0)
                if how == 'return': break
            opt.zero_grad(); nn.CrossEntropyLoss()(model(mi.Tensor(x)), mi.Tensor(y)).backward(); opt.step()
        print(f'rank {r} left the loop at step {step}', flush=True)
    elif case == 'all end':   # every rank ends the same way, without destroy_process_group: status 0
        dist.init_process_group('mpi', timeout=60)
        dist.all_reduce(mi.Tensor(np.ones(3)))
        print(f'rank {dist.get_rank()} done', flush=True)
        if sys.argv[2:] == ['os_exit']: sys.stdout.flush(); os._exit(0)
    elif case == 'timeout':   # rank 1 never joins the all_reduce; rank 0 gives up after 2 s
        dist.init_process_group('mpi', timeout=2)
        if dist.get_rank() == 0: dist.all_reduce(mi.Tensor(np.ones(3)))
        else: time.sleep(120)


if __name__ == '__main__':
    main()
