"""The strided NDArray and its devices (`minima.backend_ndarray`, as in needle)."""
from .device import *
from .ndarray import *
