"""torch's `torch.nn.utils.convert_parameters` on minima (chapter 18b)."""
from ...torch_tree import parameters_to_vector, vector_to_parameters

__all__ = ['parameters_to_vector', 'vector_to_parameters']
