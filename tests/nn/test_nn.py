"minima.nn.modules: layers against torch.nn, Module plumbing, saving, and clear errors."
import numpy as np, pytest, torch
import minima as mi
from minima import nn, init

def _t(x, grad=False): return torch.tensor(x.detach().numpy(), requires_grad=grad)

def test_linear_matches_torch_forward_backward():
    init.manual_seed(0)
    lin = nn.Linear(7, 5)
    assert lin.weight.shape == (5, 7) and lin.bias.shape == (5,)   # torch's layout
    tl = torch.nn.Linear(7, 5)
    tl.load_state_dict({k: torch.tensor(v.numpy()) for k, v in lin.state_dict().items()})
    x = init.randn(3, 7, requires_grad=True); tx = _t(x, True)
    g = np.random.default_rng(0).standard_normal((3, 5)).astype('float32')
    (lin(x) * mi.Tensor(g)).sum().backward(); (tl(tx) * torch.tensor(g)).sum().backward()
    assert np.allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-5)
    assert np.allclose(lin.weight.grad.numpy(), tl.weight.grad.numpy(), atol=1e-5)
    assert np.allclose(lin.bias.grad.numpy(), tl.bias.grad.numpy(), atol=1e-5)

def test_linear_wrong_features_names_layer_and_sizes():
    with pytest.raises(ValueError, match=r'Linear\(in_features=4, out_features=2.*expected input with 4 features.*got 3'):
        nn.Linear(4, 2)(init.randn(5, 3))
    seq = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(6, 2))
    with pytest.raises(ValueError, match=r'Sequential layer 2 \(Linear\).*6 features.*got 8'):
        seq(init.randn(5, 4))

@pytest.mark.parametrize('M,TM,shape', [(nn.BatchNorm1d, torch.nn.BatchNorm1d, (16, 3)),
                                        (nn.BatchNorm2d, torch.nn.BatchNorm2d, (4, 3, 5, 5))])
def test_batchnorm_running_stats_match_torch(M, TM, shape):
    init.manual_seed(1)
    bn, tbn = M(3, momentum=0.2), TM(3, momentum=0.2)
    for _ in range(4):
        x = init.randn(*shape, mean=1.0, std=2.0, requires_grad=True); tx = _t(x, True)
        y, ty = bn(x), tbn(tx)
        assert np.allclose(y.detach().numpy(), ty.detach().numpy(), atol=1e-4)
        (y * y).sum().backward(); (ty * ty).sum().backward()
        assert np.allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-3)
    assert np.allclose(bn.running_mean.numpy(), tbn.running_mean.numpy(), atol=1e-5)
    assert np.allclose(bn.running_var.numpy(), tbn.running_var.numpy(), atol=1e-5)
    bn.eval(); tbn.eval()
    assert np.allclose(bn(x).detach().numpy(), tbn(tx).detach().numpy(), atol=1e-4)
    assert bn.running_mean.dtype == 'float32' and bn.running_var.op is None

def test_batchnorm_wrong_channels():
    with pytest.raises(ValueError, match=r'BatchNorm2d\(3\).*expected 3 features.*\(2, 4, 5, 5\)'):
        nn.BatchNorm2d(3)(init.randn(2, 4, 5, 5))

def test_layernorm_softmax_activations_match_torch():
    init.manual_seed(2)
    x = init.randn(4, 6, requires_grad=True); tx = _t(x, True)
    assert np.allclose(nn.LayerNorm1d(6)(x).detach().numpy(), torch.nn.LayerNorm(6)(tx).detach().numpy(), atol=1e-5)
    for m, tm in [(nn.ReLU(), torch.nn.ReLU()), (nn.Tanh(), torch.nn.Tanh()), (nn.Sigmoid(), torch.nn.Sigmoid()),
                  (nn.GELU(), torch.nn.GELU()), (nn.GELU('tanh'), torch.nn.GELU(approximate='tanh')), (nn.SiLU(), torch.nn.SiLU()), (nn.Softmax(), torch.nn.Softmax(-1)), (nn.LogSoftmax(), torch.nn.LogSoftmax(-1)),
                  (nn.Identity(), torch.nn.Identity()), (nn.Flatten(), torch.nn.Flatten())]:
        assert np.allclose(m(x).detach().numpy(), tm(tx).detach().numpy(), atol=1e-5), m

def test_residual_and_dropout():
    init.manual_seed(3)
    lin = nn.Linear(4, 4)
    x = init.randn(2, 4)
    assert np.allclose(nn.Residual(lin)(x).detach().numpy(), lin(x).detach().numpy() + x.detach().numpy())
    d = nn.Dropout(0.5)
    y = d(init.ones(10000)).numpy()
    assert set(np.unique(y)) <= {0.0, 2.0} and abs(y.mean() - 1) < 0.05
    d.eval(); assert (d(init.ones(10)).numpy() == 1).all()
    with pytest.raises(ValueError): nn.Dropout(1.5)

def test_cross_entropy_matches_torch_and_checks_labels():
    init.manual_seed(4)
    z = init.randn(8, 5, requires_grad=True); tz = _t(z, True)
    y = np.array([0, 1, 4, 3, 2, 2, 1, 0])
    l = nn.CrossEntropyLoss()(z, mi.Tensor(y)); tl = torch.nn.functional.cross_entropy(tz, torch.tensor(y))
    l.backward(); tl.backward()
    assert abs(l.item() - tl.item()) < 1e-6 and np.allclose(z.grad.numpy(), tz.grad.numpy(), atol=1e-6)
    assert nn.CrossEntropyLoss()(z, mi.Tensor(y)).item() == nn.SoftmaxLoss()(z, mi.Tensor(y)).item()   # same fused op
    with pytest.raises(ValueError, match=r'label 5 is out of range for 5 classes'):
        nn.SoftmaxLoss()(z, mi.Tensor(np.array([0, 1, 5, 3, 2, 2, 1, 0])))
    with pytest.raises(ValueError, match=r'label -1 is out of range'):
        nn.SoftmaxLoss()(z, mi.Tensor(np.array([0, 1, -1, 3, 2, 2, 1, 0])))
    with pytest.raises(ValueError, match=r'expected 8 labels'):
        nn.SoftmaxLoss()(z, mi.Tensor(np.array([0, 1])))

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU())
        self.heads = [nn.Linear(4, 2), nn.Linear(4, 1)]
        self.scale = nn.Parameter(init.ones(1))
    def forward(self, x):
        h = self.body(x)
        return self.heads[0](h), self.heads[1](h) * self.scale

def test_module_plumbing():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ['scale', 'body.0.weight', 'body.0.bias', 'body.1.weight', 'body.1.bias', 'heads.0.weight',
                     'heads.0.bias', 'heads.1.weight', 'heads.1.bias']   # torch's order: own parameters, then children
    assert len(net.parameters()) == 9 and all(isinstance(p, nn.Parameter) and p.requires_grad for p in net.parameters())
    assert [n for n, _ in net.named_buffers()] == ['body.1.running_mean', 'body.1.running_var', 'body.1.num_batches_tracked']
    net.eval(); assert not any(m.training for m in net.modules())
    net.train(); assert all(m.training for m in net.modules())
    r = repr(net)
    assert '(body): Sequential(' in r and '(0): Linear(in_features=3, out_features=4, bias=True)' in r and '(heads.1): Linear' in r
    shared = nn.Linear(2, 2)
    assert len(nn.Sequential(shared, shared).parameters()) == 2

def test_save_load_roundtrip_and_errors(tmp_path):
    init.manual_seed(5)
    a, b = Net(), Net()
    a(init.randn(6, 3))  # move the running statistics
    a.eval(); b.eval()
    x = init.randn(5, 3)
    a.save(tmp_path / 'a.npz')
    with np.load(tmp_path / 'a.npz', allow_pickle=False) as f: assert 'body.1.running_var' in f.files
    nn.load(b, tmp_path / 'a.npz')
    assert all(np.array_equal(p.detach().numpy(), q.detach().numpy()) for p, q in zip(a(x), b(x)))
    assert all(p.dtype == 'float32' for p in b.parameters())
    with pytest.raises(KeyError, match=r"missing keys \['0.weight', '0.bias'\]"):
        nn.Sequential(nn.Linear(3, 4)).load(tmp_path / 'a.npz')
    nn.Sequential(nn.Linear(3, 4)).save(tmp_path / 's.npz')
    with pytest.raises(ValueError, match=r"'0.weight' has shape \(4, 3\) in the state but \(5, 3\) in the module"):
        nn.Sequential(nn.Linear(3, 5)).load(tmp_path / 's.npz')

def test_conv_pool_embedding_modules_match_torch():
    init.manual_seed(6)
    conv = nn.Conv2d(3, 4, 3, stride=1, padding=1)
    assert conv.weight.shape == (4, 3, 3, 3) and conv.bias.shape == (4,)
    tconv = torch.nn.Conv2d(3, 4, 3, padding=1)
    with torch.no_grad(): tconv.weight.copy_(torch.tensor(conv.weight.detach().numpy())); tconv.bias.copy_(torch.tensor(conv.bias.detach().numpy()))
    x = init.randn(2, 3, 6, 6, requires_grad=True); tx = _t(x, True)
    net = nn.Sequential(conv, nn.MaxPool2d(2), nn.AvgPool2d(3, stride=1, padding=1))
    tnet = torch.nn.Sequential(tconv, torch.nn.MaxPool2d(2), torch.nn.AvgPool2d(3, stride=1, padding=1))
    y, ty = net(x), tnet(tx)
    assert y.shape == tuple(ty.shape) and np.allclose(y.detach().numpy(), ty.detach().numpy(), atol=1e-5)
    (y * y).sum().backward(); (ty * ty).sum().backward()
    assert np.allclose(x.grad.numpy(), tx.grad.numpy(), atol=1e-4)
    assert np.allclose(conv.weight.grad.numpy(), tconv.weight.grad.numpy(), atol=1e-4)
    emb = nn.Embedding(7, 3)
    idx = mi.Tensor(np.array([[1, 6], [0, 1]]))
    e = emb(idx); assert e.shape == (2, 2, 3) and np.allclose(e.detach().numpy()[0, 0], emb.weight.detach().numpy()[1])
    e.sum().backward(); assert emb.weight.grad.numpy()[1].tolist() == [2, 2, 2]
    with pytest.raises(ValueError, match=r'Conv2d\(3, 4, kernel_size=3.*expected input \(N, 3, H, W\), got shape \(2, 5, 6, 6\)'):
        conv(init.randn(2, 5, 6, 6))

def test_conv_init_fans():
    init.manual_seed(7)
    w = nn.Conv2d(16, 32, 3).weight.detach().numpy()
    bound = 1 / np.sqrt(16 * 9)   # torch's kaiming_uniform_(a=sqrt(5)) with fan_in = C_in * k * k (issue 34, SW10)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound


def test_batchnorm_needs_more_than_one_value_per_channel():
    with pytest.raises(ValueError, match=r'BatchNorm1d\(3\): expected more than 1 value per channel'):
        nn.BatchNorm1d(3)(mi.Tensor(np.ones((1, 3), 'float32')))
    bn = nn.BatchNorm1d(3); bn.eval(); bn(mi.Tensor(np.ones((1, 3), 'float32')))   # eval mode is fine

def test_fused_loss_and_linear_reject_bad_input():
    from minima.ops.fused import softmax_cross_entropy, affine
    z = mi.Tensor(np.zeros((3, 4), 'float32'))
    with pytest.raises(TypeError, match='labels must be integers'): softmax_cross_entropy(z, np.array([0., 1., 2.]))
    with pytest.raises(ValueError, match='label 4 is out of range for 4 classes'): softmax_cross_entropy(z, np.array([0, 4, 1]))
    with pytest.raises(ValueError, match=r'bias must have shape \(1, 2\)'):
        affine(mi.Tensor(np.ones((5, 3), 'float32')), mi.Tensor(np.ones((3, 2), 'float32')), mi.Tensor(np.ones(3, 'float32')))

def test_affine_accepts_a_torch_shaped_bias():
    "A `(out,)` bias (torch's shape, also needle's `.bias.data` assignments) gives torch's values and gradients."
    import torch
    from minima.ops import affine
    rng = np.random.default_rng(0)
    x, w, b, g = (rng.standard_normal(s).astype('float32') for s in ((5, 3), (3, 2), (2,), (5, 2)))
    X, W, B = (mi.Tensor(a) for a in (x, w, b))
    y = affine(X, W, B)
    y.backward(mi.Tensor(g))
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    ty = tx @ tw + tb
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(y.detach().numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-6)
    for m, t in ((X, tx), (W, tw), (B, tb)):
        assert m.grad.shape == tuple(t.shape)
        np.testing.assert_allclose(m.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-6)
