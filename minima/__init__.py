"""minima: a literate, notebook-driven deep-learning framework. `import minima` is torch's face (`import minima as torch`);
`import minima.needle as ndl` is needle's."""
__version__ = "0.1.0"
from .backend_ndarray.device import cpu, cpu_numpy, default_device, all_devices
from .autograd import (Tensor, TensorTuple, no_grad, enable_grad, is_grad_enabled, grad, set_grad_enabled,
                       inference_mode)
from .viz import draw_graph
from . import ops
from . import testing
from . import init, nn, optim, data, datasets, learner, text, bpe
from .ops.losses import checkpoint
from .init import manual_seed, Generator
from . import serialization
from . import utils                                                  # minima.utils.data (21b)
from . import cuda, backends, amp, onnx   # torch's module tree (18b); `minima.cuda()` is still the CUDA device
from .nn.modules import save_object as save, load_object as load     # torch.save / torch.load (21b)

# torch's face: torch's functions and dtypes (`minima.zeros`, `minima.cat`, `minima.float32`, ...); the op classes and
# needle's functional names stay in `minima.ops` (chapter *The torch face*, module `minima.ops.torch_face`).
from .ops import torch_face as _torch_face
globals().update(_torch_face.TORCH_FUNCTIONS)
globals().update(_torch_face.DTYPE_NAMES)
from .compile import compile   # the function; the module stays importable as minima.compile via sys.modules
from . import profiler         # torch.profiler's API (chapter 23); also reads MINIMA_DEBUG

import sys as _sys, types as _types

__all__ = sorted(['Tensor', 'TensorTuple', 'no_grad', 'enable_grad', 'is_grad_enabled', 'grad', 'set_grad_enabled',
                  'inference_mode', 'draw_graph', 'checkpoint', 'compile', 'manual_seed', 'Generator', 'save', 'load', 'cpu', 'cpu_numpy', 'cuda',
                  'default_device', 'all_devices', *_torch_face.TORCH_FUNCTIONS, *_torch_face.DTYPE_NAMES])

def _api_dir(mod):
    "`dir(mod)`, hence tab completion, lists the module's API (`__all__`) and submodules, not its own imports."
    def __dir__():
        subs = {k for k, v in vars(mod).items()
                if isinstance(v, _types.ModuleType) and v.__name__.startswith(mod.__name__ + '.')}
        return sorted(set(mod.__all__) | subs | {k for k in vars(mod) if k.startswith('__')})
    return __dir__

def _install_api_dirs():
    "Give every loaded minima module with an `__all__` the `__dir__` above (again after a lazy import)."
    for _name, _mod in list(_sys.modules.items()):
        if _name.startswith('minima.') and hasattr(_mod, '__all__') and '__dir__' not in vars(_mod):
            _mod.__dir__ = _api_dir(_mod)

_install_api_dirs()
__dir__ = _api_dir(_sys.modules[__name__])   # dir(minima): torch's functions, dtypes and the submodules

# mixed precision (chapter 24): importing minima.amp wraps the ops of torch's autocast policy
amp._install()   # again, now that minima's namespace holds torch's functions (amp was first imported above)
from .amp import autocast, is_autocast_enabled, get_autocast_dtype
__all__ = sorted([*__all__, 'autocast', 'is_autocast_enabled', 'get_autocast_dtype', 'bfloat16'])

# quantization (chapter 26): torch's quantized dtype and qscheme names, and its quantize functions, at top level
from . import ao
from .ao.quantization import (qint8, quint8, qint32, per_tensor_affine, per_tensor_symmetric, per_channel_affine,
                              per_channel_symmetric, quantize_per_tensor, quantize_per_channel,
                              fake_quantize_per_tensor_affine)
__all__ = sorted([*__all__, 'qint8', 'quint8', 'qint32', 'per_tensor_affine', 'per_tensor_symmetric',
                  'per_channel_affine', 'per_channel_symmetric', 'quantize_per_tensor', 'quantize_per_channel',
                  'fake_quantize_per_tensor_affine'])
_install_api_dirs()
