"""minima.nn.modules.dropout, torch's `torch.nn.modules.dropout`: minima's classes of that file,
imported by name from `layers.py`, where they are defined."""
from .layers import Dropout, Dropout2d

__all__ = ['Dropout', 'Dropout2d']
