"""minima.nn: modules (`minima.nn.modules`, `minima.nn.transformer`,
`minima.nn.transformer_layers`) and the functional API (`minima.nn.functional`); `minima.nn.init`
holds `minima.init`'s initializers and `minima.nn.utils` torch's `torch.nn.utils` (with `prune`)."""
from .modules import *
from .recurrent import *
from .transformer import *
from .transformer_layers import *
from . import functional
from . import parallel
from . import init
from . import utils   # torch.nn.utils: clipping, parameters_to_vector, rnn (chapter 18)
