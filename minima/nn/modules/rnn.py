"""minima.nn.modules.rnn, torch's `torch.nn.modules.rnn`: minima's classes of that file, imported by
name from `minima/nn/recurrent.py`, where they are defined."""
from ..recurrent import RNN, LSTM, GRU, RNNCell, LSTMCell, GRUCell

__all__ = ['RNN', 'LSTM', 'GRU', 'RNNCell', 'LSTMCell', 'GRUCell']
