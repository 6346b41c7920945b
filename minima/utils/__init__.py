"""minima.utils: torch's `torch.utils` names; `minima.utils.data` is `minima.data` (chapter 12)."""
import sys as _sys
from .. import data
_sys.modules[__name__ + '.data'] = data
