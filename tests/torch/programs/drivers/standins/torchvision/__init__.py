"""A small stand-in for torchvision (a separate library, not torch): the few names pytorch/examples' MNIST programs
use, written against torch's API, so it runs unchanged whether `import torch` is torch or minima. The harness puts
its folder first on `sys.path` (HARNESS_TORCHVISION=1) on both sides.
- `datasets.MNIST(root, train, download, transform)`: real MNIST digits, read from `$MINIMA_DATA/mnist` (its
  10,000-image t10k files): the first `HARNESS_MNIST_TRAIN` (default 256) for train=True, the next
  `HARNESS_MNIST_TEST` (default 128) for train=False; `root` and `download` are ignored;
- `transforms.ToTensor`, `transforms.Normalize`, `transforms.Compose`, as torchvision's for 28x28 uint8 images;
- `utils.save_image`: writes the grid's raw float32 values (no PNG), so the program's calls run."""
from . import datasets, transforms, utils
