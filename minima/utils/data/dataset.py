"""torch's `torch.utils.data.dataset` on minima (chapter 18b): the names of chapter 12, at torch's path."""
from ... import data as _d
Dataset = _d.Dataset
TensorDataset = _d.TensorDataset
Subset = _d.Subset
random_split = _d.random_split
