"""minima.nn.modules.sparse, torch's `torch.nn.modules.sparse`: minima's classes of that file,
imported by name from `layers.py`, where they are defined."""
from .layers import Embedding

__all__ = ['Embedding']
