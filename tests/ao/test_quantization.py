"""Quantization (chapter 26) against torch.ao.quantization on the same weights and data: observers' qparams, int8
codes, the int8 matmul's exactness, dynamic Linear (per tensor and per channel), static quantization of a CNN, and
fake-quant's values and straight-through gradients."""
import warnings
import numpy as np, pytest
import minima as mi
from minima import nn
from minima.backend_ndarray.ndarray import NDArray
import minima.ao.quantization as Q

torch = pytest.importorskip('torch')
tq = pytest.importorskip('torch.ao.quantization')
warnings.filterwarnings('ignore', message='.*deprecated.*')

OBSERVERS = [
    (lambda: Q.MinMaxObserver(), lambda: tq.MinMaxObserver()),
    (lambda: Q.MinMaxObserver('qint8', Q.per_tensor_symmetric),
     lambda: tq.MinMaxObserver(dtype=torch.qint8, qscheme=torch.per_tensor_symmetric)),
    (lambda: Q.MinMaxObserver('quint8', Q.per_tensor_symmetric),
     lambda: tq.MinMaxObserver(dtype=torch.quint8, qscheme=torch.per_tensor_symmetric)),
    (lambda: Q.MinMaxObserver(reduce_range=True), lambda: tq.MinMaxObserver(reduce_range=True)),
    (lambda: Q.MinMaxObserver(quant_min=0, quant_max=100), lambda: tq.MinMaxObserver(quant_min=0, quant_max=100)),
    (lambda: Q.PerChannelMinMaxObserver(1), lambda: tq.PerChannelMinMaxObserver(ch_axis=1)),
    (lambda: Q.PerChannelMinMaxObserver(0, 'qint8', Q.per_channel_symmetric),
     lambda: tq.PerChannelMinMaxObserver(dtype=torch.qint8, qscheme=torch.per_channel_symmetric)),
]

@pytest.mark.parametrize('i', range(len(OBSERVERS)))
@pytest.mark.parametrize('shift', [0.3, -5.0, 0.0])
def test_observer_qparams_equal_torchs(i, shift):
    ours, theirs = OBSERVERS[i][0](), OBSERVERS[i][1]()
    rng = np.random.default_rng(i)
    for k in range(3):
        b = (rng.standard_normal((6, 5)) * (k + 1) + shift).astype('float32')
        ours(mi.tensor(b)); theirs(torch.tensor(b))
    (s, z), (ts, tz) = ours.calculate_qparams(), theirs.calculate_qparams()
    assert np.array_equal(s, ts.numpy()) and np.array_equal(z, tz.numpy())

def test_observer_without_data_refuses():
    with pytest.raises(RuntimeError, match='seen no data'): Q.MinMaxObserver().calculate_qparams()
    with pytest.raises(ValueError, match='qscheme'): Q.MinMaxObserver(qscheme=Q.per_channel_affine)
    with pytest.raises(ValueError, match='include 0'): Q.MinMaxObserver(quant_min=3, quant_max=100)   # torch asserts

def _hist_batches(kind, rng):
    if kind == 'normal': return [rng.standard_normal(5000)]
    if kind == 'outliers, growing': return [np.r_[rng.standard_normal(3000), rng.standard_normal(5) * 20] * (k + 1)
                                            for k in range(3)]
    if kind == 'laplace, growing both ways': return [rng.laplace(size=4000) * (1 + k / 2) + 0.2 * (-1) ** k
                                                     for k in range(4)]
    if kind == 'relu': return [np.maximum(rng.standard_normal(4000), 0) * 3 for _ in range(2)]
    if kind == 'constant, then spread': return [np.full(100, 0.7), rng.standard_normal(500)]
    return [rng.uniform(-1, 2, 3000), rng.uniform(-1, 2, 3000)]   # 'uniform, same range'

@pytest.mark.parametrize('kind', ['normal', 'outliers, growing', 'laplace, growing both ways', 'relu',
                                  'constant, then spread', 'uniform, same range'])
@pytest.mark.parametrize('sym', [False, True])
def test_histogram_observer_qparams_match_torchs(kind, sym):
    """Same batches through both: the histograms are torch's, and the chosen scale and zero point are within 1e-3
    (relative) and 1 of torch's (its search compares float32 error sums, so near-ties could tip either way)."""
    rng = np.random.default_rng(len(kind))
    ours = Q.HistogramObserver(dtype='qint8' if sym else 'quint8',
                               qscheme=Q.per_tensor_symmetric if sym else Q.per_tensor_affine)
    theirs = tq.HistogramObserver(dtype=torch.qint8 if sym else torch.quint8,
                                  qscheme=torch.per_tensor_symmetric if sym else torch.per_tensor_affine)
    for b in _hist_batches(kind, rng):
        b = b.astype('float32'); ours(mi.tensor(b)); theirs(torch.tensor(b))
    assert ours.min_val == theirs.min_val.item() and ours.max_val == theirs.max_val.item()
    np.testing.assert_allclose(ours.histogram, theirs.histogram.numpy(), atol=5)   # re-binning: linspace rounding
    assert ours.histogram.sum() == pytest.approx(theirs.histogram.sum().item(), rel=1e-6)
    (s, z), (ts, tz) = ours.calculate_qparams(), theirs.calculate_qparams()
    assert abs(s[0] / ts.item() - 1) <= 1e-3 and abs(int(z[0]) - tz.item()) <= 1, (s, ts, z, tz)

def test_histogram_observer_narrows_by_l2_and_refuses_without_data():
    with pytest.raises(RuntimeError, match='seen no data'): Q.HistogramObserver().calculate_qparams()
    rng = np.random.default_rng(0)
    x = np.r_[rng.standard_normal(5000), 50.0].astype('float32')
    h, m = Q.HistogramObserver(), Q.MinMaxObserver()
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        h(mi.tensor(np.r_[x, np.inf].astype('float32'))); m(mi.tensor(x))   # an infinity is ignored, as torch's
    assert h.max_val == 50.0
    (s, _), (ms, _) = h.calculate_qparams(), m.calculate_qparams()
    # the search only ever narrows the range; clipping the lone 50 would cost (50 - 4)^2, more than the rounding
    # error it saves on 5000 values (5000 * 0.21^2 / 12), so L2 keeps it, as torch's does
    assert s[0] <= ms[0] and s[0] > ms[0] * 0.9

@pytest.mark.parametrize('dtype', ['qint8', 'quint8'])
def test_quantize_codes_equal_torchs(dtype):
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((8, 16)) * 2).astype('float32')
    w[0, :4] = [0.5, 1.5, -0.5, 2.5]   # exact ties at scale 1: rounding must go to even, as torch's
    zp = 3 if dtype == 'qint8' else 128
    for s in (1.0, 0.05, 0.013):
        a = Q.quantize_per_tensor(mi.tensor(w), s, zp, dtype).int_repr().numpy()
        b = torch.quantize_per_tensor(torch.tensor(w), s, zp, getattr(torch, dtype)).int_repr().numpy()
        assert np.array_equal(a, b), s
    sc = rng.uniform(0.01, 0.1, 16)
    zs = rng.integers(-5, 5, 16) if dtype == 'qint8' else rng.integers(100, 150, 16)
    a = Q.quantize_per_channel(mi.tensor(w), sc, zs, 1, dtype).int_repr().numpy()
    b = torch.quantize_per_channel(torch.tensor(w), torch.tensor(sc), torch.tensor(zs), 1,
                                   getattr(torch, dtype)).int_repr().numpy()
    assert np.array_equal(a, b)

def test_int8_matmul_is_exact_int32():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 256, (33, 300)).astype('uint8'), rng.integers(-128, 128, (300, 17)).astype('int8')
    got = Q.int8_matmul(NDArray(a, dtype='uint8'), NDArray(b, dtype='int8'))
    assert got.dtype == 'int32' and np.array_equal(got.numpy(), a.astype(np.int64) @ b.astype(np.int64))
    s = rng.integers(-128, 128, (5, 7)).astype('int8')
    assert np.array_equal(Q.int8_matmul(NDArray(s, dtype='int8'), NDArray(b[:7], dtype='int8')).numpy(),
                          s.astype(np.int64) @ b[:7].astype(np.int64))
    # the contract's default (cast to int32, then the int32 matmul) gives the same integers
    d, out = mi.cpu(), np.empty(33 * 17, 'int32')
    mi.backend_ndarray.device.BackendDevice.matmul_int8(d, a.reshape(-1), b.reshape(-1), out, 33, 300, 17)
    assert np.array_equal(out.reshape(33, 17), got.numpy())
    with pytest.raises(TypeError, match='int8_matmul'):
        Q.int8_matmul(NDArray(a.astype('float32')), NDArray(b, dtype='int8'))
    with pytest.raises(ValueError, match='do not fit'):
        Q.int8_matmul(NDArray(a, dtype='uint8'), NDArray(b[:5], dtype='int8'))

def _twin_mlp():
    torch.manual_seed(0)
    t = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    m = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    for a, b in zip(m.modules_[::2], t[::2]):
        a.weight.data, a.bias.data = mi.tensor(b.weight.detach().numpy()), mi.tensor(b.bias.detach().numpy())
    return m, t

@pytest.mark.parametrize('per_channel', [False, True])
@pytest.mark.parametrize('xshape', [(7, 64), (2, 3, 64)])
def test_quantize_dynamic_equals_torch(per_channel, xshape):
    m, t = _twin_mlp()
    qm = Q.quantize_dynamic(m, {nn.Linear: Q.per_channel_dynamic_qconfig} if per_channel else {nn.Linear},
                            dtype=mi.qint8)
    tqm = tq.quantize_dynamic(t, {torch.nn.Linear: tq.per_channel_dynamic_qconfig} if per_channel
                              else {torch.nn.Linear}, dtype=torch.qint8)
    for a, b in zip(qm.modules_[::2], tqm[::2]):
        assert np.array_equal(a.weight().int_repr().numpy(), b.weight().int_repr().numpy())
        tb = b.weight().q_per_channel_scales().numpy() if per_channel else [b.weight().q_scale()]
        assert np.array_equal(a.weight().scale, tb)
    x = np.random.default_rng(1).standard_normal(xshape).astype('float32')
    x[0, ..., 0] = 0.0
    y, ty = qm(mi.tensor(x)).numpy(), tqm(torch.tensor(x)).numpy()
    yf = t(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(y, ty, rtol=1e-5, atol=1e-6)
    assert np.abs(y - yf).max() <= np.abs(ty - yf).max() * (1 + 1e-4) + 1e-6
    assert isinstance(m.modules_[0], nn.Linear)   # not inplace: the float model is untouched

@pytest.mark.parametrize('layers,bidir,batch_first', [(1, False, False), (2, True, False), (3, False, True)])
def test_quantize_dynamic_lstm_equals_torchs(layers, bidir, batch_first):
    """quantize_dynamic of an LSTM: the outputs and final states of torch's dynamic int8 LSTM on the same weights
    (the same integer arithmetic: one set of input qparams per sequence, one per step for the hidden state), so its
    error against the float LSTM is torch's own."""
    torch.manual_seed(layers)
    tl = torch.nn.LSTM(12, 20, num_layers=layers, bidirectional=bidir, batch_first=batch_first)
    ml = nn.LSTM(12, 20, num_layers=layers, bidirectional=bidir, batch_first=batch_first)
    ml.load_state_dict({k: v.detach().numpy() for k, v in tl.state_dict().items()})
    x = np.random.default_rng(layers).standard_normal((7, 4, 12)).astype('float32') * 2
    q = Q.quantize_dynamic(ml, {nn.LSTM})
    assert isinstance(q, Q.DynamicQuantizedLSTM) and isinstance(ml, nn.LSTM)   # a copy; the float one is kept
    y, (h, c) = q(mi.tensor(x))
    tq_lstm = tq.quantize_dynamic(torch.nn.Sequential(tl), {torch.nn.LSTM}, dtype=torch.qint8)
    ty, (th, tc) = tq_lstm(torch.tensor(x))
    for a, b in ((y, ty), (h, th), (c, tc)):
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-5)
    yf = tl(torch.tensor(x))[0].detach().numpy()
    assert np.abs(y.numpy() - yf).max() <= np.abs(ty.detach().numpy() - yf).max() * (1 + 1e-3) + 1e-6
    m = nn.Sequential(nn.Linear(12, 12))
    m.rnn = nn.LSTM(12, 20)   # quantized inside a container too, with its Linear
    qm = Q.quantize_dynamic(m)
    assert isinstance(qm.rnn, Q.DynamicQuantizedLSTM) and isinstance(qm.modules_[0], Q.DynamicQuantizedLinear)
    with pytest.raises(NotImplementedError, match='proj_size'): Q.quantize_dynamic(nn.LSTM(4, 8, proj_size=2), {nn.LSTM})

def test_quantize_dynamic_refuses_what_it_cannot_do():
    m, _ = _twin_mlp()
    with pytest.raises(TypeError, match='qint8'): Q.quantize_dynamic(m, {nn.Linear}, dtype='float16')
    with pytest.raises(TypeError, match='nn.Linear and nn.LSTM only'): Q.quantize_dynamic(m, {nn.Conv2d})

@pytest.mark.parametrize('lo,hi', [(-2.0, 3.0), (0.0, 5.0), (-4.0, 0.0), (-1e-6, 1e-6), (0.0, 0.0)])
def test_dynamic_activation_qparams_equal_torchs(lo, hi):
    "choose_qparams_dynamic is fbgemm's rule: checked through torch's own dynamic quantize of the input."
    x = np.linspace(lo, hi, 37, dtype='float32')
    s, z = Q.choose_qparams_dynamic(x.min(), x.max(), reduce_range=True)
    t = torch.quantize_per_tensor_dynamic(torch.tensor(x), torch.quint8, True)
    assert (np.float32(s), z) == (np.float32(t.q_scale()), t.q_zero_point())

def test_static_quantization_of_a_cnn_equals_torch():
    rng = np.random.default_rng(0)
    mi.init.manual_seed(0)
    float_layers = [nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1),
                    nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64, 10)]
    qm = nn.Sequential(Q.QuantStub(), *float_layers, Q.DeQuantStub())
    qm.qconfig = Q.default_qconfig
    T = torch.nn
    tm = T.Sequential(tq.QuantStub(), T.Conv2d(1, 8, 3, padding=1), T.ReLU(), T.MaxPool2d(2),
                      T.Conv2d(8, 16, 3, padding=1), T.ReLU(), T.MaxPool2d(2), T.Flatten(), T.Linear(64, 10),
                      tq.DeQuantStub())
    for i in (1, 4, 8):
        tm[i].weight.data = torch.tensor(qm.modules_[i].weight.detach().numpy())
        tm[i].bias.data = torch.tensor(qm.modules_[i].bias.detach().numpy())
    tm.qconfig = tq.QConfig(activation=tq.MinMaxObserver.with_args(reduce_range=True),
                            weight=tq.PerChannelMinMaxObserver.with_args(dtype=torch.qint8,
                                                                         qscheme=torch.per_channel_symmetric))
    calib = [rng.uniform(0, 1, (16, 1, 8, 8)).astype('float32') for _ in range(4)]
    pm, tp = Q.prepare(qm), tq.prepare(tm)
    with mi.no_grad(), torch.no_grad():
        for b in calib: pm(mi.tensor(b)); tp(torch.tensor(b))
    cm, tc = Q.convert(pm), tq.convert(tp)
    for i in (1, 4, 8):
        assert np.array_equal(cm.modules_[i].weight_q.int_repr().numpy(), tc[i].weight().int_repr().numpy())
        assert abs(cm.modules_[i].zero_point - tc[i].zero_point) <= 1   # calibration saw float passes that
        assert abs(cm.modules_[i].scale - tc[i].scale) <= 1e-5 * tc[i].scale   # sum in different orders
    x = rng.uniform(0, 1, (32, 1, 8, 8)).astype('float32')
    y, ty = cm(mi.tensor(x)).numpy(), tc(torch.tensor(x)).numpy()
    assert np.abs(y - ty).max() <= 2 * cm.modules_[8].scale
    assert isinstance(qm.modules_[1], nn.Conv2d) and not hasattr(qm.modules_[1], 'activation_post_process')

def test_prepare_and_convert_refuse():
    with pytest.raises(TypeError, match='Sequential'): Q.prepare(nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match='qconfig'): Q.prepare(nn.Sequential(nn.Linear(2, 2)))
    m = nn.Sequential(Q.QuantStub(), nn.Linear(2, 2), nn.Tanh(), Q.DeQuantStub()); m.qconfig = Q.default_qconfig
    p = Q.prepare(m); p(mi.randn(3, 2))
    with pytest.raises(NotImplementedError, match='Tanh'): Q.convert(p)

@pytest.mark.parametrize('s,z,lo,hi', [(0.05, 10, 0, 255), (0.1, 0, -128, 127), (0.0123, 3, 0, 127), (1.0, 0, -8, 7),
                                     (1.0, 3, 0, 255)])
def test_fake_quantize_values_and_ste_gradient_equal_torch(s, z, lo, hi):
    rng = np.random.default_rng(0)
    x, g = (rng.standard_normal(200) * 3).astype('float32'), rng.standard_normal(200).astype('float32')
    x[:3] = [0.5, 1.5, 2.5]   # ties at scale 1
    tx = torch.tensor(x, requires_grad=True)
    ty = torch.fake_quantize_per_tensor_affine(tx, s, z, lo, hi); ty.backward(torch.tensor(g))
    mx = mi.tensor(x, requires_grad=True)
    my = mi.fake_quantize_per_tensor_affine(mx, s, z, lo, hi); my.backward(mi.tensor(g))
    assert np.array_equal(my.detach().numpy(), ty.detach().numpy()) and np.array_equal(mx.grad.detach().numpy(), tx.grad.detach().numpy())

def test_fake_quantize_module_observes_then_rounds():
    fq = Q.FakeQuantize(Q.MinMaxObserver, dtype='quint8')
    x = mi.tensor(np.linspace(-1, 3, 50, dtype='float32'), requires_grad=True)
    y = fq(x)
    s, z = fq.activation_post_process.calculate_qparams()
    assert np.abs(y.detach().numpy() - x.detach().numpy()).max() <= s[0] / 2 * (1 + 1e-4)
    y.sum().backward()
    assert np.array_equal(x.grad.numpy(), np.ones(50, 'float32'))   # nothing clamped: the range is the data's


def test_quantize_rounds_on_the_device_without_a_host_copy(monkeypatch):
    "Quantizing keeps the data on its device: `round` is a device primitive, so no NDArray goes through numpy."
    import minima as mi
    from minima.backend_ndarray import NDArray
    from minima.ao.quantization import quantize_per_tensor, quantize_per_channel
    rng = np.random.default_rng(0)
    x = rng.standard_normal((6, 7)).astype('float32') * 3
    x[0, :4] = [0.5, 1.5, -0.5, 2.5]          # ties: half to even, as torch
    want_t = torch.quantize_per_tensor(torch.tensor(x), 1.0, 3, torch.quint8).int_repr().numpy()
    want_c = torch.quantize_per_channel(torch.tensor(x), torch.tensor([0.1] * 6, dtype=torch.float64),
                                        torch.tensor([-1, 0, 1, 2, -3, 5]), 0, torch.qint8).int_repr().numpy()
    t = mi.tensor(x)
    def no_host(*a, **k): raise AssertionError('an NDArray was copied to the host while quantizing')
    monkeypatch.setattr(NDArray, 'numpy', no_host)
    qt, qc = quantize_per_tensor(t, 1.0, 3, 'quint8'), quantize_per_channel(t, [0.1] * 6, [-1, 0, 1, 2, -3, 5], 0, 'qint8')
    monkeypatch.undo()
    assert np.array_equal(qt.q.numpy(), want_t) and np.array_equal(qc.q.numpy(), want_c)
