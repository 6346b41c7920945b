"""torch's `torch.utils.data.distributed`: the sampler that splits a dataset over ranks (chapter 19)."""
def __getattr__(name):
    if name == 'DistributedSampler':   # imported late: minima.distributed imports the data modules
        from ...distributed import DistributedSampler
        return DistributedSampler
    raise AttributeError(f"module 'minima.utils.data.distributed' has no attribute {name!r}")
