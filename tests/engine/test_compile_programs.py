"""Random training programs, compiled and eager, step for step: 24 programs of 40 steps (960 compiled calls, about 560
of them replays; the rest are the eager first call and the captures after each change of shape, mode, schedule) mixing
models (MLP, CNN), dropout, batch norm, optimizers (SGD with momentum/Nesterov/weight decay, Adam and AdamW with the
step count on the device), learning-rate schedules, hyperparameter and module changes between calls, in-place writes
through views, train/eval switches, batch-size changes and gradient clipping inside the step (`clip_grad_norm_` with
norm 2 or inf, `clip_grad_value_`). Losses, gradient norms and final parameters must match eager."""
import numpy as np
import pytest
import minima as mi
from minima import nn, optim, init

N_PROGRAMS, N_STEPS = 24, 40

def make_model(r):
    drop = [0.0, 0.2, 0.5][r.integers(3)]
    if r.integers(2):
        return 'cnn', nn.Sequential(nn.Conv2d(1, 3, 3, padding=1, bias=False), nn.BatchNorm2d(3), nn.ReLU(), nn.Dropout(drop),
                                    nn.MaxPool2d(2), nn.Flatten(), nn.Linear(3 * 2 * 2, 4))
    # no bias before batch norm: its gradient is rounding noise, which Adam would blow up to whole steps
    bn = bool(r.integers(2))
    layers = [nn.Linear(6, 8, bias=not bn), nn.ReLU() if r.integers(2) else nn.Tanh()]
    if bn: layers.append(nn.BatchNorm1d(8))
    layers += [nn.Dropout(drop), nn.Linear(8, 4)]
    return 'mlp', nn.Sequential(*layers)

def make_opt(r, ps):
    k = r.integers(4)
    if k == 0: return optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=bool(r.integers(2)), weight_decay=0.01)
    if k == 1: return optim.SGD(ps, lr=0.2)
    if k == 2: return optim.Adam(ps, lr=0.02, capturable=True)
    return optim.AdamW(ps, lr=0.02, weight_decay=0.1, amsgrad=bool(r.integers(2)), capturable=True)

def program(seed):
    "The plan of one random program: what the step does and what changes between calls."
    r = np.random.default_rng(seed)
    return dict(seed=seed, inplace=int(r.integers(3)), sched=int(r.integers(3)), every=int(r.integers(8, 14)),
                change=int(r.integers(4)), at=int(r.integers(5, N_STEPS - 4)), shapes=bool(r.integers(2)),
                clip=int(r.integers(4)), max_norm=float(r.choice([0.05, 0.5, 5.0])))

class Counter:
    n = 0

def run(plan, compiled, device='cpu'):
    r = np.random.default_rng(plan['seed'])
    init.manual_seed(plan['seed'])
    kind, m = make_model(r)
    m.to(device)
    opt, lossf = make_opt(r, m.parameters()), nn.CrossEntropyLoss()
    sched = [None, lambda: optim.lr_scheduler.StepLR(opt, plan['every'], gamma=0.5),
             lambda: optim.lr_scheduler.ExponentialLR(opt, 0.9)][plan['sched']]
    sched = sched() if sched else None
    d = np.random.default_rng(100 + plan['seed'])
    shape = (1, 4, 4) if kind == 'cnn' else (6,)
    batches = [(mi.Tensor(d.standard_normal((n,) + shape).astype('float32'), requires_grad=False, device=device),
                mi.Tensor(d.integers(0, 4, n), device=device)) for n in ((5, 7) if plan['shapes'] else (5, 5))]
    ran = Counter()
    def step(x, y):
        ran.n += 1   # the Python body ran (eagerly or capturing), not a replay
        opt.zero_grad()
        h = m(x)
        if plan['inplace'] == 1: h[:, 0].mul_(0.5)                  # an in-place write through a view
        elif plan['inplace'] == 2: h.reshape((-1,))[1:3] += 1.0      # through a reshaped view
        loss = lossf(h, y)
        loss.backward()
        norm = None
        if plan['clip'] == 1: norm = optim.clip_grad_norm_(m.parameters(), plan['max_norm'])
        elif plan['clip'] == 2: norm = optim.clip_grad_norm_(m.parameters(), plan['max_norm'], norm_type=float('inf'))
        elif plan['clip'] == 3: optim.clip_grad_value_(m.parameters(), plan['max_norm'] / 10)
        opt.step()
        return loss if norm is None else (loss, norm)
    f = mi.compile(step) if compiled else step
    init.manual_seed(1000 + plan['seed'])
    losses = []
    for i in range(N_STEPS):
        losses.append(f(*batches[i % 2]))
        if sched is not None and plan['sched'] == 2 and i % plan['every'] == 0: sched.step()
        elif sched is not None and plan['sched'] == 1: sched.step()
        if i == plan['at']:
            if plan['change'] == 1: m.eval()
            elif plan['change'] == 2: opt.param_groups[0]['lr'] *= 0.3
            elif plan['change'] == 3:
                for mod in m:
                    if isinstance(mod, nn.Dropout): mod.p = 0.1
        if i == plan['at'] + 3 and plan['change'] == 1: m.train()
    f.replays = N_STEPS - ran.n
    flat = lambda o: [float(v) for v in (o if isinstance(o, tuple) else (o,))]
    return np.array([flat(o) for o in losses]), [p.detach().numpy() for p in m.parameters()], f

@pytest.mark.parametrize('seed', range(N_PROGRAMS))
def test_random_training_program(seed, device='cpu'):
    plan = program(seed)
    le, pe, _ = run(plan, False, device)
    lc, pc, f = run(plan, True, device)
    np.testing.assert_allclose(lc, le, rtol=2e-5, atol=2e-5, err_msg=str(plan))
    for a, b in zip(pc, pe): np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5, err_msg=str(plan))
    assert f.replays >= N_STEPS // 5, (plan, f.replays)
