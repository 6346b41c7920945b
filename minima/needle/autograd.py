"""needle's `autograd` (`import minima.needle.autograd`): minima's `minima.autograd` with needle's Tensor and backward
rule. The objects are built in chapter 30 (`minima.needle.core`), which fills this module (`namespace`)."""
from minima.autograd import *  # noqa: F403
from .core import Tensor, TensorTuple, as_needle, live_tensors, compute_gradient_of_variables  # noqa: F401
