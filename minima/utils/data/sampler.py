"""torch's `torch.utils.data.sampler` on minima (chapter 18b): the names of chapter 12, at torch's path."""
from ... import data as _d
SequentialSampler = _d.SequentialSampler
RandomSampler = _d.RandomSampler
BatchSampler = _d.BatchSampler
