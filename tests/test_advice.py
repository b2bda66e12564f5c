"""One writer of convergence advice: the warning at the end of ``fit`` and
``check_convergence`` on the same fitted estimator say the same thing.

Before, the fit's warning and ``check_convergence`` measured with different
targets and rounded differently: for one 200-draw fit they recommended
``n_samples=12,164`` (fit), 400 (R-hat advice) and 12,200 (ESS advice), and
``n_warmup='auto'`` against ``n_warmup=1000``.  Both now call
``skbayes_sg.diagnostics._advice``.
"""
import re
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import scale

from skbayes_sg import SGMCMCLogisticRegression, SGMCMCRidge
from skbayes_sg.diagnostics import MCMCConvergenceWarning, check_convergence
from skbayes_sg.diagnostics._advice import assess, ess_targets, recommend
from skbayes_sg.diagnostics._convergence import ess, rhat


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    return scale(X), y


def _fit_and_check(est, X, y):
    """(the fit's warning text, check_convergence's texts, its verdict)."""
    with warnings.catch_warnings(record=True) as fit_caught:
        warnings.simplefilter("always", MCMCConvergenceWarning)
        est.fit(X, y)
    fit_texts = [str(w.message) for w in fit_caught
                 if issubclass(w.category, MCMCConvergenceWarning)]
    with warnings.catch_warnings(record=True) as check_caught:
        warnings.simplefilter("always", MCMCConvergenceWarning)
        converged = check_convergence(est)
    return fit_texts, [str(w.message) for w in check_caught], converged


def _numbers(text):
    """Every ``n_samples=``, ``n_warmup=``, ``thin=`` and ``max_passes=`` value named."""
    return set(re.findall(r"\b(n_samples|n_warmup|thin|max_passes)=('auto'|\d+(?:\.\d+)?"
                          r"(?:e[+-]?\d+)?)", text))


@pytest.mark.parametrize("n_samples", [20, 200])
def test_fit_warning_and_check_convergence_recommend_the_same_numbers(cancer, n_samples):
    X, y = cancer
    est = SGMCMCLogisticRegression(n_samples=n_samples, random_state=0)
    fit_texts, check_texts, converged = _fit_and_check(est, X, y)
    assert len(fit_texts) == 1 and check_texts and not converged
    fit_text = fit_texts[0]
    # the check's warnings are the fit's sentences (the fit adds nothing here)
    assert fit_text == " ".join(check_texts)
    advice = recommend(est, assess(est))
    named = _numbers(fit_text)
    assert ("n_samples", str(advice["n_samples"])) in named
    assert advice["n_samples"] > n_samples
    # one length for the ESS and the R-hat advice, not one each
    assert {v for k, v in named if k == "n_samples"} == {"'auto'", str(n_samples),
                                                          str(advice["n_samples"])}
    # the warm-up is automatic: the advice keeps it so
    assert "n_warmup='auto'" in fit_text and advice["n_warmup"] == "auto"


def test_the_recommended_length_reaches_the_target_at_the_measured_pace(cancer):
    X, y = cancer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCMCConvergenceWarning)
        est = SGMCMCLogisticRegression(n_samples=60, random_state=1).fit(X, y)
    report = assess(est)
    draws = np.concatenate([est.coef_samples_, est.intercept_samples_[..., None]], axis=2)
    # the fit's ESS and R-hat are those of the kept draws, recomputed here
    np.testing.assert_allclose(report.ess_bulk, ess(draws), rtol=1e-8)
    np.testing.assert_allclose(report.ess_tail, ess(draws, "tail"), rtol=1e-8)
    np.testing.assert_allclose(report.rhat, rhat(draws), rtol=1e-8)
    kind, i, value, target = report.ess_shortfall()
    assert target == 400 and value < 400
    ratio = min(np.nanmin(ess(draws)), np.nanmin(ess(draws, "tail"))) / 400
    assert value / 400 == pytest.approx(ratio)
    need = int(np.ceil(60 * target / value))
    assert recommend(est, report)["n_samples"] == max(need, 2 * 60 * (report.rhat_failures()
                                                                       .size > 0))


def test_a_budget_cut_auto_fit_gets_the_same_budget_advice_from_both():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = X @ [1.0, -1.0, 0.5] + rng.normal(scale=0.5, size=200)
    est = SGMCMCRidge(noise_var=0.3, sampler="baoab", subsampling="full", max_passes=300,
                      random_state=0)
    fit_texts, check_texts, converged = _fit_and_check(est, X, y)
    assert not converged and len(fit_texts) == 1
    # the fit's own target (target_ess_), not 100 per chain, for both
    assert ess_targets(est, est.n_chains)[0] == est.target_ess_ > 400
    assert f"short of the target {est.target_ess_:.0f}" in fit_texts[0]
    assert "the budget ran out. Raise max_passes (the budget was 300 data passes" \
        in check_texts[0]
    assert _numbers(fit_texts[0]) == _numbers(" ".join(check_texts))
    assert any(k == "max_passes" for k, _ in _numbers(fit_texts[0]))


class _Fit:
    """A duck-typed fitted estimator with given draws and settings."""

    def __init__(self, coef, **params):
        self.coef_samples_ = coef
        self.intercept_samples_ = np.zeros(coef.shape[:2])
        self.fit_intercept = False
        self._params = {"n_samples": coef.shape[1], "n_warmup": 300, "thin": 2, **params}

    def get_params(self):
        return dict(self._params)


def test_recommend_rules():
    rng = np.random.default_rng(0)
    iid = rng.normal(size=(4, 200, 2))
    fit = _Fit(iid)
    report = assess(fit, min_ess_per_chain=500)              # 2000 needed, ~800 there
    kind, _, value, target = report.ess_shortfall()
    assert target == 2000 and value < 2000 and not report.rhat_failures().size
    advice = recommend(fit, report)
    assert advice["n_samples"] == int(np.ceil(200 * 2000 / value))
    assert advice["thin"] == 2 * int(np.ceil(advice["n_samples"] / 200))
    assert advice["n_warmup"] is None                       # R-hat passes: warm-up is fine
    # chains apart: R-hat fails; the warm-up is doubled (at least 1000)
    apart = iid + np.arange(4)[:, None, None]
    report = assess(_Fit(apart), min_ess_per_chain=1)
    assert report.ess_shortfall() is None and report.rhat_failures().size == 2
    advice = recommend(_Fit(apart), report)
    assert advice["n_samples"] == 400 and advice["n_warmup"] == 1000
    assert recommend(_Fit(apart, n_warmup="auto"), report)["n_warmup"] == "auto"
    assert recommend(_Fit(apart, n_warmup=800), report)["n_warmup"] == 1600
    # independent draws pass, silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_convergence(_Fit(rng.normal(size=(4, 500, 2)))) is True


def test_a_warmup_rule_gets_a_number():
    """A fit whose n_warmup="auto" is a fixed rule (the network: no target_ess)
    and that reports the length it used gets a number to raise it to."""
    rng = np.random.default_rng(0)
    apart = rng.normal(size=(4, 200, 2)) + np.arange(4)[:, None, None]
    fit = _Fit(apart, n_warmup="auto")
    fit.n_warmup_ = 1500
    report = assess(fit, min_ess_per_chain=1)
    assert recommend(fit, report)["n_warmup"] == 3000


def test_the_shared_start_caveat_reads_what_the_fit_recorded(cancer):
    """R-hat's "chains started at the same point" caveat follows the start the
    fit used (``init="auto"`` is the mode without a metric and per-chain
    Laplace draws with one; "prior" draws per chain; an array is shared), and
    a ``warm_start`` continuation keeps the record of the fit that started
    its chains."""
    X, y = cancer
    cases = [("auto", "identity", True), ("auto", "auto", False), ("prior", "auto", False),
             (np.zeros(X.shape[1] + 1), "auto", True)]
    for init, metric, shared in cases:
        est = SGMCMCLogisticRegression(init=init, metric=metric, n_samples=50, n_warmup=50,
                                       random_state=0, warm_start=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCMCConvergenceWarning)
            est.fit(X, y)
            assert est._chains_share_a_start() is shared, (init, metric)
            est.fit(X, y)   # continued: no new start, the same record
        assert est._chains_share_a_start() is shared, (init, metric)


def test_fewer_rows_than_coefficients_at_a_given_alpha_name_alpha_auto():
    """A given alpha on fewer rows than coefficients: the prior shapes the
    posterior, and a wide one lets the classes separate (500 rows of 5,000
    features at alpha=1 did not converge in 12,000 passes; alpha='auto'
    converged in 18,000).  An unconverged fit says so, with the prior sd of
    a row's logit, and names alpha='auto' (so does check_convergence); with
    more rows than coefficients, or at alpha='auto', it does not."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 200))
    y = (X[:, :5].sum(axis=1) > 0).astype(int)
    fit_texts, check_texts, converged = _fit_and_check(
        SGMCMCLogisticRegression(n_samples=20, random_state=0), X, y)
    assert not converged and len(fit_texts) == 1
    logit_sd = np.sqrt(np.median(np.sum(X * X, axis=1)) + 1.0)
    for text in (fit_texts[0], " ".join(check_texts)):
        assert "more coefficients (201) than rows (40)" in text
        assert f"prior sd of {logit_sd:.3g}" in text and "alpha='auto'" in text
    for est, rows in [(SGMCMCLogisticRegression(n_samples=20, random_state=0), X[:, :30]),
                      (SGMCMCLogisticRegression(alpha="auto", n_samples=20, random_state=0),
                       X)]:
        fit_texts, _, converged = _fit_and_check(est, rows, y)
        assert not converged and "more coefficients" not in fit_texts[0]


def test_fewer_rows_than_coefficients_name_the_prior_for_counts(monkeypatch):
    """Counts on fewer rows than coefficients at alpha=1: a row's log-rate
    has a prior sd of ~14 here (45 at 2,000 features), and the posterior is
    far from Gaussian.  Sampled in the rows' span (the default route here)
    the Poisson and negative binomial chains diverge; sampled in the
    coefficients (the route with more rows) the Poisson's did not move (300 x
    2,000: a step of 1e-11 after 74,000 passes).  Each message advised only
    a smaller step; each now leads with the prior and its fix, alpha='auto'
    (with which the Poisson refits silently)."""
    from skbayes_sg import SGMCMCNegativeBinomialRegressor, SGMCMCPoissonRegressor, _rows_span
    from skbayes_sg.exceptions import SamplingDivergedError
    rng = np.random.default_rng(0)
    X = rng.standard_normal((40, 200))
    y = rng.poisson(1.5, size=40)
    sd = f"prior sd of {np.sqrt(np.median(np.sum(X * X, axis=1)) + 1.0):.3g}"
    for Est in (SGMCMCPoissonRegressor, SGMCMCNegativeBinomialRegressor):
        with pytest.raises(SamplingDivergedError) as info:
            Est(random_state=0).fit(X, y)
        assert "more coefficients (201) than rows (40)" in str(info.value)
        assert sd in str(info.value) and "alpha='auto' chooses the prior" in str(info.value)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        SGMCMCPoissonRegressor(alpha="auto", random_state=0).fit(X, y)
    assert not [str(w.message) for w in caught]
    monkeypatch.setattr(_rows_span, "ROWS_SPAN_RATIO", np.inf)
    with pytest.warns(UserWarning, match="did not move") as caught:
        SGMCMCPoissonRegressor(random_state=0).fit(X, y)
    text = " ".join(str(w.message) for w in caught)
    assert "more coefficients (201) than rows (40)" in text and sd in text
    assert text.index("alpha='auto' chooses") < text.index("Otherwise: the step adaptation")
