"""The whole matrix: every ``sampler`` x ``subsampling`` (x ``access``).

Each combination samples

* a small Bayesian ridge posterior (n = 100, 2 features + intercept, mildly
  correlated), compared with the exact conjugate posterior: the mean within
  ``Z`` Monte Carlo standard errors (ESS-based, ``_reference.mean_and_se``),
  every covariance entry within ``Z`` se + ``ALLOW[sampler]`` x
  sqrt(S_jj S_kk).  Where the chain's *exact* stationary law at the step used
  is computable (SGLD, SGHMC and ULD with full or i.i.d. uniform minibatch
  gradients; leapfrog with full gradients, ``T (P - h^2 P^2/4)^-1``) the
  covariance is also compared with it within ``Z`` se and no allowance;
* a small logistic posterior (n = 200, 3 features + intercept), compared
  with an independence Metropolis-Hastings reference (``_reference``): means
  within ``Z`` combined se, sds within ``ALLOW[sampler]`` + ``Z`` se.

Step sizes (chosen here, never ``"auto"``) are fractions of each sampler's
stability / gradient-noise scale, computed from the posterior precision P
and the covariance V of the *uniform* minibatch estimate at posterior draws
(``(n^2/b) E Cov_i grad U_i``; the variance-reduced estimators are far less
noisy there, so V bounds their noise too):

======================  ==================================================
sgld                    h = 0.1 / lambda_max(P + V)
psgld                   the same in the metric G = n / sqrt(diag(P + V))
sghmc, uld (u = 1),     gamma = 2 sqrt(lambda_max(P)) (sgnht: its diffusion A),
baoab, sgnht            h = 0.05 min(1/sqrt(lambda), 1/gamma, 2 gamma / v)
sghmc-leapfrog (K = 5)  h = min(0.2 / sqrt(lambda), sqrt(0.1 T / (K v)))
======================  ==================================================

At these steps the exact stationary covariance of SGLD / SGHMC / ULD with
uniform minibatches (the noisiest estimator) is inflated by less than
``DESIGN_INFLATION`` = 5% over the posterior (measured 0.4-4.4%; asserted in
``test_design_bias_within_allowance``), hence ``ALLOW = 0.08``.  pSGLD gets
0.20: without its Gamma term it is biased even as h -> 0 (the preconditioner
follows the gradient; measured 5-13% here).  EWSG's weights are not uniform,
so it is biased at finite h too; ``ALLOW`` covers it at these steps
(measured within 4% with random access).  EWSG with ``access="cyclic"`` is
not in the matrix: its index chain needs random proposals, and over cyclic
blocks it skips every other block (M = 1); it must raise (section "EWSG x
access"; before the library's check existed, those tests document the bias
as expected failures).

The fast (unmarked) subset exercises every sampler, every subsampling and
every access mode at least once (asserted in
``test_fast_subset_covers_every_row``); the full cross product is
``@pytest.mark.slow``.  Unsupported combinations raise clear errors (last
section).
"""
import numpy as np
import pytest

from skbayes_sg import SGMCMCLogisticRegression, SGMCMCRidge
from skbayes_sg._sampling._registry import ACCESS_SUBSAMPLINGS, SAMPLERS, SUBSAMPLINGS
from skbayes_sg._sampling._specs import DYNAMICS

try:  # tests/ as a package or as a plain directory on sys.path
    from . import _reference as ref
except ImportError:
    import _reference as ref

Z = 4.5
ACCESS_MODES = ("random", "reshuffle", "cyclic")
MOMENTUM_SAMPLERS = {name for name in SAMPLERS if DYNAMICS[name].has_momentum}
EWSG_SUBSAMPLINGS = {"ewsg", "ewsg-cv", "ewsg-svrg"}
N_LEAPFROG = 5
ALLOW = {name: 0.20 if name == "psgld" else 0.08 for name in SAMPLERS}
# the matrix checks each dynamics as its paper defines it, in the parameters'
# own coordinates at the steps chosen here; the Laplace metric, the
# Metropolis correction and the automatic budget have tests of their own
# (tests/test_metric.py)
CLASSIC = dict(metric="identity", metropolis=False, init="mode")
# design bound on the exact finite-h inflation at the chosen steps (asserted)
DESIGN_INFLATION = 0.05

# EWSG over cyclic blocks (see test_ewsg_cyclic_access_uses_every_block): the
# index chain compares consecutive blocks and, when their weights tie
# (h -> 0), always moves to the later one, so with M = 1 and an even number of
# blocks half the data are never used (measured on the ridge posterior below:
# ewsg mean off by ~100 MC se, ewsg-cv variances off by ~15%).  Unsupported:
# not in the posterior matrix, must raise.
EWSG_CYCLIC = [(s, sub, "cyclic") for s in SAMPLERS for sub in SUBSAMPLINGS
               if SUBSAMPLINGS[sub].index_chain]


def _accesses(sub):
    return ACCESS_MODES if sub in ACCESS_SUBSAMPLINGS else ("random",)


ALL_COMBOS = [(s, sub, acc) for s in SAMPLERS for sub in SUBSAMPLINGS for acc in _accesses(sub)]
POSTERIOR_COMBOS = [c for c in ALL_COMBOS if c not in EWSG_CYCLIC]

# every sampler, every subsampling and every access mode at least once
FAST_RIDGE = [
    ("sgld", "cv-preferential", "random"),
    ("sgld", "tmu", "cyclic"),
    ("sgld", "cv2", "reshuffle"),
    ("psgld", "uniform", "reshuffle"),
    ("psgld", "adaptive-cv", "random"),
    ("sghmc", "ewsg", "random"),
    ("sghmc", "adaptive-cv-preferential", "random"),
    ("sghmc", "saga", "reshuffle"),
    ("sghmc-leapfrog", "full", "random"),
    ("sghmc-leapfrog", "cv", "cyclic"),
    ("sghmc-leapfrog", "ewsg-svrg", "random"),
    ("uld", "uniform", "random"),
    ("uld", "preferential", "random"),
    ("uld", "svrg", "reshuffle"),
    ("uld", "ewsg-cv", "random"),
    ("baoab", "uniform", "random"),
    ("baoab", "cv-preferential", "random"),
    ("baoab", "cv2-preferential", "random"),
    ("sgnht", "uniform", "random"),
    ("sgnht", "saga", "cyclic"),
]
FAST_LOGISTIC = [
    ("sgld", "adaptive-cv", "random"),
    ("psgld", "preferential", "random"),
    ("sghmc", "tmu", "random"),
    ("sghmc-leapfrog", "uniform", "random"),
    ("uld", "ewsg", "random"),
    ("baoab", "svrg", "random"),
    ("sgnht", "cv-preferential", "random"),
    ("baoab", "cv2-preferential", "random"),
    ("sghmc", "cv2", "random"),
]


def _params(fast):
    return [pytest.param(*c, id="-".join(c), marks=[] if c in fast else [pytest.mark.slow])
            for c in POSTERIOR_COMBOS]


def test_fast_subset_covers_every_row():
    """The CI subset touches every sampler, subsampling and access mode, and
    the full matrix is exactly the registry's cross product."""
    for fast in (FAST_RIDGE,):
        assert {c[0] for c in fast} == set(SAMPLERS)
        assert {c[1] for c in fast} == set(SUBSAMPLINGS)
        assert {c[2] for c in fast} == set(ACCESS_MODES)
        assert all(c in POSTERIOR_COMBOS for c in fast)
    assert {c[0] for c in FAST_LOGISTIC} == set(SAMPLERS)
    assert ACCESS_SUBSAMPLINGS <= set(SUBSAMPLINGS)
    assert len(ALL_COMBOS) == len(SAMPLERS) * (len(SUBSAMPLINGS) + 2 * len(ACCESS_SUBSAMPLINGS))
    assert len(EWSG_CYCLIC) == len(SAMPLERS) * len(EWSG_SUBSAMPLINGS)


# ------------------------------------------------------------------ steps
def _noise_cov(per_datum_grads, n, b):
    """(n^2/b) E_theta Cov_i(grad U_i(theta)), per_datum_grads: (draws, n, p)."""
    G = per_datum_grads - per_datum_grads.mean(axis=1, keepdims=True)
    return (n * n / b) * np.einsum("sni,snj->ij", G, G) / (G.shape[0] * G.shape[1])


def _steps(P, V, n, T=1.0):
    """Step size (and friction) per sampler from the precision P and the
    uniform minibatch noise covariance V (see the module docstring)."""
    lam = np.linalg.eigvalsh(P).max()
    v = np.linalg.eigvalsh(V).max()
    gamma = 2.0 * np.sqrt(lam)
    G = n / np.sqrt(np.diag(P + V) / T)
    Gh = np.sqrt(G)
    mom = 0.05 * min(1.0 / np.sqrt(lam), 1.0 / gamma, 2.0 * gamma * T / v)
    return {
        "sgld": dict(step_size=0.1 / np.linalg.eigvalsh(P + V).max()),
        "psgld": dict(step_size=0.1 / np.linalg.eigvalsh(Gh[:, None] * (P + V) * Gh).max()),
        "sghmc": dict(step_size=mom, friction=gamma),
        "uld": dict(step_size=mom, friction=gamma, inv_mass=1.0),
        "baoab": dict(step_size=mom, friction=gamma),
        "sgnht": dict(step_size=mom, friction=gamma),
        "sghmc-leapfrog": dict(
            step_size=min(0.2 / np.sqrt(lam), np.sqrt(0.1 * T / (N_LEAPFROG * v))),
            n_leapfrog=N_LEAPFROG),
    }


def _relaxation(P, V, n, sampler, kw, T=1.0):
    """Integrated autocorrelation time (steps) of the slowest direction of the
    Gaussian approximation, to size warm-up and thinning."""
    lam = np.linalg.eigvalsh(P)
    h = kw["step_size"]
    if sampler == "sgld":
        return 1.0 / (h * lam.min())
    if sampler == "psgld":
        Gh = np.sqrt(n / np.sqrt(np.diag(P + V) / T))
        return 1.0 / (h * np.linalg.eigvalsh(Gh[:, None] * P * Gh).min())
    if sampler == "sghmc-leapfrog":
        rho = np.cos(min(N_LEAPFROG * h * np.sqrt(lam.min()), np.pi / 2))
        return (1 + rho) / (1 - rho)
    g = kw["friction"]
    return max(g / (lam.min() * h), 2.0 / (g * h))


# ------------------------------------------------------------------ ridge
N_RIDGE, B_RIDGE, ALPHA, NOISE_VAR = 100, 25, 1.0, 0.8   # noise_var != 1 (issue 16)


@pytest.fixture(scope="module")
def ridge():
    rng = np.random.default_rng(0)
    Z0 = rng.normal(size=(N_RIDGE, 2))
    Z0 -= Z0.mean(axis=0)
    Z0 = np.linalg.qr(Z0)[0] * np.sqrt(N_RIDGE)          # orthogonal, centred columns
    X = Z0 @ np.array([[1.0, 0.3], [0.0, 0.9]]) + [0.2, -0.1]
    y = X @ [1.0, -2.0] + 0.5 + rng.normal(size=N_RIDGE)
    mean, cov, P = ref.ridge_posterior(X, y, ALPHA, NOISE_VAR)
    Xe = ref.add_ones(X)
    th = rng.multivariate_normal(mean, cov, size=400)
    R = (th @ Xe.T - y) / NOISE_VAR
    V = _noise_cov(R[:, :, None] * Xe[None], N_RIDGE, B_RIDGE)
    return dict(X=X, y=y, mean=mean, cov=cov, P=P, V=V, steps=_steps(P, V, N_RIDGE))


def _draws(est):
    full = np.concatenate([est.coef_samples_, est.intercept_samples_[..., None]], axis=-1)
    return full.reshape(full.shape[0], full.shape[1], -1)


def _uld_ridge_stationary(X, y, h, gamma, batch_size=None, u=1.0, T=1.0):
    """Exact stationary (mean, cov) of theta under ULD (exact OU step, frozen
    gradient) on ridge with full or i.i.d. uniform minibatch gradients:
    z = (v, theta), v' = a v - cv g + xi_v, theta' = theta + b v - cx g + xi_x,
    g = alpha theta + (n/b) sum_t (A_jt theta - c_jt)."""
    Xe = ref.add_ones(X)
    n, p = Xe.shape
    a = np.exp(-gamma * h)
    bb = (1 - a) / gamma
    cv, cx = u * bb, (u / gamma) * (h - bb)
    A = np.einsum("ni,nj->nij", Xe, Xe) / NOISE_VAR
    c = Xe * (y / NOISE_VAR)[:, None]
    I = np.eye(p)
    B0 = np.block([[a * I, -cv * ALPHA * I], [bb * I, (1 - cx * ALPHA) * I]])
    E = np.zeros((n, 2 * p, 2 * p))
    E[:, :p, p:] = -cv * A
    E[:, p:, p:] = -cx * A
    f = np.concatenate([cv * c, cx * c], axis=1)
    vv = u * T * (1 - a * a)
    xv = (u * T / gamma) * (1 - a) ** 2
    xx = (u * T / gamma ** 2) * (2 * gamma * h - 3 + 4 * a - a * a)
    Q = np.kron(np.array([[vv, xv], [xv, xx]]), I)
    m, C = ref.affine_recursion_moments(B0, np.zeros(2 * p), E, f, Q, batch_size)
    return m[p:], C[p:, p:]


def _exact_finite_h(ridge, sampler, sub, access, kw):
    """The chain's exact stationary law at its step, when computable."""
    if access != "random" or sub not in ("full", "uniform"):
        return None
    X, y = ridge["X"], ridge["y"]
    b = None if sub == "full" else B_RIDGE
    h = kw["step_size"]
    if sampler == "sgld":
        return ref.sgld_ridge_stationary(X, y, ALPHA, NOISE_VAR, h, batch_size=b)
    if sampler == "sghmc":
        return ref.sghmc_ridge_stationary(X, y, ALPHA, NOISE_VAR, h, kw["friction"], batch_size=b)
    if sampler == "uld":
        return _uld_ridge_stationary(X, y, h, kw["friction"], batch_size=b)
    if sampler == "sghmc-leapfrog" and sub == "full":
        P = ridge["P"]
        return ridge["mean"], np.linalg.inv(P - h * h * P @ P / 4)
    return None


def test_design_bias_within_allowance(ridge):
    """The exact stationary covariance at the chosen steps (full and uniform
    gradients) is inflated over the posterior by less than DESIGN_INFLATION
    (< ALLOW); the means are exact.  The variance-reduced estimators are less
    noisy at the posterior, so their inflation is smaller still."""
    for sampler in ("sgld", "sghmc", "uld", "sghmc-leapfrog"):
        kw = ridge["steps"][sampler]
        for sub in ("full", "uniform"):
            law = _exact_finite_h(ridge, sampler, sub, "random", kw)
            if law is None:
                continue
            m, C = law
            np.testing.assert_allclose(m, ridge["mean"], rtol=1e-8, atol=1e-8)
            infl = np.diag(C) / np.diag(ridge["cov"])
            print(f"{sampler}/{sub}: h={kw['step_size']:.3g}, inflation {np.round(infl, 4)}")
            assert np.all(infl > 1.0) and np.all(infl < 1.0 + DESIGN_INFLATION), infl
            assert DESIGN_INFLATION < ALLOW[sampler]


# per-fit budget: chains x draws, thinned to roughly one draw per relaxation time
N_CHAINS, N_DRAWS = 2, 2500


def _budget(ridge_or_logit, sampler, kw):
    d = ridge_or_logit
    tau = _relaxation(d["P"], d["V"], len(d["y"]), sampler, kw)
    thin = int(np.clip(np.ceil(tau / 2), 1, 2000))
    return dict(n_samples=N_DRAWS, thin=thin, n_warmup=int(min(20 * tau, 100000)))


def _assert_mean(draws, target, target_se=None, what=""):
    m, sd, se, n_eff = ref.mean_and_se(draws)
    se_tot = se if target_se is None else np.hypot(se, target_se)
    zs = (m - target) / se_tot
    print(f"{what} mean: z {np.round(zs, 2)}, ESS {np.round(n_eff)}")
    assert np.all(np.abs(zs) < Z), f"{what}: mean z {np.round(zs, 2)} (ESS {np.round(n_eff)})"
    return n_eff


def _assert_cov(draws, target, rel_allow, what=""):
    cov, se = ref.cov_and_se(draws)
    scale = np.sqrt(np.outer(np.diag(target), np.diag(target)))
    err = np.abs(cov - target)
    tol = Z * se + rel_allow * scale
    print(f"{what} cov: diag ratio {np.round(np.diag(cov) / np.diag(target), 3)}, "
          f"max |err|/tol {np.max(err / tol):.2f}, "
          f"rel se {np.round(np.diag(se) / np.diag(target), 3)}")
    assert np.all(err < tol), (
        f"{what}: cov diag ratio {np.round(np.diag(cov) / np.diag(target), 3)}, "
        f"|err|/tol {np.round(err / tol, 2)} (rel_allow {rel_allow})")


@pytest.mark.parametrize("sampler,subsampling,access", _params(FAST_RIDGE))
def test_ridge_matrix(ridge, sampler, subsampling, access):
    kw = dict(ridge["steps"][sampler])
    budget = _budget(ridge, sampler, kw)
    est = SGMCMCRidge(noise_var=NOISE_VAR, alpha=ALPHA, sampler=sampler, subsampling=subsampling,
                      access=access, n_chains=N_CHAINS, n_jobs=N_CHAINS,
                      random_state=0, **CLASSIC, **budget, **kw)
    if subsampling != "full":
        est.set_params(batch_size=B_RIDGE)
    est.fit(ridge["X"], ridge["y"])
    draws = _draws(est)
    assert np.all(np.isfinite(draws))
    what = f"ridge {sampler}/{subsampling}/{access}"
    n_eff = _assert_mean(draws, ridge["mean"], what=what)
    assert n_eff.min() > 400, f"{what}: ESS {n_eff} too small for the test"
    _assert_cov(draws, ridge["cov"], ALLOW[sampler], what=what + " vs posterior")
    law = _exact_finite_h(ridge, sampler, subsampling, access, kw)
    if law is not None:
        _assert_cov(draws, law[1], 0.0, what=what + " vs exact finite-h")


# --------------------------------------------------------------- logistic
N_LOGIT = 200


@pytest.fixture(scope="module")
def logistic():
    """n = 200, 3 standardised features; reference: independence MH with a
    t_10 proposal on the Laplace approximation (4 x 12,500 draws)."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(N_LOGIT, 3)) @ np.array([[1.0, 0.4, 0.0], [0.0, 1.0, 0.3],
                                                   [0.0, 0.0, 1.0]])
    X = (X - X.mean(0)) / X.std(0)
    y = (rng.random(N_LOGIT) < 1 / (1 + np.exp(-(X @ [1.0, -1.0, 0.5] + 0.3)))).astype(float)
    Xe = ref.add_ones(X)
    mode, lap_cov = ref.logistic_laplace(Xe, y, ALPHA)
    draws, acc = ref.independence_mh(lambda T: ref.logistic_log_post(T, Xe, y, ALPHA),
                                     mode, lap_cov, n_draws=12500, n_chains=4, seed=7,
                                     df=10.0, scale=1.0)
    assert acc > 0.5, acc
    m, _, se, n_eff = ref.mean_and_se(draws)
    sd, sd_se = ref.sd_and_se(draws)
    th = draws.reshape(-1, 4)[::50]
    S = 1 / (1 + np.exp(-(th @ Xe.T)))
    grads = (S - y)[:, :, None] * Xe[None]
    V = _noise_cov(grads, N_LOGIT, B_LOGIT)
    P = np.linalg.inv(lap_cov)
    return dict(X=X, y=y, mean=m, mean_se=se, sd=sd, sd_se=sd_se, P=P, V=V,
                steps=_steps(P, V, N_LOGIT))


B_LOGIT = 20


@pytest.mark.parametrize("sampler,subsampling,access", _params(FAST_LOGISTIC))
def test_logistic_matrix(logistic, sampler, subsampling, access):
    kw = dict(logistic["steps"][sampler])
    budget = _budget(logistic, sampler, kw)
    est = SGMCMCLogisticRegression(alpha=ALPHA, sampler=sampler, subsampling=subsampling,
                                   access=access, n_chains=N_CHAINS,
                                   n_jobs=N_CHAINS, random_state=1, **CLASSIC, **budget, **kw)
    if subsampling != "full":
        est.set_params(batch_size=B_LOGIT)
    est.fit(logistic["X"], logistic["y"])
    draws = _draws(est)
    what = f"logistic {sampler}/{subsampling}/{access}"
    _assert_mean(draws, logistic["mean"], target_se=logistic["mean_se"], what=what)
    sd, sd_se = ref.sd_and_se(draws)
    ratio = sd / logistic["sd"]
    tol = ALLOW[sampler] + Z * np.hypot(sd_se, logistic["sd_se"]) / logistic["sd"]
    print(f"{what}: sd ratio {np.round(ratio, 3)}, tol {np.round(tol, 3)}")
    assert np.all(np.abs(ratio - 1) < tol), (
        f"{what}: sd ratio {np.round(ratio, 3)}, tol {np.round(tol, 3)}")


# ------------------------------------------------------------ EWSG x access
def _ewsg_cyclic_check():
    """The library's refusal message for EWSG + cyclic access, if it has one."""
    from skbayes_sg._sampling import _kernel_rules

    return getattr(_kernel_rules, "EWSG_CYCLIC_MESSAGE", None)


@pytest.mark.parametrize("base", ["uniform", "svrg"])
@pytest.mark.parametrize("access,M", [
    ("random", 1), ("reshuffle", 1), ("reshuffle", 3), ("cyclic", 1), ("cyclic", 2),
    ("cyclic", 3)])
def test_ewsg_cyclic_access_uses_every_block(access, M, base):
    """As h -> 0 EWSG's weights tie and it must reduce to its base estimator,
    unbiased for the full gradient.  Engine level, n = 8, b = 2 (4 blocks),
    SGLD at h = 1e-12, uniform base (ewsg) and SVRG base with a fixed
    snapshot (ewsg-svrg): the mean oracle gradient over 400 calls equals the
    full gradient within Z se (random, reshuffle).

    Cyclic access cannot work: the index chain compares the next M + 1
    consecutive blocks and, at tied weights, accepts every move, so it
    returns the last of them; when gcd(M + 1, n/b) > 1 some blocks are never
    used (M = 1: blocks 1 and 3 only; M = 3: block 3 only).  The engine must
    refuse it (``ChainOracle``: ValueError); a library without that check is
    shown biased (expected failure, the bug), except when the blocks happen to
    be visited evenly (M = 2, 4 blocks)."""
    from skbayes_sg._sampling._chain import EWSG_X_MODES, ChainOracle
    from skbayes_sg._sampling._dataset import RowData
    from skbayes_sg._sampling._dynamics import SGLD
    from skbayes_sg._sampling._estimators import FullGradient, GLMEstimator, Problem

    rng = np.random.default_rng(0)
    n, b = 8, 2
    X = rng.normal(size=(n, 2))
    problem = Problem(RowData(X, True), rng.normal(size=n), "gaussian", 1, (1.0,))
    theta = rng.normal(size=3)
    full = FullGradient(problem).py_evaluate(theta)
    if base == "svrg":  # snapshot far from theta, never refreshed in 400 calls
        est = GLMEstimator(problem, b, access=access, control="snapshot", period=10 ** 6,
                           control_point=rng.normal(size=3))
    else:
        est = GLMEstimator(problem, b, access=access)
    dyn = SGLD(3, 1e-12, 1.0)
    message = _ewsg_cyclic_check()
    if access == "cyclic" and message is not None:
        with pytest.raises(ValueError, match="access='cyclic'"):
            ChainOracle(est, 0.0, M, dyn, EWSG_X_MODES["auto"])
        return
    oracle = ChainOracle(est, 0.0, M, dyn, EWSG_X_MODES["auto"])
    bitgen = np.random.PCG64(1)
    G = np.array([oracle.py_gradient(theta, bitgen) for _ in range(400)])
    if access == "cyclic":
        # deterministic: every block used equally often or not
        if not np.allclose(G.mean(axis=0), full, rtol=1e-9, atol=1e-9):
            assert M in (1, 3)
            pytest.xfail(f"library bug: EWSG + cyclic access (M = {M}) skips blocks; mean - "
                         f"full gradient = {np.round(G.mean(axis=0) - full, 3)}")
        assert M == 2
        return
    se = G.std(axis=0, ddof=1) / np.sqrt(len(G))
    assert np.all(np.abs(G.mean(axis=0) - full) < Z * se), (G.mean(axis=0) - full) / se


@pytest.mark.parametrize("sampler,subsampling,access", [
    pytest.param(*c, id="-".join(c)) for c in EWSG_CYCLIC])
def test_ewsg_cyclic_is_refused(small, sampler, subsampling, access):
    """Every sampler with ewsg / ewsg-cv / ewsg-svrg and access="cyclic":
    ``fit`` raises a ValueError naming the combination and the fix (random or
    reshuffle access).  Without the library's check, an expected failure."""
    X, y = small
    est = SGMCMCLogisticRegression(sampler=sampler, subsampling=subsampling, access=access,
                                   **FAST_KW)
    if _ewsg_cyclic_check() is None:
        pytest.xfail("library bug: EWSG + access='cyclic' is accepted and skips blocks")
    with pytest.raises(ValueError, match=(f"subsampling='{subsampling}', access='cyclic'.*"
                                          "Use access='random' or 'reshuffle'")):
        est.fit(X, y)


# ------------------------------------------------- unsupported combinations
@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 2))
    return X, (X[:, 0] + rng.normal(size=60) > 0).astype(int)


FAST_KW = dict(n_samples=5, n_warmup=5, n_chains=1, random_state=0, batch_size=10,
               metric="identity")


@pytest.mark.parametrize("subsampling", sorted(set(SUBSAMPLINGS) - ACCESS_SUBSAMPLINGS))
@pytest.mark.parametrize("access", ["reshuffle", "cyclic"])
def test_access_needs_an_access_subsampling(small, subsampling, access):
    """access != "random" with an estimator that draws from its own weights
    (or uses all data) is refused, naming both settings and the valid ones."""
    X, y = small
    est = SGMCMCLogisticRegression(subsampling=subsampling, access=access, **FAST_KW)
    msg = (f"access='{access}' does not apply to subsampling='{subsampling}', which draws "
           f"from its own weights. Use access='random' or one of subsampling in")
    with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(".", r"\.")):
        est.fit(X, y)


@pytest.mark.parametrize("sampler", sorted(set(SAMPLERS) - MOMENTUM_SAMPLERS))
@pytest.mark.parametrize("subsampling", sorted(EWSG_SUBSAMPLINGS))
def test_momentum_stop_needs_momentum(small, sampler, subsampling):
    """ewsg_x="momentum-stop" assumes the next momentum is 0: refused for the
    samplers that carry none (sgld, psgld, and sghmc-leapfrog, whose momentum
    is redrawn every step)."""
    X, y = small
    est = SGMCMCLogisticRegression(sampler=sampler, subsampling=subsampling,
                                   ewsg_x="momentum-stop", **FAST_KW)
    with pytest.raises(ValueError, match=(
            r"ewsg_x='momentum-stop' assumes r_\(k\+1\) = 0 and needs a sampler with momentum; "
            f"sampler='{sampler}' has none")):
        est.fit(X, y)


@pytest.mark.parametrize("sampler", sorted(MOMENTUM_SAMPLERS))
def test_momentum_stop_runs_with_momentum_samplers(small, sampler):
    X, y = small
    for sub in sorted(EWSG_SUBSAMPLINGS):
        est = SGMCMCLogisticRegression(sampler=sampler, subsampling=sub, ewsg_x="momentum-stop",
                                       **FAST_KW).fit(X, y)
        assert np.all(np.isfinite(est.coef_samples_))


def test_ewsg_x_is_refused_without_ewsg(small):
    """ewsg_x only acts on the EWSG estimators: set with any other one, the
    fit is refused (a setting silently ignored), naming the fix; its default
    is accepted everywhere."""
    X, y = small
    with pytest.raises(ValueError, match=r"ewsg_x='momentum-stop' has no effect with "
                                         r"subsampling='uniform'"):
        SGMCMCLogisticRegression(sampler="sgld", subsampling="uniform", ewsg_x="momentum-stop",
                                 **FAST_KW).fit(X, y)
    SGMCMCLogisticRegression(sampler="sgld", subsampling="uniform", **FAST_KW).fit(X, y)


@pytest.mark.parametrize("param,value", [("sampler", "hmc"), ("subsampling", "sag"),
                                         ("access", "random-access"), ("ewsg_x", "two")])
def test_unknown_names_list_the_valid_ones(small, param, value):
    X, y = small
    est = SGMCMCLogisticRegression(**{param: value}, **FAST_KW)
    msg = f"The '{param}' parameter of SGMCMCLogisticRegression must be"
    with pytest.raises(ValueError, match=msg):
        est.fit(X, y)
