"""The step and batch error model of the dynamics in a whitened metric.

In a whitened metric the posterior is close to N(0, I) in the sampler's
coordinates ``z``.  On that Gaussian, with a gradient estimate
``g = z + eps`` whose noise ``eps`` has variance ``v`` per coordinate and is
independent between estimates, every dynamics is a linear recursion per
coordinate,

    w' = A w + B_eps eps + B_xi xi,     w = (z, momentum...),

so its stationary covariance (a discrete Lyapunov equation) and the
autocorrelations of ``z`` are exact.  Three numbers per dynamics and
settings follow:

``var0``
    the stationary variance of ``z`` without gradient noise (1 means no
    discretisation bias on a Gaussian: true of every integrator here that
    moves the reference Gaussian exactly; Euler-Maruyama SGHMC is not);
``f``
    the variance added per unit of gradient-noise variance: the stationary
    variance is ``var0 + f v``;
``iat``
    the integrated autocorrelation time of ``z`` in steps.

For every dynamics ``f * iat`` is close to 1: in the noise-dominated regime
the cost of an effective draw, ``b * iat`` with ``b = v1 f / eps``, is about
``v1 / eps`` whatever the step.  The step is then set as large as the
non-Gaussian part of the posterior allows (``MAX_STEP``: the integrators'
own bias on the remainder, measured on real posteriors, see the user
guide), and the batch as small as the noise budget allows.
"""
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.linalg import expm, solve_discrete_lyapunov

#: budget of the relative error of the stationary variance (noise + the
#: integrator's Gaussian bias): 4% in variance, 2% in sd
VARIANCE_ERROR = 0.04

#: largest step (whitened time units) per dynamics in a whitened metric: the
#: bias on the non-Gaussian remainder.  First-order integrators (SGLD's
#: exponential step, ULD with the remainder frozen) 0.3; the second-order
#: splittings (BAOAB, split leapfrog) 0.5 (user guide: "How the step is set")
MAX_STEP = {"sgld": 0.3, "uld": 0.3, "baoab": 0.5, "sghmc-leapfrog": 0.5, "sghmc": 0.5,
            "sgnht": 0.5}

#: friction (whitened units) of the underdamped dynamics: 1 balances mixing
#: against the bias on the remainder (BAOAB with 0.5 drifts at h = 1 on
#: nearly separable data); Euler-Maruyama SGHMC chooses its own in FRICTIONS
DEFAULT_FRICTION = 1.0
FRICTIONS = (0.5, 1.0, 2.0, 4.0)

#: trajectory length of the split leapfrog in whitened units: a quarter
#: period of the reference Gaussian carries a draw to an independent one
TRAJECTORY = np.pi / 2


@dataclass(frozen=True)
class Linear:
    """One step on N(0, 1) as a linear recursion (position is w[0])."""

    A: np.ndarray
    B_eps: np.ndarray
    B_xi: np.ndarray
    gradients: float = 1.0     # estimates drawn per step

    def analyse(self):
        """``(var0, f, iat)`` (see the module docstring)."""
        n = self.A.shape[0]
        if np.max(np.abs(np.linalg.eigvals(self.A))) >= 1.0 - 1e-12:
            return np.inf, np.inf, np.inf           # unstable (or not mixing)
        S0 = solve_discrete_lyapunov(self.A, self.B_xi @ self.B_xi.T)
        S1 = solve_discrete_lyapunov(self.A, self.B_eps @ self.B_eps.T)
        # sum_{k >= 1} A^k = A (I - A)^-1: the lag-k covariances are A^k S0
        tail = np.linalg.solve(np.eye(n) - self.A, self.A)
        iat = 1.0 + 2.0 * (tail @ S0)[0, 0] / S0[0, 0]
        # an antithetic recursion (iat < 1) helps means but not variances:
        # plan with at least one step per draw
        return float(S0[0, 0]), float(S1[0, 0]), float(max(iat, 1.0))


def _rotation(t):
    c, s = np.cos(t), np.sin(t)
    return np.array([[c, s], [-s, c]])


def linear_step(sampler, h, friction=DEFAULT_FRICTION):
    """The :class:`Linear` recursion of ``sampler`` at step ``h`` (whitened, kappa = 1)."""
    if sampler == "sgld":
        a = np.exp(-h)
        return Linear(np.array([[a]]), np.array([[-(1.0 - a)]]),
                      np.array([[np.sqrt(1.0 - a * a)]]))
    if sampler == "baoab":
        # state right after the closing kick; the estimate at the new point
        # enters the momentum once per step (-h eps: two half kicks)
        R = _rotation(h / 2)
        d = np.exp(-friction * h)
        M = R @ np.diag([1.0, d]) @ R
        B_xi = R @ np.array([[0.0], [np.sqrt(1.0 - d * d)]])
        return Linear(M, np.array([[0.0], [-h]]), B_xi)
    if sampler == "uld":
        from ._dynamics import uld_coefficients
        e_xx, e_xv, e_vx, e_vv, f_x, f_v, l_vv, l_xv, l_xx = uld_coefficients(
            h, friction, 1.0, 1.0, 1.0)
        A = np.array([[e_xx, e_xv], [e_vx, e_vv]])
        return Linear(A, -np.array([[f_x], [f_v]]), np.array([[l_xv, l_xx], [l_vv, 0.0]]))
    if sampler == "sgnht":
        # the thermostat linearised at its start, xi = A (the friction): Euler
        # SGHMC with the momentum updated first.  With gradient noise the
        # thermostat settles above A and takes back part of the noise's
        # inflation, so the model is conservative for it.
        A = np.array([[1.0 - h * h, h * (1.0 - h * friction)], [-h, 1.0 - h * friction]])
        return Linear(A, np.array([[-h * h], [-h]]),
                      np.sqrt(2.0 * friction * h) * np.array([[h], [1.0]]))
    if sampler == "sghmc":
        A = np.array([[1.0, h], [-h, 1.0 - h * friction]])
        return Linear(A, np.array([[0.0], [-h]]),
                      np.array([[0.0], [np.sqrt(2.0 * friction * h)]]))
    if sampler == "sghmc-leapfrog":
        # fresh momentum; K split steps (kick with the noise only, exact
        # rotation); z after K steps is linear in (z, p, eps_0..eps_K-1)
        K = max(1, int(np.ceil(TRAJECTORY / h)))
        R = _rotation(h)
        zmap = np.array([1.0, 0.0])                      # coefficients of (z0, p0)
        pmap = np.array([0.0, 1.0])
        eps_z = np.zeros(K + 1)
        eps_p = np.zeros(K + 1)
        for k in range(K):
            pmap = pmap.copy()
            eps_p[k] -= h / 2
            new_z = R[0, 0] * zmap + R[0, 1] * pmap
            new_p = R[1, 0] * zmap + R[1, 1] * pmap
            new_ez = R[0, 0] * eps_z + R[0, 1] * eps_p
            new_ep = R[1, 0] * eps_z + R[1, 1] * eps_p
            zmap, pmap, eps_z, eps_p = new_z, new_p, new_ez, new_ep
            eps_p[k + 1] -= h / 2
        return Linear(np.array([[zmap[0]]]), eps_z[None, :], np.array([[zmap[1]]]),
                      gradients=K + 1.0)
    raise ValueError(f"no error model for sampler {sampler!r}")


@lru_cache(maxsize=4096)
def analyse(sampler, h, friction=DEFAULT_FRICTION):
    """``(var0, f, iat, gradients per step)`` of ``sampler`` at step ``h``."""
    step = linear_step(sampler, float(h), float(friction))
    return (*step.analyse(), step.gradients)


@dataclass
class Settings:
    """What :func:`choose` decided, and what the model predicts for it."""

    step_size: float
    batch_size: int
    friction: float
    variance_error: float      # predicted relative error of the stationary variance
    iat: float                 # predicted integrated autocorrelation time (steps)
    cost_per_draw: float       # predicted row evaluations per effective draw
    gradients_per_step: float


def choose(sampler, noise_per_row, n, *, step_size="auto", batch_size="auto",
           friction="auto", overhead_rows=0.0, budget=VARIANCE_ERROR):
    """Step, batch (and friction) with the least cost per effective draw
    whose predicted variance error stays within ``budget``.

    Parameters
    ----------
    sampler : str
        A dynamics with an error model (:data:`MAX_STEP`).
    noise_per_row : float
        ``v1``: the largest variance, over directions in the whitened
        metric, of the gradient estimate with a one-row minibatch
        (``v(b) = v1 / b``); 0 for exact gradients.
    n : int
        Rows (the largest batch).
    step_size, batch_size, friction : "auto" or number
        Fixed values are kept; "auto" ones are chosen.
    overhead_rows : float
        Cost of a step besides its rows, in row evaluations (metric
        products, noise): it favours fewer, larger steps.
    budget : float
        Largest relative variance error allowed.

    Returns
    -------
    Settings
    """
    frictions = ((float(friction),) if friction != "auto"
                 else FRICTIONS if sampler in ("sghmc", "sgnht") else (DEFAULT_FRICTION,))
    h_max = MAX_STEP[sampler]
    steps = ((float(step_size),) if step_size != "auto"
             else tuple(h_max * np.geomspace(1e-3, 1.0, 61)))
    best = None
    for gamma in frictions:
        for h in steps:
            var0, f, iat, grads = analyse(sampler, h, gamma)
            if not np.isfinite(iat):
                continue
            bias = abs(var0 - 1.0)
            room = budget - bias
            if batch_size != "auto":
                b = int(batch_size)
            elif noise_per_row <= 0:
                b = 1
            elif room <= 0:
                continue
            else:
                b = int(min(n, max(1, np.ceil(noise_per_row * f / room))))
            error = bias + f * noise_per_row / b
            cost = (b + overhead_rows) * grads * iat
            key = (error > budget * (1 + 1e-9), cost if error <= budget * (1 + 1e-9) else error)
            if best is None or key < best[0]:
                best = (key, Settings(h, b, gamma, error, iat, cost, grads))
    if best is None:  # only unstable settings were given
        var0, f, iat, grads = analyse(sampler, steps[0], frictions[0])
        return Settings(steps[0], 1 if batch_size == "auto" else int(batch_size), frictions[0],
                        np.inf, np.inf, np.inf, grads)
    return best[1]
