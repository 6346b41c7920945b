"""minima.needle: needle's semantics where they differ from torch, and needle's random draws in both namespaces."""
import math
import numpy as np
import pytest
import torch
import minima as mi
import minima.needle as ndl
from minima.needle import nn

def _np(t): return t.detach().numpy() if isinstance(t, torch.Tensor) else t.numpy()

# --- randomness: numpy's global stream with needle's calls, in both namespaces

@pytest.mark.parametrize('ns', [mi, ndl], ids=['minima', 'needle'])
def test_init_draws_are_needles(ns):
    np.random.seed(11); got = ns.init.rand(3, 4, low=-2, high=3).numpy()
    np.random.seed(11); np.testing.assert_allclose(got, (np.random.rand(3, 4) * 5 - 2).astype('float32'))
    np.random.seed(11); got = ns.init.randn(5, mean=1, std=3).numpy()
    np.random.seed(11); np.testing.assert_allclose(got, (np.random.randn(5) * 3 + 1).astype('float32'))
    np.random.seed(11); got = ns.init.randb(50, p=0.3).numpy()
    np.random.seed(11); np.testing.assert_array_equal(got, np.random.rand(50) <= 0.3)
    np.random.seed(11); got = ns.init.kaiming_uniform(144, 72, shape=(3, 3, 16, 8)).numpy()
    b = math.sqrt(2) * math.sqrt(3 / 144)
    np.random.seed(11); np.testing.assert_allclose(got, (np.random.rand(3, 3, 16, 8) * 2 * b - b).astype('float32'), rtol=1e-6)
    np.random.seed(11); got = ns.init.xavier_normal(6, 4, gain=2).numpy()
    np.random.seed(11); np.testing.assert_allclose(got, np.random.randn(6, 4) * 2 * math.sqrt(2 / 10), rtol=1e-6)

def test_manual_seed_is_numpys_seed():
    mi.init.manual_seed(3); a = mi.init.rand(4).numpy()
    np.random.seed(3); np.testing.assert_array_equal(a, ndl.init.rand(4).numpy())
    g = mi.init.manual_seed(3)
    np.testing.assert_allclose(g.random(4), np.random.RandomState(3).rand(4))   # generator() shares the stream

@pytest.mark.parametrize('ns', [mi, ndl], ids=['minima', 'needle'])
def test_dropout_mask_is_needles(ns):
    x = np.random.default_rng(0).standard_normal((4, 5)).astype('float32')
    np.random.seed(7); y = ns.nn.Dropout(0.3)(mi.Tensor(x)).detach().numpy()
    np.random.seed(7); mask = np.random.rand(4, 5) <= 0.7
    np.testing.assert_allclose(y, x * mask / 0.7, rtol=1e-6)

def test_shuffling_and_augmentation_draws_are_needles():
    a = np.arange(10.0).reshape(10, 1)
    np.random.seed(5); order = [int(x.numpy()[0, 0]) for (x,) in mi.data.DataLoader(mi.data.NDArrayDataset(a), 1, shuffle=True)]
    np.random.seed(5); assert order == np.random.permutation(10).tolist()
    np.random.seed(5); batches = [b[0].numpy().ravel().tolist() for b in ndl.data.DataLoader(ndl.data.NDArrayDataset(a), 4, shuffle=True)]
    np.random.seed(5); perm = np.random.permutation(10).tolist()
    assert batches == [perm[:4], perm[4:8], perm[8:]]
    img = np.random.default_rng(1).random((5, 6, 2))
    np.random.seed(9); got = ndl.data.RandomCrop(2)(img)
    np.random.seed(9); dx, dy = np.random.randint(low=-2, high=3, size=2)
    want = np.pad(img, [(2, 2), (2, 2), (0, 0)])[2 + dx:2 + dx + 5, 2 + dy:2 + dy + 6]
    np.testing.assert_array_equal(got, want)
    np.random.seed(9); got = mi.data.RandomCrop(2)(img.transpose(2, 0, 1))          # minima's is channel first
    np.testing.assert_array_equal(got, want.transpose(2, 0, 1))
    np.random.seed(4); flip = np.random.rand() < 0.5
    np.random.seed(4); np.testing.assert_array_equal(ndl.data.RandomFlipHorizontal()(img), img[:, ::-1] if flip else img)

# --- the three intentional differences

def test_sgd_momentum_is_an_exponential_moving_average():
    rng = np.random.default_rng(0)
    w0, gs = rng.standard_normal(5).astype('float32'), rng.standard_normal((3, 5)).astype('float32')
    w = mi.Tensor(w0.copy())
    opt = ndl.optim.SGD([w], lr=0.1, momentum=0.9, weight_decay=0.01)
    ref, u = w0.astype('float64'), np.zeros(5)
    for g in gs:
        w.grad = mi.Tensor(g); opt.step()
        u = 0.9 * u + 0.1 * (g + 0.01 * ref); ref = ref - 0.1 * u
    np.testing.assert_allclose(w.detach().numpy(), ref, rtol=1e-5, atol=1e-6)
    assert w.dtype == 'float32'
    t = torch.tensor(w0.copy(), requires_grad=True)                 # torch's SGD (minima's) accumulates instead
    topt = torch.optim.SGD([t], lr=0.1, momentum=0.9, weight_decay=0.01)
    for g in gs: t.grad = torch.tensor(g); topt.step()
    assert not np.allclose(t.detach().numpy(), ref, atol=1e-3)

def test_batchnorm_running_variance_is_biased():
    x = np.random.default_rng(1).standard_normal((6, 3)).astype('float32')
    for cls, var in [(ndl.nn.BatchNorm1d, x.var(0)), (mi.nn.BatchNorm1d, x.var(0, ddof=1))]:
        bn = cls(3, momentum=0.1)
        bn(mi.Tensor(x))
        np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * var, rtol=1e-5)
        np.testing.assert_allclose(bn.running_mean.numpy(), 0.1 * x.mean(0), rtol=1e-5, atol=1e-7)
    x4 = np.random.default_rng(2).standard_normal((2, 3, 4, 4)).astype('float32')
    bn = ndl.nn.BatchNorm2d(3); y = bn(mi.Tensor(x4))
    np.testing.assert_allclose(bn.running_var.numpy(), 0.9 + 0.1 * x4.var((0, 2, 3)), rtol=1e-5)
    tb = torch.nn.BatchNorm2d(3); np.testing.assert_allclose(y.numpy(), _np(tb(torch.tensor(x4))), atol=1e-5)

def test_linear_bias_uses_needles_init_and_takes_a_flat_bias():
    np.random.seed(13); lin = ndl.nn.Linear(7, 4)
    np.random.seed(13)
    bw, bb = math.sqrt(2) * math.sqrt(3 / 7), math.sqrt(2) * math.sqrt(3 / 4)
    W = np.random.rand(7, 4) * 2 * bw - bw
    B = (np.random.rand(4, 1) * 2 * bb - bb).reshape(1, 4)
    assert lin.bias.shape == (1, 4)
    np.testing.assert_allclose(lin.weight.numpy(), W, rtol=1e-6); np.testing.assert_allclose(lin.bias.numpy(), B, rtol=1e-6)
    lin.bias.data = mi.Tensor(np.arange(4, dtype='float32'))       # needle's tests assign a (out,) bias
    x = np.ones((2, 7), 'float32')
    y = lin(mi.Tensor(x)); y.sum().backward()
    np.testing.assert_allclose(y.numpy(), x @ lin.weight.numpy() + np.arange(4), rtol=1e-6)
    assert lin.bias.grad.shape == (4,) and np.allclose(lin.bias.grad.numpy(), 2)

# --- needle's layers against torch with copied weights

@pytest.mark.parametrize('k, stride', [(3, 1), (3, 2), (1, 1), (5, 2)])
def test_conv_module_matches_torch(k, stride):
    np.random.seed(0)
    f = ndl.nn.Conv(3, 4, k, stride=stride)
    assert f.weight.shape == (k, k, 3, 4) and f.bias.shape == (4,)
    x = np.random.default_rng(3).standard_normal((2, 3, 9, 9)).astype('float32')
    g = torch.nn.Conv2d(3, 4, k, stride=stride, padding=k // 2)
    g.weight.data = torch.tensor(f.weight.numpy().transpose(3, 2, 0, 1)); g.bias.data = torch.tensor(f.bias.numpy())
    X, tX = mi.Tensor(x), torch.tensor(x, requires_grad=True)
    y, ty = f(X), g(tX)
    np.testing.assert_allclose(y.numpy(), _np(ty), atol=1e-4, rtol=1e-4)
    up = np.random.default_rng(4).standard_normal(y.shape).astype('float32')
    y.backward(mi.Tensor(up)); ty.backward(torch.tensor(up))
    np.testing.assert_allclose(X.grad.numpy(), tX.grad.numpy(), atol=1e-4, rtol=1e-4)
    np.testing.assert_allclose(f.weight.grad.detach().numpy(), g.weight.grad.detach().numpy().transpose(2, 3, 1, 0), atol=1e-3, rtol=1e-4)

def _copy_cells(cells, tm, bias):
    for k, c in enumerate(cells):
        c.W_ih = mi.Tensor(_np(getattr(tm, f'weight_ih_l{k}')).T.copy())
        c.W_hh = mi.Tensor(_np(getattr(tm, f'weight_hh_l{k}')).T.copy())
        if bias:
            c.bias_ih = mi.Tensor(_np(getattr(tm, f'bias_ih_l{k}'))); c.bias_hh = mi.Tensor(_np(getattr(tm, f'bias_hh_l{k}')))

@pytest.mark.parametrize('kind, bias, nonlin', [('rnn', True, 'tanh'), ('rnn', False, 'relu'), ('lstm', True, None),
                                               ('lstm', False, None)])
def test_recurrent_layers_match_torch(kind, bias, nonlin):
    rng = np.random.default_rng(5)
    T, B, I, H, L = 4, 3, 5, 6, 2
    x, h0, c0 = (rng.standard_normal(s).astype('float32') for s in ((T, B, I), (L, B, H), (L, B, H)))
    if kind == 'rnn':
        tm, m = torch.nn.RNN(I, H, L, bias=bias, nonlinearity=nonlin), nn.RNN(I, H, L, bias, nonlinearity=nonlin)
        _copy_cells(m.rnn_cells, tm, bias)
        to, th = tm(torch.tensor(x), torch.tensor(h0)); o, h = m(mi.Tensor(x), mi.Tensor(h0))
        np.testing.assert_allclose(h.numpy(), _np(th), atol=1e-5)
        cell = m.rnn_cells[0]
    else:
        tm, m = torch.nn.LSTM(I, H, L, bias=bias), nn.LSTM(I, H, L, bias)
        _copy_cells(m.lstm_cells, tm, bias)
        to, (th, tc) = tm(torch.tensor(x), (torch.tensor(h0), torch.tensor(c0)))
        o, (h, c) = m(mi.Tensor(x), (mi.Tensor(h0), mi.Tensor(c0)))
        np.testing.assert_allclose(h.numpy(), _np(th), atol=1e-5); np.testing.assert_allclose(c.numpy(), _np(tc), atol=1e-5)
        cell = m.lstm_cells[0]
    np.testing.assert_allclose(o.numpy(), _np(to), atol=1e-5)
    o.backward(); to.sum().backward()                     # needle's backward(): ones of the output's shape
    np.testing.assert_allclose(cell.W_ih.grad.detach().numpy(), tm.weight_ih_l0.grad.detach().numpy().T, atol=1e-4)

def test_recurrent_cells_start_from_zeros_and_draw_needles_init():
    np.random.seed(2); cell = nn.LSTMCell(3, 2)
    k = 1 / math.sqrt(2)
    np.random.seed(2); np.testing.assert_allclose(cell.W_ih.numpy(), np.random.rand(3, 8) * 2 * k - k, rtol=1e-6)
    x = np.ones((4, 3), 'float32')
    h, c = cell(mi.Tensor(x))
    assert h.shape == c.shape == (4, 2)

@pytest.mark.parametrize('seq_model', ['rnn', 'lstm'])
def test_language_model_shapes_and_backward(seq_model):
    m = ndl.models.LanguageModel(8, 11, 6, num_layers=2, seq_model=seq_model)
    x = np.random.default_rng(6).integers(0, 11, (5, 3)).astype('float32')    # needle's token ids are float32
    out, h = m(ndl.Tensor(x))
    assert out.shape == (15, 11)
    hs = h if seq_model == 'lstm' else (h,)
    assert all(t.shape == (2, 3, 6) for t in hs)
    out.backward()
    assert all(p.grad is not None for p in m.parameters())
    with pytest.raises(ValueError, match='labels must be whole numbers'): m(ndl.Tensor(x + 0.5))

def test_resnet9_has_needles_parameter_count_and_runs():
    np.random.seed(0)
    net = ndl.models.ResNet9()
    assert sum(int(np.prod(p.shape)) for p in net.parameters()) == 431946
    y = net(ndl.Tensor(np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype('float32')))
    assert y.shape == (2, 10) and np.isfinite(y.numpy()).all()
    assert sum(int(np.prod(p.shape)) for p in ndl.models.MLPResNet(784, 100, 3, 10).parameters()) == 110860
    np.random.seed(1); m = ndl.models.MLPResNet(8, 6, 1, 3)          # parameters drawn in needle's order
    b = math.sqrt(2) * math.sqrt(3 / 8)
    np.random.seed(1); np.testing.assert_allclose(m.modules[0].weight.numpy(), np.random.rand(8, 6) * 2 * b - b, rtol=1e-6)

# --- the missing or renamed names

def test_missing_names_exist():
    import minima.backend_ndarray as nd, minima.needle.nn, minima.needle.backend_ndarray
    assert callable(nd.cuda) and nd.cuda().enabled() in (True, False) and callable(ndl.backend_ndarray.cuda)
    assert ndl.init._calculate_fans(mi.Tensor(np.zeros((3, 3, 16, 8)))) == (144, 72)
    assert ndl.init._calculate_fans(mi.Tensor(np.zeros((16, 8)))) == (16, 8)
    with pytest.raises(ValueError, match='_calculate_fans'): ndl.init._calculate_fans(np.zeros(3))
    z = np.random.default_rng(0).standard_normal((3, 5)).astype('float32')
    np.testing.assert_allclose(ndl.ops.logsoftmax(mi.Tensor(z)).detach().numpy(), _np(torch.log_softmax(torch.tensor(z), -1)), atol=1e-6)
    n0 = ndl.autograd.TENSOR_COUNTER
    keep = [mi.Tensor(z) for _ in range(5)]
    assert ndl.autograd.TENSOR_COUNTER >= n0 + 5 and isinstance(n0, int) and len(keep) == 5
    assert minima.needle.nn.Conv is ndl.nn.Conv
    assert repr(ndl.cpu()) == 'cpu()' and ndl.cpu() == mi.cpu() and hash(ndl.cpu()) == hash(mi.cpu())
    x = mi.Tensor(np.ones(2, 'float32'), device=ndl.cpu()) + mi.Tensor(np.ones(2, 'float32'))
    assert x.device == mi.cpu() and x.detach().numpy().tolist() == [2, 2]

def test_tuple_helpers():
    x = mi.Tensor(np.array([1.0, 2.0], 'float32'))
    t = ndl.ops.fused_add_scalars(x, 1.0, 10.0)
    assert isinstance(t, ndl.TensorTuple) and ndl.ops.tuple_get_item(t, 1).detach().numpy().tolist() == [11, 12]
    (t[0] * t[1]).sum().backward()                       # d/dx (x + 1)(x + 10) = 2x + 11
    assert x.grad.numpy().tolist() == [13, 15]
    assert len(ndl.ops.make_tuple(x, x)) == 2

def test_ndarray_flat_pad_and_process_slice():
    a = mi.backend_ndarray.array(np.arange(12, dtype='float32').reshape(3, 4))
    t = a.permute((1, 0))[1:3]
    t.flat[3] += 100                                  # t is (2, 3): t.flat[3] is t[1, 0], which is a[0, 2]
    assert a.numpy()[0, 2] == 102 and t.flat[-3] == 102 and t.flat[0] == 1
    with pytest.raises(IndexError, match='out of bounds'): t.flat[6]
    p = a.pad(((0, 1), (2, 0)))
    np.testing.assert_array_equal(p.numpy(), np.pad(a.numpy(), ((0, 1), (2, 0))))
    with pytest.raises(ValueError, match='pad: expected 2 non-negative'): a.pad(((1, 1),))
    assert a.process_slice(slice(None, None, None), 1) == slice(0, 4, 1)

def test_training_flags_reach_children_in_nested_containers():
    class Holder(mi.nn.Module):
        def __init__(self):
            super().__init__()
            self.stuff = {'a': nn.Linear(2, 2), 'b': [nn.Dropout(0.1), nn.Sequential(nn.Linear(2, 2))]}
    m = nn.Sequential(nn.BatchNorm1d(2), Holder())
    m.eval()
    inner = m.modules[1].stuff['b'][1].modules[0]           # needle's Sequential.modules is a list
    assert not inner.training and not m.modules[1].stuff['b'][0].training
    assert len(m.parameters()) == 6 and len(m.modules()) == 7  # and it is still callable as minima's modules()
    m.train()
    assert inner.training

def test_needle_tensor_keeps_float64_and_labels_of_any_integer_dtype():
    assert ndl.Tensor(np.zeros(3)).dtype == 'float64' and ndl.Tensor(np.zeros(3, 'float32')).dtype == 'float32'
    assert mi.Tensor(np.zeros(3)).dtype == 'float32'
    z = mi.Tensor(np.random.default_rng(0).standard_normal((4, 3)).astype('float32'))
    want = ndl.nn.SoftmaxLoss()(z, mi.Tensor(np.array([0, 2, 1, 1]))).detach().numpy()
    np.testing.assert_allclose(ndl.nn.SoftmaxLoss()(z, mi.Tensor(np.array([0., 2, 1, 1], 'float32'))).detach().numpy(), want)
    with pytest.raises(ValueError, match='whole numbers'): ndl.nn.SoftmaxLoss()(z, mi.Tensor(np.array([0.5, 2, 1, 1])))

def test_needle_datasets_and_loader():
    ds = ndl.data.NDArrayDataset(np.arange(10.0).reshape(5, 2), np.arange(5))
    assert ds.transforms is None and len(ds) == 5
    xs = [(x.numpy().tolist(), y.numpy().tolist()) for x, y in ndl.data.DataLoader(ds, 2)]
    assert xs[0] == ([[0, 1], [2, 3]], [0, 1]) and xs[-1] == ([[8, 9]], [4])
    class NoInit(mi.data.Dataset):                          # a Dataset that never calls super().__init__
        def __len__(self): return 3
        def __getitem__(self, i): return np.float32(i), np.int64(i)
    assert [b[0].numpy().tolist() for b in mi.data.DataLoader(NoInit(), 2)] == [[0, 1], [2]]

def test_import_minima_keeps_torch_semantics():
    assert mi.optim.SGD is not ndl.optim.SGD and mi.nn.BatchNorm1d is not ndl.nn.BatchNorm1d
    x = mi.Tensor(np.ones((2, 2), 'float32'))
    with pytest.raises(RuntimeError, match='out_grad can be omitted only'): (x * 2).backward()

# --- needle's autograd rules on needle Tensors: results stay needle Tensors, `a - b` is two nodes,
# --- backward replaces `.grad` with a graph (so a gradient can be differentiated again)

def _recursive_topo(root):
    "The textbook recursive post-order DFS, inputs first to last (needle's reference order)."
    order, seen = [], set()
    def visit(n):
        if id(n) in seen: return
        seen.add(id(n))
        for x in n.inputs: visit(x)
        order.append(n)
    visit(root)
    return order

def test_topo_order_visits_inputs_first_to_last_in_both_namespaces():
    rng = np.random.default_rng(3)
    for T in (mi.Tensor, ndl.Tensor):
        a, b = T(rng.standard_normal((2, 2))), T(rng.standard_normal((2, 2)))
        e = ((a @ b + b * 3 - a) @ a).exp() * (b - 1.5)
        got = mi.autograd.find_topo_sort([e])
        assert [id(n) for n in got] == [id(n) for n in _recursive_topo(e)]

def test_needle_subtraction_is_add_of_negate_and_minimas_is_one_op():
    a, b = ndl.Tensor(np.array([[0.88282157]])), ndl.Tensor(np.array([[0.90170084]]))
    c = 3 * a * a + 4 * b * a - a
    assert len(ndl.autograd.find_topo_sort([c])) == 9                      # needle's graph: a + (-a)
    assert type(c.op).__name__ == 'EWiseAdd' and type(c.inputs[1].op).__name__ == 'Negate'
    ma, mb = mi.Tensor(a.numpy(), dtype='float64'), mi.Tensor(b.numpy(), dtype='float64')
    assert len(mi.autograd.find_topo_sort([3 * ma * ma + 4 * mb * ma - ma])) == 8
    np.testing.assert_allclose(c.detach().numpy(), (3 * ma * ma + 4 * mb * ma - ma).detach().numpy(), rtol=1e-12)
    assert (2.0 - a).numpy()[0, 0] == pytest.approx(2.0 - 0.88282157)   # scalar on the left: unchanged

def test_ops_on_needle_tensors_return_needle_tensors_and_minima_stays_minima():
    x, m = ndl.Tensor(np.ones((2, 3), 'float32')), mi.Tensor(np.ones((2, 3), 'float32'))
    w = mi.nn.Parameter(mi.Tensor(np.ones((3, 2), 'float32')))
    assert type(x * 2) is ndl.Tensor and type(ndl.ops.exp(x)) is ndl.Tensor and type(x @ w) is ndl.Tensor
    assert type(m + x) is ndl.Tensor and type(x.sum()) is ndl.Tensor       # either operand makes it needle's
    assert type(m * 2) is mi.Tensor and type(w * 2) is mi.Tensor and type(m @ w) is mi.Tensor   # as in torch
    assert type(x.detach()) is ndl.Tensor and type(x.data) is ndl.Tensor

def test_needle_backward_replaces_grad_and_keeps_it_a_graph():
    x2, x3 = ndl.Tensor([6]), ndl.Tensor([0])                  # Python ints: float32, as needle's NDArray
    assert x2.dtype == 'float32' and x2.requires_grad
    y = x2 * x2 + x2 * x3
    y.backward()
    g2, g3 = x2.grad, x3.grad
    assert g2.numpy().tolist() == [12.0] and g3.numpy().tolist() == [6.0] and g2.requires_grad
    y.backward()                                               # needle replaces .grad: still 12, not 24
    assert x2.grad.numpy().tolist() == [12.0]
    g2.backward()                                              # d(2 x2 + x3)/dx2 = 2, /dx3 = 1
    assert x2.grad.numpy().tolist() == [2.0] and x3.grad.numpy().tolist() == [1.0]
    assert y.grad is None                                      # leaves only (needle: every node; see the chapter)
    m = mi.Tensor([6.0])                                       # import minima: torch's rules
    (m * m).backward(); (m * m).backward()
    assert m.grad.numpy().tolist() == [24.0] and not m.grad.requires_grad

def test_needle_backward_matches_torch_on_a_random_upstream_gradient():
    rng = np.random.default_rng(7)
    A, B, G = (rng.standard_normal(s) for s in ((4, 3), (3, 5), (4, 5)))
    a, b = ndl.Tensor(A), ndl.Tensor(B)
    out = ndl.ops.tanh(a @ b) - a.sum(axes=(1,)).reshape((4, 1)).broadcast_to((4, 5))
    out.backward(ndl.Tensor(G, requires_grad=False))
    ta, tb = torch.tensor(A, requires_grad=True), torch.tensor(B, requires_grad=True)
    (torch.tanh(ta @ tb) - ta.sum(1, keepdim=True)).backward(torch.tensor(G))
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-10, atol=1e-12)
    assert a.grad.cached_data._handle is not b.grad.cached_data._handle

def test_needle_cpu_buffers_know_their_address_and_views_share_it():
    nd = ndl.backend_ndarray
    A = nd.array(np.arange(24.0).reshape(4, 6), device=nd.cpu())
    p = A._handle.ptr()
    assert isinstance(p, int) and p == A.permute((1, 0))._handle.ptr() == A[1:3, ::2]._handle.ptr()
    A[1:3, 0:2] = nd.array(np.ones((2, 2)), device=nd.cpu())   # an assignment writes in place
    assert A._handle.ptr() == p and A.numpy()[1:3, 0:2].tolist() == [[1, 1], [1, 1]]
    assert type(A.numpy()) is np.ndarray and (A + 1)._handle.ptr() != p

@pytest.mark.parametrize('m,n,p', [(1, 1, 1), (2, 3, 1), (3, 2, 4)])
def test_needle_matmul_tiled_multiplies_tiled_matrices(m, n, p):
    nd = ndl.backend_ndarray
    dev = nd.cpu(); t = dev.__tile_size__
    rng = np.random.default_rng(m * 100 + n * 10 + p)
    A, B = rng.standard_normal((m, n, t, t)).astype('float32'), rng.standard_normal((n, p, t, t)).astype('float32')
    a, b = nd.array(A, device=dev), nd.array(B, device=dev)
    c = nd.NDArray.make((m, p, t, t), device=dev)
    dev.matmul_tiled(a._handle, b._handle, c._handle, m * t, n * t, p * t)
    untile = lambda X: X.transpose(0, 2, 1, 3).reshape(X.shape[0] * t, X.shape[1] * t)
    np.testing.assert_allclose(untile(c.numpy()), untile(A) @ untile(B), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r'matmul_tiled: m, n, p = 9'):
        dev.matmul_tiled(a._handle, b._handle, c._handle, 9, n * t, p * t)

def test_needle_backward_fills_retained_nodes_and_frees_old_gradient_graphs():
    import gc, weakref
    x = ndl.Tensor(np.array([1.0, -2.0]))
    h = (x * 3).retain_grad()
    (h * h).backward()
    np.testing.assert_allclose(h.grad.numpy(), 2 * h.numpy()) ; np.testing.assert_allclose(x.grad.numpy(), 18 * x.numpy())
    old = weakref.ref(x.grad)
    gc.disable()
    try:
        (x * x).backward()                  # replacing .grad frees the old graph by reference counting alone
        assert old() is None
    finally: gc.enable()
