"""minima.nn.modules.loss, torch's `torch.nn.modules.loss`: minima's classes of that file, imported
by name from `layers.py`, where they are defined."""
from .layers import (L1Loss, MSELoss, NLLLoss, CrossEntropyLoss, BCELoss, BCEWithLogitsLoss,
                     KLDivLoss, HuberLoss, SmoothL1Loss, PoissonNLLLoss, GaussianNLLLoss,
                     SoftMarginLoss, MultiLabelSoftMarginLoss, HingeEmbeddingLoss,
                     CosineEmbeddingLoss, MarginRankingLoss, TripletMarginLoss)

__all__ = ['L1Loss', 'MSELoss', 'NLLLoss', 'CrossEntropyLoss', 'BCELoss', 'BCEWithLogitsLoss',
           'KLDivLoss', 'HuberLoss', 'SmoothL1Loss', 'PoissonNLLLoss', 'GaussianNLLLoss',
           'SoftMarginLoss', 'MultiLabelSoftMarginLoss', 'HingeEmbeddingLoss',
           'CosineEmbeddingLoss', 'MarginRankingLoss', 'TripletMarginLoss']
