"""Property-based tests: hypothesis draws shapes, broadcast pairs, axes, indices and values (within each op's
registered domain) and runs the ops through the `check_op` harness: forward and backward against torch, float64
finite differences and second derivatives. Examples are few and small, so the whole file runs in well under a minute."""
import dataclasses
import numpy as np
import pytest
from hypothesis import given, settings, HealthCheck, strategies as st
from hypothesis.extra.numpy import array_shapes, mutually_broadcastable_shapes
from minima.testing import REGISTRY, case, check_op, get_spec

SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck), database=None)

def run(name, c, seed):
    "Run the registered op `name` on the drawn case `c` through the whole harness."
    spec = dataclasses.replace(get_spec(name), cases=[c])
    check_op(spec, seed=seed)

shapes = lambda min_dims=0, max_dims=3: array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=1, max_side=4)
seeds = st.integers(0, 2 ** 16)

UNARY = ['negate', 'exp', 'log', 'sqrt', 'square', 'sin', 'cos', 'tanh', 'sigmoid', 'relu', 'abs', 'silu', 'gelu', 'gelu_exact', 'erf',
         'add_scalar', 'sub_scalar', 'mul_scalar', 'divide_scalar', 'rsub_scalar', 'rdivide_scalar', 'rpower_scalar']
BINARY = ['add', 'subtract', 'multiply', 'divide', 'power', 'maximum', 'minimum', 'maximum_ties', 'minimum_ties',
          'equal', 'not_equal', 'less', 'less_equal', 'greater', 'greater_equal']

@settings(max_examples=40, **SETTINGS)
@given(name=st.sampled_from(UNARY), shape=shapes(), seed=seeds)
def test_unary(name, shape, seed): run(name, case(shape), seed)

@settings(max_examples=40, **SETTINGS)
@given(name=st.sampled_from(BINARY), shapes=mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=4), seed=seeds)
def test_binary_broadcast(name, shapes, seed): run(name, case(*shapes.input_shapes), seed)

@settings(max_examples=8, **SETTINGS)
@given(shapes=mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3), seed=seeds)
def test_where_broadcast(shapes, seed): run('where', case(*shapes.input_shapes), seed)

@st.composite
def shape_and_axes(draw, min_dims=0):
    shape = draw(shapes(min_dims))
    nd = len(shape)
    if nd == 0 or draw(st.booleans()): return shape, None
    axes = draw(st.lists(st.integers(0, nd - 1), min_size=1, max_size=nd, unique=True))
    return shape, tuple(a - nd if draw(st.booleans()) else a for a in axes)

@settings(max_examples=40, **SETTINGS)
@given(name=st.sampled_from(['summation', 'mean', 'amax', 'amin', 'amax_ties', 'amin_ties', 'logsumexp']),
       sa=shape_and_axes(), keepdims=st.booleans(), seed=seeds)
def test_reductions(name, sa, keepdims, seed):
    shape, axes = sa
    run(name, case(shape, axes=axes, keepdims=keepdims), seed)

@settings(max_examples=15, **SETTINGS)
@given(name=st.sampled_from(['argmax', 'argmin']), shape=shapes(1), data=st.data(), keepdims=st.booleans(), seed=seeds)
def test_arg_reductions(name, shape, data, keepdims, seed):
    axis = data.draw(st.one_of(st.none(), st.integers(-len(shape), len(shape) - 1)))
    run(name, case(shape, axis=axis, keepdims=keepdims), seed)

@settings(max_examples=15, **SETTINGS)
@given(name=st.sampled_from(['softmax', 'log_softmax']), shape=shapes(1), data=st.data(), seed=seeds)
def test_softmax_axes(name, shape, data, seed):
    run(name, case(shape, axis=data.draw(st.integers(-len(shape), len(shape) - 1))), seed)

@settings(max_examples=15, **SETTINGS)
@given(shape=shapes(), data=st.data(), seed=seeds)
def test_permute_flip_transpose(shape, data, seed):
    nd = len(shape)
    run('permute', case(shape, axes=tuple(data.draw(st.permutations(range(nd))))), seed)
    run('flip', case(shape, axes=data.draw(st.one_of(st.none(), st.lists(st.integers(0, max(nd - 1, 0)), min_size=1, max_size=max(nd, 1), unique=True).map(tuple)))) if nd else case(shape), seed)
    if nd >= 2: run('transpose', case(shape, axes=tuple(data.draw(st.lists(st.integers(-nd, nd - 1), min_size=2, max_size=2, unique_by=lambda a: a % nd)))), seed)

@settings(max_examples=15, **SETTINGS)
@given(shape=shapes(), data=st.data(), seed=seeds)
def test_reshape_squeeze_unsqueeze(shape, data, seed):
    size = int(np.prod(shape))
    target = data.draw(st.sampled_from([tuple(reversed(shape)), (size,), (1,) + tuple(shape), (-1,), (size, 1)]))
    run('reshape', case(shape, shape=target), seed)
    run('unsqueeze', case(shape, axis=data.draw(st.integers(-len(shape) - 1, len(shape)))), seed)
    padded = list(shape)
    for _ in range(data.draw(st.integers(1, 2))): padded.insert(data.draw(st.integers(0, len(padded))), 1)
    ones = [i for i, n in enumerate(padded) if n == 1]
    axes = data.draw(st.one_of(st.none(), st.lists(st.sampled_from(ones), min_size=1, unique=True).map(tuple)))
    run('squeeze', case(tuple(padded), axes=axes), seed)

@settings(max_examples=15, **SETTINGS)
@given(target=shapes(1), data=st.data(), seed=seeds)
def test_broadcast_to(target, data, seed):
    drop = data.draw(st.integers(0, len(target)))
    src = tuple(1 if data.draw(st.booleans()) else n for n in target[drop:])
    run('broadcast_to', case(src, shape=target), seed)

@st.composite
def index_for(draw, shape):
    idx = []
    for n in shape:
        kind = draw(st.sampled_from(['int', 'slice', 'all']))
        if kind == 'int': idx.append(draw(st.integers(-n, n - 1)))
        elif kind == 'all': idx.append(slice(None))
        else:
            step = draw(st.sampled_from([1, 2, 3, -1, -2]))
            start, stop = draw(st.one_of(st.none(), st.integers(-n - 1, n + 1))), draw(st.one_of(st.none(), st.integers(-n - 1, n + 1)))
            idx.append(slice(start, stop, step))
    if draw(st.booleans()): idx.insert(draw(st.integers(0, len(idx))), None)
    return tuple(idx)

@settings(max_examples=40, **SETTINGS)
@given(shape=shapes(1), data=st.data(), seed=seeds)
def test_getitem(shape, data, seed):
    run('getitem', case(shape, idx=data.draw(index_for(shape))), seed)

@settings(max_examples=15, **SETTINGS)
@given(shape=shapes(1), data=st.data(), seed=seeds)
def test_pad_shrink_dilate(shape, data, seed):
    pw = tuple((data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2))) for _ in shape)
    run('pad', case(shape, pad_width=pw, value=data.draw(st.sampled_from([0.0, -1.5]))), seed)
    run('clamp', case(shape, lo=-0.5, hi=data.draw(st.sampled_from([None, 0.3]))), seed)
    bounds = []
    for n in shape:
        lo = data.draw(st.integers(0, n)); bounds.append((lo, data.draw(st.integers(lo, n))))
    run('shrink', case(shape, bounds=tuple(bounds)), seed)
    axes = tuple(data.draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True)))
    d = data.draw(st.integers(0, 2))
    run('dilate', case(shape, axes=axes, dilation=d), seed)
    run('undilate', case(shape, axes=axes, dilation=d), seed)

@settings(max_examples=15, **SETTINGS)
@given(shape=shapes(1), data=st.data(), seed=seeds)
def test_stack_split_concatenate(shape, data, seed):
    nd = len(shape)
    k = data.draw(st.integers(1, 3))
    run('stack', case(*[shape] * k, axis=data.draw(st.integers(-nd - 1, nd))), seed)
    axis = data.draw(st.integers(-nd, nd - 1))
    n = shape[axis]
    cuts = sorted(data.draw(st.lists(st.integers(0, n), max_size=3)))
    sizes = [b - a for a, b in zip([0] + cuts, cuts + [n])]
    run('split', case(shape, axis=axis, sizes=data.draw(st.sampled_from([None, sizes]))), seed)
    parts = [tuple(data.draw(st.integers(1, 3)) if i == axis % nd else s for i, s in enumerate(shape)) for _ in range(k)]
    run('concatenate', case(*parts, axis=axis), seed)

@settings(max_examples=10, **SETTINGS)
@given(shape=array_shapes(min_dims=3, max_dims=4, min_side=2, max_side=4), mode=st.sampled_from(['reflect', 'replicate']), data=st.data(), seed=seeds)
def test_edge_pad(shape, mode, data, seed):
    "torch pads only the last one to three axes in these modes, of a batched or unbatched input."
    k = data.draw(st.integers(1, len(shape) - 1 if len(shape) < 4 else 2))
    pw = tuple((0, 0) if i < len(shape) - k else (data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, n - 1)))
               for i, n in enumerate(shape))
    run('pad_' + mode, case(shape, pad_width=pw), seed)

@settings(max_examples=15, **SETTINGS)
@given(m=st.integers(1, 3), n=st.integers(1, 3), p=st.integers(1, 3), vec=st.sampled_from(['', 'a', 'b', 'ab']),
       batch=mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3), seed=seeds)
def test_matmul(m, n, p, vec, batch, seed):
    a = (n,) if 'a' in vec else batch.input_shapes[0] + (m, n)
    b = (n,) if 'b' in vec else batch.input_shapes[1] + (n, p)
    run('matmul', case(a, b), seed)

MY_OPS = sorted(name for name, s in REGISTRY.items() if getattr(s.fn, '__module__', '').startswith('minima.ops.'))

@pytest.mark.parametrize('name', MY_OPS)
@settings(max_examples=1, **SETTINGS)
@given(seed=st.integers(1, 2 ** 16))
def test_registered_cases_with_random_values(name, seed):
    "Every registered op of the catalog, on its registered cases, with values drawn from another seed."
    check_op(name, seed=seed)
