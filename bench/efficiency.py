"""The efficiency tier measured: the digits CNN and the char GPT in several variants, each with its quality, its size
and its latency, written to bench/results/efficiency_<date>.json for chapter 27 (the table and the Pareto plot).

    python bench/efficiency.py [--quick]

Variants: fp32 eager (with torch eager on the same weights as the reference), compiled (chapter 21b), bfloat16
(chapter 24: the weights cast with `.bfloat16()`, the input too), int8 (chapter 26: the CNN statically quantized
after folding its batch norms into the convolutions and calibrating on training digits; the GPT's Linear layers
dynamically quantized with `quantize_dynamic`), pruned (unstructured: global L1 with fine-tuning; structured: half
the channels removed, the network rebuilt smaller) and distilled (a smaller student trained on the teacher's soft
targets). Size is the bytes needed to store the weights (sparse weights: 4-byte value + 2-byte index per non-zero;
int8 weights: a byte per weight plus a float32 scale and an int32 zero point per channel, float32 biases).
Latency is the median of interleaved rounds of inference forwards (batch 64 digits; batch 8 x 32 characters), so
that load from other jobs hits every variant alike. Never gates CI.
"""
import argparse, copy, os, statistics
import numpy as np

import minima as mi
from minima import nn, optim, init
from minima.nn import functional as F
import minima.nn.utils.prune as prune
from minima.ao import quantization as tq
from _common import blas_threads, timeit_interleaved, write_results


def forward_fn(model, x):
    "One timed call: an inference forward of `model` (a module or a compiled function) on `x`."
    def f():
        with mi.no_grad(): return model(x)
    return f


def latencies_ms(fns, rounds=7, calls=5):
    "Median milliseconds per call of each function in `fns` (a dict), over interleaved rounds."
    t = timeit_interleaved(fns, rounds, calls, stat=statistics.median, warmup=2)
    return {k: v * 1e3 for k, v in t.items()}


def weight_bytes(model, sparse=False):
    """Bytes to store the weights: each parameter at its dtype's size, or (sparse) 6 bytes per non-zero of each
    weight matrix; a quantized module's int8 weights (`QTensor.nbytes`: codes plus per-channel qparams) and its
    float32 bias."""
    n = 0
    for name, p in model.named_parameters():
        a = p.detach().numpy()
        if sparse and a.ndim >= 2: n += 6 * int((a != 0).sum())
        else: n += a.size * a.dtype.itemsize
    for m in model.modules():
        for v in vars(m).values():
            if isinstance(v, tq.QTensor): n += v.nbytes()
        if isinstance(m, (tq.DynamicQuantizedLinear, tq.QuantizedLinear)) and m.bias is not None:
            n += 4 * int(np.prod(m.bias.shape))
    return n


def kd_loss(student, teacher, y, T, alpha):
    "Chapter 25's distillation loss: alpha T^2 KL(soft teacher || soft student) + (1 - alpha) CE."
    soft = F.kl_div(F.log_softmax(student / T, dim=-1), F.log_softmax(teacher / T, dim=-1),
                    reduction='batchmean', log_target=True)
    return alpha * T * T * soft + (1 - alpha) * F.cross_entropy(student, y)


# ---- the digits CNN
def cnn(c1=16, c2=32, seed=0):
    init.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, c1, 3, padding=1), nn.BatchNorm2d(c1), nn.ReLU(),
                         nn.Conv2d(c1, c2, 3, padding=1), nn.BatchNorm2d(c2), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(c2 * 16, 10))


def train_cnn(model, D, epochs, lr=0.05, teacher=None, T=4.0, alpha=0.7, seed=0):
    Xtr, Ytr = D['Xtr'], D['Ytr']
    opt, rng = optim.SGD(model.parameters(), lr=lr, momentum=0.9), np.random.default_rng(seed)
    model.train()
    for _ in range(epochs):
        for idx in np.array_split(rng.permutation(len(Xtr)), len(Xtr) // 32):
            x, y = mi.tensor(Xtr[idx]), mi.tensor(Ytr[idx])
            out = model(x)
            if teacher is None: loss = F.cross_entropy(out, y)
            else:
                with mi.no_grad(): zt = teacher(x)
                loss = kd_loss(out, zt, y, T, alpha)
            opt.zero_grad(); loss.backward(); opt.step()
    model.eval()
    return model


def accuracy(model, D):
    with mi.no_grad(): return float((model(mi.tensor(D['Xte'])).numpy().argmax(1) == D['Yte']).mean())


def shrink_cnn(model, keep=0.5):
    """Structured pruning made real: rank each conv's output channels by L2 norm (prune.ln_structured), keep the
    best `keep` fraction, and rebuild a smaller dense CNN from the surviving channels."""
    kept = []
    for conv in (model[0], model[3]):
        probe = nn.Conv2d(conv.in_channels, conv.out_channels, 3, padding=1)
        probe.weight.data = conv.weight.detach()
        prune.ln_structured(probe, 'weight', amount=1 - keep, n=2, dim=0)
        kept.append(np.flatnonzero(probe.weight_mask.numpy().sum((1, 2, 3))))
    k1, k2 = kept
    small = cnn(len(k1), len(k2))
    sd, new = model.state_dict(), {}
    for i, k_out, k_in in ((0, k1, None), (3, k2, k1)):
        w = sd[f'{i}.weight'][k_out]
        new[f'{i}.weight'] = w if k_in is None else w[:, k_in]
        new[f'{i}.bias'] = sd[f'{i}.bias'][k_out]
        for name in ('weight', 'bias', 'running_mean', 'running_var'):
            new[f'{i + 1}.{name}'] = sd[f'{i + 1}.{name}'][k_out]
    cols = (k2[:, None] * 16 + np.arange(16)[None, :]).reshape(-1)   # Flatten's order is (channel, 4, 4)
    new['8.weight'], new['8.bias'] = sd['8.weight'][:, cols], sd['8.bias']
    small.load_state_dict({k: new.get(k, v) for k, v in small.state_dict().items()})
    return small


class LowPrecision(nn.Module):
    """`module` with its weights cast to `dtype` (`.to(dtype)`, as torch's `model.bfloat16()`), run on inputs cast
    to `dtype` (token ids stay integers); its output comes back as float32 for the quality metrics."""
    def __init__(self, module, dtype='bfloat16'):
        super().__init__()
        self.module, self.dtype = copy.deepcopy(module).to(dtype), dtype
    def forward(self, x):
        if x.dtype.startswith('float'): x = x.to(self.dtype)
        return self.module(x).to('float32')


def fold_bn(conv, bn):
    "A Conv2d equal (in eval mode) to `bn(conv(x))`: w * g / sqrt(var + eps) per output channel, bias shifted."
    g = bn.weight.detach().numpy() / np.sqrt(bn.running_var.detach().numpy() + bn.eps)
    out = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, padding=conv.padding)
    out.weight.data = mi.tensor((conv.weight.detach().numpy() * g[:, None, None, None]).astype('float32'))
    b = conv.bias.detach().numpy() if conv.bias is not None else 0
    out.bias.data = mi.tensor(((b - bn.running_mean.detach().numpy()) * g + bn.bias.detach().numpy()).astype('float32'))
    return out


def int8_cnn(model, D, calib=512):
    """Chapter 26's static quantization of the CNN: batch norms folded into the convolutions, then `prepare`,
    calibration on `calib` training digits, `convert` (int8 weights per channel, uint8 activations)."""
    m = nn.Sequential(tq.QuantStub(), fold_bn(model[0], model[1]), nn.ReLU(), fold_bn(model[3], model[4]), nn.ReLU(),
                      nn.MaxPool2d(2), nn.Flatten(), copy.deepcopy(model[8]), tq.DeQuantStub())
    m.eval()
    m.qconfig = tq.default_qconfig
    p = tq.prepare(m)
    with mi.no_grad(): p(mi.tensor(D['Xtr'][:calib]))
    return tq.convert(p)


def torch_cnn(model):
    "The same CNN in torch, with the same weights and running statistics (eval mode)."
    import torch
    c1, c2 = model[0].out_channels, model[3].out_channels
    t = torch.nn.Sequential(torch.nn.Conv2d(1, c1, 3, padding=1), torch.nn.BatchNorm2d(c1), torch.nn.ReLU(),
                            torch.nn.Conv2d(c1, c2, 3, padding=1), torch.nn.BatchNorm2d(c2), torch.nn.ReLU(),
                            torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(c2 * 16, 10))
    t.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in model.state_dict().items()},
                      strict=False)
    return t.eval()


def bench_cnn(quick):
    X, Y = mi.data.load_digits(images=True)
    perm = np.random.default_rng(0).permutation(len(X))
    D = dict(Xtr=X[perm[:1437]], Ytr=Y[perm[:1437]], Xte=X[perm[1437:]], Yte=Y[perm[1437:]])
    ep = 2 if quick else 6
    models = {'fp32': train_cnn(cnn(), D, ep)}
    base = models['fp32']
    for amount in (0.5, 0.8):
        m = cnn(); m.load_state_dict(base.state_dict())
        prune.global_unstructured([(m[0], 'weight'), (m[3], 'weight'), (m[8], 'weight')],
                                  prune.L1Unstructured, amount=amount)
        train_cnn(m, D, 1, lr=0.01, seed=1)
        for i in (0, 3, 8): prune.remove(m[i], 'weight')
        models[f'pruned {amount:.0%} (unstructured)'] = m
    models['pruned 50% channels (structured)'] = train_cnn(shrink_cnn(base), D, 1, lr=0.01, seed=1)
    models['small CNN, trained alone'] = train_cnn(cnn(8, 16, seed=2), D, ep)
    models['small CNN, distilled'] = train_cnn(cnn(8, 16, seed=2), D, ep, teacher=base)
    models['bf16'] = LowPrecision(base).eval()
    models['int8 (static, per channel)'] = int8_cnn(base, D)
    import torch
    torch.set_num_threads(blas_threads())
    tm, tx = torch_cnn(base), torch.from_numpy(D['Xte'][:64])
    def tf():
        with torch.no_grad(): return tm(tx)
    rows = measure(models, mi.tensor(D['Xte'][:64]), lambda m: dict(accuracy=accuracy(m, D)),
                   {'torch fp32 (reference)': tf})
    with torch.no_grad(): tacc = float((tm(torch.from_numpy(D['Xte'])).numpy().argmax(1) == D['Yte']).mean())
    rows[-1]['accuracy'] = tacc
    return dict(quality='accuracy', higher_is_better=True, batch='64 digits, 1x8x8', rows=rows)


def measure(models, xb, quality, extra=None):
    """One row per variant in `models` (the first is the fp32 model), plus 'fp32 compiled' (checked against eager)
    and the `extra` functions (timed only; their rows copy the fp32 one): quality, stored bytes, parameters and the
    latency of a forward on `xb`, all variants timed in the same interleaved rounds."""
    base, extra = next(iter(models.values())), extra or {}
    compiled = mi.compile(lambda x: base(x))
    with mi.no_grad():
        for _ in range(3): compiled(xb)
        err = float(np.abs(compiled(xb).detach().numpy() - base(xb).detach().numpy()).max())
    assert err < 1e-4, f'the compiled model differs from eager by {err}'
    fns = {k: forward_fn(m, xb) for k, m in models.items()}
    fns['fp32 compiled'] = forward_fn(compiled, xb)
    lat = latencies_ms({**fns, **extra})
    rows = [dict(variant=k, **quality(m), size_bytes=weight_bytes(m, sparse='unstructured' in k),
                 params=n_weights(m), latency_ms=lat[k])
            for k, m in models.items()]
    rows += [dict(rows[0], variant=k, latency_ms=lat[k]) for k in ['fp32 compiled', *extra]]
    return rows


def n_weights(m):
    "The number of weights: the float parameters plus the int8 codes of the quantized layers."
    return int(sum(p.size for p in m.parameters()) +
               sum(np.prod(v.shape) for mod in m.modules() for v in vars(mod).values() if isinstance(v, tq.QTensor)))


# ---- the char GPT
def gpt_data():
    text, real = mi.data.tiny_shakespeare_or_stand_in()
    chars = sorted(set(text))
    lut = {c: i for i, c in enumerate(chars)}
    data = np.array([lut[c] for c in text], dtype='int64')
    split = int(0.9 * len(data))
    return dict(train=data[:split], val=data[split:], V=len(chars), real=real)


def batch(ids, B, T, rng):
    i = rng.integers(0, len(ids) - T - 1, B)
    return (mi.tensor(np.stack([ids[j:j + T] for j in i])), mi.tensor(np.stack([ids[j + 1:j + T + 1] for j in i])))


def gpt(D, n_layer, n_embd, seed):
    init.manual_seed(seed)
    return nn.GPT(D['V'], block_size=32, n_layer=n_layer, n_head=2, n_embd=n_embd)


def train_gpt(model, D, steps, teacher=None, T=2.0, alpha=0.5, lr=3e-3, B=16, seed=0):
    V = D['V']
    opt, rng = optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01), np.random.default_rng(seed)
    model.train()
    for _ in range(steps):
        x, y = batch(D['train'], B, 32, rng)
        logits = model(x).reshape((-1, V))
        if teacher is None: loss = F.cross_entropy(logits, y.reshape((-1,)))
        else:
            with mi.no_grad(): zt = teacher(x).reshape((-1, V))
            loss = kd_loss(logits, zt, y.reshape((-1,)), T, alpha)
        opt.zero_grad(); loss.backward(); opt.step()
    model.eval()
    return model


def val_loss(model, D, n=20, B=16):
    rng, V = np.random.default_rng(123), D['V']
    with mi.no_grad():
        return float(np.mean([F.cross_entropy(model(x).reshape((-1, V)), y.reshape((-1,))).detach().numpy()
                              for x, y in (batch(D['val'], B, 32, rng) for _ in range(n))]))


def bench_gpt(quick):
    D = gpt_data()
    st, ss = (100, 60) if quick else (1000, 600)
    teacher = train_gpt(gpt(D, 2, 64, 0), D, st)
    models = {'fp32': teacher}
    for amount in (0.5, 0.8):
        m = gpt(D, 2, 64, 0); m.load_state_dict(teacher.state_dict())
        lins = [(l, 'weight') for l in m.modules() if isinstance(l, nn.Linear) and l is not m.lm_head]
        prune.global_unstructured(lins, prune.L1Unstructured, amount=amount)
        train_gpt(m, D, max(ss // 6, 10), lr=1e-3, seed=1)
        for l, n in lins: prune.remove(l, n)
        models[f'pruned {amount:.0%} (unstructured)'] = m
    models['small GPT, trained alone'] = train_gpt(gpt(D, 1, 32, 1), D, ss)
    models['small GPT, distilled'] = train_gpt(gpt(D, 1, 32, 1), D, ss, teacher=teacher)
    models['bf16'] = LowPrecision(teacher).eval()
    models['int8 (dynamic Linear)'] = tq.quantize_dynamic(teacher, {nn.Linear}, dtype=tq.qint8).eval()
    xb, _ = batch(D['val'], 8, 32, np.random.default_rng(7))
    rows = measure(models, xb, lambda m: dict(val_loss=val_loss(m, D)))
    return dict(quality='val_loss', higher_is_better=False, batch='8 sequences x 32 characters',
                real_text=D['real'], teacher_steps=st, student_steps=ss, rows=rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--quick', action='store_true',
                    help='short training, written as efficiency_quick_<date>.json (a smoke test; numbers '
                         'not meaningful)')
    args = ap.parse_args()
    load0 = round(os.getloadavg()[0], 2)
    models = dict(digits_cnn=bench_cnn(args.quick), char_gpt=bench_gpt(args.quick))
    # one flat list of rows (each names its model) for write_results; the models' own facts go beside it
    rows = [dict(model=name, **row) for name, r in models.items() for row in r['rows']]
    meta = {name: {k: v for k, v in r.items() if k != 'rows'} for name, r in models.items()}
    for name, r in models.items():
        q = r['quality']
        print(f"\n{name} ({q}, {r['batch']}); load average at start {load0}")
        print(f"| {'variant':34s} | {q:>9s} | {'KB':>7s} | {'latency ms':>10s} |")
        for row in r['rows']:
            print(f"| {row['variant']:34s} | {row[q]:9.4f} | {row['size_bytes'] / 1024:7.1f} | {row['latency_ms']:10.2f} |")
    write_results('efficiency_quick' if args.quick else 'efficiency', rows, quick=args.quick, load_1m_start=load0,
                  models=meta)


if __name__ == '__main__': main()
