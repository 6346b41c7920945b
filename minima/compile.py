"""Capture a whole training step at the device-primitive level, plan its memory, fuse it, and replay it."""

from __future__ import annotations
import functools, hashlib, importlib.util, linecache, os, sys
import numpy as np
from fastcore.basics import patch
from .backend_ndarray.device import NumpyDevice
from .backend_ndarray import device as _devmod
from .backend_ndarray.ndarray import NDArray
from .autograd import Value, Tensor, is_grad_enabled

__all__ = ['CaptureError', 'Buf', 'Instr', 'Recorder', 'capture', 'Program', 'Compiled', 'compile', 'cache_dir']

# %% the primitives
PRIMS = {  # name: (positions of the handle arguments, of those written, of those whose old value is read)
    'fill': ((0,), (0,), ()),
    'from_numpy': ((1,), (1,), ()),
    'compact': ((0, 1), (1,), (0,)),
    'ewise_setitem': ((0, 1), (1,), (0, 1)),
    'scalar_setitem': ((2,), (2,), (2,)),
    'ewise': ((1, 2, 3), (3,), (1, 2)),
    'scalar': ((1, 3), (3,), (1,)),
    'unary': ((1, 2), (2,), (1,)),
    'where': ((0, 1, 2, 3), (3,), (0, 1, 2)),
    'cast': ((0, 1), (1,), (0,)),
    'reduce_sum': ((0, 1), (1,), (0,)),
    'reduce_max': ((0, 1), (1,), (0,)),
    'matmul': ((0, 1, 2), (2,), (0, 1)),
    'gather': ((0, 1, 2), (2,), (0, 1)),
    'scatter_add': ((0, 1, 2), (2,), (0, 1, 2)),
    'ewise_strided': ((1, 4, 7), (7,), (1, 4)),
    'matmul_strided': ((0, 3, 6), (6,), (0, 3)),
    'reduce_strided': ((1, 5), (5,), (1,)),
}

class CaptureError(RuntimeError):
    "Something in the captured function cannot become part of a compiled program."

_PKG = os.path.dirname(os.path.abspath(__file__)) + os.sep
_ARRAY_FILES = tuple(os.path.join(_PKG, f) for f in ('backend_ndarray', 'autograd.py'))   # .item(), .numpy(), ...

def _user_frame(skip=2):
    "The innermost frame outside the minima package (the user's line), or None."
    f = sys._getframe(skip)
    while f is not None and f.f_code.co_filename.startswith(_PKG): f = f.f_back
    return f

def _line(f) -> str:
    if f is None: return '?'
    code = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
    return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno} `{code}`"

def _origin() -> str:
    "The library function that called the device (an op's compute, a module, the optimizer), as `file:line name`."
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename.startswith(_ARRAY_FILES + (__file__,)): f = f.f_back
    if f is None: return '?'
    return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno} {f.f_code.co_name}"

# %% the IR
class Buf:
    "A buffer of the program: `size` elements of `dtype`; `kind` says where its storage comes from."
    __slots__ = ('n', 'size', 'dtype', 'kind', 'handle', 'src', 'value')
    def __init__(self, n, size, dtype, kind, handle=None):
        self.n, self.size, self.dtype, self.kind, self.handle = n, size, dtype, kind, handle
        self.src = self.value = None
    def __repr__(self): return f'%{self.n}'

class Instr:
    "One device primitive with its arguments (handles replaced by `Buf`s) and the user's line that caused it."
    __slots__ = ('prim', 'args', 'where', 'random', 'origin')
    def __init__(self, prim, args, where='', random=None, origin=''):
        self.prim, self.args, self.where, self.random, self.origin = prim, tuple(args), where, random, origin
    def writes(self): return [self.args[i] for i in PRIMS[self.prim][1]] if self.prim in PRIMS else list(self.args[3])
    def reads(self): return [self.args[i] for i in PRIMS[self.prim][2]] if self.prim in PRIMS else list(self.args[2])
    def statics(self):
        "The non-buffer arguments (what must match between two captures)."
        if self.prim not in PRIMS: return ()
        hp = PRIMS[self.prim][0]
        return tuple(_frozen(a) for i, a in enumerate(self.args) if i not in hp)
    def __repr__(self):
        if self.prim == 'fused':
            k, shape, ins, outs, spec = self.args
            sc = [_short(v) for t, v in spec if t == 'scalar']
            return f"{', '.join(map(repr, outs))} = {k.name}{tuple(shape)}({', '.join(map(repr, ins + sc))})"
        hp, wp = PRIMS[self.prim][:2]
        outs = [repr(self.args[i]) for i in wp]
        rest = [repr(a) if i in hp else _short(a) for i, a in enumerate(self.args) if i not in wp]
        if self.random is not None: rest = ['random']
        return f"{', '.join(outs)} = {self.prim}({', '.join(rest)})"

def _short(a):
    if isinstance(a, np.ndarray): return f'array{a.shape}' if a.size > 4 else repr(a.tolist())
    if isinstance(a, float): return f'{a:.6g}'
    return repr(a)

def _frozen(a):
    if isinstance(a, np.ndarray): return ('arr', a.shape, a.dtype.str, a.tobytes())
    if isinstance(a, np.generic): return a.item()
    return a

# %% capture
class Recorder:
    """A recording device: while active, every primitive called on `device` runs as usual and is appended to
    `instrs`; allocations are remembered, and reading a value back (`to_numpy`) is a `CaptureError`."""
    def __init__(self, device):
        self.device, self.instrs, self.bufs, self.keep, self.depth = device, [], {}, [], 0
        self.random_arrays, self.random_handles, self.assumptions = {}, {}, []

    def buf(self, h, kind='extern'):
        b = self.bufs.get(id(h))
        if b is None:
            b = self.bufs[id(h)] = Buf(len(self.bufs), self.device.handle_size(h), self.device.handle_dtype(h), kind, h)
            self.keep.append(h)
        return b

    def _wrap(self, name):
        real = getattr(type(self.device), name).__get__(self.device)
        hpos = PRIMS[name][0]
        def prim(*args):
            if self.depth: return real(*args)   # a primitive composed from others is recorded once, as itself
            self.depth += 1
            try: real(*args)
            finally: self.depth -= 1
            a = list(args)
            for p in hpos: a[p] = self.buf(args[p])
            rnd = None
            if name == 'from_numpy':
                rnd = self.random_arrays.get(id(args[0]))
                a[0] = None if rnd else np.array(args[0], copy=True)
            self.instrs.append(Instr(name, a, _line(_user_frame()), rnd, _origin()))
        return prim

    def _alloc(self, size, dtype):
        h = type(self.device).alloc(self.device, size, dtype)
        if not self.depth: self.buf(h, 'temp')
        return h

    def _read(self, *args):
        f = sys._getframe(1)
        while f is not None and f.f_code.co_filename.startswith(_ARRAY_FILES): f = f.f_back
        if self.depth or (f is not None and f.f_code.co_filename.startswith(_PKG)):
            # minima itself checks a value (a label range, NaN in a pooling window, ignore_index present): the
            # program assumes the same answer on every replay; the assumption is listed with the program
            if not self.depth: self.assumptions.append(_line(f) + ' in ' + f.f_code.co_name)
            return type(self.device).to_numpy(self.device, *args)
        raise CaptureError(
            f"compile: the function reads a tensor's value during capture (.item(), .numpy(), bool(t), float(t) or "
            f"a Python branch on data) at {_line(_user_frame())}. A compiled program cannot depend on data it reads "
            f"back: move that line out of the compiled function (return the tensor and read it outside).")

    def __enter__(self):
        d = self.device
        for name in PRIMS: setattr(d, name, self._wrap(name))
        d.alloc, d.to_numpy = self._alloc, self._read
        return self
    def __exit__(self, *exc):
        for name in list(PRIMS) + ['alloc', 'to_numpy']: self.device.__dict__.pop(name, None)

# Randomness enters through a few functions that draw on the host and copy to the device. While capturing we wrap
# them: the draw still happens, and the recorder learns which `from_numpy` copies random numbers, and how to draw
# them again, so that a replay draws fresh numbers from the same generator, in the same order as eager code.
def _random_sources():
    from . import init
    from .ops import nn_ops
    return [(init, 'rand', 'tensor'), (init, 'randn', 'tensor'), (init, 'randb', 'tensor'),
            (nn_ops, '_keep_mask', 'array')]

class _Tracked:
    "A slot descriptor (`Value.cached_data`, `Tensor.grad`) that logs each reassignment of an existing object's slot."
    def __init__(self, md, attr, log, created):
        self.md, self.attr, self.log, self.created = md, attr, log, created
    def __get__(self, o, t=None): return self if o is None else self.md.__get__(o, t)
    def __set__(self, o, v):
        try: old = self.md.__get__(o)
        except AttributeError:   # the first value of an object made during capture
            if self.attr == 'cached_data': self.created[id(o)] = o
            return self.md.__set__(o, v)
        self.log.setdefault((id(o), self.attr), (o, self.attr, old))
        self.md.__set__(o, v)

def _leaves(x, out):
    "The Tensors (and NDArrays) in a nest of tuples, lists and dicts."
    if isinstance(x, (Tensor, NDArray)): out.append(x)
    elif isinstance(x, (tuple, list)):
        for y in x: _leaves(y, out)
    elif isinstance(x, dict):
        for y in x.values(): _leaves(y, out)
    return out

def _eq_state(a, b):
    if isinstance(a, dict): return a.keys() == b.keys() and all(_eq_state(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray): return np.array_equal(a, b)
    return a == b

class Capture:
    "What one capture saw: the instructions, the buffers, the state that changed, the modules and the result."
    def __init__(self, rec, writes, created, modules, args, result):
        self.instrs, self.bufs, self.rec = rec.instrs, rec.bufs, rec
        self.writes = [w for k, w in writes.items() if k[0] not in created]
        self.modules, self.args, self.result = modules, args, result

def capture(fn, args, kwargs, device):
    "Run `fn(*args, **kwargs)` once on a recording device; returns a `Capture`."
    from .nn.modules import Module
    rec, writes, created, modules = Recorder(device), {}, {}, {}
    cd, gr = Value.__dict__['cached_data'], Tensor.__dict__['grad']
    srcs, saved = _random_sources(), []
    mod_call = Module.__call__
    def call(m, *a, **k):
        modules.setdefault(id(m), m)
        return mod_call(m, *a, **k)
    def wrap_random(orig, kind):
        def f(*a, **k):
            r = orig(*a, **k)
            if kind == 'array': rec.random_arrays[id(r)] = (orig, a, k, kind); rec.keep.append(r)
            else: rec.random_handles[id(r.cached_data._handle)] = (orig, a, k, kind)
            return r
        return f
    bg = np.random.get_bit_generator()
    state0 = bg.state
    try:
        for mod, name, kind in srcs:
            saved.append((mod, name, getattr(mod, name)))
            setattr(mod, name, wrap_random(getattr(mod, name), kind))
        Value.cached_data, Tensor.grad = _Tracked(cd, 'cached_data', writes, created), _Tracked(gr, 'grad', writes, created)
        Module.__call__ = call
        for a in _leaves((args, kwargs), []):
            d = a.cached_data if isinstance(a, Tensor) else a
            rec.buf(d._handle)
        with rec: result = fn(*args, **kwargs)
    finally:
        Value.cached_data, Tensor.grad, Module.__call__ = cd, gr, mod_call
        for mod, name, f in saved: setattr(mod, name, f)
    for ins in rec.instrs:   # a random tensor from init.*: its from_numpy wrote the handle it returned
        if ins.prim == 'from_numpy' and id(ins.args[1].handle) in rec.random_handles:
            ins.random, ins.args = rec.random_handles[id(ins.args[1].handle)], (None, ins.args[1])
    n_random = sum(i.random is not None for i in rec.instrs)
    if not n_random and not _eq_state(bg.state, state0):
        raise CaptureError("compile: the function drew random numbers through a path the tracer does not know "
                           "(only minima.init.rand/randn/randb and dropout are captured); a replay would reuse the "
                           "same numbers. Draw them outside and pass them in as an argument.")
    return Capture(rec, writes, created, modules, (args, kwargs), result)

# %% fusion: chains of elementwise primitives become one generated kernel
_EW = dict(add='({} + {})', sub='({} - {})', mul='({} * {})', div='({} / {})', pow='np.power({}, {})',
           maximum='np.maximum({}, {})', minimum='np.minimum({}, {})', eq='({} == {})', ne='({} != {})',
           lt='({} < {})', le='({} <= {})', gt='({} > {})', ge='({} >= {})')
_REFLECT = dict(rsub='({1} - {0})', rdiv='({1} / {0})', rpow='np.power({1}, {0})')
_UN = dict(neg='(-{})', exp='np.exp({})', log='np.log({})', sqrt='np.sqrt({})', sin='np.sin({})', cos='np.cos({})',
           tanh='np.tanh({})', abs='np.abs({})', sign='np.sign({})')
_FUSIBLE = ('ewise', 'scalar', 'unary', 'where', 'cast', 'ewise_strided')

def _np_type(dtype) -> str: return 'np.bool_' if dtype == 'bool' else f'np.{dtype}'

@functools.lru_cache(None)
def _have_numba() -> bool:
    "Fusion needs numba (a dependency of minima); without it programs replay unfused."
    try: import numba; return True
    except ImportError: return False

def cache_dir() -> str:
    "Where generated kernels (and numba's compiled code) are kept: `$MINIMA_CACHE` or `~/.cache/minima/kernels`."
    d = os.environ.get('MINIMA_CACHE') or os.path.join(os.path.expanduser('~'), '.cache', 'minima', 'kernels')
    os.makedirs(d, exist_ok=True)
    return d

class Kernel:
    "A generated kernel: its Python source and the numba-compiled function (loaded from the disk cache when there)."
    _loaded = {}
    def __init__(self, source: str):
        self.source = source
        self.name = 'k_' + hashlib.sha1(source.encode()).hexdigest()[:10]
        self.fn = self._loaded.get(self.name) or self._load()
    def _load(self):
        path = os.path.join(cache_dir(), self.name + '.py')
        if not os.path.exists(path):
            tmp = f'{path}.{os.getpid()}.tmp'
            with open(tmp, 'w') as f: f.write(self.source)
            os.replace(tmp, path)
        name = f'_minima_kernel_{self.name}'   # numba's disk cache imports the module by name when it loads
        spec = importlib.util.spec_from_file_location(name, path)
        mod = sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        self._loaded[self.name] = mod.kernel
        return mod.kernel
    def __repr__(self): return f'Kernel({self.name})'

def _rowmajor(shape):
    st, s = [], 1
    for n in reversed(shape): st.append(s); s *= n
    return tuple(reversed(st))

def _member(ins):
    "(loop shape or None, [(operand buf, strides or None, offset)], output buf, expression template, scalar)."
    p, a = ins.prim, ins.args
    if p == 'ewise': return None, [(a[1], None, 0), (a[2], None, 0)], a[3], _EW[a[0]], None
    if p == 'scalar':
        v = np.asarray(a[2]).astype(a[1].dtype)[()]
        t = _REFLECT.get(a[0]) or _EW[a[0]].replace('{}', '{0}', 1).replace('{}', '{1}', 1)
        return None, [(a[1], None, 0)], a[3], t, v
    if p == 'unary': return None, [(a[1], None, 0)], a[2], _UN[a[0]], None
    if p == 'where': return None, [(a[0], None, 0), (a[1], None, 0), (a[2], None, 0)], a[3], '({1} if {0} else {2})', None
    if p == 'cast': return None, [(a[0], None, 0)], a[1], _np_type(a[1].dtype) + '({})', None
    if p == 'ewise_strided':
        shape = tuple(a[8])
        return shape, [(a[1], tuple(a[2]), a[3]), (a[4], tuple(a[5]), a[6])], a[7], _EW[a[0]], None

def _codegen(shape, members, outs):
    "Python (numba) source of one loop over `shape` computing every member; returns (source, call spec)."
    nd = len(shape)
    spec, arrays, regs, loads, body, mem = [], {}, {}, {}, [], {}
    for i, n in enumerate(shape): spec.append(('dim', n))
    def arr(b):
        if b not in arrays: arrays[b] = f'b{len(arrays)}'; spec.append(('buf', b))
        return arrays[b]
    ints, scalars = [], []
    def load(b, strides, off):
        if strides is None or (strides == _rowmajor(shape) and off == 0 and b.size == int(np.prod(shape))):
            if b in regs: return regs[b]
            key = (b, None)
            if key not in loads:
                loads[key] = f'l{len(loads)}'; mem[b] = 1
                body.append(f'{loads[key]} = {arr(b)}[k]')
            return loads[key]
        key = (b, strides, off)
        if key not in loads:
            idx = [f'o{len(ints)}']; ints.append(off)
            for d, s in enumerate(strides):
                if s: idx.append(f'i{d} * o{len(ints)}'); ints.append(s)
            loads[key] = f'l{len(loads)}'; mem[b] = 1
            body.append(f"{loads[key]} = {arr(b)}[{' + '.join(idx)}]")
        return loads[key]
    for m, (mshape, opnds, out, tmpl, scal) in enumerate(members):
        xs = [load(b, st, off) for b, st, off in opnds]
        if scal is not None: xs.append(f's{len(scalars)}'); scalars.append(scal)
        body.append(f't{m} = {_np_type(out.dtype)}({tmpl.format(*xs)})')
        regs[out] = f't{m}'
    for b in outs: body.append(f'{arr(b)}[k] = {regs[b]}')
    params = [f'd{i}' for i in range(nd)] + list(arrays.values()) + [f'o{i}' for i in range(len(ints))] + \
             [f's{i}' for i in range(len(scalars))]
    spec += [('int', v) for v in ints] + [('scalar', v) for v in scalars]
    lines = ['import numpy as np', 'from numba import njit', '', '@njit(cache=True)',
             f"def kernel({', '.join(params)}):"]
    if nd == 1: lines.append('    for k in range(d0):'); ind = '        '
    else:
        lines.append('    k = 0')
        for d in range(nd): lines.append('    ' * (d + 1) + f'for i{d} in range(d{d}):')
        ind = '    ' * (nd + 1)
        body.append('k += 1')
    lines += [ind + s for s in body]
    return '\n'.join(lines) + '\n', spec, list(mem)

def _fuse(instrs, needed_after):
    "Replace runs of consecutive elementwise instructions over the same elements by one `fused` instruction."
    out, group, gshape, written, strided_read = [], [], None, set(), set()
    def close(end):
        nonlocal group, gshape, written, strided_read
        if len(group) >= 2:
            members = [_member(i) for i in group]
            shape = gshape or (members[0][2].size,)
            outs = [b for b in dict.fromkeys(m[2] for m in members) if needed_after(b, end)]
            src, spec, ins = _codegen(shape, members, outs)
            o0, o1 = group[0].origin, group[-1].origin
            out.append(Instr('fused', (Kernel(src), shape, ins, outs, spec), group[0].where, None,
                             o0 if o0 == o1 else f'{o0} .. {o1}'))
        else: out.extend(group)
        group, gshape, written, strided_read = [], None, set(), set()
    for idx, ins in enumerate(instrs):
        if ins.prim not in _FUSIBLE: close(idx - 1); out.append(ins); continue
        mshape, opnds, o, _, _ = _member(ins)
        n = o.size
        ok = bool(group) and n == group[0].writes()[0].size
        if ok and mshape is not None and gshape is not None and mshape != gshape: ok = False
        shape = mshape or gshape or (n,)
        for b, st, off in opnds:
            if st is not None and (st != _rowmajor(shape) or off or b.size != n):
                if b in written: ok = False
        if o in strided_read: ok = False
        if not ok: close(idx - 1)
        group.append(ins)
        if mshape is not None: gshape = mshape
        written.add(o)
        for b, st, off in opnds:
            if st is not None and (st != _rowmajor(mshape) or off or b.size != n): strided_read.add(b)
    close(len(instrs) - 1)
    return out

# %% the program: classify buffers, fold constants, drop dead code, fuse, plan memory, lower to calls
def _meta(d: NDArray): return (d._shape, d._strides, d._offset, d._dtype)

class _Slot:
    "A piece of state that the step replaces (`p.cached_data`, `p.grad`): read at the start, set at the end."
    def __init__(self, obj, attr, in_buf, in_meta, out_buf, out_meta):
        self.obj, self.attr, self.in_buf, self.in_meta, self.out_buf, self.out_meta = obj, attr, in_buf, in_meta, out_buf, out_meta
    def get(self, obj=None):
        v = getattr(self.obj if obj is None else obj, self.attr)
        return v if self.attr == 'cached_data' or v is None else v.cached_data

_ERR, _IGNORE = getattr(_devmod, '_ERR', None), getattr(_devmod, '_IGNORE', None)
_NP_EWISE, _NP_UNARY, _REFL = _devmod._NP_EWISE, _devmod._NP_UNARY, _devmod._SCALAR_REFLECTED
_view = _devmod._view

class Program:
    """A captured step, ready to replay: `instrs` (after the passes), `captured` (as recorded), `kernels` (the
    generated sources), `stats`. `print(program)` lists it."""
    def __init__(self, cap: Capture, device, fuse=True):
        self.device, self.captured = device, list(cap.instrs)
        bufs = list(cap.bufs.values())
        # 1. where each buffer's storage comes from
        leaves = _leaves(cap.args, [])
        self.arg_bufs = []
        for i, a in enumerate(leaves):
            d = a.cached_data if isinstance(a, Tensor) else a
            b = cap.bufs[id(d._handle)]
            if b.kind == 'extern': b.kind, b.src = 'arg', i
            self.arg_bufs.append((i, b))
        read = {b for ins in cap.instrs for b in ins.reads()}
        self.slots = []
        for o, attr, old in cap.writes:
            new = getattr(o, attr)
            od = None if old is None else (old if attr == 'cached_data' else old.cached_data)
            nd = None if new is None else (new if attr == 'cached_data' else new.cached_data)
            ib = cap.bufs.get(id(od._handle)) if od is not None else None
            if ib is not None and (ib not in read or ib.kind != 'extern'): ib = None
            if ib is not None: ib.kind = 'state'
            ob = cap.bufs.get(id(nd._handle)) if nd is not None else None
            self.slots.append(_Slot(o, attr, ib, None if od is None else _meta(od), ob if ob is not None else nd,
                                    None if nd is None else _meta(nd)))
        for b in bufs:
            if b.kind == 'extern': b.kind = 'fixed'   # bound by identity: optimizer state updated in place, masks, ...
        self.result = cap.result
        res = [(x.cached_data if isinstance(x, Tensor) else x) for x in _leaves(cap.result, [])]
        self.res_bufs = [(cap.bufs.get(id(d._handle)), d) for d in res]
        instrs = list(cap.instrs)
        # 2. the final value of a replaced state goes straight into its own buffer when that is safe
        arg_ids = {id(a): i for i, a in enumerate(leaves)}
        for s in self.slots: s.arg = arg_ids.get(id(s.obj))   # `x.grad` of an argument: set on the new argument
        for s in self.slots:
            if s.in_buf is not None and isinstance(s.out_buf, Buf) and s.out_buf is not s.in_buf:
                instrs = self._retarget(instrs, s)
        liveout = {s.out_buf for s in self.slots if isinstance(s.out_buf, Buf)} | {b for b, _ in self.res_bufs if b}
        liveout |= {b for b in bufs if b.kind != 'temp'}
        self.n_captured = len(instrs)
        # 3. constants: computed once, at build time
        self.n_const = 0
        instrs = self._fold(instrs, liveout)
        # 4. dead code: an instruction whose results nobody reads
        instrs = self._dce(instrs, liveout)
        self.n_live = len(instrs)
        # 5. fusion
        if fuse and isinstance(device, NumpyDevice) and _have_numba():
            last = {}
            for i, ins in enumerate(instrs):
                for b in ins.reads(): last[b] = i
            instrs = _fuse(instrs, lambda b, end: b in liveout or b.kind != 'temp' or last.get(b, -1) > end)
        self.instrs = instrs
        self.kernels = list({i.args[0].name: i.args[0] for i in instrs if i.prim == 'fused'}.values())
        # 6. memory plan, 7. lowering
        self._plan(instrs, liveout)
        self._lower(instrs)
        self.stats = dict(captured=self.n_captured, constants=self.n_const, after_dce=self.n_live, final=len(instrs),
                          kernels=sum(i.prim == 'fused' for i in instrs), distinct_kernels=len(self.kernels),
                          temp_buffers=self.n_temps, planned_buffers=self.n_phys,
                          temp_bytes=self.temp_bytes, planned_bytes=self.phys_bytes)

    _ELEMENTWISE = ('ewise', 'scalar', 'unary', 'where', 'cast')
    def _retarget(self, instrs, s):
        "Write the state's new value into the buffer that held its old value, if nothing reads the old one later."
        X, Y = s.in_buf, s.out_buf
        if Y.kind != 'temp' or Y.size != X.size or Y.dtype != X.dtype or s.out_meta[:3] != s.in_meta[:3]: return instrs
        first = next((i for i, ins in enumerate(instrs) if Y in ins.writes() or Y in ins.reads()), None)
        if first is None or instrs[first].prim not in self._ELEMENTWISE or Y not in instrs[first].writes(): return instrs
        if any(X in ins.reads() or X in ins.writes() for ins in instrs[first + 1:]): return instrs
        sub = lambda a: X if a is Y else a
        out = instrs[:first] + [Instr(i.prim, [sub(a) for a in i.args], i.where, i.random, i.origin) for i in instrs[first:]]
        s.out_buf = X
        return out

# %% fold
@patch
def _fold(self: Program, instrs, liveout):
    "Run the instructions that depend on constants only now, and keep their results as constants."
    nwrites = {}
    for ins in instrs:
        for b in ins.writes(): nwrites[b] = nwrites.get(b, 0) + 1
    dev, out = self.device, []
    for ins in instrs:
        w, r = ins.writes(), ins.reads()
        if ins.random is None and all(b.kind == 'temp' and nwrites[b] == 1 for b in w) and \
           all(b.kind == 'const' for b in r):
            for b in w: b.value, b.kind = dev.alloc(b.size, b.dtype), 'const'
            args = [a.value if isinstance(a, Buf) else a for a in ins.args]
            if ins.prim == 'from_numpy': args[0] = ins.args[0]
            getattr(type(dev), ins.prim)(dev, *args)
            self.n_const += 1
        else: out.append(ins)
    return out

@patch
def _dce(self: Program, instrs, liveout):
    needed, keep = set(liveout), []
    for ins in reversed(instrs):
        w = ins.writes()
        if ins.random is not None or any(b in needed or b.kind != 'temp' for b in w):
            r = ins.reads()
            for b in w:
                if b not in r: needed.discard(b)
            needed.update(r)
            keep.append(ins)
    return keep[::-1]

# %% plan
@patch
def _plan(self: Program, instrs, liveout):
    "Give each temporary a physical buffer; temporaries whose lifetimes do not overlap share one."
    dev, first, last = self.device, {}, {}
    for i, ins in enumerate(instrs):
        for b in list(ins.reads()) + list(ins.writes()):
            first.setdefault(b, i); last[b] = i
    P, pool = {}, {}
    self.n_temps = sum(b.kind == 'temp' for b in first)
    self.temp_bytes = sum(b.size * np.dtype(b.dtype).itemsize for b in first if b.kind == 'temp')
    phys = []
    def new(b):
        h = dev.alloc(b.size, b.dtype); phys.append(h); return h
    ends = {}
    for b, e in last.items():
        if b.kind == 'temp' and b not in liveout: ends.setdefault(e, []).append(b)
    for i, ins in enumerate(instrs):
        for b in list(ins.reads()) + list(ins.writes()):
            if b in P: continue
            if b.kind == 'temp':
                free = pool.get((b.size, b.dtype)) if b not in liveout else None
                P[b] = free.pop() if free else new(b)
            elif b.kind == 'const': P[b] = b.value
            elif b.kind == 'fixed': P[b] = b.handle
            else: P[b] = new(b)   # arg and state buffers: the program's own copies
        for b in ends.get(i, ()): pool.setdefault((b.size, b.dtype), []).append(P[b])
    for s in self.slots:
        for b in (s.in_buf, s.out_buf):
            if isinstance(b, Buf) and b not in P: P[b] = b.handle if b.kind == 'fixed' else new(b)
    for b, _ in self.res_bufs:
        if b is not None and b not in P: P[b] = b.handle if b.kind in ('fixed',) else new(b)
    for i, b in self.arg_bufs:
        if b not in P: P[b] = None
    self.P = P
    self.n_phys = len(phys)
    self.phys_bytes = sum(h.nbytes for h in phys)

# %% replay
def _rebuild(x, it):
    if isinstance(x, (Tensor, NDArray)): return next(it)
    if isinstance(x, tuple): return tuple(_rebuild(y, it) for y in x)
    if isinstance(x, list): return [_rebuild(y, it) for y in x]
    if isinstance(x, dict): return {k: _rebuild(v, it) for k, v in x.items()}
    return x

# np.add.at is slow (a max-pool's backward spends ~1 ms in it on the digits CNN); this loop adds in the same order
_SCATTER_ADD = '''import numpy as np
from numba import njit

@njit(cache=True)
def kernel(out, idx, a, outer, axis_len, inner, k):
    for o in range(outer):
        for j in range(k):
            t = idx[j]
            if t < 0: t += axis_len
            bo, ba = (o * axis_len + t) * inner, (o * k + j) * inner
            for i in range(inner): out[bo + i] += a[ba + i]
'''

def _random_call(rnd, h):
    orig, a, k, kind = rnd
    def draw():
        r = orig(*a, **k)
        np.copyto(h, (r if kind == 'array' else r.cached_data._handle).reshape(-1), casting='unsafe')
    return draw

def _lower_one(ins, P):
    "One numpy call with every array bound."
    p, a = ins.prim, [P[x] if isinstance(x, Buf) else x for x in ins.args]
    part = functools.partial
    if p == 'fused':
        k, shape, ins_, outs, spec = ins.args
        vals = [P[v] if t == 'buf' else v for t, v in spec]
        return part(k.fn, *vals)
    if p == 'fill': return part(a[0].fill, a[1])
    if p == 'from_numpy':
        if ins.random is not None: return _random_call(ins.random, a[1])
        return part(np.copyto, a[1], a[0].reshape(-1), casting='unsafe')
    if p == 'compact': return part(np.copyto, a[1].reshape(a[2]), _view(a[0], a[2], a[3], a[4]))
    if p == 'ewise_setitem': return part(np.copyto, _view(a[1], a[2], a[3], a[4]), a[0].reshape(a[2]))
    if p == 'scalar_setitem': return part(np.copyto, _view(a[2], a[3], a[4], a[5]), a[1], casting='unsafe')
    if p == 'ewise': return part(_NP_EWISE[a[0]], a[1], a[2], out=a[3])
    if p == 'scalar':
        try: v = np.asarray(a[2], dtype=a[1].dtype)
        except OverflowError: v = np.asarray(a[2]).astype(a[1].dtype)
        if a[0] in _REFL: return part(_REFL[a[0]], v, a[1], out=a[3])
        return part(_NP_EWISE[a[0]], a[1], v, out=a[3])
    if p == 'unary': return part(_NP_UNARY[a[0]], a[1], out=a[2])
    if p == 'where':
        c, x, y, o = a
        return lambda: np.copyto(o, np.where(c, x, y))
    if p == 'cast': return part(np.copyto, a[1], a[0], casting='unsafe')
    if p in ('reduce_sum', 'reduce_max'):
        return part(_devmod._reduce_rows, np.add if p == 'reduce_sum' else np.maximum, a[0], a[1], a[2])
    if p == 'matmul':
        b, m, n, q = a[3:]
        return part(np.matmul, a[0].reshape(b, m, n), a[1].reshape(b, n, q), out=a[2].reshape(b, m, q))
    if p == 'gather':
        outer, al, inner, k = a[3:]
        return part(np.take, a[0].reshape(outer, al, inner), a[1], axis=1, out=a[2].reshape(outer, k, inner))
    if p == 'scatter_add':
        outer, al, inner, k = a[3:]
        if _have_numba(): return part(Kernel(_SCATTER_ADD).fn, a[2], a[1], a[0], outer, al, inner, k)
        return part(np.add.at, a[2].reshape(outer, al, inner), (slice(None), a[1]), a[0].reshape(outer, k, inner))
    if p == 'ewise_strided':
        shape = tuple(a[8])
        return part(_NP_EWISE[a[0]], _view(a[1], shape, a[2], a[3]), _view(a[4], shape, a[5], a[6]),
                    out=a[7].reshape(shape))
    if p == 'matmul_strided':
        m, n, q = a[7:]
        return part(np.matmul, _view(a[0], (m, n), a[1], a[2]), _view(a[3], (n, q), a[4], a[5]), out=a[6].reshape(m, q))
    if p == 'reduce_strided':
        kind, h, shape, strides, offset, o, k = a
        nd = len(shape)
        return part(np.sum if kind == 'sum' else np.max, _view(h, shape, strides, offset),
                    axis=tuple(range(nd - k, nd)), out=o.reshape(tuple(shape[:nd - k])))
    raise CaptureError(f'compile: no lowering for primitive {p}')

@patch
def _lower(self: Program, instrs):
    "Turn every instruction into a call with its arrays bound (the buffers never move, so neither do views)."
    P, calls = self.P, []
    for ins in instrs:
        calls.append(_lower_one(ins, P))
    self.calls = calls
    self.arg_copy = [(i, P[b]) for i, b in self.arg_bufs if P.get(b) is not None]
    self.slot_in = [(s, P[s.in_buf]) for s in self.slots if s.in_buf is not None]
    self.slot_out = []
    for s in self.slots:
        if s.out_buf is None: v = None
        elif isinstance(s.out_buf, Buf):
            shape, strides, offset, dtype = s.out_meta
            v = NDArray.make(shape, strides, self.device, P[s.out_buf], offset, dtype)
            if s.attr == 'grad': v = Tensor.make_const(v)
        else: v = s.out_buf if s.attr == 'cached_data' else getattr(s.obj, s.attr)
        self.slot_out.append((s.obj, s.arg, s.attr, v))
    outs = []
    for b, d in self.res_bufs:
        h = P[b] if b is not None else d._handle
        outs.append(Tensor.make_const(NDArray.make(d._shape, d._strides, self.device, h, d._offset, d._dtype)))
    self.outputs = _rebuild(self.result, iter(outs))

@patch
def __call__(self: Program, args, kwargs):
    leaves = _leaves((args, kwargs), [])
    for i, h in self.arg_copy:
        x = leaves[i]
        np.copyto(h, (x.cached_data if isinstance(x, Tensor) else x)._handle)
    for s, h in self.slot_in:
        d = s.get(None if s.arg is None else leaves[s.arg])
        if d is None or d._handle is not h:
            if d is None or _meta(d) != s.in_meta or d._handle.size != h.size:
                raise CaptureError(f"compile: {s.attr} of a tensor of shape {s.in_meta[0]} changed outside the "
                                   f"compiled function (now {None if d is None else _meta(d)}); call it again "
                                   "after compile(...).reset()")
            np.copyto(h, d._handle)
    tok = _ERR.set(_IGNORE) if _ERR is not None else None
    try:
        for c in self.calls: c()
    finally:
        if tok is not None: _ERR.reset(tok)
    for o, i, attr, v in self.slot_out: setattr(o if i is None else leaves[i], attr, v)
    return self.outputs

# %% see
@patch
def listing(self: Program, stage='final') -> str:
    "The program as text: 'captured' (as recorded) or 'final' (after constants, dead code and fusion)."
    instrs = self.captured if stage == 'captured' else self.instrs
    return '\n'.join(f'{i:3d}  {ins!r:60s} # {ins.origin}' for i, ins in enumerate(instrs))

@patch
def __repr__(self: Program):
    s = self.stats
    return (f"Program({s['captured']} primitives captured -> {s['final']} calls, {s['kernels']} fused kernels, "
            f"{s['temp_buffers']} temporaries in {s['planned_buffers']} buffers)")


# %% guards and the cache
def _sig(x):
    "What a compiled program assumes about an argument: layout, dtype and device for arrays, the value otherwise."
    if isinstance(x, Tensor):
        d = x.cached_data
        return ('T', d._shape, d._strides, d._offset, d._dtype, d._device.name, d._handle.size, x.requires_grad)
    if isinstance(x, NDArray): return ('A', x._shape, x._strides, x._offset, x._dtype, x._device.name, x._handle.size)
    if isinstance(x, (tuple, list)): return (type(x).__name__,) + tuple(_sig(y) for y in x)
    if isinstance(x, dict): return ('d',) + tuple((k, _sig(v)) for k, v in sorted(x.items()))
    try: hash(x); return ('v', type(x).__name__, x)
    except TypeError: return ('id', id(x))

class _Entry:
    def __init__(self): self.calls, self.first, self.program, self.modules = 0, None, None, ()
    def flags_ok(self): return all(m.training == t for m, t in self.modules)

class Compiled:
    """`fn` compiled: the first call runs eagerly, the next two capture (and run) it, and later calls with the same
    guards (argument shapes, dtypes and devices, grad mode, the modules' train/eval flags) replay the program."""
    def __init__(self, fn, fuse=True, cache_size=8, warmup=1):
        self.fn, self.fuse, self.cache_size, self.warmup = fn, fuse, cache_size, warmup
        self.cache, self.captures = {}, 0
        functools.update_wrapper(self, fn)

    def reset(self): "Forget every program."; self.cache.clear()
    @property
    def programs(self): return [e.program for es in self.cache.values() for e in es if e.program is not None]
    @property
    def program(self):
        ps = self.programs
        return ps[-1] if ps else None

    def _device(self, args, kwargs):
        from .backend_ndarray.device import cpu
        for a in _leaves((args, kwargs), []): return a.device
        return cpu()

    def __call__(self, *args, **kwargs):
        key = (is_grad_enabled(), _sig(args), _sig(kwargs))
        entries = self.cache.get(key)
        if entries is None:
            entries = self.cache[key] = []
            if len(self.cache) > self.cache_size: self.cache.pop(next(iter(self.cache)))
        e = next((e for e in entries if e.flags_ok()), None)
        if e is None: e = _Entry(); entries.append(e)
        if e.program is not None: return e.program(args, kwargs)
        e.calls += 1
        if e.calls <= self.warmup: return self.fn(*args, **kwargs)
        dev = self._device(args, kwargs)
        if not isinstance(dev, NumpyDevice):
            raise CaptureError(f"compile: replay is implemented for the numpy device only, got {dev}")
        cap = capture(self.fn, args, kwargs, dev)
        self.captures += 1
        e.modules = tuple((m, m.training) for m in cap.modules.values())
        if e.first is None:
            e.first = [(i.prim, i.statics(), i.where) for i in cap.instrs]
            return cap.result
        _same(e.first, cap.instrs)
        e.program = Program(cap, dev, self.fuse)
        return cap.result

def _same(first, instrs):
    "Two captures of the same step must record the same work; a difference means the step depends on Python state."
    if len(first) != len(instrs):
        raise CaptureError(f"compile: two calls of the function ran different work ({len(first)} then {len(instrs)} "
                           "device primitives); a Python branch or loop depends on something other than the "
                           "arguments' shapes")
    for (p, st, where), ins in zip(first, instrs):
        if p != ins.prim or st != ins.statics():
            raise CaptureError(
                f"compile: a value changed between two calls at {ins.where} ({p} with {_short(st)} then "
                f"{ins.prim} with {_short(ins.statics())}): the step depends on Python numbers that change from call "
                "to call (a step counter, Adam's bias correction, a learning-rate schedule, a tensor made from host "
                "data). Make it a tensor argument, or keep that part out of the compiled function.")

def compile(fn=None, *, fuse=True, cache_size=8, warmup=1):
    """Compile `fn` (forward, loss, backward and optimizer step alike) into a program replayed on fixed buffers.
    Use as `step = compile(step)` or as a decorator, `@compile` / `@compile(fuse=False)`."""
    if fn is None: return lambda f: Compiled(f, fuse, cache_size, warmup)
    return Compiled(fn, fuse, cache_size, warmup)
