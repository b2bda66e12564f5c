"""The IMQ kernel Stein discrepancy (``skbayes_sg.diagnostics``).

Known answers, all for the IMQ kernel ``(1 + ||r||^2 / c^2)^beta``:

* one point: ``KSD^2 = k0(x, x) = ||s(x)||^2 - 2 beta d / c^2`` (r = 0);
  for a standard normal target, c = 1, beta = -1/2: ``||x||^2 + d``;
* two points in 1-D, x = 1, y = -1, standard normal target (derived by hand
  below);
* the Stein identity ``E_{y ~ pi} k0(x, y) = 0`` (Gauss-Hermite quadrature),
  which holds only with the right score sign;
* the Stein kernel against an independent finite-difference evaluation of its
  defining formula;
* exact i.i.d. draws: ``E[KSD^2_V] = E[k0(x, x)] / N = 2 d / N`` (standard
  normal, c = 1, beta = -1/2): the O(N^-1/2) rate with its constant.

The estimator wrapper is checked against the closed-form ridge score
``-P (theta - m)`` and against ``potential_and_grad`` draw by draw.
"""
import numpy as np
import pytest
import scipy.sparse as sp

from skbayes_sg import SGMCMCLogisticRegression, SGMCMCRidge
from skbayes_sg._sampling._glm import GAUSSIAN, GLM, LOGISTIC, SOFTMAX, potential_and_grad
from skbayes_sg.diagnostics import ksd, ksd_from_estimator
from skbayes_sg.diagnostics._ksd import grad_log_posterior

try:
    from . import _reference as ref
except ImportError:
    import _reference as ref

Z = 4.5


def _pair_kernel(x, y, s_x, s_y, c=1.0, beta=-0.5):
    """k0(x, y) through the public function: the U-statistic of two draws is k0(x, y)."""
    return ksd(np.array([x, y]), np.array([s_x, s_y]), c=c, beta=beta, statistic="u",
               squared=True)


def _stein_kernel_fd(x, y, sx, sy, c, beta, eps=1e-4):
    """The Stein kernel from its definition, derivatives of k by central differences."""
    def k(a, b):
        return (1.0 + np.sum((a - b) ** 2) / c ** 2) ** beta

    d = len(x)
    E = np.eye(d) * eps
    gx = np.array([(k(x + E[i], y) - k(x - E[i], y)) / (2 * eps) for i in range(d)])
    gy = np.array([(k(x, y + E[i]) - k(x, y - E[i])) / (2 * eps) for i in range(d)])
    tr = sum((k(x + E[i], y + E[i]) - k(x + E[i], y - E[i]) - k(x - E[i], y + E[i])
              + k(x - E[i], y - E[i])) / (4 * eps ** 2) for i in range(d))
    return sx @ sy * k(x, y) + sx @ gy + sy @ gx + tr


# ------------------------------------------------------------- known values
@pytest.mark.parametrize("c, beta", [(1.0, -0.5), (2.0, -0.3), (0.5, -0.9)])
def test_single_point(c, beta):
    x = np.array([[0.3, -1.2, 2.0]])
    s = -x                                           # standard normal score
    expected = np.sum(s ** 2) - 2 * beta * 3 / c ** 2
    assert ksd(x, s, c=c, beta=beta, squared=True) == pytest.approx(expected, rel=1e-14)
    assert ksd(x, s, c=c, beta=beta) == pytest.approx(np.sqrt(expected), rel=1e-14)
    # the paper's setting: ||x||^2 + d
    assert ksd(x, s, squared=True) == pytest.approx(np.sum(x ** 2) + 3, rel=1e-14)


def test_sample_stuck_at_one_point():
    """N copies of x: every pair has r = 0, so KSD^2 = ||s(x)||^2 + d whatever N.
    At the mode (s = 0) that is d: below the i.i.d. expectation sqrt((tr H + d)/N)
    once N < tr H / d, so a KSD near that floor does not certify the spread."""
    x = np.tile([[0.5, -0.2, 1.0]], (50, 1))
    s = np.tile([[1.0, 2.0, -2.0]], (50, 1))
    assert ksd(x, s, squared=True) == pytest.approx(9.0 + 3.0, rel=1e-12)
    assert ksd(x, np.zeros_like(x)) == pytest.approx(np.sqrt(3.0), rel=1e-12)
    # a N(0, I/1000) target (tr P = 3000): N = 100 exact draws have E[KSD^2] = 30.03,
    # ten times the KSD^2 = 3 of a sample stuck at the mode
    reps = np.random.default_rng(0).normal(size=(100, 100, 3)) / np.sqrt(1000.0)
    vals = np.array([ksd(x, -1000.0 * x, squared=True) for x in reps])
    assert abs(vals.mean() - 30.03) < Z * vals.std(ddof=1) / 10
    assert vals.mean() > 5 * ksd(np.zeros((100, 3)), np.zeros((100, 3)), squared=True)


def test_two_points_by_hand():
    """x = 1, y = -1, s = -x, c = 1, beta = -1/2, d = 1: r = 2, u = 5.

    k0(x, y) = (s_x s_y) u^b + 2b u^(b-1) (s_y - s_x) r - 2 b d u^(b-1)
               - 4 b (b - 1) r^2 u^(b-2)
             = -5^-1/2 - 4 * 5^-3/2 + 5^-3/2 - 12 * 5^-5/2,
    k0(x, x) = k0(y, y) = s^2 + 1 = 2, and the V-statistic is
    (2 + 2 + 2 k0(x, y)) / 4.
    """
    k_xy = -5 ** -0.5 - 3 * 5 ** -1.5 - 12 * 5 ** -2.5
    expected_v = (4 + 2 * k_xy) / 4
    pts = np.array([[1.0], [-1.0]])
    assert ksd(pts, -pts, squared=True) == pytest.approx(expected_v, rel=1e-13)
    assert expected_v == pytest.approx(0.534898, abs=1e-6)
    assert ksd(pts, -pts, statistic="u", squared=True) == pytest.approx(k_xy, rel=1e-13)
    # 1-D input accepted
    assert ksd(pts.ravel(), -pts.ravel(), squared=True) == pytest.approx(expected_v, rel=1e-13)


@pytest.mark.parametrize("c, beta", [(1.0, -0.5), (1.7, -0.25)])
def test_stein_kernel_matches_finite_differences(c, beta):
    rng = np.random.default_rng(3)
    for _ in range(5):
        x, y, sx, sy = rng.normal(size=(4, 3))
        got = _pair_kernel(x, y, sx, sy, c=c, beta=beta)
        assert got == pytest.approx(_stein_kernel_fd(x, y, sx, sy, c, beta), rel=1e-6, abs=1e-8)


def test_stein_identity_and_sign():
    """E_{y ~ N(0,1)} k0(x, y) = 0 with the score -y; with the potential's
    gradient +y (the sign error) it is not."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(120)
    weights = weights / weights.sum()                # N(0, 1) quadrature
    for x in (-1.5, 0.2, 2.0):
        good = sum(w * _pair_kernel([x], [t], [-x], [-t]) for t, w in zip(nodes, weights))
        bad = sum(w * _pair_kernel([x], [t], [x], [t]) for t, w in zip(nodes, weights))
        assert abs(good) < 1e-6, good      # quadrature error ~1e-8
        assert abs(bad) > 0.1, bad


# --------------------------------------------------------------- behaviour
def test_exact_samples_rate():
    """i.i.d. N(0, I_d): E[KSD_V^2] = 2d / N exactly, so KSD ~ N^(-1/2)."""
    rng = np.random.default_rng(0)
    d, reps = 2, 300
    for N in (25, 100, 400):
        vals = np.array([ksd(x, -x, squared=True)
                         for x in rng.standard_normal((reps, N, d))])
        se = vals.std(ddof=1) / np.sqrt(reps)
        assert abs(vals.mean() - 2 * d / N) < Z * se, (N, vals.mean(), 2 * d / N, se)
        # the unbiased U-statistic has mean zero for exact samples
        uvals = np.array([ksd(x, -x, statistic="u", squared=True)
                          for x in rng.standard_normal((reps // 3, N, d))])
        assert abs(uvals.mean()) < Z * uvals.std(ddof=1) / np.sqrt(len(uvals))


def test_shifted_and_sign_flipped_samples_are_worse():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1000, 3))
    good = ksd(x, -x)
    assert good < 0.1
    for shift in (0.5, 1.0):
        xs = x + shift
        assert ksd(xs, -xs) > 5 * good
    # the wrong sign (grad U instead of grad log pi), on exact samples
    assert ksd(x, x) > 10 * good
    # overdispersed samples
    xw = 2.0 * x
    assert ksd(xw, -xw) > 5 * good


def test_blocks_callable_and_u_v_relation():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(37, 4)) + 3.0
    s = -(x - 1.0)
    v = ksd(x, s, squared=True)
    for bs in (1, 5, 36, 100):
        assert ksd(x, s, squared=True, block_size=bs) == pytest.approx(v, rel=1e-12)
    assert ksd(x, lambda a: -(a - 1.0), squared=True) == pytest.approx(v, rel=1e-14)
    u = ksd(x, s, statistic="u", squared=True)
    diag = np.sum(s ** 2) + 0.5 * 2 * 4 * len(x)     # sum_i k0(x_i, x_i)
    n = len(x)
    assert v == pytest.approx(((n - 1) * n * u + diag) / n ** 2, rel=1e-12)
    # brute force over all pairs
    brute = np.mean([[_stein_kernel_fd(a, b, sa, sb, 1.0, -0.5) for b, sb in zip(x[:6], s[:6])]
                     for a, sa in zip(x[:6], s[:6])])
    sub = ksd(x[:6], s[:6], squared=True)
    assert sub == pytest.approx(brute, rel=1e-6)


def test_input_validation():
    x = np.zeros((5, 2))
    with pytest.raises(ValueError, match="kernel"):
        ksd(x, x, kernel="gaussian")
    with pytest.raises(ValueError, match="shape"):
        ksd(x, np.zeros((5, 3)))
    with pytest.raises(ValueError, match="beta"):
        ksd(x, x, beta=0.5)
    with pytest.raises(ValueError, match="finite"):
        ksd(x, np.full((5, 2), np.nan))
    with pytest.raises(TypeError):
        ksd_from_estimator(object(), x, np.zeros(5))


# --------------------------------------------------------------- estimators
def _ridge_data(n=150, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = X @ [1.0, -0.5, 0.3] + 0.2 + rng.normal(size=n)
    return X, y


@pytest.mark.parametrize("temperature", [1.0, 2.0])
@pytest.mark.parametrize("fit_intercept", [True, False])
def test_ridge_score_is_the_closed_form(fit_intercept, temperature):
    X, y = _ridge_data()
    mean, cov, P = ref.ridge_posterior(X, y, 0.7, 0.5, fit_intercept)
    thetas = np.random.default_rng(0).normal(size=(13, len(mean)))
    score = grad_log_posterior(thetas, X, y, GLM(GAUSSIAN, 1, (0.5,)), 0.7, fit_intercept,
                               temperature)
    np.testing.assert_allclose(score, -(thetas - mean) @ P / temperature, rtol=1e-10,
                               atol=1e-10)


@pytest.mark.parametrize("layout", ["dense", "csr", "float32"])
@pytest.mark.parametrize("model", ["logistic", "softmax"])
def test_classifier_score_matches_potential_and_grad(model, layout):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(90, 4))
    X[rng.random(X.shape) < 0.3] = 0.0
    K = 1 if model == "logistic" else 3
    y = rng.integers(0, 2 if K == 1 else K, size=90).astype(float)
    glm = GLM(LOGISTIC, 1) if K == 1 else GLM(SOFTMAX, K)
    Xin = {"dense": X, "csr": sp.csr_matrix(X), "float32": X.astype(np.float32)}[layout]
    thetas = rng.normal(size=(7, K * 5))
    score = grad_log_posterior(thetas, Xin, y, glm, 1.3, True)
    for t, s in zip(thetas, score):
        _, g = potential_and_grad(t, X, y, glm, 1.3, True)
        if layout == "float32":   # X rounded to float32 against the float64 reference
            np.testing.assert_allclose(s, -g, rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_allclose(s, -g, rtol=1e-11, atol=1e-9)


def test_ksd_from_fitted_ridge():
    X, y = _ridge_data(n=150)
    mean, cov, P = ref.ridge_posterior(X, y, 1.0, 1.0)
    # unadjusted full-gradient SGLD in the parameters' own coordinates (ULA)
    est = SGMCMCRidge(noise_var=1.0, alpha=1.0, subsampling="full", sampler="sgld",
                      metric="identity", metropolis=False, init="mode",
                      step_size=0.05 / np.linalg.eigvalsh(P).max(), n_samples=300, thin=20,
                      n_warmup=500, n_chains=2, random_state=0).fit(X, y)
    draws = np.concatenate([est.coef_samples_, est.intercept_samples_[..., None]], -1)
    flat = draws.reshape(-1, 4)
    expected = ksd(flat, -(flat - mean) @ P)
    assert ksd_from_estimator(est, X, y) == pytest.approx(expected, rel=1e-10)
    per = ksd_from_estimator(est, X, y, per_chain=True)
    assert per.shape == (2,)
    np.testing.assert_allclose(per[1], ksd(draws[1], -(draws[1] - mean) @ P), rtol=1e-10)
    assert ksd_from_estimator(est, X, y, max_draws=100, per_chain=True).shape == (2,)
    # the chain's KSD is close to that of as many exact i.i.d. draws ...
    iid = np.random.default_rng(0).multivariate_normal(mean, cov, size=len(flat))
    k_iid = ksd(iid, -(iid - mean) @ P)
    assert expected < 3 * k_iid
    # ... and far below that of draws shifted by one posterior sd
    shifted = flat + np.sqrt(np.diag(cov))
    assert ksd(shifted, -(shifted - mean) @ P) > 5 * expected


def test_ksd_from_fitted_classifiers():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(120, 3))
    for labels in (np.array(["a", "b"]), np.array([3, 5, 9])):
        y = labels[rng.integers(0, len(labels), 120)]
        est = SGMCMCLogisticRegression(n_samples=50, n_warmup=50, n_chains=2, step_size=1e-3,
                                       random_state=0).fit(X, y)
        K = len(labels) if len(labels) > 2 else 1
        coef = est.coef_samples_.reshape(2, 50, K, 3)
        icpt = est.intercept_samples_.reshape(2, 50, K)
        flat = np.concatenate([coef, icpt[..., None]], -1).reshape(100, -1)
        y_enc = np.searchsorted(labels, y).astype(float)
        glm = GLM(LOGISTIC, 1) if K == 1 else GLM(SOFTMAX, K)
        score = np.array([-potential_and_grad(t, X, y_enc, glm, 1.0, True)[1] for t in flat])
        assert ksd_from_estimator(est, X, y) == pytest.approx(ksd(flat, score), rel=1e-10)
        with pytest.raises(ValueError, match="labels"):
            ksd_from_estimator(est, X, np.full(120, "zz" if labels.dtype.kind == "U" else 42))
