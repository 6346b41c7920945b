"""A small GPT against torch CPU, same process, same weights, same threads.

    python bench/gpt.py [--repeat 5] [--steps 3] [--cpu-time] [--profile] [--gen-only] [--train-only]
    OPENBLAS_NUM_THREADS=1 python bench/gpt.py --cpu-time      # steadier numbers on a busy machine

1. Training step (forward, cross-entropy, backward, AdamW): 4 layers, 4 heads, d=128, T=128, batch 16, vocabulary
   65 (tiny Shakespeare's characters); target within 2x torch. Best of `--repeat` interleaved rounds of `--steps`.
2. KV-cached generation, batch 1: the time of each new token at positions 1..256 (prefill of one token, then one
   token per step), averaged over buckets of 32 positions, minima and torch (the same model with a concatenating
   KV-cache), and minima without the cache (the whole prefix recomputed). The target is a flat curve: with the cache
   the per-token cost should not grow with the position.
The rows go with the machine (CPU, load, date, commit) to bench/results/gpt_DATE.json. `--profile` prints the cProfile
top functions of minima's training step instead. Never gates CI.
"""
import argparse, time
import numpy as np

from _common import blas_threads, machine, profile, timeit_pair, write_results

V, L, H, C, T, B, BLOCK = 65, 4, 4, 128, 128, 16, 256


def torch_gpt(torch):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.attn = nn.Module(); self.attn.c_attn, self.attn.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
            self.mlp = nn.Module(); self.mlp.c_fc, self.mlp.c_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        def forward(self, x, cache=None):
            b, t, _ = x.shape
            q, k, v = self.attn.c_attn(self.ln_1(x)).view(b, t, 3, H, C // H).permute(2, 0, 3, 1, 4)
            if cache is not None:
                if cache: k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
                cache[:] = [k, v]
            y = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
            x = x + self.attn.c_proj(y.transpose(1, 2).reshape(b, t, C))
            return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate='tanh'))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(BLOCK, C)
            self.h = nn.ModuleList([Block() for _ in range(L)])
            self.ln_f, self.lm_head = nn.LayerNorm(C), nn.Linear(C, V, bias=False)
            self.lm_head.weight = self.wte.weight
        def forward(self, idx, caches=None, pos=0):
            x = self.wte(idx) + self.wpe.weight[pos:pos + idx.shape[1]]
            for i, blk in enumerate(self.h): x = blk(x, None if caches is None else caches[i])
            return self.lm_head(self.ln_f(x))
    return GPT()


def build(torch):
    import minima as mi
    from minima import nn, optim
    mi.init.manual_seed(0)
    m = nn.GPT(V, BLOCK, L, H, C)
    t = torch_gpt(torch)
    sd = {k: torch.tensor(v.detach().numpy()) for k, v in m.state_dict().items()}
    t.load_state_dict({k: v for k, v in sd.items() if k != 'lm_head.weight'}, strict=False)
    return mi, nn, optim, m, t


def make_steps(torch):
    mi, nn, optim, m, t = build(torch)
    rng = np.random.default_rng(0)
    xb, yb = rng.integers(0, V, (B, T)), rng.integers(0, V, (B * T,))
    x, y = mi.Tensor(xb, requires_grad=False), mi.Tensor(yb, requires_grad=False)
    tx, ty = torch.tensor(xb), torch.tensor(yb)
    opt, topt = optim.AdamW(m.parameters(), lr=1e-3), torch.optim.AdamW(t.parameters(), lr=1e-3)
    lossf = nn.CrossEntropyLoss()
    def mi_step():
        opt.reset_grad(); loss = lossf(m(x).reshape((B * T, V)), y); loss.backward(); opt.step()
    def torch_step():
        topt.zero_grad(); loss = torch.nn.functional.cross_entropy(t(tx).view(B * T, V), ty); loss.backward(); topt.step()
    return mi_step, torch_step




def gen_curve(torch, clock, rounds=3, n=BLOCK, bucket=32):
    "Seconds per token by position 1..n: minima and torch KV-cached (best of `rounds`), minima uncached; batch 1."
    mi, nn, optim, m, t = build(torch)
    m.eval(); t.eval()
    best_m, best_t, unc = np.full(n, np.inf), np.full(n, np.inf), np.zeros(n)
    with mi.no_grad():   # uncached, once: position p recomputes the whole prefix of p + 1 tokens
        for p in range(n):
            s = clock(); m(np.arange(p + 1)[None] % V).detach().numpy(); unc[p] = clock() - s
    for _ in range(rounds):
        cache = m.make_cache(1)
        with mi.no_grad():
            for p in range(n):
                s = clock(); m(np.array([[p % V]]), cache).detach().numpy(); best_m[p] = min(best_m[p], clock() - s)
        caches = [[] for _ in range(L)]
        with torch.no_grad():
            for p in range(n):
                s = clock(); t(torch.tensor([[p % V]]), caches, p).numpy(); best_t[p] = min(best_t[p], clock() - s)
    rows = []
    for lo in range(0, n, bucket):
        sl = slice(lo, lo + bucket)
        rows.append((lo + 1, lo + bucket, best_m[sl].mean(), best_t[sl].mean(), unc[sl].mean()))
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--repeat', type=int, default=5)
    ap.add_argument('--steps', type=int, default=3)
    ap.add_argument('--profile', action='store_true')
    ap.add_argument('--gen-only', action='store_true')
    ap.add_argument('--train-only', action='store_true')
    ap.add_argument('--cpu-time', action='store_true', help='process CPU time instead of wall time (use with 1 thread)')
    args = ap.parse_args()
    import torch
    nt = blas_threads()
    torch.set_num_threads(nt)
    clock = time.process_time if args.cpu_time else time.perf_counter
    if args.profile:
        profile(make_steps(torch)[0])
        return
    start, rows = machine(), []
    print(f"GPT: {L} layers, {H} heads, d={C}, vocabulary {V}; {nt} thread(s), "
          f"{'process CPU' if args.cpu_time else 'wall'} time\n")
    if not args.gen_only:
        a, b = make_steps(torch)
        ta, tb = timeit_pair(a, b, args.repeat, args.steps, clock)
        print(f"training step (T={T}, batch {B}, AdamW), best of {args.repeat} x {args.steps} steps\n")
        print('| step | minima ms | torch ms | ratio | target |\n|---|---:|---:|---:|---:|')
        print(f"| forward + backward + AdamW | {ta * 1e3:.1f} | {tb * 1e3:.1f} | {ta / tb:.2f}x | 2x |\n")
        rows.append(dict(step='train: forward + backward + AdamW', minima_ms=round(ta * 1e3, 3),
                         torch_ms=round(tb * 1e3, 3), ratio=round(ta / tb, 3)))
    if not args.train_only:
        print("KV-cached generation, batch 1: ms per token by position (mean over the bucket, best of 3 runs)\n")
        print('| positions | minima ms/token | torch ms/token | ratio | minima without cache |\n|---|---:|---:|---:|---:|')
        for lo, hi, tm_, tt, tu in gen_curve(torch, clock):
            print(f"| {lo}-{hi} | {tm_ * 1e3:.2f} | {tt * 1e3:.2f} | {tm_ / tt:.2f}x | {tu * 1e3:.1f} |")
            rows.append(dict(step=f'decode positions {lo}-{hi}', minima_ms=round(tm_ * 1e3, 4),
                             torch_ms=round(tt * 1e3, 4), ratio=round(tm_ / tt, 3),
                             minima_uncached_ms=round(tu * 1e3, 3)))
    write_results('gpt', rows, load_1m_at_start=start['load_1m'], clock='process CPU' if args.cpu_time else 'wall')


if __name__ == '__main__': main()
