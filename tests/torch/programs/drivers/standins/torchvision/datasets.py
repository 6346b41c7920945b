"torchvision.datasets stand-in: MNIST from $MINIMA_DATA/mnist's t10k files (see the package docstring)."
import gzip, os
import numpy as np

def _idx(path):
    with gzip.open(path, 'rb') as f: data = f.read()
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], 'big') for i in range(ndim))
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(shape)

class MNIST:
    def __init__(self, root, train=True, download=False, transform=None, target_transform=None):
        d = os.path.join(os.environ['MINIMA_DATA'], 'mnist')
        n_train = int(os.environ.get('HARNESS_MNIST_TRAIN', 256))
        n_test = int(os.environ.get('HARNESS_MNIST_TEST', 128))
        sl = slice(0, n_train) if train else slice(n_train, n_train + n_test)
        self.data = _idx(os.path.join(d, 't10k-images-idx3-ubyte.gz'))[sl]
        self.targets = _idx(os.path.join(d, 't10k-labels-idx1-ubyte.gz'))[sl].astype('int64')
        self.transform, self.target_transform = transform, target_transform
    def __len__(self): return len(self.data)
    def __getitem__(self, i):
        img, target = self.data[i], int(self.targets[i])
        if self.transform is not None: img = self.transform(img)
        if self.target_transform is not None: target = self.target_transform(target)
        return img, target
