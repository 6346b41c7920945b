"""minima.nn.modules.module, torch's `torch.nn.modules.module`: minima's classes of that file,
imported by name from `layers.py`, where they are defined."""
from .layers import Module, Parameter

__all__ = ['Module', 'Parameter']
