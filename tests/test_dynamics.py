"""The new dynamics are exact where they should be (engine level, fast).

* ULD (exact Ornstein-Uhlenbeck step of Cheng et al., gradient frozen): the
  one-step law of (v', x') given (x, v) and a fixed gradient g is Gaussian
  with mean ``(a v - c_v g, x + (1 - a)/gamma v - c_x g)`` and a 2x2
  covariance per coordinate, derived here from the Ito integrals (and
  checked against quadrature).  Measured by Monte Carlo: the mean
  coefficients by regression over coordinates with different (v, g), the
  covariance by whitening the residuals with the closed-form Cholesky factor.
* ULD with full gradients on Gaussian targets (1-D replicas, and a
  correlated 3-D ridge posterior): the chain is the linear recursion
  ``z' = B z + xi``, whose stationary covariance solves the discrete
  Lyapunov equation ``S = B S B^T + Q`` exactly at the step used; the
  sampled (x, v) covariance must equal it within Monte Carlo error, and the
  step is chosen so that it differs from the continuous-time answer by tens
  of standard errors (the test sees the discretisation).
* SG-HMC with leapfrog and full gradients: one outer step is
  ``q' = A q + B p`` with ``p ~ N(0, T I)`` redrawn, so ``S = A S A^T + T B B^T``;
  also equal to the closed form ``T (P - h^2 P^2 / 4)^-1`` (independent of K:
  the leapfrog map is a rotation in the shadow-Hamiltonian metric).
* EWSG whitening (``py_ewsg_whitening``): ULD's two components per coordinate
  are ``L^-1 (c_v, c_x)`` with L the Cholesky factor of the *measured* one-step
  covariance and c the *measured* gradient coefficients, and the shifts are
  the whitened residual of the assumed next state (v' = v or v' = 0, x' at
  its gradient-free mean); leapfrog (K = 1) whitens with the measured
  ``c/s`` of its one-step q transition; and the index chain uses both ULD
  components (chi-square against the closed-form weights).

* SGNHT with one-row minibatches on a 40-D Gaussian (unknown, isotropic
  gradient noise): the kinetic temperature ``E[p.p/d]`` is exactly T (the
  thermostat's update has mean zero), the thermostat settles at the friction
  xi* at which the frozen linear recursion has momentum variance T, and
  Var(x) equals that recursion's stationary variance (discrete Lyapunov);
  SGHMC at the same step and friction is inflated several times.  (Checked
  once by breaking the noise scale, 2 A -> 1.5 A: xi misses xi* by 24 se.)

Tolerances are ``Z`` Monte Carlo standard errors; seeds are fixed.
"""
import itertools

import numpy as np
import pytest
from scipy import integrate, stats
from scipy.linalg import solve_discrete_lyapunov

from skbayes_sg._sampling._chain import EWSG_X_MODES, ChainOracle, run_segment
from skbayes_sg._sampling._dataset import RowData
from skbayes_sg._sampling._dynamics import ULD, SGHMCLeapfrog
from skbayes_sg._sampling._estimators import FullGradient, Problem, UniformSubsampling

try:  # tests/ as a package or as a plain directory on sys.path
    from . import _reference as ref
except ImportError:
    import _reference as ref

Z = 4.5


# ------------------------------------------------------------------ closed forms
def ou_step_law(gamma, h, u, T):
    """One exact step of dv = -gamma v dt - u g dt + sqrt(2 gamma u T) dB, dx = v dt.

    Returns a dict with ``a = e^{-gamma h}``, ``b = (1 - a)/gamma`` (x gains b v),
    the gradient coefficients ``cv, cx`` (the mean moves by -(cv, cx) g) and the
    noise covariance ``Q`` of (v', x') in that order:

    v(h) = a v - u g (1 - a)/gamma + s int_0^h e^{-gamma(h - r)} dB_r,
    x(h) = x + b v - (u g/gamma)(h - b) + (s/gamma) int_0^h (1 - e^{-gamma(h - r)}) dB_r,

    with s^2 = 2 gamma u T, so by the Ito isometry
    Var v = u T (1 - a^2), Cov = (u T/gamma)(1 - a)^2,
    Var x = (u T/gamma^2)(2 gamma h - 3 + 4 a - a^2).
    """
    a = np.exp(-gamma * h)
    b = (1.0 - a) / gamma
    cv = u * b
    cx = (u / gamma) * (h - b)
    vv = u * T * (1.0 - a * a)
    xv = (u * T / gamma) * (1.0 - a) ** 2
    xx = (u * T / gamma ** 2) * (2.0 * gamma * h - 3.0 + 4.0 * a - a * a)
    return dict(a=a, b=b, cv=cv, cx=cx, Q=np.array([[vv, xv], [xv, xx]]))


def ou_step_cov_quadrature(gamma, h, u, T):
    """The same covariance by numerical quadrature of the Ito isometry."""
    s2 = 2.0 * gamma * u * T
    kv = lambda r: np.exp(-gamma * (h - r))                       # noqa: E731
    kx = lambda r: (1.0 - np.exp(-gamma * (h - r))) / gamma       # noqa: E731
    q = lambda f: integrate.quad(f, 0.0, h, epsabs=0, epsrel=1e-13)[0]  # noqa: E731
    return s2 * np.array([[q(lambda r: kv(r) ** 2), q(lambda r: kv(r) * kx(r))],
                          [q(lambda r: kv(r) * kx(r)), q(lambda r: kx(r) ** 2)]])


def leapfrog_map(H, h, K):
    """(A, B): q after K leapfrog steps of size h on U = q^T H q / 2 is A q + B p."""
    d = H.shape[0]
    I, O = np.eye(d), np.zeros((d, d))
    kick = np.block([[I, O], [-0.5 * h * H, I]])
    drift = np.block([[I, h * I], [O, I]])
    M = np.eye(2 * d)
    for _ in range(K):
        M = kick @ drift @ kick @ M
    return M[:d, :d], M[:d, d:]


def uld_recursion(P, gamma, h, u, T):
    """B, Q of the full-gradient ULD chain on U = (x - mu)^T P (x - mu)/2 in the
    variables z = (v, x - mu) (blocks of size d): z' = B z + xi, xi ~ N(0, Q)."""
    d = P.shape[0]
    law = ou_step_law(gamma, h, u, T)
    I = np.eye(d)
    B = np.block([[law["a"] * I, -law["cv"] * P], [law["b"] * I, I - law["cx"] * P]])
    Q = np.kron(law["Q"], I)
    return B, Q


def _iid_problem(y, alpha, noise_var):
    """K independent 1-D Gaussian coordinates: one datum, no features, K outputs;
    U(theta) = sum_j alpha theta_j^2/2 + (theta_j - y_j)^2/(2 sigma^2), so the
    precision is lam = alpha + 1/sigma^2 and the mean y_j/(sigma^2 lam)."""
    y = np.asarray(y, dtype=np.float64).reshape(1, -1)
    K = y.shape[1]
    return Problem(RowData(np.zeros((1, 0)), True), y, "gaussian", K, (noise_var,))


def _ridge_problem(seed=0, n=40):
    """A correlated 3-D Gaussian posterior (ridge, 2 features + intercept)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2)) @ np.array([[1.0, 0.7], [0.0, 0.5]]) + [0.4, -0.2]
    y = X @ [0.8, -1.0] + 0.3 + rng.normal(size=n)
    noise_var, alpha = 4.0, 1.0
    mean, cov, P = ref.ridge_posterior(X, y, alpha, noise_var)
    problem = Problem(RowData(np.ascontiguousarray(X), True), y, "gaussian", 1, (noise_var,))
    return problem, alpha, mean, P


# ------------------------------------------------------- ULD: one-step law
ULD_SETTINGS = {
    # (gamma, h, u, T): gamma h of order 1 (noise strongly correlated), a
    # small-step case (Var x' ~ h^3: cancellation) and u, T != 1
    "gh1": (2.0, 0.5, 1.0, 1.0),
    "small-step": (1.0, 0.01, 1.0, 1.0),
    "u-T": (0.7, 0.8, 2.5, 0.6),
}


def test_closed_form_noise_covariance_matches_quadrature():
    for gamma, h, u, T in ULD_SETTINGS.values():
        Q = ou_step_law(gamma, h, u, T)["Q"]
        np.testing.assert_allclose(Q, ou_step_cov_quadrature(gamma, h, u, T), rtol=1e-9)


def _uld_one_step(gamma, h, u, T, n_rep=5000, dim=40, seed=0):
    """n_rep one-step runs of ULD from one state (theta0, v0) with the exact
    gradient of K = dim independent coordinates; returns the states and the
    engine's whitening for every ewsg_x mode."""
    rng = np.random.default_rng(seed)
    alpha, noise_var = 0.5, 2.0
    problem = _iid_problem(rng.normal(size=dim), alpha, noise_var)
    oracle = ChainOracle(FullGradient(problem), alpha)
    theta0 = 2.0 * rng.normal(size=dim)
    v0 = 1.5 * np.sqrt(u * T) * rng.normal(size=dim)
    g = oracle.py_gradient(theta0, np.random.PCG64(0))
    dyn = ULD(dim, h, T, friction=gamma, inv_mass=u, v0=v0)
    whitening = {m: dyn.py_ewsg_whitening(EWSG_X_MODES[m]) for m in ("auto", "momentum-stop")}
    bitgen = np.random.PCG64(seed + 1)
    V = np.empty((n_rep, dim))
    X = np.empty((n_rep, dim))
    for k in range(n_rep):
        dyn.set_state({"velocity": v0})
        theta = theta0.copy()
        run_segment(oracle, dyn, theta, 1, 1, None, bitgen)
        X[k] = theta
        V[k] = dyn.get_state()["velocity"]
    return dict(theta0=theta0, v0=v0, g=g, V=V, X=X, whitening=whitening, dim=dim)


@pytest.fixture(scope="module")
def uld_runs():
    return {name: _uld_one_step(*s) for name, s in ULD_SETTINGS.items()}


def _regress(mean, v0, g, n_rep, Q_entry):
    """Least squares mean_j = A v0_j + C g_j over coordinates, with standard
    errors from the per-coordinate mean's variance Q_entry / n_rep."""
    D = np.column_stack([v0, g])
    coef, *_ = np.linalg.lstsq(D, mean, rcond=None)
    cov = np.linalg.inv(D.T @ D) * Q_entry / n_rep
    return coef, np.sqrt(np.diag(cov))


@pytest.mark.parametrize("name", list(ULD_SETTINGS))
def test_uld_one_step_law(uld_runs, name):
    """Mean and 2x2 covariance of (v', x') after one ULD step with a frozen
    gradient equal the closed form (Z MC standard errors)."""
    gamma, h, u, T = ULD_SETTINGS[name]
    r = uld_runs[name]
    law = ou_step_law(gamma, h, u, T)
    N, v0, g, x0 = len(r["V"]), r["v0"], r["g"], r["theta0"]
    Q = law["Q"]

    # mean: measured coefficients of v0 and g (no formula in the measurement)
    (A_v, C_v), se_v = _regress(r["V"].mean(0), v0, g, N, Q[0, 0])
    (A_x, C_x), se_x = _regress(r["X"].mean(0) - x0, v0, g, N, Q[1, 1])
    got = np.array([A_v, C_v, A_x, C_x])
    want = np.array([law["a"], -law["cv"], law["b"], -law["cx"]])
    zs = (got - want) / np.concatenate([se_v, se_x])
    print(f"{name}: mean coefficients {got} vs {want}, z {np.round(zs, 2)}")
    assert np.all(np.abs(zs) < Z), zs
    # and coordinate by coordinate
    pred_v = law["a"] * v0 - law["cv"] * g
    pred_x = x0 + law["b"] * v0 - law["cx"] * g
    zv = (r["V"].mean(0) - pred_v) / np.sqrt(Q[0, 0] / N)
    zx = (r["X"].mean(0) - pred_x) / np.sqrt(Q[1, 1] / N)
    assert np.max(np.abs(zv)) < Z and np.max(np.abs(zx)) < Z, (zv, zx)

    # covariance: residuals whitened with the closed-form Cholesky factor are
    # i.i.d. N(0, I_2) (M = N * dim pairs): entries within Z se of I
    L = np.linalg.cholesky(Q)
    R = np.stack([(r["V"] - pred_v).ravel(), (r["X"] - pred_x).ravel()])
    W = np.linalg.solve(L, R)
    M = W.shape[1]
    C = W @ W.T / M
    se = np.array([[np.sqrt(2 / M), np.sqrt(1 / M)], [np.sqrt(1 / M), np.sqrt(2 / M)]])
    zc = (C - np.eye(2)) / se
    emp = np.cov(R)
    print(f"{name}: cov rel. err {np.round(emp / Q - 1, 4)}, whitened z {np.round(zc, 2)}, "
          f"noise correlation {Q[0, 1] / np.sqrt(Q[0, 0] * Q[1, 1]):.3f}")
    assert np.all(np.abs(zc) < Z), zc
    # power: the noise correlation is resolved (a wrong sign or a missing
    # cross term of the Cholesky factor is caught) wherever it is sizeable
    rho = Q[0, 1] / np.sqrt(Q[0, 0] * Q[1, 1])
    assert rho * np.sqrt(M) > 50


# ------------------------------------------------- ULD: stationary covariance
def _uld_stationary_draws(problem, alpha, dim, gamma, h, u, T, theta0, thin, n_keep,
                          n_burn=2000, seed=0):
    """(x, v) every ``thin`` steps of one full-gradient ULD chain."""
    oracle = ChainOracle(FullGradient(problem), alpha)
    rng = np.random.default_rng(seed)
    dyn = ULD(dim, h, T, friction=gamma, inv_mass=u, v0=np.sqrt(u * T) * rng.normal(size=dim))
    bitgen = np.random.PCG64(seed + 1)
    theta = np.array(theta0, dtype=np.float64)
    run_segment(oracle, dyn, theta, n_burn, 1, None, bitgen)
    X = np.empty((n_keep, dim))
    V = np.empty((n_keep, dim))
    for k in range(n_keep):
        run_segment(oracle, dyn, theta, thin, 1, None, bitgen)
        X[k] = theta
        V[k] = dyn.get_state()["velocity"]
    return X, V


@pytest.mark.parametrize("gamma,h,u,T", [(2.0, 0.5, 1.0, 1.0), (1.0, 0.3, 2.0, 0.5)])
def test_uld_stationary_1d_is_exact_lyapunov(gamma, h, u, T):
    """1-D Gaussian target (lam = 1; 20 independent replicas as the
    coordinates of one chain): the sampled stationary covariance of (v, x)
    solves S = B S B^T + Q (B = [[a, -cv lam], [b, 1 - cx lam]]), within Z MC
    se; the continuous-time answer (T u, T/lam) is many se away."""
    alpha, noise_var, K, y0 = 0.5, 2.0, 20, 0.7
    lam = alpha + 1.0 / noise_var
    mu = (y0 / noise_var) / lam
    problem = _iid_problem(np.full(K, y0), alpha, noise_var)
    B, Q = uld_recursion(np.array([[lam]]), gamma, h, u, T)
    S = solve_discrete_lyapunov(B, Q)                         # order (v, x)
    X, V = _uld_stationary_draws(problem, alpha, K, gamma, h, u, T, np.full(K, mu),
                                 thin=4, n_keep=25000)
    draws = np.stack([V.T, X.T], axis=-1)                     # (K chains, N, 2)
    m, sd, se_m, n_eff = ref.mean_and_se(draws)
    assert np.all(np.abs(m - [0.0, mu]) < Z * se_m), (m, se_m)
    C, se = ref.cov_and_se(draws, center=np.array([0.0, mu]))
    zs = (C - S) / se
    cont = np.diag([u * T, T / lam])
    bias_se = (np.diag(S) - np.diag(cont)) / np.diag(se)
    print(f"ULD 1-D: sampled {C.ravel()}, exact {S.ravel()}, z {np.round(zs, 2).ravel()}, "
          f"continuous {np.diag(cont)}, bias in se {np.round(bias_se, 1)}")
    assert np.all(np.abs(zs) < Z), zs
    # sharp: the O(h) discretisation error of x's variance is resolved
    assert abs(S[1, 1] - T / lam) > 10 * se[1, 1]


def test_uld_stationary_correlated_gaussian_is_exact_lyapunov():
    """The same on a correlated 3-D ridge posterior (gradient P (x - mu)):
    S = B S B^T + Q with 6 x 6 blocks; the x block within Z MC se."""
    problem, alpha, mu, P = _ridge_problem()
    lmax = np.linalg.eigvalsh(P).max()
    gamma, h, u, T = 2.0 * np.sqrt(lmax), 1.3 / np.sqrt(lmax), 1.0, 1.0
    B, Q = uld_recursion(P, gamma, h, u, T)
    S = solve_discrete_lyapunov(B, Q)[3:, 3:]
    chains = []
    for seed in range(4):
        X, _ = _uld_stationary_draws(problem, alpha, 3, gamma, h, u, T, mu, thin=4,
                                     n_keep=10000, seed=seed)
        chains.append(X)
    draws = np.stack(chains)
    C, se = ref.cov_and_se(draws, center=mu)
    zs = (C - S) / se
    post = np.linalg.inv(P)
    print(f"ULD 3-D: exact inflation over the posterior {np.round(np.diag(S) / np.diag(post), 3)}, "
          f"z {np.round(zs, 2).ravel()}")
    assert np.all(np.abs(zs) < Z), zs
    assert np.max(np.abs(S - post) / se) > 10


# ------------------------------------------ SG-HMC leapfrog: stationary law
@pytest.mark.parametrize("K,T,c", [(1, 1.0, 1.0), (3, 1.0, 0.8), (2, 0.5, 0.9)])
def test_leapfrog_stationary_covariance_is_exact(K, T, c):
    """Full-gradient SG-HMC with leapfrog on a correlated 3-D Gaussian:
    S = A S A^T + T B B^T (one outer step q' = A q + B p, p ~ N(0, T I)),
    which equals T (P - h^2 P^2 / 4)^-1; sampled covariance within Z MC se,
    the posterior T P^-1 many se away.

    h = c / sqrt(lambda_max) avoids resonance: along an eigenvector of P the
    K leapfrog steps rotate by K phi, cos phi = 1 - h^2 lambda / 2; at
    K phi = 0 mod pi the momentum has no effect on q (no mixing there, and
    the Lyapunov equation is singular)."""
    problem, alpha, mu, P = _ridge_problem(seed=1)
    lam = np.linalg.eigvalsh(P)
    h = c / np.sqrt(lam.max())
    assert np.min(np.abs(np.sin(K * np.arccos(1 - h * h * lam / 2)))) > 0.3
    A, Bm = leapfrog_map(P, h, K)
    S = solve_discrete_lyapunov(A, T * Bm @ Bm.T)
    np.testing.assert_allclose(S, T * np.linalg.inv(P - h * h * P @ P / 4), rtol=1e-9)

    oracle = ChainOracle(FullGradient(problem), alpha)
    n_steps = 40000
    chains = []
    for seed in range(4):
        dyn = SGHMCLeapfrog(3, h, T, n_leapfrog=K)
        theta = mu.copy()
        bitgen = np.random.PCG64(seed)
        run_segment(oracle, dyn, theta, 200, 1, None, bitgen)
        out = np.empty((n_steps, 3))
        run_segment(oracle, dyn, theta, n_steps, 1, out, bitgen)
        chains.append(out)
    draws = np.stack(chains)
    m, _, se_m, _ = ref.mean_and_se(draws)
    assert np.all(np.abs(m - mu) < Z * se_m)
    C, se = ref.cov_and_se(draws, center=mu)
    zs = (C - S) / se
    print(f"leapfrog K={K}: z {np.round(zs, 2).ravel()}, "
          f"inflation {np.round(np.diag(S) / np.diag(T * np.linalg.inv(P)), 3)}")
    assert np.all(np.abs(zs) < Z), zs
    assert np.max(np.abs(S - T * np.linalg.inv(P)) / se) > 10


def test_leapfrog_gradient_count():
    """K + 1 full gradients per outer step (the documented cost).  The last
    one only feeds the closing half-kick of p, which the next step's momentum
    redraw discards: it could be reused as the next step's opening gradient
    (same position), saving 1/(K + 1) of the cost."""
    problem, alpha, mu, P = _ridge_problem(seed=1)
    for K in (1, 4):
        oracle = ChainOracle(FullGradient(problem), alpha)
        dyn = SGHMCLeapfrog(3, 0.05, 1.0, n_leapfrog=K)
        theta = mu.copy()
        run_segment(oracle, dyn, theta, 7, 1, None, np.random.PCG64(0))
        assert oracle.n_evals == 7 * (K + 1) * problem.n


# ------------------------------------------------------ EWSG whitening
def _bootstrap(fn, n_rep, n_boot=200, seed=0):
    """Bootstrap sd of fn(index array) over one-step repetitions."""
    rng = np.random.default_rng(seed)
    vals = np.array([fn(rng.integers(n_rep, size=n_rep)) for _ in range(n_boot)])
    return vals.std(axis=0, ddof=1)


def _measured_whitening(r, idx):
    """From one-step runs: the measured gradient coefficients c = (c_v, c_x),
    the gradient-free means' coefficients of v0, the measured residual
    covariance of (v', x') and its Cholesky factor L; the whitening implied:
    scale L^-1 c and the shifts L^-1 (v_target - A_v v0, 0) for v_target = v0
    (auto) and 0 (momentum-stop)."""
    V, X = r["V"][idx], r["X"][idx]
    v0, g, x0 = r["v0"], r["g"], r["theta0"]
    D = np.column_stack([v0, g])
    (A_v, C_v), *_ = np.linalg.lstsq(D, V.mean(0), rcond=None)
    (A_x, C_x), *_ = np.linalg.lstsq(D, X.mean(0) - x0, rcond=None)
    c = np.array([-C_v, -C_x])
    R = np.stack([(V - V.mean(0)).ravel(), (X - X.mean(0)).ravel()])
    L = np.linalg.cholesky(R @ R.T / R.shape[1])
    scale = np.linalg.solve(L, c)
    shifts = {}
    for mode, target in (("auto", v0), ("momentum-stop", 0.0 * v0)):
        res = np.stack([target - A_v * v0, np.zeros_like(v0)])
        shifts[mode] = np.linalg.solve(L, res)                     # (2, dim)
    return np.concatenate([scale, shifts["auto"].ravel(), shifts["momentum-stop"].ravel()])


@pytest.mark.parametrize("name", list(ULD_SETTINGS))
def test_uld_ewsg_whitening_is_the_measured_transition(uld_runs, name):
    """ULD's EWSG whitening has width 2: component 0 (v) and 1 (x) of every
    coordinate equal L^-1 (c_v, c_x) and the whitened residual of the assumed
    next state, with c, L *measured* from the one-step runs (Z bootstrap se;
    absolute floor 1e-9 for entries that are exactly 0)."""
    r = uld_runs[name]
    dim, N = r["dim"], len(r["V"])
    measured = _measured_whitening(r, np.arange(N))
    se = _bootstrap(lambda idx: _measured_whitening(r, idx), N)
    engine = []
    scale, _ = r["whitening"]["auto"]
    assert scale.shape == (2 * dim,)
    assert np.allclose(scale[:dim], scale[0]) and np.allclose(scale[dim:], scale[dim])
    engine.append([scale[0], scale[dim]])
    for mode in ("auto", "momentum-stop"):
        _, shift = r["whitening"][mode]
        engine.append(shift.reshape(2, dim).ravel())
    engine = np.concatenate([np.ravel(e) for e in engine])
    zs = (engine - measured) / (se + 1e-9)
    print(f"{name}: scale engine {engine[:2]} measured {measured[:2]}; "
          f"max |z| {np.max(np.abs(zs)):.2f}")
    assert np.all(np.abs(zs) < Z), (np.round(zs, 2), engine[:2], measured[:2])


def test_leapfrog_ewsg_whitening_is_the_measured_transition():
    """K = 1: q' = q + h p - (h^2/2) g with p ~ N(0, T): the engine's c/s
    (= h / (2 sqrt T)) equals the measured gradient coefficient over the
    measured sd (Z se, delta method); x = 0."""
    dim, n_rep, h, T = 40, 5000, 0.3, 0.7
    rng = np.random.default_rng(4)
    alpha = 0.5
    problem = _iid_problem(rng.normal(size=dim), alpha, 2.0)
    oracle = ChainOracle(FullGradient(problem), alpha)
    theta0 = 3.0 * rng.normal(size=dim)
    g = oracle.py_gradient(theta0, np.random.PCG64(0))
    dyn = SGHMCLeapfrog(dim, h, T, n_leapfrog=1)
    scale, shift = dyn.py_ewsg_whitening(EWSG_X_MODES["auto"])
    bitgen = np.random.PCG64(5)
    Q = np.empty((n_rep, dim))
    for k in range(n_rep):
        theta = theta0.copy()
        run_segment(oracle, dyn, theta, 1, 1, None, bitgen)
        Q[k] = theta
    D = (Q.mean(0) - theta0)
    c = -(D @ g) / (g @ g)
    s = (Q - Q.mean(0)).std()
    se_c = s / np.sqrt(n_rep * (g @ g))
    se_s = s / np.sqrt(2 * n_rep * dim)
    ratio = (c / s) / scale[0]
    print(f"leapfrog: c {c:.5g} (exact {h * h / 2:.5g}), s {s:.5g} (exact {h * np.sqrt(T):.5g})")
    assert abs(ratio - 1) < Z * np.hypot(se_c / c, se_s / s), ratio
    assert np.all(shift == 0.0) and np.allclose(scale, scale[0])


def test_uld_index_chain_uses_both_whitened_components():
    """A long index chain (M = 60) over b = 1 candidates with ULD whitening:
    the chosen candidates' frequencies follow p_J ∝ exp(½ Σ_m ||x_m + w_{J,m}||²)
    over *both* components (chi-square), and not the v component alone."""
    n, alpha = 6, 0.3
    rng = np.random.default_rng(1)
    X = rng.normal(size=(n, 2))
    y = (rng.random(n) < 0.5).astype(float)
    problem = Problem(RowData(X, True), y, "logistic", 1)
    est = UniformSubsampling(problem, 1)
    theta = rng.normal(size=3)
    dyn = ULD(3, 0.6, 1.0, friction=3.0, inv_mass=1.0, v0=rng.normal(size=3))
    oracle = ChainOracle(est, alpha, 60, dyn, EWSG_X_MODES["auto"])
    G = np.array([est.py_evaluate(theta, [i]) for i in range(n)]) + alpha * theta
    scale, shift = dyn.py_ewsg_whitening(EWSG_X_MODES["auto"])
    Gw = np.concatenate([G, G], axis=1)                        # both components
    logw = 0.5 * np.sum((shift + scale * Gw) ** 2, axis=1)
    p = np.exp(logw - logw.max())
    p /= p.sum()
    logw_v = 0.5 * np.sum((shift[:3] + scale[:3] * G) ** 2, axis=1)
    pv = np.exp(logw_v - logw_v.max())
    pv /= pv.sum()
    assert p.max() / p.min() < 50 and np.max(np.abs(p - pv)) > 0.05  # the test has power
    # (the x component moves the weights by up to 0.06 here)
    bitgen = np.random.PCG64(2)
    n_draws = 4000
    counts = np.zeros(n)
    for _ in range(n_draws):
        gr = oracle.py_gradient(theta, bitgen)
        counts[np.argmin(np.abs(G - gr).sum(axis=1))] += 1
    print(f"index chain: freq {np.round(counts / n_draws, 3)}, p {np.round(p, 3)}, "
          f"p_v {np.round(pv, 3)}")
    assert stats.chisquare(counts, n_draws * p).pvalue > 1e-3
    assert stats.chisquare(counts, n_draws * pv).pvalue < 1e-6


def test_uld_ewsg_ideal_mixture_is_the_full_gradient_kernel():
    """Theorem 2 with the width-2 ULD whitening, deterministic: the engine's
    scale is L^-1 (c_v, c_x) of the closed-form law and its shifts the
    whitened residuals L^-1 ((1 - a) v, 0) (auto) and L^-1 (-a v, 0)
    (momentum-stop); with e_J = L^-1 (z' - m0) + scale g_J, the mixture
    (1/n) Σ_J exp(½|e_J|² - ½|ē|²) N(z'; m0 - c g_J, S) equals the
    full-gradient kernel N(z'; m0 - c ḡ, S) at every next state z'."""
    gamma, h, v = 1.2, 0.7, 0.4
    law = ou_step_law(gamma, h, 1.0, 1.0)
    S = law["Q"]
    L = np.linalg.cholesky(S)
    c = np.array([law["cv"], law["cx"]])
    dyn = ULD(1, h, 1.0, friction=gamma, inv_mass=1.0, v0=np.array([v]))
    scale, shift = dyn.py_ewsg_whitening(EWSG_X_MODES["auto"])
    np.testing.assert_allclose(scale, np.linalg.solve(L, c), rtol=1e-10)
    np.testing.assert_allclose(shift, np.linalg.solve(L, [(1 - law["a"]) * v, 0.0]), rtol=1e-10)
    _, shift_stop = dyn.py_ewsg_whitening(EWSG_X_MODES["momentum-stop"])
    np.testing.assert_allclose(shift_stop, np.linalg.solve(L, [-law["a"] * v, 0.0]), rtol=1e-10)

    gJ = np.array([1.3, -0.4, 2.2, 0.1])
    m0 = np.array([law["a"] * v, law["b"] * v])               # gradient-free mean, x = 0
    full = stats.multivariate_normal(m0 - c * gJ.mean(), S)
    comps = [stats.multivariate_normal(m0 - c * g, S) for g in gJ]
    for zp in itertools.product(np.linspace(-2.5, 2.5, 7), repeat=2):
        zp = np.array(zp)
        base = np.linalg.solve(L, zp - m0)
        e = [base + scale * g for g in gJ]
        ebar = base + scale * gJ.mean()
        mix = sum(np.exp(0.5 * ej @ ej - 0.5 * ebar @ ebar) / len(gJ) * cj.pdf(zp)
                  for ej, cj in zip(e, comps))
        assert mix == pytest.approx(full.pdf(zp), rel=1e-9)


# ------------------------------------------------- SGNHT: the thermostat's laws
def _isotropic_noise_problem(K=40, n=8, noise_var=1.0, seed=0):
    """K independent Gaussian coordinates, n rows: U = alpha |theta|^2 / 2 +
    sum_i |theta - y_i|^2 / (2 sigma^2).  Every column of Y has the same
    variance over rows, so a one-row minibatch gradient has the same noise
    variance v = n^2 Var_i(y_ij) / sigma^4 in every coordinate."""
    rng = np.random.default_rng(seed)
    Y = rng.normal(size=(n, K))
    Y -= Y.mean(axis=0)
    Y = Y / np.sqrt((Y ** 2).mean(axis=0)) + 0.5
    return Problem(RowData(np.zeros((n, 0)), True), Y, "gaussian", K, (noise_var,)), Y


def _sgnht_frozen(xi, lam, h, A, T, v):
    """Stationary (Var x, Var p) of one coordinate of Euler SGNHT on
    U = lam x^2 / 2 with the thermostat frozen at ``xi`` and gradient noise of
    variance v: p' = (1 - h xi) p - h (lam x + eps) + sqrt(2 A T h) eta,
    x' = x + h p'."""
    M = np.array([[1 - h * h * lam, h * (1 - h * xi)], [-h * lam, 1 - h * xi]])
    Bn = np.sqrt(v) * np.array([[-h * h], [-h]])
    Bx = np.sqrt(2 * A * T * h) * np.array([[h], [1.0]])
    S = solve_discrete_lyapunov(M, Bn @ Bn.T + Bx @ Bx.T)
    return S[0, 0], S[1, 1]


def _series_mean_se(s):
    """Mean of one chain's series and its ESS-based standard error."""
    s = np.asarray(s, dtype=np.float64)[None, :]
    return s.mean(), s.std(ddof=1) / np.sqrt(ref.ess(s))


@pytest.mark.parametrize("T", [1.0, 0.5])
def test_sgnht_thermostat_absorbs_unknown_gradient_noise(T):
    """SGNHT (Ding et al. 2014) with one-row minibatches on a 40-D Gaussian
    whose gradient noise (variance v = 64 per coordinate) the sampler is not
    told about.

    * Kinetic temperature: the thermostat's update ``xi += h (p.p/d - T)`` has
      mean zero in stationarity, so ``E[p.p/d] = T`` *exactly* at any step and
      noise -- within Z se of the chain's own series.
    * Configurational law: with d = 40 coordinates the thermostat barely
      fluctuates, and the chain is the linear recursion with ``xi`` frozen at
      the value xi* whose stationary momentum variance is T; the sampled
      ``xi`` must settle at xi*, and Var(x) must equal that recursion's
      stationary variance (a discrete Lyapunov equation), within Z se.
    * SGHMC at the same step and friction (xi fixed at A) is far off: its
      kinetic temperature and Var(x) are inflated several times, so the test
      sees the noise.
    """
    from scipy.optimize import brentq

    from skbayes_sg._sampling._dynamics import SGHMC, SGNHT

    K, n, b, alpha, noise_var, h, A = 40, 8, 1, 1.0, 1.0, 0.05, 1.0
    problem, Y = _isotropic_noise_problem(K, n, noise_var)
    lam = alpha + n / noise_var
    mu = Y.sum(axis=0) / noise_var / lam
    v = n * n / b * (Y - Y.mean(axis=0)).var(axis=0).mean() / noise_var ** 2
    # U / T: the chain samples exp(-U / T); the frozen recursion with lam, v as given
    # (the recursion is stable for h xi < 2)
    xi_star = brentq(lambda xi: _sgnht_frozen(xi, lam, h, A, T, v)[1] - T, A, 1.5 / h)
    var_x_star = _sgnht_frozen(xi_star, lam, h, A, T, v)[0]
    rng = np.random.default_rng(3)
    out = {}
    for name in ("sgnht", "sghmc"):
        p0 = np.sqrt(T) * rng.normal(size=K)
        dyn = (SGNHT(K, h, T, diffusion=A, p0=p0) if name == "sgnht"
               else SGHMC(K, h, T, friction=A, r0=p0))
        oracle = ChainOracle(UniformSubsampling(problem, b), alpha)
        bitgen = np.random.PCG64(11)
        theta = mu.copy()
        run_segment(oracle, dyn, theta, 5000, 1, None, bitgen)
        N = 12000
        kin, sq, xis = np.empty(N), np.empty(N), np.empty(N)
        for k in range(N):
            run_segment(oracle, dyn, theta, 5, 1, None, bitgen)
            state = dyn.get_state()
            p = state["momentum"]
            kin[k] = p @ p / K
            sq[k] = np.mean((theta - mu) ** 2)
            xis[k] = state["thermostat"][0] if name == "sgnht" else A
        out[name] = (_series_mean_se(kin), _series_mean_se(sq), _series_mean_se(xis))
    (kin, kin_se), (var_x, var_se), (xi, xi_se) = out["sgnht"]
    print(f"SGNHT T={T}: kinetic {kin:.4f} +- {kin_se:.4f}; xi {xi:.3f} +- {xi_se:.3f} "
          f"(xi* {xi_star:.3f}); Var x {var_x:.5f} +- {var_se:.5f} (frozen {var_x_star:.5f}, "
          f"posterior {T / lam:.5f}); SGHMC kinetic {out['sghmc'][0][0]:.3f}, "
          f"Var x {out['sghmc'][1][0]:.5f}")
    assert abs(kin - T) < Z * kin_se
    assert abs(xi - xi_star) < Z * xi_se
    assert abs(var_x - var_x_star) < Z * var_se
    # the noise is visible: SGHMC's kinetic temperature and Var x are inflated
    assert out["sghmc"][0][0] > 3 * T and out["sghmc"][1][0] > 3 * T / lam


@pytest.mark.parametrize("kappa", [0.0, 1.3])
def test_uld_takes_its_coefficients_from_a_restored_step(kappa):
    """ULD's exact step depends on h through its coefficients: a step set by
    ``set_state`` (a restored chain) or ``py_set_step`` integrates that h,
    bit for bit as a ULD built with it (before, the coefficients kept the
    constructor's h while ``step_size`` reported the new one)."""
    rng = np.random.default_rng(3)
    dim, h1, h2 = 6, 0.05, 0.2
    oracle = ChainOracle(FullGradient(_iid_problem(rng.normal(size=dim), 0.5, 2.0)), 0.5)
    theta0, v0 = rng.normal(size=dim), rng.normal(size=dim)

    def run(dyn):
        theta = theta0.copy()
        dyn.set_state({"velocity": v0})
        run_segment(oracle, dyn, theta, 3, 1, None, np.random.PCG64(7))
        return theta

    built = run(ULD(dim, h2, 1.0, friction=1.5, v0=v0, reference_precision=kappa))
    restored = ULD(dim, h1, 1.0, friction=1.5, v0=v0, reference_precision=kappa)
    restored.set_state({"step_size": np.array([h2])})
    changed = ULD(dim, h1, 1.0, friction=1.5, v0=v0, reference_precision=kappa)
    changed.py_set_step(h2)
    np.testing.assert_array_equal(run(restored), built)
    np.testing.assert_array_equal(run(changed), built)
    assert not np.array_equal(run(ULD(dim, h1, 1.0, friction=1.5, v0=v0,
                                      reference_precision=kappa)), built)
