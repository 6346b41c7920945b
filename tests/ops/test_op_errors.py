"""Bad input: every op of the catalog rejects what it cannot do with a specific exception whose message names the op
and the offending values (ValueError for shapes and axes, TypeError for dtypes and kinds, IndexError for indices,
RuntimeError for autograd/device state)."""
import numpy as np
import pytest
import minima as mi
from minima import ops

def T(*shape, dtype='float32', rg=True):
    return mi.Tensor(np.arange(int(np.prod(shape)), dtype='float64').reshape(shape) + 1, dtype=dtype, requires_grad=rg)

BINARY = ['add', 'subtract', 'multiply', 'divide', 'power', 'maximum', 'minimum',
          'equal', 'not_equal', 'less', 'less_equal', 'greater', 'greater_equal']

CASES = [
    ('exp-list', lambda: ops.exp([1.0]), TypeError, r'exp: expected a Tensor, got list'),
    ('log-list', lambda: ops.log([1.0]), TypeError, r'log: expected a Tensor, got list'),
    ('erf-number', lambda: ops.erf(1.0), TypeError, r'erf: expected a Tensor, got float'),
    # elementwise
    *[(f'{n}-broadcast', lambda n=n: getattr(ops, n)(T(2, 3), T(4)), ValueError, rf'{n}: shapes \(2, 3\) and \(4,\) cannot be broadcast') for n in BINARY],
    ('add-no-tensor', lambda: ops.add(1.0, 2.0), TypeError, r'add: expected at least one Tensor, got float and float'),
    ('sigmoid-list', lambda: ops.sigmoid([1.0]), TypeError, r'sigmoid: expected a Tensor, got list'),
    ('where-broadcast', lambda: ops.where(T(2, 3) > 1, T(3, 2), T(2, 3)), ValueError, r'where: shapes .*\(2, 3\) and \(3, 2\).* cannot be broadcast'),
    ('where-cond-dtype', lambda: ops.where(T(2, 3), T(2, 3), 0.0), TypeError, r'where: the condition must be a bool tensor, got dtype float32'),
    ('where-no-tensor', lambda: ops.where(True, 1.0, 2.0), TypeError, r'where: a or b must be a Tensor'),
    ('gelu-approximate', lambda: ops.gelu(T(3), approximate='fast'), ValueError, r"gelu: approximate must be 'tanh' or 'none', got 'fast'"),
    ('clamp-no-bounds', lambda: ops.clamp(T(3)), ValueError, r'clamp: at least one of lo and hi must be given'),
    ('compare-kind', lambda: ops.Compare('almost'), ValueError, r"Compare: unknown comparison 'almost'"),
    # reductions
    *[(f'{n}-axis', lambda n=n: getattr(ops, n)(T(2, 3), axes=2), ValueError, rf'{n}: axis 2 is out of range for an array with 2 dimensions')
      for n in ['summation', 'mean', 'amax', 'amin', 'logsumexp']],
    *[(f'{n}-neg-axis', lambda n=n: getattr(ops, n)(T(2, 3), axes=(-3,)), ValueError, rf'{n}: axis -3 is out of range') for n in ['summation', 'amax']],
    ('mean-repeated', lambda: ops.mean(T(2, 3), axes=(1, -1)), ValueError, r'mean: axis -1 is repeated in \(1, -1\)'),
    ('summation-axis-type', lambda: ops.summation(T(2, 3), axes=1.5), TypeError, r'summation: axis must be an int, got 1.5'),
    ('amax-empty', lambda: ops.amax(mi.Tensor(np.zeros((2, 0))), axes=1), ValueError, r'amax: cannot reduce over a zero-size axis \(shape \(2, 0\)'),
    ('amin-empty', lambda: ops.amin(mi.Tensor(np.zeros((0,)))), ValueError, r'amin: cannot reduce over a zero-size axis'),
    ('argmax-axis', lambda: ops.argmax(T(2, 3), axis=2), ValueError, r'argmax: axis 2 is out of range'),
    ('argmin-axes-tuple', lambda: ops.argmin(T(2, 3), axis=(0, 1)), TypeError, r'argmin: axis must be an int or None, got \(0, 1\)'),
    ('argmax-empty', lambda: ops.argmax(mi.Tensor(np.zeros((0, 2)))), IndexError, r'argmax\(\): Expected reduction dim to be specified for input.numel\(\) == 0'),
    ('softmax-axis', lambda: ops.softmax(T(2, 3), axis=2), ValueError, r'softmax: axis 2 is out of range'),
    ('log_softmax-0d', lambda: ops.log_softmax(mi.Tensor(1.0)), ValueError, r'log_softmax: needs at least one dimension'),
    ('softmax-axis-type', lambda: ops.softmax(T(2, 3), axis=None), TypeError, r'softmax: axis must be an int, got None'),
    # movement
    ('reshape-size', lambda: ops.reshape(T(2, 3), (4,)), ValueError, r'reshape: cannot reshape array of shape \(2, 3\) \(size 6\) into \(4,\)'),
    ('reshape-two-minus-one', lambda: ops.reshape(T(2, 3), (-1, -1)), ValueError, r'reshape: only one dimension can be -1'),
    ('broadcast_to', lambda: ops.broadcast_to(T(2, 3), (4, 3)), ValueError, r'broadcast_to: cannot broadcast shape \(2, 3\) to \(4, 3\)'),
    ('expand-fewer-dims', lambda: ops.expand(T(2, 3), (3,)), ValueError, r'expand: target shape \(3,\) has fewer dimensions'),
    ('transpose-axis', lambda: ops.transpose(T(2, 3), (0, 5)), ValueError, r'transpose: axis 5 is out of range for 2 dimensions'),
    ('transpose-1d', lambda: ops.transpose(T(3)), ValueError, r'transpose: needs at least 2 dimensions, got 1'),
    ('permute-not-perm', lambda: ops.permute(T(2, 3), (0, 0)), ValueError, r'permute: \(0, 0\) is not a permutation of the 2 axes of shape \(2, 3\)'),
    ('permute-length', lambda: ops.permute(T(2, 3), (1, 0, 2)), ValueError, r'permute: \(1, 0, 2\) is not a permutation'),
    ('squeeze-not-one', lambda: ops.squeeze(T(2, 1, 3), 2), ValueError, r'squeeze: cannot squeeze axis 2 of shape \(2, 1, 3\): its size is 3, not 1'),
    ('squeeze-axis', lambda: ops.squeeze(T(2, 1), 4), ValueError, r'squeeze: axis 4 is out of range'),
    ('unsqueeze-axis', lambda: ops.unsqueeze(T(2, 3), 4), ValueError, r'unsqueeze: axis 4 is out of range for a tensor with 2 dimensions \(valid: -3..2\)'),
    ('flip-axis', lambda: ops.flip(T(2, 3), (3,)), ValueError, r'flip: axis 3 is out of range'),
    ('flatten-order', lambda: ops.flatten(T(2, 3, 4), 2, 1), ValueError, r'flatten: start_dim 2 comes after end_dim 1'),
    ('getitem-range', lambda: T(3, 4)[5], IndexError, r'getitem: index 5 is out of range for axis 0 with size 3'),
    ('getitem-neg-range', lambda: T(3, 4)[:, -5], IndexError, r'getitem: index -5 is out of range for axis 1 with size 4'),
    ('getitem-too-many', lambda: T(3)[0, 0], IndexError, r'getitem: too many indices \(2\) for an array with 1 dimensions'),
    ('getitem-step-zero', lambda: T(3)[::0], ValueError, r'slice step cannot be zero'),
    ('getitem-float-array', lambda: T(3)[np.array([0.5])], IndexError, r'getitem: index arrays must hold integers or booleans, got float64'),
    ('getitem-mask-shape', lambda: T(3)[np.array([True, False])], IndexError, r'getitem: the mask of shape \(2,\) does not match the indexed shape \(3,\)'),
    ('getitem-array-range', lambda: T(3)[np.array([0, 3])], IndexError, r'getitem: index 3 is out of range for an axis of size 3'),
    ('getitem-float', lambda: T(3)[1.5], IndexError, r'getitem: only integers, slices, None and ... are valid indices, got 1.5'),
    ('setitem-requires-grad', lambda: T(3).__setitem__(0, 1.0), RuntimeError, r'setitem: cannot assign in place into a tensor that requires grad \(shape \(3,\)\)'),
    ('setitem-shape', lambda: T(3, 4, rg=False).__setitem__(0, T(3, rg=False)), ValueError, r'setitem: shapes \(3,\) and \(4,\) cannot be broadcast'),
    ('setitem-range', lambda: T(3, rg=False).__setitem__(3, 1.0), IndexError, r'index 3 is out of range for axis 0 with size 3'),
    ('pad-pairs', lambda: ops.pad(T(2, 3), ((1, 1),)), ValueError, r'pad: expected 2 \(before, after\) pairs for shape \(2, 3\), got 1'),
    ('pad-negative', lambda: ops.pad(T(2, 3), ((0, 0), (-1, 2))), ValueError, r'pad: widths must be non-negative, got \(-1, 2\) for axis 1'),
    ('pad-not-pair', lambda: ops.pad(T(2, 3), ((0, 0), (1, 2, 3))), ValueError, r'pad: pad_width\[1\] must be a pair of ints, got \(1, 2, 3\)'),
    ('pad-reflect-too-large', lambda: ops.pad(T(2, 3), ((0, 0), (3, 1)), mode='reflect'), ValueError, r'pad: reflect padding \(3, 1\) must be smaller than the size 3 of axis 1 \(shape \(2, 3\)\)'),
    ('pad-replicate-empty', lambda: ops.pad(mi.Tensor(np.zeros((2, 0))), ((0, 0), (1, 1)), mode='replicate'), ValueError, r'pad: cannot replicate-pad the empty axis 1'),
    ('pad-mode', lambda: ops.pad(T(2, 3), ((0, 0), (1, 1)), mode='wrap'), ValueError, r"pad: unknown mode 'wrap'; expected 'constant', 'reflect', 'replicate' or 'circular'"),
    ('shrink-too-large', lambda: ops.shrink(T(2, 3), ((0, 2), (1, 4))), ValueError, r'shrink: bounds \(1, 4\) are invalid for axis 1 of size 3'),
    ('shrink-pairs', lambda: ops.shrink(T(2, 3), ((0, 2),)), ValueError, r'shrink: expected 2 \(start, stop\) pairs'),
    ('stack-shapes', lambda: ops.stack([T(2, 3), T(3, 2)], 0), ValueError, r'stack: all tensors must have the same shape, got \(2, 3\) and \(3, 2\)'),
    ('stack-empty', lambda: ops.stack([], 0), ValueError, r'stack: needs at least one tensor'),
    ('stack-axis', lambda: ops.stack([T(2, 3), T(2, 3)], 3), ValueError, r'stack: axis 3 is out of range for stacking 2-d tensors \(valid: -3..2\)'),
    ('stack-single-tensor', lambda: ops.stack(T(2, 3), 0), TypeError, r'stack: expected a sequence of Tensors, got a single Tensor'),
    ('stack-dtypes', lambda: ops.stack([T(2), T(2, dtype='float64')], 0), TypeError, r'stack: tensors have different dtypes \(float32 and float64\)'),
    ('split-size', lambda: ops.split(T(3, 10), 1, 4), ValueError, r'split: split size 4 does not divide axis 1 of size 10 \(shape \(3, 10\)\)'),
    ('split-sections', lambda: ops.split(T(3, 10), 1, [3, 3]), ValueError, r'split: sizes \(3, 3\) must be non-negative and sum to 10'),
    ('split-axis', lambda: ops.split(T(3, 10), 2), ValueError, r'split: axis 2 is out of range for a tensor with 2 dimensions'),
    ('concatenate-shapes', lambda: ops.concatenate([T(2, 3), T(2, 4)], 0), ValueError, r'concatenate: shapes \(2, 3\) and \(2, 4\) differ outside axis 0'),
    ('concatenate-0d', lambda: ops.concatenate([mi.Tensor(1.0), mi.Tensor(2.0)]), ValueError, r'concatenate: zero-dimensional tensors cannot be concatenated'),
    ('concatenate-axis', lambda: ops.concatenate([T(2, 3), T(2, 3)], -3), ValueError, r'concatenate: axis -3 is out of range for 2-d tensors'),
    ('dilate-negative', lambda: ops.dilate(T(2, 3), (0,), -1), ValueError, r'dilate: dilation must be a non-negative int, got -1'),
    ('dilate-axis', lambda: ops.dilate(T(2, 3), (2,), 1), ValueError, r'dilate: axis 2 is out of range'),
    ('undilate-axis', lambda: ops.undilate(T(2, 3), (0, 0), 1), ValueError, r'undilate: axis 0 is repeated'),
    ('cast-dtype', lambda: ops.cast(T(2), 'complex64'), TypeError, r"cast: unsupported dtype 'complex64'; minima supports float32, float64, int64, bool, float16"),
    ('to_device-name', lambda: ops.to_device(T(2), 'tpu'), ValueError, r"to_device: unknown device 'tpu'"),
    # linear algebra
    ('matmul-align', lambda: ops.matmul(T(2, 3), T(4, 5)), ValueError, r'matmul: shapes \(2, 3\) and \(4, 5\) are not aligned'),
    ('matmul-batch', lambda: ops.matmul(T(2, 2, 3), T(3, 3, 4)), ValueError, r'matmul: shapes \(2,\) and \(3,\) cannot be broadcast'),
    ('matmul-0d', lambda: ops.matmul(mi.Tensor(1.0), T(3)), ValueError, r'matmul: operands must have at least one dimension'),
]

@pytest.mark.parametrize('fn,exc,msg', [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input(fn, exc, msg):
    with pytest.raises(exc, match=msg): fn()

def test_every_catalog_op_has_an_error_case():
    "Each functional op that can reject input appears in at least one error case above."
    names = {c[0].split('-')[0] for c in CASES}
    expected = set(BINARY) | {'where', 'summation', 'mean', 'amax', 'amin', 'logsumexp', 'argmax', 'argmin', 'softmax',
                              'log_softmax', 'reshape', 'broadcast_to', 'expand', 'transpose', 'permute', 'squeeze',
                              'unsqueeze', 'flip', 'flatten', 'getitem', 'setitem', 'pad', 'shrink', 'stack', 'split',
                              'concatenate', 'dilate', 'undilate', 'cast', 'to_device', 'matmul', 'exp', 'log', 'sigmoid', 'clamp', 'gelu', 'erf'}
    assert expected <= names, expected - names
