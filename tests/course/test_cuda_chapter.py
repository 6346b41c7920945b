"""The CUDA chapter (`nbs/22_cuda.ipynb`) runs top to bottom on a machine without a GPU, as Jupyter's "Run All" would.

`nbdev_test` skips the chapter's `#| cuda` cells; "Run All" (and `exec_nb`, which `tools/execute_nbs` uses) knows no
such flag and runs every cell. Each GPU cell therefore starts with the chapter's `%%gpu` cell magic, which runs the cell
when the CUDA device works and otherwise prints one line saying why it was skipped. These tests execute every cell
and check that, and that the magic really runs a cell (value, side effects, errors) when the device works.
"""
import json, os, re, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[2]
NB = ROOT / 'nbs' / '22_cuda.ipynb'
NB_MATMUL = ROOT / 'nbs' / '22b_cuda_matmul.ipynb'       # its sequels: the matmul kernels,
NB_FAST = ROOT / 'nbs' / '22bb_cuda_tensor_cores.ipynb'   # fast paths: tensor cores, fused rows,
NB_MEASURED = ROOT / 'nbs' / '22c_cuda_measured.ipynb'   # and the whole stack on the GPU, measured
CHAPTERS = [NB, NB_MATMUL, NB_FAST, NB_MEASURED]
SKIP_PREFIX = 'skipped (this cell needs a GPU): '
_FLAG = re.compile(r'^\s*#\|\s*cuda\s*$')

def _src(c): return ''.join(c['source']) if isinstance(c['source'], list) else c['source']

def _is_gpu_cell(c):
    "A code cell carrying nbdev's `cuda` flag among its leading directive / cell-magic lines."
    if c['cell_type'] != 'code': return False
    for line in _src(c).splitlines():
        if _FLAG.match(line): return True
        if not (line.startswith('%%') or re.match(r'^\s*#\|', line) or not line.strip()): return False
    return False

def _text(x): return ''.join(x) if isinstance(x, list) else (x or '')

@pytest.fixture(scope='module')
def no_gpu_reason():
    "The driver probe's reason, on a machine without a GPU; a machine with one runs the chapter in tools/cuda_gpu_check."
    from minima.backend_ndarray.cuda import driver_probe
    cc, why = driver_probe()
    if cc is not None: pytest.skip(f'this machine has a GPU (compute capability {cc}): tools/cuda_gpu_check runs the chapter')
    return why

@pytest.fixture(scope='module', params=CHAPTERS, ids=lambda p: p.stem)
def executed(no_gpu_reason, tmp_path_factory, request):
    "The chapter executed cell by cell with execnb, every cell included (no nbdev test flags), in a fresh process."
    nb_path = request.param
    dest = tmp_path_factory.mktemp('cuda_chapter') / nb_path.name
    env = {k: v for k, v in os.environ.items() if k != 'MINIMA_CUDA_LIB'}   # not the CPU emulator: a plain machine
    env['PYTHONPATH'] = os.pathsep.join([str(ROOT)] + [p for p in [env.get('PYTHONPATH')] if p])
    env.setdefault('MPLBACKEND', 'Agg')
    run = 'import sys; from execnb.shell import CaptureShell; CaptureShell().execute(sys.argv[1], sys.argv[2], exc_stop=True)'
    r = subprocess.run([sys.executable, '-c', run, nb_path.name, str(dest)], cwd=nb_path.parent, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, f'"Run All" of {nb_path.name} stopped with an error:\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}'
    return json.loads(dest.read_text())

def test_chapter_runs_every_cell_without_gpu(executed):
    code = [c for c in executed['cells'] if c['cell_type'] == 'code' and _src(c).strip()]
    errors = [(_src(c)[:80], o.get('ename'), o.get('evalue')) for c in code for o in c.get('outputs', [])
              if o['output_type'] == 'error']
    assert not errors, f'cells raised: {errors}'
    # every non-empty cell ran (execnb leaves no outputs on a cell it never reached; exported cells may print nothing)
    assert any(c.get('outputs') for c in code[-3:]), 'the last cells of the chapter produced no output: did it stop early?'

def test_gpu_cells_print_one_skip_line(executed, no_gpu_reason):
    gpu = [c for c in executed['cells'] if _is_gpu_cell(c)]
    assert len(gpu) >= 2, f'expected the chapter\'s GPU cells (flagged `#| cuda`), found {len(gpu)}'
    for c in gpu:
        assert _src(c).startswith('%%gpu\n'), f'a `#| cuda` cell does not start with %%gpu:\n{_src(c)[:200]}'
        outs = c.get('outputs', [])
        texts = [_text(o.get('text')) for o in outs if o['output_type'] == 'stream' and o.get('name') == 'stdout']
        assert len(outs) == 1 and len(texts) == 1, f'GPU cell should print exactly its skip line, got {outs}\n{_src(c)[:200]}'
        lines = texts[0].splitlines()
        assert lines == [SKIP_PREFIX + no_gpu_reason], f'skip line {lines} does not give the probe\'s reason {no_gpu_reason!r}'

def test_kernel_source_is_shown_as_cpp_code(executed):
    "Each `show_kernel` cell displays its section as one fenced ```cpp block, which the site highlights."
    from minima.backend_ndarray.cuda import kernel_source
    shown = [c for c in executed['cells'] if c['cell_type'] == 'code' and _src(c).lstrip().startswith('show_kernel(')]
    title = _src(executed['cells'][0]).splitlines()[0]
    want = {'# The CUDA device': 9, '# Matrix multiplication on the GPU': 4}.get(title, 0)
    assert len(shown) >= want, f'expected the chapter to show its kernels, found {len(shown)} show_kernel cells'
    for c in shown:
        md = [_text(o['data']['text/markdown']) for o in c['outputs'] if 'text/markdown' in o.get('data', {})]
        assert len(md) == 1, f'{_src(c)}: expected one Markdown output, got {c["outputs"]}'
        m = re.fullmatch(r'(`{3,})cpp\n(.*)\n\1', md[0], re.S)
        assert m, f'{_src(c)}: not a fenced ```cpp block: {md[0][:120]!r}'
        want = eval(_src(c).strip().replace('show_kernel(', 'kernel_source(', 1), {'kernel_source': kernel_source})
        assert m.group(2) == want, f'{_src(c)}: the block is not that section of the kernel source'

# --- the %%gpu magic itself, with a stand-in device that works (or does not) ----------------------------------------

class _Dev:
    def __init__(self, ok, why=''): self.ok, self.why = ok, why
    def enabled(self): return self.ok
    def why_disabled(self): return '' if self.ok else self.why

@pytest.fixture
def shell():
    "An IPython shell with chapter 22's %%gpu magic registered, as each GPU chapter registers it."
    from execnb.shell import CaptureShell
    sh = CaptureShell()
    sh.run('from minima.backend_ndarray.cuda import load_gpu_magic\nload_gpu_magic()')
    assert sh.exc is None, sh.exc
    return sh

def _device(monkeypatch, dev):
    import importlib   # `minima.backend_ndarray.cuda` the attribute is the device function; the module is here
    monkeypatch.setattr(importlib.import_module('minima.backend_ndarray.cuda'), 'cuda_device', lambda: dev)

def test_the_gpu_magic_is_defined_once_and_every_gpu_chapter_loads_it():
    for nb in sorted((ROOT / 'nbs').glob('*.ipynb')):
        cells = [_src(c) for c in json.loads(nb.read_text())['cells'] if c['cell_type'] == 'code']
        if not any(s.startswith('%%gpu') for s in cells): continue
        assert any('load_gpu_magic()' in s for s in cells), f'{nb.name} has %%gpu cells but never loads the magic'
        assert not any('register_magic_function' in s and '#| export' not in s for s in cells), \
            f'{nb.name} defines its own %%gpu magic'

def test_gpu_magic_runs_the_cell_when_the_device_works(shell, monkeypatch):
    _device(monkeypatch, _Dev(True))
    out = shell.run('%%gpu\n#| cuda\nx = 20\nprint("on the gpu")\nx + 22')
    assert shell.exc is None and shell.user_ns['x'] == 20
    assert [_text(o['text']) for o in out if o['output_type'] == 'stream'] == ['on the gpu\n']
    assert [_text(o['data']['text/plain']) for o in out if o['output_type'] == 'execute_result'] == ['42']
    shell.run('%%gpu\ny = x + 1')                        # a cell ending in a statement shows no value
    assert shell.exc is None and shell.user_ns['y'] == 21 and shell.result is None
    out = shell.run('%%gpu\nraise ValueError("kernel failed")')   # errors propagate: Run All stops on a GPU
    assert isinstance(shell.exc, ValueError) and any(o['output_type'] == 'error' for o in out)

def test_gpu_magic_skips_the_cell_without_a_device(shell, monkeypatch):
    _device(monkeypatch, _Dev(False, 'no NVIDIA driver: test'))
    out = shell.run('%%gpu\n#| cuda\nz = 1\nraise ValueError("must not run")')
    assert shell.exc is None and 'z' not in shell.user_ns
    assert out == [dict(name='stdout', output_type='stream', text=[SKIP_PREFIX + 'no NVIDIA driver: test\n'])]

# --- outputs measured on a GPU survive a re-execution without one (tools/execute_nbs) ---------------------------------

def _tool():
    import importlib.util
    spec = importlib.util.spec_from_file_location('keep_gpu_outputs', ROOT / 'tools' / 'keep_gpu_outputs.py')
    mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
    return mod

def test_reexecution_without_gpu_keeps_measured_outputs():
    tool = _tool()
    assert tool.SKIP == SKIP_PREFIX, 'tools/keep_gpu_outputs.py and the %%gpu magic disagree on the skip line'
    def cell(src, outs): return dict(cell_type='code', source=src.splitlines(True), outputs=outs, execution_count=None)
    def out(t): return [dict(output_type='stream', name='stdout', text=[t])]
    skip = out(SKIP_PREFIX + 'no NVIDIA driver\n')
    measured = out('H100: 51.2 TFLOP/s\n')
    before = dict(cells=[cell('%%gpu\n#| cuda\nbench()', measured), cell('%%gpu\nold_code()', measured),
                         cell('%%gpu\nnever_measured()', skip), cell('x = 1', out('1\n'))])
    after = dict(cells=[cell('%%gpu\n#| cuda\nbench()', skip), cell('%%gpu\nnew_code()', skip),
                        cell('%%gpu\nnever_measured()', skip), cell('x = 1', out('2\n'))])
    assert tool.keep_gpu_outputs(before, after) == 1
    assert [c['outputs'] for c in after['cells']] == [measured, skip, skip, out('2\n')]

@pytest.mark.parametrize('path', CHAPTERS, ids=lambda p: p.stem)
def test_chapter_says_whether_gpu_numbers_were_measured(path):
    "The committed chapter either shows measured GPU outputs, or says plainly that there are none yet."
    nb = json.loads(path.read_text())
    gpu = [c for c in nb['cells'] if _is_gpu_cell(c)]
    measured = [c for c in gpu if c.get('outputs') and not _tool().is_skip(c['outputs'])]
    prose = ' '.join(_src(c) for c in nb['cells'] if c['cell_type'] == 'markdown')
    says_none = 'No GPU numbers have been measured' in prose
    if measured: assert not says_none, 'the chapter has GPU outputs but still says no GPU numbers were measured'
    else: assert says_none, 'the chapter has no GPU outputs and must say that no GPU numbers were measured yet'
