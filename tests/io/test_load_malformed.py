"A malformed minima.save file raises CorruptFileError naming the file and the problem; nothing is allocated blindly."
import io, json, os, zipfile
from collections import namedtuple, OrderedDict
import numpy as np, pytest
import minima as mi
from minima import nn
from minima.serialization import CorruptFileError

def _spec_file(tmp_path, spec, **arrays):
    path = str(tmp_path / 'bad.npz')
    np.savez(path, __spec__=np.array(spec if isinstance(spec, str) else json.dumps(spec)), **arrays)
    return path

_deep = '{"list": [' * 5000 + '{"value": 1}' + ']}' * 5000
MALFORMED = {   # the 11 malformed structures of the reliability audit (D1.4), and what the message must say
    'unknown node': ({'tuple_': []}, 'expected exactly one of'),
    'spec is a JSON list': ([1, 2], 'JSON list'),
    'spec is a number': (7, 'JSON int'),
    'missing array': ({'tensor': 'a9'}, "missing array 'a9'"),
    'dict entry not a pair': ({'dict': [[{'value': 1}]]}, 'not a [key, value] pair'),
    'unhashable key': ({'dict': [[{'list': []}, {'value': 1}]]}, 'cannot be a key'),
    '5000-deep nesting': (_deep, 'deep'),
    'not JSON': ('{"value": ', 'not JSON'),
    'value holds a dict': ({'value': {'x': 1}}, 'value is a JSON dict'),
    'list of a non-list': ({'list': 5}, 'expected a list'),
    'two node kinds': ({'value': 1, 'list': []}, 'expected exactly one of'),
}

@pytest.mark.parametrize('case', list(MALFORMED))
def test_malformed_structure_is_one_clear_error(tmp_path, case):
    spec, says = MALFORMED[case]
    path = _spec_file(tmp_path, spec, a0=np.ones(2))
    with pytest.raises(CorruptFileError) as e: mi.load(path)
    assert path in str(e.value) and says in str(e.value) and isinstance(e.value, ValueError)
    assert e.value.path == path

def test_spec_not_a_string_and_no_spec(tmp_path):
    with pytest.raises(CorruptFileError, match='not a string'): mi.load(_spec_file(tmp_path, '1') and
                                                                        _npz(tmp_path, __spec__=np.ones(3)))
    with pytest.raises(CorruptFileError, match='not written by minima.save'): mi.load(_npz(tmp_path, w=np.ones(3)))

def _npz(tmp_path, **arrays):
    path = str(tmp_path / 'x.npz'); np.savez(path, **arrays); return path

def test_truncated_and_garbage_files_name_the_file(tmp_path):
    path = str(tmp_path / 'ck.npz'); mi.save({'w': mi.tensor(np.ones(1000, 'float32'))}, path)
    with open(path, 'r+b') as f: f.truncate(os.path.getsize(path) // 2)
    for load in (mi.load, lambda p: nn.Linear(2, 2).load(p)):
        with pytest.raises(CorruptFileError, match='not an .npz archive') as e: load(path)
        assert path in str(e.value)

def _member(tmp_path, header_shape, data_bytes, compress=False):
    "An .npz whose one entry's .npy header claims `header_shape` float32 but holds `data_bytes` bytes of data."
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {'descr': '<f4', 'fortran_order': False, 'shape': header_shape})
    path = str(tmp_path / 'm.npz')
    with zipfile.ZipFile(path, 'w', zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as z:
        z.writestr('weight.npy', buf.getvalue() + b'\0' * data_bytes)
    return path

def test_declared_size_is_checked_against_the_entry(tmp_path):
    "A header claiming 8 GB (or 4 TiB) in a small entry is refused before anything is allocated."
    for shape in [(2 ** 31,), (2 ** 40,), (3,)]:
        path = _member(tmp_path, shape, 8)
        with pytest.raises(CorruptFileError, match='header says float32 of shape') as e:
            nn.Linear(2, 2).load(path)
        assert path in str(e.value)

def test_compression_bomb_is_refused_before_inflating(tmp_path):
    "A 300 MB entry compressed to ~300 KB (the audit's D1.3) is refused from its declared size alone."
    path = _member(tmp_path, (75_000_000,), 300_000_000, compress=True)
    assert os.path.getsize(path) < 1_000_000
    with pytest.raises(CorruptFileError, match='MAX_INFLATE_RATIO'): mi.load(path)

def test_object_arrays_are_refused(tmp_path):
    path = str(tmp_path / 'o.npz'); np.savez(path, __spec__=np.array('{}'), a0=np.array([{}], dtype=object))
    with pytest.raises(CorruptFileError, match='minima never loads pickles'): mi.load(path)

def test_parameter_keeps_requires_grad_and_class(tmp_path):
    "torch-audit-4 SW17: load(save({'p': Parameter}))['p'] is a Parameter that requires grad, as in torch."
    path = str(tmp_path / 'p.npz')
    mi.save({'p': nn.Parameter(np.ones(2, 'float32')), 't': mi.tensor([1.0]), 'g': mi.tensor([1.0],
             requires_grad=True)}, path)
    back = mi.load(path)
    assert isinstance(back['p'], nn.Parameter) and back['p'].requires_grad
    assert not back['t'].requires_grad and not isinstance(back['t'], nn.Parameter) and back['g'].requires_grad

P = namedtuple('P', 'a b')
def test_namedtuples_and_sets_round_trip(tmp_path):
    "torch-audit-4 SW18: a namedtuple comes back as its class, sets as sets."
    path = str(tmp_path / 'n.npz')
    obj = {'p': P(1, 2), 's': {1, 'x'}, 'f': frozenset([3]), 'o': OrderedDict(a=1), 't': (1, [2])}
    mi.save(obj, path)
    back = mi.load(path)
    assert back == obj and type(back['p']) is P and type(back['s']) is set and type(back['f']) is frozenset
    assert type(back['o']) is OrderedDict and type(back['t'][1]) is list

class TiedLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.drop, self.out = nn.Embedding(7, 4), nn.Dropout(0.0), nn.Linear(4, 7)
        self.out.weight = self.emb.weight
    def forward(self, i): return self.out(self.drop(self.emb(i)))

def test_whole_module_round_trips_without_pickle(tmp_path):
    "torch-programs-4: torch.save(model) then torch.load(path): same class, same outputs, tied weights kept."
    path = str(tmp_path / 'model.pt')
    m = TiedLM(); m.eval()
    with open(path, 'wb') as f: mi.save(m, f)
    with open(path, 'rb') as f: back = mi.load(f, weights_only=False)
    i = mi.tensor([0, 3, 6])
    assert type(back) is TiedLM and not back.training
    assert np.array_equal(back(i).detach().numpy(), m(i).detach().numpy())
    assert back.out.weight is back.emb.weight and len(list(back.parameters())) == 2
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in back.parameters())

def test_module_class_must_be_an_imported_module(tmp_path):
    "minima.load never imports what a file names, nor builds a non-Module class."
    spec = {'module': 'some_module_never_imported:Net', 'id': 0, 'attrs': []}
    with pytest.raises(ImportError, match='not imported; import it first'): mi.load(_spec_file(tmp_path, spec))
    spec = {'module': 'os:system', 'id': 0, 'attrs': []}
    with pytest.raises(CorruptFileError, match='not an nn.Module class'): mi.load(_spec_file(tmp_path, spec))

def test_module_with_unsaveable_attribute_names_it(tmp_path):
    m = nn.Linear(2, 2); m.act = lambda v: v   # (a module-level function such as `print` is saved by its name)
    with pytest.raises(TypeError, match=r'obj\.act, a function.*state_dict'):
        mi.save(m, str(tmp_path / 'm.npz'))
