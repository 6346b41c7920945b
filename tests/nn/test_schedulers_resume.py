"""Learning-rate schedulers as torch's (issue 34): resuming with `last_epoch` (SW20, M35), `ChainedScheduler` (M3),
`CyclicLR` (M4), `SequentialLR.state_dict` (M5), and OneCycleLR's per-group list checked (N3)."""
import numpy as np, pytest, torch

import minima as mi
from minima import nn, optim

def _opts(kind='SGD', groups=2, **kw):
    "The same optimizer in both libraries, with `groups` parameter groups of different rates."
    ps = [nn.Parameter(mi.ones(2)) for _ in range(groups)]
    tps = [torch.nn.Parameter(torch.ones(2)) for _ in range(groups)]
    mk = lambda O, qs: getattr(O, kind)([{'params': [q], 'lr': 0.1 * (i + 1)} for i, q in enumerate(qs)], **kw)
    return mk(optim, ps), mk(torch.optim, tps)

def _lrs(o): return [g['lr'] for g in o.param_groups]
def _same(a, b): np.testing.assert_allclose(np.asarray(a, dtype='float64'), np.asarray(b, dtype='float64'),
                                            rtol=1e-12, atol=1e-15)

RESUMABLE = {
    'ExponentialLR': dict(gamma=0.5), 'MultiplicativeLR': dict(lr_lambda=lambda e: 0.9),
    'PolynomialLR': dict(total_iters=8, power=2.0), 'LinearLR': dict(start_factor=0.5, total_iters=6),
    'CosineAnnealingLR': dict(T_max=7), 'StepLR': dict(step_size=2, gamma=0.5),
    'MultiStepLR': dict(milestones=[4, 6]), 'ConstantLR': dict(factor=0.5, total_iters=5),
}

@pytest.mark.parametrize('name', list(RESUMABLE))
def test_resume_with_last_epoch_matches_torch(name):
    "SW20, M35: with `initial_lr` in the groups, `Sched(opt, ..., last_epoch=3)` then steps: torch's rates."
    o, to = _opts()
    for g in o.param_groups + to.param_groups: g['initial_lr'] = g['lr']
    s = getattr(optim.lr_scheduler, name)(o, **RESUMABLE[name], last_epoch=3)
    ts = getattr(torch.optim.lr_scheduler, name)(to, **RESUMABLE[name], last_epoch=3)
    _same(_lrs(o), _lrs(to))
    for _ in range(6):
        o.step(); to.step(); s.step(); ts.step()
        _same(_lrs(o), _lrs(to))
    assert s.last_epoch == ts.last_epoch

def test_resume_without_initial_lr_raises_like_torch():
    o, to = _opts()
    with pytest.raises(KeyError, match='initial_lr'): torch.optim.lr_scheduler.StepLR(to, 2, last_epoch=3)
    with pytest.raises(KeyError, match='initial_lr'): optim.lr_scheduler.StepLR(o, 2, last_epoch=3)

def test_onecycle_resumes_from_a_checkpoint():
    "M35: OneCycleLR takes last_epoch; a scheduler resumed at step k continues the uninterrupted one."
    o, to = _opts()
    kw = dict(max_lr=[0.5, 1.0], total_steps=20)
    s, ts = optim.lr_scheduler.OneCycleLR(o, **kw), torch.optim.lr_scheduler.OneCycleLR(to, **kw)
    for _ in range(7): s.step(); ts.step()
    o2, to2 = _opts()
    o2.load_state_dict(o.state_dict()); to2.load_state_dict(to.state_dict())
    s2 = optim.lr_scheduler.OneCycleLR(o2, **kw, last_epoch=s.last_epoch - 1)
    ts2 = torch.optim.lr_scheduler.OneCycleLR(to2, **kw, last_epoch=ts.last_epoch - 1)
    _same(_lrs(o2), _lrs(to2))
    for _ in range(10):
        s.step(); s2.step(); ts2.step()
        _same(_lrs(o2), _lrs(to2)); _same(_lrs(o2), _lrs(o))

def test_onecycle_max_lr_list_length_is_checked():
    "N3."
    o, to = _opts()
    with pytest.raises(ValueError): torch.optim.lr_scheduler.OneCycleLR(to, max_lr=[.1, .2, .3], total_steps=10)
    with pytest.raises(ValueError, match='expected 2 values for max_lr'):
        optim.lr_scheduler.OneCycleLR(o, max_lr=[.1, .2, .3], total_steps=10)

def test_chained_scheduler_matches_torch_and_checkpoints():
    "M3."
    o, to = _opts()
    mk = lambda L, opt: L.optim.lr_scheduler.ChainedScheduler(
        [L.optim.lr_scheduler.ConstantLR(opt, factor=0.1, total_iters=2),
         L.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)])
    s, ts = mk(mi, o), mk(torch, to)
    _same(_lrs(o), _lrs(to))
    for i in range(6):
        o.step(); to.step(); s.step(); ts.step()
        _same(_lrs(o), _lrs(to)); _same(s.get_last_lr(), ts.get_last_lr())
    sd = s.state_dict()
    assert sorted(sd) == sorted(k for k in ts.state_dict() if k != '_last_lr')   # minima reads the groups
    o2, _ = _opts()   # torch's order: make both, then load the optimizer's state, then the scheduler's
    s2 = mk(mi, o2); o2.load_state_dict(o.state_dict()); s2.load_state_dict(sd)
    for _ in range(4):
        s.step(); s2.step(); ts.step()
        _same(_lrs(o2), _lrs(o)); _same(_lrs(o), _lrs(to))

@pytest.mark.parametrize('kind,kw', [
    ('SGD', dict(mode='triangular')), ('SGD', dict(mode='triangular2', step_size_down=3)),
    ('SGD', dict(mode='exp_range', gamma=0.9)), ('Adam', dict(mode='triangular2')),
    ('SGD', dict(scale_fn=lambda x: 0.5 ** x, scale_mode='iterations')),
    ('SGD', dict(cycle_momentum=False, base_lr=[0.01, 0.02], max_lr=[0.1, 0.3]))])
def test_cyclic_lr_matches_torch(kind, kw):
    "M4: rates and momentum (or beta1) of each group at every step, over three cycles."
    okw = dict(momentum=0.9) if kind == 'SGD' else {}
    o, to = _opts(kind, **okw)
    kw = {'base_lr': 0.01, 'max_lr': 0.1, 'step_size_up': 4, **kw}
    s, ts = optim.lr_scheduler.CyclicLR(o, **kw), torch.optim.lr_scheduler.CyclicLR(to, **kw)
    key = 'momentum' if kind == 'SGD' else 'betas'
    for i in range(24):
        _same(_lrs(o), _lrs(to))
        _same([g[key] for g in o.param_groups], [g[key] for g in to.param_groups])
        o.step(); to.step(); s.step(); ts.step()

def test_cyclic_lr_bad_input():
    o, to = _opts('Adagrad')
    for L, opt in ((optim, o), (torch.optim, to)):
        with pytest.raises(ValueError, match='momentum'): L.lr_scheduler.CyclicLR(opt, 0.01, 0.1)
        with pytest.raises(ValueError): L.lr_scheduler.CyclicLR(opt, 0.01, 0.1, mode='zigzag', cycle_momentum=False)

def test_sequential_lr_state_dict_resumes():
    "M5: a warm-up then decay schedule checkpointed mid-way continues as the uninterrupted one, and as torch's."
    def mk(L, opt):
        S = L.optim.lr_scheduler
        return S.SequentialLR(opt, [S.LinearLR(opt, start_factor=0.1, total_iters=3),
                                    S.CosineAnnealingLR(opt, T_max=6)], milestones=[3])
    o, to = _opts()
    s, ts = mk(mi, o), mk(torch, to)
    for _ in range(4): o.step(); to.step(); s.step(); ts.step()
    sd = s.state_dict()
    assert sorted(sd) == sorted(k for k in ts.state_dict() if k != '_last_lr')   # minima reads the groups and len(sd['_schedulers']) == 2
    o2, _ = _opts()   # torch's order: make both, then load the optimizer's state, then the scheduler's
    s2 = mk(mi, o2); o2.load_state_dict(o.state_dict()); s2.load_state_dict(sd)
    for _ in range(6):
        s.step(); s2.step(); ts.step()
        _same(_lrs(o2), _lrs(o)); _same(_lrs(o), _lrs(to))
