"""Dual averaging of the step (Hoffman and Gelman, 2014; Stan's constants),
written once in ``_sampling/_dual_averaging.pxd`` and used by the linear
kernels (``Dynamics.record_accept``) and the network's Metropolis step."""

import math
from pathlib import Path

import numpy as np
import pytest

from skbayes_sg._sampling import _dual_averaging
from skbayes_sg._sampling._dual_averaging import DUAL_AVERAGING, DualAveraging


def _reference(h0, target, accepts, max_step=math.inf):
    """The rule as Hoffman and Gelman (2014, Algorithm 5) write it, with
    Stan's constants (gamma 0.05, t0 10, kappa 0.75, mu = log 10 h0); the
    final step as this library keeps it (the average, or the smaller of it
    and the last iterate before 20 updates)."""
    mu, hbar, log_hbar, log_h, steps = math.log(10 * h0), 0.0, 0.0, math.log(h0), []
    for t, a in enumerate(accepts, start=1):
        hbar = (1 - 1 / (t + 10)) * hbar + (target - a) / (t + 10)
        log_h = min(mu - math.sqrt(t) / 0.05 * hbar, math.log(max_step))
        log_hbar = t ** -0.75 * log_h + (1 - t ** -0.75) * log_hbar
        steps.append(math.exp(log_h))
    final = log_hbar if len(accepts) >= 20 else min(log_hbar, log_h)
    return steps, min(math.exp(final), max_step)


@pytest.mark.parametrize("n, max_step", [(200, math.inf), (200, 0.5), (7, math.inf)])
def test_the_rule_is_hoffman_and_gelmans(n, max_step):
    accepts = np.random.default_rng(n).uniform(size=n)
    da = DualAveraging(0.3, 0.65, max_step)
    steps = [da.update(a) for a in accepts]
    ref_steps, ref_final = _reference(0.3, 0.65, accepts, max_step)
    np.testing.assert_allclose(steps, ref_steps, rtol=1e-12)
    assert da.final() == pytest.approx(ref_final, rel=1e-12)
    assert da.n_updates == n
    assert DUAL_AVERAGING == {"gamma": 0.05, "t0": 10.0, "kappa": 0.75, "settled": 20}


def test_a_step_must_be_positive():
    with pytest.raises(ValueError, match="h must be > 0"):
        DualAveraging(0.0, 0.6)


def test_one_definition_for_both_engines():
    """The network's Metropolis step adapts with this class, and the linear
    kernel calls the same inline functions, with no formula of its own. The
    kernel is read as text (its source is in the repository); the network
    file is imported only where torch is."""
    kernel = (Path(_dual_averaging.__file__).parent / "_dynamics.pyx")
    if not kernel.exists():
        pytest.skip("the kernel's source is not next to the package")
    source = kernel.read_text()
    for call in ("dual_averaging_start(", "dual_averaging_update(", "dual_averaging_final("):
        assert call in source, call
    for formula in ("DA_GAMMA", "DA_KAPPA", "log(10.0"):
        assert formula not in source, formula
    pytest.importorskip("torch")
    from skbayes_sg.neural_network import _net_metropolis
    assert _net_metropolis.DualAveraging is DualAveraging
