"""Unmodified torch scripts run with `python -m minima.run` (issue 34, chapter 18b): torch's module tree exists in
minima, an import hook binds it to `import torch`, and a missing feature is named with the script line that used it."""
import os, subprocess, sys, textwrap, warnings
import numpy as np, pytest, torch

import minima as mi
import minima.run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(mi.__file__)))

def run_script(tmp_path, src, *args, name='script.py'):
    "Run `src` as a file with `python -m minima.run`; return the completed process."
    p = tmp_path / name
    p.write_text(textwrap.dedent(src))
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''), OMP_NUM_THREADS='1')
    return subprocess.run([sys.executable, '-m', 'minima.run', str(p), *args], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)

TREE = ['torch', 'torch.nn', 'torch.nn.functional', 'torch.nn.init', 'torch.nn.utils', 'torch.nn.utils.rnn',
        'torch.nn.utils.convert_parameters', 'torch.optim', 'torch.optim.lr_scheduler', 'torch.utils',
        'torch.utils.data', 'torch.utils.data.dataloader', 'torch.utils.data.dataset', 'torch.utils.data.sampler',
        'torch.utils.data.distributed', 'torch.cuda', 'torch.cuda.amp', 'torch.backends', 'torch.backends.cudnn',
        'torch.backends.cuda', 'torch.backends.mps', 'torch.amp', 'torch.autograd', 'torch.onnx']

def test_module_tree_imports_under_the_runner(tmp_path):
    src = 'import importlib, torch\n' + ''.join(f'importlib.import_module({m!r})\n' for m in TREE) + textwrap.dedent('''
        from torch.utils.data.dataloader import DataLoader
        from torch.utils.data.sampler import RandomSampler
        from torch.nn.utils.rnn import pad_sequence, pack_padded_sequence, pad_packed_sequence
        from torch.optim.lr_scheduler import StepLR
        import torch.backends.cudnn as cudnn
        import minima
        assert torch is minima and torch.nn.functional is minima.nn.functional
        assert DataLoader is minima.data.DataLoader and torch.cuda.is_available() in (True, False)
        cudnn.benchmark = True; torch.backends.cuda.matmul.allow_tf32 = True
        print('ok', torch.cuda.device_count() == int(torch.cuda.is_available()), torch.backends.mps.is_available())
        ''')
    r = run_script(tmp_path, src)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ['ok', 'True', 'False']

def test_real_module_files():
    "The tree is made of importable modules with specs (files), also without the runner."
    import importlib.util
    for m in TREE[1:]:
        name = 'minima' + m[len('torch'):]
        if name == 'minima.cuda.amp': continue   # an alias of minima.amp
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin and spec.origin.endswith('.py'), name

def test_missing_module_and_name_are_named_with_the_script_line(tmp_path):
    r = run_script(tmp_path, 'import torch\nx = 1\nimport torch.fft\n')
    assert r.returncode != 0
    assert "ModuleNotFoundError: minima does not implement torch.fft (imported at script.py:3)" in r.stderr
    r = run_script(tmp_path, 'import torch.nn.functional as F\nassert not hasattr(F, "no_such")\nF.no_such(1)\n')
    assert r.returncode != 0
    assert "minima does not implement torch.nn.functional.no_such (used at script.py:3)" in r.stderr

def test_script_arguments_and_main_guard(tmp_path):
    src = '''
        import sys, argparse, torch
        p = argparse.ArgumentParser(); p.add_argument('--steps', type=int, default=1)
        if __name__ == '__main__':
            print(p.parse_args().steps, sys.argv[0].endswith('script.py'), torch.__name__)
        '''
    r = run_script(tmp_path, src, '--steps', '7')
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ['7', 'True', 'minima']

def test_torch_tensor_constructor_follows_torch_under_the_runner():
    "micrograd's `torch.Tensor([-4.0]).double()` then `requires_grad = True`: a leaf that gets its grad."
    with minima.run.as_torch():
        import torch as t
        x = t.Tensor([-4.0]).double()
        assert not t.Tensor([1.]).requires_grad and t.Tensor([1, 2]).dtype == 'float32'
        x.requires_grad = True
        (x * x).sum().backward()
        assert x.is_leaf and x.grad.numpy().tolist() == [-8.0]
        assert t.Tensor(2, 3).shape == (2, 3) and t.Tensor().shape == (0,)
        assert mi.nn.Linear(2, 3).weight.requires_grad          # minima's own code keeps needle's default
    import torch as real
    assert real is torch and mi.Tensor([1.]).requires_grad    # real torch and needle's default, again

def test_as_torch_restores_real_torch_and_removes_hooks():
    before = sys.modules['torch']
    with minima.run.as_torch() as t:
        import torch.nn.functional as F
        assert t is mi and F is mi.nn.functional
        with pytest.raises(AttributeError, match='minima does not implement torch.not_a_name'): t.not_a_name
    assert sys.modules['torch'] is before and '__getattr__' not in vars(mi)
    assert not any(isinstance(f, minima.run.TorchFinder) for f in sys.meta_path)
    with pytest.raises(AttributeError) as e: mi.not_a_name
    assert 'minima does not implement' not in str(e.value)

def test_device_is_cuda_and_format():
    # audit 4, M37: torch.device(...) and torch.cuda.is_available()
    d = mi.device('cuda' if mi.cuda.is_available() else 'cpu')
    td = torch.device(str(d))
    assert (d.type, d.index, repr(d), str(d)) == (td.type, td.index, repr(td), str(td))
    for spec in [('cuda', 1), ('cuda:0',), ('cpu',)]:
        assert repr(mi.device(*spec)) == repr(torch.device(*spec))
    with pytest.raises(RuntimeError): mi.device('tpu')
    x = mi.randn(2, 3).to(d)
    assert x.is_cuda == (d.type == 'cuda') and d == x.device and mi.nn.Linear(2, 2).to(d)
    loss, tloss = mi.tensor(0.123456), torch.tensor(0.123456)
    assert f"{loss:.4f}" == f"{tloss:.4f}" and '{:+.2f}'.format(loss) == '{:+.2f}'.format(tloss)
    with pytest.raises(TypeError): f"{mi.ones(2):.2f}"
    with pytest.raises(TypeError): f"{torch.ones(2):.2f}"

def test_cuda_module_is_callable_and_refuses_without_gpu():
    assert mi.cuda() is not None and mi.cuda.is_bf16_supported() is False
    mi.cuda.manual_seed(0); mi.cuda.manual_seed_all(0); mi.cuda.synchronize(); mi.cuda.empty_cache()
    if not mi.cuda.is_available():
        assert mi.cuda.device_count() == 0
        with pytest.raises(RuntimeError, match='no CUDA device'): mi.cuda.current_device()
    with pytest.raises(NotImplementedError, match='torch.onnx.export'): mi.onnx.export(mi.nn.Linear(1, 1), None, 'f')

def test_grad_scaler_matches_torch():
    "Scaled backward, unscale, a skipped inf step with back-off, growth after good steps: as torch.amp.GradScaler."
    tp, mp = torch.nn.Parameter(torch.tensor([1., 2.])), mi.nn.Parameter(mi.tensor([1., 2.]))
    to, mo = torch.optim.SGD([tp], lr=0.1), mi.optim.SGD([mp], lr=0.1)
    ts, ms = (L.amp.GradScaler('cpu', init_scale=1024., growth_interval=2) for L in (torch, mi))
    for i, bad in enumerate([False, True, False, False, False]):
        for L, p, o, s in ((torch, tp, to, ts), (mi, mp, mo, ms)):
            o.zero_grad()
            s.scale((p * p * (float('inf') if bad else 1.)).sum()).backward()
            s.step(o); s.update()
        assert np.allclose(tp.detach().numpy(), mp.detach().numpy()) and ts.get_scale() == ms.get_scale(), i
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        assert mi.cuda.amp.GradScaler(enabled=True).is_enabled() == mi.cuda.is_available()
    with mi.amp.autocast('cpu', dtype='bfloat16'):   # chapter 24: autocast runs, with torch's CPU policy
        assert (mi.ones(2, 2) @ mi.ones(2, 2)).dtype == 'bfloat16'
    with mi.amp.autocast('cpu', enabled=False): pass

@pytest.mark.parametrize('batch_first', [False, True])
@pytest.mark.parametrize('enforce_sorted', [False, True])
def test_rnn_pack_pad_match_torch(batch_first, enforce_sorted):
    # audit 4, M8: nn.utils.rnn pad_sequence / pack_padded_sequence / pad_packed_sequence
    rng = np.random.default_rng(1)
    lens = [5, 3, 2] if enforce_sorted else [3, 5, 2]
    x = rng.standard_normal((3, 5, 4) if batch_first else (5, 3, 4))
    tx, mx = torch.tensor(x, requires_grad=True), mi.tensor(x, requires_grad=True)
    TR, MR = torch.nn.utils.rnn, mi.nn.utils.rnn
    tp = TR.pack_padded_sequence(tx, lens, batch_first=batch_first, enforce_sorted=enforce_sorted)
    mp = MR.pack_padded_sequence(mx, lens, batch_first=batch_first, enforce_sorted=enforce_sorted)
    assert np.array_equal(tp.data.detach().numpy(), mp.data.detach().numpy())
    assert tp.batch_sizes.tolist() == mp.batch_sizes.numpy().tolist()
    (to, tl), (mo, ml) = TR.pad_packed_sequence(tp, batch_first), MR.pad_packed_sequence(mp, batch_first)
    assert np.array_equal(to.detach().numpy(), mo.detach().numpy()) and tl.tolist() == ml.detach().numpy().tolist()
    g = rng.standard_normal(to.shape)
    (to * torch.tensor(g)).sum().backward(); (mo * mi.tensor(g)).sum().backward()
    assert np.allclose(tx.grad.numpy(), mx.grad.numpy(), atol=1e-12)
    seqs = [rng.standard_normal((n, 2)) for n in lens]
    for side in ('right', 'left'):
        t = TR.pad_sequence([torch.tensor(s) for s in seqs], batch_first, 7., padding_side=side)
        m = MR.pad_sequence([mi.tensor(s) for s in seqs], batch_first, 7., padding_side=side)
        assert np.array_equal(t.numpy(), m.numpy())
    t, m = TR.pack_sequence([torch.tensor(s) for s in seqs], False), MR.pack_sequence([mi.tensor(s) for s in seqs], False)
    assert np.array_equal(t.data.numpy(), m.data.numpy())
    with pytest.raises(RuntimeError, match='sorted'): MR.pack_padded_sequence(mi.zeros(5, 3, 4), [2, 5, 3])

def test_parameters_to_vector_matches_torch():
    # audit 4, M7: parameters_to_vector / vector_to_parameters
    tm, mm = torch.nn.Linear(3, 2).double(), mi.nn.Linear(3, 2).double()
    mm.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})
    tv, mv = torch.nn.utils.parameters_to_vector(tm.parameters()), mi.nn.utils.parameters_to_vector(mm.parameters())
    assert np.array_equal(tv.detach().numpy(), mv.detach().numpy())
    g = np.arange(8.)
    (tv * torch.tensor(g)).sum().backward(); (mv * mi.tensor(g)).sum().backward()
    assert np.array_equal(tm.weight.grad.numpy(), mm.weight.grad.numpy())
    torch.nn.utils.vector_to_parameters(torch.tensor(g), tm.parameters())
    mi.nn.utils.vector_to_parameters(mi.tensor(g), mm.parameters())
    assert np.array_equal(tm.bias.detach().numpy(), mm.bias.detach().numpy()) and mm.weight.shape == (2, 3)
    with pytest.raises(ValueError): mi.nn.utils.vector_to_parameters(mi.tensor(np.ones(3)), mm.parameters())
