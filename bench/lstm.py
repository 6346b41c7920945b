"""One training step of a character-level LSTM language model, minima against torch CPU in the same process.

    python bench/lstm.py [--repeat 7] [--steps 3] [--cpu-time] [--reference] [--profile]
    OPENBLAS_NUM_THREADS=1 python bench/lstm.py --cpu-time      # steadier numbers on a busy machine

Model (issue 13's benchmark): embedding 65 -> 64, a 2-layer LSTM with hidden size 256, a linear head back to the 65
characters; T=64 steps, batch 32; forward, cross-entropy over all T*B predictions, backward, Adam step. Both libraries
start from the same weights and see the same batch (the first-step losses are printed to show they agree). Prints
the median time per step of `--repeat` interleaved rounds of `--steps` steps and the ratio minima / torch (target:
within 2x), written with the machine to bench/results/lstm_DATE.json. `--reference` runs minima's layers as the loop
of ops (`recurrence_reference`) instead of the fused
`recurrence` op, to show what the op buys; `--profile` prints cProfile's top functions of minima's step. Never gates CI.
"""
import argparse, statistics, time
import numpy as np

from _common import machine, write_results, blas_threads, profile, timeit_pair

V, E, H, L, T, B = 65, 64, 256, 2, 64, 32

def make_steps(torch, reference=False):
    import minima as mi
    from minima import nn, optim, init
    if reference:   # swap the fused op for the loop of Tensor ops it is checked against
        import minima.nn.recurrent as rec
        rec.recurrence = lambda mode, gx, h0, w, b=None, c0=None: mi.ops.recurrence_reference(mode, gx, h0, c0, w, b)
    init.manual_seed(0)
    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb, self.lstm, self.head = nn.Embedding(V, E), nn.LSTM(E, H, num_layers=L), nn.Linear(H, V)
        def forward(self, x): return self.head(self.lstm(self.emb(x))[0].reshape((T * B, H)))
    m = LM()
    tnn = torch.nn
    t = tnn.ModuleDict(dict(emb=tnn.Embedding(V, E), lstm=tnn.LSTM(E, H, num_layers=L), head=tnn.Linear(H, V)))
    with torch.no_grad():   # same weights: the LSTM's names and layouts are torch's; minima's Linear is (in, out)
        t['emb'].weight.copy_(torch.tensor(m.emb.weight.detach().numpy()))
        sd = m.lstm.state_dict()
        t['lstm'].load_state_dict({k: torch.tensor(v.detach().numpy()) for k, v in sd.items()})
        t['head'].weight.copy_(torch.tensor(m.head.weight.detach().numpy())); t['head'].bias.copy_(torch.tensor(m.head.bias.detach().numpy()))
    rng = np.random.default_rng(0)
    xn, yn = rng.integers(0, V, (T, B)), rng.integers(0, V, T * B)
    x, y, tx, ty = mi.Tensor(xn), mi.Tensor(yn), torch.tensor(xn), torch.tensor(yn)
    opt, topt = optim.Adam(m.parameters(), lr=1e-3), torch.optim.Adam(t.parameters(), lr=1e-3)
    lossf, tlossf = nn.CrossEntropyLoss(), tnn.CrossEntropyLoss()
    def mi_step():
        opt.reset_grad(); loss = lossf(m(x), y); loss.backward(); opt.step(); return loss.item()
    def torch_step():
        topt.zero_grad()
        loss = tlossf(t['head'](t['lstm'](t['emb'](tx))[0].reshape(T * B, H)), ty)
        loss.backward(); topt.step(); return loss.item()
    return mi_step, torch_step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--repeat', type=int, default=7)
    ap.add_argument('--steps', type=int, default=3)
    ap.add_argument('--cpu-time', action='store_true', help='process CPU time instead of wall time (use with 1 thread)')
    ap.add_argument('--reference', action='store_true', help="minima's layers as the loop of ops, not the fused op")
    ap.add_argument('--profile', action='store_true')
    args = ap.parse_args()
    import torch
    nt = blas_threads()
    torch.set_num_threads(nt)
    start = machine()
    mi_step, torch_step = make_steps(torch, args.reference)
    if args.profile:
        profile(mi_step)
        return
    l_mi, l_t = mi_step(), torch_step()
    print(f"first-step loss: minima {l_mi:.6f}, torch {l_t:.6f}")
    clock = time.process_time if args.cpu_time else time.perf_counter
    ta, tb = timeit_pair(mi_step, torch_step, args.repeat, args.steps, clock, stat=statistics.median, warmup=1)
    impl = 'loop of ops (recurrence_reference)' if args.reference else 'fused recurrence op'
    print(f"\nLSTM language-model training step (embedding {V}->{E}, {L}x LSTM {H}, head {H}->{V}; T={T}, B={B}; "
          f"Adam), minima {impl}, {nt} thread(s), median of {args.repeat} x {args.steps} steps, "
          f"{'process CPU' if args.cpu_time else 'wall'} time\n")
    print('| step | minima ms | torch ms | ratio | target |')
    print('|---|---:|---:|---:|---:|')
    print(f"| LSTM LM, 2x256, T=64, B=32 | {ta * 1e3:.1f} | {tb * 1e3:.1f} | {ta / tb:.2f}x | 2x |")
    write_results('lstm', [dict(step='LSTM LM, 2x256, T=64, B=32', impl=impl, minima_ms=round(ta * 1e3, 3),
                                torch_ms=round(tb * 1e3, 3), ratio=round(ta / tb, 3))],
                  load_1m_at_start=start['load_1m'], clock='process CPU' if args.cpu_time else 'wall',
                  first_step_loss=dict(minima=l_mi, torch=l_t))

if __name__ == '__main__': main()
