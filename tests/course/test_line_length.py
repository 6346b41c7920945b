"""Lines fit the site's column (100 characters, `test_site.py`'s MAX_WRAPPED): a ratchet until
ruff's E501 can run at 100. Thousands of lines are longer today (most in the library, which the
notebooks generate: shorten them there, then `nbdev_export`), so the count of longer lines per
directory may only go down; lower a ceiling when you shorten lines."""
from pathlib import Path
import pytest

ROOT = Path(__file__).parents[2]
COLUMN = 100
# Lines longer than COLUMN on 2026-11-28 (issue 38; main had 3061, 2001, 240). Never raise these,
# except once: the merge of the session's seven branches (2026-11-28) was measured and set here;
# the next change that shortens lines lowers them.
CEILING = {'minima': 3146, 'tests': 2135, 'bench': 303}
VERBATIM = ('makemore', 'mingpt', 'nanogpt', 'micrograd', 'pytorch_examples',   # not ours to edit
            'ng_video_lecture')


def long_lines(folder: str) -> int:
    n = 0
    for p in sorted((ROOT / folder).rglob('*.py')):
        rel = p.relative_to(ROOT).as_posix()
        if p.name == '_modidx.py' or any(f'tests/torch/programs/{v}/' in rel for v in VERBATIM):
            continue
        n += sum(len(line) > COLUMN for line in p.read_text().splitlines())
    return n


@pytest.mark.parametrize('folder', sorted(CEILING))
def test_long_lines_do_not_grow(folder):
    n = long_lines(folder)
    assert n <= CEILING[folder], (f'{folder}: {n} lines are longer than the column ({COLUMN} '
                                  f'characters), more than the {CEILING[folder]} allowed; shorten '
                                  'the new ones (in the notebook, for a generated module)')


def test_the_count_sees_a_long_line(tmp_path, monkeypatch):
    (tmp_path / 'x').mkdir()
    (tmp_path / 'x' / 'a.py').write_text('a = 1\n' + 'b = ' + '1' * COLUMN + '\n')
    monkeypatch.setattr(__import__(__name__), 'ROOT', tmp_path)
    assert long_lines('x') == 1
