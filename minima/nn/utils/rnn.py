"""torch's `torch.nn.utils.rnn` on minima (chapter 18b): padding and packing batches of sequences."""
from ...torch_tree import PackedSequence, pack_padded_sequence, pad_packed_sequence, pad_sequence, pack_sequence

__all__ = ['PackedSequence', 'pack_padded_sequence', 'pad_packed_sequence', 'pad_sequence', 'pack_sequence']
