"""The teacher's edition: solution markers, the student edition of the whole course, and the autograder."""
import hashlib, json, shutil, subprocess, sys
from pathlib import Path
import pytest
from minima.teaching import strip_solution, parse_solution, course_units, student_edition, grade

ROOT = Path(__file__).resolve().parents[1]


def test_strip_keeps_signature_and_docstring():
    src = ('#| export\n#| solution compute gradient points=2 -- use the product rule\n'
           'class EWiseMul(TensorOp):\n    "Product."\n    def compute(self, a, b): return a * b\n'
           '    def gradient(self, g, node):\n        "Adjoints."\n        a, b = node.inputs\n        return g * b, g * a\n'
           'def mul(a, b): "`a·b` — é"; return EWiseMul()(a, b)\n')
    new, units = strip_solution(src, 'ch.ipynb')
    assert 'return a * b' not in new and 'g * b' not in new
    assert "def compute(self, a, b): raise NotImplementedError('EWiseMul.compute: use the product rule')" in new
    assert '        "Adjoints."\n        raise NotImplementedError(' in new
    assert 'def mul(a, b): "`a·b` — é"; return EWiseMul()(a, b)' in new      # not named: untouched
    assert [(u.name, u.kind, u.points, u.chapter) for u in units] == [('EWiseMul', 'op', 2, 'ch.ipynb')]
    compile(new, 'x', 'exec')


def test_strip_functions_methods_and_owner():
    src = ('#| export\n#| solution _compact Box.forward of=NDArray\n'
           'def _compact(self):\n    return self.copy()\n'
           'class Box(Module):\n    def forward(self, x): return x\n    def other(self): return 1\n')
    new, units = strip_solution(src)
    assert "raise NotImplementedError('NDArray.compact:" in new and 'return self.copy()' not in new
    assert 'def other(self): return 1' in new
    assert sorted(u.name for u in units) == ['Box.forward', 'NDArray.compact']


def test_bad_markers_raise():
    with pytest.raises(ValueError, match='names'): strip_solution('#| solution nothere\ndef f(): return 1\n', 'c')
    with pytest.raises(ValueError, match='needs the names'): parse_solution('#| solution points=2\nx = 1\n')
    assert parse_solution('#| export\nx = 1') is None


def test_course_marks_what_the_issue_asks():
    units = course_units(ROOT)
    names = {u.name for u in units}
    chapters = {u.chapter[:2] for u in units}
    assert {'03', '04', '05', '06', '07', '08', '10', '11', '12', '20'} <= chapters
    assert {'EWiseMul', 'Summation', 'Reshape', 'MatMul', 'SoftmaxOp', 'Conv', 'Linear.forward', 'SGD.step',
            'Adam.step', 'DataLoader.__iter__', 'NDArray.compact', 'NDArray.permute'} <= names
    # every op unit has a registration, every other unit a tagged test
    from minima.testing import REGISTRY
    ops = {s.op.__name__ for s in REGISTRY.values() if s.op is not None}
    tagged = ' '.join(p.read_text() for p in (ROOT / 'tests').glob('test_*.py'))
    for u in units:
        if u.kind == 'op': assert u.name in ops, f'op unit {u.name} has no registration'
        else: assert f"'{u.name}'" in tagged, f'unit {u.name} has no @pytest.mark.grade test'


def _tree_hash(path: Path):
    h = hashlib.sha256()
    for p in sorted(path.rglob('*')):
        if p.is_file() and '__pycache__' not in p.parts and '.grading' not in p.parts:
            h.update(str(p.relative_to(path)).encode()); h.update(p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope='module')
def edition(tmp_path_factory):
    src_before = _tree_hash(ROOT / 'nbs')
    base = tmp_path_factory.mktemp('edition')
    units = student_edition(base / 'a', ROOT)
    student_edition(base / 'b', ROOT)
    assert _tree_hash(ROOT / 'nbs') == src_before, 'student_edition touched the source notebooks'
    return base, units


def test_edition_is_deterministic_and_stripped(edition):
    base, units = edition
    assert _tree_hash(base / 'a') == _tree_hash(base / 'b')
    text = (base / 'a' / 'minima' / 'ops' / 'linalg.py').read_text()
    assert "raise NotImplementedError('MatMul.compute" in text
    nb = json.loads((base / 'a' / 'nbs' / '06_ops_linalg.ipynb').read_text())
    marked = [c for c in nb['cells'] if '#| solution' in ''.join(c['source'])]
    assert marked and all(not c['outputs'] for c in marked), 'a marked cell must not keep an output with the answer'
    assert len(units) == len(json.loads((base / 'a' / 'grading_units.json').read_text()))


def _errors(nb_path: Path, pythonpath: Path):
    "Execute a notebook cell by cell, errors allowed; the indices and messages of the cells that raised."
    code = ('import json, sys\nfrom execnb.shell import CaptureShell\nfrom execnb.nbio import read_nb\n'
            'nb, sh, out = read_nb(sys.argv[1]), CaptureShell(), []\n'
            'for i, c in enumerate(nb.cells):\n'
            '    if c.cell_type != "code" or "#| slow" in c.source or "#| cuda" in c.source: continue\n'
            '    sh.run(c.source)\n'
            '    if sh.exc: out.append((i, type(sh.exc).__name__, str(sh.exc)[:300]))\n'
            'print(json.dumps(out))\n')
    r = subprocess.run([sys.executable, '-c', code, nb_path.name], cwd=nb_path.parent, capture_output=True, text=True,
                       env={**__import__('os').environ, 'PYTHONPATH': str(pythonpath), 'MPLBACKEND': 'Agg'})
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize('chapter', ['06_ops_linalg.ipynb', '11_optim.ipynb'])
def test_student_notebooks_run_top_to_bottom(edition, chapter):
    base, _ = edition
    errs = _errors(base / 'a' / 'nbs' / chapter, base / 'a')
    assert errs, 'the student edition raised nothing: were the solutions removed?'
    assert any('NotImplementedError' in kind + msg for _, kind, msg in errs)
    nb = json.loads((base / 'a' / 'nbs' / chapter).read_text())
    for i, kind, msg in errs:
        src = ''.join(nb['cells'][i]['source'])
        assert '#| solution' not in src, f'the marked cell {i} itself raised {kind}: {msg}'
    # every cell that fails for the student runs with the solutions in place: the failures come from the gaps
    assert not _errors(ROOT / 'nbs' / chapter, ROOT)


def test_grader_zero_full_and_one_broken_gradient(edition):
    base, units = edition
    copy = base / 'a'
    total = sum(u.points for u in units)
    rep = grade(copy, quiet=True)
    assert rep['total'] == total and rep['score'] == 0
    assert all(u['status'] in ('not attempted', 'blocked') for u in rep['units'])
    assert sum(u['status'] == 'not attempted' for u in rep['units']) > len(units) // 2
    assert json.loads((copy / 'grade_report.json').read_text())['score'] == 0
    for nb in (ROOT / 'nbs').glob('*.ipynb'): shutil.copy(nb, copy / 'nbs' / nb.name)
    rep = grade(copy, quiet=True)
    assert rep['score'] == total, [(u['name'], u['failed'][:2]) for u in rep['units'] if u['status'] != 'pass']
    p = copy / 'nbs' / '05_ops_movement.ipynb'
    text = p.read_text()
    old = json.dumps('    def gradient(self, out_grad, node): return flip(out_grad, self.axes)\n')[1:-1]
    assert text.count(old) == 1
    p.write_text(text.replace(old, json.dumps('    def gradient(self, out_grad, node): return out_grad\n')[1:-1]))
    rep = grade(copy, quiet=True)
    lost = {u['name'] for u in rep['units'] if u['status'] != 'pass'}
    assert lost == {'Flip'} and rep['score'] == total - next(u.points for u in units if u.name == 'Flip')


def test_grader_refuses_a_package_outside_the_copy(tmp_path):
    (tmp_path / 'nbs').mkdir()
    with pytest.raises(RuntimeError, match='could not be graded|not from the student copy'):
        grade(tmp_path, export=False, quiet=True)
