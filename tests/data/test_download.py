"""minima.data downloads over loopback: mirrors, checksums, truncation, timeouts, atomic writes, MNIST, Shakespeare;
the one data folder (`data_dir`, $MINIMA_DATA) and the stand-in text offline."""
import gzip, hashlib, http.server, struct, threading, time
from pathlib import Path
import numpy as np, pytest
from minima import data

class Server:
    "A web server on 127.0.0.1 in a daemon thread, answering from `routes`: path -> (status, body, length, delay)."
    def __init__(self):
        self.routes, self.hits = {}, []
        outer = self
        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args): pass
            def do_GET(self):
                outer.hits.append(self.path)
                status, body, length, delay = outer.routes.get(self.path, (404, b'not found', None, 0))
                if delay: time.sleep(delay)
                self.send_response(status)
                self.send_header('Content-Length', str(len(body) if length is None else length))
                self.end_headers()
                try: self.wfile.write(body)
                except OSError: pass   # the client gave up (timeout test)
        self.httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), Handler)
        self.httpd.daemon_threads, self.httpd.block_on_close = True, False
        self.base = f'http://127.0.0.1:{self.httpd.server_port}'
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs=dict(poll_interval=0.05), daemon=True)
        self.watchdog = threading.Timer(120, self.httpd.shutdown)   # stops by itself if a test hangs
        self.watchdog.daemon = True
    def serve(self, path, body, status=200, length=None, delay=0):
        self.routes[path] = (status, body, length, delay)
        return self.base + path
    def __enter__(self): self.thread.start(); self.watchdog.start(); return self
    def __exit__(self, *exc):
        self.watchdog.cancel(); self.httpd.shutdown(); self.httpd.server_close(); self.thread.join(5)

@pytest.fixture(autouse=True)
def own_data_folder(tmp_path, monkeypatch):
    "No test here may read or write the user's real data folder, even when data_dir is broken."
    monkeypatch.setenv('HOME', str(tmp_path / 'home'))
    monkeypatch.setenv('MINIMA_DATA', str(tmp_path / 'minima_data'))

@pytest.fixture
def server():
    with Server() as s: yield s

def sha(b): return hashlib.sha256(b).hexdigest()
def md5(b): return hashlib.md5(b).hexdigest()
def leftovers(folder): return [p.name for p in Path(folder).iterdir() if p.name.endswith(('.part', '.minima-tmp'))]

BODY = b'To be, or not to be, that is the question.\n' * 3000   # 132 kB: several read blocks

def test_download_verifies_both_hashes_and_leaves_no_temp_file(server, tmp_path, capsys):
    url = server.serve('/a/file.txt', BODY)
    dest = data.download_url(url, tmp_path / 'sub' / 'file.txt', md5=md5(BODY), sha256=sha(BODY).upper())
    assert dest == tmp_path / 'sub' / 'file.txt' and dest.read_bytes() == BODY
    assert leftovers(dest.parent) == []
    assert 'file.txt: 0.1 MB, done' in capsys.readouterr().err   # progress goes to stderr
    assert data.file_hash(dest) == sha(BODY) and data.file_hash(dest, 'md5') == md5(BODY)

def test_mirror_fallback_first_404_second_works(server, tmp_path):
    urls = [server.base + '/gone/file.txt', server.serve('/m2/file.txt', BODY)]
    dest = data.download_url(urls, tmp_path / 'file.txt', sha256=sha(BODY), progress=False)
    assert dest.read_bytes() == BODY and server.hits == ['/gone/file.txt', '/m2/file.txt']

def test_checksum_mismatch_is_an_error_and_keeps_nothing(server, tmp_path):
    url = server.serve('/file.txt', BODY[:-1] + b'?')
    dest = tmp_path / 'file.txt'
    with pytest.raises(data.DownloadError, match=f'sha256 mismatch: expected {sha(BODY)}, got') as e:
        data.download_url(url, dest, sha256=sha(BODY), progress=False)
    assert url in str(e.value) and 'nothing was written' in str(e.value)
    assert not dest.exists() and leftovers(tmp_path) == []

def test_failed_download_never_replaces_an_existing_file(server, tmp_path):
    dest = tmp_path / 'file.txt'; dest.write_bytes(b'old contents')
    url = server.serve('/file.txt', b'corrupt')
    with pytest.raises(data.DownloadError): data.download_url(url, dest, md5=md5(BODY), progress=False)
    assert dest.read_bytes() == b'old contents' and leftovers(tmp_path) == []

def test_truncated_transfer_is_an_error(server, tmp_path):
    url = server.serve('/file.txt', BODY[:50_000], length=len(BODY))   # announces more than it sends
    dest = tmp_path / 'file.txt'
    with pytest.raises(data.DownloadError, match=f'truncated: the server announced {len(BODY)} bytes but sent 50000'):
        data.download_url(url, dest, progress=False)    # no checksum given: the size check alone catches it
    assert not dest.exists() and leftovers(tmp_path) == []

def test_timeout_then_next_mirror(server, tmp_path):
    slow = server.serve('/slow/file.txt', BODY, delay=1.5)
    good = server.serve('/fast/file.txt', BODY)
    t0 = time.perf_counter()
    dest = data.download_url([slow, good], tmp_path / 'file.txt', sha256=sha(BODY), timeout=0.3, progress=False)
    assert dest.read_bytes() == BODY and time.perf_counter() - t0 < 1.4
    with pytest.raises(data.DownloadError, match='timed out'):
        data.download_url(slow, tmp_path / 'other.txt', timeout=0.3, progress=False)

def test_every_failure_is_reported(server, tmp_path):
    urls = [server.base + '/x', server.serve('/bad', b'junk'), server.serve('/cut', b'ab', length=10)]
    with pytest.raises(data.DownloadError) as e:
        data.download_url(urls, tmp_path / 'f', md5=md5(BODY), progress=False)
    msg = str(e.value)
    assert 'HTTP 404' in msg and 'md5 mismatch' in msg and 'truncated' in msg and msg.count(server.base) == 3

def test_no_urls_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match='no URLs'): data.download_url([], tmp_path / 'f')

def idx_bytes(arr, magic):
    return gzip.compress(struct.pack('>I', magic) + struct.pack(f'>{arr.ndim}I', *arr.shape) + arr.astype('>u1').tobytes())

@pytest.fixture
def fake_mnist(server, monkeypatch):
    "Small idx files served as MNIST's test split from a second mirror; MNIST.md5 patched to their checksums."
    rng = np.random.default_rng(0)
    imgs, labels = rng.integers(0, 256, (6, 28, 28)), rng.integers(0, 10, 6)
    files = {'t10k-images-idx3-ubyte.gz': idx_bytes(imgs, 0x803), 't10k-labels-idx1-ubyte.gz': idx_bytes(labels, 0x801)}
    for name, b in files.items(): server.serve('/mirror2/' + name, b)
    monkeypatch.setattr(data.MNIST, 'md5', {**data.MNIST.md5, **{k: md5(b) for k, b in files.items()}})
    return imgs, labels, [server.base + '/mirror1/', server.base + '/mirror2']

def test_mnist_download_with_mirror_fallback(fake_mnist, tmp_path, server):
    imgs, labels, mirrors = fake_mnist
    ds = data.MNIST(tmp_path / 'mnist', train=False, download=True, mirrors=mirrors)
    assert len(ds) == 6 and ds[0][0].shape == (1, 28, 28) and ds.images.dtype == np.float32
    assert np.allclose(ds.images[:, 0] * 255, imgs) and (ds.labels == labels).all()
    assert sorted(p.name for p in (tmp_path / 'mnist').iterdir()) == ['t10k-images-idx3-ubyte.gz',
                                                                     't10k-labels-idx1-ubyte.gz']
    n = len(server.hits)
    data.MNIST(tmp_path / 'mnist', train=False, download=True, mirrors=mirrors)   # present: no new request
    assert len(server.hits) == n

def test_mnist_mirrors_class_attribute_is_used(fake_mnist, tmp_path, monkeypatch):
    monkeypatch.setattr(data.MNIST, 'mirrors', fake_mnist[2])
    assert len(data.MNIST(tmp_path, train=False, download=True)) == 6

def test_mnist_corrupt_download_against_published_md5(server, tmp_path):
    server.serve('/m/train-images-idx3-ubyte.gz', idx_bytes(np.zeros((2, 28, 28)), 0x803))
    with pytest.raises(data.DownloadError, match='md5 mismatch: expected f68b3c2dcbeaaa9fbdd348bbdeb94873'):
        data.MNIST(tmp_path, train=True, download=True, mirrors=[server.base + '/m/'])
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(FileNotFoundError, match='pass download=True'): data.MNIST(tmp_path, train=True)

def test_mnist_published_checksums_and_default_mirrors():
    assert data.MNIST.md5['t10k-labels-idx1-ubyte.gz'] == 'ec29112dd5afa0611ce80d1b7f02629c'
    assert data.MNIST.mirrors[0] == 'https://ossci-datasets.s3.amazonaws.com/mnist/' and len(data.MNIST.mirrors) >= 2

def test_tiny_shakespeare_download_and_corruption(server, tmp_path, monkeypatch):
    text = 'First Citizen:\nBefore we proceed any further, hear me speak.\n'
    url = server.serve('/input.txt', text.encode())
    with pytest.raises(data.DownloadError, match=f'sha256 mismatch: expected {data.TINY_SHAKESPEARE_SHA256}'):
        data.tiny_shakespeare(tmp_path / 'a', download=True, urls=[url])
    assert not (tmp_path / 'a' / 'input.txt').exists()
    with pytest.raises(FileNotFoundError, match='pass download=True'): data.tiny_shakespeare(tmp_path / 'a')
    monkeypatch.setattr(data, 'TINY_SHAKESPEARE_SHA256', sha(text.encode()))
    assert data.tiny_shakespeare(tmp_path / 'b', download=True, urls=[server.base + '/404', url]) == text

SHAKESPEARE = data.data_dir('tinyshakespeare', 'input.txt')   # tools/test sets MINIMA_DATA (README)

@pytest.mark.skipif(not SHAKESPEARE.exists(), reason=f'no tiny-Shakespeare file at {SHAKESPEARE} (set MINIMA_DATA)')
def test_tiny_shakespeare_real_file_over_loopback(server, tmp_path):
    url = server.serve('/karpathy/input.txt', SHAKESPEARE.read_bytes())
    text = data.tiny_shakespeare(tmp_path, download=True, urls=[url])
    assert len(text) == 1_115_394 and len(set(text)) == 65 and text.startswith('First Citizen:\n')


# --- the one data folder: data_dir() and $MINIMA_DATA

def test_data_dir_reads_MINIMA_DATA(tmp_path, monkeypatch):
    monkeypatch.setenv('MINIMA_DATA', str(tmp_path / 'd'))
    assert data.data_dir() == tmp_path / 'd'
    assert data.data_dir('mnist') == tmp_path / 'd' / 'mnist'
    assert data.data_dir('tinyshakespeare', 'input.txt') == tmp_path / 'd' / 'tinyshakespeare' / 'input.txt'
    assert not (tmp_path / 'd').exists()                   # naming the folder creates nothing

def test_data_dir_default_is_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv('HOME', str(tmp_path))
    for unset in (lambda: monkeypatch.delenv('MINIMA_DATA', raising=False), lambda: monkeypatch.setenv('MINIMA_DATA', '')):
        unset()
        assert data.data_dir() == tmp_path / '.cache' / 'minima' / 'data'
        assert data.data_dir('mnist') == tmp_path / '.cache' / 'minima' / 'data' / 'mnist'
    monkeypatch.setenv('MINIMA_DATA', '~/elsewhere')      # a ~ in the variable is the home folder
    assert data.data_dir() == tmp_path / 'elsewhere'

def test_mnist_without_root_downloads_into_data_dir(fake_mnist, tmp_path, monkeypatch):
    imgs, labels, mirrors = fake_mnist
    monkeypatch.setenv('MINIMA_DATA', str(tmp_path))
    ds = data.MNIST(train=False, download=True, mirrors=mirrors)
    assert ds.root == tmp_path / 'mnist' and (ds.labels == labels).all()
    assert sorted(p.name for p in (tmp_path / 'mnist').iterdir()) == ['t10k-images-idx3-ubyte.gz',
                                                                     't10k-labels-idx1-ubyte.gz']
    assert len(data.MNIST(train=False)) == 6              # found there the next time, no download asked for
    monkeypatch.setenv('MINIMA_DATA', str(tmp_path / 'empty'))
    with pytest.raises(FileNotFoundError, match='empty/mnist; pass download=True'): data.MNIST(train=False)

def test_tiny_shakespeare_without_root_uses_data_dir(server, tmp_path, monkeypatch):
    text = 'First Citizen:\nBefore we proceed any further, hear me speak.\n'
    url = server.serve('/input.txt', text.encode())
    monkeypatch.setattr(data, 'TINY_SHAKESPEARE_SHA256', sha(text.encode()))
    monkeypatch.setattr(data, 'TINY_SHAKESPEARE_URLS', [url])
    monkeypatch.setenv('MINIMA_DATA', str(tmp_path))
    assert data.tiny_shakespeare(download=True) == text
    assert (tmp_path / 'tinyshakespeare' / 'input.txt').read_text() == text
    n = len(server.hits)
    assert data.tiny_shakespeare() == text and len(server.hits) == n   # read from disk

def test_stand_in_offline_says_so(server, tmp_path, monkeypatch, capsys):
    "No copy and no network (every URL fails): the stand-in text, False, and a banner on stderr."
    monkeypatch.setenv('MINIMA_DATA', str(tmp_path))
    monkeypatch.setattr(data, 'TINY_SHAKESPEARE_URLS', [server.base + '/404'])
    text, real = data.tiny_shakespeare_or_stand_in(repeat=3)
    assert not real and text == data.STAND_IN_TEXT * 3
    out = capsys.readouterr()
    assert out.out == ''
    assert 'STAND-IN TEXT' in out.err and 'NOT meaningful' in out.err and 'repeated 3 times instead' in out.err
    assert str(tmp_path / 'tinyshakespeare') in out.err and 'HTTP 404' in out.err and 'MINIMA_DATA' in out.err
    assert list((tmp_path / 'tinyshakespeare').iterdir()) == []      # nothing written

def test_stand_in_refuses_a_corrupt_download(server, tmp_path, monkeypatch, capsys):
    "A download whose checksum is wrong is not the corpus: the stand-in is used and the bad file is not kept."
    monkeypatch.setattr(data, 'TINY_SHAKESPEARE_URLS', [server.serve('/input.txt', b'<html>a proxy error page</html>')])
    text, real = data.tiny_shakespeare_or_stand_in(tmp_path / 'ts')
    assert not real and text == data.STAND_IN_TEXT * 200 and 'sha256 mismatch' in capsys.readouterr().err
    assert list((tmp_path / 'ts').iterdir()) == []

def test_stand_in_not_used_when_the_corpus_is_there(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv('MINIMA_DATA', str(tmp_path))
    monkeypatch.setattr(data, 'TINY_SHAKESPEARE_URLS', ['http://127.0.0.1:9/never-asked'])
    (tmp_path / 'tinyshakespeare').mkdir()
    (tmp_path / 'tinyshakespeare' / 'input.txt').write_text('First Citizen:\n')
    monkeypatch.setattr(data, 'TINY_SHAKESPEARE_SHA256', sha(b'First Citizen:\n'))   # the file is checked on use
    assert data.tiny_shakespeare_or_stand_in() == ('First Citizen:\n', True)
    assert capsys.readouterr().err == ''

def test_stand_in_when_the_data_folder_cannot_be_made(tmp_path, monkeypatch, capsys):
    "A data folder that cannot be created (here a file is in the way) is an OSError: the stand-in, with the banner."
    monkeypatch.setattr(data, 'TINY_SHAKESPEARE_URLS', ['http://127.0.0.1:9/never-asked'])
    (tmp_path / 'afile').write_text('not a folder')
    text, real = data.tiny_shakespeare_or_stand_in(tmp_path / 'afile', repeat=1)
    assert (text, real) == (data.STAND_IN_TEXT, False) and 'STAND-IN TEXT' in capsys.readouterr().err
