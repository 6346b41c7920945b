"""A reader meets code cells that fit on a screen: at most 40 lines (issue 24). The few that stay longer are listed
here with the reason, keyed by their first line of code, so that a new long cell fails until it is split or listed."""
import json
from pathlib import Path

NBS = Path(__file__).resolve().parents[2] / 'nbs'
LIMIT = 40
LONGER = {   # (notebook, first line of code) -> why the cell stays longer than LIMIT
    ('21_numpy_device.ipynb', 'class NumpyDevice(_NumpyViews, BackendDevice):'):
        "one class, the backend contract on numpy: a method of one to four lines per primitive, "
        "written whole as CudaDevice is; the hottest set numpy's error state inline (issue 38)",
    ('22_cuda.ipynb', 'class CudaDevice(_CudaLibrary, _CudaMemory, BackendDevice):'):
        "one class, the backend contract on the CUDA kernels: a method of one or two lines per primitive, written "
        "whole rather than patched on (issue 38)",
    ('10_nn.ipynb', 'def _check_features(layer, x, axis, n):'):
        "folded; `_BatchNorm` is one class whose `forward` is a graded unit (`#| solution _BatchNorm.forward`), "
        "which the student edition finds only as a method of the class",
    ('11_optim.ipynb', 'class ReduceLROnPlateau:'):
        "one class whose `step` is a graded unit (`#| solution ReduceLROnPlateau.step`), found only as a method",
    ('13b_text.ipynb', 'class CharTokenizer:'):
        "one class whose `encode` and `decode` are graded units (`#| solution ...`), found only as its methods",
    ('19b_ddp.ipynb', "train_src = '''"):
        'one script, written to a file and run by mpiexec on two processes: split, it would no longer read as one program',
}


def _cells():
    for nb in sorted(NBS.glob('*.ipynb')):
        for c in json.loads(nb.read_text())['cells']:
            if c['cell_type'] != 'code': continue
            lines = ''.join(c['source']).splitlines()
            code = [l for l in lines if not l.startswith('#|')]
            yield nb.name, (code[0] if code else ''), len(lines)


def test_code_cells_fit_a_screen():
    long = [(nb, first[:60], n) for nb, first, n in _cells() if n > LIMIT and (nb, first) not in LONGER]
    assert not long, f'code cells over {LIMIT} lines (split them at a seam, or list them in LONGER with a reason): {long}'


def test_the_exceptions_are_still_needed():
    present = {(nb, first) for nb, first, n in _cells() if n > LIMIT}
    assert not set(LONGER) - present, f'listed as long but now short or gone: {set(LONGER) - present}'
