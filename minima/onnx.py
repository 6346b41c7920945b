"""torch's `torch.onnx` on minima (chapter 18b): importable; `export` refuses clearly."""
from .torch_tree import onnx_export as export

__all__ = ['export']
