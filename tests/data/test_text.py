"""minima.text: the character tokenizer, needle's batchify/get_batch, TokenWindows with DataLoader, load_text."""
import numpy as np, pytest
import minima as mi
from minima.text import CharTokenizer, batchify, get_batch, TokenWindows, load_text, split_tokens

def test_tokenizer_round_trip_any_text():
    text = "To be, or not to be: ¿qué? — 生きるべきか 🎭\n\ttabs"
    tok = CharTokenizer.fit(text)
    ids = tok.encode(text)
    assert ids.dtype == np.int64 and len(ids) == len(text) and tok.vocab_size == len(set(text))
    assert tok.decode(ids) == text and tok.decode(list(ids)) == text and tok.decode(mi.Tensor(ids)) == text
    assert tok.itos == sorted(set(text))

def test_tokenizer_errors():
    tok = CharTokenizer.fit('abc')
    with pytest.raises(ValueError, match="character 'z' is not in the vocabulary"): tok.encode('abz')
    with pytest.raises(ValueError, match=r'ids must lie in \[0, 3\)'): tok.decode([0, 3])
    with pytest.raises(ValueError, match='1-d'): tok.decode(np.zeros((2, 2), dtype=int))
    with pytest.raises(TypeError, match='expected a str'): CharTokenizer.fit(b'bytes')
    with pytest.raises(ValueError, match='repeated'): CharTokenizer('aba')

def test_batchify_is_needles_layout():
    b = batchify(np.arange(26), 4, None, 'float32')
    assert b.shape == (6, 4) and b.dtype == np.float32
    assert b[:, 0].tolist() == list(range(6)) and b[0].tolist() == [0, 6, 12, 18]   # columns are contiguous slices
    assert batchify(list(range(10)), 3).tolist() == [[0, 3, 6], [1, 4, 7], [2, 5, 8]]
    with pytest.raises(ValueError, match='cannot fill'): batchify(np.arange(3), 4)
    with pytest.raises(ValueError, match='1-d'): batchify(np.zeros((2, 3)), 2)
    with pytest.raises(ValueError, match='positive integer'): batchify(np.arange(10), 0)

def test_get_batch():
    b = batchify(np.arange(26), 4)
    x, y = get_batch(b, 0, 2)
    assert x.shape == (2, 4) and y.shape == (8,) and x.dtype == 'int64' and not x.requires_grad
    assert x.numpy().tolist() == [[0, 6, 12, 18], [1, 7, 13, 19]] and y.numpy().tolist() == [1, 7, 13, 19, 2, 8, 14, 20]
    x, y = get_batch(b, 3, 5)                        # T = min(bptt, nbatch - 1 - i) = 2
    assert x.shape == (2, 4) and np.array_equal(y.numpy(), b[4:6].ravel())
    xf, _ = get_batch(batchify(np.arange(26), 4, None, 'float32'), 0, 2, dtype='float32')
    assert xf.dtype == 'float32' and not xf.requires_grad
    with pytest.raises(ValueError, match=r'i must be in \[0, 5\)'): get_batch(b, 5, 2)

def test_token_windows_with_dataloader():
    ids = np.arange(100) % 37
    ds = TokenWindows(ids, 8)
    assert len(ds) == 92
    x, y = ds[91]
    assert np.array_equal(x, ids[91:99]) and np.array_equal(y, ids[92:100])
    mi.init.manual_seed(0)
    batches = list(mi.data.DataLoader(ds, batch_size=16, shuffle=True))
    assert len(batches) == 6 and batches[0][0].shape == (16, 8) and batches[0][0].dtype == 'int64'
    xs = np.concatenate([b[0].numpy() for b in batches])
    assert sorted(map(tuple, xs)) == sorted(tuple(ds[i][0]) for i in range(len(ds)))   # every window exactly once
    for xb, yb in batches: assert np.array_equal(xb.numpy()[:, 1:], yb.numpy()[:, :-1])
    d2 = TokenWindows(ids, 10, stride=10)
    assert len(d2) == 9 and np.array_equal(d2[8][1], ids[81:91])
    with pytest.raises(IndexError): ds[92]
    with pytest.raises(ValueError, match='no window'): TokenWindows(np.arange(5), 5)

def test_load_text_and_split(tmp_path):
    p = tmp_path / 'c.txt'
    p.write_text('héllo\nworld', encoding='utf-8')
    assert load_text(p) == 'héllo\nworld'
    with pytest.raises(FileNotFoundError, match='no file'): load_text(tmp_path / 'missing.txt')
    tr, va = split_tokens(np.arange(100), 0.1)
    assert len(tr) == 90 and va[0] == 90
