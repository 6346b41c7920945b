"""Files saved before `minima.nn.modules` became a package of files (issue 38) still load: a
file names each class by `module:qualname` (`minima.nn.modules:Linear`), and the package still
holds every class under its old module name. `files/saved_before_issue38.npz` was written by
`minima.save` at the commit before the move."""
import json, re
from pathlib import Path
import numpy as np
import minima as mi

FILE = Path(__file__).parent / 'files' / 'saved_before_issue38.npz'


def test_the_file_names_the_old_module():
    spec = json.dumps(json.loads(str(np.load(FILE)['__spec__'])))
    names = set(re.findall(r'minima[\w.]*:\w+', spec))
    assert 'minima.nn.modules:Linear' in names and 'minima.nn.modules:Sequential' in names
    assert not any(n.startswith('minima.nn.modules.') for n in names)   # saved before the move


def test_a_model_and_optimizer_saved_before_the_move_load():
    ck = mi.load(FILE)
    model = ck['model']
    nn = mi.nn
    assert [type(m) for m in model] == [nn.Embedding, nn.Linear, nn.ReLU, nn.Dropout, nn.Linear]
    assert type(model).__module__ == 'minima.nn.modules.layers' and not model.training
    np.testing.assert_allclose(model(ck['x']).detach().numpy(), ck['y'].detach().numpy(),
                               rtol=1e-6, atol=1e-7)
    assert isinstance(ck['loss_fn'], mi.nn.modules.loss.CrossEntropyLoss)
    opt = mi.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt.load_state_dict(ck['opt'])
    sched = mi.optim.lr_scheduler.StepLR(opt, 2, 0.5)
    sched.load_state_dict(ck['sched'])
    assert sched.last_epoch == 1 and opt.param_groups[0]['lr'] == 0.1
    assert len(opt.state) == 5 and all('momentum_buffer' in s for s in opt.state.values())


def test_the_inflate_limit_the_message_names_is_the_one_read(tmp_path, monkeypatch):
    "The refusal names `minima.nn.modules.layers.MAX_INFLATE_RATIO`; raising that limit lets the file load."
    import importlib
    path = str(tmp_path / 'z.npz')
    np.savez_compressed(path, __spec__=np.array(json.dumps({'tensor': 'a0'})), a0=np.zeros(2_000_000, 'f4'))
    try: mi.load(path)
    except mi.serialization.CorruptFileError as e: msg = str(e)
    where, name = re.search(r'than ([\w.]+)\.(MAX_INFLATE_RATIO)', msg).groups()
    monkeypatch.setattr(importlib.import_module(where), name, 10_000)
    assert mi.serialization.MAX_INFLATE_RATIO == 10_000 and mi.load(path).shape == (2_000_000,)
