"""minima.nn.utils.prune (chapter 25) against torch.nn.utils.prune on the same weights: identical masks, equal
gradients through the weight_orig/weight_mask reparametrisation, torch's state_dict keys, remove, and refusals that
leave the module untouched."""
import numpy as np, pytest
import minima as mi
from minima import nn, optim, init
import minima.nn.utils.prune as prune

torch = pytest.importorskip('torch')
import torch.nn.utils.prune as tprune


def twins(kind='linear', seed=0, shape=(7, 5)):
    init.manual_seed(seed)
    if kind == 'linear': m, t = nn.Linear(*shape), torch.nn.Linear(*shape)
    else: m, t = nn.Conv2d(3, shape[1], 3), torch.nn.Conv2d(3, shape[1], 3)
    with torch.no_grad():
        for (_, a), (_, b) in zip(m.named_parameters(), t.named_parameters()): b.copy_(torch.from_numpy(a.detach().numpy()))
    return m, t


def masks_equal(m, t, name='weight'):
    a, b = getattr(m, name + '_mask').numpy(), getattr(t, name + '_mask').detach().numpy()
    return a.shape == b.shape and a.dtype == b.dtype and (a == b).all()


CALLS = [
    lambda p, m: p.l1_unstructured(m, 'weight', amount=0.3),
    lambda p, m: p.l1_unstructured(m, 'weight', amount=11),
    lambda p, m: p.l1_unstructured(m, 'weight', amount=0.0),
    lambda p, m: p.l1_unstructured(m, 'weight', amount=1.0),
    lambda p, m: p.ln_structured(m, 'weight', amount=0.4, n=2, dim=0),
    lambda p, m: p.ln_structured(m, 'weight', amount=2, n=1, dim=1),
    lambda p, m: p.ln_structured(m, 'weight', amount=0.5, n=float('inf'), dim=-1),
    lambda p, m: p.ln_structured(m, 'weight', amount=0.5, n=float('-inf'), dim=0),
    lambda p, m: p.ln_structured(m, 'weight', amount=1, n='fro', dim=0),
    lambda p, m: (p.l1_unstructured(m, 'weight', amount=0.5), p.ln_structured(m, 'weight', amount=1, n=2, dim=0),
                  p.l1_unstructured(m, 'weight', amount=0.34), p.ln_structured(m, 'weight', 0.5, n=1, dim=1)),
    lambda p, m: (p.ln_structured(m, 'weight', amount=2, n=2, dim=0), p.l1_unstructured(m, 'weight', amount=5)),
]


@pytest.mark.parametrize('seed', range(4))
@pytest.mark.parametrize('i', range(len(CALLS)))
def test_masks_identical_to_torch(i, seed):
    m, t = twins(seed=seed)
    CALLS[i](prune, m); CALLS[i](tprune, t)
    assert masks_equal(m, t)
    assert np.array_equal(m.weight.detach().numpy(), t.weight.detach().numpy())


@pytest.mark.parametrize('dim', [0, 1, -1])
def test_conv_structured_and_bias(dim):
    m, t = twins('conv', seed=3)
    for p, x in ((prune, m), (tprune, t)):
        p.ln_structured(x, 'weight', amount=0.5, n=2, dim=dim)
        p.l1_unstructured(x, 'bias', amount=2)
    assert masks_equal(m, t) and masks_equal(m, t, 'bias')


def test_global_unstructured_matches_torch():
    (a, ta), (b, tb) = twins(seed=1), twins(seed=2, shape=(5, 9))
    prune.l1_unstructured(a, 'weight', amount=0.2); tprune.l1_unstructured(ta, 'weight', amount=0.2)
    for p, x, y in ((prune, a, b), (tprune, ta, tb)):
        p.global_unstructured([(x, 'weight'), (y, 'weight'), (y, 'bias')], pruning_method=p.L1Unstructured,
                              amount=0.5)
    assert masks_equal(a, ta) and masks_equal(b, tb) and masks_equal(b, tb, 'bias')


def test_custom_mask_and_importance_scores_match_torch():
    m, t = twins(seed=5)
    scores = np.random.default_rng(0).random((5, 7)).astype('float32')
    prune.l1_unstructured(m, 'weight', amount=0.5, importance_scores=mi.tensor(scores))
    tprune.l1_unstructured(t, 'weight', amount=0.5, importance_scores=torch.from_numpy(scores))
    assert masks_equal(m, t)
    mask = (np.arange(35).reshape(5, 7) % 3 != 0).astype('float32')
    prune.custom_from_mask(m, 'weight', mask); tprune.custom_from_mask(t, 'weight', torch.from_numpy(mask))
    assert masks_equal(m, t)


@pytest.mark.parametrize('seed', range(3))
def test_gradients_equal_torch_and_masked(seed):
    m, t = twins(seed=seed)
    prune.l1_unstructured(m, 'weight', amount=0.4); tprune.l1_unstructured(t, 'weight', amount=0.4)
    prune.ln_structured(m, 'weight', amount=1, n=2, dim=0); tprune.ln_structured(t, 'weight', amount=1, n=2, dim=0)
    m.to('float64'); t.double()
    rng = np.random.default_rng(seed)
    x, g = rng.standard_normal((4, 7)), rng.standard_normal((4, 5))
    (m(mi.tensor(x)) * mi.tensor(g)).sum().backward()
    (t(torch.from_numpy(x)) * torch.from_numpy(g)).sum().backward()
    np.testing.assert_allclose(m.weight_orig.grad.numpy(), t.weight_orig.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(m.bias.grad.numpy(), t.bias.grad.numpy(), rtol=1e-12, atol=1e-12)
    assert (m.weight_orig.grad.numpy()[m.weight_mask.numpy() == 0] == 0).all()


def test_reparametrisation_state_dict_and_remove():
    m, t = twins()
    p0 = m.weight
    prune.l1_unstructured(m, 'weight', amount=0.5); tprune.l1_unstructured(t, 'weight', amount=0.5)
    assert m.weight_orig is p0   # the same Parameter: an optimizer holding it keeps working
    assert [k for k, _ in m.named_parameters()] == [k for k, _ in t.named_parameters()] == ['bias', 'weight_orig']
    assert [k for k, _ in m.named_buffers()] == ['weight_mask']
    assert list(m.state_dict()) == list(t.state_dict())
    assert prune.is_pruned(m) and prune.is_pruned(nn.Sequential(m))
    prune.remove(m, 'weight'); tprune.remove(t, 'weight')
    assert m.weight is p0 and not prune.is_pruned(m) and list(m.state_dict()) == list(t.state_dict())
    assert np.array_equal(m.weight.detach().numpy(), t.weight.detach().numpy())
    assert not hasattr(m, 'weight_orig') and not hasattr(m, 'weight_mask')


def test_training_keeps_pruned_weights_zero():
    init.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    prune.global_unstructured([(m[0], 'weight'), (m[2], 'weight')], prune.L1Unstructured, amount=0.7)
    opt = optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
    x, y = mi.randn(16, 6), mi.tensor(np.arange(16) % 3)
    before = [l.weight_mask.numpy().copy() for l in (m[0], m[2])]
    for _ in range(5):
        opt.zero_grad(); mi.nn.functional.cross_entropy(m(x), y).backward(); opt.step()
    m(x)   # the pre-hook recomputes weight from the trained weight_orig
    for l, mask in zip((m[0], m[2]), before):
        assert (l.weight_mask.numpy() == mask).all()
        assert (l.weight.detach().numpy()[mask == 0] == 0).all() and (l.weight.detach().numpy()[mask == 1] != 0).all()


def test_random_pruning_counts_and_composition():
    init.manual_seed(0)
    m = nn.Linear(10, 10)
    prune.random_unstructured(m, 'weight', amount=0.3)
    first = m.weight_mask.numpy().copy()
    prune.random_unstructured(m, 'weight', amount=0.5)
    assert first.sum() == 70 and m.weight_mask.numpy().sum() == 35 and (m.weight_mask.numpy() <= first).all()
    prune.random_structured(m, 'weight', amount=3, dim=1)
    assert ((m.weight_mask.numpy().sum(0) == 0).sum()) >= 3


def test_refusals_leave_the_module_untouched():
    m = nn.Linear(3, 2)
    w = m.weight
    bad = [(ValueError, lambda: prune.l1_unstructured(m, 'weight', amount=1.5)),
           (ValueError, lambda: prune.l1_unstructured(m, 'weight', amount=7)),
           (ValueError, lambda: prune.l1_unstructured(m, 'weight', amount=-1)),
           (TypeError, lambda: prune.l1_unstructured(m, 'weight', amount='half')),
           (ValueError, lambda: prune.ln_structured(m, 'bias', amount=1, n=2, dim=0)),
           (ValueError, lambda: prune.ln_structured(m, 'weight', amount=1, n=2, dim=2)),
           (TypeError, lambda: prune.l1_unstructured(m, 'training', amount=1)),
           (ValueError, lambda: prune.remove(m, 'weight')),
           (ValueError, lambda: prune.l1_unstructured(m, 'weight', 1, importance_scores=np.ones((3, 2)))),
           (TypeError, lambda: prune.global_unstructured([(m, 'weight')], prune.LnStructured, amount=1))]
    for exc, f in bad:
        with pytest.raises(exc): f()
        assert m.weight is w and not prune.is_pruned(m) and not hasattr(m, 'weight_orig')
    prune.l1_unstructured(m, 'weight', amount=2)
    mask = m.weight_mask.numpy().copy()
    with pytest.raises(ValueError): prune.l1_unstructured(m, 'weight', amount=9)   # only 4 survivors
    assert (m.weight_mask.numpy() == mask).all() and len(m._pruning) == 1
    assert not isinstance(m._pruning['weight'][0], prune.PruningContainer)
