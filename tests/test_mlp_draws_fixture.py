"""The network's draws on fixed seeds do not change when the code is moved.

The network twin of ``test_draws_fixture.py``: short fits of every network
``sampler`` on the CPU's fused one-pass kernels (``_flat_dynamics.pyx``) in
float32 and float64, and of the torch operations (the GPU path) in float64,
pinned to a fixture recorded before a move (``tests/data/mlp_draws_fixture.npz``,
recorded before the update laws were written once in ``_sampling/laws.h.tp``).

The comparison is to a fraction of each case's largest value: ``1e-9`` in
float64 and ``2e-4`` in float32.  A torch matrix product reordered on
another CPU moves the last bits, and a change of the update's rounding does
too; a changed formula, coefficient, default or random stream moves the
draws by far more (tried: a temperature 1 % off moves every case by 2e-3 to
0.7 of its scale, ten times the float32 tolerance and more).  Recorded at
265fba1; after the move the float64 draws are bit-identical, and the float32
ones of the fused SGLD, SGHMC and pSGLD sweeps moved by 1.8e-7, 1.4e-7 and
6.0e-6 of their scale (their updates are now the linear engine's, rounded
in another order).

Recording (only when the draws are *meant* to change, and say so in the
commit)::

    python tests/test_mlp_draws_fixture.py --write
"""
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from skbayes_sg._sampling._specs import NETWORK, dynamics_for  # noqa: E402
from skbayes_sg.neural_network import SGMCMCMLPClassifier  # noqa: E402
from skbayes_sg.neural_network import _torch_sampler  # noqa: E402

FIXTURE = Path(__file__).parent / "data" / "mlp_draws_fixture.npz"
TOLERANCE = {"float32": 2e-4, "float64": 1e-9}
SHORT = dict(hidden_layer_sizes=(6,), step_size=1e-2, batch_size=16, n_samples=5,
             n_warmup=10, thin=3, n_chains=2, map_epochs=2, random_state=0)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _data():
    rng = np.random.default_rng(20261129)
    X = rng.standard_normal((60, 4))
    y = np.arange(60) % 3
    X[:, 0] += y
    return X, y


class _TorchOpsRunner(_torch_sampler.ChainRunner):
    """The torch-operation step (the GPU code path), run on the CPU."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fused = False


def _cases():
    cases = {}
    for sampler in dynamics_for(NETWORK):
        for dtype in ("float32", "float64"):
            cases[f"{sampler}/fused/{dtype}"] = (sampler, dtype, False)
        cases[f"{sampler}/torch/float64"] = (sampler, "float64", True)
    return cases


CASES = _cases()


def _draws(case):
    sampler, dtype, torch_ops = case
    X, y = _data()
    runner = _torch_sampler.ChainRunner
    if torch_ops:
        _torch_sampler.ChainRunner = _TorchOpsRunner
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # short fits warn that they have not converged
            est = SGMCMCMLPClassifier(sampler=sampler, dtype=dtype, **SHORT).fit(X, y)
    finally:
        _torch_sampler.ChainRunner = runner
    return np.asarray(est.coef_samples_, dtype=np.float64).ravel()


def _record():
    torch.set_num_threads(1)        # as the tests run (tests/conftest.py)
    np.savez_compressed(FIXTURE, **{name: _draws(case) for name, case in CASES.items()})


def test_the_fixture_covers_every_network_sampler():
    assert set(CASES) == set(np.load(FIXTURE).files), "new behaviour: record it (docstring)"


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_network_draws_are_unchanged(name):
    expected = np.load(FIXTURE)[name]
    got = _draws(CASES[name])
    assert got.shape == expected.shape
    tol = TOLERANCE[CASES[name][1]] * float(np.max(np.abs(expected)))
    np.testing.assert_allclose(got, expected, rtol=0, atol=tol)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        _record()
        print(f"recorded {len(CASES)} cases in {FIXTURE}")
    else:
        print(__doc__)
