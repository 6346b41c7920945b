"""minima.nn.modules.conv, torch's `torch.nn.modules.conv`: minima's classes of that file, imported
by name from `layers.py`, where they are defined."""
from .layers import Conv1d, Conv2d, ConvTranspose2d

__all__ = ['Conv1d', 'Conv2d', 'ConvTranspose2d']
