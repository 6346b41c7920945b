"""All of minima's operators: `minima.ops.add`, `minima.ops.EWiseAdd`, ... (needle's functional names)."""
from .elementwise import *
from .movement import *
from .reduce import *
from .linalg import *
from .softmax_family import *
from .recurrent import *
from ..nn.functional import conv
