"""The network's Metropolis step (MALA with exact gradients): when it is on,
what it reports, how it continues, and the errors where it cannot act.
Its correctness against an exact posterior is ``test_mlp_reference.py``."""
import math
import re
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from skbayes_sg.diagnostics import MCMCConvergenceWarning  # noqa: E402
from skbayes_sg.neural_network import SGMCMCMLPClassifier  # noqa: E402
from skbayes_sg.neural_network._net_metropolis import DualAveraging  # noqa: E402

try:
    from ._reference import small_classification
except ImportError:  # pragma: no cover
    from _reference import small_classification

_QUICK = dict(hidden_layer_sizes=(6,), n_samples=20, n_warmup=200, thin=2, n_chains=2,
              random_state=0)


def _fit(X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCMCConvergenceWarning)
        return SGMCMCMLPClassifier(**{**_QUICK, **kw}).fit(X, y)


def test_auto_is_on_with_exact_gradients_only():
    X, y = small_classification(n=60)
    on = _fit(X, y)
    assert on.metropolis_ and on.batch_size_ == 60
    assert 0.3 < on.acceptance_rate_ < 0.9
    # a step adapted per chain, reported as the chains' geometric mean
    steps = [s["mh_step"] for s in on._chain_states]
    assert on.step_size_ == pytest.approx(math.exp(np.mean(np.log(steps))))
    assert on.step_size_ != on._resolved_step(60)[0]
    for kw in (dict(batch_size=20), dict(sampler="sghmc"), dict(subsampling="svrg"),
               dict(metropolis=False)):
        off = _fit(X, y, **kw)
        assert not off.metropolis_ and not hasattr(off, "acceptance_rate_"), kw
    # a refit without it drops the attribute of the fit before
    on.set_params(metropolis=False).fit(X, y)
    assert not hasattr(on, "acceptance_rate_")


def test_a_hand_set_step_is_kept_and_corrected():
    X, y = small_classification(n=60)
    clf = _fit(X, y, step_size=1e-3)
    assert clf.metropolis_ and clf.step_size_ == 1e-3
    big = _fit(X, y, step_size=0.2)         # far too large: rejected, not diverged
    assert big.acceptance_rate_ < 0.05
    assert np.all(np.isfinite(big.coef_samples_))


@pytest.mark.parametrize("kw, match", [
    (dict(metropolis=True, batch_size=20), "batch_size >= n_rows"),
    (dict(metropolis=True, sampler="sghmc"), "sampler in \\['sgld'\\]"),
    (dict(metropolis=True, subsampling="ewsg"), "subsampling='uniform'"),
])
def test_true_where_it_cannot_act_is_refused(kw, match):
    X, y = small_classification(n=60)
    with pytest.raises(ValueError, match="metropolis=True") as err:
        _fit(X, y, **kw)
    assert re.search(match, str(err.value)) and "metropolis='auto'" in str(err.value)


def test_warm_start_continues_with_each_chains_step():
    X, y = small_classification(n=60)
    clf = _fit(X, y, warm_start=True)
    steps = [s["mh_step"] for s in clf._chain_states]
    clf.fit(X, y)                              # continued: no warm-up, no adaptation
    assert clf.n_warmup_ == 0
    assert [s["mh_step"] for s in clf._chain_states] == steps
    assert clf.metropolis_ and 0.2 < clf.acceptance_rate_ < 0.95


@pytest.mark.parametrize("kw", [dict(hyperprior=(1.0, 1.0)), dict(schedule="cyclical"),
                                dict(prior="isotropic"), dict(temperature=0.1)])
def test_it_runs_with_the_other_settings(kw):
    """The Gibbs step of the hyperprior (the cached potential is recomputed
    after it), a step schedule (no adaptation: the schedule's factors on the
    automatic step), the isotropic prior's exact term, a temperature."""
    X, y = small_classification(n=60)
    clf = _fit(X, y, **kw)
    assert clf.metropolis_ and 0.05 < clf.acceptance_rate_ <= 1.0, kw
    if "schedule" in kw:   # the base step is kept, not the schedule's last
        assert clf.step_size_ == pytest.approx(clf._resolved_step(60)[0])
    assert np.all(np.isfinite(clf.coef_samples_))
    assert clf.predict_proba(X).shape == (60, 3)


def test_dual_averaging_finds_the_step_of_a_known_acceptance_curve():
    """Acceptance ``exp(-h)`` (so the target 0.6 is at ``h = -log 0.6``):
    the averaged step converges to it."""
    da = DualAveraging(1.0, 0.6)
    h = 1.0
    for _ in range(2000):
        h = da.update(math.exp(-h))
    assert da.final() == pytest.approx(-math.log(0.6), rel=0.02)


def test_the_networks_metropolis_dynamics_are_the_specs():
    """The dynamics flagged ``network_metropolis`` in their definitions (no
    list of names) are Metropolis dynamics of the specs, and each has a
    network class."""
    from skbayes_sg._sampling._specs import DYNAMICS, NETWORK_METROPOLIS
    from skbayes_sg.neural_network._net_dynamics import NETWORK_DYNAMICS
    for name in NETWORK_METROPOLIS:
        assert DYNAMICS[name].metropolis and name in NETWORK_DYNAMICS
