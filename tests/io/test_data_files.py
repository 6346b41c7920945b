"Data files: idx inflation bounded by the header (audit D1.3), files checked against known checksums on use (D1.5)."
import gzip, hashlib, os, struct, tracemalloc
import numpy as np, pytest
from minima import data
from minima.serialization import CorruptFileError

def _peak(fn):
    "Peak bytes Python allocated while `fn()` ran (the exception it raised, if any, is returned)."
    tracemalloc.start()
    try:
        try: fn(); err = None
        except Exception as e: err = e
        return tracemalloc.get_traced_memory()[1], err
    finally: tracemalloc.stop()

def test_gzipped_idx_inflates_no_further_than_its_header(tmp_path):
    "A ~100 KB .gz whose header says 1,584 bytes but that inflates to 100 MB: refused after reading ~1.6 KB."
    p = tmp_path / 'bomb.gz'
    p.write_bytes(gzip.compress(struct.pack('>IIII', 0x803, 1, 36, 44) + bytes(100_000_000), 1))
    assert os.path.getsize(p) < 1_000_000
    peak, err = _peak(lambda: data.read_idx(p))
    assert isinstance(err, CorruptFileError) and 'longer than its header says' in str(err) and str(p) in str(err)
    assert peak < 5_000_000, f'{peak} bytes allocated'

def test_idx_header_promising_more_than_the_file_can_hold(tmp_path):
    "A raw file's header must fit the file; a gzip's may not exceed MAX_INFLATE_RATIO times it: refused up front."
    raw = tmp_path / 'raw'; raw.write_bytes(struct.pack('>IIII', 0x803, 60000, 2 ** 16, 2 ** 16))
    peak, err = _peak(lambda: data.read_idx(raw))
    assert isinstance(err, CorruptFileError) and 'truncated' in str(err) and peak < 1_000_000
    gz = tmp_path / 'big.gz'; gz.write_bytes(gzip.compress(struct.pack('>IIII', 0x803, 10 ** 6, 28, 28)))
    peak, err = _peak(lambda: data.read_idx(gz))
    assert isinstance(err, CorruptFileError) and 'MAX_INFLATE_RATIO' in str(err) and peak < 1_000_000

def _idx_gz(arr, magic):
    return gzip.compress(struct.pack('>I', magic) + struct.pack(f'>{arr.ndim}I', *arr.shape) + arr.astype('>u1').tobytes())

def test_tampered_mnist_on_disk_is_refused(tmp_path):
    "Two images in place of the test set: the published md5 (and the known content) do not match."
    (tmp_path / 't10k-images-idx3-ubyte.gz').write_bytes(_idx_gz(np.zeros((2, 28, 28)), 0x803))
    (tmp_path / 't10k-labels-idx1-ubyte.gz').write_bytes(_idx_gz(np.zeros(2), 0x801))
    with pytest.raises(CorruptFileError, match='md5 is .*expected 9fb629c4189551a2d022fa330f9573f3.*'
                                               'gunzipped sha256 is .*download it again'):
        data.MNIST(tmp_path, train=False)

def test_tampered_shakespeare_on_disk_is_refused(tmp_path):
    (tmp_path / 'input.txt').write_text('tampered text')
    with pytest.raises(CorruptFileError, match=f'sha256 is .*expected {data.TINY_SHAKESPEARE_SHA256}'):
        data.tiny_shakespeare(tmp_path)

def test_verification_is_cached_by_size_and_mtime(tmp_path, monkeypatch):
    p = tmp_path / 'f.bin'; p.write_bytes(b'hello')
    h = hashlib.sha256(b'hello').hexdigest()
    calls = []
    real = data.file_hash
    monkeypatch.setattr(data, 'file_hash', lambda *a: calls.append(a) or real(*a))
    data.verify_file(p, sha256=h); data.verify_file(p, sha256=h)
    assert len(calls) == 1                                    # the second use costs a stat, no hashing
    p.write_bytes(b'hellO')                                   # same size, new content and mtime
    os.utime(p, ns=(os.stat(p).st_atime_ns, os.stat(p).st_mtime_ns + 10 ** 9))
    with pytest.raises(CorruptFileError, match='sha256 is'): data.verify_file(p, sha256=h)
    assert len(calls) == 2

MNIST_DIR = data.data_dir('mnist')
@pytest.mark.skipif(not (MNIST_DIR / 't10k-images-idx3-ubyte.gz').exists(), reason='no MNIST test files')
def test_real_recompressed_mnist_copy_passes_by_content():
    ds = data.MNIST(MNIST_DIR, train=False)
    assert len(ds) == 10_000

def test_download_removes_what_a_killed_download_left(tmp_path):
    "A download killed mid-way leaves its temporary; the next download of that file removes it (audit D3.3's pattern)."
    pid = os.fork()
    if pid == 0: os._exit(0)
    os.waitpid(pid, 0)                                       # a process that has ended
    stale = tmp_path / f'.input.txt.{pid}.abcd1234.minima-tmp'
    stale.write_bytes(b'half a download')
    with pytest.raises(data.DownloadError): data.download_url('http://127.0.0.1:9/nothing', tmp_path / 'input.txt',
                                                              timeout=2, progress=False)
    assert os.listdir(tmp_path) == []
