"Every minima save is atomic: a kill, a crash or a full disk mid-save leaves the old file or the new one, whole."
import os, random, resource, signal, time
import numpy as np, pytest
import minima as mi
from minima import nn

def _state(k, n=200_000): return {'w': mi.tensor(np.full(n, k, 'float32')), 'k': k}

def _whole(path):
    "The `k` of the complete file at `path` (a partial file fails to load or disagrees with itself)."
    d = mi.load(path)
    w = d['w'].numpy()
    assert w.shape == (200_000,) and (w == d['k']).all()
    return d['k']

def _temporaries(folder): return [f for f in os.listdir(folder) if f.endswith('.minima-tmp')]

def _kill_during(save, path, delay):
    "Fork a child that runs `save()` in a loop; SIGKILL it after `delay` s; reap it (a dead writer, not a zombie)."
    pid = os.fork()
    if pid == 0:
        try:
            while True: save()
        finally: os._exit(0)
    time.sleep(delay)
    os.kill(pid, signal.SIGKILL); os.waitpid(pid, 0)

@pytest.mark.parametrize('saver', ['minima.save', 'Module.save'])
def test_kill_at_random_points_leaves_old_or_new_file(tmp_path, saver):
    "60 SIGKILLs at random moments of a save: the file at `path` always loads whole; the next save removes litter."
    rng = random.Random(0)
    path = str(tmp_path / 'ck.npz')
    if saver == 'minima.save':
        save = lambda k: mi.save(_state(k), path)
        check = _whole
    else:
        lin = nn.Linear(400, 500)
        def save(k): lin.weight.data = mi.tensor(np.full((500, 400), k, 'float32')); lin.save(path)
        def check(p):
            w = np.load(p)['weight']; assert w.shape == (500, 400) and (w == w.flat[0]).all(); return w.flat[0]
    save(0); assert check(path) == 0
    t = time.perf_counter(); save(0); one = time.perf_counter() - t
    seen, litter = set(), 0
    for trial in range(1, 61):
        _kill_during(lambda: save(trial), path, rng.uniform(0, 3 * one))
        seen.add(check(path) == trial)
        litter += len(_temporaries(tmp_path))
    assert litter > 0 or len(seen) == 2                   # the kills did land inside saves
    save(99)                                              # the next save cleans up what killed saves left
    assert check(path) == 99 and _temporaries(tmp_path) == []

def test_full_disk_keeps_old_file(tmp_path):
    "A save that runs out of space (RLIMIT_FSIZE stands in for a full disk) raises and leaves the old file whole."
    path = str(tmp_path / 'ck.npz')
    mi.save(_state(1), path)
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))
        try: mi.save(_state(2), path); os._exit(3)
        except OSError: os._exit(0 if not _temporaries(tmp_path) else 4)
        except BaseException: os._exit(5)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert _whole(path) == 1 and _temporaries(tmp_path) == []

def test_failed_save_removes_its_temporary_and_keeps_old_file(tmp_path):
    path = str(tmp_path / 'ck.npz')
    mi.save(_state(1), path)
    with pytest.raises(TypeError, match='cannot save'): mi.save({'w': _state(2)['w'], 'f': print}, path)
    assert _whole(path) == 1 and _temporaries(tmp_path) == []

def test_saved_file_mode_follows_umask(tmp_path):
    "A new file gets 0666 less the umask, as open() would (a temporary's 0600 would lock out a group)."
    old = os.umask(0o022)
    try:
        mi.save(_state(1), str(tmp_path / 'a.npz')); nn.Linear(2, 2).save(str(tmp_path / 'b.npz'))
    finally: os.umask(old)
    assert {oct(os.stat(tmp_path / f).st_mode & 0o777) for f in ('a.npz', 'b.npz')} == {'0o644'}
