"""`minima.compile` on the CUDA device: a program whose tensors live on the GPU replays as one call into a library of
its fused kernels and the device library's functions. The compile suites' equality tests (training steps with dropout,
batch norm, momentum, Adam(W), gradient clipping, a GPT, random programs) run here on `cuda` against eager minima on
`cuda`; so do the guards and the refusals. On a machine without a GPU they run on the CPU emulator of the CUDA device
(`tools/cuda_emu/run_tests`, as CI does); `tools/cuda_gpu_check tests` runs them on a real GPU."""
import os
import numpy as np
import pytest
import minima as mi
from minima import nn, optim, init
from minima.compile import CaptureError, CudaProgram
import test_compile as TC, test_compile_audit as TA, test_compile_programs as TP

@pytest.fixture(scope='module', autouse=True)
def cuda():
    dev = mi.cuda()
    if not dev.enabled(): pytest.skip(f'CUDA device not available: {dev.why_disabled()}')
    return dev

# the generated kernels round every operation as eager's kernels do (nvcc -fmad=false), but a fused row sum adds in
# another order than the device library's block reduction
TOL = dict(rtol=2e-5, atol=2e-5)

def close(got, want, tol=TOL):
    np.testing.assert_allclose(got[0], want[0], **tol)
    for a, b in zip(got[1], want[1]): np.testing.assert_allclose(a, b, **tol)

@pytest.mark.parametrize('make,shape', [(TC.mlp, (8, 12)), (TC.cnn, (6, 1, 6, 6))], ids=['mlp', 'cnn'])
def test_training_step_replays_on_cuda(make, shape):
    "SGD with momentum, dropout (fresh masks each replay), batch norm, conv and pooling: eager cuda == compiled cuda."
    want = TC.train(make, shape, False, steps=8, device='cuda')
    got = TC.train(make, shape, True, steps=8, device='cuda')
    close(got, want)
    p = got[2].program
    assert isinstance(p, CudaProgram) and p.stats['kernels'] > 0 and got[2].captures == 2
    assert sum(i.random is not None for i in p.instrs) == 1   # the dropout mask, drawn afresh each replay

def test_adamw_capturable_replays_on_cuda():
    close(TC.train(TC.mlp, (8, 12), True, steps=6, make_opt=TC.adamw, device='cuda'),
          TC.train(TC.mlp, (8, 12), False, steps=6, make_opt=TC.adamw, device='cuda'))

def test_gpt_replays_on_cuda():
    "A tiny GPT with dropout everywhere and AdamW, the compile issue's check, on the CUDA device."
    want, got = TC.train_gpt(False, steps=6, device='cuda'), TC.train_gpt(True, steps=6, device='cuda')
    close(got, want, dict(rtol=1e-4, atol=1e-4))
    p = got[2].program
    assert isinstance(p, CudaProgram) and sum(i.random is not None for i in p.instrs) == 2 * 3 + 1

@pytest.mark.parametrize('seed', [2, 5])   # an MLP and a CNN, both clipping, both changing shape
def test_random_training_programs_on_cuda(seed):
    "The random programs (schedules, mode and hyperparameter changes, views written in place, clipping)."
    plan = TP.program(seed)
    le, pe, _ = TP.run(plan, False, 'cuda')
    lc, pc, f = TP.run(plan, True, 'cuda')
    close((lc, pc), (le, pe))
    assert f.replays >= TP.N_STEPS // 5 and isinstance(f.program, CudaProgram)

@pytest.mark.parametrize('norm_type', [2.0, float('inf')])
def test_clip_grad_norm_on_cuda(norm_type):
    TA.test_c4_clip_grad_norm_returns_a_fresh_norm_and_clips_only_when_above(norm_type, device='cuda')

def test_learning_rate_change_is_guarded_on_cuda():
    def after(i, m, opt):
        if i == 4: opt.param_groups[0]['lr'] = 0.0
    f = TA.same(lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), after, device='cuda')
    assert isinstance(f.program, CudaProgram)

C = __import__('sys').modules['minima.compile']   # (`minima.compile` the attribute is the function)

def small_step(device='cuda'):
    init.manual_seed(0)
    lin = nn.Linear(4, 3).to(device)
    opt = optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)
    def step(x):
        opt.zero_grad(); loss = ((lin(x).relu() - 0.5) ** 2).sum(); loss.backward(); opt.step()
        return loss
    return step, lin

def test_a_replay_is_one_call_into_its_library(cuda, monkeypatch):
    "During a replay Python calls no device primitive: only the result's fresh copy (an alloc and a compact)."
    step, _ = small_step()
    f = mi.compile(step)
    x = mi.Tensor(np.linspace(-1, 1, 20, dtype='float32').reshape(5, 4), device='cuda')
    for _ in range(3): f(x)
    assert isinstance(f.program, CudaProgram)
    seen = []
    for name in list(C.PRIMS) + ['alloc', 'matmul_int8']:
        real = getattr(cuda, name)
        monkeypatch.setattr(cuda, name, lambda *a, _n=name, _f=real, **k: (seen.append(_n), _f(*a, **k))[1])
    f(x)
    assert seen == ['alloc', 'compact']
    assert 'extern "C" int replay(' in f.program.source and f.program.source.count('CALL(') >= len(f.program.instrs)

def test_replay_library_is_cached_and_verified(cuda, monkeypatch, tmp_path):
    "The replay's library is built once into the kernel cache; a truncated one fails its hash and is built again."
    import subprocess
    d = tmp_path / 'kernels'
    monkeypatch.setenv('MINIMA_CACHE', str(d)); monkeypatch.setattr(C, '_CACHE_DIRS', {})
    x = mi.Tensor(np.ones((5, 4), 'float32'), device='cuda')
    def program():
        f = mi.compile(small_step()[0])
        for _ in range(3): f(x)
        return f.program
    program()
    [lib] = d.glob('r_*.so')
    assert (d / (lib.name + '.sha256')).read_text() == C._sha256(lib)
    builds, run = [], subprocess.run
    monkeypatch.setattr(subprocess, 'run', lambda cmd, *a, **k: (builds.append(cmd), run(cmd, *a, **k))[1])
    program()
    assert builds == []                        # the same program: loaded from the cache
    lib.with_suffix('.new').write_bytes(lib.read_bytes()[:100])
    os.replace(lib.with_suffix('.new'), lib)   # (a new file: this process still maps the old one)
    program()
    assert len(builds) == 1 and lib.stat().st_size > 1000 and (d / (lib.name + '.sha256')).read_text() == C._sha256(lib)

def test_failed_replay_build_is_an_error_naming_the_command(cuda, monkeypatch, tmp_path):
    """A replay library that does not build is refused (CaptureError naming the compiler, its exit
    status, the command and its error), not a silent fall back; no library, hash or temporary file
    is left in the cache."""
    d = tmp_path / 'kernels'
    monkeypatch.setenv('MINIMA_CACHE', str(d)); monkeypatch.setattr(C, '_CACHE_DIRS', {})
    bad = tmp_path / 'badnvcc'
    bad.write_text('#!/bin/sh\necho "nvcc: out of registers" >&2\nexit 3\n'); bad.chmod(0o755)
    toolchain = lambda emulated: (lambda src, out: [bad, src, out], '.cu', 'bad')
    monkeypatch.setattr(C, '_cuda_toolchain', toolchain)
    x = mi.Tensor(np.ones((5, 4), 'float32'), device='cuda')
    f = mi.compile(small_step()[0])
    want = r'(?s)badnvcc failed \(exit 3\) on the CUDA replay.*out of registers'
    with pytest.raises(CaptureError, match=want):
        for _ in range(3): f(x)
    assert sorted(p.name for p in d.iterdir() if p.name.startswith('r_')) == []

def test_primitive_without_a_replay_is_refused_naming_it(cuda):
    "A device method that a capture cannot record is refused while capturing, with its name and the device's."
    a, b = cuda.alloc(8, 'int8'), cuda.alloc(8, 'int8')
    def step(x):
        cuda.matmul_int8(a, b, cuda.alloc(4, 'int32'), 2, 4, 2)
        return x * 2.0
    f = mi.compile(step)
    x = mi.Tensor(np.ones(3, 'float32'), device='cuda')
    f(x)
    with pytest.raises(CaptureError, match='matmul_int8 on the cuda device'): f(x)
    ins = C.Instr('reduce_strided', ['sum', None, (2,), (1,), 0, None, 1])
    with pytest.raises(CaptureError, match='reduce_strided .* cannot be replayed on the CUDA device'):
        C._cuda_call(ins, str, str)

def test_arguments_on_two_devices_are_refused(cuda):
    f = mi.compile(lambda x, y: x * 2.0)
    x, y = mi.Tensor(np.ones(3, 'float32'), device='cuda'), mi.Tensor(np.ones(3, 'float32'))
    f(x, y)
    with pytest.raises(CaptureError, match='one device'): f(x, y)

def test_work_on_the_gpu_in_a_step_captured_on_the_cpu_is_refused(cuda):
    "A step with no tensor argument is captured on the CPU: its CUDA work would be left out, so it is refused."
    step, _ = small_step()
    x = mi.Tensor(np.ones((5, 4), 'float32'), device='cuda')
    f = mi.compile(lambda: step(x))
    f()
    with pytest.raises(CaptureError, match='on the cuda device cannot be part of a program captured on the cpu'): f()

@pytest.mark.parametrize('ops,fuse', [(['exp', 'add_b', 'matmul', 'softmax', 'tanh'], True),
                                      (['square', 'max_b', 'rowsum', 'sigmoid', 'div_b', 'log1p_abs'], True),
                                      (['relu', 'mul_b', 'neg', 'scale', 'matmul'], False)])
def test_random_op_programs_on_cuda(ops, fuse):
    "test_compile's op chains, forward and gradients, on new arguments at each replay: compiled cuda == eager cuda."
    rng = np.random.default_rng(len(ops))
    def fn(a, b, w, up):
        h = a
        for name in ops: h = TC.UNARY[name](h) if name in TC.UNARY else TC.BINARY[name](h, w if name == 'matmul' else b)
        loss = (h * up).sum()
        return (loss,) + mi.grad(loss, [a, b, w], materialize_grads=True)
    T = lambda *s: mi.Tensor(rng.standard_normal(s).astype('float32'), requires_grad=True, device='cuda')
    f = mi.compile(fn, fuse=fuse)
    for i in range(5):   # calls 4 and 5 replay, on new arguments
        args = (T(3, 4), T(4), T(4, 4), T(3, 4))
        for g, e in zip(f(*args), fn(*args)): np.testing.assert_allclose(g.numpy(force=True), e.numpy(force=True), **TOL)
    assert isinstance(f.program, CudaProgram) and (f.program.stats['kernels'] > 0) == fuse

def test_fused_row_reductions_replay_on_cuda():
    "Over many short rows a kernel ends in its row's sum or max (one warp per row): softmax, log-softmax, a norm."
    F, rng = mi.nn.functional, np.random.default_rng(0)
    def fn(x, up):
        c = x - x.mean(-1, keepdims=True)
        h = F.softmax(x * 1.5, -1) + F.log_softmax(x, -1) + c / ((c * c).mean(-1, keepdims=True) + 1e-5).sqrt()
        loss = (h * up).sum()
        return (loss,) + mi.grad(loss, [x])
    T = lambda: mi.Tensor(rng.standard_normal((1030, 40)).astype('float32'), requires_grad=True, device='cuda')
    f = mi.compile(fn)
    for _ in range(4):
        args = (T(), T())
        for g, e in zip(f(*args), fn(*args)): np.testing.assert_allclose(g.numpy(force=True), e.numpy(force=True), rtol=1e-4, atol=1e-4)
    red = [i for i in f.program.instrs if i.prim == 'fused' and i.args[5][-1][4] == 'reduce']
    assert len(red) >= 3 and all('__shfl_xor_sync' in i.args[0].source for i in red)
