"""`minima.serialization`, as torch's: the error type of a malformed file, and the atomic writer
and bounded `.npz` reader that minima's savers and readers share. Defined in
`minima/nn/modules/layers.py` (chapter *Neural-network modules*)."""
from ..nn.modules import CorruptFileError, atomic_write, read_npz
from ..nn.modules import layers as _layers
from ..torch_tree import safe_globals, add_safe_globals, get_safe_globals, clear_safe_globals   # (chapter 18b)

__all__ = ['CorruptFileError', 'atomic_write', 'read_npz', 'MAX_INFLATE_RATIO', 'safe_globals', 'add_safe_globals',
           'get_safe_globals', 'clear_safe_globals']

def __getattr__(name):   # the limit lives in minima.nn.modules.layers; reading it here reads it there
    if name == 'MAX_INFLATE_RATIO': return _layers.MAX_INFLATE_RATIO
    raise AttributeError(f"module 'minima.serialization' has no attribute {name!r}")
