"""The probes that grade the units which are not ops (modules, optimizers, the DataLoader, the NDArray's views), run
here against the course's own solutions: each probe's `run` on this package must give what its `expect` computes with
torch and numpy. The grader runs the same `run` in the student's process and the same `expect` in its own."""
import json, os, shutil, subprocess, sys, zlib
import numpy as np, pytest, torch
import minima
from minima import nn, optim, data
from minima.backend_ndarray.ndarray import NDArray
from minima.teaching import _PROBES, _compare, course_units, _CUDA_UNITS, _build_kernels, strip_kernels
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
P = SimpleNamespace(mi=minima, nn=nn, optim=optim, data=data, NDArray=NDArray, np=np)


KERNELS = {k[0] for k in _CUDA_UNITS}


@pytest.mark.parametrize('name', sorted(n for n, p in _PROBES.items() if p.unit not in KERNELS))
def test_probe_passes_on_the_solutions(name):
    p = _PROBES[name]
    for seed in (0, 1):
        inputs = p.inputs(np.random.default_rng([seed, zlib.crc32(name.encode())]))
        got, want = p.run(P, **inputs), p.expect(torch, **inputs)
        bad = want(got) if callable(want) else _compare(got, want, p.rtol, p.atol)
        assert not bad, bad


def test_every_code_unit_has_a_probe():
    code_units = {u.name for u in course_units(ROOT) if u.kind != 'op'}
    assert code_units == {p.unit for p in _PROBES.values()}


def test_a_probe_catches_a_wrong_value():
    p = _PROBES['_p_linear']
    inputs = p.inputs(np.random.default_rng(0))
    got = p.run(P, **inputs)
    got['dw'] = got['dw'].T.copy() if got['dw'].shape[0] == got['dw'].shape[1] else -got['dw']
    assert _compare(got, p.expect(torch, **inputs), p.rtol, p.atol)


_RUN_KERNEL_PROBES = r'''
import json, zlib, types, numpy as np, torch, minima
from minima import nn, optim, data
from minima.backend_ndarray.ndarray import NDArray
from minima.teaching import _PROBES, _compare, _CUDA_UNITS
P = types.SimpleNamespace(mi=minima, nn=nn, optim=optim, data=data, NDArray=NDArray, np=np)
out = {}
for p in [p for p in _PROBES.values() if p.unit in {k[0] for k in _CUDA_UNITS}]:
    inputs = p.inputs(np.random.default_rng([0, zlib.crc32(p.name.encode())]))
    try:
        want = p.expect(torch, **inputs)
        got = p.run(P, **inputs)
        out[p.unit] = want(got) if callable(want) else _compare(got, want, p.rtol, p.atol)
    except Exception as e: out[p.unit] = f'{type(e).__name__}: {e}'
print(json.dumps(out))
'''


def _kernel_probes(src: str, d):
    "The kernel probes' findings on CUDA source `src`, built for the CPU emulator: {unit: [] or what is wrong}."
    why = _build_kernels(src, d)
    assert not why, why
    env = dict(os.environ, MINIMA_CUDA_LIB=str(d / 'libminima_cuda_emu.so'), PYTHONPATH=str(ROOT))
    r = subprocess.run([sys.executable, '-c', _RUN_KERNEL_PROBES], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(shutil.which(os.environ.get('CXX', 'g++')) is None,
                    reason='no C++ compiler (g++) to build the CUDA kernels for the CPU emulator')
def test_kernel_probes_on_the_emulator(tmp_path):
    "The reference kernels pass their probes on the CPU emulator; the handed-out ones say what to write."
    src = (ROOT / 'minima' / 'backend_ndarray' / 'cuda_kernels.cu').read_text()
    assert _kernel_probes(src, tmp_path / 'ref') == {k: [] for k in KERNELS}
    out = _kernel_probes(strip_kernels(src, _CUDA_UNITS), tmp_path / 'handout')
    for name, chapter, hint in _CUDA_UNITS:
        assert out[name].startswith(f'NotImplementedError: {name}: {hint}'), out[name]
