"""needle's `optim`: minima's `minima.optim` with needle's SGD (momentum as a moving average)
and Adam (chapter 30, `minima.needle.core`)."""
from minima.optim import *  # noqa: F403
from .core import SGD, Adam  # noqa: F401
