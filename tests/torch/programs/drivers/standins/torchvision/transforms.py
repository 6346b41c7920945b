"torchvision.transforms stand-in: ToTensor, Normalize, Compose, for HxW uint8 arrays (MNIST's images)."
import numpy as np
import torch

class Compose:
    def __init__(self, transforms): self.transforms = transforms
    def __call__(self, x):
        for t in self.transforms: x = t(x)
        return x

class ToTensor:
    "uint8 HxW (or HxWxC) -> float32 CxHxW in [0, 1], as torchvision's."
    def __call__(self, img):
        a = np.asarray(img, dtype='float32') / 255.0
        a = a[None] if a.ndim == 2 else a.transpose(2, 0, 1)
        return torch.tensor(np.ascontiguousarray(a))

class Normalize:
    def __init__(self, mean, std): self.mean, self.std = mean, std
    def __call__(self, t):
        m = torch.tensor(np.asarray(self.mean, 'float32')).reshape(-1, 1, 1)
        s = torch.tensor(np.asarray(self.std, 'float32')).reshape(-1, 1, 1)
        return (t - m) / s
