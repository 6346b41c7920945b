"""torch's `torch.cuda` on minima (chapter 18b). The module is callable: `minima.cuda()` is the CUDA device."""
import sys as _sys
from . import torch_tree as _tt
from . import amp

globals().update(_tt.CUDA_NAMES)
__all__ = sorted(_tt.CUDA_NAMES) + ['amp']
_sys.modules[__name__].__class__ = _tt.CallableModule
