import numpy as np, pytest
import minima

def _device_params():
    "Every device: enabled ones run; the CUDA device appears as a visible skip when unavailable."
    params = [pytest.param(minima.cpu(), id='cpu')]
    try:
        d = minima.cuda()
        ok = d.enabled()
        why = '' if ok else getattr(d, 'why_disabled', lambda: 'no CUDA device on this machine')()
    except ImportError as e:
        ok, why = False, f'CUDA device module unavailable: {e}'
    params.append(pytest.param('cuda', id='cuda', marks=() if ok else pytest.mark.skip(reason=f'CUDA not available: {why}')))
    return params

DEVICES = _device_params()

@pytest.fixture
def rng(): return np.random.default_rng(0)

@pytest.fixture
def one_blas_thread():
    "Tiny matmuls run fastest on one BLAS thread, and a busy machine makes spinning BLAS threads very slow."
    try: from threadpoolctl import threadpool_limits
    except ImportError: yield; return
    with threadpool_limits(1): yield

def pytest_configure(config):
    config.addinivalue_line('markers', "grade(*units): the autograder's units this test grades (minima.teaching)")

# tests/torch/programs holds public torch programs verbatim (test_public_programs.py runs them through
# `python -m minima.run`); their own test files import packages that are not installed, so pytest does not collect them
collect_ignore = ['torch/programs']
