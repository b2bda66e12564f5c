"""Poisson regression (log link): the registry entry, the Cython kernel,
the local-curvature rule and the sampled posterior.

The posterior is compared with an independent reference written for these
tests (``_reference.py``: the Poisson log posterior, its Laplace
approximation by damped Newton, and an independence Metropolis-Hastings
sampler with a multivariate-t proposal built on it, acceptance ~0.88),
on a small problem (n = 200, two features and an intercept, mean count
0.56, so the posterior is visibly skewed: the intercept's mean sits 0.13
sd below its mode).

Monte Carlo tolerances, as in ``test_posterior.py``: every mean within
``Z = 4.5`` combined Monte Carlo standard errors (sampler and reference,
``sd / sqrt(ESS)``); every sd within ``Z`` combined standard errors of the
sd plus, for the discretised samplers, the bias their step rule allows
(stated where used).  Fixed seeds.
"""
import ast
import csv
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.special import gammaln
from sklearn.metrics import d2_tweedie_score

from skbayes_sg import SGMCMCPoissonRegressor
from skbayes_sg._sampling import _context
from skbayes_sg._sampling._glm import (
    LOCAL_CURVATURE_SAFETY, MODEL_KINDS, MODELS, POISSON, POISSON_Z_MAX, GLM)
from skbayes_sg._sampling._models import C_MODEL_KINDS, py_glm_loss, py_glm_residual

try:  # tests/ as a package or as a plain directory on sys.path
    from . import _reference as ref
except ImportError:
    import _reference as ref

Z = 4.5
ALPHA = 1.0
#: Euler SGLD in the identity metric at the automatic step (0.1 / (L + v),
#: L the curvature at the mode doubled): the step rule's budget is a
#: variance inflation of about 5-10% in the stiffest direction, so up to
#: 5% on an sd
IDENTITY_SD_ALLOW = 0.05
#: the whitened samplers' error model keeps every variance within 4%: 2% on an sd
WHITENED_SD_ALLOW = 0.02


# ------------------------------------------------------------------ problem
def _problem(seed=7, n=200):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = rng.poisson(np.exp(-0.7 + X @ [0.6, -0.4])).astype(np.float64)
    return X, y


def _reference_draws(Xe, y, seed):
    mode, cov = ref.poisson_laplace(Xe, y, ALPHA)
    draws, acc = ref.independence_mh(lambda T: ref.poisson_log_post(T, Xe, y, ALPHA),
                                     mode, cov, n_draws=25000, n_chains=4, seed=seed,
                                     df=10.0, scale=1.0)
    assert acc > 0.5, acc
    m, _, se, n_eff = ref.mean_and_se(draws)
    sd, sd_se = ref.sd_and_se(draws)
    assert n_eff.min() > 20000
    return dict(mode=mode, mean=m, mean_se=se, sd=sd, sd_se=sd_se)


@pytest.fixture(scope="module")
def counts():
    X, y = _problem()
    return dict(X=X, y=y, **_reference_draws(ref.add_ones(X), y, seed=11))


def _draws(est):
    return np.concatenate([est.coef_samples_, est.intercept_samples_[..., None]], axis=-1)


def _assert_matches(est, target, sd_allow, what):
    """Means within Z combined MC se; sds within sd_allow + Z combined se."""
    draws = _draws(est)
    m, _, se, n_eff = ref.mean_and_se(draws)
    zs = (m - target["mean"]) / np.hypot(se, target["mean_se"])
    sd, sd_se = ref.sd_and_se(draws)
    ratio = sd / target["sd"]
    tol = sd_allow + Z * np.hypot(sd_se, target["sd_se"]) / target["sd"]
    print(f"{what}: mean {np.round(m, 4)} vs {np.round(target['mean'], 4)}, z "
          f"{np.round(zs, 2)}, ESS {np.round(n_eff)}; sd ratio {np.round(ratio, 3)}, "
          f"tol {np.round(tol, 3)}")
    assert np.all(np.abs(zs) < Z), (
        f"{what}: means {np.round(m, 4)}, reference {np.round(target['mean'], 4)}, "
        f"z {np.round(zs, 2)}")
    assert np.all(np.abs(ratio - 1) < tol), (
        f"{what}: sd ratio {np.round(ratio, 3)}, tolerance {np.round(tol, 3)}")


# ------------------------------------------------------- registry and kernel
def test_registry_is_the_compiled_enum():
    """The registry's kinds are the Cython ModelKind values, one name each."""
    assert MODEL_KINDS == C_MODEL_KINDS
    assert MODELS["poisson"].kind == POISSON and GLM(POISSON).name == "poisson"
    assert GLM(POISSON).curvature_bound() is None


def test_kernel_matches_numpy_and_derivatives():
    """The Cython residual and loss equal the registry's numpy ones (the
    overflow continuation included); the numpy residual is the derivative
    of the loss and the Hessian weight that of the residual."""
    glm = GLM(POISSON)
    zs = np.array([-30.0, -2.0, -0.3, 0.0, 0.7, 3.0, 20.0, POISSON_Z_MAX + 5.0])
    for y in (0.0, 1.0, 4.0, 2.5):
        Zc = zs[:, None]
        yv = np.full(len(zs), y)
        r = glm.residual(Zc, yv)[:, 0]
        u = glm.loss(Zc, yv)
        assert np.all(np.isfinite(u)) and np.all(np.isfinite(r))
        for k, z in enumerate(zs):
            assert py_glm_residual(POISSON, np.array([z]), y)[0] == pytest.approx(r[k],
                                                                                  rel=1e-12)
            assert py_glm_loss(POISSON, np.array([z]), y) == pytest.approx(u[k], rel=1e-12)
        inner = zs[zs < 25]
        eps = 1e-6
        Zp, Zm = (inner + eps)[:, None], (inner - eps)[:, None]
        yi = np.full(len(inner), y)
        fd = (glm.loss(Zp, yi) - glm.loss(Zm, yi)) / (2 * eps)
        np.testing.assert_allclose(fd, glm.residual(inner[:, None], yi)[:, 0],
                                   rtol=1e-6, atol=1e-8)
        fd2 = (glm.residual(Zp, yi) - glm.residual(Zm, yi))[:, 0] / (2 * eps)
        np.testing.assert_allclose(fd2, glm.hessian_weights(inner[:, None], yi),
                                   rtol=1e-6, atol=1e-8)


def test_log_predictive_is_the_poisson_pmf():
    from scipy.stats import poisson

    glm = GLM(POISSON)
    z = np.array([-1.0, 0.2, 2.0])
    y = np.array([0.0, 3.0, 7.0])
    np.testing.assert_allclose(glm.log_predictive(z[:, None], y),
                               poisson.logpmf(y, np.exp(z)), rtol=1e-12)
    # the loss drops only log y!
    np.testing.assert_allclose(-glm.loss(z[:, None], y) - gammaln(y + 1),
                               poisson.logpmf(y, np.exp(z)), rtol=1e-12)


def test_local_curvature_rule(counts):
    """Without a global bound, the set-up's bound is the Hessian at the
    mode with the per-datum curvatures doubled, and so are the Lipschitz
    constants of the adaptive estimator."""
    X, y = counts["X"], counts["y"]
    ctx = _context.FitContext(X, y, GLM(POISSON), ALPHA, True, 50)
    Xe = ref.add_ones(X)
    h = np.exp(Xe @ counts["mode"])           # the reference's own mode
    np.testing.assert_allclose(ctx.mode(), counts["mode"], atol=1e-5)
    expected = ALPHA + LOCAL_CURVATURE_SAFETY * np.linalg.eigvalsh((Xe * h[:, None]).T @ Xe)[-1]
    # power iteration: an upper estimate within 1%
    assert expected * (1 - 1e-6) <= ctx.curvature_bound() <= 1.02 * expected
    assert ctx.curvature(ctx.mode()) == pytest.approx(ctx.curvature_bound(), rel=1e-12)
    np.testing.assert_allclose(ctx.lipschitz(),
                               LOCAL_CURVATURE_SAFETY * h * np.einsum("ij,ij->i", Xe, Xe),
                               rtol=1e-4)
    with pytest.raises(ValueError, match="no global curvature bound"):
        GLM(POISSON).lipschitz(X, True)


# ---------------------------------------------------------------- posterior
def test_posterior_at_the_defaults(counts):
    """sampler, subsampling and metric "auto" (here: exact gradients, HMC
    in the Laplace metric with a Metropolis correction): exact, no allowance."""
    est = SGMCMCPoissonRegressor(random_state=0, target_ess=2000).fit(counts["X"], counts["y"])
    assert est.subsampling_ == "full" and est.metropolis_
    _assert_matches(est, counts, 0.0, "defaults")


def test_posterior_stochastic_gradient_identity(counts):
    """Uniform minibatches, Euler SGLD in the identity metric at the
    automatic step: the local-curvature rule sets the step."""
    est = SGMCMCPoissonRegressor(subsampling="uniform", metric="identity", batch_size=20,
                                 random_state=1, target_ess=2000)
    est.fit(counts["X"], counts["y"])
    assert est.sampler_ == "sgld" and not est.metropolis_
    _assert_matches(est, counts, IDENTITY_SD_ALLOW, "uniform/identity SGLD")


def test_posterior_cv_preferential_whitened(counts):
    """Control variates with preferential minibatches, BAOAB in the Laplace
    metric, step and batch from the error model."""
    est = SGMCMCPoissonRegressor(subsampling="cv-preferential", random_state=2,
                                 target_ess=2000).fit(counts["X"], counts["y"])
    assert est.sampler_ == "baoab"
    _assert_matches(est, counts, WHITENED_SD_ALLOW, "cv-preferential/dense BAOAB")


def test_sample_weight_is_repeated_rows(counts):
    """Integer frequency weights give the posterior of the repeated rows
    (the reference samples the repeated data set); zero drops a row."""
    X, y = counts["X"], counts["y"]
    w = np.random.default_rng(3).integers(0, 4, size=len(y)).astype(np.float64)
    rows = np.repeat(np.arange(len(y)), w.astype(int))
    target = _reference_draws(ref.add_ones(X[rows]), y[rows], seed=12)
    est = SGMCMCPoissonRegressor(subsampling="cv-preferential", random_state=3,
                                 target_ess=2000).fit(X, y, sample_weight=w)
    np.testing.assert_allclose(est.mode_.ravel(), target["mode"], atol=1e-5)
    _assert_matches(est, target, WHITENED_SD_ALLOW, "weighted cv-preferential")


# ------------------------------------------------------ estimator behaviour
@pytest.mark.parametrize("y, match", [
    ([0.0, 2.0, -1.0, 3.0], "y must be nonnegative counts"),
    ([0.0, 0.0, 0.0, 0.0], "y must have a positive sum"),
    ([0.0, np.nan, 1.0, 3.0], "y contains NaN"),
])
def test_bad_targets_name_y(y, match):
    X = np.arange(8.0).reshape(4, 2)
    with pytest.raises(ValueError, match=match):
        SGMCMCPoissonRegressor(n_samples=10, n_warmup=10).fit(X, y)


def test_predict_score_and_tags(counts):
    X, y = counts["X"], counts["y"]
    est = SGMCMCPoissonRegressor(random_state=0, n_samples=100, n_warmup=100).fit(X, y)
    W = est.coef_samples_.reshape(-1, 2)
    b = est.intercept_samples_.ravel()
    expected = np.exp(X @ W.T + b).mean(axis=1)
    np.testing.assert_allclose(est.predict(X), expected, rtol=1e-12)
    assert est.score(X, y) == pytest.approx(d2_tweedie_score(y, expected, power=1))
    assert 0.0 < est.score(X, y) < 1.0
    assert est.__sklearn_tags__().target_tags.positive_only
    draws = est.sample_y(X[:5], n_draws=3, random_state=0)
    assert draws.shape == (5, 3) and np.all(draws >= 0)
    # sparse rows give the same predictions
    np.testing.assert_allclose(est.predict(sp.csr_matrix(X)), expected, rtol=1e-12)


def test_ksd_and_arviz_export(counts):
    from skbayes_sg.diagnostics import ksd_from_estimator

    X, y = counts["X"], counts["y"]
    est = SGMCMCPoissonRegressor(random_state=0, n_samples=200, n_warmup=200).fit(X, y)
    value = ksd_from_estimator(est, X, y)
    assert np.isfinite(value) and value > 0
    with pytest.raises(ValueError, match="nonnegative"):
        ksd_from_estimator(est, X, -y)
    az = pytest.importorskip("arviz")
    idata = est.to_inference_data(X, y, posterior_predictive=True, random_state=0)
    loglik = idata.log_likelihood["y"].values             # (chain, draw, obs)
    Zd = est.coef_samples_ @ X.T + est.intercept_samples_[..., None]
    from scipy.stats import poisson
    np.testing.assert_allclose(loglik, poisson.logpmf(y, np.exp(Zd)), rtol=1e-10)
    assert np.all(idata.posterior_predictive["y"].values >= 0)
    assert np.isfinite(az.loo(idata).elpd_loo)


def test_cli_poisson(tmp_path, counts):
    from skbayes_sg._cli_fit import DataError, fit_file

    path = tmp_path / "counts.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["a", "b", "count"])
        w.writerows([[*x, int(t)] for x, t in zip(counts["X"], counts["y"])])
    result = fit_file(path, target="count", model="poisson", test_size=0.25,
                      estimator_params=dict(random_state=0), stdout=open("/dev/null", "w"))
    assert isinstance(result["estimator"], SGMCMCPoissonRegressor)
    assert np.isfinite(result["metrics"]["mean_log_predictive_density"])
    bad = tmp_path / "bad.csv"
    bad.write_text("a,count\n1,2\n2,-1\n")
    with pytest.raises(DataError, match="nonnegative counts"):
        fit_file(bad, target="count", model="poisson", test_size=0,
                 stdout=open("/dev/null", "w"))


def test_diagnostics_do_not_import_the_base():
    """The import cycle _base -> diagnostics -> _ksd -> _base is gone: no
    module of diagnostics imports _base (they ask the estimator for its model)."""
    for path in (Path(__file__).resolve().parents[1] / "skbayes_sg" / "diagnostics").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert "_base" not in (node.module or ""), path.name
            elif isinstance(node, ast.Import):
                assert not any("_base" in a.name for a in node.names), path.name


# -------------------------------------------------------------------- slow
@pytest.mark.slow
def test_reference_samplers_agree(counts):
    """The reference itself: a Laplace-preconditioned random-walk Metropolis
    (a different algorithm) gives the independence sampler's means and sds."""
    Xe = ref.add_ones(counts["X"])
    mode, cov = ref.poisson_laplace(Xe, counts["y"], ALPHA)
    draws, acc = ref.rwm_preconditioned(
        lambda T: ref.poisson_log_post(T, Xe, counts["y"], ALPHA), mode, cov,
        n_steps=40000, n_chains=8, seed=5)
    assert 0.15 < acc < 0.5, acc
    draws = draws[:, 2000:]
    m, _, se, _ = ref.mean_and_se(draws)
    assert np.all(np.abs(m - counts["mean"]) / np.hypot(se, counts["mean_se"]) < Z)
    sd, sd_se = ref.sd_and_se(draws)
    assert np.all(np.abs(sd - counts["sd"]) / np.hypot(sd_se, counts["sd_se"]) < Z)


@pytest.mark.slow
@pytest.mark.parametrize("sampler", ["sghmc", "uld", "baoab"])
def test_posterior_identity_metric_samplers(counts, sampler):
    """The samplers with momentum in the identity metric, whose friction
    and step come from the local curvature rule (critical damping of the
    stiffest direction at the mode's curvature, doubled)."""
    est = SGMCMCPoissonRegressor(sampler=sampler, subsampling="uniform", metric="identity",
                                 batch_size=20, random_state=4, target_ess=2000)
    est.fit(counts["X"], counts["y"])
    _assert_matches(est, counts, IDENTITY_SD_ALLOW, f"uniform/identity {sampler}")


@pytest.mark.slow
def test_posterior_adaptive_pv_threshold(counts):
    """The adaptive-size estimator with a numeric pseudo-variance bound,
    whose Lipschitz constants are the local-curvature ones."""
    est = SGMCMCPoissonRegressor(subsampling="adaptive-cv", metric="identity",
                                 pv_threshold=1500.0, random_state=5, target_ess=2000)
    est.fit(counts["X"], counts["y"])
    _assert_matches(est, counts, IDENTITY_SD_ALLOW, "adaptive-cv/identity")
