"""Run a public torch program unmodified, on real torch or on minima (`minima.run.as_torch()`), and record its losses.

usage: python harness.py torch|minima OUT.json WEIGHTS.npz (script.py | -m module) [args...]

Both sides are made to start from the same numbers, without touching the program's text:
- weights: the first call of each outermost module saves its state_dict (torch side, to WEIGHTS.npz) or loads the
  saved one (minima side), in the order the modules are first called;
- random numbers: torch's top-level sampling functions (`rand`, `randn`, `randint`, `randperm`, `multinomial`,
  `rand_like`, `randn_like`) draw from one numpy generator (seed 0) on both sides, so the data batches, the targets
  and the generated tokens are the same.
With HARNESS_TENSORBOARD=1, `torch.utils.tensorboard.SummaryWriter` is a stand-in that records scalars, on both sides
(torch's needs the tensorboard package, which is not a test dependency).
With HARNESS_TORCHVISION=1, `import torchvision` finds the small stand-in in drivers/standins (real MNIST digits
from $MINIMA_DATA), on both sides.
With HARNESS_NO_DROPOUT=1, every dropout (modules, and attention's `dropout` probability) is set to 0 at that first
call, on both sides, for programs without a flag for it.
Recorded in OUT.json: the value of every scalar passed to `backward()`, the program's stdout tail, and the exception
that stopped it (None when it ran to the end)."""
import io, json, os, runpy, sys, traceback
import numpy as np

mode, out_path, weights_path, *prog = sys.argv[1:]
RNG = np.random.default_rng(0)
LOSSES, SAVED, LOADED = [], [], []

if mode == 'minima':
    import minima, minima.run
    _ctx = minima.run.as_torch()
    lib, Module = minima, minima.nn.Module
else:
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(0)   # a program that never seeds (regression) starts from the same weights every run
    lib, Module = torch, torch.nn.Module

def _size(size):
    return tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)

def _t(a, dtype=None, device=None, requires_grad=False):
    t = lib.tensor(a, dtype=dtype) if dtype is not None else lib.tensor(a)
    return t.requires_grad_() if requires_grad else t

def randn(*size, dtype=None, device=None, requires_grad=False, generator=None, **kw):
    return _t(RNG.standard_normal(_size(size)).astype('float32'), dtype, device, requires_grad)
def rand(*size, dtype=None, device=None, requires_grad=False, generator=None, **kw):
    return _t(RNG.random(_size(size)).astype('float32'), dtype, device, requires_grad)
def randint(low=0, high=None, size=None, generator=None, dtype=None, device=None, **kw):
    if size is None and isinstance(high, (tuple, list)): low, high, size = 0, low, high   # randint(high, size)
    if high is None: low, high = 0, low
    return _t(RNG.integers(low, high, size=tuple(size)).astype('int64'), dtype, device)
def randperm(n, generator=None, dtype=None, device=None, **kw): return _t(RNG.permutation(n).astype('int64'), dtype)
def randn_like(x, dtype=None, **kw): return randn(*x.shape, dtype=dtype or x.dtype)
def rand_like(x, dtype=None, **kw): return rand(*x.shape, dtype=dtype or x.dtype)
def multinomial(input, num_samples, replacement=False, generator=None):
    p = np.asarray(input.detach().numpy(), 'float64')
    rows = p.reshape(-1, p.shape[-1])
    out = [RNG.choice(rows.shape[1], size=num_samples, replace=replacement, p=r / r.sum()) for r in rows]
    return lib.tensor(np.stack(out).reshape(*p.shape[:-1], num_samples).astype('int64'))
for f in (randn, rand, randint, randperm, randn_like, rand_like, multinomial): setattr(lib, f.__name__, f)

if os.environ.get('HARNESS_TORCHVISION'):   # torchvision is another library: its stand-in, on both sides
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), 'drivers', 'standins'))

if os.environ.get('HARNESS_TENSORBOARD'):   # torch.utils.tensorboard needs the tensorboard package, not installed here
    import types
    class SummaryWriter:
        "Stands in for torch's SummaryWriter on both sides: it keeps the scalars and writes nothing."
        def __init__(self, log_dir=None, **kw): self.scalars = []
        def add_scalar(self, tag, value, step=None, *a, **kw): self.scalars.append((tag, float(value), step))
        def flush(self): pass
        def close(self): pass
    sys.modules['torch.utils.tensorboard'] = types.ModuleType('torch.utils.tensorboard')
    sys.modules['torch.utils.tensorboard'].SummaryWriter = SummaryWriter

_backward = lib.Tensor.backward
def backward(self, *args, **kwargs):
    if self.numel() == 1: LOSSES.append(float(self.detach().numpy().reshape(())))
    return _backward(self, *args, **kwargs)
lib.Tensor.backward = backward

_call, _depth, _seen = Module.__call__, [0], set()
_store = dict(np.load(weights_path)) if mode == 'minima' else {}
def call(self, *args, **kwargs):
    if _depth[0] == 0 and id(self) not in _seen:   # an outermost module, called for the first time
        _seen.add(id(self))
        i = len(_seen) - 1
        if os.environ.get('HARNESS_NO_DROPOUT'):   # masks come from different generators: make dropout the identity
            for m in self.modules():
                if 'Dropout' in type(m).__name__: m.p = 0.0
                elif isinstance(getattr(m, 'dropout', None), float): m.dropout = 0.0
        if mode == 'torch':
            for k, v in self.state_dict().items(): SAVED.append((f'{i}/{k}', v.detach().cpu().numpy().copy()))
        else:
            sd = {k.split('/', 1)[1]: v for k, v in _store.items() if k.split('/', 1)[0] == str(i)}
            self.load_state_dict(sd)
            LOADED.append(len(sd))
    _depth[0] += 1
    try: return _call(self, *args, **kwargs)
    finally: _depth[0] -= 1
Module.__call__ = call

buf, stop = io.StringIO(), None
_stdout, sys.stdout = sys.stdout, buf
try:
    if prog[0] == '-m':
        sys.argv = prog[1:]
        runpy.run_module(prog[1], run_name='__main__', alter_sys=True)
    else:
        sys.argv = prog
        sys.path.insert(0, os.path.dirname(os.path.abspath(prog[0])))
        runpy.run_path(prog[0], run_name='__main__')
except SystemExit as e:
    if e.code not in (0, None): stop = f'SystemExit: {e.code}'
except BaseException as e:
    stop = f'{type(e).__name__}: {e}'
    tb = traceback.extract_tb(e.__traceback__)
    stop += ' @ ' + ' < '.join(f'{os.path.basename(f.filename)}:{f.lineno}' for f in tb[::-1][:3])
finally:
    sys.stdout = _stdout
if mode == 'torch': np.savez(weights_path, **dict(SAVED))
json.dump(dict(losses=LOSSES, stop=stop, out=buf.getvalue()[-3000:], loaded=LOADED), open(out_path, 'w'))
