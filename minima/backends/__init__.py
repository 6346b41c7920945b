"""torch's `torch.backends` flags on minima (chapter 18b): accepted, and without effect (no cuDNN, no TF32)."""
from . import cudnn, cuda, mps
