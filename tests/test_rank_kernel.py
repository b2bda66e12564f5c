"""The compiled ESS / R-hat kernel (``diagnostics/_rank_kernel.pyx``) against
the numpy definitions it replaces in the fit (``_ess_numpy``, ``_rhat_numpy``;
those agree with ArviZ in ``test_diagnostics.py``)."""
import numpy as np
import pytest

from skbayes_sg.diagnostics import _convergence as C
from skbayes_sg.diagnostics._rank_kernel import MAX_DIRECT_PAIRS


def _ar1(rho, shape, seed):
    rng = np.random.default_rng(seed)
    e = rng.standard_normal(shape)
    x = np.empty(shape)
    x[..., 0] = e[..., 0] / np.sqrt(1 - rho ** 2)
    for t in range(1, shape[-1]):
        x[..., t] = rho * x[..., t - 1] + e[..., t]
    return x


def _cases():
    rng = np.random.default_rng(0)
    ties = np.round(rng.standard_normal((40, 4, 60)), 1)
    ties[3] = 1.0                       # constant: ESS = draws, R-hat NaN
    ties[5, 1, 3] = np.nan              # non-finite: NaN
    ties[7, 0] = 2.0                    # one chain stuck
    ties[8, :, :] = np.inf
    return {
        "iid": rng.standard_normal((50, 4, 100)),
        "odd draws": rng.standard_normal((50, 3, 101)),
        "one chain": rng.standard_normal((30, 1, 200)),
        "four draws": rng.standard_normal((20, 1, 4)),
        "antithetic": _ar1(-0.6, (30, 4, 300), 1),
        # autocorrelation past the direct sums: the FFT fallback
        "slow": _ar1(0.97, (30, 4, 600), 2),
        # a lag-1 autocorrelation past EARLY_FLAG_RHO1: the FFT at once
        "very slow": _ar1(0.995, (30, 4, 600), 4),
        "ties": ties,
        "binary": (rng.random((30, 2, 16)) < 0.3).astype(float),
        "shifted chains": rng.standard_normal((10, 4, 50)) + np.arange(4)[None, :, None],
        "float32": rng.standard_normal((20, 2, 30)).astype(np.float32),
    }


@pytest.mark.parametrize("name", list(_cases()))
def test_kernel_gives_the_numpy_definitions(name):
    a = _cases()[name]
    ess_bulk, rhat, ess_tail = C._rank_block(a, bulk=True, tail=True)
    a64 = a.astype(np.float64)
    np.testing.assert_allclose(ess_bulk, C._ess_numpy(a64, "bulk"), rtol=1e-9, atol=0)
    np.testing.assert_allclose(ess_tail, C._ess_numpy(a64, "tail"), rtol=1e-9, atol=0)
    np.testing.assert_allclose(rhat, C._rhat_numpy(a64), rtol=1e-9, atol=0)


def test_slow_chains_take_the_fft_route():
    """The case above really exercises the fallback: the Geyer sequence of an
    AR(1) at 0.97 runs past the direct sums (tau ~ 66 lags)."""
    assert (1 + 0.97) / (1 - 0.97) > 2 * MAX_DIRECT_PAIRS
    a = _ar1(0.97, (5, 4, 600), 2)
    from skbayes_sg.diagnostics._rank_kernel import rank_diagnostics
    out = [np.full(5, np.nan) for _ in range(3)]
    fallback = np.zeros(5, dtype=np.int32)
    rank_diagnostics(a, C._score_table(4 * 2 * 300), True, True, *out, fallback)
    assert np.all(fallback & 1) and np.all(np.isnan(out[0]))


def test_very_slow_chains_go_to_the_fft_at_once_with_the_kernels_scores(monkeypatch):
    """Past ``EARLY_FLAG_RHO1`` at lag 1 the kernel flags a parameter before
    any direct sum beyond lag 1 and hands its scores over: the ESS is then
    numpy's definition bit for bit (no second sort, the same scores).  Chains
    too short for the sequence to reach the limit are never flagged early."""
    from skbayes_sg.diagnostics import _rank_kernel
    assert 0.1 ** (1 / (2 * MAX_DIRECT_PAIRS)) == pytest.approx(_rank_kernel.EARLY_FLAG_RHO1,
                                                                 abs=5e-4)
    a = _ar1(0.995, (6, 4, 600), 5)
    sorts = []
    real = C._z_scale
    monkeypatch.setattr(C, "_z_scale", lambda x: sorts.append(x.shape) or real(x))
    ess_bulk, _, _ = C._rank_block(a, bulk=True)
    assert sorts == []                       # the kernel's scores were used
    monkeypatch.setattr(C, "_z_scale", real)
    np.testing.assert_array_equal(ess_bulk, C._ess_numpy(a, "bulk"))
    out = [np.full(6, np.nan) for _ in range(3)]
    for n, flagged in ((600, True), (60, False)):     # k_max 148 / 13 pairs
        fallback = np.zeros(6, dtype=np.int32)
        _rank_kernel.rank_diagnostics(a[:, :, :n], C._score_table(4 * 2 * (n // 2)), True,
                                      False, *out, fallback)
        assert bool(np.all(fallback & 1)) is flagged


def test_fit_diagnostics_use_the_kernel_in_threads():
    """``bulk_ess_and_rhat`` (the stopping rule's call) over blocks of
    parameters, with and without threads, is the numpy definition."""
    draws = _ar1(0.5, (3, 80, 2500), 3).transpose(0, 2, 1).copy()   # (m, n, P)
    a = np.ascontiguousarray(np.moveaxis(draws, 2, 0))
    for n_jobs in (None, 2):
        ess, rhat = C.bulk_ess_and_rhat(draws, n_jobs=n_jobs)
        np.testing.assert_allclose(ess, C._ess_numpy(a, "bulk"), rtol=1e-9)
        np.testing.assert_allclose(rhat, C._rhat_numpy(a), rtol=1e-9)


def test_the_fit_keeps_the_tail_ess_of_its_draws():
    """The stopping rule's pass also gives the tail ESS; the post-fit warning
    reads it instead of sorting the draws again: it is the tail ESS of the
    stored draws."""
    from sklearn.datasets import make_classification

    from skbayes_sg import SGMCMCLogisticRegression
    from skbayes_sg.diagnostics._advice import assess
    X, y = make_classification(200, 4, random_state=0)
    est = SGMCMCLogisticRegression(n_samples=60, random_state=0).fit(X, y)
    fresh = assess(est)
    np.testing.assert_allclose(est._ess_tail, fresh.ess_tail, rtol=1e-9)
    np.testing.assert_allclose(est.ess_, fresh.ess_bulk, rtol=1e-9)
