"""torch's `torch.amp` and `torch.cuda.amp` on minima (chapter 18b): the gradient scaler; `autocast` only disabled."""
from .torch_tree import GradScaler, autocast

__all__ = ['GradScaler', 'autocast']
