"""torch's `torch.utils.data`: `minima.data`'s names (chapter 12), and the submodules torch scripts import them from."""
from ...data import *
from ...data import __all__
from . import dataloader, dataset, sampler, distributed

def __getattr__(name):
    "Every other name of `minima.data` (its helpers) reads through."
    from ... import data
    return getattr(data, name)
