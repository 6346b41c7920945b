"""minima.nn: modules (`minima.nn.modules`) and the functional API (`minima.nn.functional`)."""
from .modules import *
from . import functional
