"""Transformer modules against torch with copied weights (forward, and backward under a random upstream gradient),
`nn.Transformer` in float64, needle's hw4_extra classes (in `minima.needle`), positional encodings, and the GPT's
KV-cached generation."""
import math
import numpy as np
import pytest
import torch
import minima as mi
from minima import nn
from minima.nn import transformer as gpt_mod, transformer_layers as layers_mod
from minima.needle import nn as ndl_nn           # needle's hw4_extra classes live in needle's face

RTOL, ATOL = 1e-4, 1e-5      # float32 forward
GRTOL, GATOL = 1e-3, 1e-4    # float32 gradients (longer chains of sums)


def _load(m, tm):
    m.load_state_dict({k: v.detach().numpy() for k, v in tm.state_dict().items()})


def _check(m, tm, inputs, kw=None, tkw=None, seed=0, out_index=None):
    """Run minima module `m` and torch module `tm` (same weights) on float32 `inputs`; compare outputs, the
    gradients of the inputs and of every parameter under a random upstream gradient."""
    kw, tkw = kw or {}, tkw if tkw is not None else (kw or {})
    xs = [mi.Tensor(a) for a in inputs]
    ts = [torch.tensor(a, requires_grad=True) for a in inputs]
    y, ty = m(*xs, **kw), tm(*ts, **tkw)
    if out_index is not None: y, ty = y[out_index], ty[out_index]
    assert y.shape == tuple(ty.shape)
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=RTOL, atol=ATOL)
    g = np.random.default_rng(seed).standard_normal(y.shape).astype('float32')
    y.backward(mi.Tensor(g))
    ty.backward(torch.tensor(g))
    for x, t in zip(xs, ts):   # an input that does not reach the output (the value, for the weights) has no grad
        if t.grad is None: assert x.grad is None
        else: np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=GRTOL, atol=GATOL)
    tp = dict(tm.named_parameters())
    mp = dict(m.named_parameters())
    assert set(mp) == set(tp), (set(mp) ^ set(tp))
    for k, p in mp.items():
        if tp[k].grad is None: assert p.grad is None, k
        else: np.testing.assert_allclose(p.grad.numpy(), tp[k].grad.numpy(), rtol=GRTOL, atol=GATOL, err_msg=k)


def _x(*shape, seed=0): return np.random.default_rng(seed).standard_normal(shape).astype('float32')


# ---------------------------------------------------------------- LayerNorm
@pytest.mark.parametrize('shape,ns,affine,bias', [((4, 5), 5, True, True), ((2, 3, 4, 5), (4, 5), True, True),
                                                   ((3, 6), (6,), False, True), ((2, 3, 4), 4, True, False)])
def test_layernorm(shape, ns, affine, bias):
    tm = torch.nn.LayerNorm(ns, elementwise_affine=affine, bias=bias)
    if affine:
        with torch.no_grad():
            tm.weight.copy_(torch.randn(tm.weight.shape))
            if bias: tm.bias.copy_(torch.randn(tm.bias.shape))
    m = nn.LayerNorm(ns, elementwise_affine=affine, bias=bias)
    _load(m, tm)
    _check(m, tm, [_x(*shape)])


def test_needle_classes_only_in_needle():
    # torch's namespace keeps no needle-convention class; needle's face offers them under needle's names
    for name in ('MultiHeadAttention', 'AttentionLayer', 'TransformerLayer'):
        assert not any(hasattr(m, name) for m in (nn, gpt_mod, layers_mod)) and hasattr(ndl_nn, name)
    assert ndl_nn.Transformer is not nn.Transformer and ndl_nn.MultiheadAttention is nn.MultiheadAttention
    assert ndl_nn.Transformer.__module__ == 'minima.needle.core' and nn.Transformer is layers_mod.Transformer


def test_layernorm1d_is_kept():
    assert nn.LayerNorm1d is not nn.LayerNorm and nn.LayerNorm1d(4)(mi.Tensor(_x(2, 4))).shape == (2, 4)


# ---------------------------------------------------------------- MultiheadAttention
def _mha(E=8, H=2, batch_first=False, bias=True, seed=0):
    torch.manual_seed(seed)
    tm = torch.nn.MultiheadAttention(E, H, batch_first=batch_first, bias=bias)
    with torch.no_grad():
        for p in tm.parameters(): p.add_(0.1 * torch.randn(p.shape))   # nonzero biases
    m = nn.MultiheadAttention(E, H, batch_first=batch_first, bias=bias)
    _load(m, tm)
    return m, tm


@pytest.mark.parametrize('batch_first', [False, True])
@pytest.mark.parametrize('need_weights,average', [(True, True), (True, False), (False, True)])
def test_mha_self(batch_first, need_weights, average):
    x = _x(2, 5, 8) if batch_first else _x(5, 2, 8)
    kw = dict(need_weights=need_weights, average_attn_weights=average)
    for idx in ([0, 1] if need_weights else [0]):   # one tensor as query, key and value: the fused projection
        m2, tm2 = _mha(batch_first=batch_first)
        xs, ts = mi.Tensor(x), torch.tensor(x, requires_grad=True)
        y, ty = m2(xs, xs, xs, **kw)[idx], tm2(ts, ts, ts, **kw)[idx]
        np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=RTOL, atol=ATOL)
        g = _x(*y.shape, seed=3)
        y.backward(mi.Tensor(g)); ty.backward(torch.tensor(g))
        np.testing.assert_allclose(xs.grad.numpy(), ts.grad.numpy(), rtol=GRTOL, atol=GATOL)
        for k, p in m2.named_parameters():
            tg = dict(tm2.named_parameters())[k].grad
            if tg is None: assert p.grad is None, k      # out_proj does not reach the weights
            else: np.testing.assert_allclose(p.grad.numpy(), tg.numpy(), rtol=GRTOL, atol=GATOL, err_msg=k)


@pytest.mark.parametrize('batch_first', [False, True])
def test_mha_cross_with_masks(batch_first):
    B, L, S, E, H = 3, 4, 6, 8, 2
    m, tm = _mha(E, H, batch_first=batch_first)
    q = _x(B, L, E, seed=1) if batch_first else _x(L, B, E, seed=1)
    kv = _x(B, S, E, seed=2) if batch_first else _x(S, B, E, seed=2)
    rng = np.random.default_rng(5)
    attn_mask = rng.random((L, S)) < 0.3
    attn_mask[:, 0] = False
    kpm = np.zeros((B, S), bool); kpm[0, -2:] = True; kpm[2, 3] = True
    kw = dict(attn_mask=attn_mask, key_padding_mask=kpm, need_weights=False)
    tkw = dict(attn_mask=torch.tensor(attn_mask), key_padding_mask=torch.tensor(kpm), need_weights=False)
    _check(m, tm, [q, kv, kv.copy()], kw, tkw, out_index=0)


def test_mha_float_mask_per_head_and_weights():
    B, L, E, H = 2, 5, 8, 2
    m, tm = _mha(E, H, batch_first=True)
    x, y = _x(B, L, E, seed=1), _x(B, L, E, seed=2)
    fm = _x(B * H, L, L, seed=4)
    _check(m, tm, [x, y, y.copy()], dict(attn_mask=fm, average_attn_weights=False),
           dict(attn_mask=torch.tensor(fm), average_attn_weights=False), out_index=1)


def test_mha_unbatched_and_causal():
    L, E, H = 5, 8, 4
    m, tm = _mha(E, H)
    x = _x(L, E)
    causal = np.triu(np.ones((L, L), bool), 1)
    _check(m, tm, [x, x.copy(), x.copy()], dict(is_causal=True, need_weights=False),
           dict(attn_mask=torch.tensor(causal), is_causal=True, need_weights=False), out_index=0)


def test_mha_errors_and_dropout():
    m = nn.MultiheadAttention(8, 2, dropout=0.5, batch_first=True)
    x = mi.Tensor(_x(2, 3, 8))
    with pytest.raises(ValueError, match='key_padding_mask'): m(x, x, x, key_padding_mask=np.zeros((3, 3), bool))
    with pytest.raises(ValueError, match='attn_mask'): m(x, x, x, attn_mask=np.zeros((2, 2), bool))
    with pytest.raises(ValueError, match='divisible'): nn.MultiheadAttention(10, 3)
    m.eval()
    a, b = m(x, x, x)[0].detach().numpy(), m(x, x, x)[0].detach().numpy()
    assert np.array_equal(a, b)
    m.train()
    assert not np.allclose(m(x, x, x, need_weights=False)[0].detach().numpy(), a)


# ---------------------------------------------------------------- encoder / decoder layers
@pytest.mark.parametrize('norm_first', [False, True])
@pytest.mark.parametrize('batch_first', [False, True])
@pytest.mark.parametrize('activation', ['relu', 'gelu'])
def test_encoder_layer(norm_first, batch_first, activation):
    torch.manual_seed(0)
    B, T, E = 2, 5, 8
    kw = dict(dim_feedforward=16, dropout=0.0, activation=activation, batch_first=batch_first, norm_first=norm_first)
    tm = torch.nn.TransformerEncoderLayer(E, 2, **kw)
    m = nn.TransformerEncoderLayer(E, 2, **kw)
    _load(m, tm)
    x = _x(B, T, E) if batch_first else _x(T, B, E)
    causal = np.triu(np.ones((T, T), bool), 1)
    kpm = np.zeros((B, T), bool); kpm[1, -1] = True
    _check(m, tm, [x], dict(src_mask=causal, src_key_padding_mask=kpm),
           dict(src_mask=torch.tensor(causal), src_key_padding_mask=torch.tensor(kpm)))


@pytest.mark.parametrize('norm_first', [False, True])
@pytest.mark.parametrize('batch_first', [False, True])
def test_decoder_layer(norm_first, batch_first):
    torch.manual_seed(1)
    B, T, S, E = 2, 4, 6, 8
    kw = dict(dim_feedforward=16, dropout=0.0, batch_first=batch_first, norm_first=norm_first)
    tm = torch.nn.TransformerDecoderLayer(E, 2, **kw)
    m = nn.TransformerDecoderLayer(E, 2, **kw)
    _load(m, tm)
    tgt = _x(B, T, E, seed=1) if batch_first else _x(T, B, E, seed=1)
    mem = _x(B, S, E, seed=2) if batch_first else _x(S, B, E, seed=2)
    causal = np.triu(np.ones((T, T), bool), 1)
    mkpm = np.zeros((B, S), bool); mkpm[0, -3:] = True
    _check(m, tm, [tgt, mem], dict(tgt_mask=causal, memory_key_padding_mask=mkpm),
           dict(tgt_mask=torch.tensor(causal), memory_key_padding_mask=torch.tensor(mkpm)))


@pytest.mark.parametrize('norm_first', [False, True])
def test_multi_layer_encoder_decoder(norm_first):
    torch.manual_seed(2)
    B, T, S, E = 2, 4, 5, 8
    kw = dict(dim_feedforward=12, dropout=0.0, batch_first=True, norm_first=norm_first)
    tenc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(E, 2, **kw), 3, norm=torch.nn.LayerNorm(E),
                                       enable_nested_tensor=False)
    tdec = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(E, 2, **kw), 2)
    with torch.no_grad():
        for p in list(tenc.parameters()) + list(tdec.parameters()): p.add_(0.05 * torch.randn(p.shape))
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(E, 2, **kw), 3, norm=nn.LayerNorm(E))
    dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(E, 2, **kw), 2)
    _load(enc, tenc); _load(dec, tdec)
    kpm = np.zeros((B, S), bool); kpm[1, -2:] = True
    causal = np.triu(np.ones((T, T), bool), 1)

    class Seq2Seq:
        def __init__(self, e, d, T_): self.e, self.d, self.T = e, d, T_
        def __call__(self, src, tgt):
            if self.T is torch:
                mem = self.e(src, src_key_padding_mask=torch.tensor(kpm))
                return self.d(tgt, mem, tgt_mask=torch.tensor(causal), memory_key_padding_mask=torch.tensor(kpm))
            mem = self.e(src, src_key_padding_mask=kpm)
            return self.d(tgt, mem, tgt_mask=causal, memory_key_padding_mask=kpm)
        def named_parameters(self):
            return [('e.' + k, v) for k, v in self.e.named_parameters()] + [('d.' + k, v) for k, v in self.d.named_parameters()]
    m, tm = Seq2Seq(enc, dec, mi), Seq2Seq(tenc, tdec, torch)
    tm.named_parameters = lambda: [('e.' + k, v) for k, v in tenc.named_parameters()] + \
        [('d.' + k, v) for k, v in tdec.named_parameters()]
    _check(m, tm, [_x(B, S, E, seed=3), _x(B, T, E, seed=4)])


# ---------------------------------------------------------------- nn.Transformer (float64)
def _transformer(seed=0, **kw):
    torch.manual_seed(seed)
    kw = dict(dict(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=12, dropout=0.0),
              **kw)
    tm = torch.nn.Transformer(**kw, dtype=torch.float64)
    m = nn.Transformer(**kw, dtype='float64')
    m.load_state_dict(tm.state_dict())
    return m, tm


def _check64(m, tm, inputs, kw, tkw, seed=0):
    "As `_check`, in float64 with float64 tolerances."
    xs = [mi.Tensor(a, dtype='float64') for a in inputs]
    ts = [torch.tensor(a, requires_grad=True) for a in inputs]
    y, ty = m(*xs, **kw), tm(*ts, **tkw)
    assert y.shape == tuple(ty.shape) and y.dtype == 'float64'
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-10, atol=1e-11)
    g = np.random.default_rng(seed).standard_normal(y.shape)
    y.backward(mi.Tensor(g, dtype='float64')); ty.backward(torch.tensor(g))
    for x, t in zip(xs, ts): np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-10)
    tp, mp = dict(tm.named_parameters()), dict(m.named_parameters())
    assert set(mp) == set(tp), set(mp) ^ set(tp)
    for k, p in mp.items():
        np.testing.assert_allclose(p.grad.numpy(), tp[k].grad.numpy(), rtol=1e-9, atol=1e-10, err_msg=k)


@pytest.mark.parametrize('norm_first', [False, True])
@pytest.mark.parametrize('batch_first', [False, True])
@pytest.mark.parametrize('activation', ['relu', 'gelu'])
def test_transformer_matches_torch(norm_first, batch_first, activation):
    m, tm = _transformer(norm_first=norm_first, batch_first=batch_first, activation=activation)
    B, S, T, E = 2, 6, 4, 8
    rng = np.random.default_rng(1)
    src = rng.standard_normal((B, S, E) if batch_first else (S, B, E))
    tgt = rng.standard_normal((B, T, E) if batch_first else (T, B, E))
    tgt_mask = nn.Transformer.generate_square_subsequent_mask(T, dtype='float64')
    src_mask = rng.random((S, S)) < 0.3; src_mask[:, 0] = False                    # bool: True = not allowed
    memory_mask = rng.standard_normal((T, S))                                      # float: added to the scores
    spad = np.zeros((B, S), bool); spad[0, -2:] = True
    tpad = np.zeros((B, T), bool); tpad[1, -1] = True
    kw = dict(src_mask=src_mask, tgt_mask=tgt_mask, memory_mask=memory_mask, src_key_padding_mask=spad,
              tgt_key_padding_mask=tpad, memory_key_padding_mask=spad)
    tkw = dict(src_mask=torch.tensor(src_mask), memory_mask=torch.tensor(memory_mask), src_key_padding_mask=torch.tensor(spad),
               tgt_mask=torch.nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64),
               tgt_key_padding_mask=torch.tensor(tpad), memory_key_padding_mask=torch.tensor(spad))
    _check64(m, tm, [src, tgt], kw, tkw)


def test_transformer_unbatched_and_causal_flag():
    m, tm = _transformer(seed=3, num_encoder_layers=1, num_decoder_layers=3)
    rng = np.random.default_rng(2)
    src, tgt = rng.standard_normal((5, 8)), rng.standard_normal((3, 8))
    causal = torch.nn.Transformer.generate_square_subsequent_mask(3, dtype=torch.float64)
    # minima builds the causal mask from the flag; torch needs the mask as well (its flag is only a hint)
    _check64(m, tm, [src, tgt], dict(tgt_is_causal=True), dict(tgt_mask=causal, tgt_is_causal=True), seed=1)


def test_transformer_mask_init_and_errors():
    mask = nn.Transformer.generate_square_subsequent_mask(4)
    np.testing.assert_array_equal(mask.numpy(), torch.nn.Transformer.generate_square_subsequent_mask(4).numpy())
    assert mask.dtype == 'float32' and not mask.requires_grad
    mi.init.manual_seed(0)
    m = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=16)
    w0, w1 = (m.encoder.layers[i].self_attn.in_proj_weight.detach().numpy() for i in (0, 1))
    assert not np.allclose(w0, w1)                                   # re-initialised: the stacked copies differ
    assert np.abs(w0).max() <= math.sqrt(6 / (8 + 24)) and np.abs(w0).max() > 0.5 * math.sqrt(6 / (8 + 24))
    assert np.all(m.encoder.norm.weight.detach().numpy() == 1) and np.all(m.encoder.layers[0].self_attn.in_proj_bias.detach().numpy() == 0)
    assert len(m.decoder.layers) == 1 and isinstance(m.decoder.norm, nn.LayerNorm)
    with pytest.raises(ValueError, match='batch'): m(mi.Tensor(_x(5, 2, 8)), mi.Tensor(_x(3, 4, 8)))
    with pytest.raises(ValueError, match='d_model'): m(mi.Tensor(_x(5, 2, 8)), mi.Tensor(_x(3, 2, 6)))
    enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0), 1)
    assert nn.Transformer(d_model=8, nhead=2, custom_encoder=enc, num_decoder_layers=1).encoder is enc


def test_causal_mask_offset():
    from minima.ops import causal_mask
    full = causal_mask(6, 6).numpy()
    np.testing.assert_array_equal(causal_mask(2, 6, offset=4).numpy(), full[4:])   # the last two queries
    np.testing.assert_array_equal(causal_mask(6, 6).numpy(), np.triu(np.full((6, 6), -np.inf), 1))


# ---------------------------------------------------------------- positions
def test_sinusoidal_positions():
    pe = nn.SinusoidalPositionalEncoding(16, max_len=50)
    x = mi.Tensor(np.zeros((2, 10, 16), 'float32'))
    y = pe(x, offset=3).detach().numpy()
    t = np.arange(3, 13)[:, None]
    np.testing.assert_allclose(y[0, :, 0], np.sin(t[:, 0]), atol=1e-6)              # i = 0: wavelength 2 pi
    np.testing.assert_allclose(y[1, :, 1], np.cos(t[:, 0]), atol=1e-6)
    np.testing.assert_allclose(y[0, :, 14], np.sin(t[:, 0] / 10000 ** (14 / 16)), atol=1e-6)
    assert not pe.parameters() and 'pe' in pe.state_dict()
    with pytest.raises(ValueError, match='max_len'): pe(x, offset=45)


def test_learned_positions_train():
    pe = nn.LearnedPositionalEmbedding(8, 4)
    x = mi.Tensor(_x(2, 3, 4))
    y = pe(x, offset=2)
    np.testing.assert_allclose(y.detach().numpy(), x.detach().numpy() + pe.weight.detach().numpy()[2:5], atol=1e-6)
    g = _x(2, 3, 4, seed=1)
    y.backward(mi.Tensor(g))
    expect = np.zeros((8, 4), 'float32'); expect[2:5] = g.sum(0)
    np.testing.assert_allclose(pe.weight.grad.numpy(), expect, atol=1e-5)


# ---------------------------------------------------------------- needle's hw4_extra classes
def test_needle_attention_activation():
    q, k, v = (_x(2, 3, 5, 4, seed=s) for s in range(3))
    att = ndl_nn.MultiHeadAttention(causal=True)
    out, probs = att(*(mi.Tensor(a) for a in (q, k, v)))
    mask = np.triu(np.ones((5, 5)), 1) * -np.finfo(np.float32).max
    s = q @ k.swapaxes(-1, -2) / 2.0 + mask
    p = np.exp(s - s.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
    np.testing.assert_allclose(probs.detach().numpy(), p, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out.detach().numpy(), p @ v, rtol=1e-5, atol=1e-5)


def test_needle_attention_layer_against_torch():
    B, T, D, H, dh = 2, 5, 6, 3, 4
    layer = ndl_nn.AttentionLayer(D, H, dh, causal=True)
    x = _x(B, T, D)
    assert layer.q_projection.weight.shape == (D, H * dh)     # needle's Linear layout
    y = layer(mi.Tensor(x)).numpy()
    P = {k: torch.tensor(v.numpy()) for k, v in layer.state_dict().items()}
    tx = torch.tensor(x)
    def proj(name, t):
        t = torch.nn.functional.layer_norm(t, (D,), P[f'prenorm_{name}.weight'], P[f'prenorm_{name}.bias'])
        return (t @ P[f'{name}_projection.weight']).reshape(B, T, H, dh).transpose(1, 2)   # needle's (in, out)
    tq, tk, tv = proj('q', tx), proj('k', tx), proj('v', tx)
    o = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    ty = o.transpose(1, 2).reshape(B, T, H * dh) @ P['out_projection.weight']
    np.testing.assert_allclose(y, ty.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize('batch_first', [False, True])
def test_needle_transformer_is_causal(batch_first):
    model = ndl_nn.Transformer(8, 16, 2, num_head=2, dim_head=4, batch_first=batch_first, sequence_len=20)
    x = _x(2, 6, 8) if batch_first else _x(6, 2, 8)
    out, h = model(mi.Tensor(x))
    assert out.shape == x.shape and np.all(h.numpy() == 0)
    x2 = x.copy()
    if batch_first: x2[:, 4:] += 1.0
    else: x2[4:] += 1.0
    out2 = model(mi.Tensor(x2))[0].numpy()
    past = (slice(None), slice(0, 4)) if batch_first else (slice(0, 4),)
    np.testing.assert_allclose(out.numpy()[past], out2[past], atol=1e-5)   # the future does not reach the past
    assert not np.allclose(out.numpy(), out2)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


# ---------------------------------------------------------------- GPT and generation
class TorchGPT(torch.nn.Module):
    "The same architecture in torch, for the weight-copy check."
    def __init__(self, V, T, L, H, C):
        super().__init__()
        self.H = H
        self.wte, self.wpe = torch.nn.Embedding(V, C), torch.nn.Embedding(T, C)
        self.h = torch.nn.ModuleList()
        for _ in range(L):
            b = torch.nn.Module()
            b.ln_1, b.ln_2 = torch.nn.LayerNorm(C), torch.nn.LayerNorm(C)
            b.attn = torch.nn.Module(); b.attn.c_attn, b.attn.c_proj = torch.nn.Linear(C, 3 * C), torch.nn.Linear(C, C)
            b.mlp = torch.nn.Module(); b.mlp.c_fc, b.mlp.c_proj = torch.nn.Linear(C, 4 * C), torch.nn.Linear(4 * C, C)
            self.h.append(b)
        self.ln_f = torch.nn.LayerNorm(C)
        self.lm_head = torch.nn.Linear(C, V, bias=False)
        self.lm_head.weight = self.wte.weight
    def forward(self, idx):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe.weight[:T]
        for b in self.h:
            y = b.attn.c_attn(b.ln_1(x)).view(B, T, 3, self.H, -1).permute(2, 0, 3, 1, 4)
            y = torch.nn.functional.scaled_dot_product_attention(y[0], y[1], y[2], is_causal=True)
            x = x + b.attn.c_proj(y.transpose(1, 2).reshape(B, T, -1))
            x = x + b.mlp.c_proj(torch.nn.functional.gelu(b.mlp.c_fc(b.ln_2(x)), approximate='tanh'))
        return self.lm_head(self.ln_f(x))


def test_gpt_matches_torch():
    mi.init.manual_seed(0)
    m = nn.GPT(vocab_size=11, block_size=8, n_layer=2, n_head=2, n_embd=16)
    tm = TorchGPT(11, 8, 2, 2, 16)
    sd = m.state_dict()
    sd['wpe.weight'] = sd.pop('wpe.weight')
    tm.load_state_dict({k: torch.tensor(v.numpy()) for k, v in sd.items() if k != 'lm_head.weight'}, strict=False)
    idx = np.random.default_rng(0).integers(0, 11, (3, 8))
    y = m(idx)
    ty = tm(torch.tensor(idx))
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-5)
    g = _x(*y.shape, seed=2)
    y.backward(mi.Tensor(g)); ty.backward(torch.tensor(g))
    tp = dict(tm.named_parameters())
    for k, p in m.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), tp[k].grad.numpy(), rtol=GRTOL, atol=GATOL, err_msg=k)


@pytest.fixture(scope='module')
def small_gpt():
    mi.init.manual_seed(1)
    m = nn.GPT(vocab_size=13, block_size=12, n_layer=2, n_head=2, n_embd=16)
    for p in m.parameters():   # larger weights than GPT-2's init: sharper, more varied predictions
        p.cached_data = p.cached_data * 20.0 if p.ndim == 2 else p.cached_data
    return m


@pytest.mark.parametrize('kw', [dict(temperature=0), dict(temperature=1.0, seed=3), dict(temperature=0.8, top_k=4, seed=7)])
def test_cached_generation_matches_uncached(small_gpt, kw):
    prompt = np.array([[1, 2, 3], [4, 4, 0]])
    a = mi.nn.generate(small_gpt, prompt, 20, use_cache=True, **kw)   # runs past block_size = 12
    b = mi.nn.generate(small_gpt, prompt, 20, use_cache=False, **kw)
    assert a.shape == (2, 23) and np.array_equal(a, b)
    assert np.array_equal(a[:, :3], prompt)
    if kw.get('temperature'): assert len(np.unique(a[:, 3:])) > 2


def test_cached_logits_match_full_forward(small_gpt):
    idx = np.random.default_rng(0).integers(0, 13, (2, 9))
    full = small_gpt(idx).detach().numpy()
    cache = small_gpt.make_cache(2)
    with mi.no_grad():
        first = small_gpt(idx[:, :5], cache).numpy()
        rest = [small_gpt(idx[:, t:t + 1], cache).numpy() for t in range(5, 9)]
    np.testing.assert_allclose(np.concatenate([first] + rest, 1), full, rtol=1e-4, atol=1e-4)


def test_generate_errors(small_gpt):
    with pytest.raises(ValueError, match='prompt'): mi.nn.generate(small_gpt, np.zeros((1, 0), 'int64'), 3)
    with pytest.raises(ValueError, match='temperature'): mi.nn.generate(small_gpt, [1], 3, temperature=-1)
    with pytest.raises(ValueError, match='block_size'): small_gpt(np.zeros((1, 13), 'int64'))


def test_sdpa_float64_with_a_numpy_float_mask_stays_float64():
    "A float mask given as a numpy array takes the query's dtype: float64 attention is torch's to float64 rounding."
    torch = pytest.importorskip('torch')
    rng = np.random.default_rng(3)
    q, k, v = [rng.standard_normal((2, 3, 4, 8)) for _ in range(3)]
    m = rng.standard_normal((4, 4))
    ours = mi.nn.functional.scaled_dot_product_attention(*[mi.Tensor(a, dtype='float64') for a in (q, k, v)],
                                                         attn_mask=m)
    ref = torch.nn.functional.scaled_dot_product_attention(*[torch.tensor(a) for a in (q, k, v)],
                                                           attn_mask=torch.tensor(m))
    assert ours.dtype == 'float64'
    np.testing.assert_allclose(ours.detach().numpy(), ref.detach().numpy(), rtol=1e-12, atol=1e-13)
