"""Posterior predictive draws: ``sample_y`` of every linear estimator and the
``posterior_predictive`` group of the ArviZ export.

The law under test is the exact predictive of the fitted draws: a column of
``sample_y`` picks a stored draw ``theta_s`` uniformly and draws ``y ~ p(y |
x, theta_s)`` at every row, so a frequency over many columns estimates
``mean_s p(y | x, theta_s)``.  Tolerances are 4.5 binomial (or Poisson)
standard errors of that frequency; each law test also checks that the
posterior-mean plug-in (``p(y | x, mean theta)``) would fail it.
"""
import warnings

import numpy as np
import pytest
from scipy.special import expit, softmax
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skbayes_sg import SGMCMCLogisticRegression, SGMCMCPoissonRegressor, SGMCMCRidge

Z_TOL = 4.5


def _fit(est, X, y, **fit_params):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")         # convergence notes of short fits
        return est.fit(X, y, **fit_params)


@pytest.fixture(scope="module")
def binary():
    rng = np.random.RandomState(0)
    X = rng.normal(size=(30, 2))
    y = np.where(rng.random_sample(30) < expit(2 * X[:, 0] - X[:, 1]), "yes", "no")
    clf = _fit(SGMCMCLogisticRegression(n_samples=500, n_jobs=1, random_state=0), X, y)
    # near the boundary; far from the data (the logit uncertain: the plug-in
    # probability 0.91, the predictive 0.79); moderate; far, beside the second
    X_new = np.array([[0.1, 0.2], [3.0, 5.0], [-1.0, 0.5], [2.0, 4.0]])
    return clf, X_new


def _draw_probabilities(clf, X):
    """p(y = classes_[1] | x, theta_s) for every stored draw: (n_rows, S)."""
    W = clf.coef_samples_.reshape(-1, clf.coef_samples_.shape[-1])
    b = clf.intercept_samples_.reshape(-1)
    return expit(X @ W.T + b)


def test_binary_sample_y_has_the_exact_predictive_law(binary):
    clf, X_new = binary
    N = 40000
    draws = clf.sample_y(X_new, n_draws=N, random_state=0)
    assert draws.shape == (4, N) and set(np.unique(draws)) <= {"no", "yes"}
    P = _draw_probabilities(clf, X_new)
    p_bar = P.mean(axis=1)
    np.testing.assert_allclose(p_bar, clf.predict_proba(X_new)[:, 1], rtol=1e-12)
    freq = (draws == "yes").mean(axis=1)
    tol = Z_TOL * np.sqrt(p_bar * (1 - p_bar) / N)
    assert np.all(np.abs(freq - p_bar) < tol), (freq, p_bar, tol)
    # the joint law: one theta_s per column for every row
    p_joint = np.mean(P[1] * P[3])
    f_joint = np.mean((draws[1] == "yes") & (draws[3] == "yes"))
    joint_tol = Z_TOL * np.sqrt(p_joint * (1 - p_joint) / N)
    assert abs(f_joint - p_joint) < joint_tol
    # power: the plug-in of the posterior mean is far outside the tolerance
    plug_in = expit(X_new @ clf.coef_ + clf.intercept_)
    assert abs(plug_in[1] - p_bar[1]) > 5 * tol[1]
    # and so are rows drawn independently (a theta per row) for the joint law
    assert abs(P[1].mean() * P[3].mean() - p_joint) > 2 * joint_tol


def test_one_draw_of_y_per_posterior_draw(binary):
    """n_draws=None: column j is drawn from posterior draw j (chain-major)."""
    clf, X_new = binary
    R = 200
    X_rep = np.repeat(X_new[1:2], R, axis=0)
    draws = clf.sample_y(X_rep, n_draws=None, random_state=1)
    S = clf.coef_samples_.shape[0] * clf.coef_samples_.shape[1]
    assert draws.shape == (R, S)
    p = _draw_probabilities(clf, X_new[1:2])[0]
    counts = (draws == "yes").sum(axis=0)
    # chi-square with S degrees of freedom over the columns with 0.05 < p < 0.95
    keep = (p > 0.05) & (p < 0.95)
    assert keep.sum() > 100
    chi2 = np.sum((counts[keep] - R * p[keep]) ** 2 / (R * p[keep] * (1 - p[keep])))
    m = keep.sum()
    assert abs(chi2 - m) < Z_TOL * np.sqrt(2 * m), (chi2, m)
    # the same draws shuffled between columns fail it
    shuffled = np.random.RandomState(0).permutation(p[keep])
    chi2_wrong = np.sum((counts[keep] - R * shuffled) ** 2 / (R * shuffled * (1 - shuffled)))
    assert chi2_wrong - m > 5 * Z_TOL * np.sqrt(2 * m)


def test_multinomial_sample_y_matches_predict_proba():
    rng = np.random.RandomState(1)
    X = rng.normal(size=(45, 2))
    y = np.array(["a", "b", "c"])[np.argmax(X @ np.array([[2, -1, 0], [0, 1, -1.5]])
                                              + rng.gumbel(size=(45, 3)), axis=1)]
    clf = _fit(SGMCMCLogisticRegression(n_samples=300, n_jobs=1, random_state=0), X, y)
    X_new = np.array([[0.0, 0.0], [3.0, -3.0]])
    N = 30000
    draws = clf.sample_y(X_new, n_draws=N, random_state=0)
    assert draws.shape == (2, N)
    proba = clf.predict_proba(X_new)
    W = clf.coef_samples_.reshape(-1, 3, 2)
    b = clf.intercept_samples_.reshape(-1, 3)
    exact = softmax(np.einsum("nd,skd->nsk", X_new, W) + b[None], axis=2).mean(axis=1)
    np.testing.assert_allclose(proba, exact, rtol=1e-10)
    for k, label in enumerate(clf.classes_):
        freq = (draws == label).mean(axis=1)
        tol = Z_TOL * np.sqrt(proba[:, k] * (1 - proba[:, k]) / N)
        assert np.all(np.abs(freq - proba[:, k]) < tol), (label, freq, proba[:, k])
    per_draw = clf.sample_y(X_new, n_draws=None, random_state=0)
    assert per_draw.shape == (2, W.shape[0]) and set(np.unique(per_draw)) <= set("abc")


def test_poisson_sample_y_mean_and_variance():
    rng = np.random.RandomState(2)
    X = rng.normal(size=(40, 2))
    y = rng.poisson(np.exp(0.5 + 0.7 * X[:, 0]))
    reg = _fit(SGMCMCPoissonRegressor(n_samples=300, n_jobs=1, random_state=0), X, y)
    X_new = np.array([[2.5, 0.0], [0.0, 0.0]])
    N = 40000
    draws = reg.sample_y(X_new, n_draws=N, random_state=0)
    assert draws.shape == (2, N)
    W = reg.coef_samples_.reshape(-1, 2)
    rate = np.exp(X_new @ W.T + reg.intercept_samples_.reshape(-1))
    mean = rate.mean(axis=1)
    var = mean + rate.var(axis=1)              # the predictive's: E rate + Var rate
    assert np.all(np.abs(draws.mean(axis=1) - mean) < Z_TOL * np.sqrt(var / N))
    np.testing.assert_allclose(draws.var(axis=1), var, rtol=0.1)
    assert reg.sample_y(X_new, n_draws=None).shape == (2, W.shape[0])


def test_ridge_sample_y_per_posterior_draw():
    rng = np.random.RandomState(3)
    X = rng.normal(size=(40, 2))
    y = X @ [1.0, -2.0] + rng.normal(scale=0.5, size=40)
    reg = _fit(SGMCMCRidge(n_samples=300, n_jobs=1, random_state=0), X, y)
    draws = reg.sample_y(X[:3], n_draws=None, random_state=0)
    S = reg.coef_samples_.shape[0] * reg.coef_samples_.shape[1]
    assert draws.shape == (3, S)
    mu = X[:3] @ reg.coef_samples_.reshape(-1, 2).T + reg.intercept_samples_.reshape(-1)
    z = (draws - mu) / np.sqrt(reg.noise_var_)
    assert abs(z.mean()) < Z_TOL / np.sqrt(z.size) and abs(z.var() - 1) < 0.1


def test_sample_y_errors(binary):
    clf, X_new = binary
    for bad in (0, -1, 2.5, True, "all"):
        with pytest.raises(ValueError, match="n_draws must be a positive integer"):
            clf.sample_y(X_new, n_draws=bad)
    with pytest.raises(NotFittedError):
        SGMCMCLogisticRegression().sample_y(X_new)
    with pytest.raises(TypeError, match="pass n_draws only"):
        clf.sample_y(X_new, n_draws=3, n_samples=5)


def test_sample_y_takes_gaussian_process_regressors_n_samples(binary):
    # code written for GaussianProcessRegressor.sample_y(X, n_samples=...)
    clf, X_new = binary
    np.testing.assert_array_equal(clf.sample_y(X_new, n_samples=7, random_state=1),
                                  clf.sample_y(X_new, n_draws=7, random_state=1))
    assert clf.sample_y(X_new, n_samples=None, random_state=1).shape == (4, 1)
    with pytest.raises(ValueError, match="features"):
        clf.sample_y(X_new[:, :1])


def _groups(idata):
    """The group names of an InferenceData (0.x) or a DataTree (1.x)."""
    groups = idata.groups() if callable(idata.groups) else idata.groups
    return {g.strip("/") for g in groups} - {""}


def test_export_posterior_predictive_for_new_data_without_y(binary):
    pytest.importorskip("arviz")
    clf, X_new = binary
    idata = clf.to_inference_data(X_new, random_state=3)
    pp = idata.posterior_predictive["y"]
    chains, draws = clf.intercept_samples_.shape
    assert pp.dims == ("chain", "draw", "obs") and pp.shape == (chains, draws, 4)
    assert _groups(idata) == {"posterior", "sample_stats", "posterior_predictive"}
    same = clf.sample_y(X_new, n_draws=None, random_state=3)
    np.testing.assert_array_equal(pp.values.reshape(-1, 4), same.T)
    # with y: the log likelihood and, on request, the predictive at the same X
    y_new = ["yes", "no", "no", "yes"]
    both = clf.to_inference_data(X_new, y_new, posterior_predictive=True)
    assert {"log_likelihood", "observed_data", "posterior_predictive"} <= _groups(both)
    assert "posterior_predictive" not in _groups(clf.to_inference_data(X_new, y_new))
    with pytest.raises(ValueError, match="needs X"):
        clf.to_inference_data(y=["yes"])
    with pytest.raises(ValueError, match="X without y and posterior_predictive=False"):
        clf.to_inference_data(X_new, posterior_predictive=False)


def test_export_of_a_pipeline_transforms_X():
    pytest.importorskip("arviz")
    from skbayes_sg.diagnostics import to_inference_data
    rng = np.random.RandomState(4)
    X = rng.normal(loc=5.0, scale=3.0, size=(40, 2))
    y = (X[:, 0] > 5).astype(int)
    pipe = _fit(make_pipeline(StandardScaler(), SGMCMCLogisticRegression(
        n_samples=100, n_jobs=1, random_state=0)), X, y)
    idata = to_inference_data(pipe, X, y)
    est = pipe[-1]
    expected = est.log_likelihood(pipe[0].transform(X), y).T
    np.testing.assert_allclose(idata.log_likelihood["y"].values.reshape(-1, 40), expected)


def test_log_likelihood_is_each_draws_density_of_each_row():
    """``log_likelihood`` against the Gaussian density written here: ridge's
    ``N(y | x^T w_s + b_s, noise_var_)`` for every row and draw, in
    ``coef_samples_`` order (chain-major)."""
    from scipy.stats import norm
    from skbayes_sg import SGMCMCRidge
    rng = np.random.RandomState(5)
    X = rng.normal(size=(30, 2))
    y = X @ [1.0, -0.5] + 0.3 + rng.normal(size=30)
    est = _fit(SGMCMCRidge(n_samples=50, n_chains=2, random_state=0), X, y)
    W = est.coef_samples_.reshape(-1, 2)
    b = est.intercept_samples_.reshape(-1)
    want = norm.logpdf(y[:, None], loc=X @ W.T + b, scale=np.sqrt(est.noise_var_))
    got = est.log_likelihood(X, y)
    assert got.shape == (30, 100)
    np.testing.assert_allclose(got, want, rtol=1e-10)
    with pytest.raises(ValueError, match="y has 29 values for 30 rows"):
        est.log_likelihood(X, y[:29])


def test_grad_log_posterior_is_the_score_of_the_sampled_posterior():
    """``grad_log_posterior`` against the ridge score written here,
    ``-[X^T (X w + b - y) / noise_var + alpha theta] / T`` per draw (the
    weights of the fit applied), with ``draws`` picking kept draws; and
    ``likelihood_params_`` names the Gaussian's noise variance."""
    from skbayes_sg import SGMCMCRidge
    rng = np.random.RandomState(6)
    X = rng.normal(size=(40, 3))
    y = X @ [1.0, -0.5, 0.2] + 0.3 + rng.normal(size=40)
    w = rng.uniform(0.5, 2.0, size=40)
    est = SGMCMCRidge(n_samples=30, n_chains=2, temperature=0.5, random_state=0)
    est = _fit(est, X, y, sample_weight=w)
    theta, score = est.grad_log_posterior(X, y, sample_weight=w, draws=[0, 7, 29])
    assert theta.shape == score.shape == (2, 3, 4)
    np.testing.assert_array_equal(theta[:, :, :3], est.coef_samples_[:, [0, 7, 29]])
    np.testing.assert_array_equal(theta[:, :, 3], est.intercept_samples_[:, [0, 7, 29]])
    Xe = np.hstack([X, np.ones((40, 1))])
    resid = (theta @ Xe.T - y) * w / est.noise_var_               # (chains, draws, rows)
    want = -(resid @ Xe + est.alpha_ * theta) / 0.5
    np.testing.assert_allclose(score, want, rtol=1e-10, atol=1e-10)
    assert est.likelihood_params_ == {"noise_var": est.noise_var_}
    full_theta, _ = est.grad_log_posterior(X, y, sample_weight=w)
    assert full_theta.shape == (2, 30, 4)
    with pytest.raises(ValueError, match="y must be 1-D"):
        est.grad_log_posterior(X, y[:, None])
