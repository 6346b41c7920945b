"""minima.nn.modules.loss, torch's `torch.nn.modules.loss`: minima's classes of that file, imported
by name from `layers.py`, where they are defined."""
from .layers import (_Loss, L1Loss, MSELoss, NLLLoss, CrossEntropyLoss, BCELoss, BCEWithLogitsLoss,
                     KLDivLoss, HuberLoss, SmoothL1Loss, PoissonNLLLoss, GaussianNLLLoss,
                     SoftMarginLoss, MultiLabelSoftMarginLoss, HingeEmbeddingLoss,
                     CosineEmbeddingLoss, MarginRankingLoss, TripletMarginLoss)

# `_Loss`: the base class torch programs subclass for a loss of their own (reduction checked)
__all__ = ['_Loss', 'L1Loss', 'MSELoss', 'NLLLoss', 'CrossEntropyLoss', 'BCELoss', 'BCEWithLogitsLoss',
           'KLDivLoss', 'HuberLoss', 'SmoothL1Loss', 'PoissonNLLLoss', 'GaussianNLLLoss',
           'SoftMarginLoss', 'MultiLabelSoftMarginLoss', 'HingeEmbeddingLoss',
           'CosineEmbeddingLoss', 'MarginRankingLoss', 'TripletMarginLoss']
