"""nn.init as torch's (issue 34): Conv2d's default initialisation (SW10), the `generator=` argument (SW15, M24) and
orthogonal_, dirac_, sparse_ (M6)."""
import math
import numpy as np, pytest, torch

import minima as mi
from minima import nn, init

@pytest.mark.parametrize('args', [(64, 128, 3), (3, 8, (5, 3)), (8, 8, 3, 1, 1, 1, 4)])
def test_conv2d_default_init_bounds_match_torch(args):
    "SW10: weight and bias uniform in +-1/sqrt(fan_in), torch's kaiming_uniform_(a=sqrt(5))."
    mi.manual_seed(0); torch.manual_seed(0)
    m, t = nn.Conv2d(*args), torch.nn.Conv2d(*args)
    fan_in = m.weight.shape[1] * math.prod(m.weight.shape[2:])
    b = 1 / math.sqrt(fan_in)
    a, ta = m.weight.detach().numpy(), t.weight.detach().numpy()
    assert np.abs(a).max() <= b and np.abs(ta).max() <= b and np.abs(a).max() > 0.9 * b
    np.testing.assert_allclose(a.std(), b / math.sqrt(3), rtol=0.15)   # U(-b, b), as torch's
    np.testing.assert_allclose(ta.std(), b / math.sqrt(3), rtol=0.15)
    assert np.abs(m.bias.detach().numpy()).max() <= b and np.abs(t.bias.detach().numpy()).max() <= b

@pytest.mark.parametrize('fn', [lambda t, g: init.normal_(t, generator=g), lambda t, g: init.uniform_(t, generator=g),
                                lambda t, g: init.trunc_normal_(t, generator=g),
                                lambda t, g: init.xavier_uniform_(t, generator=g),
                                lambda t, g: init.xavier_normal_(t, generator=g),
                                lambda t, g: init.kaiming_uniform_(t, generator=g),
                                lambda t, g: init.kaiming_normal_(t, generator=g),
                                lambda t, g: init.orthogonal_(t, generator=g),
                                lambda t, g: init.sparse_(t, 0.5, generator=g)])
def test_generator_argument_is_honoured(fn):
    "SW15: two draws from equally seeded generators agree, and leave the global stream alone."
    for make in (lambda: np.random.default_rng(7), lambda: mi.Generator().manual_seed(7)):
        a, b = mi.empty(5, 4), mi.empty(5, 4)
        mi.manual_seed(0); fn(a, make()); x = np.random.rand()
        mi.manual_seed(0); fn(b, make()); y = np.random.rand()
        assert np.array_equal(a.numpy(), b.numpy()) and x == y
    with pytest.raises(TypeError, match='generator'): init.normal_(mi.empty(2), generator=7)

def test_orthogonal_dirac_sparse_like_torch():
    "M6."
    for shape in [(6, 4), (4, 6), (3, 2, 2, 2)]:
        w = init.orthogonal_(mi.empty(*shape), gain=2.0).numpy().reshape(shape[0], -1)
        tw = torch.nn.init.orthogonal_(torch.empty(*shape), gain=2.0).numpy().reshape(shape[0], -1)
        for m in (w, tw):
            small = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
            np.testing.assert_allclose(small, 4 * np.eye(len(small)), atol=1e-5)
    for shape, groups in [((4, 2, 3, 3), 2), ((3, 5, 3), 1), ((6, 3, 3, 3, 3), 3), ((2, 4, 2, 2), 1)]:
        np.testing.assert_array_equal(init.dirac_(mi.empty(*shape), groups).numpy(),
                                      torch.nn.init.dirac_(torch.empty(*shape), groups).numpy())
    s, ts = init.sparse_(mi.empty(10, 6), 0.25).numpy(), torch.nn.init.sparse_(torch.empty(10, 6), 0.25).numpy()
    assert ((s == 0).sum(0) == (ts == 0).sum(0)).all() and ((s == 0).sum(0) == 3).all()
    for f, tf, shape in [(init.orthogonal_, torch.nn.init.orthogonal_, (3,)),
                         (init.dirac_, torch.nn.init.dirac_, (3, 3)),
                         (lambda t: init.sparse_(t, .1), lambda t: torch.nn.init.sparse_(t, .1), (2, 2, 2))]:
        with pytest.raises(ValueError): tf(torch.empty(*shape))
        with pytest.raises(ValueError): f(mi.empty(*shape))
