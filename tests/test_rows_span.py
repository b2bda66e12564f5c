"""Fewer rows than coefficients: the posterior sampled in the rows' span.

The route (``skbayes_sg._rows_span``) samples ``u`` on the columns ``Z =
X_ext V`` and draws the coefficients' part orthogonal to the rows from the
prior, exactly.  Checked against the route on the coefficients themselves
(forced by ``ROWS_SPAN_RATIO = inf``), which the rest of the suite tests
against exact and independent references: the same evidence maximum, the
same mode, posterior means within ``Z`` combined Monte Carlo standard errors
and sds within ``Z`` standard errors of their ratio; a column of zeros (which
no row spans) has the prior's sd exactly.  The benchmark
(``benchmarks/bench_few_rows.py --reference``) checks 500 x 5,000 fits
against an independent reference.
"""
import numpy as np
import pytest
import scipy.sparse as sp

from skbayes_sg import SGMCMCLogisticRegression, SGMCMCPoissonRegressor, _rows_span

Z = 4.5


def _rows(seed=0, n=60, d=300):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    X[:, 7] = 0.0                              # no row spans this coefficient
    eta = X[:, :5].sum(axis=1)
    return X, eta, rng


def _both(make, X, y, monkeypatch, **fit):
    span = make().fit(X, y, **fit)
    with monkeypatch.context() as m:
        m.setattr(_rows_span, "ROWS_SPAN_RATIO", np.inf)
        full = make().fit(X, y, **fit)
    return span, full


def _assert_same_posterior(span, full):
    """Means within Z combined Monte Carlo se; sd ratios within Z se."""
    a = np.concatenate([span.coef_samples_, span.intercept_samples_[..., None]], axis=-1)
    b = np.concatenate([full.coef_samples_, full.intercept_samples_[..., None]], axis=-1)
    a, b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    sd = b.std(axis=0, ddof=1)
    se = np.sqrt(a.var(axis=0) / span.ess_ + b.var(axis=0) / full.ess_)
    z = (a.mean(axis=0) - b.mean(axis=0)) / se
    assert np.abs(z).max() < Z, np.abs(z).max()
    ratio = a.std(axis=0, ddof=1) / sd
    ratio_se = np.sqrt(0.5 / span.ess_ + 0.5 / full.ess_)
    assert np.all(np.abs(ratio - 1.0) < Z * ratio_se), (ratio.min(), ratio.max())


def test_logistic_in_the_rows_span_is_the_posterior_of_the_coefficients(monkeypatch):
    """60 weighted rows of 300 features at alpha="auto": the route is taken
    (``n_rows_span_``), finds the same alpha_ and mode, and samples the same
    posterior; the unspanned coefficient has the prior's sd exactly."""
    X, eta, rng = _rows()
    y = (eta + rng.logistic(size=60) > 0).astype(int)
    w = rng.integers(1, 4, size=60).astype(float)
    span, full = _both(lambda: SGMCMCLogisticRegression(alpha="auto", random_state=0), X, y,
                       monkeypatch, sample_weight=w)
    assert span.n_rows_span_ == 60 and not hasattr(full, "n_rows_span_")
    assert span.alpha_ == pytest.approx(full.alpha_, rel=1e-3)
    # each search stops its modes within 0.01 posterior sd (and its alpha within
    # the evidence's tolerance), so the two modes agree to about that
    sd = np.r_[full.coef_std_, full.intercept_std_]
    assert np.abs((span.mode_ - full.mode_)[0] / sd).max() < 0.02
    _assert_same_posterior(span, full)
    assert span.coef_std_[7] == pytest.approx(1.0 / np.sqrt(span.alpha_), rel=1e-12)
    draws = span.coef_samples_[..., 7].ravel()
    assert abs(draws.std() * np.sqrt(span.alpha_) - 1.0) < Z / np.sqrt(2 * draws.size)
    assert np.abs(span.predict_proba(X) - full.predict_proba(X)).max() < 0.05


def test_poisson_in_the_rows_span_on_sparse_rows(monkeypatch):
    """Counts on 50 CSR rows of 400 features at a given alpha: the same
    posterior as on the coefficients; the passes of the basis counted."""
    X, eta, rng = _rows(1, 50, 400)
    y = rng.poisson(np.exp(0.3 + 0.1 * eta))
    span, full = _both(lambda: SGMCMCPoissonRegressor(alpha=20.0, random_state=1),
                       sp.csr_matrix(X), y, monkeypatch)
    assert span.n_rows_span_ == 50
    sd = np.r_[full.coef_std_, full.intercept_std_]
    assert np.abs((span.mode_ - full.mode_)[0] / sd).max() < 0.02   # modes to 0.01 sd each
    _assert_same_posterior(span, full)
    assert span.n_setup_passes_ > 50


def test_the_route_is_taken_only_where_it_holds():
    """More rows than half the coefficients, several classes, a warm start,
    a start given as an array, or sparse rows (a pass over them costs less
    than one over the span's dense columns): the coefficients' route (no
    ``n_rows_span_``, also after a fit that had one)."""
    X, eta, rng = _rows(2, 60, 100)
    y = (eta > 0).astype(int)
    est = SGMCMCLogisticRegression(n_samples=20, random_state=0)
    assert not hasattr(est.fit(X, y), "n_rows_span_")
    wide = np.hstack([X, X])
    assert est.fit(wide, y).n_rows_span_ == 60
    assert not hasattr(est.fit(X, y), "n_rows_span_")
    classes = (eta > 0).astype(int) + (eta > 1)
    assert not hasattr(SGMCMCLogisticRegression(n_samples=20, random_state=0).fit(
        wide, classes), "n_rows_span_")
    assert not hasattr(SGMCMCLogisticRegression(n_samples=20, warm_start=True,
                                                random_state=0).fit(wide, y), "n_rows_span_")
    assert not hasattr(SGMCMCLogisticRegression(n_samples=20, init=np.zeros(201),
                                                random_state=0).fit(wide, y), "n_rows_span_")
    text = sp.random(60, 400, density=0.01, format="csr", random_state=0)
    assert not hasattr(SGMCMCLogisticRegression(n_samples=20, random_state=0).fit(
        text, y), "n_rows_span_")
