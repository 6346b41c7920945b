"""Public torch programs, unmodified, on minima vs real torch (issue 34; chapter 18b lists them).

Each program runs twice through `programs/harness.py`: once on torch, once with `minima.run.as_torch()` binding every
`import torch`. Both sides start from torch's initial weights (loaded at each outermost module's first call) and draw
the same random numbers (torch's top-level samplers are fed from one numpy generator), so their losses must agree
to float32 rounding, amplified by the program's own learning rate. Programs shrink only through their command line."""
import json, os, random, subprocess, sys
import numpy as np, pytest

import minima

HERE = os.path.dirname(os.path.abspath(__file__))
PROGS = os.path.join(HERE, 'programs')
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(minima.__file__)))

def run_both(tmp_path, prog, *args, env=None):
    "Run `prog` (a path under programs/, with `args`) on torch, then on minima; return both records."
    out = {}
    for side in ('torch', 'minima'):
        e = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''), OMP_NUM_THREADS='1',
                 **(env or {}))
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
    # after training it saves and reloads the whole model; minima may stop there, but only with a message that names
    # what it lacks (torch's module paths such as torch.nn.modules.dropout, used for torch.load's safe_globals)
    assert m['stop'] is None or m['stop'].startswith(('TypeError: save: cannot save ',
                                                      'MissingTorchFeature: minima does not implement torch.'))

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

