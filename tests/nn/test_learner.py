"minima.learner: the fit loop, callbacks, metrics, schedules, the epoch table, progress bars and lr_find."
import math, subprocess, sys
import numpy as np, pytest
import minima as mi
from minima import nn, optim, init, data
from minima.learner import Learner, Callback, CancelFitException, accuracy, _bars

pytestmark = pytest.mark.usefixtures('one_blas_thread')

def blobs(n=240, seed=0):
    "Three well-separated Gaussian blobs in 2-d: a problem any working loop solves."
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    X = (np.array([[0, 3], [3, -2], [-3, -2]])[y] + rng.standard_normal((n, 2)) * 0.7).astype('float32')
    return X, y

def make_learner(model=None, bs=16, metrics=(accuracy,), **kw):
    X, y = blobs()
    train = data.DataLoader(data.NDArrayDataset(X[:180], y[:180]), batch_size=bs, shuffle=True)
    valid = data.DataLoader(data.NDArrayDataset(X[180:], y[180:]), batch_size=25)
    init.manual_seed(0)
    model = model or nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Linear(16, 3))
    return Learner(model, train, valid, metrics=metrics, **kw)

def test_fit_learns_and_records(capsys):
    learn = make_learner(lr=1e-2).fit(4)
    h = learn.history
    assert [r['epoch'] for r in h] == [1, 2, 3, 4] and list(h[0]) == ['epoch', 'train_loss', 'valid_loss',
                                                                     'accuracy', 'time']
    assert h[-1]['train_loss'] < 0.5 * h[0]['train_loss'] and h[-1]['accuracy'] >= 0.95
    assert len(learn.losses) == len(learn.lrs) == 4 * 12 and learn.epoch_ends == [12, 24, 36, 48]
    # the epoch mean weights each step by its batch size (180 = 11 batches of 16 and one of 4)
    assert np.isclose(h[0]['train_loss'], np.average(learn.losses[:12], weights=[16] * 11 + [4]), rtol=1e-6)
    lines = capsys.readouterr().out.rstrip('\n').splitlines()
    assert lines[0].split() == ['epoch', 'train_loss', 'valid_loss', 'accuracy', 'time'] and len(lines) == 5
    assert len({len(l) for l in lines}) == 1, 'a fixed-width table: every row as wide as the header'

def test_metrics_and_valid_loss_over_the_whole_set():
    learn = make_learner(lr=1e-2).fit(1, log=False)
    preds, targets = learn.get_preds()
    assert preds.shape == (60, 3) and targets.shape == (60,)
    res = learn.validate()
    assert res['accuracy'] == pytest.approx(float((preds.argmax(1) == targets).mean()))
    logp = preds - np.log(np.exp(preds).sum(1, keepdims=True))
    assert res['valid_loss'] == pytest.approx(float(-logp[np.arange(60), targets].mean()), rel=1e-5)
    assert res.items() <= learn.history[-1].items() and not learn.model.training

def test_accuracy_on_arrays_and_tensors():
    assert accuracy([[0.1, 0.9], [0.8, 0.2]], [1, 1]) == 0.5
    assert accuracy(mi.Tensor(np.eye(3, dtype='float32')), mi.Tensor(np.array([0, 1, 0]))) == pytest.approx(2 / 3)

def test_validation_runs_in_eval_mode_without_a_graph():
    model = nn.Sequential(nn.Linear(2, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))
    learn = make_learner(model, lr=1e-2).fit(1, log=False)
    a, b = learn.validate(), learn.validate()
    assert a == b, 'dropout must be off during validation'
    model.train()
    with mi.no_grad(): out = model(mi.Tensor(blobs()[0][:5]))
    assert not out.requires_grad

class Events(Callback):
    def __init__(self, name, log, order=0): self.name, self.log, self.order = name, log, order
    def _rec(self, ev): self.log.append(f'{self.name}:{ev}')
    def before_fit(self): self._rec('before_fit')
    def before_epoch(self): self._rec('before_epoch')
    def before_batch(self): self._rec('before_batch')
    def after_backward(self):
        assert all(p.grad is not None for p in self.learn.model.parameters())
        self._rec('after_backward')
    def after_batch(self): self._rec('after_batch')
    def after_epoch(self): self._rec('after_epoch')
    def after_fit(self): self._rec('after_fit')

def test_callback_events_order_and_priority():
    log = []
    learn = make_learner(bs=90, cbs=[Events('b', log, order=1), Events('a', log, order=0)])
    learn.fit(2, log=False)
    batch = ['before_batch', 'after_backward', 'after_batch'] * 2
    expected = ['before_fit'] + (['before_epoch'] + batch + ['after_epoch']) * 2 + ['after_fit']
    assert log[0::2] == [f'a:{e}' for e in expected] and log[1::2] == [f'b:{e}' for e in expected]

def test_cancel_fit_still_runs_after_fit():
    log = []
    class Stop(Callback):
        def after_batch(self):
            if len(self.learn.losses) == 5: raise CancelFitException()
    learn = make_learner(cbs=[Stop(), Events('e', log)]).fit(3, log=False)
    assert len(learn.losses) == 5 and learn.history == [] and log[-1] == 'e:after_fit'

def test_schedule_stepped_per_epoch():
    learn = make_learner(lr=0.01).fit(4, sched=optim.CosineAnnealingLR, log=False)
    per_epoch = [learn.lrs[e * 12] for e in range(4)]
    expected = [0.01 * (1 + math.cos(math.pi * e / 4)) / 2 for e in range(4)]
    assert np.allclose(per_epoch, expected) and len(set(learn.lrs[:12])) == 1

def test_second_fit_continues_with_the_same_optimizer():
    learn = make_learner(lr=0.01).fit(1, log=False)
    opt = learn.opt
    learn.fit(1, lr=0.001, log=False)
    assert learn.opt is opt and opt.lr == 0.001 and len(learn.history) == 2

def _same_state(a, b):
    "Equal generator states; numpy's global MT19937 state holds an array (its key)."
    if isinstance(a, dict): return a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
    return np.array_equal(a, b)

def test_lr_find_restores_everything_and_suggests_a_finite_lr():
    model = nn.Sequential(nn.Linear(2, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))
    learn = make_learner(model, opt_func=optim.SGD)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng_before = init.generator().bit_generator.state
    s = learn.lr_find(end_lr=100, show_plot=False)
    assert math.isfinite(s) and 1e-7 <= s <= 100
    assert all(np.array_equal(before[k], v) for k, v in model.state_dict().items()), 'weights and BN buffers'
    assert _same_state(init.generator().bit_generator.state, rng_before)
    assert all(p.grad is None for p in model.parameters()) and learn.opt is None and learn.losses == []
    lrs, losses = learn.lr_find_lrs, learn.lr_find_losses
    assert np.all(np.diff(np.log(lrs)) > 0) and np.allclose(np.diff(np.log(lrs)), np.diff(np.log(lrs))[0])
    assert s == pytest.approx(lrs[np.argmin(losses)] / 10)
    assert len(lrs) < 100 and lrs[-1] < 100, 'SGD diverges before lr reaches 100: the search must stop'

def test_lr_find_leaves_the_next_fit_unchanged():
    a = make_learner(lr=1e-2)
    a.lr_find(show_plot=False, num_it=30)
    a.fit(2, log=False)
    b = make_learner(lr=1e-2).fit(2, log=False)
    assert a.losses == b.losses

def test_lr_find_plot_and_learner_plot():
    import matplotlib; matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    learn = make_learner(lr=1e-2)
    learn.lr_find(num_it=40)
    learn.fit(2, log=False)
    fig = learn.plot('title')
    assert len(fig.axes) == 2 and fig.axes[1].get_legend_handles_labels()[1] == ['accuracy']
    plt.close('all')

def test_lr_find_errors():
    X, y = blobs()
    empty = data.DataLoader(data.NDArrayDataset(X[:0], y[:0]), batch_size=4)
    with pytest.raises(ValueError, match='no batches'):
        Learner(nn.Linear(2, 3), empty).lr_find(show_plot=False)
    bad = data.DataLoader(data.NDArrayDataset(np.full((8, 2), np.nan, 'float32'), y[:8]), batch_size=4)
    with pytest.raises(ValueError, match='not finite even at start_lr'):
        Learner(nn.Linear(2, 3), bad).lr_find(show_plot=False)

class FakeTTY:
    def __init__(self, real): self.real, self.text = real, []
    def isatty(self): return True
    def write(self, s): self.text.append(s); return len(s)
    def flush(self): pass

def test_console_progress_bar_in_a_terminal(monkeypatch):
    pytest.importorskip('fastprogress')
    tty = FakeTTY(sys.stdout)
    monkeypatch.setattr(sys, 'stdout', tty)
    assert _bars()[0].__name__ == 'ConsoleMasterBar'
    make_learner(lr=1e-2).fit(2)
    out = ''.join(tty.text)
    assert 'Epoch 1/2' in out and '100.00%' in out and 'train_loss' in out

def test_no_bar_when_output_is_not_a_terminal(monkeypatch):
    class Pipe(FakeTTY):
        def isatty(self): return False
    monkeypatch.setattr(sys, 'stdout', Pipe(sys.stdout))
    assert _bars() is None

def test_works_without_fastprogress():
    code = ("import sys; sys.modules['fastprogress'] = None\n"
            "import numpy as np, minima as mi\n"
            "from minima import nn, data\n"
            "from minima.learner import Learner, _bars\n"
            "assert _bars() is None\n"
            "X = np.random.default_rng(0).standard_normal((32, 2)).astype('float32'); y = (X[:, 0] > 0).astype('int64')\n"
            "dl = data.DataLoader(data.NDArrayDataset(X, y), 8)\n"
            "Learner(nn.Linear(2, 2), dl, dl, lr=0.1).fit(1, progress=True)\n"
            "assert 'fastprogress' not in [m.split('.')[0] for m in sys.modules if sys.modules[m] is not None]\n")
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert 'train_loss' in r.stdout

def test_notebook_progress_bar(monkeypatch):
    "In Jupyter the HTML bars draw through IPython's display; here a stand-in records what they draw."
    fp = pytest.importorskip('fastprogress.fastprogress')
    shown = []
    class Handle:
        def update(self, obj): shown.append(obj)
    def display(obj, display_id=None): shown.append(obj); return Handle()
    monkeypatch.setattr(fp, 'display', display, raising=False)
    monkeypatch.setattr(fp, 'HTML', lambda s: s, raising=False)
    monkeypatch.setattr(fp, 'clear_output', lambda *a, **k: None, raising=False)
    import minima.learner as L
    monkeypatch.setattr(L, '_bars', lambda: (fp.NBMasterBar, fp.NBProgressBar))
    make_learner(lr=1e-2).fit(2)
    html = '\n'.join(s for s in shown if isinstance(s, str))
    assert '<progress' in html and 'loss ' in html and 'Total time' in html
