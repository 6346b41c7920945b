"""minima.optim.lr_scheduler, torch's `torch.optim.lr_scheduler`: the learning-rate schedules of
chapter 11, imported by name from `optimizers.py`, where they are defined."""
from .optimizers import (LRScheduler, StepLR, MultiStepLR, ExponentialLR, LambdaLR,
                         MultiplicativeLR, ConstantLR, LinearLR, PolynomialLR, CosineAnnealingLR,
                         CosineAnnealingWarmRestarts, SequentialLR, OneCycleLR, ReduceLROnPlateau,
                         CyclicLR, ChainedScheduler)

_LRScheduler = LRScheduler   # torch's older name for the base class

__all__ = ['LRScheduler', 'StepLR', 'MultiStepLR', 'ExponentialLR', 'LambdaLR', 'MultiplicativeLR',
           'ConstantLR', 'LinearLR', 'PolynomialLR', 'CosineAnnealingLR',
           'CosineAnnealingWarmRestarts', 'SequentialLR', 'OneCycleLR', 'ReduceLROnPlateau',
           'CyclicLR', 'ChainedScheduler']
