"""minima.nn.modules.activation, torch's `torch.nn.modules.activation`: minima's classes of that
file, imported by name from `layers.py` and `minima/nn/transformer_layers.py`, where they are
defined."""
from .layers import ReLU, LeakyReLU, GELU, SiLU, Tanh, Sigmoid, Softmax, LogSoftmax
from ..transformer_layers import MultiheadAttention

__all__ = ['ReLU', 'LeakyReLU', 'GELU', 'SiLU', 'Tanh', 'Sigmoid', 'Softmax', 'LogSoftmax',
           'MultiheadAttention']
