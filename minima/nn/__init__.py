"""minima.nn: modules (`minima.nn.modules`, `minima.nn.transformer`,
`minima.nn.transformer_layers`) and the functional API (`minima.nn.functional`);
`minima.nn.init` is `minima.init` and `minima.nn.utils` holds torch's gradient clipping and `prune`, as in torch."""
import sys as _sys, types as _types
from .modules import *
from .recurrent import *
from .transformer import *
from .transformer_layers import *
from . import functional
from . import parallel
from .. import init
from ..optim import clip_grad_norm_, clip_grad_value_

_sys.modules[__name__ + '.init'] = init
utils = _types.ModuleType(__name__ + '.utils', "torch's `torch.nn.utils`: `clip_grad_norm_`, `clip_grad_value_`, `prune`.")
utils.clip_grad_norm_, utils.clip_grad_value_ = clip_grad_norm_, clip_grad_value_
_sys.modules[utils.__name__] = utils
from .. import prune as _prune                                    # torch.nn.utils.prune (chapter 25)
utils.prune = _sys.modules[utils.__name__ + '.prune'] = _prune
del clip_grad_norm_, clip_grad_value_
