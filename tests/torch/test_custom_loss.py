"""torch programs subclass or test against torch.nn.modules' base classes: `loss._Loss`,
`batchnorm._BatchNorm`."""
import numpy as np
import pytest

torch = pytest.importorskip('torch')
import minima  # noqa: E402
import minima.nn.modules.loss as mloss  # noqa: E402


def _focal(T, base):
    class FocalLoss(base):
        def __init__(self, gamma=2.0, reduction='mean'):
            super().__init__(reduction=reduction)
            self.gamma = gamma
        def forward(self, logits, target):
            logp = T.nn.functional.log_softmax(logits, dim=-1).gather(1, target[:, None])[:, 0]
            loss = -(1 - logp.exp()) ** self.gamma * logp
            return loss.mean() if self.reduction == 'mean' else loss.sum()
    return FocalLoss


@pytest.mark.parametrize('reduction', ['mean', 'sum'])
def test_a_loss_subclassing_torchs_base_matches_torch(reduction):
    rng = np.random.default_rng(0)
    z, y = rng.standard_normal((6, 4)), rng.integers(0, 4, 6)
    out = {}
    for T, base in ((torch, torch.nn.modules.loss._Loss), (minima, mloss._Loss)):
        x = T.tensor(z, requires_grad=True)
        loss = _focal(T, base)(reduction=reduction)(x, T.tensor(y))
        loss.backward()
        out[T.__name__] = (loss.detach().numpy(), x.grad.numpy())
    for a, b in zip(out['torch'], out['minima']):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)


def test_the_base_refuses_an_unknown_reduction_when_built():
    with pytest.raises(ValueError, match="reduction must be"):
        _focal(minima, mloss._Loss)(reduction='avg')


def test_batch_norms_are_found_through_torchs_base_class():
    "Programs find norms with `isinstance(m, nn.modules.batchnorm._BatchNorm)` (no weight decay)."
    import minima.nn.modules.batchnorm as mbn
    for T, base in ((torch, torch.nn.modules.batchnorm._BatchNorm), (minima, mbn._BatchNorm)):
        nn = T.nn
        net = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Flatten(), nn.BatchNorm1d(8))
        found = [type(m).__name__ for m in net.modules() if isinstance(m, base)]
        assert found == ['BatchNorm2d', 'BatchNorm1d']
