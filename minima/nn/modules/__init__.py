"""minima.nn.modules, torch's `torch.nn.modules`: `Module` and the layers of chapters 10 and 10b,
written in `layers.py` in the order the chapters derive them; beside it torch's file names
(`linear.py`, `conv.py`, `loss.py`, `rnn.py`, ...), each importing its classes by name from the
file that defines them."""
from .layers import *  # noqa: F403
from .layers import __all__
# torch's files, loaded here so that `minima.nn.modules.rnn.LSTM` works without an import
from . import (module, linear, conv, activation, container, dropout, sparse, rnn,  # noqa: F401
               normalization, batchnorm, transformer, pooling, flatten, upsampling, loss)
