"""minima.nn.modules.linear, torch's `torch.nn.modules.linear`: minima's classes of that file,
imported by name from `layers.py`, where they are defined."""
from .layers import Identity, Linear, NonDynamicallyQuantizableLinear

__all__ = ['Identity', 'Linear', 'NonDynamicallyQuantizableLinear']
