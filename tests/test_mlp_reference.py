"""The network's posterior at its defaults against an exact reference.

A 40-32-1 ReLU network on 60 rows (40 features, 5 informative: the small
problem of ``tests/test_mlp_bayes.py``), the default fan-in prior
(``prior_scale=4``, ``prior_bias_scale=1``) at ``T = 1``. The reference is
Metropolis-adjusted Hamiltonian Monte Carlo written for the test
(``_reference.hmc``: numpy, the network's formulas written out again,
Stan's windowed diagonal metric and dual averaging), four chains.

Compared: two posterior expectations that see the whole posterior rather
than one weight (the weights are identified only up to relabelling the
hidden units): the training log-likelihood of a draw, whose mean is set by
the temperature and the noise (at ``T = 1`` each direction the data
determine carries its thermal misfit), and a draw's mean held-out
log-likelihood. Tolerance: 4 combined Monte Carlo standard errors (ESS by
``_reference.ess`` over the chains), no allowance for bias: with 60 rows
the default minibatch is every row, so the default chain is MALA, exact.

Measured (seeds 0-3 of the estimator, 400 draws a chain; reference -7.744
+- 0.073 and -1.862 +- 0.008): training log-likelihood -7.58 to -7.84 and
held-out -1.82 to -1.92, |z| <= 1.25. Without the Metropolis step
(``metropolis=False``: the unadjusted SGLD step the defaults took before)
the draws are hotter: training log-likelihood -8.53 to -8.74, z = -4.2 to
-6.7, which the second test asserts. Dropping the proposal's density from
the acceptance ratio (checked by hand once) gives z = 21: the first test
fails.
"""
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from skbayes_sg.diagnostics import MCMCConvergenceWarning  # noqa: E402
from skbayes_sg.neural_network import SGMCMCMLPClassifier  # noqa: E402

try:
    from . import _reference as ref
    from .test_mlp_bayes import _small_problem as _problem
except ImportError:  # pragma: no cover
    import _reference as ref
    from test_mlp_bayes import _small_problem as _problem

HIDDEN = 32
Z = 4.0


@pytest.fixture(scope="module")
def reference():
    """Per draw: training log-likelihood and mean held-out log-likelihood,
    shape (4, n_draws) each, from 4 HMC chains."""
    Xtr, Xte, ytr, yte = _problem()
    net = ref.BinaryReluNet(Xtr, ytr, HIDDEN)
    train, held_out, accept = [], [], []
    for chain in range(4):
        rng = np.random.default_rng(100 + chain)
        start = rng.uniform(-0.3, 0.3, net.n_params)
        draws, acc = ref.hmc(net.potential_and_gradient, start, n_warmup=500, n_draws=600,
                             seed=200 + chain)
        train.append([net.log_likelihood(t, Xtr, ytr) for t in draws])
        held_out.append([net.log_likelihood(t, Xte, yte) / len(yte) for t in draws])
        accept.append(acc)
    assert min(accept) > 0.6, accept          # the reference itself is healthy
    return np.array(train), np.array(held_out)


def _expectation(values):
    """Mean and Monte Carlo standard error of a (chains, draws) series."""
    values = np.asarray(values, dtype=np.float64)
    return values.mean(), values.std() / np.sqrt(ref.ess(values))


def _fit(**kw):
    Xtr, Xte, ytr, yte = _problem()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCMCConvergenceWarning)
        clf = SGMCMCMLPClassifier(hidden_layer_sizes=(HIDDEN,), n_samples=400, temperature=1.0,
                                  random_state=0, **kw).fit(Xtr, ytr)
    train = clf._draw_log_likelihood(Xtr, ytr)
    held_out = clf._draw_log_likelihood(Xte, yte) / len(yte)
    return clf, train, held_out


def _z(ours, theirs):
    (m1, s1), (m2, s2) = _expectation(ours), _expectation(theirs)
    return (m1 - m2) / np.hypot(s1, s2), m1, m2


def test_defaults_sample_the_network_posterior(reference):
    """At the defaults (4 chains, SGLD, ``step_size="auto"``, T = 1) the
    draws' expectations match the exact reference within Monte Carlo error."""
    clf, train, held_out = _fit()
    assert clf.metropolis_ and clf.temperature == 1.0 and clf.n_chains == 4
    assert 0.45 < clf.acceptance_rate_ < 0.75, clf.acceptance_rate_
    for ours, theirs in ((train, reference[0]), (held_out, reference[1])):
        z, m1, m2 = _z(ours, theirs)
        assert abs(z) < Z, (z, m1, m2)


def test_the_unadjusted_step_is_the_hotter_chain(reference):
    """The same fit without the Metropolis step: the O(h) bias of SGLD at the
    automatic step shows as a lower training log-likelihood, more than 4
    Monte Carlo errors below the reference (what this test file would miss
    if it could not tell a biased chain from an exact one)."""
    clf, train, _ = _fit(metropolis=False)
    assert not clf.metropolis_
    z, m1, m2 = _z(train, reference[0])
    assert z < -Z, (z, m1, m2)
