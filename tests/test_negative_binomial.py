"""Negative binomial regression: a model with a parameter of its own.

The model axis carries each model's own parameters as a vector (the
Gaussian's noise variance, here the shape r); this model was added through
it.  Checked here: the registry entry against the compiled kernel and
against the probability mass function, the shape's estimate against an
independent joint optimisation, and the sampled posterior against an
independent reference written for these tests (``_reference.py``: the log
posterior from the mass function, its Laplace approximation by damped
Newton, and an independence Metropolis-Hastings sampler with a
multivariate-t proposal built on it).

Problem: n = 200, two features and an intercept, counts with mean ~1.8 and
shape 1.5 (variance about 4 times a Poisson one's).  Monte Carlo
tolerances as in ``test_poisson.py``: every mean within ``Z = 4.5``
combined standard errors (sampler and reference, ``sd / sqrt(ESS)``), every
sd within ``Z`` combined standard errors plus the bias the sampler's step
rule allows (stated where used).  Fixed seeds.
"""
import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize
from scipy.special import gammaln
from scipy.stats import nbinom

from skbayes_sg import SGMCMCNegativeBinomialRegressor, SGMCMCPoissonRegressor
from skbayes_sg._sampling._glm import MODEL_KINDS, NEGATIVE_BINOMIAL, GLM
from skbayes_sg._sampling._models import C_MODEL_KINDS, py_glm_loss, py_glm_residual

try:  # tests/ as a package or as a plain directory on sys.path
    from . import _reference as ref
except ImportError:
    import _reference as ref

Z = 4.5
ALPHA = 1.0
SHAPE = 1.5
#: the whitened samplers' error model keeps every variance within 4%: 2% on an sd
WHITENED_SD_ALLOW = 0.02


def _problem(seed=5, n=200):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    mu = np.exp(0.4 + X @ [0.5, -0.3])
    y = rng.negative_binomial(SHAPE, SHAPE / (SHAPE + mu)).astype(np.float64)
    return X, y


@pytest.fixture(scope="module")
def counts():
    X, y = _problem()
    Xe = ref.add_ones(X)
    mode, cov = ref.negative_binomial_laplace(Xe, y, ALPHA, SHAPE)
    draws, acc = ref.independence_mh(
        lambda T: ref.negative_binomial_log_post(T, Xe, y, ALPHA, SHAPE),
        mode, cov, n_draws=25000, n_chains=4, seed=13, df=10.0, scale=1.0)
    assert acc > 0.5, acc
    m, _, se, n_eff = ref.mean_and_se(draws)
    sd, sd_se = ref.sd_and_se(draws)
    assert n_eff.min() > 15000
    return dict(X=X, y=y, mode=mode, mean=m, mean_se=se, sd=sd, sd_se=sd_se)


def _assert_matches(est, target, sd_allow, what):
    """Means within Z combined MC se; sds within sd_allow + Z combined se."""
    draws = np.concatenate([est.coef_samples_, est.intercept_samples_[..., None]], axis=-1)
    m, _, se, n_eff = ref.mean_and_se(draws)
    zs = (m - target["mean"]) / np.hypot(se, target["mean_se"])
    sd, sd_se = ref.sd_and_se(draws)
    ratio = sd / target["sd"]
    tol = sd_allow + Z * np.hypot(sd_se, target["sd_se"]) / target["sd"]
    print(f"{what}: z {np.round(zs, 2)}, ESS {np.round(n_eff)}; sd ratio {np.round(ratio, 3)}, "
          f"tol {np.round(tol, 3)}")
    assert np.all(np.abs(zs) < Z), f"{what}: mean z {np.round(zs, 2)}"
    assert np.all(np.abs(ratio - 1) < tol), (
        f"{what}: sd ratio {np.round(ratio, 3)}, tolerance {np.round(tol, 3)}")


# ------------------------------------------------------- registry and kernel
def test_registry_is_the_compiled_enum_and_the_shape_is_a_parameter():
    assert MODEL_KINDS == C_MODEL_KINDS
    glm = GLM(NEGATIVE_BINOMIAL)
    assert glm.name == "negative_binomial" and glm.params == (1.0,)
    assert GLM(NEGATIVE_BINOMIAL, 1, (2.5,)).param("shape") == 2.5
    assert glm.curvature_bound() is None
    with pytest.raises(ValueError, match="has parameters"):
        GLM(NEGATIVE_BINOMIAL, 1, (1.0, 2.0))
    with pytest.raises(KeyError, match="no parameter 'noise_var'"):
        glm.param("noise_var")


@pytest.mark.parametrize("shape", [0.3, 1.5, 40.0])
def test_kernel_matches_numpy_the_pmf_and_derivatives(shape):
    """The Cython residual and loss equal the registry's numpy ones; the
    loss is the mass function less terms free of z; the residual is the
    loss's derivative and the Hessian weight the residual's."""
    glm = GLM(NEGATIVE_BINOMIAL, 1, (shape,))
    kernel = glm.spec.kernel_params(glm.params)
    zs = np.array([-30.0, -2.0, -0.3, 0.0, 0.7, 3.0, 20.0, 400.0])
    for y in (0.0, 1.0, 4.0, 13.0):
        yv = np.full(len(zs), y)
        r, u = glm.residual(zs[:, None], yv)[:, 0], glm.loss(zs[:, None], yv)
        assert np.all(np.isfinite(u)) and np.all(np.abs(r) <= shape + y)
        for k, z in enumerate(zs):
            assert py_glm_residual(NEGATIVE_BINOMIAL, np.array([z]), y, kernel)[0] == (
                pytest.approx(r[k], rel=1e-12, abs=1e-14))
            assert py_glm_loss(NEGATIVE_BINOMIAL, np.array([z]), y, kernel) == (
                pytest.approx(u[k], rel=1e-12, abs=1e-12))
        inner, eps = zs[np.abs(zs) < 25], 1e-6
        yi = np.full(len(inner), y)
        fd = (glm.loss((inner + eps)[:, None], yi) - glm.loss((inner - eps)[:, None], yi)) / (
            2 * eps)
        np.testing.assert_allclose(fd, glm.residual(inner[:, None], yi)[:, 0],
                                   rtol=1e-6, atol=1e-8)
        fd2 = (glm.residual((inner + eps)[:, None], yi)
               - glm.residual((inner - eps)[:, None], yi))[:, 0] / (2 * eps)
        np.testing.assert_allclose(fd2, glm.hessian_weights(inner[:, None], yi),
                                   rtol=1e-5, atol=1e-8)
    z = np.array([-1.0, 0.2, 2.0, 2.0])
    y = np.array([0.0, 3.0, 7.0, 30.0])
    mu = np.exp(z)
    pmf = nbinom.logpmf(y, shape, shape / (shape + mu))
    np.testing.assert_allclose(glm.log_predictive(z[:, None], y), pmf, rtol=1e-10)
    # at one count, differences of the loss in z are those of the negative log pmf
    z2, y2 = np.array([-0.5, 0.4, 2.5]), np.full(3, 6.0)
    pmf2 = nbinom.logpmf(y2, shape, shape / (shape + np.exp(z2)))
    np.testing.assert_allclose(np.diff(glm.loss(z2[:, None], y2)), -np.diff(pmf2), rtol=1e-10)


def test_observations_drawn_have_the_model_moments():
    glm = GLM(NEGATIVE_BINOMIAL, 1, (SHAPE,))
    z = np.full((400, 500), 1.0)          # any shape of linear predictors
    draws = glm.sample(z, np.random.default_rng(0))
    assert draws.shape == z.shape
    mu = np.e
    n = draws.size
    var = mu + mu ** 2 / SHAPE
    assert abs(draws.mean() - mu) < Z * np.sqrt(var / n)
    # the variance's se, from the fourth moment of the draws themselves
    assert abs(draws.var() - var) < Z * np.sqrt(np.var((draws - mu) ** 2) / n)


# ---------------------------------------------------------------- the shape
def test_the_automatic_shape_is_the_joint_posterior_maximum(counts):
    """``shape="auto"``: the shape of the joint maximum of (coefficients,
    log r) under the coefficients' prior, found here by an independent
    optimisation of the full log mass function."""
    X, y = counts["X"], counts["y"]
    Xe = ref.add_ones(X)

    def negative_log_post(v):
        theta, r = v[:-1], np.exp(v[-1])
        z = Xe @ theta
        ll = (gammaln(y + r) - gammaln(r) + r * np.log(r) + y * z
              - (y + r) * np.logaddexp(np.log(r), z))
        return -ll.sum() + 0.5 * ALPHA * theta @ theta

    best = minimize(negative_log_post, np.zeros(Xe.shape[1] + 1), method="BFGS",
                    options={"gtol": 1e-9})
    est = SGMCMCNegativeBinomialRegressor(n_samples=50, random_state=0).fit(X, y)
    assert est.shape_ == pytest.approx(np.exp(best.x[-1]), rel=5e-3)
    # the data were drawn at 1.5: the estimate is near it
    assert 0.8 < est.shape_ < 3.0
    fixed = SGMCMCNegativeBinomialRegressor(shape=2.5, n_samples=50, random_state=0).fit(X, y)
    assert fixed.shape_ == 2.5


def _laplace_log_evidence(Xe, y, alpha, shape):
    """The test's own Laplace evidence at a fixed shape (terms free of alpha
    dropped): the log posterior at the mode plus ``(dim / 2) log alpha +
    (1/2) log det`` of the inverse Hessian."""
    mode, cov = ref.negative_binomial_laplace(Xe, y, alpha, shape)
    log_post = ref.negative_binomial_log_post(mode[None, :], Xe, y, alpha, shape)[0]
    return log_post + 0.5 * Xe.shape[1] * np.log(alpha) + 0.5 * np.linalg.slogdet(cov)[1]


@pytest.mark.parametrize("shape", ["auto", 2.5])
def test_alpha_auto_maximises_the_evidence_at_the_shape(counts, shape):
    """``alpha="auto"``: the Laplace evidence's alpha at the shape.  With
    ``shape="auto"`` too the two searches alternate to a point where each
    is its own answer given the other: ``alpha_`` within 0.01 nats of the
    maximum of the test's own evidence at ``shape_`` (bounded scalar
    search), and ``shape_`` the joint maximum at ``alpha_`` (an independent
    optimisation, as in the test above)."""
    from scipy.optimize import minimize_scalar
    X, y = counts["X"], counts["y"]
    Xe = ref.add_ones(X)
    est = SGMCMCNegativeBinomialRegressor(alpha="auto", shape=shape, n_samples=50,
                                          random_state=0).fit(X, y)
    assert est.get_params()["alpha"] == "auto" and est.shape_ == (
        2.5 if shape == 2.5 else est.shape_)
    best = minimize_scalar(lambda t: -_laplace_log_evidence(Xe, y, np.exp(t), est.shape_),
                           bounds=(-8.0, 8.0), method="bounded", options={"xatol": 1e-6})
    ours = _laplace_log_evidence(Xe, y, est.alpha_, est.shape_)
    assert -best.fun - ours < 0.01, (est.alpha_, np.exp(best.x))
    assert -best.fun - _laplace_log_evidence(Xe, y, 1.0, est.shape_) > 0.1   # can fail
    if shape == "auto":
        at_alpha = SGMCMCNegativeBinomialRegressor(alpha=est.alpha_, n_samples=50,
                                                   random_state=0).fit(X, y)
        assert est.shape_ == pytest.approx(at_alpha.shape_, rel=2e-3)
        assert abs(np.log(est.shape_ / SGMCMCNegativeBinomialRegressor(
            n_samples=50, random_state=0).fit(X, y).shape_)) > 2e-3    # alpha moved it


# ---------------------------------------------------------------- posterior
def test_posterior_at_the_defaults(counts):
    """sampler, subsampling and metric "auto" (here: exact gradients, HMC in
    the Laplace metric with a Metropolis correction): exact, no allowance."""
    est = SGMCMCNegativeBinomialRegressor(shape=SHAPE, random_state=0, target_ess=2000)
    est.fit(counts["X"], counts["y"])
    assert est.subsampling_ == "full" and est.metropolis_
    _assert_matches(est, counts, 0.0, "defaults")


def test_posterior_cv_preferential_whitened(counts):
    """Control variates with preferential minibatches, BAOAB in the Laplace
    metric, step and batch from the error model (the model has no global
    curvature bound: the set-up takes the curvature at the mode)."""
    est = SGMCMCNegativeBinomialRegressor(shape=SHAPE, subsampling="cv-preferential",
                                          random_state=2, target_ess=2000)
    est.fit(counts["X"], counts["y"])
    assert est.sampler_ == "baoab"
    _assert_matches(est, counts, WHITENED_SD_ALLOW, "cv-preferential/dense BAOAB")


def test_sparse_rows_give_the_dense_fit(counts):
    X, y = counts["X"], counts["y"]
    dense = SGMCMCNegativeBinomialRegressor(n_samples=40, random_state=3).fit(X, y)
    csr = SGMCMCNegativeBinomialRegressor(n_samples=40, random_state=3).fit(
        sp.csr_matrix(X), y)
    assert csr.shape_ == pytest.approx(dense.shape_, rel=1e-8)
    np.testing.assert_allclose(csr.coef_samples_, dense.coef_samples_, rtol=1e-6, atol=1e-9)


def test_overdispersion_widens_the_posterior(counts):
    """The point of the model: on overdispersed counts the Poisson
    posterior is too narrow; the negative binomial's sds are larger by
    about sqrt(1 + mu / r) (here ~1.5-1.7)."""
    X, y = counts["X"], counts["y"]
    nb = SGMCMCNegativeBinomialRegressor(random_state=0).fit(X, y)
    po = SGMCMCPoissonRegressor(random_state=0).fit(X, y)
    ratio = nb.coef_std_ / po.coef_std_
    assert np.all(ratio > 1.3), ratio
    draws = nb.sample_y(X[:3], n_draws=4000, random_state=0)
    assert draws.shape == (3, 4000) and np.all(draws >= 0)
    # the predictive's mean is the model average of the means (predict)
    se = draws.std(axis=1) / np.sqrt(draws.shape[1])
    assert np.all(np.abs(draws.mean(axis=1) - nb.predict(X[:3])) < Z * se)
    assert nb.predict(X).shape == (len(y),)


@pytest.mark.parametrize("y, match", [
    (np.array([1.0, -1.0, 2.0, 0.0]), "nonnegative counts"),
    (np.zeros(4), "positive sum"),
])
def test_bad_targets_name_y(y, match):
    X = np.random.default_rng(0).normal(size=(4, 2))
    with pytest.raises(ValueError, match=match):
        SGMCMCNegativeBinomialRegressor().fit(X, y)


@pytest.mark.parametrize("shape", [0.0, -1.0, "big"])
def test_bad_shape_names_the_parameter(shape):
    X = np.random.default_rng(0).normal(size=(6, 2))
    with pytest.raises(ValueError, match="'shape' parameter"):
        SGMCMCNegativeBinomialRegressor(shape=shape).fit(X, np.arange(6.0))


def test_the_shape_search_starts_each_mode_from_the_last(counts):
    """Each round of the shape search starts its Newton search at the last
    round's mode (``FitContext.search_mode_from``): the same mode, in fewer
    passes than from zero."""
    from skbayes_sg._sampling._context import FitContext
    X, y = counts["X"], counts["y"]
    cold = FitContext(X, y, GLM(NEGATIVE_BINOMIAL, 1, (SHAPE,)), ALPHA, True, 50)
    mode = cold.mode()
    warm = FitContext(X, y, GLM(NEGATIVE_BINOMIAL, 1, (SHAPE,)), ALPHA, True, 50)
    warm.search_mode_from(mode)
    np.testing.assert_allclose(warm.mode(), mode, atol=1e-6)
    np.testing.assert_allclose(mode, counts["mode"], atol=1e-4)     # the reference's own
    assert warm.n_grad_evals < cold.n_grad_evals
