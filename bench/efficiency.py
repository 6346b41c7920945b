"""The efficiency tier measured: the digits CNN and the char GPT in several variants, each with its quality, its size
and its latency, written to bench/results/efficiency_<date>.json for chapter 27 (the table and the Pareto plot).

    python bench/efficiency.py [--quick] [--out bench/results/efficiency_DATE.json]

Variants: fp32 eager (with torch eager on the same weights as the reference), compiled (chapter 21b), pruned
(unstructured: global L1 with fine-tuning; structured: half the channels removed, the network rebuilt smaller),
distilled (a smaller student trained on the teacher's soft targets), and, when `minima.ao.quantization` or bf16
support exist, those too. Size is the bytes needed to store the weights (sparse weights: 4-byte value + 2-byte index
per non-zero). Latency is the median of interleaved rounds of inference forwards (batch 64 digits; batch 8 x 32
characters), so that load from other jobs hits every variant alike. Never gates CI.
"""
import argparse, datetime, json, os, platform, statistics, subprocess, sys, time
import numpy as np

import minima as mi
from minima import nn, optim, init
from minima.nn import functional as F
import minima.nn.utils.prune as prune
from _common import blas_threads


def machine():
    cpu = platform.processor()
    try:
        for line in open('/proc/cpuinfo'):
            if line.startswith('model name'): cpu = line.split(':', 1)[1].strip(); break
    except OSError: pass
    try: commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True,
                                 cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError: commit = ''
    return dict(machine=platform.node(), cpu_model=cpu, cores=os.cpu_count(), blas_threads=blas_threads(),
                load_average=list(os.getloadavg()), date=datetime.datetime.now(datetime.timezone.utc).isoformat(),
                commit=commit, python=platform.python_version(), numpy=np.__version__)


def latencies(fns, rounds=7, calls=5):
    "Median seconds per call of each function in `fns` (a dict), over interleaved rounds."
    for f in fns.values(): f(); f()
    ts = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls): f()
            ts[k].append((time.perf_counter() - t0) / calls)
    return {k: statistics.median(v) for k, v in ts.items()}


def weight_bytes(model, sparse=False):
    "Bytes to store the parameters: dense float32, or (sparse) 6 bytes per non-zero of each weight matrix."
    n = 0
    for name, p in model.named_parameters():
        a = p.numpy()
        if sparse and a.ndim >= 2: n += 6 * int((a != 0).sum())
        else: n += a.size * a.dtype.itemsize
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
    c1, c2 = model[0].out_channels, model[3].out_channels
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
    xb = mi.tensor(D['Xte'][:64])
    compiled = mi.compile(lambda x: base(x))
    def run(m):
        def f():
            with mi.no_grad(): return m(xb)
        return f
    fns = {k: run(m) for k, m in models.items()}
    fns['fp32 compiled'] = run(compiled)
    with mi.no_grad():
        for _ in range(3): compiled(xb)
        err = float(np.abs(compiled(xb).numpy() - base(xb).numpy()).max())
    assert err < 1e-4, f'compiled CNN differs from eager by {err}'
    import torch
    torch.set_num_threads(blas_threads())
    tm, tx = torch_cnn(base), torch.from_numpy(D['Xte'][:64])
    def tf():
        with torch.no_grad(): return tm(tx)
    fns['torch fp32 (reference)'] = tf
    lat = latencies(fns)
    rows = []
    for k, m in models.items():
        rows.append(dict(variant=k, accuracy=accuracy(m, D), size_bytes=weight_bytes(m, sparse='unstructured' in k),
                         params=int(sum(p.size for p in m.parameters())), latency_ms=lat[k] * 1e3))
    rows.append(dict(rows[0], variant='fp32 compiled', latency_ms=lat['fp32 compiled'] * 1e3))
    with torch.no_grad(): tacc = float((tm(torch.from_numpy(D['Xte'])).numpy().argmax(1) == D['Yte']).mean())
    rows.append(dict(rows[0], variant='torch fp32 (reference)', accuracy=tacc,
                     latency_ms=lat['torch fp32 (reference)'] * 1e3))
    return dict(quality='accuracy', higher_is_better=True, batch='64 digits, 1x8x8', rows=rows)


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
        return float(np.mean([F.cross_entropy(model(x).reshape((-1, V)), y.reshape((-1,))).numpy()
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
    xb, _ = batch(D['val'], 8, 32, np.random.default_rng(7))
    compiled = mi.compile(lambda x: teacher(x))
    def run(m):
        def f():
            with mi.no_grad(): return m(xb)
        return f
    fns = {k: run(m) for k, m in models.items()}
    fns['fp32 compiled'] = run(compiled)
    with mi.no_grad():
        for _ in range(3): compiled(xb)
        err = float(np.abs(compiled(xb).numpy() - teacher(xb).numpy()).max())
    assert err < 1e-4, f'compiled GPT differs from eager by {err}'
    lat = latencies(fns)
    rows = [dict(variant=k, val_loss=val_loss(m, D), size_bytes=weight_bytes(m, sparse='unstructured' in k),
                 params=int(sum(p.size for p in m.parameters())), latency_ms=lat[k] * 1e3)
            for k, m in models.items()]
    rows.append(dict(rows[0], variant='fp32 compiled', latency_ms=lat['fp32 compiled'] * 1e3))
    return dict(quality='val_loss', higher_is_better=False, batch='8 sequences x 32 characters',
                real_text=D['real'], teacher_steps=st, student_steps=ss, rows=rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--quick', action='store_true', help='short training (a smoke test; numbers not meaningful)')
    ap.add_argument('--out', help='the results file (default bench/results/efficiency_<date>.json)')
    args = ap.parse_args()
    info = machine()
    res = dict(info, quick=args.quick, models=dict(digits_cnn=bench_cnn(args.quick), char_gpt=bench_gpt(args.quick)))
    res['load_average_end'] = list(os.getloadavg())
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), 'results',
                                   f"efficiency_{info['date'][:10]}.json")
    tmp = out + '.tmp'
    with open(tmp, 'w') as f: json.dump(res, f, indent=1)
    os.replace(tmp, out)
    for name, r in res['models'].items():
        q = r['quality']
        print(f"\n{name} ({q}, {r['batch']}); load average {info['load_average']}")
        print(f"| {'variant':34s} | {q:>9s} | {'KB':>7s} | {'latency ms':>10s} |")
        for row in r['rows']:
            print(f"| {row['variant']:34s} | {row[q]:9.4f} | {row['size_bytes'] / 1024:7.1f} | {row['latency_ms']:10.2f} |")
    print('\nwrote', out)


if __name__ == '__main__': main()
