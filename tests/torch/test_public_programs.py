"""Public torch programs, unmodified, on minima vs real torch (issue 34; chapter 18b lists them).

Each program runs twice through `programs/harness.py`: once on torch, once with `minima.run.as_torch()` binding every
`import torch`. Both sides start from torch's initial weights (loaded at each outermost module's first call) and draw
the same random numbers (torch's top-level samplers are fed from one numpy generator), so their losses must agree
to float32 rounding, amplified by the program's own learning rate. Programs shrink only through their command line."""
import json, os, random, re, subprocess, sys
import numpy as np, pytest

import minima

HERE = os.path.dirname(os.path.abspath(__file__))
PROGS = os.path.join(HERE, 'programs')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(minima.__file__)))

def run_both(tmp_path, prog, *args, env=None, path=(), prepare=None):
    """Run `prog` (a path under programs/, with `args`) on torch, then on minima; return both records. `path`: folders
    under programs/ to put on PYTHONPATH; `prepare(side)` runs before each side (to write a file in its format)."""
    out = {}
    for side in ('torch', 'minima'):
        if prepare is not None: prepare(side)
        pp = os.pathsep.join([ROOT, *(os.path.join(PROGS, p) for p in path), os.environ.get('PYTHONPATH', '')])
        e = dict(os.environ, PYTHONPATH=pp, OMP_NUM_THREADS='1', **(env or {}))
        r = subprocess.run([sys.executable, os.path.join(PROGS, 'harness.py'), side, str(tmp_path / f'{side}.json'),
                            str(tmp_path / 'weights.npz'), os.path.join(PROGS, prog), *args],
                           capture_output=True, text=True, env=e, cwd=tmp_path, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        out[side] = json.load(open(tmp_path / f'{side}.json'))
    assert out['torch']['stop'] is None, out['torch']['stop']
    return out['torch'], out['minima']

def assert_losses_match(t, m, rtol, n=None, floor=0.0):
    "Relative agreement of the recorded losses (relative to `max(|loss|, floor)`: tiny losses keep torch's noise)."
    a, b = np.array(t['losses'][:n]), np.array(m['losses'][:n])
    assert len(a) > 0 and len(a) == len(b), (len(a), len(b), m['stop'])
    err = np.abs(a - b) / np.maximum(np.abs(a), floor)
    assert err.max() < rtol, (err.max(), a, b)
    return err.max()

def test_regression(tmp_path):
    "pytorch/examples regression: Linear + smooth_l1, manual SGD through `.data`, until the loss is below 1e-3."
    t, m = run_both(tmp_path, 'pytorch_examples/regression/main.py')
    assert m['stop'] is None and m['loaded'] == [2] and len(t['losses']) == len(m['losses'])
    assert_losses_match(t, m, 1e-4, n=50)
    assert_losses_match(t, m, 2e-3, floor=0.05)   # the last losses are ~1e-3, and float32 noise dominates them
    assert t['out'].splitlines()[-1] == m['out'].splitlines()[-1]   # '==> Actual function: y = ...' (0-d format)

@pytest.fixture
def corpus(tmp_path):
    rng = random.Random(0)
    words = 'the cat sat on a mat and dog ran to big red house with small tree near river'.split()
    (tmp_path / 'data').mkdir()
    for name, n in [('train', 60), ('valid', 20), ('test', 20)]:
        lines = [' '.join(rng.choice(words) for _ in range(8)) for _ in range(n)]
        (tmp_path / 'data' / f'{name}.txt').write_text('\n'.join(lines) + '\n')
    return tmp_path

@pytest.mark.parametrize('model,lr,rtol', [('LSTM', 20, 1e-6), ('GRU', 20, 1e-4), ('RNN_TANH', 2, 1e-6),
                                           ('Transformer', 20, 1e-4)])
def test_word_language_model(corpus, model, lr, rtol):
    """pytorch/examples word_language_model: embedding + RNN/LSTM/GRU or a subclass of nn.Transformer, NLLLoss,
    manual SGD with clip_grad_norm_, truncated BPTT (`repackage_hidden`), `narrow`/`t`/`type` in its data code.
    nn.Transformer's own dropout has no flag: the harness sets it to 0 on both sides. The program ends by saving
    the whole module (`torch.save(model)`), which minima refuses with a clear TypeError (it saves state_dicts)."""
    args = ['--data', 'data', '--model', model, '--emsize', '16', '--nhid', '16', '--nlayers', '2', '--epochs', '1',
            '--bptt', '10', '--batch_size', '4', '--dropout', '0', '--log-interval', '5', '--lr', str(lr),
            '--save', 'model.pt']
    t, m = run_both(corpus, 'pytorch_examples/word_language_model/main.py', *args,
                    env={'HARNESS_NO_DROPOUT': '1'} if model == 'Transformer' else None)
    assert len(t['losses']) == 14
    assert_losses_match(t, m, rtol)
    # after training it saves the whole model, reloads it under torch.serialization.safe_globals (classes named by
    # torch's file paths, torch.nn.modules.rnn.LSTM, ...) and evaluates it on the test set: the same test loss
    assert m['stop'] is None, m['stop']
    end = lambda r: float(re.search(r'End of training \| test loss +([0-9.]+)', r['out']).group(1))
    assert abs(end(t) - end(m)) <= 0.01 + 1e-3 * end(t), (end(t), end(m))   # printed with 2 decimals

@pytest.mark.parametrize('driver', ['nanogpt_train', 'mingpt_train'])
def test_gpt_models(tmp_path, driver):
    """nanoGPT's and minGPT's model files, unmodified, trained 6 steps by a short driver (their optimizer groups from
    `configure_optimizers`, AdamW, clip_grad_norm_; nanoGPT's cosine lr), then sampling with top-k: the losses agree
    and the sampled tokens are the same."""
    t, m = run_both(tmp_path, f'drivers/{driver}.py')
    assert m['stop'] is None, m['stop']
    assert_losses_match(t, m, 1e-5)
    sample = lambda r: [l for l in r['out'].splitlines() if l.startswith('sample')]
    assert sample(t) == sample(m) and sample(t)

def test_micrograd_tests_with_minima_as_the_oracle(tmp_path):
    "micrograd's test_engine.py compares micrograd with torch: with minima as torch, its asserts must hold."
    e = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''))
    r = subprocess.run([sys.executable, '-m', 'minima.run', os.path.join(PROGS, 'drivers', 'micrograd_tests.py')],
                       capture_output=True, text=True, env=e, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ['test_sanity_check', 'passed', 'test_more_ops', 'passed']


def test_time_sequence_prediction(tmp_path):
    """pytorch/examples time_sequence_prediction: two LSTMCells in float64 trained by LBFGS (`step(closure)`, its line
    search-free default with 20 inner iterations), then a 1000-step prediction under no_grad. The data file is the
    program's sine waves (its generator's formula), smaller (6 waves of 60 steps), written by each side's `save`.
    The program `torch.load`s a numpy array, which torch >= 2.6 refuses by default (weights_only): torch's own switch
    TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1 restores the behaviour it was written for (minima unpickles nothing)."""
    rng = np.random.RandomState(2)
    x = np.arange(60)[None] + rng.randint(-80, 80, 6)[:, None]
    data = np.sin(x / 20.0).astype('float64')
    def prepare(side):
        lib = __import__('torch') if side == 'torch' else minima
        lib.save(data, str(tmp_path / 'traindata.pt'))
    t, m = run_both(tmp_path, 'pytorch_examples/time_sequence_prediction/train.py', '--steps', '1',
                    prepare=prepare, env={'MPLBACKEND': 'Agg', 'TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD': '1'})
    assert m['stop'] is None, m['stop']
    tl = lambda r: [float(l.split(':')[1]) for l in r['out'].splitlines() if l.startswith('test loss:')]
    assert len(t['losses']) == 20 and tl(t)
    assert_losses_match(t, m, 1e-9)
    np.testing.assert_allclose(tl(m), tl(t), rtol=1e-9)

def test_nanogpt_train_py(tmp_path):
    """nanoGPT's train.py, unmodified, configured by its own `--key=value` command line (its configurator.py): a tiny
    GPT on random tokens (`data/<dataset>/{train,val}.bin`, `meta.pkl`), gradient accumulation, AdamW groups, warmup
    and cosine lr, clipping, `estimate_loss` under `ctx`, checkpoints (`torch.save` of model and optimizer state)."""
    import pickle, shutil
    shutil.copy(os.path.join(PROGS, 'nanogpt', 'configurator.py'), tmp_path)
    d = tmp_path / 'data' / 'tiny'
    d.mkdir(parents=True)
    rng = np.random.default_rng(0)
    rng.integers(0, 32, 4000).astype(np.uint16).tofile(d / 'train.bin')
    rng.integers(0, 32, 1000).astype(np.uint16).tofile(d / 'val.bin')
    pickle.dump(dict(vocab_size=32), open(d / 'meta.pkl', 'wb'))
    args = ['--dataset=tiny', '--device=cpu', '--compile=False', '--dtype=float32', '--batch_size=4', '--block_size=16',
            '--n_layer=2', '--n_head=2', '--n_embd=16', '--max_iters=6', '--lr_decay_iters=6', '--warmup_iters=2',
            '--eval_interval=3', '--eval_iters=2', '--gradient_accumulation_steps=2', '--log_interval=1']
    t, m = run_both(tmp_path, 'nanogpt/train.py', *args)
    assert m['stop'] is None, m['stop']
    assert len(t['losses']) == 14   # 7 iterations x 2 micro-steps
    assert_losses_match(t, m, 1e-5)
    evals = lambda r: re.findall(r'step \d+: train loss ([0-9.]+), val loss ([0-9.]+)', r['out'])
    assert evals(t) == evals(m) and len(evals(t)) == 3   # estimate_loss, printed with 4 decimals

@pytest.fixture
def names(tmp_path):
    rng = random.Random(0)
    words = [''.join(rng.choice('abcdefghijklmnopqrstuvwxyz') for _ in range(rng.randint(3, 8))) for _ in range(300)]
    (tmp_path / 'names.txt').write_text('\n'.join(words) + '\n')
    return tmp_path

@pytest.mark.parametrize('kind', ['transformer', 'bigram', 'mlp', 'rnn', 'gru', 'bow'])
def test_makemore(names, kind):
    """Karpathy's makemore, each of its six models: its `InfiniteDataLoader` (a `RandomSampler` with
    `replacement=True, num_samples=int(1e10)`, read lazily), AdamW, `torch.roll` (mlp), its own RNN/GRU cells, causal
    self-attention. It imports `torch.utils.tensorboard`, which needs the tensorboard package: the harness stands in
    for its SummaryWriter on both sides."""
    args = ['-i', 'names.txt', '--type', kind, '--max-steps', '3', '--num-workers', '0', '--n-layer', '2',
            '--n-embd', '16', '--n-embd2', '16', '--batch-size', '8', '-o', 'out']
    t, m = run_both(names, 'makemore/makemore.py', *args, env={'HARNESS_TENSORBOARD': '1'})
    assert m['stop'] is None, m['stop']
    assert len(t['losses']) == 3
    assert_losses_match(t, m, 1e-5)

def test_mingpt_chargpt_with_its_trainer(tmp_path):
    """minGPT's projects/chargpt, unmodified: its CfgNode command line, `Trainer` (DataLoader over an endless
    `RandomSampler`, `configure_optimizers`, clipping, callbacks), and at iteration 0 a 500-character sample with
    top-k and `torch.save(model.state_dict())`: the losses agree and the sampled text is the same."""
    rng = random.Random(0)
    words = 'the cat sat on a mat and dog ran to big red house with small tree near river O God, God!'.split()
    (tmp_path / 'input.txt').write_text(' '.join(rng.choice(words) for _ in range(400)))
    args = ['--trainer.max_iters=4', '--trainer.num_workers=0', '--model.model_type=gpt-nano', '--data.block_size=16',
            '--trainer.batch_size=8', '--model.embd_pdrop=0.0', '--model.resid_pdrop=0.0', '--model.attn_pdrop=0.0',
            '--system.work_dir=out']
    t, m = run_both(tmp_path, 'mingpt/projects/chargpt/chargpt.py', *args, path=['mingpt'])
    assert m['stop'] is None, m['stop']
    assert len(t['losses']) == 4
    assert_losses_match(t, m, 1e-5)
    sample = lambda r: [l for l in r['out'].splitlines() if l.startswith('O God, O God!')]
    assert sample(t) == sample(m) and len(sample(t)[0]) > 400

def test_ng_video_lecture_bigram(tmp_path):
    """Karpathy's bigram.py (the nanoGPT lecture): no command line, so all its 3000 AdamW steps and 10 evaluations
    run (about 45 s of CPU for both sides), on a small input.txt; then 500 sampled tokens (`multinomial`)."""
    rng = random.Random(0)
    words = 'the cat sat on a mat and dog ran to big red house with small tree near river'.split()
    (tmp_path / 'input.txt').write_text(' '.join(rng.choice(words) for _ in range(400)))
    t, m = run_both(tmp_path, 'ng_video_lecture/bigram.py')
    assert m['stop'] is None, m['stop']
    assert len(t['losses']) == 3000
    assert_losses_match(t, m, 1e-5)
    assert t['out'].splitlines()[-5:] == m['out'].splitlines()[-5:]   # the sampled text

@pytest.mark.parametrize('prog,args', [
    ('mnist', ['--no-accel', '--epochs', '2']),
    ('mnist_rnn', ['--epochs', '1']),
    ('vae', ['--no-accel', '--epochs', '1'])])
def test_mnist_examples(tmp_path, prog, args):
    """pytorch/examples mnist (CNN, Adadelta, StepLR), mnist_rnn (LSTM, BatchNorm1d, Dropout2d on 2-D input) and vae
    (BCE + KL, `randn_like`, `save_image`). mnist_rnn's loader shuffles: one epoch, since torch's sampler draws one
    unused permutation more at an epoch's end (minima's `shuffle=True` does not; chapter 12). They need torchvision, a separate library: a small stand-in
    (programs/drivers/standins/torchvision, written against torch's API) gives them 256 real MNIST digits from
    MINIMA_DATA on both sides. Dropout masks come from different generators, so dropout is the identity (mnist,
    mnist_rnn); vae has none."""
    if not os.path.exists(os.path.join(os.environ.get('MINIMA_DATA', ''), 'mnist', 't10k-images-idx3-ubyte.gz')):
        pytest.skip('MNIST (t10k) is not in MINIMA_DATA')
    (tmp_path / 'results').mkdir()
    env = {'HARNESS_TORCHVISION': '1', 'HARNESS_NO_DROPOUT': '1'}
    t, m = run_both(tmp_path, f'pytorch_examples/{prog}/main.py', *args, '--batch-size', '32', '--log-interval', '2',
                    *(['--test-batch-size', '64'] if prog != 'vae' else []), env=env)
    assert m['stop'] is None, m['stop']
    assert len(t['losses']) == 8 * int(args[args.index('--epochs') + 1])
    assert_losses_match(t, m, 1e-5)
    if prog == 'vae': return   # its test loss draws noise after a shuffled epoch (torch's extra draw shifts it)
    tests = lambda r: re.findall(r'Test set.*', r['out'])
    assert tests(t) == tests(m) and tests(t)
