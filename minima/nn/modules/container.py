"""minima.nn.modules.container, torch's `torch.nn.modules.container`: minima's classes of that file,
imported by name from `layers.py`, where they are defined."""
from .layers import Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict

__all__ = ['Sequential', 'ModuleList', 'ModuleDict', 'ParameterList', 'ParameterDict']
