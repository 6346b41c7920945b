"""pytest plugin for runs against the CPU emulation of the CUDA kernels: torch has no GPU there, so the harness's
torch references (`.to('cuda')`) stay on the CPU. Use: PYTHONPATH=tools/cuda_emu pytest -p torch_on_cpu ..."""
import torch

_to = torch.Tensor.to
def _cpu_to(self, *args, **kwargs):
    args = tuple('cpu' if (isinstance(a, str) and a.startswith('cuda')) or (isinstance(a, torch.device) and a.type == 'cuda')
                 else a for a in args)
    if isinstance(kwargs.get('device'), (str, torch.device)) and str(kwargs['device']).startswith('cuda'): kwargs['device'] = 'cpu'
    return _to(self, *args, **kwargs)
torch.Tensor.to = _cpu_to
torch.Tensor.cuda = lambda self, *a, **k: self
