"""Type promotion against torch: every (tensor dtype x operand kind x op) combination, dtype and value.

A tensor of each minima dtype (with dimensions, and 0-d) meets Python numbers, numpy scalars, lists, numpy arrays and
tensors of every dtype (0-d and with dimensions) through every arithmetic and comparison operator, `maximum` and
`minimum`, and the reflected forms. The result must have torch's dtype and value; where torch raises, minima raises.
"""
import operator
import numpy as np, pytest
import minima as mi
from minima.backend_ndarray.device import DTYPES

torch = pytest.importorskip('torch')

TD = {d: getattr(torch, d) for d in DTYPES}

def as_torch(a):
    "torch.as_tensor, which cannot read numpy's bfloat16 (ml_dtypes): that one goes through float32 (exact)."
    a = np.asarray(a)
    return torch.as_tensor(a.astype('float32')).to(torch.bfloat16) if a.dtype.name == 'bfloat16' else torch.as_tensor(a)
def np_of(t): return (t.float() if t.dtype == torch.bfloat16 else t).numpy()
BASE = {'bool': [True, False, True]}

def values(dtype, n=3):
    "Small positive values (no division by zero for ints, no negative powers), bools with a False."
    return BASE.get(dtype, [1, 2, 3][:n])

OPS = {'add': operator.add, 'sub': operator.sub, 'mul': operator.mul, 'truediv': operator.truediv,
       'pow': operator.pow, 'eq': operator.eq, 'ne': operator.ne, 'lt': operator.lt, 'le': operator.le,
       'gt': operator.gt, 'ge': operator.ge}
FUNCS = {'maximum': (mi.ops.maximum, torch.maximum), 'minimum': (mi.ops.minimum, torch.minimum)}

# operand kinds: (name, minima operand, torch operand)
def operand_kinds():
    kinds = [('int', 2, 2), ('float', 0.5, 0.5), ('bool', True, True), ('np.float64', np.float64(1.5), np.float64(1.5)),
             ('np.int64', np.int64(2), np.int64(2)),
             ('list_float', [0.5, 1.5, 2.5], torch.tensor([0.5, 1.5, 2.5])), ('list_int', [1, 2, 3], torch.tensor([1, 2, 3])),
             ('list_bool', [True, False, True], torch.tensor([True, False, True]))]
    for d in DTYPES:
        a = np.array(values(d), dtype=d)
        kinds.append((f'np_{d}', a, as_torch(a)))
        kinds.append((f'tensor_{d}', mi.Tensor(a, dtype=d, requires_grad=False), as_torch(a)))
        kinds.append((f'tensor0d_{d}', mi.Tensor(a[1], dtype=d, requires_grad=False), as_torch(a[1])))
    return kinds
KINDS = operand_kinds()

def _run(f):
    try: return f(), None
    except Exception as e: return None, e

def _compare(got, want, where):
    gerr, terr = got[1], want[1]
    if terr is not None:
        assert gerr is not None, f"{where}: torch raises {type(terr).__name__} ({terr}) but minima returned {got[0]!r}"
        return
    assert gerr is None, f"{where}: minima raised {type(gerr).__name__}: {gerr}; torch gives {want[0]!r}"
    g, t = got[0], want[0]
    tdt = str(t.dtype).replace('torch.', '')
    assert g.dtype == tdt, f"{where}: dtype {g.dtype}, torch {tdt}"
    assert g.shape == tuple(t.shape), f"{where}: shape {g.shape}, torch {tuple(t.shape)}"
    tol = {'float16': 2e-3, 'bfloat16': 1.6e-2}.get(tdt, 1e-6)
    np.testing.assert_allclose(g.numpy().astype('float64'), np_of(t).astype('float64'), rtol=tol, atol=tol, err_msg=where)

def _t(d, zero_d):
    a = np.array(values(d), dtype=d)
    if zero_d: a = a[2]
    return mi.Tensor(a, dtype=d, requires_grad=False), as_torch(a)

@pytest.mark.parametrize('zero_d', [False, True], ids=['dims', '0d'])
@pytest.mark.parametrize('dtype', DTYPES)
def test_binary_promotion(dtype, zero_d):
    "tensor <op> operand and operand <op> tensor for every operand kind and op, against torch."
    x, tx = _t(dtype, zero_d)
    n = 0
    for kname, other, tother in KINDS:
        for oname, op in OPS.items():
            where = f"{dtype}{' 0-d' if zero_d else ''} {oname} {kname}"
            _compare(_run(lambda: op(x, other)), _run(lambda: op(tx, tother)), where)
            n += 1
            if kname in ('int', 'float', 'bool') and oname in ('add', 'sub', 'mul', 'truediv', 'pow'):   # reflected
                _compare(_run(lambda: op(other, x)), _run(lambda: op(tother, tx)), 'reflected ' + where)
                n += 1
        for fname, (mf, tf) in FUNCS.items():
            # torch.maximum takes no Python number: model one as torch's operators treat it (result_type)
            tref = tother if isinstance(tother, torch.Tensor) else \
                torch.tensor(tother, dtype=torch.result_type(tx, tother))
            _compare(_run(lambda: mf(x, other)), _run(lambda: tf(tx, tref)),
                     f"{dtype}{' 0-d' if zero_d else ''} {fname} {kname}")
            n += 1
    assert n > 400

def test_issue_examples():
    "The cases from the audit: an int64 tensor with a float scalar, list or array; a bool tensor with an int."
    t = mi.Tensor(np.array([0, 1, 2]))
    assert (t == 0.5).numpy().tolist() == [False, False, False]
    assert (t < 0.5).numpy().tolist() == [True, False, False]
    assert mi.ops.add(t, 0.5).numpy().tolist() == [0.5, 1.5, 2.5]
    assert mi.ops.maximum(t, 0.5).numpy().tolist() == [0.5, 1.0, 2.0]
    assert (t * [0.5, 0.5, 0.5]).numpy().tolist() == [0.0, 0.5, 1.0]
    b = mi.Tensor(np.array([True, False]))
    assert (b * 2).dtype == (b + 1).dtype == (b ** 2).dtype == 'int64'
    assert (b * 2).numpy().tolist() == [2, 0] and (b ** 2).numpy().tolist() == [1, 0]

def test_float32_gradient_with_float64_operand():
    "A float64 numpy operand promotes the result to float64 (torch), but the float32 input's gradient stays float32."
    x = mi.Tensor(np.array([1., 2., 3.], dtype='float32'))
    y = x * np.array([2., 3., 4.])
    assert y.dtype == 'float64'
    y.sum().backward()
    assert x.grad.dtype == 'float32' and x.grad.numpy().tolist() == [2., 3., 4.]

@pytest.mark.parametrize('dtype', DTYPES)
def test_hold_convert_roundtrip(dtype):
    "Every dtype holds its values, converts to and from every other one like torch, and `.numpy()` round-trips."
    a = np.array(values(dtype, 3) if dtype != 'uint8' else [0, 200, 255], dtype=dtype)
    t = mi.Tensor(a, requires_grad=False)
    assert t.dtype == (dtype if dtype != 'float64' else 'float32')   # float64 numpy data becomes float32 (needle)
    t = mi.Tensor(a, dtype=dtype, requires_grad=False)
    assert t.dtype == dtype and t.numpy().dtype == np.dtype(dtype) and np.array_equal(t.numpy(), a)
    for other in DTYPES:
        got, want = t.astype(other), as_torch(a).to(TD[other])
        g, w = got.numpy().astype('float64'), np_of(want).astype('float64')
        assert got.dtype == other and np.array_equal(g, w), (dtype, other)

def test_reductions_and_wraparound():
    "Sums of integers are int64; max/min/argmin of uint8 do not overflow; uint8 arithmetic wraps as in torch."
    a = np.array([[250, 3, 7], [0, 255, 9]], dtype='uint8')
    t, ta = mi.Tensor(a, requires_grad=False), as_torch(a)
    assert t.sum().dtype == 'int64' and t.sum().item() == ta.sum().item()
    assert t.amin(1).numpy().tolist() == ta.amin(1).tolist() and t.argmin(1).numpy().tolist() == ta.argmin(1).tolist()
    assert t.max(0).values.numpy().tolist() == ta.max(0).values.tolist()   # torch's (values, indices)
    assert t.max(0).indices.numpy().tolist() == ta.max(0).indices.tolist()
    assert (t + 10).numpy().tolist() == (ta + 10).tolist() and (t - 3).numpy().tolist() == (ta - 3).tolist()
    i8 = np.array([-128, 127, 5], dtype='int8')
    assert mi.Tensor(i8, requires_grad=False).min().item() == -128 and mi.Tensor(i8, requires_grad=False).argmin().item() == 0

def test_float16_trains():
    "float16 tensors require grad and backpropagate in float16, as in torch."
    x = mi.Tensor(np.array([0.5, -1.0, 2.0], dtype='float16'))
    tx = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float16, requires_grad=True)
    (x * x * 3).sum().backward(); (tx * tx * 3).sum().backward()
    assert x.grad.dtype == 'float16' and np.allclose(x.grad.numpy(), tx.grad.numpy())
