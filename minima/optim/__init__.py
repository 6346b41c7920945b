"""minima.optim, torch's `torch.optim`: the optimizers, schedules and clipping of chapter 11,
written in `optimizers.py`; `minima.optim.lr_scheduler` is torch's file name for the schedules."""
from .optimizers import *  # noqa: F403
from .optimizers import __all__ as _all
from . import lr_scheduler

__all__ = [*_all, 'lr_scheduler']
