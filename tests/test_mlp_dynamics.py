"""The network estimator's dynamics against exact Gaussian laws, and through
the estimator.

The network's chain runner (``_torch_sampler.ChainRunner``) is driven with a
stub "network" whose loss is Gaussian: Bayesian ridge on two correlated
features and an intercept, ``U_i(theta) = (x_i . theta - y_i)^2 / (2 sigma^2)``,
so the posterior is the exact conjugate Gaussian (``_reference.ridge_posterior``)
and, for the dynamics that are linear recursions (BAOAB, ULD, SG-HMC leapfrog),
so is the chain's stationary law at a finite step
(``_reference.affine_recursion_moments``).

Statistics (as tests/test_matrix.py): means within ``Z`` ESS-based Monte
Carlo standard errors (``_reference.mean_and_se``); every covariance entry
within ``Z`` se (``_reference.cov_and_se``) plus ``ALLOW`` x
sqrt(S_jj S_kk), where

* full-batch runs (``batch_size = n``: every estimator is then the exact
  gradient) are compared with the exact finite-h stationary law with **no**
  allowance: BAOAB's is the posterior itself at any step (its configurational
  sampling of a Gaussian is exact), ULD's and leapfrog's are inflated
  (``T (P - h^2 P^2 / 4)^-1`` for leapfrog), at steps large enough that the
  inflation is many standard errors;
* minibatch runs (every network subsampling) are compared with the posterior
  within ``ALLOW = 0.08`` relative: at the steps chosen here the exact
  stationary covariance of BAOAB and ULD with i.i.d. uniform minibatches
  (the noisiest estimator; the runner's minibatches are blocks of a random
  permutation, slightly less noisy) is inflated by less than
  ``DESIGN_INFLATION = 5%`` (asserted in ``test_design_inflation``); so is
  SGNHT's with its thermostat at the fixed point where the kinetic
  temperature is T (an *under*-dispersion: the thermostat pins the discrete
  momentum's temperature); leapfrog runs at tests/test_matrix.py's step
  rule; EWSG is biased at finite h, as in the linear engine's matrix.

The fast subset touches every new dynamics and every network subsampling;
the full cross product is ``@pytest.mark.slow``.
"""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from skbayes_sg._sampling import _flat_dynamics as flat_dynamics  # noqa: E402
from skbayes_sg._sampling._dynamics import uld_coefficients  # noqa: E402
from skbayes_sg._sampling._normal_stream import NormalStream  # noqa: E402
from skbayes_sg._sampling._specs import (  # noqa: E402
    DYNAMICS,
    HYPERPARAMETERS,
    NETWORK,
    dynamics_for,
    estimators_for,
    sampler_owners,
)
from skbayes_sg.neural_network import SGMCMCMLPClassifier  # noqa: E402
from skbayes_sg.neural_network import _net_dynamics, _torch_sampler  # noqa: E402

try:  # tests/ as a package or as a plain directory on sys.path
    from . import _reference as ref
except ImportError:
    import _reference as ref

_small_data = ref.small_classification


# torch on one thread (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


NEW = ("sghmc-leapfrog", "uld", "baoab", "sgnht")
SUBSAMPLINGS = tuple(estimators_for(NETWORK))
Z = 4.5
ALLOW = 0.08
DESIGN_INFLATION = 0.05
N_LEAPFROG = 5
N, B, ALPHA, NOISE_VAR = 100, 20, 1.0, 1.0


# ---------------------------------------------------------------- the problem
class GaussianNet:
    """A stub for ``MLPNet``: the linear-Gaussian loss
    ``sum_i w_i (x_i . theta - y_i)^2 / (2 sigma^2)`` on a flat ``theta``,
    with the interface ``ChainRunner`` uses (``n_params``, ``init_params``,
    ``views``, ``loss_grad``)."""

    def __init__(self, start, noise_var):
        self.start = np.asarray(start, dtype=np.float64)
        self.n_params = len(self.start)
        self.noise_var = noise_var

    def views(self, flat):
        return None

    def init_params(self, generator, device, dtype):
        # the posterior mean: the warm-up then only has to spread the chain
        return torch.tensor(self.start, device=device, dtype=dtype)

    def loss_grad(self, flat, X, y, out, views=None, gviews=None, weights=None):
        r = (torch.mv(X, flat) - y) / self.noise_var
        if weights is not None:
            r = r * weights
        torch.mv(X.t(), r, out=out)
        return 0.5 * self.noise_var * torch.dot(r, r)


def _ridge_problem():
    rng = np.random.default_rng(0)
    Z0 = rng.normal(size=(N, 2))
    Z0 -= Z0.mean(axis=0)
    Z0 = np.linalg.qr(Z0)[0] * np.sqrt(N)          # orthogonal, centred columns
    X = Z0 @ np.array([[1.0, 0.3], [0.0, 0.9]]) + [0.2, -0.1]
    # data less noisy than the model says: a moderate minibatch noise, so
    # the steps are set by the dynamics' stability, not by the noise
    y = X @ [1.0, -2.0] + 0.5 + 0.3 * rng.normal(size=N)
    mean, cov, P = ref.ridge_posterior(X, y, ALPHA, NOISE_VAR)
    Xe = ref.add_ones(X)
    th = rng.multivariate_normal(mean, cov, size=400)
    R = (th @ Xe.T - y) / NOISE_VAR
    G = R[:, :, None] * Xe[None]
    G = G - G.mean(axis=1, keepdims=True)
    # covariance of the uniform minibatch estimate at posterior draws
    V = (N * N / B) * np.einsum("sni,snj->ij", G, G) / (G.shape[0] * G.shape[1])
    lam = np.linalg.eigvalsh(P)
    return dict(X=X, y=y, Xe=Xe, mean=mean, cov=cov, P=P, V=V, lam=lam,
                v=np.linalg.eigvalsh(V).max())


@pytest.fixture(scope="module")
def ridge():
    return _ridge_problem()


def _kw(d, sampler, full=False):
    """Step (and friction / n_leapfrog) per dynamics.  Minibatch runs: the
    critically damped friction of the slowest direction, ``gamma = 2
    sqrt(lambda_min)`` (SGNHT: its diffusion A), and ``h = 0.1 /
    sqrt(lambda_max)`` (SGNHT 0.05); leapfrog as tests/test_matrix.py,
    ``h = min(0.2 / sqrt(lambda), sqrt(0.1 T / (K v)))``.  Full-batch runs
    use large steps (``h sqrt(lambda_max)`` = 1.0 BAOAB, 0.6 ULD, 0.9
    leapfrog with K = 3) so that the finite-h law differs from the posterior."""
    lmin, lmax = d["lam"].min(), d["lam"].max()
    gamma = 2.0 * math.sqrt(lmin)
    if sampler == "sghmc-leapfrog":
        if full:  # K = 3: no direction near a half turn (which flips z, keeps z^2)
            return dict(step_size=0.9 / math.sqrt(lmax), n_leapfrog=3)
        h = min(0.2 / math.sqrt(lmax), math.sqrt(0.1 / (N_LEAPFROG * d["v"])))
        return dict(step_size=h, n_leapfrog=N_LEAPFROG)
    if full:
        scale = {"baoab": 1.0, "uld": 0.6}[sampler]
    else:  # SGNHT's bias is twice BAOAB's / ULD's at one step (test_design_inflation)
        scale = 0.05 if sampler == "sgnht" else 0.1
    return dict(step_size=scale / math.sqrt(lmax), friction=gamma)


def _tau(d, sampler, kw):
    """Relaxation time (steps) of the slowest direction, to size the runs."""
    lmin = d["lam"].min()
    h = kw["step_size"]
    if sampler == "sghmc-leapfrog":
        rho = abs(math.cos(kw["n_leapfrog"] * h * math.sqrt(lmin)))
        return (1 + rho) / (1 - rho)
    g = kw["friction"]
    return max(g / (lmin * h), 2.0 / (g * h))


def _params(sampler, subsampling, kw, batch_size):
    return dict(sampler=sampler, subsampling=subsampling, step_size=kw["step_size"],
                batch_size=batch_size, alpha=ALPHA, temperature=1.0,
                friction=kw.get("friction", 1.0), inv_mass=1.0,
                n_leapfrog=kw.get("n_leapfrog", "auto"), ewsg_chain_length=1,
                snapshot_period=None, map_epochs=30, map_learning_rate=0.05, verbose=0)


def _chains(d, sampler, subsampling, kw, *, batch_size=B, n_chains=2, n_draws=1500,
            seed=0, runner_cls=None):
    """Draws ``(n_chains, n_draws, 3)`` of the network runner on the ridge
    posterior, thinned to about two draws per relaxation time."""
    tau = _tau(d, sampler, kw)
    thin = max(1, int(math.ceil(tau / 2)))
    n_warmup = int(20 * tau)
    net = GaussianNet(d["mean"], NOISE_VAR)
    Xt = torch.tensor(d["Xe"], dtype=torch.float64)
    yt = torch.tensor(d["y"], dtype=torch.float64)
    params = _params(sampler, subsampling, kw, batch_size)
    out = np.empty((n_chains, n_draws, 3))
    cls = runner_cls or _torch_sampler.ChainRunner
    for c in range(n_chains):
        runner = cls(net, Xt, yt, params, torch.Generator().manual_seed(1000 * seed + c))
        runner.init_state()
        samples = torch.empty((n_draws, 3), dtype=torch.float64)
        runner.run(n_warmup + n_draws * thin, n_warmup=n_warmup, thin=thin, samples=samples)
        out[c] = samples.numpy()
    return out, runner


# ------------------------------------------------- exact finite-h laws (ridge)
def _pieces(d):
    a = np.einsum("ni,nj->nij", d["Xe"], d["Xe"]) / NOISE_VAR   # grad U_i = a_i theta - c_i
    c = d["Xe"] * (d["y"] / NOISE_VAR)[:, None]
    return a, c


def _two_block(d, Bt, Bp, kt, kp, Q2, batch_size, full=False):
    """Stationary law of theta for ``z = (theta, p)`` with
    ``theta' = Bt z - kt g + ...``, ``p' = Bp z - kp g + ...``,
    ``g = alpha theta + S theta - F`` (S, F the minibatch sums), noise
    ``Q2 (x) I``."""
    a, c = _pieces(d)
    n, p = c.shape
    I = np.eye(p)
    B0 = np.block([[Bt[0] * I - kt * ALPHA * I, Bt[1] * I],
                   [Bp[0] * I - kp * ALPHA * I, Bp[1] * I]])
    E = np.zeros((n, 2 * p, 2 * p))
    E[:, :p, :p] = -kt * a
    E[:, p:, :p] = -kp * a
    f = np.concatenate([kt * c, kp * c], axis=1)
    Q = np.kron(np.asarray(Q2), I)
    m, C = ref.affine_recursion_moments(B0, np.zeros(2 * p), E, f, Q, batch_size)
    return (m, C) if full else (m[:p], C[:p, :p])


def baoab_law(d, h, gamma, batch_size=None, T=1.0):
    """BAOAB with one estimate per step, state ``(theta, p)`` with p
    mid-step: ``p1 = p - h g``, ``theta' = theta + (h/2)(1 + e) p1 + (h/2) s xi``,
    ``p' = e p1 + s xi`` (``e = exp(-gamma h)``, ``s^2 = T (1 - e^2)``)."""
    e = math.exp(-gamma * h)
    s2 = T * (1 - e * e)
    k = 0.5 * h * (1 + e)
    return _two_block(d, (1.0, k), (0.0, e), k * h, e * h,
                      [[s2 * h * h / 4, s2 * h / 2], [s2 * h / 2, s2]], batch_size)


def uld_law(d, h, gamma, u=1.0, batch_size=None, T=1.0):
    """ULD's exact OU step with the gradient frozen (coefficients of
    ``uld_coefficients``)."""
    e_xx, e_xv, e_vx, e_vv, f_x, f_v, l_vv, l_xv, l_xx = uld_coefficients(h, gamma, u, T, 0.0)
    return _two_block(d, (e_xx, e_xv), (e_vx, e_vv), f_x, f_v,
                      [[l_xv ** 2 + l_xx ** 2, l_xv * l_vv], [l_xv * l_vv, l_vv ** 2]],
                      batch_size)


def leapfrog_law(d, h, K, T=1.0):
    """SG-HMC leapfrog with the exact gradient: ``theta' = M theta + m + L p``,
    ``p ~ N(0, T I)``, composed from the K leapfrog steps."""
    P = d["P"]
    p = P.shape[0]
    b = d["Xe"].T @ d["y"] / NOISE_VAR                  # g = P theta - b
    # affine maps of (theta, p, 1)
    At = np.hstack([np.eye(p), np.zeros((p, p)), np.zeros((p, 1))])
    Ap = np.hstack([np.zeros((p, p)), np.eye(p), np.zeros((p, 1))])
    one = np.zeros(2 * p + 1)
    one[-1] = 1.0

    def kick(At, Ap, t):
        g = P @ At - np.outer(b, one)
        return Ap - t * g

    for _ in range(K):
        Ap = kick(At, Ap, h / 2)
        At = At + h * Ap
        Ap = kick(At, Ap, h / 2)
    M, L, m = At[:, :p], At[:, p:2 * p], At[:, -1]
    mean = np.linalg.solve(np.eye(p) - M, m)
    C = np.linalg.solve(np.eye(p * p) - np.kron(M, M), (T * L @ L.T).ravel()).reshape(p, p)
    return mean, 0.5 * (C + C.T)


def sgnht_law(d, h, A, xi, batch_size=None, T=1.0):
    """SGNHT with its thermostat frozen at ``xi``: ``p' = (1 - h xi) p - h g +
    sqrt(2 A T h) eta``, ``theta' = theta + h p'``; a linear recursion."""
    k = 1.0 - h * xi
    s2 = 2.0 * A * T * h
    return _two_block(d, (1.0, h * k), (0.0, k), h * h, h,
                      [[h * h * s2, h * s2], [h * s2, s2]], batch_size, full=True)


def sgnht_pinned_law(d, h, A, batch_size=None, T=1.0):
    """SGNHT's law with the thermostat at the value ``xi*`` where the
    kinetic temperature ``E p.p / d`` is exactly T (the thermostat's fixed
    point, ignoring its fluctuations): the discrete momentum then carries
    T, so theta is *under*-dispersed by O(h)."""
    from scipy.optimize import brentq

    p = d["P"].shape[0]

    def kinetic(xi):
        return np.trace(sgnht_law(d, h, A, xi, batch_size, T)[1][p:, p:]) / p - T

    xi = brentq(kinetic, 0.5 * A, 4.0 * A)
    m, C = sgnht_law(d, h, A, xi, batch_size, T)
    return m[:p], C[:p, :p], xi


def _assert_mean(draws, target, what):
    m, sd, se, n_eff = ref.mean_and_se(draws)
    zs = (m - target) / se
    print(f"{what} mean: z {np.round(zs, 2)}, ESS {np.round(n_eff)}")
    assert n_eff.min() > 300, f"{what}: ESS {n_eff} too small for the test"
    assert np.all(np.abs(zs) < Z), f"{what}: mean z {np.round(zs, 2)} (ESS {np.round(n_eff)})"
    return zs


def _assert_cov(draws, target, rel_allow, what):
    cov, se = ref.cov_and_se(draws)
    scale = np.sqrt(np.outer(np.diag(target), np.diag(target)))
    err = np.abs(cov - target)
    tol = Z * se + rel_allow * scale
    ratio = np.diag(cov) / np.diag(target)
    print(f"{what} cov: diag ratio {np.round(ratio, 3)}, max |err|/tol "
          f"{np.max(err / tol):.2f}, max |err|/se {np.max(err / se):.2f}")
    assert np.all(err < tol), (
        f"{what}: cov diag ratio {np.round(ratio, 3)}, |err|/tol {np.round(err / tol, 2)}")
    return ratio


# ------------------------------------------------------------------ design
def test_fast_subset_covers_every_new_dynamics_and_subsampling():
    assert set(NEW) | {"sgld", "psgld", "sghmc"} == set(dynamics_for(NETWORK))
    assert {c[0] for c in FAST} == set(NEW)
    assert {c[1] for c in FAST} == set(SUBSAMPLINGS)


def test_design_inflation(ridge):
    """The exact stationary laws at the steps used: with i.i.d. uniform
    minibatches BAOAB and ULD are inflated by less than DESIGN_INFLATION <
    ALLOW (means exact); the full-batch laws at the large steps are the
    posterior for BAOAB and inflated by > 8% (many standard errors) for ULD
    and leapfrog, whose law is the closed form ``T (P - h^2 P^2 / 4)^-1``."""
    assert DESIGN_INFLATION < ALLOW
    laws = {"baoab": baoab_law, "uld": uld_law}
    for sampler, law in laws.items():
        kw = _kw(ridge, sampler)
        for b in (None, B):
            m, C = law(ridge, kw["step_size"], kw["friction"], batch_size=b)
            np.testing.assert_allclose(m, ridge["mean"], rtol=1e-8, atol=1e-8)
            infl = np.diag(C) / np.diag(ridge["cov"])
            print(f"{sampler} b={b}: inflation {np.round(infl, 4)}")
            assert np.all(infl > 1.0 - 1e-9) and np.all(infl < 1.0 + DESIGN_INFLATION), infl
    # SGNHT: its thermostat pins the discrete kinetic temperature to T, which
    # under-disperses theta by O(h) (7.5% at BAOAB's step, hence half of it)
    kw = _kw(ridge, "sgnht")
    for b in (None, B):
        m, C, xi = sgnht_pinned_law(ridge, kw["step_size"], kw["friction"], batch_size=b)
        np.testing.assert_allclose(m, ridge["mean"], rtol=1e-8, atol=1e-8)
        infl = np.diag(C) / np.diag(ridge["cov"])
        print(f"sgnht b={b}: xi* / A = {xi / kw['friction']:.3f}, inflation {np.round(infl, 4)}")
        assert xi > kw["friction"]  # the thermostat absorbs the discretisation's heat
        assert np.all(np.abs(infl - 1.0) < DESIGN_INFLATION), infl
    kw = _kw(ridge, "baoab", full=True)
    m, C = baoab_law(ridge, kw["step_size"], kw["friction"])
    np.testing.assert_allclose(C, ridge["cov"], rtol=1e-8, atol=1e-10)
    kw = _kw(ridge, "uld", full=True)
    m, C = uld_law(ridge, kw["step_size"], kw["friction"])
    assert np.all(np.diag(C) / np.diag(ridge["cov"]) > 1.08)
    kw = _kw(ridge, "sghmc-leapfrog", full=True)
    h, P = kw["step_size"], ridge["P"]
    m, C = leapfrog_law(ridge, h, kw["n_leapfrog"])
    np.testing.assert_allclose(m, ridge["mean"], rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(C, np.linalg.inv(P - h * h * P @ P / 4), rtol=1e-8)
    assert np.all(np.diag(C) / np.diag(ridge["cov"]) > 1.08)


# ------------------------------------------------------- exact Gaussian laws
FAST = [("baoab", "uniform"), ("baoab", "ewsg"), ("uld", "cv"), ("uld", "uniform"),
        ("sgnht", "svrg"), ("sgnht", "ewsg"), ("sghmc-leapfrog", "uniform"),
        ("sghmc-leapfrog", "cv")]


def _combos():
    return [pytest.param(s, sub, id=f"{s}-{sub}",
                         marks=[] if (s, sub) in FAST else [pytest.mark.slow])
            for s in NEW for sub in SUBSAMPLINGS]


@pytest.mark.parametrize("sampler, subsampling", _combos())
def test_minibatch_chain_samples_the_posterior(ridge, sampler, subsampling):
    """Every new dynamics with every network subsampling (b = 20 of 100
    rows): mean within Z se of the posterior mean, covariance within Z se +
    ALLOW (the module docstring)."""
    kw = _kw(ridge, sampler)
    # a seed per combination: the subsamplings of one dynamics do not share
    # their Monte Carlo error
    seed = 1 + len(SUBSAMPLINGS) * NEW.index(sampler) + SUBSAMPLINGS.index(subsampling)
    draws, runner = _chains(ridge, sampler, subsampling, kw, seed=seed)
    assert np.all(np.isfinite(draws))
    what = f"{sampler}/{subsampling}"
    _assert_mean(draws, ridge["mean"], what)
    _assert_cov(draws, ridge["cov"], ALLOW, what + " vs posterior")
    if subsampling == "ewsg":
        st = runner.state
        assert 0 < st["ewsg_accept"] + int(st.get("ewsg_accept_t", 0)) <= st["ewsg_proposals"]


@pytest.mark.parametrize("sampler", ["baoab", "uld", "sghmc-leapfrog"])
def test_full_batch_chain_has_the_exact_finite_step_law(ridge, sampler):
    """With the exact gradient (batch = all rows) BAOAB, ULD and SG-HMC
    leapfrog are linear recursions: their stationary law at the (large) step
    is known exactly and the chain must match it with no allowance: the
    posterior itself for BAOAB, inflated by more than 8% for ULD and leapfrog."""
    kw = _kw(ridge, sampler, full=True)
    if sampler == "baoab":
        law = baoab_law(ridge, kw["step_size"], kw["friction"])
    elif sampler == "uld":
        law = uld_law(ridge, kw["step_size"], kw["friction"])
    else:
        law = leapfrog_law(ridge, kw["step_size"], kw["n_leapfrog"])
    draws, _ = _chains(ridge, sampler, "uniform", kw, batch_size=N, n_draws=3000)
    _assert_mean(draws, law[0], f"{sampler}/full")
    _assert_cov(draws, law[1], 0.0, f"{sampler}/full vs exact finite-h")


# ------------------------------------------------------------ kernels
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fused_kernels_are_the_formulas(dtype):
    """The BAOAB and SGNHT C kernels against their formulas written in numpy,
    with the stream's next numbers (a second stream with the same seed)."""
    rng = np.random.default_rng(1)
    n = 77  # not a multiple of the 32-number block
    theta0, p0, buf = (rng.standard_normal(n).astype(dtype) for _ in range(3))
    c, alpha, h, kick, decay, s = 3.0, 0.7, 0.05, 0.025, 0.9, 0.4
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    z = NormalStream(5).fill(np.empty(n, dtype=dtype)).astype(np.float64)

    theta, p = theta0.copy(), p0.copy()
    flat_dynamics.baoab_step(NormalStream(5), theta, p, buf, c, alpha, h, kick, decay, s)
    g = c * buf + alpha * theta0.astype(np.float64)
    p1 = p0 - kick * g
    th1 = theta0 + h / 2 * p1
    p2 = decay * p1 + s * z
    np.testing.assert_allclose(p, p2, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(theta, th1 + h / 2 * p2, rtol=rtol, atol=rtol)

    theta, p = theta0.copy(), p0.copy()
    keep = 0.97
    kinetic = flat_dynamics.sgnht_step(NormalStream(5), theta, p, buf, c, alpha, h, keep, s)
    p1 = keep * p0 - h * g + s * z
    np.testing.assert_allclose(p, p1, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(theta, theta0 + h * p1, rtol=rtol, atol=rtol)
    assert kinetic == pytest.approx(float(np.sum(p.astype(np.float64) ** 2)), rel=1e-12)


class _TorchOpsRunner(_torch_sampler.ChainRunner):
    """The torch-operation step (the GPU code path), run on the CPU."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fused = False


_SMALL = dict(hidden_layer_sizes=(6,), step_size=1e-2, batch_size=16,
              n_samples=5, n_warmup=10, thin=3, n_chains=2, map_epochs=2)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("sampler, subsampling", [
    ("baoab", "uniform"), ("baoab", "ewsg"), ("baoab", "cv"),
    ("sgnht", "uniform"), ("sgnht", "ewsg"), ("sgnht", "svrg")])
def test_fused_cpu_step_matches_the_torch_operations(sampler, subsampling, dtype,
                                                     monkeypatch):
    """The one-pass CPU kernels and the torch formulas of the GPU path give
    the same chain (the CPU stream feeds both), to rounding."""
    X, y = _small_data()
    kw = dict(_SMALL, sampler=sampler, subsampling=subsampling, random_state=1, dtype=dtype)
    fused = SGMCMCMLPClassifier(**kw).fit(X, y)
    monkeypatch.setattr(_torch_sampler, "ChainRunner", _TorchOpsRunner)
    ops = SGMCMCMLPClassifier(**kw).fit(X, y)
    assert not np.array_equal(fused.coef_samples_[:, 0], fused.coef_samples_[:, -1])
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == "float32" else dict(rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(ops.coef_samples_, fused.coef_samples_, **tol)
    if sampler == "sgnht":
        xs = [s["thermostat"] for s in fused._chain_states]
        np.testing.assert_allclose([s["thermostat"] for s in ops._chain_states], xs,
                                   rtol=1e-4 if dtype == "float32" else 1e-9)


# ----------------------------------------------------------------- EWSG
def _linear_twin(sampler, runner, kw):
    """The linear engine's dynamics (identity metric) in the runner's state."""
    from skbayes_sg._sampling import _dynamics as lin

    st = runner.state
    P = runner.net.n_params
    h, T = kw["step_size"], 1.3
    r = None if st["r"] is None else st["r"].numpy().astype(np.float64)
    if sampler == "baoab":
        return lin.BAOAB(P, h, T, friction=kw["friction"], p0=r)
    if sampler == "uld":
        return lin.ULD(P, h, T, friction=kw["friction"], inv_mass=0.6, v0=r)
    if sampler == "sgnht":
        twin = lin.SGNHT(P, h, T, diffusion=kw["friction"], p0=r)
        twin.set_state({"thermostat": np.array([float(st["thermostat"])])})
        return twin
    if sampler == "sghmc":
        return lin.SGHMC(P, h, T, friction=kw["friction"], r0=r)
    return lin.SGHMCLeapfrog(P, h, T, n_leapfrog=3)


@pytest.mark.parametrize("sampler", ["baoab", "uld", "sgnht", "sghmc-leapfrog", "sghmc"])
def test_ewsg_energy_is_the_linear_engines_whitening(sampler):
    """The network's EWSG energy ``1/2 ||x + w||^2`` of a candidate
    ``g = c buf + alpha theta`` equals the one written from the linear
    engine's ``ewsg_whitening`` (``w = scale * g``, ``x = shift``) for the
    same dynamics in the same state (identity metric)."""
    X, y = _small_data()
    kw = dict(step_size=1e-2, friction=2.5)
    params = dict(sampler=sampler, subsampling="ewsg", step_size=kw["step_size"],
                  batch_size=16, alpha=0.7, temperature=1.3, friction=2.5, inv_mass=0.6,
                  n_leapfrog=3, ewsg_chain_length=1, snapshot_period=None, map_epochs=0,
                  map_learning_rate=1e-3, verbose=0)
    net = _torch_sampler.MLPNet((4, 6, 3), "relu", False)
    runner = _torch_sampler.ChainRunner(net, torch.tensor(X), torch.tensor(y),
                                        params, torch.Generator().manual_seed(0))
    runner.init_state()
    samples = torch.empty((3, net.n_params), dtype=torch.float64)
    runner.run(6, n_warmup=0, thin=2, samples=samples)  # momentum / thermostat moved
    theta = runner.state["theta"]
    _, buf, c = runner.estimate(theta)
    got = float(runner._ewsg_energy_fn(theta)(buf, c))

    twin = _linear_twin(sampler, runner, kw)
    scale, shift = twin.py_ewsg_whitening(theta=theta.numpy().astype(np.float64))
    g = c * buf.numpy() + 0.7 * theta.numpy()
    want = 0.5 * np.sum((shift + scale * np.tile(g, twin.ewsg_width)) ** 2)
    assert got == pytest.approx(want, rel=1e-9)


# ------------------------------------------------------------ the estimator
@pytest.mark.parametrize("sampler", dynamics_for(NETWORK))
def test_every_network_sampler_fits_and_predicts(sampler):
    X, y = _small_data()
    clf = SGMCMCMLPClassifier(sampler=sampler, random_state=0,
                              **dict(_SMALL, step_size="auto", n_warmup=100)).fit(X, y)
    proba = clf.predict_proba(X)
    assert proba.shape == (len(X), 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-10)
    assert np.all(np.isfinite(clf.coef_samples_))
    if sampler != "psgld":  # RMSprop's learning rate 1e-3 needs more than 115 steps
        assert clf.score(X, y) > 0.5  # the classes shift feature 0: learnable
    spec = DYNAMICS[sampler]
    n = len(X)
    lr = spec.network_learning_rate
    second_order = spec.has_momentum or sampler == "sghmc-leapfrog"
    assert clf.step_size_ == pytest.approx(math.sqrt(lr / n) if second_order else lr / n,
                                           rel=1e-12)
    if "friction" in spec.hyperparameters:
        assert clf.friction_ == pytest.approx(0.1 / clf.step_size_, rel=1e-12)
    else:
        assert clf.friction_ is None
    steps = clf.n_steps_
    per_step = _net_dynamics.NETWORK_N_LEAPFROG + 1 if sampler == "sghmc-leapfrog" else 1
    assert clf.n_grad_evals_ == 2 * steps * per_step * _SMALL["batch_size"]


@pytest.mark.parametrize("sampler, subsampling", [
    ("baoab", "uniform"), ("baoab", "svrg"), ("sgnht", "uniform"), ("sgnht", "cv"),
    ("uld", "ewsg"), ("sghmc-leapfrog", "uniform"), ("sghmc-leapfrog", "svrg")])
def test_warm_start_and_partial_fit_continue_the_chain(sampler, subsampling):
    """Two halves (warm start, or two partial_fit calls) == one long run: the
    momentum, BAOAB's mid-step flag and SGNHT's thermostat carry over."""
    X, y = _small_data()
    kw = dict(_SMALL, sampler=sampler, subsampling=subsampling, random_state=0,
              n_leapfrog=3 if sampler == "sghmc-leapfrog" else "auto")
    full = SGMCMCMLPClassifier(**dict(kw, n_samples=10)).fit(X, y)

    half = SGMCMCMLPClassifier(**kw).fit(X, y)
    np.testing.assert_array_equal(half.coef_samples_, full.coef_samples_[:, :5])
    state = half._chain_states[0]
    if sampler == "sgnht":
        assert state["thermostat"] != half.friction_  # it moved
    if sampler == "baoab":
        assert state["p_mid"] is True
    half.set_params(warm_start=True)
    half.fit(X, y)  # continues, no warm-up, replaces the draws
    np.testing.assert_array_equal(half.coef_samples_, full.coef_samples_[:, 5:])
    assert half.n_steps_ == full.n_steps_
    for a, b in zip(half._chain_states, full._chain_states):
        np.testing.assert_array_equal(a["theta"], b["theta"])
        if sampler != "sghmc-leapfrog":
            np.testing.assert_array_equal(a["r"], b["r"])
        assert a["thermostat"] == b["thermostat"]

    pf = SGMCMCMLPClassifier(**kw)
    pf.partial_fit(X, y, classes=np.unique(y))
    pf.partial_fit(X, y)  # appends
    np.testing.assert_array_equal(pf.coef_samples_, full.coef_samples_)


_OFF_DEFAULT = {"friction": 2.0, "inv_mass": 2.0, "n_leapfrog": 3}


def test_a_hyperparameter_that_does_not_act_is_refused():
    """Every sampler hyperparameter set away from its default with a sampler
    that does not own it (the specs' owners) raises, naming the parameter,
    the sampler and the samplers it acts with; with an owner it fits."""
    X, y = _small_data()
    owners = sampler_owners()
    assert set(owners) == set(_OFF_DEFAULT) == set(HYPERPARAMETERS)
    for name, value in _OFF_DEFAULT.items():
        default, who = owners[name]
        assert value != default
        for sampler in dynamics_for(NETWORK):
            clf = SGMCMCMLPClassifier(sampler=sampler, **{name: value},
                                      **dict(_SMALL, n_warmup=2, n_samples=2))
            if sampler in who:
                clf.fit(X, y)
                continue
            msg = (f"{name}={value!r} has no effect with sampler={sampler!r} "
                   f"(it acts with {sorted(who)})")
            with pytest.raises(ValueError, match=__import__("re").escape(msg)):
                clf.fit(X, y)


def test_constraints_and_docs_come_from_the_specs():
    cons = SGMCMCMLPClassifier._parameter_constraints
    assert cons["sampler"][0].options == set(dynamics_for(NETWORK))
    assert cons["subsampling"][0].options == set(estimators_for(NETWORK))
    for name, hp in HYPERPARAMETERS.items():
        assert cons[name] == list(hp.constraints)
        assert SGMCMCMLPClassifier().get_params()[name] == hp.default
    assert set(_net_dynamics.NETWORK_DYNAMICS) == set(dynamics_for(NETWORK))
    doc = " ".join(SGMCMCMLPClassifier.__doc__.split())
    for name in dynamics_for(NETWORK):
        assert f'``"{name}"``: {" ".join(DYNAMICS[name].doc.split())}.' in doc
    for hp in HYPERPARAMETERS.values():
        assert " ".join(hp.doc.split()) in doc
    assert "{" + "sampler_doc}" not in doc


def test_bad_hyperparameters_are_refused():
    X, y = _small_data()
    for params in (dict(sampler="uld", inv_mass=0.0), dict(sampler="uld", inv_mass=-1.0),
                   dict(sampler="sghmc-leapfrog", n_leapfrog=0),
                   dict(sampler="sghmc-leapfrog", n_leapfrog="many"),
                   dict(sampler="baoab", friction=-1.0)):
        name = [k for k in params if k != "sampler"][0]
        with pytest.raises(ValueError, match=name):
            SGMCMCMLPClassifier(**params).fit(X, y)
