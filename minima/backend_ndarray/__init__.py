"""The strided NDArray and its devices (`minima.backend_ndarray`, as in needle)."""
import importlib as _importlib, types as _types
from .device import *
from .ndarray import *
_cuda_module = _importlib.import_module(f'{__name__}.cuda')

class _CallableModule(_types.ModuleType):
    "The `cuda` submodule, callable like the device function `cuda()` it shadows (needle's `backend_ndarray.cuda()`)."
    def __call__(self): return self.cuda_device()

# Importing the submodule `cuda` binds the package attribute `cuda` to it (again at every `import ...cuda`
# statement), hiding the device function of the same name. Making the module callable keeps `nd.cuda()` working.
_cuda_module.__class__ = _CallableModule
from .device import cuda
