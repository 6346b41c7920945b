"""minima.nn.modules.normalization, torch's `torch.nn.modules.normalization`: minima's classes of
that file, imported by name from `minima/nn/transformer.py` and `layers.py`, where they are
defined."""
from ..transformer import LayerNorm
from .layers import GroupNorm

__all__ = ['LayerNorm', 'GroupNorm']
