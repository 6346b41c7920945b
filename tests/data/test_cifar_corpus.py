"""CIFAR-10 (python pickles and binary batches) and PTB-style text: round trips, and clear errors on bad files."""
import os, pickle
import numpy as np
import pytest
from minima.serialization import CorruptFileError
from minima.datasets import (CIFAR10Dataset, Corpus, Dictionary, load_cifar10, load_cifar10_binary,
                             load_cifar10_pickle)

def _batch(rng, n):
    return rng.integers(0, 256, (n, 3072), dtype=np.uint8), rng.integers(0, 10, n)

def _write_pickle(path, data, labels, str_keys=False, protocol=2):
    k = (lambda s: s) if str_keys else (lambda s: s.encode())
    d = {k('batch_label'): k('a batch'), k('labels'): [int(v) for v in labels], k('data'): data,
         k('filenames'): [k(f'img_{i}.png') for i in range(len(labels))]}
    path.write_bytes(pickle.dumps(d, protocol=protocol))

def _write_bin(path, data, labels):
    path.write_bytes(np.concatenate([np.asarray(labels, np.uint8)[:, None], data], axis=1).tobytes())

@pytest.fixture
def cifar(tmp_path):
    "Both formats of one tiny CIFAR-10 (5 train batches of 3 images, a test batch of 2) and the arrays they hold."
    rng = np.random.default_rng(0)
    py, bn = tmp_path / 'py', tmp_path / 'bin'
    py.mkdir(); bn.mkdir()
    parts = {}
    for name, n in [(f'data_batch_{i}', 3) for i in range(1, 6)] + [('test_batch', 2)]:
        data, labels = _batch(rng, n)
        _write_pickle(py / name, data, labels)
        _write_bin(bn / f'{name}.bin', data, labels)
        parts[name] = (data, labels)
    return py, bn, parts

def test_both_formats_load_the_same_arrays(cifar):
    py, bn, parts = cifar
    for train, names in [(True, [f'data_batch_{i}' for i in range(1, 6)]), (False, ['test_batch'])]:
        want_x = np.concatenate([parts[n][0] for n in names]).reshape(-1, 3, 32, 32)
        want_y = np.concatenate([parts[n][1] for n in names])
        for folder in (py, bn):
            x, y = load_cifar10(folder, train)
            assert x.dtype == np.uint8 and y.dtype == np.int64
            np.testing.assert_array_equal(x, want_x); np.testing.assert_array_equal(y, want_y)

def test_pickles_with_str_keys_and_newer_protocols_load(tmp_path):
    data, labels = _batch(np.random.default_rng(1), 4)
    for proto in (2, 4, 5):
        _write_pickle(tmp_path / 'b', data, labels, str_keys=True, protocol=proto)
        x, y = load_cifar10_pickle(tmp_path / 'b')
        np.testing.assert_array_equal(x.reshape(4, -1), data); np.testing.assert_array_equal(y, labels)

def test_dataset_values_indexing_and_loaders(cifar):
    py, _, parts = cifar
    ds = CIFAR10Dataset(py, train=True)
    assert len(ds) == 15 and ds.transforms is None or ds.transforms == []
    X, y = ds[4]
    np.testing.assert_allclose(X, parts['data_batch_2'][0][1].reshape(3, 32, 32) / 255.0, rtol=1e-6)
    assert X.dtype == np.float32 and X.shape == (3, 32, 32) and y == parts['data_batch_2'][1][1]
    Xb, yb = ds[np.array([0, 4])]
    assert Xb.shape == (2, 3, 32, 32) and yb.tolist() == [parts['data_batch_1'][1][0], y]
    import minima as mi, minima.needle as ndl
    xb, yb = next(iter(mi.data.DataLoader(ds, batch_size=6)))
    assert xb.shape == (6, 3, 32, 32) and xb.dtype == 'float32' and yb.dtype == 'int64'
    xb, yb = next(iter(ndl.data.DataLoader(ds, 6)))
    assert isinstance(xb, ndl.Tensor) and xb.dtype == 'float32' and yb.shape == (6,)

def test_dataset_applies_transforms_per_image(cifar):
    import minima as mi
    py, _, _ = cifar
    plain = CIFAR10Dataset(py, train=False)
    flipped = CIFAR10Dataset(py, train=False, transforms=[mi.data.RandomFlipHorizontal(p=1.0)])
    np.testing.assert_array_equal(flipped[1][0], plain[1][0][..., ::-1])
    np.testing.assert_array_equal(flipped[np.array([0, 1])][0], plain[np.array([0, 1])][0][..., ::-1])

def test_restricted_unpickler_refuses_code(tmp_path):
    marker = tmp_path / 'pwned'
    class Evil:
        def __reduce__(self): return (os.mkdir, (str(marker),))
    (tmp_path / 'evil').write_bytes(pickle.dumps({b'data': Evil(), b'labels': []}, protocol=2))
    with pytest.raises(CorruptFileError, match=r'refusing to load posix\.mkdir|refusing to load nt\.mkdir'):
        load_cifar10_pickle(tmp_path / 'evil')
    assert not marker.exists()
    (tmp_path / 'evil2').write_bytes(pickle.dumps({'data': print}))
    with pytest.raises(CorruptFileError, match=r'refusing to load builtins\.print'):
        load_cifar10_pickle(tmp_path / 'evil2')

@pytest.mark.parametrize('mutate, match', [
    (lambda raw: raw[:len(raw) // 2], 'corrupt or truncated'),
    (lambda raw: raw[:-1], 'corrupt or truncated'),
    (lambda raw: b'not a pickle at all', 'corrupt or truncated'),
    (lambda raw: b'', 'corrupt or truncated'),
])
def test_corrupt_or_truncated_pickles_raise(tmp_path, mutate, match):
    data, labels = _batch(np.random.default_rng(2), 3)
    _write_pickle(tmp_path / 'b', data, labels)
    (tmp_path / 'b').write_bytes(mutate((tmp_path / 'b').read_bytes()))
    with pytest.raises(ValueError, match=match): load_cifar10_pickle(tmp_path / 'b')

def test_pickles_with_wrong_contents_raise(tmp_path):
    rng = np.random.default_rng(3)
    data, labels = _batch(rng, 3)
    p = tmp_path / 'b'
    p.write_bytes(pickle.dumps([1, 2, 3], protocol=2))
    with pytest.raises(ValueError, match='expected a dict, got list'): load_cifar10_pickle(p)
    p.write_bytes(pickle.dumps({b'data': data}, protocol=2))
    with pytest.raises(ValueError, match="has no 'labels' entry"): load_cifar10_pickle(p)
    _write_pickle(p, data[:, :100], labels)
    with pytest.raises(ValueError, match=r'data must be uint8 of shape \(N, 3072\)'): load_cifar10_pickle(p)
    _write_pickle(p, data, [0, 3, 10])
    with pytest.raises(ValueError, match='label 10 is outside 0..9'): load_cifar10_pickle(p)
    _write_pickle(p, data, [0, 3])
    with pytest.raises(ValueError, match='expected 3 integer labels'): load_cifar10_pickle(p)

def test_bad_binary_batches_raise(tmp_path):
    data, labels = _batch(np.random.default_rng(4), 3)
    p = tmp_path / 'data_batch_1.bin'
    _write_bin(p, data, labels)
    p.write_bytes(p.read_bytes()[:-100])
    with pytest.raises(ValueError, match='not a whole number of 3073-byte records'): load_cifar10_binary(p)
    p.write_bytes(b'')
    with pytest.raises(ValueError, match='truncated or corrupt'): load_cifar10_binary(p)
    _write_bin(p, data, [1, 12, 2])
    with pytest.raises(ValueError, match='label 12 is outside 0..9'): load_cifar10_binary(p)

def test_missing_files_and_folders(tmp_path, cifar):
    py, _, _ = cifar
    with pytest.raises(FileNotFoundError, match='no such folder'): load_cifar10(tmp_path / 'nope')
    (py / 'data_batch_3').unlink()
    with pytest.raises(FileNotFoundError, match='must hold data_batch_1'): CIFAR10Dataset(py, train=True)
    assert len(CIFAR10Dataset(py, train=False)) == 2
    with pytest.raises(FileNotFoundError, match='no such file'): load_cifar10_pickle(tmp_path / 'nope')

@pytest.fixture
def ptb(tmp_path):
    d = tmp_path / 'ptb'; d.mkdir()
    (d / 'train.txt').write_text(' the cat sat on the mat \n the dog sat \n')
    (d / 'test.txt').write_text(' a cat \n the end \n')
    return d

def test_corpus_ids_follow_first_appearance_with_one_dictionary(ptb):
    c = Corpus(ptb)
    words = lambda ids: [c.dictionary.idx2word[i] for i in ids]
    assert words(c.train) == 'the cat sat on the mat <eos> the dog sat <eos>'.split()
    assert words(c.test) == 'a cat <eos> the end <eos>'.split()
    assert c.train[:3] == [0, 1, 2] and c.dictionary.word2idx['<eos>'] == 5 and len(c.dictionary) == 9
    assert c.valid is None
    short = Corpus(ptb, max_lines=1)
    assert short.train == c.train[:7] and [short.dictionary.idx2word[i] for i in short.test] == ['a', 'cat', '<eos>']
    (ptb / 'valid.txt').write_text('the zebra\n')
    assert Corpus(ptb).valid == [0, 9, 5]

def test_dictionary():
    d = Dictionary()
    assert [d.add_word(w) for w in 'b a b c'.split()] == [0, 1, 0, 2] and len(d) == 3 and d.idx2word == ['b', 'a', 'c']

def test_bad_corpus_files_raise(ptb):
    (ptb / 'test.txt').write_bytes(' ok line \n caf\xc3'.encode('latin-1'))   # a UTF-8 character cut in half
    with pytest.raises(ValueError, match=r'test.txt line 2 is not valid UTF-8.*corrupt or truncated'): Corpus(ptb)
    (ptb / 'test.txt').write_bytes(b'abc\x00\x01\x02\n')
    with pytest.raises(ValueError, match='line 1 has NUL bytes'): Corpus(ptb)
    (ptb / 'test.txt').unlink()
    with pytest.raises(FileNotFoundError, match='no such file .*test.txt'): Corpus(ptb)
    with pytest.raises(ValueError, match='max_lines must be a positive int'): Corpus(ptb, max_lines=0)
    with pytest.raises(FileNotFoundError, match='no such folder'): Corpus(ptb / 'nope')

# --- the restricted unpickler bounds what a file can make it allocate (reliability audit D1.2)

def _hexbomb(n):
    "A pickle of ~28 n bytes: `_codecs.encode` with 'hex' nested n times doubles 'ab' n times (2 ** (n + 1) bytes)."
    body = b'X\x02\x00\x00\x00abX\x06\x00\x00\x00latin1\x86R'
    body = b'c_codecs\nencode\n' + body
    for _ in range(n): body = b'c_codecs\nencode\n' + body + b'X\x03\x00\x00\x00hex\x86R'
    return b'\x80\x02' + body + b'.'

def test_codecs_encode_memory_bomb_refused_before_allocating(tmp_path):
    import tracemalloc
    p = tmp_path / 'bomb'; p.write_bytes(_hexbomb(24))            # 32 MB if it were evaluated
    assert len(p.read_bytes()) < 1000
    tracemalloc.start()
    try:
        with pytest.raises(CorruptFileError, match=r"refusing to call _codecs\.encode\(\.\.\., 'hex'\)"):
            load_cifar10_pickle(p)
        peak = tracemalloc.get_traced_memory()[1]
    finally: tracemalloc.stop()
    assert peak < 4_000_000, f'{peak} bytes allocated before the refusal'

def test_ndarray_is_not_callable_from_a_pickle(tmp_path):
    "numpy.ndarray((2**40,)) or _reconstruct of a huge empty array would ask for whatever shape the file names."
    direct = b'\x80\x02cnumpy\nndarray\nJ\x00\x00\x00\x40\x85\x85R.'                  # ndarray((2**30,))
    recon = (b'\x80\x02cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nJ\x00\x00\x00\x40\x85C\x01b'
             b'\x87R.')                                                               # _reconstruct(ndarray, (2**30,))
    for name, blob in (('direct', direct), ('recon', recon)):
        p = tmp_path / name; p.write_bytes(blob)
        with pytest.raises(CorruptFileError) as e: load_cifar10_pickle(p)
        assert str(p) in str(e.value)

def test_every_error_is_corrupt_file_error(tmp_path):
    rng = np.random.default_rng(1)
    p = tmp_path / 'b'; _write_pickle(p, *_batch(rng, 3))
    p.write_bytes(p.read_bytes()[:100])
    with pytest.raises(CorruptFileError, match='corrupt or truncated'): load_cifar10_pickle(p)
    q = tmp_path / 'q.bin'; q.write_bytes(b'\0' * 3000)
    with pytest.raises(CorruptFileError, match='not a whole number'): load_cifar10_binary(q)

@pytest.mark.parametrize('protocol', [2, 3, 4, 5])
def test_real_pickles_of_each_protocol_still_load(tmp_path, protocol):
    rng = np.random.default_rng(2)
    data, labels = _batch(rng, 5)
    p = tmp_path / 'b'; _write_pickle(p, data, labels, protocol=protocol)
    x, y = load_cifar10_pickle(p)
    assert np.array_equal(x.reshape(5, -1), data) and np.array_equal(y, labels)
