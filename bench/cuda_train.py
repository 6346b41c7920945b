"""Train the course's digits CNN and a small character GPT on minima's CUDA device, and the CNN on the CPU too.

Reports accuracy / validation loss and time per epoch (or per step) for each device. Wall-clock time, with the
device synchronised (a value is read back) at the end of every timed epoch. Never gates CI.

    python bench/cuda_train.py [--shakespeare PATH] [--gpt-steps 1000] [--json out.json]
"""
import argparse, json, sys, time
import numpy as np
import minima
from minima import nn, optim


def digits_cnn(device):
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1, device=device), nn.BatchNorm2d(16, device=device), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, padding=1, device=device), nn.BatchNorm2d(32, device=device), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 4 * 4, 10, device=device))


def train_cnn(device, epochs=10, bs=64, seed=0):
    "The digits CNN (sklearn's 8x8 digits, 1437 train / 360 test), SGD with momentum; accuracy and s per epoch."
    from sklearn.datasets import load_digits
    d = load_digits()
    X, y = (d.data / 16.0).astype('float32').reshape(-1, 1, 8, 8), d.target.astype('int64')
    rng = np.random.default_rng(seed)
    perm = rng.permutation(len(X)); tr, te = perm[:1437], perm[1437:]
    minima.init.manual_seed(seed)
    model = digits_cnn(device)
    opt, lossf = optim.SGD(model.parameters(), lr=0.05, momentum=0.9), nn.CrossEntropyLoss()
    times, losses = [], []
    for ep in range(epochs):
        model.train(); t0 = time.perf_counter(); order = rng.permutation(tr); tot = 0.0
        for i in range(0, len(order), bs):
            idx = order[i:i + bs]
            xb = minima.Tensor(X[idx], device=device, requires_grad=False)
            yb = minima.Tensor(y[idx], device=device, requires_grad=False)
            opt.zero_grad(); loss = lossf(model(xb), yb); loss.backward(); opt.step()
            tot += loss.item() * len(idx)   # reads the loss back: the epoch's work is done on the device
        times.append(time.perf_counter() - t0); losses.append(tot / len(tr))
    model.eval()
    with minima.no_grad():
        logits = model(minima.Tensor(X[te], device=device, requires_grad=False)).detach().cpu().numpy()
    return dict(device=str(device), epochs=epochs, train_loss=losses[-1], test_acc=float((logits.argmax(1) == y[te]).mean()),
                s_per_epoch_first=times[0], s_per_epoch=float(np.median(times[1:])))


def train_gpt(device, text, steps=1000, bs=32, T=128, seed=0, eval_batches=20):
    "A character GPT (4 layers, 4 heads, d=128) on 90% of tiny Shakespeare; validation loss on the other 10%."
    chars = sorted(set(text)); stoi = {c: i for i, c in enumerate(chars)}
    data = np.array([stoi[c] for c in text], dtype='int64'); n = int(0.9 * len(data))
    train, val = data[:n], data[n:]
    rng = np.random.default_rng(seed)
    def batch(src):
        ix = rng.integers(0, len(src) - T - 1, bs)
        x = np.stack([src[i:i + T] for i in ix]); y = np.stack([src[i + 1:i + T + 1] for i in ix])
        return (minima.Tensor(x, device=device, requires_grad=False),
                minima.Tensor(y.reshape(-1), device=device, requires_grad=False))
    minima.init.manual_seed(seed)
    model = nn.GPT(len(chars), T, 4, 4, 128, device=device)
    opt, lossf = optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1), nn.CrossEntropyLoss()
    V = len(chars); t0 = time.perf_counter(); first = None
    for s in range(steps):
        x, y = batch(train)
        opt.zero_grad(); loss = lossf(model(x).reshape((bs * T, V)), y); loss.backward(); opt.step()
        if s == 0: first = loss.item(); t1 = time.perf_counter()
    last = loss.item(); t2 = time.perf_counter()
    model.eval(); vl = []
    with minima.no_grad():
        for _ in range(eval_batches):
            x, y = batch(val); vl.append(lossf(model(x).reshape((bs * T, V)), y).item())
    return dict(device=str(device), steps=steps, params=sum(int(np.prod(p.shape)) for p in model.parameters()),
                first_loss=first, last_train_loss=last, val_loss=float(np.mean(vl)),
                ms_per_step=1000 * (t2 - t1) / max(1, steps - 1), minutes=(t2 - t0) / 60)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--shakespeare', help="tiny Shakespeare's input.txt (default: minima's data folder, "
                    "data_dir('tinyshakespeare'); the GPT run is skipped without it)")
    ap.add_argument('--gpt-steps', type=int, default=1000)
    ap.add_argument('--cpu-gpt-steps', type=int, default=20, help='GPT steps on the CPU, for the time per step')
    ap.add_argument('--json')
    args = ap.parse_args(argv)
    dev = minima.cuda()
    if not dev.enabled():
        print(f'bench/cuda_train.py: CUDA device not available: {dev.why_disabled()}'); return 0
    out = dict(gpu=dev.device_info())
    out['cnn'] = [train_cnn(minima.cpu()), train_cnn(dev)]
    for r in out['cnn']:
        print(f"CNN {r['device']}: test acc {r['test_acc']:.3f}, train loss {r['train_loss']:.3f}, "
              f"{r['s_per_epoch']:.2f} s/epoch (first epoch {r['s_per_epoch_first']:.2f} s)")
    if args.shakespeare is None and minima.data.data_dir('tinyshakespeare', 'input.txt').exists():
        args.shakespeare = str(minima.data.data_dir('tinyshakespeare', 'input.txt'))
    if args.shakespeare:
        text = open(args.shakespeare, encoding='utf-8').read()
        out['gpt'] = [train_gpt(dev, text, args.gpt_steps), train_gpt(minima.cpu(), text, args.cpu_gpt_steps)]
        for r in out['gpt']:
            print(f"GPT {r['device']}: {r['steps']} steps, {r['params']:,} params, loss {r['first_loss']:.3f} -> "
                  f"{r['last_train_loss']:.3f}, val {r['val_loss']:.3f}, {r['ms_per_step']:.1f} ms/step")
    if args.json:
        with open(args.json, 'w') as f: json.dump(out, f, indent=1)
    return 0


if __name__ == '__main__': sys.exit(main())
