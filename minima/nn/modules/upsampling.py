"""minima.nn.modules.upsampling, torch's `torch.nn.modules.upsampling`: minima's classes of that
file, imported by name from `layers.py`, where they are defined."""
from .layers import Upsample

__all__ = ['Upsample']
