"""minima.nn.modules.pooling, torch's `torch.nn.modules.pooling`: minima's classes of that file,
imported by name from `layers.py`, where they are defined."""
from .layers import (MaxPool1d, MaxPool2d, AvgPool1d, AvgPool2d, AdaptiveAvgPool1d,
                     AdaptiveAvgPool2d, AdaptiveMaxPool1d, AdaptiveMaxPool2d)

__all__ = ['MaxPool1d', 'MaxPool2d', 'AvgPool1d', 'AvgPool2d', 'AdaptiveAvgPool1d',
           'AdaptiveAvgPool2d', 'AdaptiveMaxPool1d', 'AdaptiveMaxPool2d']
