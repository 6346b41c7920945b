"""The op contract of chapter 01: an op keeps its hyper-parameters (set in `__init__`) and what `compute` hands to
`gradient` through `self.save(...)` / `self.saved`, nothing else. Every registered op's cases run forward and
backward (plain, and with a graph for second order) while `Op.__setattr__` watches who sets what."""
import sys
import numpy as np
import pytest
import minima as mi
from minima.autograd import Op, Tensor
from minima.testing import REGISTRY, registered_ops
from minima.testing import case_inputs, diff_positions, minima_inputs, as_list


def _setter(op):
    "The op's own method that is setting an attribute now: the nearest frame whose `self` is `op`."
    f = sys._getframe(2)
    while f is not None:
        if f.f_locals.get('self') is op: return f.f_code.co_name, f
        f = f.f_back
    return None, None


def _in_compute(op, f):
    while f is not None:
        if f.f_locals.get('self') is op and f.f_code.co_name == 'compute': return True
        f = f.f_back
    return False


@pytest.fixture
def watched(monkeypatch):
    seen = []
    plain = object.__setattr__
    def watch(self, name, value):
        who, f = _setter(self)
        if who not in ('save', '__init__') and _in_compute(self, f): seen.append((type(self).__name__, name))
        plain(self, name, value)
    monkeypatch.setattr(Op, '__setattr__', watch)
    return seen


def _run(spec, c, rng, create_graph):
    arrs = case_inputs(spec, c, rng)
    diff = diff_positions(spec, arrs)
    xs = minima_inputs(arrs, diff, 'float64', mi.cpu())
    outs = [y for y in as_list(spec.fn(*xs, **c.kwargs))
            if isinstance(y, Tensor) and y.requires_grad]
    if not outs: return
    loss = sum(((y * Tensor(rng.standard_normal(y.shape), dtype=y.dtype)).sum() for y in outs), Tensor(0.0, dtype='float64'))
    loss.backward(create_graph=create_graph)


@pytest.mark.parametrize('name', registered_ops())
def test_compute_keeps_state_only_through_save(name, watched):
    spec, rng = REGISTRY[name], np.random.default_rng(0)
    for c in spec.cases:
        for create_graph in (False, True):
            _run(spec, c, rng, create_graph)
    assert not watched, f'{name}: compute sets attributes other than through self.save(...): {sorted(set(watched))}'


def test_the_watch_catches_an_attribute_set_in_compute(watched):
    from minima.autograd import TensorOp
    class Leaky(TensorOp):
        def __init__(self, k): self.k = k
        def compute(self, a): self.kept = a; return a * self.k
        def gradient(self, g, node): return g * self.k
    class Saving(TensorOp):
        def compute(self, a): self.save(a); return a * 2.0
        def gradient(self, g, node): (a,) = self.saved; return g * 2.0
    Saving()(Tensor([1.0])); assert not watched
    Leaky(2.0)(Tensor([1.0]))
    assert watched == [('Leaky', 'kept')]


def test_saved_without_save_is_a_clear_error():
    from minima.autograd import TensorOp
    class Forgetful(TensorOp):
        def compute(self, a): return a
        def gradient(self, g, node): return g * self.saved[0]
    x = Tensor([1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match='Forgetful.*saved'):
        Forgetful()(x).sum().backward()


def test_op_class_defaults_agree_with_the_function():
    import inspect
    from minima.ops import GELUOp, gelu
    assert inspect.signature(GELUOp).parameters['approximate'].default == \
        inspect.signature(gelu).parameters['approximate'].default == 'none'
    x = Tensor(np.linspace(-3, 3, 7))
    assert np.array_equal(GELUOp()(x).detach().numpy(), gelu(x).detach().numpy())


def test_saved_state_is_not_in_the_repr():
    from minima.ops import GELUOp
    op = GELUOp('tanh')
    op(Tensor([0.5, -1.0]))
    assert repr(op) == "GELUOp(approximate='tanh')" and len(op.saved) == 1
