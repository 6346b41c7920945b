"""needle's `backend_ndarray`: minima's `minima.backend_ndarray` with needle's `cpu()` device and
its array functions (chapter 30, `minima.needle.core`, which fills this module)."""
from minima.backend_ndarray import *  # noqa: F403
from .core import cpu  # noqa: F401
cpu_numpy = cpu
