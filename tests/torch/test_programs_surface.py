"""What the public programs of chapter 18b reached that minima lacked (tests/torch/test_public_programs.py runs them):
samplers that draw as torch's do, `randint`/`randperm` keywords, `dropout2d` on 2-D input, torch's `torch.nn.modules`
file layout, `torch.serialization.safe_globals`, and whole-module save of a module holding a function."""
import warnings
import numpy as np, pytest, torch

import minima
import minima.run

def record_draws(lib):
    "Make `lib.randint`/`lib.randperm` log their calls (sizes) and draw from one numpy generator; undo with the result."
    rng, log, saved = np.random.default_rng(0), [], (lib.randint, lib.randperm)
    def randint(low=0, high=None, size=None, generator=None, dtype=None, **kw):
        if high is None: low, high = 0, low
        log.append(('randint', high, tuple(size)))
        return lib.tensor(rng.integers(low, high, size=tuple(size)).astype('int64'))
    def randperm(n, generator=None, dtype=None, **kw):
        log.append(('randperm', n))
        return lib.tensor(rng.permutation(n).astype('int64'))
    lib.randint, lib.randperm = randint, randperm
    return log, saved

SHUFFLE = lambda L, ds: L.utils.data.DataLoader(ds, batch_size=4, shuffle=True)

@pytest.mark.parametrize('make', [
    SHUFFLE,
    lambda L, ds: L.utils.data.DataLoader(ds, batch_size=4, drop_last=True,
                                          sampler=L.utils.data.RandomSampler(ds, replacement=True, num_samples=70)),
    lambda L, ds: L.utils.data.DataLoader(ds, batch_size=3, sampler=L.utils.data.RandomSampler(ds, num_samples=25)),
    lambda L, ds: L.utils.data.DataLoader(ds, batch_size=5, sampler=L.utils.data.SubsetRandomSampler([1, 3, 5, 7]))])
def test_samplers_draw_as_torchs(make):
    """torch's samplers draw through `torch.randint` (32 at a time) and `torch.randperm`, plus one last permutation
    as they end; minima's draw the same calls through minima's, so the same numbers give the same batches.
    (`DataLoader(shuffle=True)` draws one permutation per epoch, without torch's unused last one: chapter 12.)"""
    out = {}
    for L in (torch, minima):
        ds = L.utils.data.TensorDataset(L.tensor(np.arange(10, dtype='float32')))
        log, saved = record_draws(L)
        try: batches = [b[0].numpy().tolist() for b in make(L, ds)]
        finally: L.randint, L.randperm = saved
        out[L.__name__] = (log, batches)
    if make is SHUFFLE: out['torch'] = (out['torch'][0][:-1], out['torch'][1])   # the unused last permutation
    assert out['minima'] == out['torch']

def test_randint_randperm_keywords_and_generator():
    g = minima.Generator().manual_seed(1)
    a = minima.randint(high=5, size=(40,), generator=g)
    b = minima.randint(2, 5, size=(3, 4))
    c = minima.randint(low=3, high=4, size=(2,))
    assert a.shape == (40,) and a.dtype == 'int64' and 0 <= a.numpy().min() and a.numpy().max() < 5
    assert b.shape == (3, 4) and set(b.numpy().ravel()) <= {2, 3, 4} and c.numpy().tolist() == [3, 3]
    g2 = minima.Generator().manual_seed(1)
    assert minima.randint(high=5, size=(40,), generator=g2).numpy().tolist() == a.numpy().tolist()
    assert sorted(minima.randperm(7, generator=g).numpy().tolist()) == list(range(7))
    with pytest.raises(TypeError, match='randint'): minima.randint(5)
    p = minima.tensor([[0.0, 1.0, 0.0]])
    assert minima.multinomial(p, 2, replacement=True, generator=g).numpy().tolist() == [[1, 1]]

def test_dropout2d_on_2d_input_as_torch():
    "torch warns on a 2-D input to dropout2d and zeroes single elements of (N, C); minima refused it."
    x = np.ones((6, 400), 'float32')
    for L in (torch, minima):
        with pytest.warns(UserWarning, match='dropout2d'):
            y = L.nn.functional.dropout2d(L.tensor(x), 0.5, training=True).numpy()
        assert set(np.unique(y)) == {0.0, 2.0}
        assert (y == 0).any(1).all() and (y != 0).any(1).all()   # zeros inside rows: element-wise, not per row
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            m = L.nn.Dropout2d(0.5).eval()
            assert (m(L.tensor(x)).numpy() == x).all()
    with pytest.raises(ValueError, match='dropout2d'): minima.nn.functional.dropout2d(minima.tensor(x[0]), 0.5)

def test_nn_modules_files_match_torchs_layout():
    """`torch.nn.modules.<file>.<Class>`: each of minima's files with a torch name holds, by name,
    classes that torch's file of that name holds, and they are `minima.nn`'s (one definition)."""
    import importlib, pathlib
    files = sorted(f.stem for f in pathlib.Path(minima.nn.modules.__file__).parent.glob('*.py'))
    assert files[:2] == ['__init__', 'activation'] and 'layers' in files
    n = 0
    for file in [f for f in files if f not in ('__init__', 'layers')]:   # layers.py: minima's own
        ours, theirs = getattr(minima.nn.modules, file), importlib.import_module(f'torch.nn.modules.{file}')
        assert ours.__all__ and ours.__file__.endswith(f'{file}.py'), file
        for name in ours.__all__:
            assert hasattr(theirs, name), (file, name)
            # a base class programs subclass (`_Loss`, `_BatchNorm`) is in no torch.nn either
            home = minima.nn.modules.layers if name.startswith('_') else minima.nn
            assert getattr(ours, name) is getattr(home, name), (file, name)
            n += 1
    assert n > 60 and minima.nn.modules.loss.CrossEntropyLoss is minima.nn.CrossEntropyLoss
    lin = minima.nn.modules.linear.NonDynamicallyQuantizableLinear
    assert lin.__module__ == 'minima.nn.modules.layers' and lin.__mro__[1] is minima.nn.Linear
    with minima.run.as_torch() as t:
        import torch.nn.modules.rnn as r
        from torch.nn.modules.linear import NonDynamicallyQuantizableLinear
        assert r.LSTM is t.nn.LSTM and issubclass(NonDynamicallyQuantizableLinear, t.nn.Linear)
        with pytest.raises(minima.run.MissingTorchFeature, match=r'torch\.nn\.modules\.rnn\.RNNBase'): r.RNNBase

def test_safe_globals():
    from minima import serialization as s
    s.clear_safe_globals()
    with s.safe_globals([minima.nn.Linear]):
        assert s.get_safe_globals() == [minima.nn.Linear]
    assert s.get_safe_globals() == []
    s.add_safe_globals([minima.nn.LSTM]); assert s.get_safe_globals() == [minima.nn.LSTM]; s.clear_safe_globals()
    with pytest.raises(TypeError, match='add_safe_globals'): s.add_safe_globals(minima.nn.Linear)

def test_whole_module_save_keeps_a_function_by_name(tmp_path):
    "A TransformerEncoderLayer holds `F.relu`: saved by name (as pickle does), loaded as the same function."
    layer = minima.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)
    minima.save(layer, tmp_path / 'l.pt')
    back = minima.load(tmp_path / 'l.pt')
    assert back.activation is layer.activation
    x = minima.randn(3, 2, 8)
    np.testing.assert_allclose(back(x).detach().numpy(), layer(x).detach().numpy(), rtol=0, atol=0)
    layer.activation = lambda v: v
    with pytest.raises(TypeError, match='module-level functions'): minima.save(layer, tmp_path / 'm.pt')

@pytest.mark.parametrize('kw', [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=2, dilation=2, ceil_mode=True)])
def test_maxpool1d_return_indices_as_torch(kw):
    "Audit 4, M30: `MaxPool1d(return_indices=True)` (MaxPool2d had it); values, indices and the gradient."
    x = np.random.default_rng(0).standard_normal((2, 3, 9))
    out = {}
    for L in (torch, minima):
        xt = L.tensor(x, requires_grad=True)
        v, i = L.nn.MaxPool1d(return_indices=True, **kw)(xt)
        g = np.random.default_rng(1).standard_normal(v.shape)
        (v * L.tensor(g)).sum().backward()
        out[L.__name__] = v.detach().numpy(), i.numpy(), xt.grad.numpy(), str(i.dtype).split('.')[-1]
    for a, b in zip(out['minima'], out['torch']): np.testing.assert_array_equal(a, b)
    v, i = minima.nn.functional.max_pool1d(minima.tensor(x), 2, return_indices=True)
    assert v.shape == i.shape == (2, 3, 4)

@pytest.mark.parametrize('cls', ['LSTM', 'GRU', 'RNN'])
def test_float16_rnns_as_torch(cls):
    "Audit 4, C9: `nn.LSTM(3, 4).half()(x16)` (and GRU, RNN) runs in float16 as torch's; minima refused it."
    x = np.random.default_rng(0).standard_normal((5, 2, 3)).astype('float16')
    t = getattr(torch.nn, cls)(3, 4).half()
    m = getattr(minima.nn, cls)(3, 4)
    m.load_state_dict({k: v.detach().float().numpy() for k, v in t.state_dict().items()})
    m = m.half()
    xt, xm = torch.tensor(x, requires_grad=True), minima.tensor(x, requires_grad=True)
    (yt, _), (ym, _) = t(xt), m(xm)
    g = np.random.default_rng(1).standard_normal(yt.shape).astype('float16')
    (yt * torch.tensor(g)).sum().backward()
    (ym * minima.tensor(g)).sum().backward()
    assert ym.dtype == 'float16' and xm.grad.dtype == 'float16'
    tol = 4e-3   # float16's spacing near 1 is 1e-3: a few roundings apart
    np.testing.assert_allclose(ym.detach().numpy().astype('f4'), yt.detach().numpy().astype('f4'), atol=tol)
    np.testing.assert_allclose(xm.grad.numpy().astype('f4'), xt.grad.numpy().astype('f4'), atol=tol)
    with pytest.raises(TypeError, match='float16, float32 or float64'): m(minima.tensor(x.astype('int64')))

def _packed_run(L, cls, x, lengths, sd, bf, es, hx, kw):
    m = getattr(L.nn, cls)(3, 4, batch_first=bf, **kw)
    if L is minima: m.load_state_dict(sd)
    else: sd.update({k: v.detach().numpy().copy() for k, v in m.state_dict().items()})
    xt = L.tensor(x, requires_grad=True)
    p = L.nn.utils.rnn.pack_padded_sequence(xt, lengths, batch_first=bf, enforce_sorted=es)
    h = [L.tensor(a, requires_grad=True) for a in hx]
    out, hn = m(p, tuple(h) if cls == 'LSTM' else h[0])
    hn = hn if isinstance(hn, tuple) else (hn,)
    loss = (out.data * L.tensor(np.random.default_rng(5).standard_normal(out.data.shape))).sum()
    for i, a in enumerate(hn): loss = loss + (a * L.tensor(np.random.default_rng(6 + i).standard_normal(a.shape))).sum()
    loss.backward()
    grads = [xt.grad] + [a.grad for a in h[:len(hn)]] + [q.grad for q in m.parameters()]
    return [out.data.detach().numpy(), out.batch_sizes.numpy()] + [a.detach().numpy() for a in hn] + \
           [g.numpy() for g in grads]

@pytest.mark.parametrize('cls', ['LSTM', 'GRU', 'RNN'])
@pytest.mark.parametrize('bf', [False, True])
@pytest.mark.parametrize('es,lengths', [(True, [5, 3, 2]), (False, [2, 5, 3])])
@pytest.mark.parametrize('kw', [{}, dict(num_layers=2, bidirectional=True)])
def test_packed_sequence_into_rnns_as_torch(cls, bf, es, lengths, kw):
    """Audit 4: a PackedSequence into RNN/LSTM/GRU (minima refused it): the packed output, `h_n` (`c_n`) at each
    sequence's last real step, and the gradients of the input, the initial state and every weight, in float64."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 5, 3) if bf else (5, 3, 3))
    D = 4 if kw else 1
    hx = [rng.standard_normal((D, 3, 4)), rng.standard_normal((D, 3, 4))]
    sd = {}
    a = _packed_run(torch, cls, x, lengths, sd, bf, es, hx, dict(kw, dtype=torch.float64))
    b = _packed_run(minima, cls, x, lengths, sd, bf, es, hx, dict(kw, dtype='float64'))
    assert len(a) == len(b)
    for u, v in zip(b, a): np.testing.assert_allclose(u, v, rtol=0, atol=1e-12)

@pytest.mark.parametrize('kw', [dict(padding_idx=1), dict(scale_grad_by_freq=True),
                                dict(padding_idx=-1, scale_grad_by_freq=True), dict(max_norm=1.0),
                                dict(max_norm=1.5, norm_type=1.0, padding_idx=2)])
@pytest.mark.parametrize('module', [False, True])
def test_embedding_padding_idx_max_norm_scale_grad_as_torch(kw, module):
    """Audit 4, M33 (`F.embedding(idx, w, padding_idx=1)`) and M14 (`Embedding(max_norm=)`, `scale_grad_by_freq`):
    the output, the gradient and the weight after `max_norm`'s in-place renormalisation, in float64."""
    rng = np.random.default_rng(0)
    W, I = rng.standard_normal((6, 4)), np.array([[1, 2, 1], [5, 1, 0]])
    res = []
    for L in (torch, minima):
        if module:
            m = L.nn.Embedding(6, 4, **kw, dtype=L.float64)
            with L.no_grad(): m.weight.copy_(L.tensor(W))
            w, y = m.weight, m(L.tensor(I))
        else:
            w = L.tensor(W.copy(), requires_grad=True)
            y = L.nn.functional.embedding(L.tensor(I), w, **kw)
        (y * L.tensor(np.random.default_rng(1).standard_normal(y.shape))).sum().backward()
        res.append((y.detach().numpy(), w.grad.numpy(), w.detach().numpy()))
    for a, b in zip(*res): np.testing.assert_allclose(b, a, rtol=0, atol=1e-15)
    with pytest.raises(NotImplementedError, match='sparse'):
        minima.nn.functional.embedding(minima.tensor(I), minima.tensor(W), sparse=True)

@pytest.mark.parametrize('kw,size', [(dict(stride=2), [10, 10]), (dict(stride=2), [9, 9]),
                                     (dict(stride=3, padding=1), [1, 2, 10, 11]),
                                     (dict(stride=2, dilation=2), [11, 12])])
def test_conv_transpose2d_output_size_as_torch(kw, size):
    "Audit 4, M29: `ConvTranspose2d(...)(x, output_size=[8, 8])` picks the output padding; values and gradients."
    x = np.random.default_rng(0).standard_normal((1, 2, 4, 4))
    t = torch.nn.ConvTranspose2d(2, 3, 3, dtype=torch.float64, **kw)
    m = minima.nn.ConvTranspose2d(2, 3, 3, dtype='float64', **kw)
    m.load_state_dict({k: v.detach().numpy() for k, v in t.state_dict().items()})
    res = []
    for L, mod in ((torch, t), (minima, m)):
        xt = L.tensor(x, requires_grad=True)
        y = mod(xt, output_size=size)
        (y * L.tensor(np.random.default_rng(1).standard_normal(y.shape))).sum().backward()
        res.append((y.detach().numpy(), xt.grad.numpy(), mod.weight.grad.numpy()))
    for a, b in zip(*res): np.testing.assert_allclose(b, a, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match='output size'): m(minima.tensor(x), output_size=[20, 20])

def test_transformer_encoder_nested_tensor_and_mask_check_keywords():
    "Audit 4, M28: `TransformerEncoder(..., enable_nested_tensor=False, mask_check=False)` (torch's fast-path flags)."
    t_layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, dtype=torch.float64)
    t = torch.nn.TransformerEncoder(t_layer, 2, enable_nested_tensor=False, mask_check=False)
    m = minima.nn.TransformerEncoder(minima.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, dtype='float64'), 2,
                                     enable_nested_tensor=False, mask_check=False)
    m.load_state_dict({k: v.detach().numpy() for k, v in t.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((5, 3, 8))
    np.testing.assert_allclose(m(minima.tensor(x)).detach().numpy(), t(torch.tensor(x)).detach().numpy(), atol=1e-12)

@pytest.mark.parametrize('shape,kw', [
    ((1, 2, 5, 4), dict(size=(7, 9), mode='bilinear', align_corners=False)),
    ((1, 2, 5, 4), dict(size=(7, 9), mode='bilinear', align_corners=True)),
    ((1, 2, 5, 4), dict(scale_factor=2, mode='bilinear')), ((1, 2, 5, 4), dict(size=(3, 3), mode='bilinear')),
    ((2, 3, 6), dict(size=11, mode='linear', align_corners=True)), ((2, 3, 6), dict(scale_factor=0.5, mode='linear')),
    ((1, 2, 5, 4), dict(size=(7, 6), mode='nearest-exact')), ((2, 3, 6), dict(scale_factor=1.7, mode='nearest-exact'))])
@pytest.mark.parametrize('module', [False, True])
def test_interpolate_linear_and_nearest_exact_as_torch(shape, kw, module):
    "Audit 4, M12 (`Upsample(mode='bilinear', align_corners=...)`, 'linear') and M13 ('nearest-exact'), in float64."
    x = np.random.default_rng(0).standard_normal(shape)
    res = []
    for L in (torch, minima):
        xt = L.tensor(x, requires_grad=True)
        y = L.nn.Upsample(**kw)(xt) if module else L.nn.functional.interpolate(xt, **kw)
        (y * L.tensor(np.random.default_rng(1).standard_normal(y.shape))).sum().backward()
        res.append((y.detach().numpy(), xt.grad.numpy()))
    for a, b in zip(*res): np.testing.assert_allclose(b, a, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match='align_corners'):
        minima.nn.functional.interpolate(minima.tensor(x), scale_factor=2, align_corners=True)

@pytest.mark.parametrize('bad', ['missing', 'unexpected', 'shape'])
def test_load_state_dict_errors_are_runtime_errors_as_torch(bad):
    "Audit 4, C7's exception type: torch raises RuntimeError for keys and shapes; minima's also stay Key/ValueErrors."
    for L in (torch, minima):
        m = L.nn.Linear(2, 3)
        sd = {'weight': L.zeros(3, 2), 'bias': L.zeros(3)}
        if bad == 'missing': del sd['bias']
        elif bad == 'unexpected': sd['extra'] = L.zeros(1)
        else: sd['weight'] = L.zeros(3, 3)
        with pytest.raises(RuntimeError): m.load_state_dict(sd)
    with pytest.raises(ValueError if bad == 'shape' else KeyError, match='load_state_dict'): m.load_state_dict(sd)

@pytest.mark.parametrize('mode', ['reflect', 'replicate', 'circular'])
@pytest.mark.parametrize('kw', [dict(padding=2), dict(padding=1, stride=2, dilation=2), dict(padding='same')])
def test_conv1d_padding_modes_as_torch(mode, kw):
    "Audit 4, M11: `Conv1d(padding_mode='reflect'/'replicate'/'circular')` (Conv2d had them), float64."
    t = torch.nn.Conv1d(2, 3, 3, padding_mode=mode, dtype=torch.float64, **kw)
    m = minima.nn.Conv1d(2, 3, 3, padding_mode=mode, dtype='float64', **kw)
    m.load_state_dict({k: v.detach().numpy() for k, v in t.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((2, 2, 7))
    res = []
    for L, mod in ((torch, t), (minima, m)):
        xt = L.tensor(x, requires_grad=True)
        y = mod(xt)
        (y * L.tensor(np.random.default_rng(1).standard_normal(y.shape))).sum().backward()
        res.append((y.detach().numpy(), xt.grad.numpy(), mod.weight.grad.numpy()))
    for a, b in zip(*res): np.testing.assert_allclose(b, a, rtol=0, atol=1e-12)

@pytest.mark.parametrize('bias_kv,zero_attn', [(True, False), (False, True), (True, True)])
@pytest.mark.parametrize('masks', [False, True])
@pytest.mark.parametrize('need_weights', [True, False])
@pytest.mark.parametrize('self_attn', [True, False])
def test_mha_add_bias_kv_add_zero_attn_as_torch(bias_kv, zero_attn, masks, need_weights, self_attn):
    "Audit 4, M10: `MultiheadAttention(add_bias_kv=, add_zero_attn=)`: outputs, weights and gradients, float64."
    E, H, L, S, B = 8, 2, 3, 4, 2
    t = torch.nn.MultiheadAttention(E, H, add_bias_kv=bias_kv, add_zero_attn=zero_attn, dtype=torch.float64)
    m = minima.nn.MultiheadAttention(E, H, add_bias_kv=bias_kv, add_zero_attn=zero_attn, dtype='float64')
    m.load_state_dict({k: v.detach().numpy() for k, v in t.state_dict().items()})
    assert sorted(m.state_dict()) == sorted(t.state_dict())
    rng = np.random.default_rng(0)
    q = rng.standard_normal((L, B, E))
    kv = q if self_attn else rng.standard_normal((S, B, E))
    n = L if self_attn else S
    am = np.triu(np.ones((L, n), bool), 1) if masks else None
    kpm = np.array([[False] * n, [False] * (n - 1) + [True]]) if masks else None
    res = []
    for Lb, mod in ((torch, t), (minima, m)):
        qt = Lb.tensor(q, requires_grad=True)
        kt = qt if self_attn else Lb.tensor(kv, requires_grad=True)
        out, w = mod(qt, kt, kt, attn_mask=None if am is None else Lb.tensor(am),
                     key_padding_mask=None if kpm is None else Lb.tensor(kpm), need_weights=need_weights)
        (out * Lb.tensor(np.random.default_rng(1).standard_normal(out.shape))).sum().backward()
        grads = [qt.grad] + [p.grad for p in (mod.bias_k, mod.bias_v, mod.in_proj_weight) if p is not None]
        res.append([out.detach().numpy()] + ([w.detach().numpy()] if need_weights else []) + [g.numpy() for g in grads])
    assert len(res[0]) == len(res[1])
    for a, b in zip(*res): np.testing.assert_allclose(b, a, rtol=0, atol=1e-12)
