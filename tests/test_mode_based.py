"""Mode-based gradient estimators: SGLD-CV, SGLD-PS, SGLD-CV-PS and the
adaptive-size ASGLD-CV / ASGLD-CV-PS (preferential-subsampling paper; the
formula sheet, doc/algorithms.rst, "Gradient estimators").

What is checked, and against what:

* Unbiasedness, exactly: on a 5-row problem every estimator (with the
  weights and control point the library prepares) is averaged over all
  ``n^b`` ordered minibatches, each with probability ``prod_t p_{j_t}``; the
  average is the full data gradient to rounding.  The same enumeration gives
  the exact covariance of the estimate, which must equal the closed form
  ``(1/b) [sum_i v_i v_i^T / p_i - (sum_i v_i)(sum_i v_i)^T]`` used for the
  pseudo-variance below.
* The alias method: ``alias_table`` reproduces the weights exactly, and the
  indices the engine draws follow them (chi-square).
* ``mode_`` and ``laplace_cov_`` against independent Newton iterations
  (``_reference.py``); the preferential weights against brute force with
  explicit ``d x d`` Hessians, binary and multinomial.
* The adaptive size rule ``b_k = clip(ceil(coef ||theta - mode||^2), 1, n)``
  through the engine at chosen states, and, from outside, at every step of a
  fitted chain (with ``thin=1`` the draws are the states the sizes were
  computed from); ``coef = sum_i (L_i^2 / p_i) / V*`` for a given ``V*``,
  ``b / q95`` for the pilot rule; ``n_grad_evals_`` decomposed.
* Posterior accuracy on Bayesian ridge: the fixed-size estimators against the
  *exact* stationary law of the chain at the step size used (the chain is a
  random-coefficient affine recursion; its first two moments under weighted
  with-replacement sampling are solved below), then against the exact
  posterior; the adaptive ones against the exact posterior.
* The paper's pseudo-variance (its eq. 6, ``E ||g_hat - grad U||^2``, the
  trace of the covariance of the estimate) at posterior draws of a balanced
  and a 95%-imbalanced logistic regression: PS below uniform, CV-PS below CV.

Monte Carlo tolerances are ``Z = 4.5`` standard errors with the ESS of
``_reference.ess``; all seeds are fixed.
"""
import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.special import expit, softmax
from scipy.stats import chisquare
from sklearn.datasets import make_classification

from skbayes_sg import SGMCMCLogisticRegression, SGMCMCRidge
from skbayes_sg._sampling._chain import ChainOracle
from skbayes_sg._sampling._registry import DEFENSIVE_SHARE
from skbayes_sg._sampling._context import FitContext, FitSettings
from skbayes_sg._sampling._dataset import RowData
from skbayes_sg._sampling._estimators import (
    FullGradient, GLMEstimator, Problem, alias_table)
from skbayes_sg._sampling._glm import GAUSSIAN, GLM, LOGISTIC, SOFTMAX, potential_and_grad
from skbayes_sg._sampling._registry import SUBSAMPLINGS

# the mode-based estimators as their papers define them: SGLD in the
# parameters' own coordinates, started at the mode (the Laplace metric, the
# Metropolis correction and the automatic budget: tests/test_metric.py)
CLASSIC = dict(metric="identity", sampler="sgld", metropolis=False, init="mode")

try:
    from . import _reference as ref
    from ._datasets import australian_scale
except ImportError:
    import _reference as ref
    from _datasets import australian_scale

Z = 4.5
MODE_BASED = ["cv", "preferential", "cv-preferential", "adaptive-cv",
              "adaptive-cv-preferential"]
MODELS = {"logistic": (LOGISTIC, 1), "gaussian": (GAUSSIAN, 1), "softmax": (SOFTMAX, 3)}


# ================================================================ helpers
def _tiny(model, layout="dense", fit_intercept=True, n=5, d=3, seed=0, dtype=np.float64):
    """A 5-row problem: data, Problem, GLM, FitContext and a test point theta."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[rng.random((n, d)) < 0.3] = 0.0                  # real zeros for CSR
    X = X.astype(dtype)
    kind, K = MODELS[model]
    if model == "logistic":
        y = rng.permutation(np.arange(n) % 2).astype(np.float64)
    elif model == "gaussian":
        y = rng.normal(size=n)
    else:
        y = (np.arange(n) % K).astype(np.float64)
    noise_var = 0.6
    Xin = sp.csr_matrix(X) if layout == "csr" else np.ascontiguousarray(X)
    glm = GLM(kind, K, (noise_var,) if kind == GAUSSIAN else ())
    prob = Problem(RowData(Xin, fit_intercept), y, model, K, glm.params)
    ctx = FitContext(Xin, y, glm, 0.9, fit_intercept, 2)
    ctx.settings = FitSettings(access="random", pv_threshold=3.0, pilot_steps=50, pilot_seed=0)
    theta = rng.normal(size=K * (d + int(fit_intercept)))
    return Xin, y, glm, prob, ctx, theta


def _per_datum_grads(theta, X, y, glm, fit_intercept):
    """(n, dim) matrix of grad U_i(theta) (numpy reference, one row at a time)."""
    X = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=np.float64)
    return np.array([potential_and_grad(theta, X[i:i + 1], y[i:i + 1], glm, 0.0,
                                        fit_intercept)[1] for i in range(len(y))])


def exact_cov(V, p, b):
    """Covariance of ``(1/b) sum_t V[j_t] / p[j_t]``, j_t i.i.d. from p:
    ``(1/b) [sum_i v_i v_i^T / p_i - (sum_i v_i)(sum_i v_i)^T]``."""
    s = V.sum(axis=0)
    return ((V / p[:, None]).T @ V - np.outer(s, s)) / b


def pseudo_variance(V, p, b):
    """Trace of :func:`exact_cov` (the paper's eq. 6)."""
    s = V.sum(axis=0)
    return (np.sum(np.einsum("ij,ij->i", V, V) / p) - s @ s) / b


def pseudo_variance_wor(V, b):
    """Uniform minibatches *without* replacement: ``(n^2/b) s2 (n-b)/(n-1)``,
    s2 the population variance (trace) of the rows of V."""
    n = len(V)
    s2 = np.sum((V - V.mean(axis=0)) ** 2) / n
    return n * n / b * s2 * (n - b) / (n - 1)


def _weights(cfg, n):
    w = cfg.get("weights")
    return np.full(n, 1.0 / n) if w is None else w / w.sum()


def _draws(est):
    coef, icpt = est.coef_samples_, est.intercept_samples_
    return np.concatenate([coef, icpt[..., None]], axis=-1)


# ================================================ 1. exact finite sums
@pytest.mark.parametrize("layout", ["dense", "csr"])
@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("name", MODE_BASED)
def test_unbiased_by_enumeration(name, model, layout):
    """E_S[g_S] = sum_i grad U_i(theta) exactly, for b = 1 and 2, with the
    library's own prepared weights and control point; and the enumerated
    covariance equals the closed form."""
    X, y, glm, prob, ctx, theta = _tiny(model, layout)
    n = prob.n
    cfg = SUBSAMPLINGS[name].prepare(ctx)
    est = SUBSAMPLINGS[name].build(prob, cfg)
    p = _weights(cfg, n)
    full = FullGradient(prob).py_evaluate(theta)
    G = _per_datum_grads(theta, X, y, glm, True)
    np.testing.assert_allclose(full, G.sum(axis=0), rtol=1e-10, atol=1e-12)

    # control variates at the library's mode; none for PS
    if "cv" in name:
        mode = cfg["control_point"]
        np.testing.assert_allclose(mode, ctx.mode())
        V = G - _per_datum_grads(mode, X, y, glm, True)
    else:
        V = G
    for b in (1, 2):
        tuples = list(itertools.product(range(n), repeat=b))
        probs = np.array([np.prod(p[list(t)]) for t in tuples])
        assert probs.sum() == pytest.approx(1.0, abs=1e-12)
        vals = np.array([est.py_evaluate(theta, t) for t in tuples])
        mean = probs @ vals
        np.testing.assert_allclose(mean, full, rtol=1e-10, atol=1e-10)
        cov = (vals - mean).T @ ((vals - mean) * probs[:, None])
        np.testing.assert_allclose(cov, exact_cov(V, p, b), rtol=1e-8,
                                   atol=1e-10 * max(1.0, np.abs(cov).max()))
    # b = 1: the estimate for datum j is A + v_j / p_j
    for j in range(n):
        np.testing.assert_allclose(est.py_evaluate(theta, [j]), full - V.sum(0) + V[j] / p[j],
                                   rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_unbiased_float32_no_intercept(fit_intercept):
    X, y, glm, prob, ctx, theta = _tiny("logistic", "csr", fit_intercept, dtype=np.float32)
    cfg = SUBSAMPLINGS["cv-preferential"].prepare(ctx)
    est = SUBSAMPLINGS["cv-preferential"].build(prob, cfg)
    p = _weights(cfg, prob.n)
    tuples = list(itertools.product(range(prob.n), repeat=2))
    mean = sum(np.prod(p[list(t)]) * est.py_evaluate(theta, t) for t in tuples)
    np.testing.assert_allclose(mean, FullGradient(prob).py_evaluate(theta), rtol=1e-9,
                               atol=1e-10)


def test_without_replacement_pseudo_variance_formula():
    """The closed form for uniform minibatches without replacement (used by
    the Fig. 1 benchmark), checked by enumerating all subsets."""
    rng = np.random.default_rng(0)
    V = rng.normal(size=(6, 3))
    for b in (1, 2, 4, 6):
        ests = np.array([6 / b * V[list(s)].sum(axis=0)
                         for s in itertools.combinations(range(6), b)])
        pv = np.sum(ests.var(axis=0))
        assert pv == pytest.approx(pseudo_variance_wor(V, b), rel=1e-10, abs=1e-12)
    assert pseudo_variance(V, np.full(6, 1 / 6), 1) == pytest.approx(
        6 * 6 * np.sum(V.var(axis=0)), rel=1e-12)


# ========================================================= 2. alias method
def _alias_implied(prob, alias):
    n = len(prob)
    implied = prob.copy()
    np.add.at(implied, alias, 1.0 - prob)
    return implied / n


@pytest.mark.parametrize("case", ["lognormal", "extreme", "uniform", "floored", "one", "two"])
def test_alias_table_reproduces_weights(case):
    rng = np.random.default_rng(5)
    w = {"lognormal": rng.lognormal(sigma=2.0, size=1000),
         "extreme": np.r_[1e6, np.ones(50)],
         "uniform": np.ones(17),
         "floored": np.r_[rng.random(30), np.full(5, 1e-12)],
         "one": np.array([3.0]),
         "two": np.array([1.0, 3.0])}[case]
    prob, alias = alias_table(w)
    assert np.all((prob >= 0) & (prob <= 1 + 1e-12))
    assert np.all((alias >= 0) & (alias < len(w)))
    np.testing.assert_allclose(_alias_implied(prob, alias), w / w.sum(), rtol=1e-9,
                               atol=1e-14)


def test_weighted_access_draws_follow_the_weights():
    """b = 1, no control: each oracle gradient is alpha theta + g_j / p_j for
    the drawn j, so the index is observed; the counts follow p (chi-square)."""
    X, y, glm, prob, ctx, theta = _tiny("logistic", n=6)
    w = np.array([0.05, 0.4, 0.1, 0.2, 0.15, 0.1]) * 3.7       # unnormalised
    p = w / w.sum()
    est = GLMEstimator(prob, 1, access="weighted", weights=w)
    alpha = 0.8
    oracle = ChainOracle(est, alpha)
    G = _per_datum_grads(theta, X, y, glm, True)
    cands = alpha * theta + G / p[:, None]
    bitgen = np.random.PCG64(11)
    N = 30000
    out = np.array([oracle.py_gradient(theta, bitgen) for _ in range(N)])
    dist = np.linalg.norm(out[:, None, :] - cands[None], axis=2)
    assert np.all(dist.min(axis=1) < 1e-9)
    counts = np.bincount(dist.argmin(axis=1), minlength=6)
    assert chisquare(counts, N * p).pvalue > 1e-4, (counts, N * p)
    # and a b = 3 oracle is unbiased
    oracle3 = ChainOracle(GLMEstimator(prob, 3, access="weighted", weights=w), alpha)
    out = np.array([oracle3.py_gradient(theta, bitgen) for _ in range(20000)])
    exact = alpha * theta + G.sum(axis=0)
    se = out.std(axis=0, ddof=1) / np.sqrt(len(out))
    assert np.all(np.abs(out.mean(axis=0) - exact) < Z * se)


# ================================================== 3. mode, Laplace, weights
def _binary_data(n=300, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3)) * [1.0, 2.0, 0.5]
    y = (rng.random(n) < expit(X @ [1.0, -0.7, 0.4] + 0.3)).astype(int)
    return X, y


def _multi_data(n=300, K=3, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    W = rng.normal(size=(K, 3))
    y = np.array([rng.choice(K, p=pr) for pr in softmax(X @ W.T, axis=1)])
    return X, y


def _quick(Est, **kw):
    params = dict(n_samples=5, n_warmup=0, n_chains=1, step_size=1e-4, batch_size=10,
                  random_state=0, alpha=0.7)
    params.update(kw)
    return Est(**CLASSIC, **params)


def _defensive(w):
    """The sampling law of static weights ``w``: mixed with the uniform one."""
    return (1.0 - DEFENSIVE_SHARE) * w / w.sum() + DEFENSIVE_SHARE / len(w)


def test_mode_and_laplace_binary():
    X, y = _binary_data()
    est = _quick(SGMCMCLogisticRegression, subsampling="cv-preferential").fit(X, y)
    Xe = ref.add_ones(X)
    mode, cov = ref.logistic_laplace(Xe, y.astype(float), 0.7)
    np.testing.assert_allclose(est.mode_.ravel(), mode, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(est.laplace_cov_, cov, rtol=1e-6, atol=1e-12)
    # CV-PS weights by brute force: explicit d x d Hessians, trace(H_i S H_i)
    s = expit(Xe @ mode)
    w_ref = np.array([np.sqrt(np.trace(H @ cov @ H)) for H in
                      (c * np.outer(x, x) for c, x in zip(s * (1 - s), Xe))])
    w = est._fit_setup.subsampling_config["weights"]
    np.testing.assert_allclose(w / w.sum(), _defensive(w_ref), rtol=1e-6)
    # PS weights: ||grad U_i(mode)|| = |s_i - y_i| ||(x_i, 1)||
    est_ps = _quick(SGMCMCLogisticRegression, subsampling="preferential").fit(X, y)
    w_ps = est_ps._fit_setup.subsampling_config["weights"]
    w_ref = np.abs(s - y) * np.linalg.norm(Xe, axis=1)
    np.testing.assert_allclose(w_ps / w_ps.sum(), _defensive(w_ref), rtol=1e-6)
    # PS needs no Hessian pass of its own: the covariance it reports (and
    # bounds its chains with) is the mode search's last Newton Hessian
    np.testing.assert_allclose(est_ps.laplace_cov_, cov, rtol=1e-6, atol=1e-12)
    assert est_ps.n_setup_passes_ <= est.n_setup_passes_


def test_mode_and_laplace_multinomial():
    X, y = _multi_data()
    K = 3
    est = _quick(SGMCMCLogisticRegression, subsampling="cv-preferential").fit(X, y)
    Xe = ref.add_ones(X)
    mode, cov = ref.softmax_laplace(Xe, y, K, 0.7)     # class-major, as the engine
    assert est.mode_.shape == (K, 4)
    np.testing.assert_allclose(est.mode_.ravel(), mode, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(est.laplace_cov_, cov, rtol=1e-5, atol=1e-10)
    Pr = softmax(Xe @ mode.reshape(K, 4).T, axis=1)
    w_ref = []
    for x, pr in zip(Xe, Pr):
        H = np.kron(np.diag(pr) - np.outer(pr, pr), np.outer(x, x))   # (K*4, K*4)
        w_ref.append(np.sqrt(np.trace(H @ cov @ H)))
    w_ref = np.array(w_ref)
    w = est._fit_setup.subsampling_config["weights"]
    np.testing.assert_allclose(w / w.sum(), _defensive(w_ref), rtol=1e-5)
    # PS weights: ||(p_i - e_{y_i}) (x) (x_i, 1)||
    est_ps = _quick(SGMCMCLogisticRegression, subsampling="preferential").fit(X, y)
    R = Pr - np.eye(K)[y]
    w_ref = np.linalg.norm(R, axis=1) * np.linalg.norm(Xe, axis=1)
    w_ps = est_ps._fit_setup.subsampling_config["weights"]
    np.testing.assert_allclose(w_ps / w_ps.sum(), _defensive(w_ref), rtol=1e-5)


def test_mode_and_laplace_ridge():
    X, y = _binary_data()
    y = X @ [0.5, 1.0, -2.0] + np.random.default_rng(3).normal(size=len(X))
    est = _quick(SGMCMCRidge, subsampling="cv-preferential", noise_var=0.8).fit(X, y)
    mean, cov, P = ref.ridge_posterior(X, y, 0.7, 0.8)
    np.testing.assert_allclose(est.mode_.ravel(), mean, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(est.laplace_cov_, cov, rtol=1e-9)
    # Gaussian: H_i = x x^T / s2, so w_i ∝ sqrt(x^T S x) ||x||
    Xe = ref.add_ones(X)
    w_ref = np.sqrt(np.einsum("ij,jk,ik->i", Xe, cov, Xe)) * np.linalg.norm(Xe, axis=1)
    w = est._fit_setup.subsampling_config["weights"]
    np.testing.assert_allclose(w / w.sum(), _defensive(w_ref), rtol=1e-9)


# ======================================================== 4. adaptive sizes
def _rule(coef, dist2, n):
    return np.clip(np.ceil(coef * dist2), 1, n).astype(int)


def test_adaptive_rule_in_the_engine():
    X, y, glm, prob, ctx, _ = _tiny("logistic", n=40, d=3, seed=2)
    mode = ctx.mode()
    R, Gs = ctx.residuals(mode)
    coef = 7.3
    est = GLMEstimator(prob, 4, access="random", control="fixed", control_point=mode,
                       control_residuals=R.ravel(), control_sum=Gs, adaptive_coef=coef,
                       centre=mode)
    assert est.is_adaptive and est.capacity == 40
    oracle = ChainOracle(est, 0.9)
    bitgen = np.random.PCG64(0)
    u = np.random.default_rng(0).normal(size=mode.size)
    u /= np.linalg.norm(u)
    # coef * t^2 spans: 0, below 1, between integers, large, beyond n
    targets = np.array([0.0, 0.3, 1.7, 2.5, 9.2, 17.6, 39.4, 40.5, 1e4])
    thetas = [mode + np.sqrt(t / coef) * u for t in targets]
    est.start_size_log(len(thetas))
    for th in thetas:
        oracle.py_gradient(th, bitgen)
    dist2 = np.array([np.sum((th - mode) ** 2) for th in thetas])
    expected = _rule(coef, dist2, 40)
    np.testing.assert_array_equal(est.size_log_values(), expected)
    np.testing.assert_array_equal(expected, [1, 1, 2, 3, 10, 18, 40, 40, 40])
    # an adaptive estimate stays unbiased (size chosen from theta, not from S)
    th = thetas[4]
    full = 0.9 * th + FullGradient(prob).py_evaluate(th)
    G = np.array([oracle.py_gradient(th, bitgen) for _ in range(20000)])
    se = G.std(axis=0, ddof=1) / np.sqrt(len(G))
    assert np.all(np.abs(G.mean(axis=0) - full) < Z * se)


@pytest.mark.parametrize("name", ["adaptive-cv", "adaptive-cv-preferential"])
def test_adaptive_sizes_of_a_fitted_chain(name):
    """pv_threshold = V* given: coef = sum_i (L_i^2 / p_i) / V* with
    L_i = ||(x_i, 1)||^2 / 4, and every recorded size follows the rule from
    the previous state (thin=1, n_warmup=0: the draws are those states; the
    first step starts at the mode, size 1)."""
    X, y = _binary_data(400)
    n = len(y)
    V = 2.0e4
    est = SGMCMCLogisticRegression(**CLASSIC, subsampling=name, pv_threshold=V, batch_size=8,
                                   step_size=2e-3, n_samples=300, n_warmup=0, thin=1,
                                   n_chains=2, random_state=0).fit(X, y)
    cfg = est._fit_setup.subsampling_config
    Xe = ref.add_ones(X)
    L = 0.25 * np.einsum("ij,ij->i", Xe, Xe)
    p = _weights(cfg, n)
    coef = np.sum(L ** 2 / p) / V
    assert cfg["adaptive_coef"] == pytest.approx(coef, rel=1e-10)
    assert est.batch_sizes_.shape == (2, 300)
    assert est.batch_sizes_.min() >= 1 and est.batch_sizes_.max() <= n
    assert est.mean_batch_size_ == pytest.approx(est.batch_sizes_.mean())
    draws = _draws(est)                                   # (2, 300, 4)
    mode = est.mode_.ravel()
    prev = np.concatenate([np.broadcast_to(mode, (2, 1, 4)), draws[:, :-1]], axis=1)
    dist2 = np.sum((prev - mode) ** 2, axis=2)
    expected = _rule(coef, dist2, n)
    # ceil at an exact integer could round either way: exclude such states
    clear = np.abs(coef * dist2 - np.round(coef * dist2)) > 1e-9 * np.maximum(1, coef * dist2)
    np.testing.assert_array_equal(est.batch_sizes_[clear], expected[clear])
    assert np.all(est.batch_sizes_[:, 0] == 1)
    assert len(np.unique(est.batch_sizes_)) > 3          # the size really varies
    assert not hasattr(est, "pv_threshold_")              # V* given: no pilot


@pytest.mark.parametrize("name", ["adaptive-cv", "adaptive-cv-preferential"])
def test_n_grad_evals_accounting(name):
    """n_grad_evals_ = mode search + set-up passes + every minibatch.

    Set-up with a float step size and a given V*: the Newton mode search
    (``FitContext.mode``: one pass per evaluation, each with its Hessian; its
    last evaluation, at the mode, leaves the residuals there), and for CV-PS
    one more pass (the per-datum trace weights; the Laplace covariance is the
    mode search's last Hessian).  With n_warmup = 0 the chains' cost is
    exactly the sum of ``batch_sizes_``; warm-up sizes are spent but not
    recorded.  The pilot rule adds ``pilot_steps * batch_size`` plus whole
    passes for the pilot's automatic step size.
    """
    X, y = _binary_data(400)
    n, b = len(y), 3
    ctx = FitContext(X, y.astype(float), GLM(LOGISTIC, 1), 0.7, True, b)
    ctx.mode()
    mode_cost = ctx.n_grad_evals
    assert mode_cost > 0 and mode_cost % n == 0
    # for CV-PS the trace weights (the residuals and the Laplace covariance
    # come from the mode search's last evaluation, at the mode)
    setup = mode_cost + (n if name.endswith("preferential") else 0)
    common = dict(subsampling=name, batch_size=b, step_size=2e-3, n_chains=2, alpha=0.7,
                  random_state=0)
    est = SGMCMCLogisticRegression(**CLASSIC, pv_threshold=2e4, n_warmup=0, n_samples=100,
                                   **common).fit(X, y)
    assert est.n_grad_evals_ == setup + est.batch_sizes_.sum()

    est = SGMCMCLogisticRegression(**CLASSIC, pv_threshold=2e4, n_warmup=50, n_samples=100,
                                   **common).fit(X, y)
    warm = est.n_grad_evals_ - setup - est.batch_sizes_.sum()
    assert 2 * 50 <= warm <= 2 * 50 * n                 # spent, not recorded

    pilot_steps = 120                                     # pilot cost 360 < n = 400
    est = SGMCMCLogisticRegression(**CLASSIC, n_warmup=0, n_samples=100, pilot_steps=pilot_steps,
                                   pv_threshold="pilot", **common).fit(X, y)
    extra = est.n_grad_evals_ - setup - est.batch_sizes_.sum() - pilot_steps * b
    assert extra >= 0 and extra % n == 0, extra          # whole set-up passes only
    assert est._fit_setup.subsampling_config["adaptive_coef"] == pytest.approx(b / est.pv_threshold_)

    # "auto" (Laplace q95): no pilot chain, only whole set-up passes
    est = SGMCMCLogisticRegression(**CLASSIC, n_warmup=0, n_samples=100, **common).fit(X, y)
    extra = est.n_grad_evals_ - setup - est.batch_sizes_.sum()
    assert extra >= 0 and extra % n == 0, extra
    assert est._fit_setup.subsampling_config["adaptive_coef"] == pytest.approx(b / est.pv_threshold_)


def test_fixed_size_n_grad_evals():
    X, y = _binary_data(400)
    n, b = len(y), 7
    ctx = FitContext(X, y.astype(float), GLM(LOGISTIC, 1), 1.0, True, b)
    ctx.mode()
    # the residuals at the mode come with the mode search's last pass; CV-PS's
    # trace weights cost one more
    for name, extra in [("cv", 0), ("preferential", 0), ("cv-preferential", n)]:
        est = SGMCMCLogisticRegression(**CLASSIC, subsampling=name, batch_size=b, step_size=1e-3,
                                       n_warmup=10, n_samples=20, n_chains=3,
                                       random_state=0).fit(X, y)
        assert est.n_grad_evals_ == ctx.n_grad_evals + extra + 3 * 30 * b, name
        assert not hasattr(est, "batch_sizes_")


# =============================================== 5. posterior accuracy (ridge)
def weighted_affine_moments(B0, u0, E, f, p, b, Q):
    """Stationary mean and covariance of ``z' = B z + u + N(0, Q)`` with
    ``B = B0 + sum_t E_{j_t} / (b p_{j_t})``, ``u = u0 + sum_t f_{j_t} / (b p_{j_t})``,
    ``j_1..j_b`` i.i.d. from ``p`` afresh at each step (uniform p gives the
    ``n/b`` weights of ``_reference.affine_recursion_moments``).

    With ``e_j = E_j / (b p_j)``: ``E[S] = b sum_j p_j e_j`` and
    ``E[S (x) S] = b sum_j p_j e_j (x) e_j + b(b - 1) Ebar (x) Ebar``.
    """
    n, q = f.shape
    p = np.asarray(p, dtype=np.float64) / np.sum(p)
    w = 1.0 / (b * p)
    Es = E * w[:, None, None]
    fs = f * w[:, None]
    Ebar = np.einsum("n,nij->ij", p, Es)
    fbar = p @ fs
    ES, EF = b * Ebar, b * fbar
    m = np.linalg.solve(np.eye(q) - (B0 + ES), u0 + EF)
    ESS = (b * np.einsum("n,nij,nkl->ikjl", p, Es, Es).reshape(q * q, q * q)
           + b * (b - 1) * np.kron(Ebar, Ebar))
    EBB = np.kron(B0, B0) + np.kron(B0, ES) + np.kron(ES, B0) + ESS
    Em = Es @ m
    ESmF = b * np.einsum("n,ni,nj->ij", p, Em, fs) + b * (b - 1) * np.outer(Ebar @ m, fbar)
    EBmu = np.outer(B0 @ m, u0) + np.outer(B0 @ m, EF) + np.outer(ES @ m, u0) + ESmF
    EFF = b * np.einsum("n,ni,nj->ij", p, fs, fs) + b * (b - 1) * np.outer(fbar, fbar)
    Euu = np.outer(u0, u0) + np.outer(u0, EF) + np.outer(EF, u0) + EFF
    rhs = EBmu + EBmu.T + Euu + Q
    M = np.linalg.solve(np.eye(q * q) - EBB, rhs.ravel()).reshape(q, q)
    C = M - np.outer(m, m)
    return m, 0.5 * (C + C.T)


def sgld_ridge_stationary_mode_based(X, y, alpha, noise_var, h, b, cfg):
    """Exact stationary moments of SGLD on ridge with a mode-based estimator
    (the library's prepared ``cfg``: weights, control point).

    grad U_j(theta) = a_j theta - c_j.  No control: the minibatch term is
    ``sum_t w_j (a_j theta - c_j)``; control at theta_hat: the estimate is
    ``alpha theta + G(theta_hat) + sum_t w_j a_j (theta - theta_hat)``.
    """
    Xe = ref.add_ones(X)
    n, q = Xe.shape
    a = np.einsum("ni,nj->nij", Xe, Xe) / noise_var
    c = Xe * (y / noise_var)[:, None]
    p = _weights(cfg, n)
    B0 = (1.0 - h * alpha) * np.eye(q)
    Q = 2.0 * h * np.eye(q)
    if "control_point" in cfg:
        th = np.asarray(cfg["control_point"])
        G = np.einsum("nij,j->i", a, th) - c.sum(axis=0)
        return weighted_affine_moments(B0, -h * G, -h * a, h * np.einsum("nij,j->ni", a, th),
                                       p, b, Q)
    return weighted_affine_moments(B0, np.zeros(q), -h * a, h * c, p, b, Q)


RIDGE_N, ALPHA, NOISE_VAR, B = 200, 1.0, 1.0, 10


@pytest.fixture(scope="module")
def ridge():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(RIDGE_N, 2)) @ np.array([[1.0, 0.6], [0.0, 0.8]]) + [0.5, -0.3]
    y = X @ [1.0, -2.0] + 0.5 + rng.normal(size=RIDGE_N)
    mean, cov, P = ref.ridge_posterior(X, y, ALPHA, NOISE_VAR)
    return dict(X=X, y=y, mean=mean, cov=cov, P=P, lmax=np.linalg.eigvalsh(P).max())


def test_weighted_moments_match_reference_for_uniform(ridge):
    X, y = ridge["X"], ridge["y"]
    h = 0.05 / ridge["lmax"]
    m1, C1 = ref.sgld_ridge_stationary(X, y, ALPHA, NOISE_VAR, h, batch_size=B)
    m2, C2 = sgld_ridge_stationary_mode_based(X, y, ALPHA, NOISE_VAR, h, B, {})
    np.testing.assert_allclose(m2, m1, rtol=1e-10)
    np.testing.assert_allclose(C2, C1, rtol=1e-10)


# step size as a fraction of 1/lambda_max(P); thin / n_samples give an ESS of
# a few thousand per coordinate
RIDGE_CASES = {
    "cv": dict(frac=0.05, thin=25),
    "preferential": dict(frac=0.02, thin=60),
    "cv-preferential": dict(frac=0.05, thin=25),
    "adaptive-cv": dict(frac=0.05, thin=25),
    "adaptive-cv-preferential": dict(frac=0.05, thin=25),
}
# relative tolerance on each posterior sd (beyond Z MC standard errors): the
# exact finite-h inflation of the fixed-size chains is below it (asserted)
SD_REL_TOL = 0.05


def _check_ridge(ridge, name, n_samples, seed=0):
    c = RIDGE_CASES[name]
    X, y = ridge["X"], ridge["y"]
    h = c["frac"] / ridge["lmax"]
    est = SGMCMCRidge(**CLASSIC, noise_var=NOISE_VAR, alpha=ALPHA, subsampling=name, batch_size=B,
                      step_size=h, n_samples=n_samples, thin=c["thin"], n_warmup=2000,
                      n_chains=4, random_state=seed).fit(X, y)
    draws = _draws(est)
    m, sd, se, n_eff = ref.mean_and_se(draws)
    post_sd = np.sqrt(np.diag(ridge["cov"]))
    z = (m - ridge["mean"]) / se
    assert np.all(np.abs(z) < Z), f"{name}: mean z {np.round(z, 2)}, ESS {np.round(n_eff)}"
    sd_hat, sd_se = ref.sd_and_se(draws)
    rel = sd_hat / post_sd - 1.0
    assert np.all(np.abs(rel) < SD_REL_TOL + Z * sd_se / post_sd), (
        f"{name}: sd/posterior sd {np.round(sd_hat / post_sd, 4)}, se {np.round(sd_se, 5)}")
    if not name.startswith("adaptive"):
        m_h, C_h = sgld_ridge_stationary_mode_based(X, y, ALPHA, NOISE_VAR, h, B,
                                                    est._fit_setup.subsampling_config)
        infl = np.sqrt(np.diag(C_h)) / post_sd
        assert np.all(infl > 1.0) and np.all(infl < 1.0 + SD_REL_TOL), infl
        np.testing.assert_allclose(m_h, ridge["mean"], rtol=1e-6, atol=1e-7)
        cov, cse = ref.cov_and_se(draws)
        zc = (cov - C_h) / cse
        assert np.all(np.abs(zc) < Z), f"{name}: cov vs exact finite-h, z {np.round(zc, 2)}"
    else:
        assert 1 <= est.mean_batch_size_ <= RIDGE_N
    return est, n_eff


@pytest.mark.parametrize("name", MODE_BASED)
def test_ridge_posterior(ridge, name):
    _, n_eff = _check_ridge(ridge, name, n_samples=6000, seed=1)
    assert n_eff.min() > 2000


def test_auto_step_size_inflation(ridge):
    """step_size="auto" promises a 5-10% variance inflation at most in the
    stiffest direction; for the fixed-size mode-based estimators the exact
    stationary law at the resolved step says how much it really is."""
    X, y = ridge["X"], ridge["y"]
    for name in ["cv", "preferential", "cv-preferential"]:
        est = SGMCMCRidge(**CLASSIC, noise_var=NOISE_VAR, subsampling=name, batch_size=B, n_samples=1,
                          n_warmup=0, n_chains=1, random_state=0).fit(X, y)
        _, C_h = sgld_ridge_stationary_mode_based(X, y, ALPHA, NOISE_VAR, est.step_size_, B,
                                                  est._fit_setup.subsampling_config)
        infl = np.diag(C_h) / np.diag(ridge["cov"])
        assert np.all(infl > 1.0) and np.all(infl < 1.10), (name, est.step_size_, infl)


# ============================================ 6. the paper's pseudo-variance
@pytest.fixture(scope="module", params=["balanced", "imbalanced"])
def logistic_pv(request):
    weights = None if request.param == "balanced" else [0.95]
    X, y = make_classification(n_samples=1000, n_features=2, n_informative=2, n_redundant=0,
                               n_clusters_per_class=1, weights=weights, random_state=0)
    if weights:
        assert 0.93 < 1 - y.mean() < 0.97
    common = dict(batch_size=10, step_size=2e-4, n_chains=2, random_state=0)
    post = SGMCMCLogisticRegression(**CLASSIC, subsampling="cv", n_samples=100, thin=50, n_warmup=2000,
                                    **common).fit(X, y)
    ps = SGMCMCLogisticRegression(**CLASSIC, subsampling="preferential", n_samples=1, n_warmup=0,
                                  **common).fit(X, y)
    cvps = SGMCMCLogisticRegression(**CLASSIC, subsampling="cv-preferential", n_samples=1, n_warmup=0,
                                    **common).fit(X, y)
    return dict(X=X, y=y, draws=_draws(post).reshape(-1, 3)[::20], mode=post.mode_.ravel(),
                p_ps=_weights(ps._fit_setup.subsampling_config, 1000),
                p_cvps=_weights(cvps._fit_setup.subsampling_config, 1000), kind=request.param)


def test_pseudo_variance_preferential_beats_uniform(logistic_pv):
    """At 10 posterior draws, for b = 1, 10, 100: tr Cov(PS) < tr Cov(uniform)
    and tr Cov(CV-PS) < tr Cov(CV), computed exactly from the per-datum
    gradients and the library's sampling weights."""
    d = logistic_pv
    X, y, n = d["X"], d["y"].astype(float), 1000
    glm = GLM(LOGISTIC, 1)
    uni = np.full(n, 1.0 / n)
    G_hat = _per_datum_grads(d["mode"], X, y, glm, True)
    ratios_ps, ratios_cv = [], []
    assert len(d["draws"]) == 10
    for th in d["draws"]:
        G = _per_datum_grads(th, X, y, glm, True)
        for b in (1, 10, 100):
            pv_u, pv_ps = pseudo_variance(G, uni, b), pseudo_variance(G, d["p_ps"], b)
            pv_cv = pseudo_variance(G - G_hat, uni, b)
            pv_cvps = pseudo_variance(G - G_hat, d["p_cvps"], b)
            assert pv_ps < pv_u and pv_cvps < pv_cv, (b, pv_u, pv_ps, pv_cv, pv_cvps)
            assert pv_cv < pv_u
        ratios_ps.append(pv_ps / pv_u)
        ratios_cv.append(pv_cvps / pv_cv)
    print(f"{d['kind']}: PS/uniform {np.median(ratios_ps):.3f}, "
          f"CV-PS/CV {np.median(ratios_cv):.3f} (median over draws)")
    # the gains are large, not marginal
    assert np.median(ratios_ps) < 0.5 and np.median(ratios_cv) < 0.5


# ============================= 7. known library problems (strict xfail)
def _australian_data():
    X, y = australian_scale()
    return (X - X.mean(axis=0)) / X.std(axis=0), (y > 0).astype(np.float64)


@pytest.mark.parametrize("name", ["cv", "cv-preferential"])
def test_auto_step_of_cv_estimators_not_below_uniform(name):
    """CV-type estimates have a smaller covariance than uniform minibatches at
    posterior draws (exact, below), so their automatic step should not be
    smaller than uniform subsampling's."""
    X, y = _australian_data()
    kw = dict(batch_size=20, n_samples=1, n_warmup=0, n_chains=1, random_state=0)
    h_u = SGMCMCLogisticRegression(**CLASSIC, **kw).fit(X, y).step_size_
    est = SGMCMCLogisticRegression(**CLASSIC, subsampling=name, **kw).fit(X, y)
    # the premise, exactly: lambda_max of the covariances at Laplace draws
    n = len(y)
    mode, S = est.mode_.ravel(), ref.logistic_laplace(ref.add_ones(X), y, 1.0)[1]
    glm, p = GLM(LOGISTIC, 1), _weights(est._fit_setup.subsampling_config, n)
    G_hat = _per_datum_grads(mode, X, y, glm, True)
    for th in np.random.default_rng(0).multivariate_normal(mode, S, size=5):
        G = _per_datum_grads(th, X, y, glm, True)
        lam_u = np.linalg.eigvalsh(exact_cov(G, np.full(n, 1 / n), 20)).max()
        lam = np.linalg.eigvalsh(exact_cov(G - G_hat, p, 20)).max()
        assert lam < lam_u
    assert est.step_size_ >= 0.5 * h_u, (name, est.step_size_, h_u)


def test_pilot_q95_is_near_stationary():
    """pv_threshold="auto" uses the stationary q95 of ||theta - mode||^2 (Laplace);
    compared here with an independent Laplace computation."""
    X, y = _australian_data()
    est = SGMCMCLogisticRegression(**CLASSIC, subsampling="adaptive-cv", batch_size=20, step_size=3e-4,
                                   n_samples=200, n_warmup=0, n_chains=1,
                                   random_state=0).fit(X, y)
    mode, S = est.mode_.ravel(), ref.logistic_laplace(ref.add_ones(X), y, 1.0)[1]
    d2 = np.sum((np.random.default_rng(0).multivariate_normal(mode, S, 20000) - mode) ** 2,
                axis=1)
    q95 = np.quantile(d2, 0.95)                    # Laplace approximation of the posterior
    print(f"pilot q95 {est.pv_threshold_:.4g}, stationary (Laplace) q95 {q95:.4g}, "
          f"mean b {est.mean_batch_size_:.1f} of n = {len(y)}")
    assert q95 / 3 < est.pv_threshold_ < 3 * q95


def test_laplace_multi_output_gaussian():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(50, 2)), rng.normal(size=(50, 2))
    ctx = FitContext(X, Y, GLM(GAUSSIAN, 2, (0.5,)), 1.0, True, 5)
    Xe = ref.add_ones(X)
    expected = np.kron(np.eye(2), Xe.T @ Xe / 0.5) + np.eye(6)
    np.testing.assert_allclose(ctx.hessian(ctx.mode()), expected, rtol=1e-10)


# ==================================== 8. logistic posterior (slow, reference MH)
@pytest.fixture(scope="module")
def australian():
    """australian_scale, standardised, against an independence-MH reference on
    the Laplace approximation (as ``test_posterior.py``)."""
    X, y = australian_scale()
    y = (y > 0).astype(np.float64)
    X = (X - X.mean(axis=0)) / X.std(axis=0)
    Xe = ref.add_ones(X)
    mode, lap_cov = ref.logistic_laplace(Xe, y, 1.0)
    draws, acc = ref.independence_mh(lambda T: ref.logistic_log_post(T, Xe, y, 1.0),
                                     mode, lap_cov, n_draws=12500, n_chains=4, seed=2024,
                                     df=10.0, scale=1.0)
    assert acc > 0.3, acc
    m, _, se, _ = ref.mean_and_se(draws)
    sd, sd_se = ref.sd_and_se(draws)
    return dict(X=X, y=y, mean=m, mean_se=se, sd=sd, sd_se=sd_se)


# allowance on the posterior sds for the O(h) + gradient-noise bias at h = 3e-4
# (the uniform-subsampling test of test_posterior.py allows 8% at this step)
LOGISTIC_SD_ALLOW = 0.08


def paper_pv_threshold(fixed_est, X, lipschitz_c):
    """The paper's V* (section 5.3.3) from a fixed-size run: per chain, q95 of
    ``||theta_k - mode||^2`` over its draws, the proposal
    ``q95 sum_i (L_i^2 / p_i) / b``; the largest proposal over the chains."""
    n = X.shape[0]
    p = _weights(fixed_est._fit_setup.subsampling_config, n)
    Xe = ref.add_ones(X)
    L = lipschitz_c * np.einsum("ij,ij->i", Xe, Xe)
    draws = _draws(fixed_est)
    q95 = np.quantile(np.sum((draws - fixed_est.mode_.ravel()) ** 2, axis=2), 0.95, axis=1)
    return float(q95.max() * np.sum(L ** 2 / p) / fixed_est.batch_size_)


@pytest.mark.slow
@pytest.mark.parametrize("name", MODE_BASED)
def test_logistic_matches_reference_sampler(australian, name):
    """Mean within Z combined MC se of the reference, sd within 8% + Z se.
    The adaptive estimators use the paper's V* from their fixed-size
    counterpart's chains at the same step (the library's own pilot,
    ``pv_threshold="auto"``, runs at the automatic step size, which is far
    smaller on these data, and then sets nearly every b_k to n)."""
    common = dict(step_size=3e-4, batch_size=20, n_samples=4000, thin=40, n_warmup=3000,
                  n_chains=4, n_jobs=2, random_state=1)
    X, y = australian["X"], australian["y"]
    if name.startswith("adaptive"):
        fixed = SGMCMCLogisticRegression(**CLASSIC, subsampling=name[len("adaptive-"):], **common)
        V = paper_pv_threshold(fixed.fit(X, y), X, 0.25)
        est = SGMCMCLogisticRegression(**CLASSIC, subsampling=name, pv_threshold=V, **common).fit(X, y)
        assert est.mean_batch_size_ < 0.2 * len(y)
    else:
        est = SGMCMCLogisticRegression(**CLASSIC, subsampling=name, **common).fit(X, y)
    draws = _draws(est)
    m, _, se, n_eff = ref.mean_and_se(draws)
    z = (m - australian["mean"]) / np.hypot(se, australian["mean_se"])
    sd, sd_se = ref.sd_and_se(draws)
    ratio = sd / australian["sd"]
    tol = LOGISTIC_SD_ALLOW + Z * np.hypot(sd_se, australian["sd_se"]) / australian["sd"]
    print(f"{name}: max|z| {np.abs(z).max():.2f}, min ESS {n_eff.min():.0f}, sd ratio "
          f"{ratio.min():.3f}..{ratio.max():.3f}, mean b {getattr(est, 'mean_batch_size_', 20)}")
    assert np.all(np.abs(z) < Z), f"{name}: mean z {np.round(z, 2)}"
    assert np.all(np.abs(ratio - 1) < tol), f"{name}: sd ratio {np.round(ratio, 3)}"
