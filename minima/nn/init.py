"""`minima.nn.init`, torch's `torch.nn.init`: the initializers of chapter 9 (`minima.init`)."""
from minima.init import *  # noqa: F403
from minima.init import __all__  # noqa: F401
from minima.init import _calculate_fan_in_and_fan_out  # noqa: F401  (torch code calls it)
