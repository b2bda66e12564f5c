"""Each dynamics' update law is written once (``_sampling/_laws.pxd``).

The kernels call the law's moves; the lazy kernel and the error model read
its one-step Gaussian map off the moves (``_dynamics.one_step_law``).  Here:

* that map against the closed forms of the user guide, written
  independently in numpy (a move that drifted from its formula fails);
* the network's torch steps, the one twin written apart, against the law
  (``_dynamics.law_move``) on the same gradient and draws;
* the Metropolis rule both engines call against the proposal's densities;
* EWSG's whitening, still written per dynamics, against the law (SGLD,
  SGHMC, ULD, SGNHT; BAOAB's and the leapfrog's whiten the next step's
  kicks, which the one-step law does not describe).
"""
import numpy as np
import pytest

from skbayes_sg._sampling import _dynamics
from skbayes_sg._sampling._coefficients import (py_friction_noise, py_langevin_coefficients,
                                                py_ou_coefficients)

H, T, GAMMA, BETA = 0.21, 1.3, 1.7, 0.4


def _affine(M, u, N, then_M, then_u, then_N):
    """The law of one affine Gaussian map followed by another: ``(M, u, N)``
    with noise factor N (its draws in the columns)."""
    return then_M @ M, then_M @ u + then_u, np.hstack([then_M @ N, then_N])


def _baoab_closed_form(h, gamma, kappa, a, beta, partial):
    t = 0.5 * h
    ae = a - kappa
    omega = np.sqrt(kappa)
    if omega > 0:
        c, s = np.cos(omega * t), np.sin(omega * t)
        A = np.array([[c, s / omega], [-omega * s, c]])
    else:
        A = np.array([[1.0, t], [0.0, 1.0]])
    B = np.array([[1.0, 0.0], [-t * ae, 1.0]])
    b = np.array([0.0, -t * beta])
    decay, sigma = py_ou_coefficients(gamma, h, T)
    none = np.zeros((2, 0))
    M, u, N = B, b, none
    M, u, N = _affine(M, u, N, A, np.zeros(2), none)
    M, u, N = _affine(M, u, N, np.diag([1.0, decay]), np.zeros(2), np.array([[0.0], [sigma]]))
    M, u, N = _affine(M, u, N, A, np.zeros(2), none)
    if not partial:
        M, u, N = _affine(M, u, N, B, b, none)
    return M, u, N


def _closed_form(name, kappa, a, partial):
    """``(M, u, noise covariance)`` of one step of a coordinate whose
    gradient is ``a z + BETA`` (the user guide's formulas)."""
    h = H
    if name == "sgld":
        c, s = py_langevin_coefficients(h, kappa, T)
        return np.array([[1.0 - c * a]]), np.array([-c * BETA]), np.array([[s * s]])
    if name == "sghmc":
        s = py_friction_noise(GAMMA, T, h)
        return (np.array([[1.0, h], [-h * a, 1.0 - h * GAMMA]]), np.array([0.0, -h * BETA]),
                np.array([[0.0, 0.0], [0.0, s * s]]))
    if name == "sgnht":
        # the thermostat at its start, xi = A: p' = keep p - h g + s eta, z' = z + h p'
        s, keep = py_friction_noise(GAMMA, T, h), 1.0 - h * GAMMA
        return (np.array([[1.0 - h * h * a, h * keep], [-h * a, keep]]),
                np.array([-h * h * BETA, -h * BETA]), np.array([[h * h * s * s, h * s * s],
                                                                [h * s * s, s * s]]))
    if name == "uld":
        e_xx, e_xv, e_vx, e_vv, f_x, f_v, l_vv, l_xv, l_xx = _dynamics.uld_coefficients(
            h, GAMMA, 0.8, T, kappa)
        ae = a - kappa
        L = np.array([[l_xv, l_xx], [l_vv, 0.0]])
        return (np.array([[e_xx - f_x * ae, e_xv], [e_vx - f_v * ae, e_vv]]),
                -BETA * np.array([f_x, f_v]), L @ L.T)
    M, u, N = _baoab_closed_form(h, GAMMA, kappa, a, BETA, partial)
    return M, u, N @ N.T


def _dynamics_of(name, kappa):
    if name == "sgld":
        return _dynamics.SGLD(1, H, T, reference_precision=kappa)
    if name == "sghmc":
        return _dynamics.SGHMC(1, H, T, friction=GAMMA, reference_precision=kappa)
    if name == "uld":
        return _dynamics.ULD(1, H, T, friction=GAMMA, inv_mass=0.8, reference_precision=kappa)
    if name == "sgnht":
        return _dynamics.SGNHT(1, H, T, diffusion=GAMMA, reference_precision=kappa)
    return _dynamics.BAOAB(1, H, T, friction=GAMMA, reference_precision=kappa)


@pytest.mark.parametrize("a", [0.3, 1.9])
@pytest.mark.parametrize("kappa", [0.0, 0.7])
@pytest.mark.parametrize("name, partial", [("sgld", False), ("sghmc", False), ("uld", False),
                                           ("baoab", False), ("baoab", True),
                                           ("sgnht", False)])
def test_the_one_step_law_is_the_closed_form(name, partial, kappa, a):
    M, u, noise = _dynamics.one_step_law(_dynamics_of(name, kappa), a, BETA, partial)
    want_M, want_u, want_C = _closed_form(name, kappa, a, partial)
    np.testing.assert_allclose(M, want_M, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(u, want_u, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(noise @ noise.T, want_C, rtol=1e-13, atol=1e-15)


def test_a_dynamics_without_a_per_coordinate_law_says_so():
    with pytest.raises(ValueError, match="PSGLD has no per-coordinate"):
        _dynamics.one_step_law(_dynamics.PSGLD(1, H, T))


# --------------------------------------------------------- the torch twin

class _Runner:
    """What a network dynamics reads from its ChainRunner, with the step's
    draws given."""

    def __init__(self, draws, n, alpha):
        import torch
        self.p = dict(step_size=H, temperature=T, alpha=alpha, friction=GAMMA, inv_mass=0.8)
        self.fused = False
        self.noise = torch.zeros(n, dtype=torch.float64)
        self.grad_buf2 = torch.zeros(n, dtype=torch.float64)
        self._draws = list(draws)

    def draw_noise(self, out=None):
        out = self.noise if out is None else out
        out.copy_(self._draws.pop(0))
        return out


@pytest.mark.parametrize("name", ["sgld", "sghmc", "uld", "baoab", "sgnht"])
def test_the_torch_steps_are_the_law(name):
    """One torch step (the network's GPU path, float64) equals the compiled
    law's move on the same gradient ``c buf + alpha theta`` and draws (the
    network's integrators run in the identity metric, kappa = 0)."""
    torch = pytest.importorskip("torch")
    from skbayes_sg.neural_network import _net_dynamics

    rng = np.random.default_rng(3)
    n, c, alpha = 41, 2.5, 0.6
    theta, r, buf, xi1, xi2 = (rng.standard_normal(n) for _ in range(5))
    runner = _Runner([torch.tensor(xi1), torch.tensor(xi2)], n, alpha)
    step = {"sgld": _net_dynamics.SGLD, "sghmc": _net_dynamics.SGHMC,
            "uld": _net_dynamics.ULD, "baoab": _net_dynamics.BAOAB,
            "sgnht": _net_dynamics.SGNHT}[name](runner)
    st = {"theta": torch.tensor(theta), "r": torch.tensor(r), "p_mid": False,
          "thermostat": torch.tensor(GAMMA, dtype=torch.float64)}
    step.update(st, torch.tensor(buf), c)

    # BAOAB's network step is the opening kick, A O A (the closing kick waits
    # for the next estimate): the law's partial step
    z, rr = _dynamics.law_move(_dynamics_of(name, 0.0), theta, r, c * buf + alpha * theta,
                               xi1, xi2, partial=name == "baoab")
    np.testing.assert_allclose(st["theta"].numpy(), z, rtol=1e-12, atol=1e-13)
    if rr is not None:
        np.testing.assert_allclose(st["r"].numpy(), rr, rtol=1e-12, atol=1e-13)


# ------------------------------------------------------- the Metropolis rule
@pytest.mark.parametrize("c, s2, T", [(0.3, 0.6 * 1.3, 1.3), (0.21, 0.05, 0.7)])
def test_the_metropolis_rule_is_the_langevin_proposals_ratio(c, s2, T):
    """``py_mala_log_ratio`` (the rule both engines' MALA call) equals the log
    of ``pi(z') q(z | z') / (pi(z) q(z' | z))`` written from the Gaussian
    proposal ``q(z' | z) = N(z - c g, s^2)`` directly."""
    rng = np.random.default_rng(7)
    z, z_new, g, g_new = (rng.standard_normal(9) for _ in range(4))
    U, U_new = 1.7, 2.4

    def log_q(to, frm, grad):
        return -np.sum((to - frm + c * grad) ** 2) / (2.0 * s2)

    want = -(U_new - U) / T + log_q(z, z_new, g_new) - log_q(z_new, z, g)
    got = _dynamics.py_mala_log_ratio(U_new - U, float((z_new - z) @ (g + g_new)),
                                      float(g @ g), float(g_new @ g_new), c, s2, T)
    assert got == pytest.approx(want, rel=1e-12, abs=1e-12)
    assert _dynamics.py_accept_prob(got) == pytest.approx(min(1.0, np.exp(want)), rel=1e-12)
    assert _dynamics.py_accept_prob(float("nan")) == 0.0
    assert _dynamics.py_accept_prob(3.0) == 1.0


# ------------------------------------------------------- EWSG's whitening
X_AUTO, X_MOMENTUM_STOP = 0, 3       # _dynamics.pxd's EwsgX


@pytest.mark.parametrize("kappa", [0.0, 0.7])
@pytest.mark.parametrize("name, x_mode", [("sgld", X_AUTO)] + [
    (name, mode) for name in ("sghmc", "uld", "sgnht") for mode in (X_AUTO, X_MOMENTUM_STOP)])
def test_the_ewsg_whitening_is_the_laws(name, x_mode, kappa):
    """Each dynamics' ``ewsg_whitening`` (written per dynamics) against its
    law: a step is ``x' = M x + u g + N xi`` (``one_step_law`` at a = 0, the
    gradient as the drift), so at the target ``x'`` the draws are
    ``xi = N^-1 (target - M x) + N^-1 (-u) g``: the whitening's ``shift`` and
    ``scale``, over the components that carry noise.  The target keeps the
    momentum (or stops it) and puts the position at its gradient-free mean."""
    dyn = _dynamics_of(name, kappa)
    z, r = 0.8, -0.45
    if name != "sgld":
        key = "velocity" if name == "uld" else "momentum"
        dyn.set_state({key: np.array([r])})
    scale, shift = dyn.py_ewsg_whitening(x_mode, theta=np.array([z]))
    M, u, noise = _dynamics.one_step_law(dyn, 0.0, 1.0)
    if name == "sgld":
        np.testing.assert_allclose([scale[0], shift[0]], [-u[0] / noise[0, 0], 0.0], rtol=1e-13)
        return
    mean = M @ [z, r]
    target_r = 0.0 if x_mode == X_MOMENTUM_STOP else r
    if name == "uld":          # both draws carry noise: the 2 x 2 factor
        want_scale = np.linalg.solve(noise, -u)
        want_shift = np.linalg.solve(noise, [0.0, target_r - mean[1]])
    else:                      # one draw, on the momentum
        want_scale = [-u[1] / noise[1, 0]]
        want_shift = [(target_r - mean[1]) / noise[1, 0]]
    np.testing.assert_allclose(scale, want_scale, rtol=1e-11, atol=1e-14)
    np.testing.assert_allclose(shift, want_shift, rtol=1e-11, atol=1e-14)
