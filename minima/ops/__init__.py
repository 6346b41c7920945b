"""All of minima's operators: `minima.ops.add`, `minima.ops.EWiseAdd`, ... (needle's functional names).

Every `TensorOp` lives in a module of this package; `minima.nn.functional` and `minima.nn` build on them, and
nothing here imports `minima.nn`."""
from .elementwise import *
from .activations import *
from .movement import *
from .reduce import *
from .linalg import *
from .softmax_family import *
from .layers import *
from .fused import *
from .losses import *
from .hooks import *
from .recurrent import *
from .attention import *
