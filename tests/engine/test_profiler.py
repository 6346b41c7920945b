"""minima.profiler (chapter 23): what a profile records, that it leaves nothing behind, torch's table columns,
the trace file, debug printing, and compiled replays."""
import json, os, subprocess, sys
import numpy as np, pytest
import minima as mi
from minima import nn, optim
from minima.autograd import Op, TensorOp, TensorTupleOp, Tensor
from minima.backend_ndarray.device import NumpyDevice
from minima.compile import PRIMS, Program
from minima.nn.modules import Module
from minima.profiler import profile, record_function, set_debug, ProfilerActivity, flame_chart


def _seams():
    return (TensorOp.__call__, TensorTupleOp.__call__, Op.gradient_as_tuple, Tensor.backward, Module.__call__,
            Program.__call__, dict((n, NumpyDevice.__dict__.get(n)) for n in (*PRIMS, 'alloc')))


def test_records_ops_backward_and_primitives():
    x = mi.tensor(np.ones((5, 8), 'float32'), requires_grad=True)
    with profile(record_shapes=True, profile_memory=True) as p:
        with record_function('step'):
            (x * 2).exp().sum().backward()
    ev = p.events()
    assert ev[0].name == 'step' and ev[0].depth == 0 and all(e.depth > 0 for e in ev[1:])
    ops = [e.name for e in ev if e.kind == 'op' and e.depth == 1]
    assert ops == ['MulScalar', 'Exp', 'Summation']
    assert {'ExpBackward', 'MulScalarBackward', 'SummationBackward', 'Tensor.backward'} <= \
        {e.name for e in ev if e.kind == 'backward'}
    mul = next(e for e in ev if e.name == 'MulScalar')
    assert mul.input_shapes == [[5, 8]] and mul.self_cpu_memory_usage == 5 * 8 * 4
    assert [c.name for c in ev if c.parent is mul] == ['cpu::scalar.mul']
    # self times add up to the root's total
    assert abs(sum(e.self_cpu_time_total for e in ev) - ev[0].cpu_time_total) <= 1e-6 * ev[0].cpu_time_total + 1e-3
    # bytes propagate to the parents
    assert ev[0].cpu_memory_usage == sum(e.self_cpu_memory_usage for e in ev)


def test_key_averages_counts_and_table_sorting():
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    x = mi.randn(3, 4)
    with profile() as p:
        for _ in range(3): m(x).sum().backward()
    avg = {a.key: a for a in p.key_averages()}
    assert avg['LinearOp'].count == 6 and avg['nn.Module: Linear'].count == 6 and avg['Tensor.backward'].count == 3
    t = p.key_averages().table(sort_by='count', row_limit=2)
    rows = [l for l in t.splitlines()[3:5]]
    assert len(rows) == 2 and all(r.strip() for r in rows)
    counts = [int(r.split()[-1]) for r in rows]
    assert counts == sorted(counts, reverse=True) and counts[0] == max(a.count for a in avg.values())
    with pytest.raises(ValueError, match='sort_by'): p.key_averages().table(sort_by='cuda_time_total_typo')


def test_hooks_are_gone_after_profile_even_on_error():
    before = _seams()
    with pytest.raises(ZeroDivisionError):
        with profile():
            assert _seams() != before
            1 / 0
    assert _seams() == before
    set_debug(2); set_debug(0)
    assert _seams() == before


def test_one_profiler_at_a_time_and_argument_checks():
    with profile():
        with pytest.raises(RuntimeError, match='already running'): profile().start()
    with pytest.raises(TypeError, match='ProfilerActivity'): profile(activities=['cpu'])
    with pytest.raises(ValueError, match='with_stack'): profile(with_stack=True)
    with pytest.raises(ValueError, match='level'): set_debug(3)
    with pytest.raises(TypeError, match='str'): record_function(3)
    profile(activities=[ProfilerActivity.CPU])


def test_table_columns_match_torch():
    torch = pytest.importorskip('torch')
    from torch.profiler import profile as tprofile
    def header(t): return [c.strip() for c in t.splitlines()[1].split('  ') if c.strip()]
    for kw in (dict(), dict(profile_memory=True)):
        tx = torch.ones(2, 2, requires_grad=True)
        with tprofile(**kw) as tp: (tx * 2).sum().backward()
        x = mi.ones(2, 2, requires_grad=True)
        with profile(**kw) as p: (x * 2).sum().backward()
        assert header(p.key_averages().table()) == header(tp.key_averages().table())
    with tprofile(record_shapes=True) as tp: (tx * 2).sum()
    with profile(record_shapes=True) as p: (x * 2).sum()
    assert header(p.key_averages(group_by_input_shape=True).table()) == \
        header(tp.key_averages(group_by_input_shape=True).table())


def test_record_function_as_decorator_and_outside_a_profile():
    @record_function('f')
    def f(x): return x + 1
    x = mi.ones(2)
    f(x)   # nothing recording: just runs
    with profile() as p: f(x)
    names = [e.name for e in p.events()]
    assert names[:2] == ['f', 'EWiseAdd'] or names[:2] == ['f', 'AddScalar']


def test_chrome_trace(tmp_path):
    x = mi.ones(3, 3, requires_grad=True)
    with profile(record_shapes=True) as p:
        with record_function('outer'): (x @ x).sum().backward()
    path = tmp_path / 't.json'
    p.export_chrome_trace(str(path))
    tr = json.loads(path.read_text())['traceEvents']
    assert len(tr) == len(p.events()) and all(t['ph'] == 'X' and t['dur'] >= 0 for t in tr)
    outer = tr[0]
    assert outer['name'] == 'outer'
    for t in tr[1:]:   # every event nests inside the outer one
        assert outer['ts'] <= t['ts'] and t['ts'] + t['dur'] <= outer['ts'] + outer['dur'] + 1e-3
    mm = next(t for t in tr if t['name'] == 'MatMul')
    assert mm['args']['Input Dims'] == [[3, 3], [3, 3]]


def test_compiled_replay_is_profiled_call_by_call():
    m = nn.Linear(4, 2)
    o = optim.SGD(m.parameters(), lr=0.1)
    def step(x):
        o.zero_grad(); loss = m(x).sum(); loss.backward(); o.step(); return loss
    c = mi.compile(step)
    x = mi.randn(3, 4)
    with profile() as p0:   # a capture inside a profile: both see the primitives
        for _ in range(3): c(x)
    assert any(e.kind == 'prim' for e in p0.events()) and c.program is not None
    ref = [float(c(x).numpy()) for _ in range(2)]
    with profile() as p:
        got = float(c(x).numpy())
    ev = p.events()
    replays = [e for e in ev if e.name.startswith('replay::')]
    assert [e.name for e in ev if e.kind == 'compiled'] == ['compiled program']
    assert len(replays) == len(c.program.instrs)
    assert ref[1] > got   # the replay still trains (the loss keeps falling) with the profiler's wrappers
    assert not any(e.kind == 'op' for e in ev)   # a replay runs no Python ops


def test_debug_env_prints_ops_and_primitives():
    src = "import minima as mi; x = mi.ones(2, 3); y = (x + x).sum()"
    env = {**os.environ, 'MINIMA_DEBUG': '1'}
    out1 = subprocess.run([sys.executable, '-c', src], capture_output=True, text=True, env=env).stdout
    assert out1.split()[0] == 'EWiseAdd' and '(2, 3)' in out1 and 'cpu::' not in out1
    env['MINIMA_DEBUG'] = '2'
    out2 = subprocess.run([sys.executable, '-c', src], capture_output=True, text=True, env=env).stdout
    assert 'cpu::ewise.add' in out2 and 'EWiseAdd' in out2
    env['MINIMA_DEBUG'] = 'yes'
    bad = subprocess.run([sys.executable, '-c', src], capture_output=True, text=True, env=env)
    assert bad.returncode != 0 and 'MINIMA_DEBUG' in bad.stderr


def test_flame_chart_draws_one_bar_per_event():
    import matplotlib; matplotlib.use('Agg')
    x = mi.ones(2, 2, requires_grad=True)
    with profile() as p: (x * 3).sum().backward()
    ax = flame_chart(p.events())
    assert len(ax.patches) == len(p.events())
    with pytest.raises(ValueError, match='no events'): flame_chart([])


def _cuda_or_skip():
    try: d = mi.cuda()
    except ImportError as e: pytest.skip(f'CUDA device module unavailable: {e}')
    if not d.enabled(): pytest.skip('no CUDA device (tools/cuda_emu/run_tests-style emulation also works)')
    return d


def test_cuda_primitives_are_recorded_and_synchronised_with_the_cuda_activity(monkeypatch):
    d = _cuda_or_skip()
    calls = []
    real = type(d).synchronize
    monkeypatch.setattr(type(d), 'synchronize', lambda self: (calls.append(1), real(self))[1])
    x = mi.ones(4, 4, device=d, requires_grad=True)
    with profile() as p: (x * 2).sum().backward()
    prims = [e for e in p.events() if e.kind == 'prim']
    assert prims and all(e.device == 'cuda' and e.name.startswith('cuda::') for e in prims) and not calls
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p: (x * 2).sum().backward()
    n = sum(e.kind == 'prim' and e.device == 'cuda' for e in p.events())
    assert n > 0 and len(calls) == n   # every CUDA primitive waited for, so its range covers the kernel
