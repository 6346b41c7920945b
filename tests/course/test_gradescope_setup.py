"""Gradescope's `setup.sh` as the image build runs it: a virtual environment with what grading needs and nothing of
`[dev]`, through the pip the venv comes with (no `--break-system-packages`, unknown to the pip of Ubuntu 22.04), and
optionally a current pip; then `run_autograder` with that environment. It installs torch, so it is opt-in:
`MINIMA_TEST_SETUP_SH=1` (with `MINIMA_TEST_SETUP_PIP=pip==26.2.1` to upgrade pip first)."""
import json, os, shutil, subprocess, sys, zipfile
from pathlib import Path
import pytest
from minima.teaching import student_edition, gradescope_bundle

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(not os.environ.get('MINIMA_TEST_SETUP_SH'), reason='installs torch: set MINIMA_TEST_SETUP_SH=1')
def test_setup_sh_then_run_autograder(tmp_path):
    edition = tmp_path / 'edition'
    student_edition(edition, ROOT, chapters=['06'])
    ag = tmp_path / 'ag'
    with zipfile.ZipFile(gradescope_bundle(tmp_path / 'a.zip', edition, ROOT)) as z: z.extractall(ag / 'source')
    reqs = (ag / 'source' / 'requirements-grading.txt').read_text().split()
    assert 'torch==2.13.0' in reqs and not {'pytest', 'playwright', 'mpich', 'jupyterlab'} & {r.split('=')[0] for r in reqs}
    env = dict(os.environ, AUTOGRADER_ROOT=str(ag), MINIMA_PIP_OPTIONS='', MINIMA_GRADE_USER='none')
    env.pop('PYTHONPATH', None)
    pip = os.environ.get('MINIMA_TEST_SETUP_PIP')
    if pip:   # a current pip first: the same command must work with both
        subprocess.run([sys.executable, '-m', 'venv', str(ag / 'venv')], check=True)
        subprocess.run([str(ag / 'venv' / 'bin' / 'python'), '-m', 'pip', 'install', '-q', pip], check=True)
    r = subprocess.run(['bash', str(ag / 'source' / 'setup.sh')], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    py = ag / 'venv' / 'bin' / 'python'
    got = subprocess.run([str(py), '-m', 'pip', 'list', '--format=json'], capture_output=True, text=True, check=True)
    names = {p['name'].lower() for p in json.loads(got.stdout)}
    assert {'numpy', 'torch', 'nbdev', 'fastcore'} <= names and not {'pytest', 'playwright', 'jupyterlab'} & names
    (ag / 'submission').mkdir()
    shutil.copy(ROOT / 'nbs' / '06_ops_linalg.ipynb', ag / 'submission')
    env.pop('MINIMA_PIP_OPTIONS')
    r = subprocess.run(['bash', str(ag / 'source' / 'run_autograder')], env=env, capture_output=True, text=True)
    res = json.loads((ag / 'results' / 'results.json').read_text())
    assert res['score'] == 1, (res, r.stderr[-2000:])
