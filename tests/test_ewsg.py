"""EWSG (exponentially weighted stochastic gradients): exactness and variance.

- the index chain's long-run frequencies equal the closed-form weights
  ``p_J ∝ exp(½||x + w_J||²)`` (chi-square test), for every dynamics;
- the whitening each dynamics reports (``c/s`` and ``x``) is the one of its
  real one-step transition (measured), so that with the ideal weights the
  subsampled kernel equals the full-gradient kernel (Theorem 2);
- at posterior draws of a real model the EWSG gradient has a smaller
  covariance trace than the uniform one (Theorem 3), ideal and practical;
- the §5.1 Gaussian experiment in small: EWSG beats SGHMC at equal budget;
- the public estimators run EWSG for every sampler and input kind, count
  M + 1 minibatches per gradient, and stay close to the exact posterior.
"""
import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats

from skbayes_sg import SGMCMCLogisticRegression, SGMCMCRidge
from skbayes_sg._sampling._chain import EWSG_X_MODES, ChainOracle, run_segment
from skbayes_sg._sampling._dataset import RowData
from skbayes_sg._sampling._dynamics import PSGLD, SGHMC, SGLD
from skbayes_sg._sampling._estimators import FullGradient, Problem, UniformSubsampling

try:  # tests/ as a package or as a plain directory on sys.path
    from ._datasets import australian_scale
except ImportError:
    from _datasets import australian_scale


def _tiny_logistic(n=5, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = (rng.random(n) < 0.5).astype(float)
    return X, y


def _make_dynamics(kind, dim, h, state_rng):
    if kind == "sgld":
        return SGLD(dim, h, 1.0)
    if kind == "psgld":
        return PSGLD(dim, h, 1.0, n_data=5.0, V0=state_rng.uniform(0.5, 2.0, dim))
    return SGHMC(dim, h, 1.0, friction=3.0, r0=state_rng.standard_normal(dim))


def _candidates(est, theta, n, b):
    """All ordered minibatches (with replacement) and their estimates."""
    tuples = list(itertools.product(range(n), repeat=b))
    return tuples, np.array([est.py_evaluate(theta, list(t)) for t in tuples])


# ------------------------------------------------------------------ exactness
@pytest.mark.parametrize("sampler", ["sgld", "psgld", "sghmc"])
@pytest.mark.parametrize("b", [1, 2])
def test_index_chain_frequencies_match_closed_form(sampler, b):
    """A long index chain (M = 60) from a uniform start is at its stationary law
    p_J ∝ exp(½||x + w_J||²); the chosen candidates' frequencies must pass a
    chi-square test against it, and fail one against the uniform law."""
    alpha, n = 0.5, 5
    X, y = _tiny_logistic(n)
    problem = Problem(RowData(X, True), y, "logistic", 1)
    est = UniformSubsampling(problem, b)
    rng = np.random.default_rng(1)
    theta = rng.standard_normal(3)
    h = 0.3  # candidate weights differ by a factor of up to ~e^2: the test has power
    dyn = _make_dynamics(sampler, 3, h, rng)
    oracle = ChainOracle(est, alpha, 60, dyn, EWSG_X_MODES["auto"])

    tuples, G = _candidates(est, theta, n, b)
    G = G + alpha * theta
    scale, shift = dyn.py_ewsg_whitening(EWSG_X_MODES["auto"])
    logw = 0.5 * np.sum((shift + scale * G) ** 2, axis=1)
    p = np.exp(logw - logw.max())
    p /= p.sum()
    # tuples with the same multiset give the same estimate: group them
    keys = [tuple(sorted(t)) for t in tuples]
    groups = sorted(set(keys))
    p_group = np.array([p[[k == g for k in keys]].sum() for g in groups])
    G_group = np.array([G[keys.index(g)] for g in groups])
    assert p_group.max() / p_group.min() < 50  # a well-posed test: every cell is visited

    bitgen = np.random.PCG64(2)
    n_draws = 3000
    counts = np.zeros(len(groups))
    for _ in range(n_draws):
        g = oracle.py_gradient(theta, bitgen)
        dist = np.abs(G_group - g).sum(axis=1)
        assert dist.min() < 1e-9, "the oracle returned something that is no candidate"
        counts[np.argmin(dist)] += 1
    assert oracle.ewsg_proposed == 60 * n_draws
    assert stats.chisquare(counts, n_draws * p_group).pvalue > 1e-3
    # the test has power: the uniform law (what a broken index chain gives) is rejected
    uniform = np.array([sum(k == g for k in keys) for g in groups]) / len(keys)
    assert stats.chisquare(counts, n_draws * uniform).pvalue < 1e-6


def _measure_transition(sampler, h, n_rep=20000):
    """Run one step of a dynamics n_rep times from one state with an exact
    gradient g; return the measured (c, s) of its Gaussian transition in the
    noise-carrying variable (mean shift -c g, sd s), their standard errors,
    and the engine's whitening (c/s, x)."""
    X = np.array([[1.0], [-0.5], [2.0]])
    y = np.array([1.0, 0.0, 1.0])
    problem = Problem(RowData(X, False), y, "logistic", 1)
    alpha = 100.0  # a large exact gradient (prior term) makes c well measured
    oracle = ChainOracle(FullGradient(problem), alpha)
    theta0 = np.array([3.0])
    g = oracle.py_gradient(theta0, np.random.PCG64(0))[0]
    rng = np.random.default_rng(3)
    if sampler == "psgld":
        # pSGLD whitens with the accumulator before the step's own update (the
        # candidate-dependent update is the approximation); at its fixed point
        # V = gbar^2 the two agree, which is the regime this checks
        dyn = PSGLD(1, h, 1.0, n_data=5.0, V0=np.array([(g / 5.0) ** 2]))
    else:
        dyn = _make_dynamics(sampler, 1, h, rng)
    state0 = dyn.get_state()
    scale, shift = dyn.py_ewsg_whitening(EWSG_X_MODES["auto"])
    bitgen = np.random.PCG64(4)
    out = np.empty(n_rep)
    for k in range(n_rep):
        dyn.set_state(state0)
        theta = theta0.copy()
        run_segment(oracle, dyn, theta, 1, 1, None, bitgen)
        out[k] = dyn.get_state()["momentum"][0] if sampler == "sghmc" else theta[0]
    if sampler == "sghmc":
        r0 = state0["momentum"][0]
        start = r0 - h * 3.0 * r0  # r' = r - h (g + gamma r) + s xi
    else:
        r0, start = None, theta0[0]
    s = out.std(ddof=1)
    c = (start - out.mean()) / g
    se_c = s / (abs(g) * np.sqrt(n_rep))
    se_s = s / np.sqrt(2 * n_rep)
    return c, s, se_c, se_s, scale[0], shift[0], r0


@pytest.mark.parametrize("sampler", ["sgld", "psgld", "sghmc"])
def test_whitening_is_the_real_transition_and_theorem2_holds(sampler):
    """The engine whitens candidates with c/s and x of the dynamics' real
    transition (measured over 20,000 one-step runs; tolerance 5 standard
    errors of the measured ratio), and with those the ideal EWSG mixture has
    exactly the full-gradient kernel's mean and variance (Theorem 2)."""
    h = 0.05
    c, s, se_c, se_s, scale, shift, r0 = _measure_transition(sampler, h)
    rel_se = np.hypot(se_c / c, se_s / s)
    assert abs((c / s) / scale - 1) < 5 * rel_se, ((c / s) / scale, rel_se)
    if sampler == "sghmc":
        # x is (r_{k+1} - r_k + h gamma r_k) / (sigma sqrt(h)) at r_{k+1} = r_k
        sigma = np.sqrt(2 * 3.0)
        assert shift == pytest.approx(np.sqrt(h) * 3.0 * r0 / sigma, rel=1e-12)
    else:
        assert shift == 0.0

    # Theorem 2 in the whitened variable x: candidates J (b = 1 of n = 4) with
    # w_J = (c/s) n grad U_J; with p_J(x) = exp(½|x + w_J|² − ½|x + w̄|²) / n the
    # mixture sum_J p_J(x) N(x; −w_J, 1) is N(x; −w̄, 1): same mean and variance.
    w = scale * 4 * np.array([0.7, -1.3, 0.2, 2.1])
    wbar = w.mean()
    x = np.linspace(-12, 12, 200001)
    phi = lambda m: np.exp(-0.5 * (x - m) ** 2) / np.sqrt(2 * np.pi)  # noqa: E731
    mix = sum(np.exp(0.5 * (x + wj) ** 2 - 0.5 * (x + wbar) ** 2) / len(w) * phi(-wj) for wj in w)
    full = phi(-wbar)
    dx = x[1] - x[0]
    assert np.sum(mix) * dx == pytest.approx(1.0, abs=1e-9)
    assert np.sum(x * mix) * dx == pytest.approx(np.sum(x * full) * dx, abs=1e-9)
    assert np.sum(x ** 2 * mix) * dx == pytest.approx(np.sum(x ** 2 * full) * dx, abs=1e-9)


# ------------------------------------------------------------------- variance
@pytest.fixture(scope="module")
def australian_posterior():
    X, y = australian_scale()
    y = (y > 0).astype(float)
    # the paper's setting: SGHMC in the parameters' own coordinates
    est = SGMCMCLogisticRegression(sampler="sghmc", subsampling="uniform", metric="identity",
                                   n_chains=1, n_samples=500, n_warmup=500,
                                   random_state=0).fit(X, y)
    draws = np.concatenate([est.coef_samples_[0], est.intercept_samples_[0][:, None]], 1)
    return X, y, est, draws


def test_ewsg_gradient_variance_ideal_and_practical(australian_posterior):
    """Theorem 3 at posterior draws (theta, r) of a real model, b = 1 (so every
    candidate can be enumerated):

    - ideal weights p_J ∝ exp(½||x + w_J||²): the trace of the gradient
      covariance is below the uniform one's (exact, by enumeration);
    - the practical M = 1 index chain: its output law is one Metropolis step
      from a uniform start, computable exactly; the library's Monte Carlo
      trace-variance matches that exact value within 5 standard errors.
      (Measured: at this regime M = 1 *raises* the trace above uniform's, see
      the user guide; so the practical claim is checked, not assumed.)
    """
    X, y, est, draws = australian_posterior
    n, alpha, h, gamma = len(y), 1.0, est.step_size_, est.friction_
    problem = Problem(RowData(X, True), y, "logistic", 1)
    rng = np.random.default_rng(5)
    for k in range(0, len(draws), 125):
        theta = draws[k]
        r = rng.standard_normal(15)
        uni = UniformSubsampling(problem, 1)
        G = np.array([uni.py_evaluate(theta, [i]) for i in range(n)]) + alpha * theta
        dyn = SGHMC(15, h, 1.0, friction=gamma, r0=r)
        scale, shift = dyn.py_ewsg_whitening(EWSG_X_MODES["auto"])
        logw = 0.5 * np.sum((shift + scale * G) ** 2, axis=1)
        p = np.exp(logw - logw.max())
        p /= p.sum()
        tr_uniform = np.sum(G.var(axis=0))
        tr_ideal = np.sum(p @ (G - p @ G) ** 2)
        assert tr_ideal < tr_uniform

        # one MH step from J ~ U, proposal J' ~ U: P(J' = j) exact
        accept = np.minimum(1.0, p[None, :] / p[:, None])          # [i, j]
        move = accept / n                                           # P(i -> j), j != i
        np.fill_diagonal(move, 0.0)
        stay = 1.0 - move.sum(axis=1)
        q = (move.sum(axis=0) + stay) / n
        tr_exact = np.sum(q @ (G - q @ G) ** 2)
        oracle = ChainOracle(UniformSubsampling(problem, 1), alpha, 1, dyn, EWSG_X_MODES["auto"])
        bitgen = np.random.PCG64(100 + k)
        S = np.array([oracle.py_gradient(theta, bitgen) for _ in range(4000)])
        tr_mc = np.sum(S.var(axis=0))
        assert abs(tr_mc - tr_exact) < 5 * _trace_var_se(S), (tr_mc, tr_exact)


def _trace_var_se(samples):
    """Standard error of sum_j var(samples[:, j]) from i.i.d. draws."""
    centred = samples - samples.mean(axis=0)
    per_draw = np.sum(centred ** 2, axis=1)
    return per_draw.std(ddof=1) / np.sqrt(len(samples))


# ---------------------------------------------------- §5.1 Gaussian, in small
def _gauss_kl(m, S, m0, S0):
    S0i = np.linalg.inv(S0)
    return 0.5 * (np.trace(S0i @ S) + (m0 - m) @ S0i @ (m0 - m) - len(m)
                  + np.log(np.linalg.det(S0) / np.linalg.det(S)))


def _final_states(problem, M, h, steps, n_chains):
    finals = np.empty((n_chains, 2))
    for c in range(n_chains):
        dyn = SGHMC(2, h, 1.0, friction=10.0, r0=np.zeros(2))
        oracle = ChainOracle(UniformSubsampling(problem, 1), 0.0, M, dyn, EWSG_X_MODES["auto"])
        theta = np.zeros(2)
        run_segment(oracle, dyn, theta, steps, 1, None, np.random.PCG64(c))
        finals[c] = theta
    return finals


def test_ewsg_beats_sghmc_on_the_gaussian_example():
    """EWSG paper §5.1 with 2,000 chains and 10 data passes (b = 1, h = 5e-2,
    gamma = 10, M = 1): KL to the exact N(mean c, I/n) is smaller for EWSG than
    for SGHMC at the same number of gradient evaluations.  The KL estimator's
    own noise (exact draws) is ~1e-3, far below the gap."""
    rng = np.random.default_rng(0)
    n = 20
    C = rng.standard_normal((n, 2))
    problem = Problem(RowData(np.zeros((n, 0)), True), C, "gaussian", 2, (1.0,))
    m0, S0 = C.mean(axis=0), np.eye(2) / n
    passes, chains = 10, 2000
    kl = {}
    for name, M in (("sghmc", 0), ("ewsg", 1)):
        F = _final_states(problem, M, 5e-2, passes * n // (M + 1), chains)
        kl[name] = _gauss_kl(F.mean(axis=0), np.cov(F.T), m0, S0)
    exact = rng.multivariate_normal(m0, S0, size=chains)
    kl_noise = _gauss_kl(exact.mean(axis=0), np.cov(exact.T), m0, S0)
    assert kl_noise < 0.01
    assert kl["ewsg"] < 0.5 * kl["sghmc"] - 3 * kl_noise, kl


# ------------------------------------------------------ public estimators
@pytest.mark.parametrize("sampler", ["sgld", "psgld", "sghmc"])
def test_ewsg_counts_M_plus_one_minibatches(sampler):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 3))
    y = (X[:, 0] + rng.standard_normal(200) > 0).astype(int)
    for M in (1, 3):
        est = SGMCMCLogisticRegression(sampler=sampler, subsampling="ewsg", ewsg_chain_length=M,
                                       metric="identity",
                                       batch_size=10, step_size=1e-3, init="zeros", n_chains=2,
                                       n_warmup=5, n_samples=20, random_state=0)
        if sampler == "sghmc":
            est.set_params(friction=1.0)
        if sampler == "psgld":
            est.set_params(step_size=1e-5)
        est.fit(X, y)
        setup = 2 * len(y) if sampler == "psgld" else 0  # accumulator start: two passes
        assert est.n_grad_evals_ == 2 * 25 * (M + 1) * 10 + setup


@pytest.mark.parametrize("sampler", ["sgld", "psgld", "sghmc"])
@pytest.mark.parametrize("kind", ["dense64", "csr32"])
def test_ewsg_ridge_posterior_close_to_exact(sampler, kind):
    """EWSG is biased (its weights are not uniform) but the bias vanishes with
    h: at small steps the posterior mean is within 5 Monte Carlo errors plus a
    10% sd allowance of the exact conjugate mean, and the sds within 25%."""
    rng = np.random.default_rng(1)
    n, d = 300, 3
    X = rng.standard_normal((n, d))
    y = X @ np.array([1.0, -1.0, 0.5]) + 0.2 + rng.standard_normal(n)
    Xa = np.hstack([X, np.ones((n, 1))])
    P = np.eye(d + 1) + Xa.T @ Xa
    cov = np.linalg.inv(P)
    mean = cov @ Xa.T @ y
    sd = np.sqrt(np.diag(cov))
    Xin = sp.csr_matrix(X.astype(np.float32)) if kind == "csr32" else X
    est = SGMCMCRidge(sampler=sampler, subsampling="ewsg", noise_var=1.0, batch_size=20,
                      metric="identity", init="mode",
                      n_samples=4000, n_warmup=500, thin=2, n_chains=2, random_state=0)
    est.fit(Xin, y)
    draws = np.concatenate([est.coef_samples_, est.intercept_samples_[..., None]], -1)
    draws = draws.reshape(-1, d + 1)
    ess = len(draws) / 20  # a floor on the ESS: autocorrelation time < 20 kept draws
    tol = 5 * sd / np.sqrt(ess) + 0.1 * sd
    tol = tol * (2 if kind == "csr32" else 1)  # float32 data
    assert np.all(np.abs(draws.mean(0) - mean) < tol), (draws.mean(0) - mean) / sd
    assert np.all(np.abs(draws.std(0) / sd - 1) < 0.25), draws.std(0) / sd


def test_ewsg_multinomial_and_errors():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((150, 3))
    y = np.argmax(X @ rng.standard_normal((3, 3)) + rng.gumbel(size=(150, 3)), axis=1)
    est = SGMCMCLogisticRegression(subsampling="ewsg", sampler="sghmc", n_samples=100,
                                   n_warmup=100, n_chains=2, random_state=0).fit(X, y)
    assert est.coef_samples_.shape == (2, 100, 3, 3)
    assert np.all(np.isfinite(est.coef_samples_))
    np.testing.assert_allclose(est.predict_proba(X).sum(axis=1), 1.0)
    with pytest.raises(ValueError, match="ewsg_x='momentum-stop'.*sampler='sgld'"):
        SGMCMCLogisticRegression(subsampling="ewsg", sampler="sgld",
                                 ewsg_x="momentum-stop").fit(X, y)
    # every ewsg_x choice runs with a momentum sampler
    for x_mode in EWSG_X_MODES:
        SGMCMCLogisticRegression(subsampling="ewsg", sampler="sghmc", ewsg_x=x_mode,
                                 n_samples=20, n_warmup=20, n_chains=1, random_state=0).fit(X, y)
