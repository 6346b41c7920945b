"Real MNIST (the 10,000 test images in minima's data folder, $MINIMA_DATA/mnist): reading, a fixed split, brief training."
import numpy as np, pytest
from minima import nn, optim, init, data
from minima.learner import Learner, accuracy

MNIST_DIR = data.data_dir('mnist')      # tools/test sets MINIMA_DATA (README)
pytestmark = [pytest.mark.usefixtures('one_blas_thread'),
              pytest.mark.skipif(not (MNIST_DIR / 't10k-images-idx3-ubyte.gz').exists(),
                                 reason=f'no MNIST test files in {MNIST_DIR} (set MINIMA_DATA)')]

@pytest.fixture(scope='module')
def split():
    ds = data.MNIST(MNIST_DIR, train=False)
    assert len(ds) == 10_000 and ds.images.shape == (10_000, 1, 28, 28) and ds.images.dtype == np.float32
    assert np.bincount(ds.labels).tolist() == [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
    assert 0 <= ds.images.min() and ds.images.max() <= 1
    return data.train_test_split(ds.images, ds.labels, test_size=0.2, seed=0)

def test_split_is_fixed(split):
    Xtr, Xte, ytr, yte = split
    assert Xtr.shape == (8000, 1, 28, 28) and Xte.shape == (2000, 1, 28, 28)
    again = data.train_test_split(*data.parse_mnist(MNIST_DIR / 't10k-images-idx3-ubyte.gz',
                                                     MNIST_DIR / 't10k-labels-idx1-ubyte.gz'), test_size=0.2, seed=0)
    assert np.array_equal(again[3], yte)

def test_mlp_three_epochs_on_real_mnist(split):
    Xtr, Xte, ytr, yte = split
    init.manual_seed(0)
    train = data.DataLoader(data.NDArrayDataset(Xtr, ytr), batch_size=64, shuffle=True)
    valid = data.DataLoader(data.NDArrayDataset(Xte, yte), batch_size=500)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    learn = Learner(model, train, valid, metrics=[accuracy]).fit(3, lr=4e-3, sched=optim.CosineAnnealingLR)
    acc = learn.history[-1]['accuracy']
    print(f"MLP on 8,000 real MNIST images, 3 epochs: test accuracy {acc:.4f}")
    assert acc >= 0.93 and learn.history[-1]['train_loss'] < learn.history[0]['train_loss']
