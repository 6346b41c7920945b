__version__ = "0.1.0"
"""minima: a literate, notebook-driven deep-learning framework (needle's API: `import minima as ndl` works)."""
from .backend_ndarray.device import cpu, cpu_numpy, cuda, default_device, all_devices
from .autograd import Tensor, TensorTuple, no_grad, enable_grad, is_grad_enabled, grad
from .viz import draw_graph
from . import ops
from .ops import *
from . import testing
from . import init, nn, optim, data, learner
from .ops.nn_ops import checkpoint
