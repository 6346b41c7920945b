"""torch's `torch.backends.cudnn` on minima (chapter 18b)."""
from ..torch_tree import CUDNN_NAMES as _names

globals().update(_names)
__all__ = sorted(_names)
