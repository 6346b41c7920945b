"""minima.nn.modules.batchnorm, torch's `torch.nn.modules.batchnorm`: minima's classes of that file,
imported by name from `layers.py`, where they are defined."""
from .layers import _BatchNorm, BatchNorm1d, BatchNorm2d

# `_BatchNorm`: the base programs test with isinstance (no weight decay on norms, freezing statistics)
__all__ = ['_BatchNorm', 'BatchNorm1d', 'BatchNorm2d']
