"""torch's `torch.nn.utils`: gradient clipping (chapter 11), `parameters_to_vector`/`vector_to_parameters` and the
`rnn` helpers (chapter 18) and `prune` (chapter 25)."""
from ...optim import clip_grad_norm_, clip_grad_value_
from .convert_parameters import parameters_to_vector, vector_to_parameters
from . import rnn, convert_parameters, prune
