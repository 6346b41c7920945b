"""`minima.compile` against eager minima and torch eager (and torch.compile with --torch-compile), one process.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 python bench/compile.py [--repeat 7] [--steps 20] [--torch-compile]

One training step (forward, cross-entropy, backward, SGD with momentum 0.9; Adam for the LSTM, AdamW for the GPT,
with `capturable=True` in the compiled step and the default in the eager one) per workload; process CPU time, best of
`--repeat` interleaved rounds of `--steps` steps (`--only mlp gpt ...` picks rows). Then GPT KV-cached decoding
(batch 1, the mean time per token over positions 1..256, best of 3 rounds; `--no-decode` skips it), and the compile time (the first four calls: one eager, two
captures and the first replay, which compiles the kernels) in a fresh process, cold (an empty kernel cache) and
from the disk cache, for each workload. Never gates CI.
"""
import argparse, os, subprocess, sys, tempfile, time
import numpy as np
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import blas_threads, machine, timeit_pair, write_results

LABELS = {'mlp': 'MLP 64-128-10 step, batch 128', 'cnn': 'digits CNN step (batch norm), batch 64',
          'mlp_big': 'MLP 784-512-512-10 step, batch 256', 'mlp_drop': 'MLP 64-128-10 + dropout 0.2, batch 128',
          'lstm': 'LSTM LM step (bench/lstm.py model), Adam',
          'gpt': 'GPT train step (bench/gpt.py model), AdamW'}
TARGETS = {'mlp': '0.4x', 'cnn': '1.0x', 'mlp_big': '-', 'mlp_drop': '-', 'lstm': '1.2x', 'gpt': '0.8x',
           'decode': '0.6x'}
HEAVY = ('lstm', 'gpt')   # fewer, longer steps

def build(name, nn, tnn):
    if name == 'cnn':
        m = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(32 * 4 * 4, 10))
        t = tnn.Sequential(tnn.Conv2d(1, 16, 3, padding=1), tnn.BatchNorm2d(16), tnn.ReLU(),
                           tnn.Conv2d(16, 32, 3, padding=1), tnn.BatchNorm2d(32), tnn.ReLU(), tnn.MaxPool2d(2),
                           tnn.Flatten(), tnn.Linear(32 * 4 * 4, 10))
        return m, t, (1, 8, 8), 64
    sizes, bs = ([784, 512, 512, 10], 256) if name == 'mlp_big' else ([64, 128, 10], 128)
    ml, tl = [], []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        ml.append(nn.Linear(a, b)); tl.append(tnn.Linear(a, b))
        if i < len(sizes) - 2:
            ml.append(nn.ReLU()); tl.append(tnn.ReLU())
            if name == 'mlp_drop': ml.append(nn.Dropout(0.2)); tl.append(tnn.Dropout(0.2))
    return nn.Sequential(*ml), tnn.Sequential(*tl), (sizes[0],), bs

def copy_weights(m, t, torch):
    "Same initial weights in both (by shape, so either Linear weight layout works)."
    with torch.no_grad():
        for p, q in zip(m.parameters(), t.parameters()):
            a = p.detach().numpy()
            if a.shape != tuple(q.shape): a = a.T if a.T.shape == tuple(q.shape) else a.reshape(q.shape)
            q.copy_(torch.tensor(np.ascontiguousarray(a)))

def make_big(name, torch, capturable=False):
    "The LSTM and GPT models of bench/lstm.py and bench/gpt.py (same weights in both), trained with Adam / AdamW."
    import minima as mi
    from minima import nn, optim, init
    if name == 'gpt':
        import gpt as G
        _, _, _, m, t = G.build(torch)
        B, T, V = G.B, G.T, G.V
        rng = np.random.default_rng(0)
        xn, yn = rng.integers(0, V, (B, T)), rng.integers(0, V, (B * T,))
        fwd = lambda x: m(x).reshape((B * T, V))
        tfwd = lambda x: t(x).view(B * T, V)
    else:
        import lstm as L
        V, E, H, T, B, NL = L.V, L.E, L.H, L.T, L.B, L.L
        init.manual_seed(0)
        emb, rnn, head = nn.Embedding(V, E), nn.LSTM(E, H, num_layers=NL), nn.Linear(H, V)
        m = nn.Sequential(emb, rnn, head)   # a container for parameters() only
        tnn = torch.nn
        t = tnn.ModuleDict(dict(emb=tnn.Embedding(V, E), lstm=tnn.LSTM(E, H, num_layers=NL), head=tnn.Linear(H, V)))
        with torch.no_grad():
            t['emb'].weight.copy_(torch.tensor(emb.weight.detach().numpy()))
            sd = rnn.state_dict()
            t['lstm'].load_state_dict({k: torch.tensor(v.detach().numpy()) for k, v in sd.items()})
        copy_weights(head, t['head'], torch)
        rng = np.random.default_rng(0)
        xn, yn = rng.integers(0, V, (T, B)), rng.integers(0, V, T * B)
        fwd = lambda x: head(rnn(emb(x))[0].reshape((T * B, H)))
        tfwd = lambda x: t['head'](t['lstm'](t['emb'](x))[0].reshape(T * B, H))
    x, y = mi.Tensor(xn, requires_grad=False), mi.Tensor(yn, requires_grad=False)
    tx, ty = torch.tensor(xn), torch.tensor(yn)
    Opt, TOpt = (optim.AdamW, torch.optim.AdamW) if name == 'gpt' else (optim.Adam, torch.optim.Adam)
    opt, topt = Opt(m.parameters(), lr=1e-3, capturable=capturable), TOpt(t.parameters(), lr=1e-3)
    lossf, tlossf = nn.CrossEntropyLoss(), torch.nn.CrossEntropyLoss()
    def mi_step(x, y):
        opt.zero_grad(); loss = lossf(fwd(x), y); loss.backward(); opt.step(); return loss
    def t_step(x, y):
        topt.zero_grad(); loss = tlossf(tfwd(x), y); loss.backward(); topt.step(); return loss
    return (lambda: mi_step(x, y)), mi_step, (lambda: t_step(tx, ty)), t_step, (x, y), (tx, ty)

def make_steps(name, torch, capturable=False):
    if name in HEAVY: return make_big(name, torch, capturable)
    import minima as mi
    from minima import nn, optim, init
    init.manual_seed(0)
    m, t, shape, bs = build(name, nn, torch.nn)
    copy_weights(m, t, torch)
    rng = np.random.default_rng(0)
    xn = rng.standard_normal((bs,) + shape).astype('float32'); yn = rng.integers(0, 10, bs)
    x, y, tx, ty = mi.Tensor(xn, requires_grad=False), mi.Tensor(yn), torch.tensor(xn), torch.tensor(yn)
    opt, topt = optim.SGD(m.parameters(), lr=0.01, momentum=0.9), torch.optim.SGD(t.parameters(), lr=0.01, momentum=0.9)
    lossf, tlossf = nn.CrossEntropyLoss(), torch.nn.CrossEntropyLoss()
    def mi_step(x, y):
        opt.zero_grad(); loss = lossf(m(x), y); loss.backward(); opt.step(); return loss
    def t_step(x, y):
        topt.zero_grad(); loss = tlossf(t(x), y); loss.backward(); topt.step(); return loss
    return (lambda: mi_step(x, y)), mi_step, (lambda: t_step(tx, ty)), t_step, (x, y), (tx, ty)

def decode_row(torch, clock, rounds=3):
    """GPT KV-cached decoding, batch 1, mean seconds per token over positions 1..256: minima eager (chapter 16's cache),
    minima compiled (`StaticDecoder`: one program for every token), torch eager (a concatenating cache)."""
    import gpt as G
    import minima as mi
    from minima.nn import StaticDecoder
    _, _, _, m, t = G.build(torch)
    m.eval(); t.eval()
    n, V = G.BLOCK, G.V
    toks = [np.array([[p % V]]) for p in range(n)]
    dec = StaticDecoder(m)
    def mi_eager():
        cache = m.make_cache(1)
        with mi.no_grad():
            for p in range(n): m(toks[p], cache).numpy()
    def mi_compiled():
        dec.reset()
        for p in range(n): dec(toks[p]).detach().numpy()
    def torch_eager():
        caches = [[] for _ in range(G.L)]
        with torch.no_grad():
            for p in range(n): t(torch.tensor(toks[p]), caches, p).numpy()
    mi_compiled()   # the first call runs eagerly, the next two capture
    assert len(dec.step.programs) == 1 and dec.step.captures == 2
    best = {}
    for _ in range(rounds):
        for name, f in (('eager', mi_eager), ('compiled', mi_compiled), ('torch', torch_eager)):
            s = clock(); f(); best[name] = min(best.get(name, np.inf), (clock() - s) / n)
    return best, dec.step.program.stats

def compile_time(name):
    "Seconds for the first four calls of the compiled step (this process: fresh imports, the cache as it is)."
    import torch, minima as mi
    _, step, _, _, (x, y), _ = make_steps(name, torch, capturable=True)   # (Adam's step count on the device)
    f = mi.compile(step)
    cpu = lambda: sum(os.times()[:4])   # this process and the compilers it ran
    t0, c0 = time.perf_counter(), cpu()
    for _ in range(4): f(x, y)   # one eager call, two captures, the first replay (kernels compile before it)
    dt, dc = time.perf_counter() - t0, cpu() - c0
    assert f.program is not None
    print(f'{dt:.3f} | {dc:.3f}')

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--repeat', type=int, default=7)
    ap.add_argument('--steps', type=int, default=20)
    ap.add_argument('--torch-compile', action='store_true')
    ap.add_argument('--compile-time')
    ap.add_argument('--decode', action=argparse.BooleanOptionalAction, default=True,
                    help='the GPT decoding row (StaticDecoder); --no-decode skips it')
    ap.add_argument('--no-compile-time', action='store_true')
    ap.add_argument('--only', nargs='*', default=['mlp', 'cnn', 'mlp_big', 'mlp_drop', 'lstm', 'gpt'])
    args = ap.parse_args()
    if args.compile_time: return compile_time(args.compile_time)
    import torch, minima as mi
    from minima.compile import CaptureError
    nt = blas_threads()
    torch.set_num_threads(nt)
    clock = time.process_time
    start, rows = machine(), []
    print(f"one training step, {nt} thread(s), best of {args.repeat} x {args.steps} steps, process CPU time\n")
    print('| workload | minima eager ms | minima compiled ms | torch eager ms | compiled / torch | eager / torch '
          '| target | calls (captured -> replayed) |' + (' torch.compile ms |' if args.torch_compile else ''))
    print('|---|---:|---:|---:|---:|---:|---:|---|' + ('---:|' if args.torch_compile else ''))
    for name in args.only:
        rep, steps = (3, 2) if name in HEAVY else (args.repeat, args.steps)
        eager, step, teager, tstep, (x, y), (tx, ty) = make_steps(name, torch)
        ce, _ = timeit_pair(eager, teager, rep, steps, clock, warmup=2)
        eager, step, teager, tstep, (x, y), (tx, ty) = make_steps(name, torch, capturable=True)
        f = mi.compile(step)
        try: tc, tt = timeit_pair(lambda: f(x, y), teager, rep, steps, clock, warmup=4)
        except CaptureError as e:
            print(f'| {LABELS[name]} | {ce * 1e3:.3f} | not captured: {str(e)[:100]} | | | | | |', flush=True)
            continue
        s = f.program.stats
        row = (f"| {LABELS[name]} | {ce * 1e3:.3f} | {tc * 1e3:.3f} | {tt * 1e3:.3f} | {tc / tt:.2f}x | {ce / tt:.2f}x "
               f"| {TARGETS[name]} | {s['captured']} -> {s['final']} ({s['kernels']} fused) |")
        if args.torch_compile and name in HEAVY: row += ' - |'
        elif args.torch_compile:
            tc2 = torch.compile(tstep)
            for _ in range(3): tc2(tx, ty)
            tcc, _ = timeit_pair(lambda: tc2(tx, ty), teager, rep, steps, clock, warmup=2)
            row += f' {tcc * 1e3:.3f} |'
        print(row, flush=True)
        rows.append(dict(key=name, workload=LABELS[name], eager_ms=ce * 1e3, compiled_ms=tc * 1e3, torch_ms=tt * 1e3,
                         compiled_ratio=tc / tt, eager_ratio=ce / tt, target=TARGETS[name]))
    if args.decode:
        b, st = decode_row(torch, clock)
        print(f"| GPT KV-cached decoding per token (bench/gpt.py model, batch 1, positions 1-256; compiled: "
              f"StaticDecoder) | {b['eager'] * 1e3:.3f} | {b['compiled'] * 1e3:.3f} | {b['torch'] * 1e3:.3f} "
              f"| {b['compiled'] / b['torch']:.2f}x | {b['eager'] / b['torch']:.2f}x | {TARGETS['decode']} "
              f"| {st['captured']} -> {st['final']} ({st['kernels']} fused) |", flush=True)
        rows.append(dict(key='decode', workload='GPT KV-cached decoding, per token (StaticDecoder)',
                         eager_ms=b['eager'] * 1e3, compiled_ms=b['compiled'] * 1e3, torch_ms=b['torch'] * 1e3,
                         compiled_ratio=b['compiled'] / b['torch'], eager_ratio=b['eager'] / b['torch'],
                         target=TARGETS['decode']))
    settings = dict(repeat=args.repeat, steps=args.steps, clock='process CPU time', stat='best of interleaved rounds')
    if args.no_compile_time: return write_results('compile', rows, load_1m_at_start=start['load_1m'], settings=settings)
    print('\ncompile time of each step (first four calls, fresh process, imports and model building excluded):\n')
    print('| workload | cold wall s | cold CPU s (with the C compiler) | from the disk cache: wall s | CPU s |')
    print('|---|---:|---:|---:|---:|')
    times = {}
    for name in args.only:
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, MINIMA_CACHE=d)
            out = [subprocess.run([sys.executable, __file__, '--compile-time', name], env=env, capture_output=True,
                                  text=True, check=True).stdout.strip().split(' | ') for _ in range(2)]
        times[name] = dict(cold_wall_s=float(out[0][0]), cold_cpu_s=float(out[0][1]), warm_wall_s=float(out[1][0]),
                           warm_cpu_s=float(out[1][1]))
        print(f"| {LABELS[name]} | {' | '.join(out[0])} | {' | '.join(out[1])} |", flush=True)
    write_results('compile', rows, load_1m_at_start=start['load_1m'], settings=settings, compile_time=times)

if __name__ == '__main__': main()
