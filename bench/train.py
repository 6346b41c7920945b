"""One training step (forward, loss, backward, optimizer step) of minima against torch CPU, same process, same threads.

    python bench/train.py [--repeat 7] [--steps 20] [--cpu-time] [--profile mlp|cnn|mlp_big]
    OPENBLAS_NUM_THREADS=1 python bench/train.py --cpu-time      # steadier numbers on a busy machine

Models (SGD with momentum 0.9, cross-entropy loss):
  mlp      64 -> 128 -> 10, batch 128                     (target: within 1.5x torch)
  cnn      the digits CNN of the training chapter, batch 64 (target: within 3x torch)
  mlp_big  784 -> 512 -> 512 -> 10, batch 256             (target: within 1.5x torch)
Both libraries start from the same weights and see the same batch. Prints a markdown table with the best time per
step of `--repeat` interleaved rounds of `--steps` steps, and the ratio minima / torch. `--profile NAME` prints the
cProfile top functions of minima's step instead. The rows are written to `bench/results/train_DATE.json` with the
machine, its load average and the commit (`_common.write_results`). Never gates CI.
"""
import argparse, time
import numpy as np

from _common import blas_threads, machine, profile, timeit_pair, write_results

def mlp_sizes(name): return {'mlp': ([64, 128, 10], 128), 'mlp_big': ([784, 512, 512, 10], 256)}[name]

def build(name, mi, nn, torch):
    "(minima model, torch model with the same weights, input shape, batch size)."
    tnn = torch.nn
    if name == 'cnn':
        m = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                          nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(), nn.Linear(32 * 4 * 4, 10))
        t = tnn.Sequential(tnn.Conv2d(1, 16, 3, padding=1), tnn.BatchNorm2d(16), tnn.ReLU(),
                           tnn.Conv2d(16, 32, 3, padding=1), tnn.BatchNorm2d(32), tnn.ReLU(), tnn.MaxPool2d(2),
                           tnn.Flatten(), tnn.Linear(32 * 4 * 4, 10))
        shape, bs = (1, 8, 8), 64
    else:
        sizes, bs = mlp_sizes(name)
        ml, tl = [], []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            ml.append(nn.Linear(a, b)); tl.append(tnn.Linear(a, b))
            if i < len(sizes) - 2: ml.append(nn.ReLU()); tl.append(tnn.ReLU())
        m, t = nn.Sequential(*ml), tnn.Sequential(*tl)
        shape = (sizes[0],)
    with torch.no_grad():  # copy minima's initial weights into torch (the same layouts)
        for mm, tm in zip(m, t):
            if isinstance(mm, nn.Linear):
                tm.weight.copy_(torch.tensor(mm.weight.detach().numpy())); tm.bias.copy_(torch.tensor(mm.bias.detach().numpy()))
            elif isinstance(mm, nn.Conv2d):
                tm.weight.copy_(torch.tensor(mm.weight.detach().numpy())); tm.bias.copy_(torch.tensor(mm.bias.detach().numpy()))
    return m, t, shape, bs

def make_steps(name, torch):
    import minima as mi
    from minima import nn, optim, init
    init.manual_seed(0)
    m, t, shape, bs = build(name, mi, nn, torch)
    rng = np.random.default_rng(0)
    xn = rng.standard_normal((bs,) + shape).astype('float32'); yn = rng.integers(0, 10, bs)
    x, y = mi.Tensor(xn, requires_grad=False), mi.Tensor(yn)
    tx, ty = torch.tensor(xn), torch.tensor(yn)
    opt, topt = optim.SGD(m.parameters(), lr=0.01, momentum=0.9), torch.optim.SGD(t.parameters(), lr=0.01, momentum=0.9)
    lossf, tlossf = nn.CrossEntropyLoss(), tnn_loss(torch)
    def mi_step():
        opt.reset_grad(); loss = lossf(m(x), y); loss.backward(); opt.step()
    def torch_step():
        topt.zero_grad(); loss = tlossf(t(tx), ty); loss.backward(); topt.step()
    return mi_step, torch_step

def tnn_loss(torch): return torch.nn.CrossEntropyLoss()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--repeat', type=int, default=7)
    ap.add_argument('--steps', type=int, default=20)
    ap.add_argument('--profile', choices=['mlp', 'cnn', 'mlp_big'])
    ap.add_argument('--cpu-time', action='store_true',
                    help='time with process CPU time instead of wall time (steadier on a loaded machine; use with 1 thread)')
    args = ap.parse_args()
    import torch
    nt = blas_threads()
    torch.set_num_threads(nt)
    if args.profile:
        profile(make_steps(args.profile, torch)[0], warmup=5, calls=100, rows=30)
        return
    targets = {'mlp': 1.5, 'cnn': 3.0, 'mlp_big': 1.5}
    labels = {'mlp': 'MLP 64-128-10, batch 128', 'cnn': 'CNN (digits), batch 64', 'mlp_big': 'MLP 784-512-512-10, batch 256'}
    clock = time.process_time if args.cpu_time else time.perf_counter
    start, rows = machine(), []
    print(f"one training step (forward, cross-entropy, backward, SGD momentum), {nt} thread(s), best of {args.repeat} x "
          f"{args.steps} steps, {'process CPU' if args.cpu_time else 'wall'} time\n")
    print('| model | minima ms | torch ms | ratio | target |')
    print('|---|---:|---:|---:|---:|')
    for name in ('mlp', 'cnn', 'mlp_big'):
        a, b = make_steps(name, torch)
        ta, tb = timeit_pair(a, b, args.repeat, args.steps, clock, warmup=3)
        print(f"| {labels[name]} | {ta * 1e3:.3f} | {tb * 1e3:.3f} | {ta / tb:.2f}x | {targets[name]}x |")
        rows.append(dict(key=name, label=labels[name], minima_ms=ta * 1e3, torch_ms=tb * 1e3, ratio=ta / tb,
                         target=targets[name]))
    write_results('train', rows, load_1m_at_start=start['load_1m'],
                  settings=dict(repeat=args.repeat, steps=args.steps, clock='process' if args.cpu_time else 'wall',
                                threads=nt))

if __name__ == '__main__': main()
