#!/usr/bin/env python
"""Put back the outputs a notebook's GPU cells had before it was re-executed on a machine without a GPU.

    python tools/keep_gpu_outputs.py BEFORE.ipynb AFTER.ipynb     # rewrites AFTER.ipynb in place

A `%%gpu` cell (see nbs/22_cuda.ipynb) prints only a line starting with SKIP when there is no GPU. Where such a cell
of AFTER has exactly that output, and the cell with the same source in BEFORE has other outputs (measured on a GPU),
those outputs come back. A cell whose source changed keeps its skip line: its old numbers would describe other code.
"""
import json, sys
from pathlib import Path

SKIP = 'skipped (this cell needs a GPU): '   # minima.backend_ndarray.cuda.GPU_SKIP (no import: this tool runs anywhere)

def _src(c): return ''.join(c['source']) if isinstance(c['source'], list) else c['source']

def is_skip(outputs):
    return (len(outputs) == 1 and outputs[0].get('output_type') == 'stream'
            and ''.join(outputs[0].get('text', '')).startswith(SKIP))

def keep_gpu_outputs(before: dict, after: dict) -> int:
    "Copy measured outputs of unchanged `%%gpu` cells from `before` into `after`; return how many cells got them back."
    old = {_src(c): c for c in before['cells'] if c['cell_type'] == 'code' and _src(c).startswith('%%gpu')}
    n = 0
    for c in after['cells']:
        if c['cell_type'] != 'code' or not _src(c).startswith('%%gpu') or not is_skip(c.get('outputs', [])): continue
        prev = old.get(_src(c))
        if prev is not None and prev.get('outputs') and not is_skip(prev['outputs']):
            c['outputs'], c['execution_count'] = prev['outputs'], prev.get('execution_count')
            n += 1
    return n

if __name__ == '__main__':
    b, a = Path(sys.argv[1]), Path(sys.argv[2])
    after = json.loads(a.read_text())
    n = keep_gpu_outputs(json.loads(b.read_text()), after)
    if n:
        a.write_text(json.dumps(after, indent=1, ensure_ascii=False) + '\n')
        print(f'{a}: kept the GPU outputs of {n} cell(s) measured earlier (this machine has no GPU)')
