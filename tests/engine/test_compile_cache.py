"""The kernel cache of `minima.compile` (reliability audit §2): content-addressed by SHA-256 (source, compiler, flags,
CPU); a cached library is used only if it matches the hash written beside it; a planted, truncated or foreign library
is rebuilt; a cache others can write, or none can, gives way to a private temporary one with one warning; a failing
compiler falls back like a missing one. Also: the -O3 -march=native build keeps NaN and inf as eager has them."""
import os, shutil, subprocess, sys, warnings
import numpy as np
import pytest
import minima as mi
from minima import nn, init

C = sys.modules['minima.compile']   # (`minima.compile` the attribute is the function)
SRC = 'void kernel(float *a, long n) { for (long i = 0; i < n; i++) a[i] = a[i] * 2.0f + 1.0f; }\n'

@pytest.fixture
def fresh(monkeypatch, tmp_path):
    "A private cache under tmp_path, nothing loaded in this process, the C compiler not marked failed."
    d = tmp_path / 'kernels'
    monkeypatch.setenv('MINIMA_CACHE', str(d))
    monkeypatch.setattr(C.Kernel, '_loaded', {})
    monkeypatch.setattr(C, '_CACHE_DIRS', {})
    monkeypatch.setattr(C, '_FAILED', set())
    return d

def call(k, x):
    import ctypes
    x = np.array(x, 'float32')
    k.fn(ctypes.c_void_p(x.ctypes.data), ctypes.c_long(x.size))
    return x

CHILD = """import sys, ctypes, numpy as np
import minima; C = sys.modules['minima.compile']
k = C.Kernel(sys.argv[1], 'c')
x = np.array([1, 2], 'float32')
k.fn(ctypes.c_void_p(x.ctypes.data), ctypes.c_long(2))
print(x.tolist())
"""

def in_a_new_process(d):
    "Load the kernel in a new process (this one keeps the libraries it loaded mapped): its result on [1, 2]."
    r = subprocess.run([sys.executable, '-c', CHILD, SRC], capture_output=True, text=True,
                       env=dict(os.environ, MINIMA_CACHE=str(d)))
    assert r.returncode == 0, r.stderr
    return eval(r.stdout.strip().splitlines()[-1])

needs_cc = pytest.mark.skipif(shutil.which(os.environ.get('CC', 'cc')) is None, reason='no C compiler')

@needs_cc
def test_key_is_a_full_sha256_of_source_compiler_flags_and_cpu(fresh, monkeypatch):
    k = C.Kernel(SRC, 'c')
    assert len(k.key) == 2 + 64 and int(k.key[2:], 16) >= 0 and k.key != k.name
    np.testing.assert_array_equal(call(k, [1, 2]), [3, 5])
    assert oct(os.stat(fresh).st_mode & 0o777) == '0o700'
    monkeypatch.setattr(C, '_CFLAGS', C._CFLAGS + ('-DX',))
    C._toolchain.cache_clear()
    try: assert C.Kernel(SRC, 'c').key != k.key     # other flags: another kernel
    finally: C._toolchain.cache_clear()

@needs_cc
def test_planted_library_is_not_loaded(fresh, tmp_path):
    "A library put under a cached name (with a constructor that leaves a mark) is rebuilt, never loaded."
    k = C.Kernel(SRC, 'c')
    mark = tmp_path / 'ran'
    evil = tmp_path / 'evil.c'
    evil.write_text(f'#include <stdio.h>\n__attribute__((constructor)) static void m(void) {{ fclose(fopen("{mark}", "w")); }}\n'
                    'void kernel(float *a, long n) { }\n')
    lib = fresh / (k.key + '.so')
    subprocess.run(['cc', '-shared', '-fPIC', '-o', str(lib) + '.new', str(evil)], check=True)
    os.replace(str(lib) + '.new', lib)
    assert in_a_new_process(fresh) == [3, 5]
    assert not mark.exists()

@needs_cc
@pytest.mark.parametrize('size', [0, 100])
def test_truncated_library_is_rebuilt(fresh, size):
    k = C.Kernel(SRC, 'c')
    lib = fresh / (k.key + '.so')
    data = lib.read_bytes()[:size]
    lib.with_suffix('.new').write_bytes(data)
    os.replace(lib.with_suffix('.new'), lib)   # (this process still maps the old file)
    assert in_a_new_process(fresh) == [3, 5]
    assert lib.stat().st_size > 1000

@needs_cc
def test_missing_hash_is_rebuilt(fresh):
    k = C.Kernel(SRC, 'c')
    (fresh / (k.key + '.so.sha256')).unlink()
    assert in_a_new_process(fresh) == [3, 5]
    assert (fresh / (k.key + '.so.sha256')).exists()

@needs_cc
def test_cache_others_can_write_is_refused(fresh):
    fresh.mkdir()
    os.chmod(fresh, 0o777)
    with pytest.warns(UserWarning, match='others can write it') as w:
        k = C.Kernel(SRC, 'c')
        C.Kernel(SRC + '\n', 'c')
    assert len(w) == 1 and not any(fresh.iterdir())
    np.testing.assert_array_equal(call(k, [1]), [3])

@needs_cc
def test_unwritable_cache_falls_back_to_a_private_temporary_one(fresh, tmp_path, monkeypatch):
    "A cache directory that cannot be made (a file in the way; as root, modes do not stop writes)."
    (tmp_path / 'file').write_text('')
    monkeypatch.setenv('MINIMA_CACHE', str(tmp_path / 'file' / 'kernels'))
    with pytest.warns(UserWarning, match='cannot be written') as w:
        k = C.Kernel(SRC, 'c')
        C.Kernel(SRC + '\n', 'c')
    assert len(w) == 1 and os.path.dirname(C.cache_dir()).startswith(os.path.dirname(os.path.realpath('/tmp')))
    np.testing.assert_array_equal(call(k, [1]), [3])

@needs_cc
@pytest.mark.skipif(os.getuid() == 0, reason='root writes through modes')
def test_read_only_cache_falls_back(fresh):
    fresh.mkdir(mode=0o500)
    with pytest.warns(UserWarning, match='cannot be written'):
        np.testing.assert_array_equal(call(C.Kernel(SRC, 'c'), [1]), [3])

def step_losses(n=6):
    "A small SGD step, compiled: its losses (the program is built at the third call)."
    init.manual_seed(0)
    m = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3))
    opt, lossf = mi.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), nn.CrossEntropyLoss()
    x = mi.Tensor(np.random.default_rng(0).standard_normal((4, 5)).astype('float32'))
    y = mi.Tensor(np.array([0, 1, 2, 1]))
    def step(x, y):
        opt.zero_grad(); loss = lossf(m(x), y); loss.backward(); opt.step()
        return loss
    f = mi.compile(step)
    return [float(f(x, y).detach().numpy()) for _ in range(n)], f

@needs_cc
def test_read_only_home_falls_back(fresh, tmp_path, monkeypatch):
    (tmp_path / 'file').write_text('')
    monkeypatch.delenv('MINIMA_CACHE')
    monkeypatch.setenv('HOME', str(tmp_path / 'file' / 'home'))
    with pytest.warns(UserWarning, match='cannot be written'):
        got, f = step_losses()
    monkeypatch.setenv('MINIMA_CACHE', str(fresh))
    assert f.program.stats['kernels'] > 0 and got == step_losses()[0]

def test_failing_compiler_falls_back_with_one_warning(fresh, tmp_path, monkeypatch):
    want, _ = step_losses()
    C.Kernel._loaded.clear()
    bad = tmp_path / 'badcc'
    bad.write_text('#!/bin/sh\necho "cc: internal error" >&2\nexit 1\n')
    bad.chmod(0o755)
    monkeypatch.setenv('CC', str(bad))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        got, f = step_losses()
        step_losses()
    msgs = [str(x.message) for x in w if 'fall back' in str(x.message)]
    assert len(msgs) == 1 and 'exit 1' in msgs[0] and 'internal error' in msgs[0]
    assert f.program.backend != 'c'
    np.testing.assert_allclose(got, want, rtol=1e-6)

@needs_cc
def test_nan_and_inf_as_eager(fresh):
    """Kernels built with -O3 -march=native -fno-math-errno, calling glibc's vector math, keep IEEE NaN/inf (max/min
    with NaN, exp, log, sqrt, tanh, sin, cos, pow, /0)."""
    v = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 88.0, -100.0, 3e38] * 7, 'float32')
    x, y = mi.Tensor(v), mi.Tensor(v[::-1].copy())
    def g(x, y):
        a = mi.maximum(x, y) + mi.minimum(x * 2.0, y)
        b = (x.exp() - y.exp()) / (x - y) + (x * x).sqrt() + (x.abs() + 1e-30).log()
        return (a, b, x.tanh() * y, (x / y) * 0.5, (-x).sqrt(), mi.where(x > y, x, y) - y,
                x.sin() + y.cos(), (x.abs() ** (y * 0.5)) + 1.0, (x * 0.1).exp().log())
    f = mi.compile(g)
    with mi.no_grad(), np.errstate(all='ignore'):
        for _ in range(4): got = f(x, y)
        want = g(x, y)
    assert f.program.stats['kernels'] > 0
    for a, b in zip(got, want):   # NaN where eager has NaN, the same infinities; libm's exp may differ by an ulp
        a, b = a.numpy(), b.numpy()
        np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
        np.testing.assert_array_equal(np.isinf(a) * np.sign(a), np.isinf(b) * np.sign(b))
        np.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-30)
