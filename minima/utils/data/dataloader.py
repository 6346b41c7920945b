"""torch's `torch.utils.data.dataloader` on minima (chapter 18b): the names of chapter 12, at torch's path."""
from ... import data as _d
DataLoader = _d.DataLoader
default_collate = _d.default_collate
