"""torch's `torch.backends.mps` on minima (chapter 18b)."""
from ..torch_tree import MPS_NAMES as _names

globals().update(_names)
__all__ = sorted(_names)
