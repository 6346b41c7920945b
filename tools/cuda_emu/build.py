#!/usr/bin/env python
"""Build minima's CUDA kernels for the CPU emulator (tools/cuda_emu/cuda_runtime.h) and print the library's path.

    python tools/cuda_emu/build.py [out.so]
    MINIMA_CUDA_LIB=$(python tools/cuda_emu/build.py) pytest tests/backend/test_cuda.py tests/backend/test_device_conformance.py

With MINIMA_CUDA_LIB set, minima's CUDA device loads that library instead of compiling one, and trusts its own runtime
probe; the emulated library passes it, so the whole CUDA test suite runs on the CPU. Launches `k<<<g, b>>>(args)`
become `EMU_LAUNCH(g, b, k(args))`; everything else compiles unchanged."""
import re, subprocess, sys, tempfile, os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / 'minima' / 'backend_ndarray'
LAUNCH = re.compile(r'([A-Za-z_]\w*(?:<[^;{}]*?>)?)<<<([^;]*?)>>>\(([^;]*)\);')

def translate(text: str) -> str:
    out, n = LAUNCH.subn(lambda m: f'EMU_LAUNCH({m.group(2)}, {m.group(1)}({m.group(3)}));', text)
    if '<<<' in out: raise SystemExit('cuda_emu: a kernel launch was not translated')
    return out

def build(dest=None) -> Path:
    dest = Path(dest or ROOT / 'build' / 'cuda_emu' / 'libminima_cuda_emu.so')
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        (d / 'cuda_common.cuh').write_text((SRC / 'cuda_common.cuh').read_text())
        (d / 'cuda_kernels.cpp').write_text(translate((SRC / 'cuda_kernels.cu').read_text()))
        cxx = os.environ.get('CXX', 'g++')
        cmd = [cxx, '-std=c++20', '-O1', '-g', '-shared', '-fPIC', '-w', f'-I{Path(__file__).parent}',
               *os.environ.get('EMU_CXXFLAGS', '').split(), '-o', str(dest), str(d / 'cuda_kernels.cpp')]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode: raise SystemExit(f"cuda_emu: compile failed:\n{' '.join(cmd)}\n{r.stderr[-5000:]}")
    return dest

if __name__ == '__main__': print(build(sys.argv[1] if len(sys.argv) > 1 else None))
