"""torch's `torch.backends.cuda` on minima (chapter 18b)."""
from ..torch_tree import BACKENDS_CUDA_NAMES as _names

globals().update(_names)
__all__ = sorted(_names)
