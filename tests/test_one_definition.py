"""One name, one definition: a public name is defined in one module of `minima.ops` / `minima.nn`, and the op
registry refuses a name that another module already registered."""
import ast
from collections import defaultdict
from pathlib import Path
import pytest
import minima
from minima.testing import register_op, REGISTRY, case

PKG = Path(minima.__file__).parent


def _defined_names(path: Path):
    "Public names a module binds at its top level by `def`, `class` or assignment (imports are not definitions)."
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)): yield node.name
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                for n in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
                    if isinstance(n, ast.Name): yield n.id   # `Tensor.exp = ...` binds no module-level name


# torch's top-level namespace (`minima.exp`, `minima.softmax`, ...) is a face over the ops with torch's signatures
# (`input`, `dim`), like needle's face in `minima.needle`; `minima.ops` does not star-import it, so its names hide
# nothing there, and `minima/__init__.py` says which of the two a user gets.
FACES = {'minima.ops.torch_face'}


def _definitions(packages=('ops', 'nn')):
    where = defaultdict(set)
    for pkg in packages:
        for path in sorted((PKG / pkg).rglob('*.py')):
            mod = 'minima.' + '.'.join(path.relative_to(PKG).with_suffix('').parts)
            if mod in FACES: continue
            for name in _defined_names(path):
                if not name.startswith('_'): where[name].add(mod)
    return where


def test_scan_sees_definitions():
    where = _definitions()
    assert 'minima.ops.attention' in where['layer_norm'] and 'minima.nn.transformer' in where['LayerNorm']
    assert len(where) > 150, f'the scan found only {len(where)} public names in minima.ops and minima.nn'


def test_a_public_name_is_defined_in_one_module():
    twice = {name: sorted(mods) for name, mods in _definitions().items() if len(mods) > 1}
    assert not twice, f'public names defined in more than one module of minima.ops / minima.nn: {twice}'


def test_scan_catches_a_second_definition(tmp_path):
    (tmp_path / 'a.py').write_text('def layer_norm(x): pass\nclass LayerNorm: pass\nfrom .b import f\n')
    (tmp_path / 'b.py').write_text('LayerNorm = 1\nlayer_norm, _x = 2, 3\ndef f(): pass\nTensor.f = f\n')
    a, b = set(_defined_names(tmp_path / 'a.py')), set(_defined_names(tmp_path / 'b.py'))
    assert a & b == {'layer_norm', 'LayerNorm'}


def test_one_layer_norm_one_LayerNorm():
    import minima.nn as nn, minima.nn.functional as F, minima.ops as ops
    from minima.ops.attention import layer_norm, LayerNormOp
    assert F.layer_norm is ops.layer_norm is layer_norm and REGISTRY['layer_norm'].op is LayerNormOp
    # chapter 08b's cases (no affine parameters, an int normalized_shape) run on the one op
    kws = [c.kwargs for c in REGISTRY['layer_norm'].cases]
    assert any(k.get('ns') == 6 for k in kws) and any(len(c.shapes) == 1 for c in REGISTRY['layer_norm'].cases)
    assert nn.LayerNorm.__module__ == 'minima.nn.transformer' and not hasattr(nn.modules, 'LayerNorm')


def test_register_op_refuses_a_name_another_module_holds():
    held = REGISTRY['add']
    code = "register_op('add', lambda a, b: a, lambda T, a, b: a, [case((2,), (2,))])"
    with pytest.raises(ValueError, match=r"'add' is already registered by minima\.ops\.elementwise; some\.module"):
        exec(code, {'__name__': 'some.module', 'register_op': register_op, 'case': case})
    assert REGISTRY['add'] is held


def test_register_op_allows_a_rerun_from_the_same_module():
    ns = {'__name__': 'some.other_module', 'register_op': register_op, 'case': case}
    code = "register_op('_test_only_op', lambda a: a, lambda T, a: a, [case((2,))])"
    try:
        exec(code, ns)
        exec(code, ns)   # a re-run of the same registration
        with pytest.raises(ValueError, match='already registered by some.other_module'):
            exec(code, {**ns, '__name__': 'a.third_module'})
    finally:
        from minima import testing
        REGISTRY.pop('_test_only_op', None); testing._SOURCE.pop('_test_only_op', None)
