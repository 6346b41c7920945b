"""needle's `models`: the homework's ResNets and language model, built from needle's layers
(chapter 30, `minima.needle.core`)."""
from .core import ResidualBlock, MLPResNet, ConvBN, ResNet9, LanguageModel  # noqa: F401
