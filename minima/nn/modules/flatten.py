"""minima.nn.modules.flatten, torch's `torch.nn.modules.flatten`: minima's classes of that file,
imported by name from `layers.py`, where they are defined."""
from .layers import Flatten

__all__ = ['Flatten']
