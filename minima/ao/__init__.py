"""minima.ao: torch.ao's place for architecture optimization; `minima.ao.quantization` is chapter 26's module."""
from . import quantization
