"""needle's `nn`: minima's `minima.nn` with needle's layers (`Linear`'s `(in, out)` weight,
needle's BatchNorm, `Conv`, the RNNs, ...), from chapter 30 (`minima.needle.core`)."""
from minima.nn import *  # noqa: F403
from .core import (Parameter, Sequential, Linear, BatchNorm1d, BatchNorm2d, Conv, SoftmaxLoss,  # noqa: F401
                   Embedding, RNNCell, RNN, LSTMCell, LSTM, MultiHeadAttention, AttentionLayer,
                   TransformerLayer, Transformer)
