"""needle's `autograd` (`import minima.needle.autograd`): minima's `minima.autograd` with needle's
Tensor and backward rule, built in chapter 30 (`minima.needle.core`, which fills this module)."""
from minima.autograd import *  # noqa: F403
from .core import Tensor, TensorTuple, as_needle, live_tensors  # noqa: F401
from .core import compute_gradient_of_variables  # noqa: F401
