"""needle's `init`: minima's `minima.init`, whose tensor makers return needle Tensors (chapter 30,
`minima.needle.core`, which fills this module with them)."""
from minima.init import *  # noqa: F403
from .core import _calculate_fans  # noqa: F401
