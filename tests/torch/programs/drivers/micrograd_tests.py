"""micrograd's test suite (unmodified `test/test_engine.py`), which checks micrograd against torch: run with minima
in torch's place, minima is the oracle."""
import os, sys
here = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'micrograd')
sys.path[:0] = [here, os.path.join(here, 'test')]
import test_engine
for name in ['test_sanity_check', 'test_more_ops']:
    getattr(test_engine, name)()
    print(name, 'passed')
