"""The probes that grade the units which are not ops (modules, optimizers, the DataLoader, the NDArray's views), run
here against the course's own solutions: each probe's `run` on this package must give what its `expect` computes with
torch and numpy. The grader runs the same `run` in the student's process and the same `expect` in its own."""
import numpy as np, pytest, torch, zlib
import minima
from minima import nn, optim, data
from minima.backend_ndarray.ndarray import NDArray
from minima.teaching import _PROBES, _compare, course_units
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
P = SimpleNamespace(mi=minima, nn=nn, optim=optim, data=data, NDArray=NDArray, np=np)


@pytest.mark.parametrize('name', sorted(_PROBES))
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
