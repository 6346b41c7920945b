"""minima.utils: torch's `torch.utils` names. `minima.utils.data` holds `minima.data`'s names (chapter 12) and torch's
submodules `dataloader`, `dataset`, `sampler`, `distributed` (chapter 18)."""
from . import data
