"End-to-end training on scikit-learn's digits: accuracy thresholds, and loss-curve parity with PyTorch."
import numpy as np, pytest, torch
import minima as mi
from minima import nn, optim, init, data

torch.set_num_threads(1)


pytestmark = pytest.mark.usefixtures('one_blas_thread')

@pytest.fixture(scope='module')
def digits():
    X, y = data.load_digits()
    return data.train_test_split(X, y, test_size=0.2, seed=0)

def mlp():
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))

def torch_copy(model):
    "The same MLP in torch with the same weights (minima stores W as (in, out), torch as (out, in))."
    layers = []
    for m in model:
        if isinstance(m, nn.Linear):
            t = torch.nn.Linear(m.in_features, m.out_features)
            with torch.no_grad():
                t.weight.copy_(torch.tensor(m.weight.detach().numpy())); t.bias.copy_(torch.tensor(m.bias.detach().numpy()))
            layers.append(t)
        else: layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)

def accuracy(model, X, y):
    model.eval()
    with mi.no_grad(): return float((model(mi.Tensor(X)).numpy().argmax(1) == y).mean())

def parity_curves(make_opt, make_topt, Xtr, ytr, steps=50, bs=64, seed=0):
    init.manual_seed(seed)
    model = mlp(); tmodel = torch_copy(model)
    opt, topt = make_opt(model.parameters()), make_topt(tmodel.parameters())
    lossf, tlossf = nn.CrossEntropyLoss(), torch.nn.CrossEntropyLoss()
    rng = np.random.default_rng(seed)
    ours, theirs = [], []
    for _ in range(steps):
        idx = rng.choice(len(Xtr), bs, replace=False)
        xb, yb = Xtr[idx], ytr[idx]
        opt.reset_grad(); l = lossf(model(mi.Tensor(xb)), mi.Tensor(yb)); l.backward(); opt.step()
        topt.zero_grad(); tl = tlossf(tmodel(torch.tensor(xb)), torch.tensor(yb)); tl.backward(); topt.step()
        ours.append(l.item()); theirs.append(tl.item())
    return np.array(ours), np.array(theirs)

@pytest.mark.parametrize('name,make,tmake', [
    ('sgd_momentum', lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9)),
    ('adam', lambda ps: optim.Adam(ps, lr=3e-3), lambda ps: torch.optim.Adam(ps, lr=3e-3)),  # torch's Linear init: small weights
])
def test_loss_curve_parity_with_torch(digits, name, make, tmake):
    Xtr, Xte, ytr, yte = digits
    ours, theirs = parity_curves(make, tmake, Xtr, ytr)
    diff = np.abs(ours - theirs).max()
    print(f"{name}: max |loss diff| over 50 steps = {diff:.2e}")
    assert ours[-1] < ours[0] * 0.7, 'the model should be learning'
    assert diff < 1e-4

def fit(make_model, Xtr, ytr, lr, epochs):
    "Adam with a cosine schedule, batch 32, seeded: the recipe of the training chapter."
    init.manual_seed(0)
    model = make_model()
    opt = optim.Adam(model.parameters(), lr=lr)
    sched = optim.CosineAnnealingLR(opt, epochs)
    lossf = nn.CrossEntropyLoss()
    dl = data.DataLoader(data.NDArrayDataset(Xtr, ytr), batch_size=32, shuffle=True)
    for _ in range(epochs):
        model.train()
        for xb, yb in dl:
            opt.reset_grad(); lossf(model(xb), yb).backward(); opt.step()
        sched.step()
    return model

def test_mlp_reaches_97_percent(digits):
    Xtr, Xte, ytr, yte = digits
    acc = accuracy(fit(mlp, Xtr, ytr, lr=2e-3, epochs=15), Xte, yte)
    print(f"MLP test accuracy {acc:.4f}")
    assert acc >= 0.97

def cnn():
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(32 * 4 * 4, 10))

def test_cnn_reaches_98_percent(digits):
    Xtr, Xte, ytr, yte = digits
    Xtr, Xte = Xtr.reshape(-1, 1, 8, 8), Xte.reshape(-1, 1, 8, 8)
    acc = accuracy(fit(cnn, Xtr, ytr, lr=3e-3, epochs=8), Xte, yte)
    print(f"CNN test accuracy {acc:.4f}")
    assert acc >= 0.98
