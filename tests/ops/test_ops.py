"""Registry-wide harness: every registered op against torch (forward, backward with a random upstream gradient,
float64 finite differences, second order), on every available device. An op class without a registration fails."""
import importlib, inspect, pkgutil, pytest
import minima
from minima.autograd import TensorOp, TensorTupleOp
from minima.testing import REGISTRY, check_op
from conftest import DEVICES

def _op_modules():
    mods = [importlib.import_module(f'minima.ops.{m.name}') for m in pkgutil.iter_modules(minima.ops.__path__)]
    try: mods.append(importlib.import_module('minima.nn.functional'))
    except ImportError: pass
    return mods

def _op_classes():
    out = {}
    for mod in _op_modules():
        for name, obj in vars(mod).items():
            if inspect.isclass(obj) and issubclass(obj, (TensorOp, TensorTupleOp)) and obj.__module__ == mod.__name__:
                out[f'{mod.__name__}.{name}'] = obj
    return out

# The plumbing of Module's full backward hooks (chapter 10b): ops with state, no torch function
# to compare one by one; `register_full_backward_hook` is compared with torch's end to end
# (tests/torch/test_torch_nn.py).
HOOK_PLUMBING = {'minima.ops.hooks.BackwardGate', 'minima.ops.hooks.GatePick'}

@pytest.mark.parametrize('qualname', sorted(set(_op_classes()) - HOOK_PLUMBING))
def test_every_op_is_registered(qualname):
    cls = _op_classes()[qualname]
    assert any(s.op is cls for s in REGISTRY.values()), f'{qualname} has no register_op(..., op={cls.__name__}) entry'

@pytest.mark.parametrize('dev', DEVICES)
@pytest.mark.parametrize('name', sorted(REGISTRY))
def test_op_harness(name, dev):
    check_op(name, device=dev)
