"""The second-order control variate (``subsampling="cv2"``, ``"cv2-preferential"``).

Each drawn row's gradient less its Taylor expansion to second order at the
mode, plus the expansion's exact sum (``doc/mode_based.rst``).  Checked
here: the kernel's estimate is unbiased with uniform and weighted draws; it
is exact for a Gaussian model (the remainder is zero); near the mode its
noise is far below the first-order control's; the noise model's remainder
moments agree with a Monte Carlo average; what it cannot do is refused with
the parameter named.  Its fits are checked against an exact-gradient
Metropolis run on a9a in ``tests/test_noise_measure.py`` and in the matrix
(``tests/test_matrix.py``).
"""
import numpy as np
import pytest
from scipy.special import expit

from skbayes_sg import SGMCMCLogisticRegression
from skbayes_sg._sampling._chain import ChainOracle
from skbayes_sg._sampling._context import FitContext
from skbayes_sg._sampling._dataset import RowData
from skbayes_sg._sampling._estimators import FullGradient, GLMEstimator, Problem
from skbayes_sg._sampling._glm import GAUSSIAN, GLM, LOGISTIC, linear_predictor

Z = 4.5
ALPHA = 0.9


def _problem(model, n=60, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    z = X @ rng.normal(size=d) + 0.3
    if model == "logistic":
        y = (rng.random(n) < expit(z)).astype(np.float64)
        glm, name = GLM(LOGISTIC, 1), "logistic"
    else:
        y = z + rng.normal(size=n)
        glm, name = GLM(GAUSSIAN, 1, (0.6,)), "gaussian"
    prob = Problem(RowData(X, True), y, name, 1, glm.params)
    ctx = FitContext(X, y, glm, ALPHA, True, 10)
    return X, prob, ctx


def _taylor(prob, ctx, batch, **kw):
    mode = ctx.mode()
    R, G = ctx.residuals(mode)
    return GLMEstimator(
        prob, batch, control="taylor", control_point=mode, control_residuals=R.ravel(),
        control_sum=G, control_curvature=ctx.hessian_row_weights(mode),
        control_predictor=linear_predictor(ctx.X, mode.reshape(1, -1), True)[:, 0],
        control_hessian=ctx.hessian_at(mode) - ALPHA * np.eye(ctx.dim), **kw)


@pytest.mark.parametrize("weighted", [False, True])
def test_the_estimate_is_unbiased(weighted):
    X, prob, ctx = _problem("logistic")
    kw = {}
    if weighted:
        kw = dict(access="weighted", weights=np.random.default_rng(1).uniform(0.2, 3.0, len(X)))
    oracle = ChainOracle(_taylor(prob, ctx, 3, **kw), ALPHA)
    theta = ctx.mode() + np.random.default_rng(2).normal(scale=0.5, size=ctx.dim)
    exact = ALPHA * theta + FullGradient(prob).py_evaluate(theta)
    bitgen = np.random.PCG64(3)
    G = np.array([oracle.py_gradient(theta, bitgen) for _ in range(20000)])
    se = G.std(axis=0, ddof=1) / np.sqrt(len(G))
    assert np.all(se > 0)
    assert np.all(np.abs(G.mean(axis=0) - exact) < Z * se)


def test_exact_for_a_gaussian_model():
    """A Gaussian residual is linear in the predictor: the remainder is zero,
    so one row gives the exact gradient anywhere."""
    X, prob, ctx = _problem("gaussian")
    oracle = ChainOracle(_taylor(prob, ctx, 1), ALPHA)
    bitgen = np.random.PCG64(0)
    for theta in np.random.default_rng(4).normal(scale=3.0, size=(5, ctx.dim)):
        exact = ALPHA * theta + FullGradient(prob).py_evaluate(theta)
        np.testing.assert_allclose(oracle.py_gradient(theta, bitgen), exact,
                                   rtol=1e-10, atol=1e-10)


def test_near_the_mode_its_noise_is_second_order():
    """At 0.1 posterior sd from the mode the first-order control's noise is
    first order in the distance, the second-order one's second order: the
    variance ratio is of the order of the squared distance, far below 1."""
    X, prob, ctx = _problem("logistic", n=200)
    mode = ctx.mode()
    R, G = ctx.residuals(mode)
    first = GLMEstimator(prob, 1, control="fixed", control_point=mode,
                         control_residuals=R.ravel(), control_sum=G)
    theta = mode + 0.1 * np.sqrt(np.diag(ctx.laplace_cov(mode)))
    bitgen = np.random.PCG64(5)
    var = [np.array([ChainOracle(e, ALPHA).py_gradient(theta, bitgen) for _ in range(4000)]).var(0)
           for e in (first, _taylor(prob, ctx, 1))]
    assert np.all(var[1] < 0.05 * var[0]), var


def test_the_noise_model_matches_a_monte_carlo_average():
    """``row_noise_moments("taylor", Q)``: the remainder's second moment under
    each row's (tilted) Laplace law, against plain Monte Carlo over that law
    for rows whose likelihood tilts it little (the quadrature's own case)."""
    X, prob, ctx = _problem("logistic", n=100)
    mode = ctx.mode()
    Q = np.full(len(X), 0.5)                   # every row: sd 0.7, quadrature
    E = ctx.row_noise_moments("taylor", Q)
    z0 = linear_predictor(X, mode.reshape(1, -1), True)[:, 0]
    y = ctx.y
    eta = z0[:, None] + np.sqrt(0.5) * np.random.default_rng(6).normal(size=(len(X), 200000))
    s0 = expit(z0)
    rem = expit(eta) - y[:, None] - (s0 - y)[:, None] - (s0 * (1 - s0))[:, None] * (eta - z0[:, None])
    # the tilt reweights by the row's likelihood beyond second order: the
    # untilted average differs by it (measured 5-8 % on these rows)
    mc = np.mean(rem ** 2, axis=1)
    np.testing.assert_allclose(E, mc, rtol=0.1)
    assert np.all(E < ctx.row_noise_moments("fixed", Q))


def test_refused_where_it_cannot_act(monkeypatch):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y3 = np.arange(60) % 3
    with pytest.raises(ValueError, match="subsampling='cv2-preferential'.*one output"):
        SGMCMCLogisticRegression(subsampling="cv2-preferential", n_samples=5).fit(X, y3)
    from skbayes_sg import _setup
    monkeypatch.setattr(_setup, "MAX_TAYLOR_DIM", 3)
    with pytest.raises(ValueError, match="subsampling='cv2'.*up to 3 parameters"):
        SGMCMCLogisticRegression(subsampling="cv2", n_samples=5).fit(X, y3 % 2)
