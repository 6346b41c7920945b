#!/usr/bin/env python
"""Round-trip notebooks through a plain-text cell format, for editing chapters in a text editor.

A cell file is a sequence of cells, each starting with a marker line `%%md` or `%%code`.

    python tools/nbify.py src2nb chapter.txt nbs/01_autograd.ipynb   # text -> notebook (outputs dropped)
    python tools/nbify.py nb2src nbs/01_autograd.ipynb chapter.txt   # notebook -> text

After `src2nb`, execute the notebook to keep its outputs: `exec_nb nbs/X.ipynb --dest nbs/X.ipynb`,
then `nbdev_export && nbdev_clean`.
"""
import json, sys, re
from pathlib import Path

MARK = re.compile(r'^%%(md|code)\s*$')

def src2nb(src, dest):
    cells, kind, buf = [], None, []
    def flush():
        if kind is None: return
        text = '\n'.join(buf).strip('\n')
        lines = text.splitlines(keepends=True)
        c = dict(cell_type='markdown' if kind == 'md' else 'code', metadata={}, source=lines)
        if kind == 'code': c.update(execution_count=None, outputs=[])
        cells.append(c)
    for line in Path(src).read_text().splitlines():
        m = MARK.match(line)
        if m: flush(); kind, buf = m.group(1), []
        else: buf.append(line)
    flush()
    nb = dict(cells=cells, metadata=dict(kernelspec=dict(display_name='python3', language='python', name='python3')),
              nbformat=4, nbformat_minor=5)
    for i, c in enumerate(nb['cells']): c['id'] = f'c{i:03d}'
    Path(dest).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + '\n')

def nb2src(src, dest):
    nb = json.loads(Path(src).read_text())
    out = []
    for c in nb['cells']:
        out.append('%%md' if c['cell_type'] == 'markdown' else '%%code')
        s = c['source']; out.append(''.join(s) if isinstance(s, list) else s)
    Path(dest).write_text('\n'.join(out) + '\n')

if __name__ == '__main__':
    cmd, a, b = sys.argv[1:4]
    {'src2nb': src2nb, 'nb2src': nb2src}[cmd](a, b)
