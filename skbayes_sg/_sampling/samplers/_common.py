"""What the dynamics' files share: the automatic-step fraction, the
Gaussian frame of a whitened metric, the linear recursion of the error
model, momentum starts, the underdamped identity-metric rule and the
Metropolis settings' record.  Pure numpy: no Cython, no torch."""
from dataclasses import dataclass

import numpy as np
from scipy.linalg import solve_discrete_lyapunov

# Fraction of the stability/variance limit the automatic step sizes use:
# with it the stationary variance of a Gaussian target is inflated by
# about 5-10% in its stiffest direction (the analysis in ``sgld.prepare``,
# of the SGLD step of the formula sheet, doc/algorithms.rst).
AUTO_STEP_FRACTION = 0.1

#: friction (whitened units) of the underdamped dynamics: 1 balances mixing
#: against the bias on the remainder (BAOAB with 0.5 drifts at h = 1 on
#: nearly separable data); Euler-Maruyama SGHMC and SGNHT search
#: ``FRICTIONS`` instead (their ``FRICTION_GRID``)
DEFAULT_FRICTION = 1.0
FRICTIONS = (0.5, 1.0, 2.0, 4.0)


@dataclass(frozen=True)
class MetropolisRule:
    """How a Metropolis-adjustable dynamics starts and adapts in a whitened
    metric with exact gradients.

    Attributes
    ----------
    start_step : float
        Where dual averaging starts the step (before the dimension's shrink).
    max_step : float
        The largest step it may adapt to.
    target_accept : float
        Dual averaging's target acceptance rate.
    iterations_per_draw : float
        Planned iterations per effective draw (sizes the warm-up windows and
        the first round; then measured).
    trajectory : bool
        Whether it integrates a trajectory whose length the set-up sets
        (``n_leapfrog="auto"``).
    """

    start_step: float
    max_step: float
    target_accept: float
    iterations_per_draw: float
    trajectory: bool = False


@dataclass(frozen=True)
class Linear:
    """One step on N(0, 1) as a linear recursion (position is w[0]):
    ``w' = A w + B_eps eps + B_xi xi`` (see :mod:`.._error_model`)."""

    A: np.ndarray
    B_eps: np.ndarray
    B_xi: np.ndarray
    gradients: float = 1.0     # estimates drawn per step

    def analyse(self):
        """``(var0, f, iat)``: the stationary variance of z without gradient
        noise, the variance added per unit of noise variance, and z's
        integrated autocorrelation time in steps."""
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


def unit_momentum_variance(cfg):
    """The momentum's stationary variance per unit temperature: 1 (ULD's
    velocity has ``u``, its inverse mass)."""
    return 1.0


def law_step(dynamics):
    """A one-coordinate kernel's step on the unit Gaussian (curvature 1,
    the gradient's noise entering as its drift) from its compiled law
    (:func:`.._dynamics.one_step_law`): the error model analyses the very
    update the kernels run."""
    from .._dynamics import one_step_law
    M, u, noise = one_step_law(dynamics, 1.0, 1.0)
    return Linear(M, u[:, None], noise)


def dynamics_frame(ctx, temperature):
    """Temperature and reference precision the dynamics run with.  A whitened
    metric carries the temperature in its scale (the oracle returns
    ``L^T grad U / T``), so the dynamics sample exp(-(U/T)) at temperature 1
    around a unit reference Gaussian; the identity metric has no reference."""
    if ctx.resolved.metric_kind == "identity":
        return {"temperature": temperature, "reference_precision": 0.0}
    return {"temperature": 1.0, "reference_precision": 1.0}


def restore(dyn, state):
    """``dyn`` with a saved state (a warm start) put back, if any."""
    if state:
        dyn.set_state(state)
    return dyn


def stationary_momentum(generator, dim, cfg, scale=1.0):
    """A momentum drawn from its stationary law N(0, scale T I)."""
    return np.sqrt(scale * cfg["temperature"]) * generator.standard_normal(dim)


def start_momentum(dim, cfg, state, generator):
    """None when the saved state carries the momentum, else a stationary draw."""
    return None if state and "momentum" in state else stationary_momentum(generator, dim, cfg)


def underdamped_auto(ctx, theta0, step_size, friction, noise):
    """Identity metric: critical damping of the stiffest direction by default;
    the step keeps h sqrt(L), h gamma and the gradient-noise inflation
    h v / (2 gamma) small (the noise adds h^2 v per step against 2 gamma T h
    injected).  Returns ``(h, gamma)``."""
    gamma = 2.0 * np.sqrt(ctx.curvature(theta0)) if friction == "auto" else float(friction)
    if step_size == "auto":
        L = ctx.curvature(theta0)
        v = noise.curvature()
        h = AUTO_STEP_FRACTION * min(1.0 / np.sqrt(L), 1.0 / gamma,
                                     2.0 * gamma / v if v > 0 else np.inf)
    else:
        h = float(step_size)
    return h, gamma


def prepare_underdamped(ctx, theta0, step_size, friction, noise, temperature):
    """The settings of a dynamics with a step and a friction (SGHMC, BAOAB,
    SGNHT, whose thermostat starts at the friction this rule sets)."""
    h, gamma = underdamped_auto(ctx, theta0, step_size, friction, noise)
    return {**dynamics_frame(ctx, temperature), "step_size": h, "friction": gamma}
