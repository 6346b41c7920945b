"minima.data: loader semantics, transforms, digits, and the idx reader on files written here."
import gzip, struct, numpy as np, pytest
from minima import data, init

def test_dataloader_batches_shuffle_drop_last():
    X = np.arange(30, dtype='float32').reshape(10, 3); y = np.arange(10)
    ds = data.NDArrayDataset(X, y)
    bs = list(data.DataLoader(ds, batch_size=4))
    assert [b[0].shape for b in bs] == [(4, 3), (4, 3), (2, 3)] and bs[0][1].dtype == 'int64'
    assert all(not t.requires_grad for b in bs for t in b)
    assert [b[0].shape[0] for b in data.DataLoader(ds, 4, drop_last=True)] == [4, 4]
    init.manual_seed(7); a = [b[1].numpy() for b in data.DataLoader(ds, 3, shuffle=True)]
    init.manual_seed(7); b = [b[1].numpy() for b in data.DataLoader(ds, 3, shuffle=True)]
    assert all((u == v).all() for u, v in zip(a, b)) and sorted(np.concatenate(a)) == list(range(10))
    assert list(np.concatenate(a)) != list(range(10))

def test_collate_slow_path_matches_fast_path():
    X = np.random.default_rng(0).standard_normal((9, 2, 3)).astype('float32'); y = np.arange(9)
    fast = list(data.DataLoader(data.NDArrayDataset(X, y), 4))
    slow = list(data.DataLoader(data.NDArrayDataset(X, y), 4, collate_fn=data.default_collate))
    for (a, b), (c, d) in zip(fast, slow): assert np.array_equal(a.numpy(), c.numpy()) and np.array_equal(b.numpy(), d.numpy())

class Squares(data.Dataset):
    def __len__(self): return 5
    def __getitem__(self, i): return np.float32(i * i)

def test_custom_dataset_single_field():
    xb, = [b for b in data.DataLoader(Squares(), batch_size=5)]   # a Tensor, as torch's (not a 1-tuple)
    assert xb.numpy().tolist() == [0, 1, 4, 9, 16]

@pytest.mark.parametrize('bs', [0, -1, 2.5])   # None is torch's 'no batching', tested in test_torch_nn.py
def test_dataloader_bad_batch_size(bs):
    with pytest.raises(ValueError, match='batch_size must be a positive integer'): data.DataLoader(Squares(), batch_size=bs)

def test_transforms():
    img = np.arange(2 * 5 * 5, dtype='float32').reshape(2, 5, 5)
    assert np.array_equal(data.RandomFlipHorizontal(1.0)(img), img[:, :, ::-1])
    init.manual_seed(0)
    for _ in range(20):
        c = data.RandomCrop(2)(img)
        assert c.shape == img.shape
        # every crop is a shift: the nonzero block is a contiguous window of the original
        nz = np.argwhere(c[0] != 0)
        if len(nz): assert set(c[0][c[0] != 0]) <= set(img[0].ravel())
    assert np.array_equal(data.RandomCrop(0)(img), img)
    n = data.Normalize([1.0, 2.0], [2.0, 4.0])(img)
    assert np.allclose(n[1], (img[1] - 2) / 4) and n.dtype == np.float32
    with pytest.raises(ValueError): data.Normalize(0.0, 0.0)

def test_load_digits_and_split():
    X, y = data.load_digits()
    assert X.shape == (1797, 64) and X.dtype == np.float32 and y.dtype == np.int64 and 0 <= X.min() and X.max() <= 1
    Xi, _ = data.load_digits(images=True); assert Xi.shape == (1797, 1, 8, 8)
    a = data.train_test_split(X, y, test_size=0.2, seed=0); b = data.train_test_split(X, y, test_size=0.2, seed=0)
    assert a[0].shape == (1438, 64) and a[1].shape == (359, 64) and all(np.array_equal(u, v) for u, v in zip(a, b))

def test_load_digits_without_sklearn(monkeypatch):
    import builtins
    real = builtins.__import__
    def fake(name, *a, **k):
        if name.startswith('sklearn'): raise ImportError('no sklearn')
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, '__import__', fake)
    with pytest.raises(ImportError, match=r"needs scikit-learn.*minima-dl\[data\]"): data.load_digits()

def _idx(arr, magic):
    return struct.pack('>I', magic) + struct.pack(f'>{arr.ndim}I', *arr.shape) + arr.astype('>u1').tobytes()

@pytest.fixture
def mnist_files(tmp_path):
    rng = np.random.default_rng(0)
    imgs, labs = rng.integers(0, 256, (6, 28, 28)), rng.integers(0, 10, 6)
    (tmp_path / 'img.gz').write_bytes(gzip.compress(_idx(imgs, 0x803)))
    (tmp_path / 'img').write_bytes(_idx(imgs, 0x803))
    (tmp_path / 'lab.gz').write_bytes(gzip.compress(_idx(labs, 0x801)))
    (tmp_path / 'lab').write_bytes(_idx(labs, 0x801))
    return tmp_path, imgs, labs

def test_parse_mnist_raw_and_gz(mnist_files):
    d, imgs, labs = mnist_files
    for i, l in [('img.gz', 'lab.gz'), ('img', 'lab'), ('img', 'lab.gz')]:
        X, y = data.parse_mnist(d / i, d / l)
        assert X.shape == (6, 784) and X.dtype == np.float32 and y.dtype == np.uint8
        assert np.allclose(X * 255, imgs.reshape(6, -1)) and (y == labs).all()
    ds = data.MNISTDataset(d / 'img.gz', d / 'lab.gz')
    xb, yb = next(iter(data.DataLoader(ds, 4)))
    assert xb.shape == (4, 1, 28, 28) and yb.dtype == 'int64'

def test_idx_errors(mnist_files):
    d, imgs, labs = mnist_files
    raw = (d / 'img').read_bytes()
    (d / 'trunc').write_bytes(raw[:-1])
    with pytest.raises(ValueError, match=r'truncated: header says shape \(6, 28, 28\)'): data.read_idx(d / 'trunc')
    (d / 'long').write_bytes(raw + b'\0')
    with pytest.raises(ValueError, match='longer than its header says'): data.read_idx(d / 'long')
    (d / 'cutgz').write_bytes((d / 'img.gz').read_bytes()[:-8])
    with pytest.raises(ValueError, match='corrupt or truncated gzip'): data.read_idx(d / 'cutgz')
    (d / 'junk').write_bytes(b'PK\x03\x04hello world')
    with pytest.raises(ValueError, match='not an idx file'): data.read_idx(d / 'junk')
    (d / 'tiny').write_bytes(b'\0\0')
    with pytest.raises(ValueError, match='too short'): data.read_idx(d / 'tiny')
    (d / 'hdr').write_bytes(raw[:9])
    with pytest.raises(ValueError, match='truncated inside its header'): data.read_idx(d / 'hdr')
    with pytest.raises(ValueError, match='expected 0x00000803'): data.parse_mnist(d / 'lab', d / 'lab')
    (d / 'lab5').write_bytes(_idx(labs[:5], 0x801))
    with pytest.raises(ValueError, match='6 images but .* 5 labels'): data.parse_mnist(d / 'img', d / 'lab5')
    (d / 'lab99').write_bytes(_idx(np.full(6, 99), 0x801))
    with pytest.raises(ValueError, match='label 99'): data.parse_mnist(d / 'img', d / 'lab99')
    with pytest.raises(FileNotFoundError): data.read_idx(d / 'nope')
