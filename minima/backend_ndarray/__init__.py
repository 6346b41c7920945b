"""The strided NDArray and its devices (`minima.backend_ndarray`, as in needle)."""
from .device import *
from .ndarray import *
# Importing the `cuda` submodule binds the package attribute `cuda` to it; load it now, then bind the name back to
# the device function, so that `backend_ndarray.cuda()` is callable as in needle.
from . import cuda as _cuda_module
from .device import cuda
