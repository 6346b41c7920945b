"""The teacher's edition: solution markers, the student edition of the whole course, and the autograder."""
import hashlib, json, os, shutil, subprocess, sys, zipfile
from pathlib import Path
import pytest
from minima.teaching import (strip_solution, parse_solution, course_units, student_edition, grade, format_report,
                             diagnose, gradescope_results, gradescope_bundle)

ROOT = Path(__file__).resolve().parents[2]


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
    tagged = ' '.join(p.read_text() for p in (ROOT / 'tests').rglob('test_*.py'))
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
    # each unit is graded with the reference solution in every other unit: nothing waits for anything
    assert all(u['status'] == 'not attempted' for u in rep['units']), \
        [(u['name'], u['status'], u['failed'][:2]) for u in rep['units'] if u['status'] != 'not attempted']
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
    rep = grade(tmp_path, export=False, quiet=True)
    assert 'not from the student copy' in rep['error'] and rep['score'] == 0
    assert json.loads((tmp_path / 'grade_report.json').read_text())['error'] == rep['error']


def test_diagnose():
    import numpy as np
    e = np.array([[1., -2., 3.], [0.5, 4., -1.]])
    assert diagnose(-e, e).startswith('sign') and diagnose(2.5 * e, e).startswith('scale: got ≈ 2.5')
    assert diagnose(e.T, e) == 'transposed' and 'unbroadcast' in diagnose(np.stack([e, e]), e)
    assert 'keepdims' in diagnose(e.sum(0), e) and 'reshape' in diagnose(e.reshape(3, 2) + 1, e)
    assert diagnose(e + 0.3, e) == '' and diagnose(e * 0, e) == 'got zeros'


def _cells(nb, cls):
    return next(i for i, c in enumerate(nb['cells']) if f'class {cls}(' in ''.join(c['source']))


def _write_units(copy: Path, chapter: str, classes, extra=''):
    "The student writes these op classes as the course does (their cells from the source notebook)."
    src = json.loads((ROOT / 'nbs' / chapter).read_text())
    p = copy / 'nbs' / chapter
    nb = json.loads(p.read_text())
    for cls in classes: nb['cells'][_cells(nb, cls)]['source'] = src['cells'][_cells(src, cls)]['source']
    if extra:
        i = _cells(nb, classes[-1])
        nb['cells'][i]['source'] = ''.join(nb['cells'][i]['source']) + extra
    p.write_text(json.dumps(nb))


def test_first_chapter_alone_pass_pass_fail(tmp_path):
    "The course's first op chapter, everything else unwritten: EWiseMul, Exp right, EWiseDiv with a flipped sign."
    copy = tmp_path / 'student'
    student_edition(copy, ROOT)
    flip = ('\n_div_gradient = EWiseDiv.gradient\n'
            'def _flipped(self, out_grad, node):\n'
            '    ga, gb = _div_gradient(self, out_grad, node)\n'
            '    return ga, -gb\n'
            'EWiseDiv.gradient = _flipped\n')
    _write_units(copy, '03_ops_elementwise.ipynb', ['EWiseMul', 'Exp', 'EWiseDiv'], flip)
    rep = grade(copy, chapters=['03'], quiet=True)
    by = {u['name']: u for u in rep['units']}
    assert {u['chapter'] for u in rep['units']} == {'03_ops_elementwise.ipynb'}
    assert [by[n]['status'] for n in ('EWiseMul', 'Exp', 'EWiseDiv')] == ['pass', 'pass', 'FAIL']
    assert not [u['name'] for u in rep['units'] if u['status'] == 'blocked']
    assert {u['name'] for u in rep['units'] if u['status'] == 'pass'} >= {'EWiseMul', 'MulScalar', 'Exp', 'Log'}
    msg = by['EWiseDiv']['failed'][0]
    assert 'backward' in msg and 'case (3, 4), (3, 4), float32' in msg and 'gradient of input 1' in msg
    assert 'sign' in msg and 'expected' in msg and 'got' in msg, msg
    assert not any('input 0' in f for f in by['EWiseDiv']['failed'][:3])
    saved = json.loads((copy / 'grade_report.json').read_text())
    assert saved['units'] == rep['units']                          # never cut
    assert any(len(f) > 150 for f in by['EWiseDiv']['failed'])
    table = format_report(rep)
    assert max(map(len, table.splitlines())) <= 120 and 'a flipped sign' in table.replace('\n      ', ' ')


def test_syntax_error_in_one_notebook(tmp_path):
    copy = tmp_path / 'student'
    student_edition(copy, ROOT)
    _write_units(copy, '03_ops_elementwise.ipynb', ['EWiseMul'])
    p = copy / 'nbs' / '05_ops_movement.ipynb'
    shutil.copy(ROOT / 'nbs' / '05_ops_movement.ipynb', p)
    good = p.read_text()
    nb = json.loads(good)
    i = _cells(nb, 'Flip')
    src = ''.join(nb['cells'][i]['source'])
    line = next(k for k, l in enumerate(src.splitlines(), 1) if 'def gradient(self' in l)
    nb['cells'][i]['source'] = src.replace('def gradient(self', 'def gradient(self,,', 1)
    p.write_text(json.dumps(nb))
    # a notebook that exports but whose module raises on import
    p6 = copy / 'nbs' / '06_ops_linalg.ipynb'
    nb6 = json.loads(p6.read_text())
    j = _cells(nb6, 'MatMul')
    nb6['cells'][j]['source'] = ''.join(nb6['cells'][j]['source']) + '\nprint(undefined_name)\n'
    p6.write_text(json.dumps(nb6))
    # the student exported by hand: their own package now has a broken module
    r = subprocess.run([sys.executable, '-c', 'from nbdev.doclinks import nbdev_export as e; e()'], cwd=copy,
                       capture_output=True, text=True)
    rep = grade(copy, chapters=['03', '05', '06'], quiet=True)
    assert rep['error'] is None and len(rep['notebook_errors']) == 2
    err, err6 = rep['notebook_errors']
    assert (err['notebook'], err['cell'], err['line']) == ('05_ops_movement.ipynb', i + 1, line)
    assert (err6['notebook'], err6['cell']) == ('06_ops_linalg.ipynb', j + 1) and 'NameError' in err6['message']
    assert next(u for u in rep['units'] if u['name'] == 'MatMul')['status'] == 'error'
    st = {u['name']: u['status'] for u in rep['units']}
    assert all(s == 'error' for u, s in st.items() if u in {v.name for v in course_units(ROOT, ['05'])})
    assert st['EWiseMul'] == 'pass' and st['EWiseAdd'] == 'not attempted'
    assert '05_ops_movement.ipynb, cell' in format_report(rep)
    assert json.loads((copy / 'grade_report.json').read_text())['score'] == rep['score'] > 0
    assert not list((copy / 'minima').rglob('*.tmp'))
    p.write_text(good)                                            # repaired: no other step
    rep = grade(copy, chapters=['05'], quiet=True)
    assert [e['notebook'] for e in rep['notebook_errors']] == ['06_ops_linalg.ipynb']    # not repaired yet
    assert rep['score'] == rep['total'] > 0


def _plain_env(**kw):
    "A plain shell: no virtual environment on PATH, no PYTHONPATH."
    return {'PATH': '/usr/bin:/bin', 'HOME': os.environ.get('HOME', '/tmp'), **kw}


def _chapter_commands():
    "The shell commands of the instructors' chapter (its ```bash blocks), as printed."
    nb = json.loads((ROOT / 'nbs' / '40_teaching.ipynb').read_text())
    text = '\n'.join(''.join(c['source']) for c in nb['cells'] if c['cell_type'] == 'markdown')
    import re
    return [l.strip() for block in re.findall(r'```bash\n(.*?)```', text, re.S) for l in block.splitlines()
            if l.strip()]


def test_assignment_commands_from_a_plain_shell(tmp_path):
    "The instructors' chapter's commands, verbatim: one assignment (chapters 03 and 04) handed out and graded."
    cmds = _chapter_commands()
    assert cmds == ['tools/student_edition ../minima-student --chapters 03,04',
                    '.venv/bin/minima-grade ../minima-student --chapters 03,04'], cmds
    # run from a checkout's sibling folder layout: ROOT stands for the checkout, tmp_path/minima-student for ../
    venv_bin = ROOT / '.venv' / 'bin'
    if not venv_bin.exists():      # this checkout has no .venv of its own: the environment running the tests is it
        venv_bin = Path(sys.executable).parent
    dest = tmp_path / 'minima-student'
    def run(cmd, **env):
        cmd = cmd.replace('../minima-student', str(dest)).replace('.venv/bin/', f'{venv_bin}/')
        return subprocess.run(cmd, shell=True, cwd=ROOT, env=_plain_env(**env), capture_output=True, text=True)
    r = run(cmds[0], **({} if (ROOT / '.venv').exists() else {'MINIMA_PYTHON': sys.executable}))
    assert r.returncode == 0, r.stderr
    units = json.loads((dest / 'grading_units.json').read_text())
    assert {u['chapter'][:2] for u in units} == {'03', '04'} and f'{len(units)} units' in r.stdout
    assert (dest / 'nbs' / '05_ops_movement.ipynb').read_text().count('NotImplementedError') == \
        (ROOT / 'nbs' / '05_ops_movement.ipynb').read_text().count('NotImplementedError')
    assert "raise NotImplementedError('Summation.compute" in (dest / 'minima' / 'ops' / 'reduce.py').read_text()
    readme = (dest / 'README.md').read_text()
    assert '## This student edition' in readme and '`04_ops_reduce.ipynb`: Summation' in readme
    assert 'in the order of the course' in readme and '10_nn.ipynb' not in readme.split('## This student edition')[1]
    # minima-grade, the console script of the environment; PYTHONPATH: this checkout's package, not the installed one
    if not (venv_bin / 'minima-grade').exists(): pytest.skip(f'{venv_bin}/minima-grade is not installed')
    r = run(cmds[1], PYTHONPATH=str(ROOT))
    assert r.returncode == 1, r.stdout + r.stderr                    # 0 points: not everything passes
    rep = json.loads((dest / 'grade_report.json').read_text())
    assert {u['chapter'] for u in rep['units']} == {'03_ops_elementwise.ipynb', '04_ops_reduce.ipynb'}
    assert rep['score'] == 0 and len(rep['units']) == len(units) and rep['reference'] == str(ROOT / 'minima')
    assert all(u['status'] == 'not attempted' for u in rep['units']) and '== 04_ops_reduce.ipynb' in r.stdout


GRADESCOPE_TEST_KEYS = {'name', 'score', 'max_score', 'output'}


def test_gradescope_bundle_round_trip(tmp_path):
    edition = tmp_path / 'edition'
    units = student_edition(edition, ROOT, chapters=['06'])
    z = gradescope_bundle(tmp_path / 'autograder.zip', edition, ROOT)
    ag = tmp_path / 'autograder'
    with zipfile.ZipFile(z) as f:
        f.extractall(ag / 'source')
        assert {'run_autograder', 'setup.sh'} <= set(f.namelist())
        assert 'reference/minima/teaching.py' in f.namelist() and 'edition/grading_units.json' in f.namelist()
    (ag / 'submission').mkdir()
    shutil.copy(ROOT / 'nbs' / '06_ops_linalg.ipynb', ag / 'submission')     # a submission that solves it
    env = dict(os.environ, AUTOGRADER_ROOT=str(ag), MINIMA_PYTHON=sys.executable)
    env.pop('PYTHONPATH', None)
    r = subprocess.run(['bash', str(ag / 'source' / 'run_autograder')], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads((ag / 'results' / 'results.json').read_text())
    assert isinstance(res['score'], (int, float)) and isinstance(res['output'], str)
    assert len(res['tests']) == len(units) and all(GRADESCOPE_TEST_KEYS <= set(t) for t in res['tests'])
    assert res['score'] == sum(t['max_score'] for t in res['tests']) == sum(u.points for u in units)
    assert [t['name'] for t in res['tests']] == [f'{u.chapter}: {u.name}' for u in units]


def _nbgrader_env(tmp_root: Path):
    "An environment with nbgrader: this one's if it has it, else nbgrader installed from PyPI into a cached folder."
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in [os.environ.get('PYTHONPATH')] if p]))
    if subprocess.run([sys.executable, '-c', 'import nbgrader'], env=env, capture_output=True).returncode == 0:
        return env
    target = tmp_root / 'minima-test-nbgrader'
    if not (target / 'nbgrader').exists():
        r = subprocess.run([sys.executable, '-m', 'pip', 'install', '--quiet', '--target', str(target), 'nbgrader'],
                           capture_output=True, text=True)
        if r.returncode: pytest.skip(f'pip could not install nbgrader from the package registry: {r.stderr[-500:]}')
    env['PYTHONPATH'] = os.pathsep.join([str(target), env['PYTHONPATH']])
    env['PATH'] = os.pathsep.join([str(target / 'bin'), str(Path(sys.executable).parent), env.get('PATH', '')])
    return env


def test_nbgrader_round_trip(tmp_path):
    "generate_assignment, a submission with two units right and one wrong, autograde: the scores of minima-grade."
    import tempfile
    from minima.teaching import nbgrader_release
    env = _nbgrader_env(Path(tempfile.gettempdir()))
    course = tmp_path / 'course'
    units = nbgrader_release(course, ROOT, chapters=['03'], assignment='ps1')
    nb = '03_ops_elementwise.ipynb'
    src = json.loads((course / 'source' / 'ps1' / nb).read_text())
    assert sum('### BEGIN SOLUTION' in ''.join(c['source']) for c in src['cells']) == \
        sum(c['metadata'].get('nbgrader', {}).get('solution', False) for c in src['cells']) > 0
    tests = [c for c in src['cells'] if c['metadata'].get('nbgrader', {}).get('grade')]
    assert [c['metadata']['nbgrader']['grade_id'] for c in tests] == [f'test-{u.name}' for u in units]
    def nbgrader(*args):
        r = subprocess.run([sys.executable, '-m', 'nbgrader', *args], cwd=course, env=env, capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    nbgrader('generate_assignment', 'ps1', '--force')
    released = json.loads((course / 'release' / 'ps1' / nb).read_text())
    text = json.dumps(released)
    assert '### BEGIN SOLUTION' not in text and 'unbroadcast(out_grad * b, a.shape)' not in text
    # the student writes EWiseMul and Exp right and EWiseDiv with a flipped sign
    (course / 'submitted' / 'alice' / 'ps1').mkdir(parents=True)
    sub = course / 'submitted' / 'alice' / 'ps1' / nb
    sub.write_text(json.dumps(released))
    flip = ('\n_div_gradient = EWiseDiv.gradient\n'
            'def _flipped(self, out_grad, node):\n'
            '    ga, gb = _div_gradient(self, out_grad, node)\n'
            '    return ga, -gb\n'
            'EWiseDiv.gradient = _flipped\n')
    s = json.loads(sub.read_text())
    ref = json.loads((ROOT / 'nbs' / nb).read_text())
    for cls in ('EWiseMul', 'Exp', 'EWiseDiv'):
        s['cells'][_cells(s, cls)]['source'] = ref['cells'][_cells(ref, cls)]['source']
    i = _cells(s, 'EWiseDiv')
    s['cells'][i]['source'] = ''.join(s['cells'][i]['source']) + flip
    sub.write_text(json.dumps(s))
    nbgrader('autograde', 'ps1', '--create', '--force')
    code = ('import json, sys\nfrom nbgrader.api import Gradebook\n'
            'with Gradebook("sqlite:///gradebook.db") as gb:\n'
            '    n = gb.find_submission_notebook(sys.argv[1], "ps1", "alice")\n'
            '    print(json.dumps({g.name: [g.score, g.max_score] for g in n.grades}))\n')
    r = subprocess.run([sys.executable, '-c', code, nb[:-6]], cwd=course, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    scores = json.loads(r.stdout.strip().splitlines()[-1])
    # minima-grade on the same notebook
    copy = tmp_path / 'copy'
    shutil.copytree(course / 'edition', copy)
    shutil.copy(sub, copy / 'nbs' / nb)
    rep = grade(copy, quiet=True)
    assert {f"test-{u['name']}": [float(u['score']), float(u['points'])] for u in rep['units']} == scores
    assert scores['test-EWiseMul'][0] == scores['test-Exp'][0] == 1 and scores['test-EWiseDiv'][0] == 0
