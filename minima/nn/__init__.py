"""minima.nn: modules (`minima.nn.modules`, `minima.nn.transformer`) and the functional API (`minima.nn.functional`)."""
from .modules import *
from .recurrent import *
from .transformer import *
from . import functional
from . import parallel
