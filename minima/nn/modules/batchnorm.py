"""minima.nn.modules.batchnorm, torch's `torch.nn.modules.batchnorm`: minima's classes of that file,
imported by name from `layers.py`, where they are defined."""
from .layers import BatchNorm1d, BatchNorm2d

__all__ = ['BatchNorm1d', 'BatchNorm2d']
