"""torch's `torch.nn.utils.prune`: the pruning methods of chapter 25 (`minima.prune`), under torch's path."""
from ...prune import *          # noqa: F401,F403
from ...prune import __all__    # noqa: F401
