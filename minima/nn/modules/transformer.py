"""minima.nn.modules.transformer, torch's `torch.nn.modules.transformer`: minima's classes of that
file, imported by name from `minima/nn/transformer_layers.py`, where they are defined."""
from ..transformer_layers import (Transformer, TransformerEncoder, TransformerDecoder,
                                  TransformerEncoderLayer, TransformerDecoderLayer)

__all__ = ['Transformer', 'TransformerEncoder', 'TransformerDecoder', 'TransformerEncoderLayer',
           'TransformerDecoderLayer']
