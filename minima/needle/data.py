"""needle's `data`: minima's `minima.data` with needle's datasets, transforms and DataLoader (chapter 30)."""
from minima.data import *  # noqa: F403
from .core import RandomFlipHorizontal, RandomCrop, Dataset, NDArrayDataset, MNISTDataset, DataLoader  # noqa: F401
