"""minima.needle: needle's API with needle's own semantics, built on minima (`import minima.needle as ndl`).

The code and the reasons are in the chapter *needle compatibility* (`nbs/30_needle.ipynb`, module `core`)."""
from .core import autograd, backend_ndarray, ops, init, nn, optim, data, models
from .core import Tensor, as_needle, live_tensors
from minima.autograd import TensorOp, TensorTuple, TensorTupleOp, Value, no_grad, enable_grad
from minima.backend_ndarray.device import cuda, default_device, all_devices, BackendDevice
from .core import cpu
cpu_numpy = cpu
globals().update({k: v for k, v in vars(ops).items() if not k.startswith('_') and k not in globals()})

from minima import _install_api_dirs
_install_api_dirs()   # minima.needle.core: tab completion shows its API
