"""Row weights: ``fit(X, y, sample_weight=w)`` and ``class_weight``.

The weights are frequency weights: the potential is
``alpha/2 ||theta||^2 + sum_i w_i U_i``, so an integer weight must give the
posterior of the data with that row repeated ``w_i`` times (a zero weight:
the data without it).  The references are built from the *repeated* data,
never from weights: the exact conjugate posterior (ridge) and a long
independence Metropolis-Hastings run (logistic, ``tests/_reference.py``).

Monte Carlo tolerances follow ``tests/test_posterior.py``: ``Z`` standard
errors of the sampled moments (the reference's own error added for the MH
reference), plus, for sds, the bias the automatic step and batch are allowed
(``_error_model.VARIANCE_ERROR`` in variance, i.e. half of it in sd).
"""
import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.preprocessing import StandardScaler
from sklearn.utils.class_weight import compute_sample_weight

import _reference as ref
from skbayes_sg import SGMCMCLogisticRegression, SGMCMCRidge
from skbayes_sg._sampling import _error_model
from skbayes_sg.linear_model._ridge import _maximise_evidence

Z = 4.5
SD_BIAS = np.sqrt(1.0 + _error_model.VARIANCE_ERROR) - 1.0
NOISE_VAR = 0.6
SMALL = dict(n_samples=100, n_warmup=100, n_chains=2)


def _draws(est):
    """(n_chains, n_draws, p): coefficients then intercept."""
    return np.concatenate([est.coef_samples_, est.intercept_samples_[..., None]], axis=-1)


@pytest.fixture(scope="module")
def diabetes():
    X, y = load_diabetes(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    y = (y - y.mean()) / y.std()
    w = np.random.default_rng(0).integers(0, 4, size=len(y))   # zeros included
    return X, y, w


@pytest.fixture(scope="module")
def cancer():
    """Breast cancer (10 features) with integer weights."""
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)[:, :10]
    w = np.random.default_rng(1).integers(0, 4, size=len(y))
    return X, y.astype(float), w


@pytest.fixture(scope="module")
def cancer_reference(cancer):
    """Independence MH on the repeated data (its own MC error is carried
    into the tolerances through its ESS)."""
    X, y, w = cancer
    Xe = ref.add_ones(np.repeat(X, w, axis=0))
    yr = np.repeat(y, w)
    mode, cov = ref.logistic_laplace(Xe, yr, 1.0)
    draws, accept = ref.independence_mh(lambda T: ref.logistic_log_post(T, Xe, yr, 1.0),
                                        mode, cov, 25_000, 4, seed=3)
    assert accept > 0.3, accept
    return draws


def _assert_same_law(draws, ref_mean, ref_sd, ref_mean_se=None, ref_sd_se=None, what=""):
    mean, _, se, _ = ref.mean_and_se(draws)
    sd, sd_se = ref.sd_and_se(draws)
    if ref_mean_se is not None:
        se, sd_se = np.hypot(se, ref_mean_se), np.hypot(sd_se, ref_sd_se)
    z_mean = (mean - ref_mean) / se
    sd_excess = np.maximum(np.abs(sd / ref_sd - 1.0) - SD_BIAS, 0.0) * ref_sd / sd_se
    print(f"{what}: max |z| mean {np.abs(z_mean).max():.2f}, sd ratios "
          f"[{(sd / ref_sd).min():.3f}, {(sd / ref_sd).max():.3f}], max sd z beyond the "
          f"bias allowance {sd_excess.max():.2f}")
    assert np.all(np.abs(z_mean) < Z), f"{what}: means off, z {np.round(z_mean, 2)}"
    assert np.all(sd_excess < Z), (
        f"{what}: sds off: ratios {np.round(sd / ref_sd, 3)}, z beyond the "
        f"{SD_BIAS:.3f} allowance {np.round(sd_excess, 2)}")


# ------------------------------------------------------------ exact answers
@pytest.mark.parametrize("subsampling", ["auto", "uniform", "cv-preferential", "svrg"])
def test_ridge_integer_weights_give_the_posterior_of_repeated_rows(diabetes, subsampling):
    """Weighted fit vs the exact conjugate posterior of the repeated data
    (rows of weight 0 dropped), at the default sampler and step."""
    X, y, w = diabetes
    Xr, yr = np.repeat(X, w, axis=0), np.repeat(y, w)
    mean, cov, _ = ref.ridge_posterior(Xr, yr, 1.0, NOISE_VAR)
    est = SGMCMCRidge(alpha=1.0, noise_var=NOISE_VAR, subsampling=subsampling,
                      random_state=0).fit(X, y, sample_weight=w)
    _assert_same_law(_draws(est), mean, np.sqrt(np.diag(cov)),
                     what=f"ridge {est.sampler_}/{est.subsampling_}")


@pytest.mark.parametrize("subsampling", ["uniform", "cv-preferential"])
def test_logistic_integer_weights_give_the_posterior_of_repeated_rows(
        cancer, cancer_reference, subsampling):
    """Weighted logistic fits (uniform minibatches and the control-variate
    scheme with preferential rows) vs independence MH on the repeated data."""
    X, y, w = cancer
    draws_ref = cancer_reference
    m_ref, _, se_ref, _ = ref.mean_and_se(draws_ref)
    sd_ref, sd_se_ref = ref.sd_and_se(draws_ref)
    est = SGMCMCLogisticRegression(subsampling=subsampling, random_state=0).fit(
        X, y, sample_weight=w)
    _assert_same_law(_draws(est), m_ref, sd_ref, se_ref, sd_se_ref,
                     what=f"logistic {est.sampler_}/{est.subsampling_}")


def test_weighted_evidence_equals_the_evidence_of_repeated_rows():
    """alpha='auto', noise_var='auto': the evidence with integer weights is
    the evidence of the repeated data exactly."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(80, 5))
    y = X[:, 0] + 0.5 * rng.normal(size=80)
    w = rng.integers(0, 4, size=80)
    got = _maximise_evidence(X, y, True, sample_weight=w.astype(float))
    want = _maximise_evidence(np.repeat(X, w, axis=0), np.repeat(y, w), True)
    np.testing.assert_allclose(got[:2], want[:2], rtol=1e-6)
    # and not the evidence of the rows as they stand
    plain = _maximise_evidence(X, y, True)
    assert abs(plain[0] / want[0] - 1) > 1e-3


def _minus_twice_log_evidence(X, y, w, log_alpha, log_s):
    """Brute force: ``sum_i w_i log N(y_i; x_i^T theta, s)`` integrated against
    N(0, I / alpha): ``N(y~; 0, s I + X~ X~^T / alpha)`` of the rows scaled by
    sqrt(w), times ``(2 pi s)^(-(N - n') / 2)`` (N = sum w, n' rows kept)."""
    keep = w > 0
    sw = np.sqrt(w[keep])
    Xa = ref.add_ones(X[keep]) * sw[:, None]
    yt = y[keep] * sw
    s = np.exp(log_s)
    C = s * np.eye(len(yt)) + Xa @ Xa.T / np.exp(log_alpha)
    _, logdet = np.linalg.slogdet(2 * np.pi * C)
    return (w.sum() - keep.sum()) * np.log(2 * np.pi * s) + logdet + yt @ np.linalg.solve(C, yt)


def test_weighted_evidence_with_more_coefficients_than_rows():
    """The dual route (n < p) with real-valued weights: the maximum found is
    the maximum of the brute-force weighted evidence.  (Weights summing to
    more than the rows kept would act as duplicates there, whose evidence
    grows without bound as the noise vanishes: see the next test.)"""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(25, 40))
    y = X[:, 0] + 0.5 * rng.normal(size=25)
    w = rng.uniform(0.3, 1.0, size=25) * (rng.random(25) > 0.2)
    sigma2, alpha, _ = _maximise_evidence(X, y, True, sample_weight=w)
    best = minimize(lambda t: _minus_twice_log_evidence(X, y, w, *t),
                    x0=[np.log(alpha) + 0.5, np.log(sigma2) - 0.5], method="Nelder-Mead",
                    options={"xatol": 1e-8, "fatol": 1e-10, "maxiter": 4000})
    np.testing.assert_allclose([alpha, sigma2], np.exp(best.x), rtol=1e-3)
    assert _minus_twice_log_evidence(X, y, w, np.log(alpha), np.log(sigma2)) <= best.fun + 1e-6


def test_weights_that_act_as_duplicates_with_more_coefficients_than_rows_warn():
    """p >= n and weights summing past the rows: like duplicated rows, the
    evidence then favours a noise-free fit; the collapse is said, not silent."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(25, 40))
    y = X[:, 0] + 0.5 * rng.normal(size=25)
    w = rng.integers(1, 4, size=25)
    with pytest.warns(UserWarning, match="noise variance"):
        est = SGMCMCRidge(random_state=0, **SMALL).fit(X, y, sample_weight=w)
    assert est.noise_var_ < 1e-9


# ---------------------------------------------------------- bit identities
def test_unit_weights_are_the_unweighted_fit(diabetes):
    X, y, _ = diabetes
    for est in (SGMCMCRidge(subsampling="cv-preferential", random_state=0, **SMALL),
                SGMCMCLogisticRegression(random_state=0, **SMALL)):
        target = y if isinstance(est, SGMCMCRidge) else (y > 0).astype(int)
        a = _draws(est.fit(X, target))
        b = _draws(est.fit(X, target, sample_weight=np.ones(len(y))))
        np.testing.assert_array_equal(a, b)


def test_class_weight_is_sample_weight_by_class(cancer):
    X, y, w = cancer
    for class_weight in ("balanced", {0: 2.0, 1: 0.5}):
        a = SGMCMCLogisticRegression(class_weight=class_weight, random_state=0, **SMALL)
        b = SGMCMCLogisticRegression(random_state=0, **SMALL)
        a.fit(X, y, sample_weight=w)
        b.fit(X, y, sample_weight=w * compute_sample_weight(class_weight, y))
        np.testing.assert_array_equal(_draws(a), _draws(b))
    # balanced weights move the intercept towards the smaller class
    plain = SGMCMCLogisticRegression(random_state=0, **SMALL).fit(X, y)
    balanced = SGMCMCLogisticRegression(class_weight="balanced", random_state=0,
                                        **SMALL).fit(X, y)
    assert np.mean(y) > 0.5 and balanced.intercept_ < plain.intercept_


# ------------------------------------------------------------- bad weights
@pytest.mark.parametrize("weights, message", [
    (lambda n: -np.ones(n), "Negative values in data passed to `sample_weight`"),
    (lambda n: np.ones(n - 1), "sample_weight"),
    (lambda n: np.zeros(n), "sample_weight is zero for every row"),
    (lambda n: np.r_[np.nan, np.ones(n - 1)], "NaN"),
])
def test_bad_weights_are_refused_naming_the_parameter(diabetes, weights, message):
    X, y, _ = diabetes
    with pytest.raises(ValueError, match=message):
        SGMCMCRidge(**SMALL).fit(X, y, sample_weight=weights(len(y)))


def test_class_weight_of_an_unknown_class_is_refused(cancer):
    X, y, _ = cancer
    with pytest.raises(ValueError, match="class"):
        SGMCMCLogisticRegression(class_weight={0: 1.0, 7: 2.0}, **SMALL).fit(X, y)


def test_kernel_stein_discrepancy_scores_the_weighted_posterior(diabetes):
    """The KSD of a weighted fit is small against the weighted posterior's
    score and large against the unweighted one's; the weighted score is the
    repeated data's."""
    from skbayes_sg.diagnostics import ksd_from_estimator
    from skbayes_sg.diagnostics._ksd import grad_log_posterior
    from skbayes_sg._sampling._glm import GAUSSIAN, GLM

    X, y, w = diabetes
    est = SGMCMCRidge(alpha=1.0, noise_var=NOISE_VAR, random_state=0).fit(X, y, sample_weight=w)
    right = ksd_from_estimator(est, X, y, sample_weight=w, max_draws=300)
    wrong = ksd_from_estimator(est, X, y, max_draws=300)
    assert wrong > 5 * right, (right, wrong)
    thetas = np.random.default_rng(0).normal(size=(3, X.shape[1] + 1))
    glm = GLM(GAUSSIAN, 1, (NOISE_VAR,))
    np.testing.assert_allclose(
        grad_log_posterior(thetas, X, y, glm, 1.0, True, sample_weight=w.astype(float)),
        grad_log_posterior(thetas, np.repeat(X, w, axis=0), np.repeat(y, w), glm, 1.0, True),
        rtol=1e-10, atol=1e-10)
