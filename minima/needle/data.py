"""needle's `data`: minima's `minima.data` with needle's datasets, transforms and DataLoader
(chapter 30, `minima.needle.core`)."""
from minima.data import *  # noqa: F403
from .core import RandomFlipHorizontal, RandomCrop, Dataset, NDArrayDataset  # noqa: F401
from .core import MNISTDataset, DataLoader  # noqa: F401
