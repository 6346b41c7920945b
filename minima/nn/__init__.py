"""minima.nn: modules (`minima.nn.modules`) and, when present, the functional ops (`minima.nn.functional`)."""
import os as _os
from .modules import *
from .recurrent import *
if _os.path.exists(_os.path.join(_os.path.dirname(__file__), 'functional.py')): from . import functional
