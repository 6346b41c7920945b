"""`minima.nn.init`, torch's `torch.nn.init`: the initializers of chapter 9, which live in `minima.init`."""
from minima.init import *  # noqa: F403
from minima.init import __all__, _calculate_fan_in_and_fan_out  # noqa: F401  (torch code calls this private one)
