"""needle's `ops`: minima's `minima.ops` with needle's names and scalar rules (chapter 30,
`minima.needle.core`)."""
from minima.ops import *  # noqa: F403
from .core import (logsoftmax, matmul, add_scalar, mul_scalar, divide_scalar,  # noqa: F401
                   power_scalar, make_tuple, tuple_get_item, fused_add_scalars)
