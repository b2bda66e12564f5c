"""PSIS-LOO (skbayes_sg.diagnostics.loo / compare): exact references.

The reference of the small problems is exact: a logistic regression with one
feature and an intercept under the estimator's N(0, I) prior, whose
leave-one-out predictive ``p(y_i | y_-i) = 1 / E_post[1 / p(y_i | theta)]``
is integrated on a grid (converged to 1e-9, checked).  Tolerances are Monte
Carlo errors: the estimate's own ``mcse_elpd_loo`` plus the exact-case budget
``exact_tol``.
"""
import warnings

import numpy as np
import pytest
from scipy.special import log_expit, logsumexp
from sklearn.base import clone

from skbayes_sg import SGMCMCLogisticRegression
from skbayes_sg.diagnostics import LOOResult, LOOWarning, compare, loo, psislw


def _loglik(X, y, W, B):
    """log p(y_i | w, b) for the grid points (W, B): (n_obs, n_points)."""
    z = X[:, :1] * W[None] + B[None]
    return np.where(y[:, None] == 1, log_expit(z), log_expit(-z))


def _grid(w_lo, w_hi, b_lo, b_hi, m):
    W, B = np.meshgrid(np.linspace(w_lo, w_hi, m), np.linspace(b_lo, b_hi, m), indexing="ij")
    return W.ravel(), B.ravel()


def exact_loo(X, y, alpha=1.0, size=241):
    """Exact elpd_loo_i by quadrature over (w, b): a coarse grid finds the
    posterior's location and scale, a fine one +-10 sds integrates."""
    W, B = _grid(-10, 20, -10, 10, 121)
    lp = _loglik(X, y, W, B).sum(0) - 0.5 * alpha * (W ** 2 + B ** 2)
    p = np.exp(lp - logsumexp(lp))
    mw, mb = p @ W, p @ B
    sw, sb = np.sqrt(p @ (W - mw) ** 2), np.sqrt(p @ (B - mb) ** 2)
    W, B = _grid(mw - 10 * sw, mw + 10 * sw, mb - 10 * sb, mb + 10 * sb, size)
    ll = _loglik(X, y, W, B)
    lp = ll.sum(0) - 0.5 * alpha * (W ** 2 + B ** 2)
    log_post = lp - logsumexp(lp)
    return -logsumexp(log_post[None] - ll, axis=1), (W, B, log_post)


def separable_problem(seed=1, n=40):
    """One feature, nearly separable, eight rows far out (|x| >= 12): their
    log-likelihood is nearly 0 on every draw, the exact case."""
    rng = np.random.RandomState(seed)
    X = rng.normal(size=(n, 1)) * 2.0
    X[:8, 0] = [12, 13, 14, 15, -12, -13, -14, -15]
    y = (rng.random_sample(n) < 1 / (1 + np.exp(-4 * X[:, 0]))).astype(int)
    return X, y


@pytest.fixture(scope="module")
def problem():
    X, y = separable_problem()
    exact, grid = exact_loo(X, y)
    coarse, _ = exact_loo(X, y, size=181)
    assert abs(exact.sum() - coarse.sum()) < 1e-9        # the quadrature converged
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                    # convergence notes of a short fit
        est = SGMCMCLogisticRegression(alpha=1.0, n_samples=1000, n_jobs=1,
                                       random_state=0).fit(X, y)
    return X, y, exact, grid, est


def test_psis_matches_exact_loo_on_iid_posterior_draws(problem):
    X, y, exact, (W, B, log_post), _ = problem
    rng = np.random.RandomState(0)
    S = 4000
    pick = rng.choice(W.size, size=S, p=np.exp(log_post))
    step_w, step_b = np.ptp(W) / 240, np.ptp(B) / 240           # jitter within a cell
    Wd = W[pick] + (rng.random_sample(S) - 0.5) * step_w
    Bd = B[pick] + (rng.random_sample(S) - 0.5) * step_b
    res = loo(_loglik(X, y, Wd, Bd).T, r_eff=1.0, warn=False)
    assert np.all(np.isfinite(res.elpd_loo_i))
    # 5 Monte Carlo standard errors (plus the budget of the exact case)
    tol = 5 * res.mcse_elpd_loo + 0.01
    assert abs(res.elpd_loo - exact.sum()) < tol
    # the in-sample lpd is too optimistic by p_loo (0.56), far beyond that
    assert res.lpd - exact.sum() > 5 * tol


def test_loo_of_a_fit_matches_exact_loo_on_separable_data(problem):
    X, y, exact, _, est = problem
    res = loo(est, X, y, warn=False)
    assert isinstance(res, LOOResult)
    assert np.isfinite(res.elpd_loo) and np.isfinite(res.se)
    # the criterion (within its standard error) and a Monte Carlo one
    assert abs(res.elpd_loo - exact.sum()) < res.se
    assert abs(res.elpd_loo - exact.sum()) < 5 * res.mcse_elpd_loo + 0.01
    # the far rows are the exact case: uniform weights, elpd_loo_i = lpd_i
    far = np.arange(8)
    assert np.all(res.pareto_k[far] == -np.inf)
    np.testing.assert_allclose(res.elpd_loo_i[far], res.lpd_i[far], rtol=0, atol=1e-15)
    np.testing.assert_allclose(res.elpd_loo_i[far], exact[far], rtol=0, atol=0.01)
    assert res.p_loo > 0 and res.p_loo < 3       # two parameters


def test_loo_matches_brute_force_refits(problem):
    """elpd_loo of one fit against n refits without each row (fixed seeds)."""
    X, y, exact, _, est = problem
    res = loo(est, X, y, warn=False)
    brute = np.empty(len(y))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(len(y)):
            keep = np.arange(len(y)) != i
            refit = clone(est).fit(X[keep], y[keep])
            ll = refit.log_likelihood(X[i:i + 1], y[i:i + 1]).ravel()
            brute[i] = logsumexp(ll) - np.log(ll.size)
    assert abs(brute.sum() - exact.sum()) < 0.1            # the refits are right
    assert abs(res.elpd_loo - brute.sum()) < res.se
    assert abs(res.elpd_loo - brute.sum()) < 5 * res.mcse_elpd_loo + 0.1


def test_constant_and_tiny_log_likelihoods_are_the_exact_case():
    """The breast-cancer rows: log-likelihoods between -1e-45 and -1e-10 on
    every draw.  ArviZ's Pareto fit divides by zero there; here k = -inf and
    elpd_loo_i = lpd_i."""
    rng = np.random.RandomState(0)
    S = 2000
    ll = np.column_stack([
        -np.exp(rng.uniform(np.log(1e-45), np.log(1e-10), S)),   # tiny, varying
        np.full(S, -0.3),                                           # constant
        -np.exp(-rng.normal(35.0, 3.0, S)),                         # lognormal tail, tiny
        np.log(rng.uniform(0.2, 0.9, S)),                           # an ordinary row
    ])
    res = loo(ll, r_eff=1.0, warn=False)
    assert np.all(np.isfinite(res.elpd_loo_i))
    np.testing.assert_array_equal(res.pareto_k[:3], -np.inf)
    np.testing.assert_allclose(res.elpd_loo_i[:3], [ll[:, j].mean() for j in range(3)],
                               rtol=0, atol=1e-12)
    assert np.isfinite(res.pareto_k[3]) and res.pareto_k[3] < 0.7
    # only exactly constant ratios with exact_tol=0; the others are then fitted
    strict = loo(ll, r_eff=1.0, exact_tol=0, warn=False)
    assert strict.pareto_k[1] == -np.inf and np.all(np.isfinite(strict.pareto_k[[0, 2]]))
    assert np.all(np.isfinite(strict.elpd_loo_i))


def test_psislw_agrees_with_arviz_on_regular_ratios():
    az = pytest.importorskip("arviz")
    if not hasattr(az, "psislw"):
        pytest.skip("ArviZ 1.x moved psislw")
    rng = np.random.RandomState(1)
    log_ratios = rng.normal(0.0, 0.8, size=(3000, 5)) + rng.gumbel(0, 0.3, size=(3000, 5))
    mine_lw, mine_k = psislw(log_ratios, 1.0, exact_tol=0)
    theirs_lw, theirs_k = az.psislw(log_ratios.T.copy(), reff=1.0)
    np.testing.assert_allclose(mine_k, np.asarray(theirs_k), rtol=0, atol=1e-10)
    np.testing.assert_allclose(mine_lw, np.asarray(theirs_lw).T, rtol=0, atol=1e-10)


def test_heavy_tailed_ratios_warn_with_advice():
    rng = np.random.RandomState(2)
    S = 4000
    # ratios Pareto with k = 1.2 for the first row: the warning names it
    ll = np.column_stack([-1.2 * rng.exponential(size=S), np.log(rng.uniform(0.3, 0.9, S))])
    with pytest.warns(LOOWarning, match=r"1 of 2 observations.*rows 0\b.*K-fold"):
        res = loo(ll, r_eff=1.0)
    assert res.pareto_k[0] > 0.9 and list(res.bad_k) == [0]
    with pytest.raises(ValueError, match="reloo=True refits the estimator"):
        loo(ll, reloo=True)


def test_reloo_refits_the_bad_rows(problem, monkeypatch):
    X, y, exact, _, est = problem
    from skbayes_sg.diagnostics import _loo
    base = loo(est, X, y, warn=False)
    calls = []

    def fake_psis(log_ratios, r_eff=1.0, *, exact_tol=0.01):
        lw, k = psislw(log_ratios, r_eff, exact_tol=exact_tol)
        k = k.copy()
        k[10] = 0.95                       # pretend row 10 is unreliable
        return lw, k

    def fake_refit(estimator, X_, y_, i):
        calls.append(i)
        return exact[i], 0.0

    monkeypatch.setattr(_loo, "psislw", fake_psis)
    monkeypatch.setattr(_loo, "_refit_elpd", fake_refit)
    res = loo(est, X, y, reloo=True)       # no warning: the bad row was refitted
    assert calls == [10]
    assert res.elpd_loo_i[10] == exact[10] and list(res.refitted) == [10]
    assert len(res.bad_k) == 0
    np.testing.assert_array_equal(np.delete(res.elpd_loo_i, 10), np.delete(base.elpd_loo_i, 10))


def test_loo_reads_the_arviz_export_like_the_estimator(problem):
    pytest.importorskip("arviz")
    X, y, _, _, est = problem
    a = loo(est, X, y, warn=False)
    b = loo(est.to_inference_data(X, y), warn=False)
    np.testing.assert_allclose(b.elpd_loo_i, a.elpd_loo_i, rtol=0, atol=1e-12)
    np.testing.assert_allclose(b.r_eff, a.r_eff, rtol=1e-12)


def test_compare_ranks_models_and_weights_them(problem):
    X, y, _, _, est = problem
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # a model that ignores the feature: far worse on this data
        noise = np.random.RandomState(0).normal(size=X.shape)
        blind = clone(est).fit(noise, y)
    good = loo(est, X, y, warn=False)
    bad = loo(blind, noise, y, warn=False)
    table = compare({"feature": good, "noise": bad, "same": good})
    rows = list(table.index)
    assert rows[-1] == "noise"
    values = np.asarray(table["elpd_diff"], dtype=float)
    assert values[0] == 0 and values[-1] == pytest.approx(good.elpd_loo - bad.elpd_loo)
    dse = np.asarray(table["dse"], dtype=float)
    diff = good.elpd_loo_i - bad.elpd_loo_i
    assert dse[-1] == pytest.approx(np.sqrt(len(diff) * np.var(diff, ddof=1)))
    weights = np.asarray(table["weight"], dtype=float)
    assert weights.sum() == pytest.approx(1.0) and weights[-1] < 0.05
    with pytest.raises(ValueError, match="different numbers of observations"):
        compare({"a": good, "b": loo(good.elpd_loo_i[None, :5].repeat(8, 0), warn=False)})


def test_breast_cancer_gives_a_finite_elpd():
    """The README's example: the export's az.loo gives NaN (ArviZ 0.x); this
    helper gives a finite elpd_loo whose exact rows are the confident ones."""
    from sklearn.datasets import load_breast_cancer
    from sklearn.preprocessing import scale
    X, y = load_breast_cancer(return_X_y=True)
    X = scale(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = SGMCMCLogisticRegression(random_state=0).fit(X, y)
        res = loo(clf, X, y)
    assert np.isfinite(res.elpd_loo) and np.all(np.isfinite(res.elpd_loo_i))
    # 569 brute-force refits without each row (random_state=0) gave -42.56:
    # within the standard error (the criterion; a default fit's
    # estimate is optimistic by about 1 nat, its bad k-hats say so)
    assert abs(res.elpd_loo - (-42.56)) < res.se
    assert np.sum(res.pareto_k == -np.inf) > 20
    assert 0 < res.p_loo < 31


def test_loo_input_errors(problem):
    X, y, _, _, est = problem
    with pytest.raises(ValueError, match="pass X and y"):
        loo(est)
    with pytest.raises(ValueError, match="X and y are read only with a fitted estimator"):
        loo(np.zeros((10, 3)), X, y)
    with pytest.raises(ValueError, match="exact_tol"):
        loo(np.zeros((10, 3)), exact_tol=-1)
    with pytest.raises(ValueError, match="non-finite"):
        loo(np.full((10, 3), -np.inf))
    with pytest.raises(ValueError, match="r_eff"):
        loo(np.zeros((10, 3)), r_eff="fast")
