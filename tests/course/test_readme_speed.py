"The README's speed section is generated from bench/results (tools/speed_table): every figure comes from a run's file."
import importlib.machinery, importlib.util, json, re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

def _tool():
    loader = importlib.machinery.SourceFileLoader('speed_table', str(ROOT / 'tools' / 'speed_table'))
    spec = importlib.util.spec_from_loader('speed_table', loader)
    mod = importlib.util.module_from_spec(spec); loader.exec_module(mod)
    return mod

def test_readme_speed_section_is_the_newest_results():
    st = _tool()
    section = st.readme_section((ROOT / 'README.md').read_text())
    assert section is not None, 'README.md lost its speed-table markers'
    assert section == st.render(), ('README.md\'s speed section differs from bench/results: run '
                                    '`tools/speed_table --write` after measuring (and commit the results file)')

def test_every_ratio_in_the_section_is_in_a_results_file():
    "A second route to the same claim: each ratio printed in the table is a ratio stored in the newest compile file."
    st = _tool()
    d, _ = st.newest('compile')
    stored = {f'{r[k]:.2f}' for r in d['rows'] for k in ('eager_ratio', 'compiled_ratio')}
    table = [l for l in st.readme_section((ROOT / 'README.md').read_text()).splitlines() if l.startswith('| ')][1:]
    printed = [x for l in table for x in re.findall(r'(\d+\.\d\d)×', l)]
    assert printed and set(printed) <= stored, set(printed) - stored

def test_results_files_say_where_they_come_from():
    for f in (ROOT / 'bench' / 'results').glob('compile_*.json'):
        m = json.loads(f.read_text())['machine']
        assert {'cpu', 'cores', 'load_1m', 'date', 'commit'} <= m.keys(), (f.name, sorted(m))
