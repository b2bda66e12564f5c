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

from .samplers import BY_NAME
from .samplers._common import DEFAULT_FRICTION

#: budget of the relative error of the stationary variance (noise + the
#: integrator's Gaussian bias): 4% in variance, 2% in sd
VARIANCE_ERROR = 0.04

#: largest step (whitened time units) per dynamics in a whitened metric: the
#: bias on the non-Gaussian remainder, each dynamics' ``MAX_STEP``.
#: First-order integrators (SGLD's exponential step, ULD with the remainder
#: frozen) 0.3; the second-order splittings (BAOAB, split leapfrog) 0.5
#: (user guide: "How the step is set")
MAX_STEP = {name: module.MAX_STEP for name, module in BY_NAME.items()
            if module.MAX_STEP is not None}


def linear_step(sampler, h, friction=DEFAULT_FRICTION):
    """The :class:`Linear` recursion of ``sampler`` at step ``h`` (whitened,
    kappa = 1): its file's ``linear_step``."""
    module = BY_NAME.get(sampler)
    if module is None or module.linear_step is None:
        raise ValueError(f"no error model for sampler {sampler!r}")
    return module.linear_step(h, friction)


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
    grid = BY_NAME[sampler].FRICTION_GRID
    frictions = ((float(friction),) if friction != "auto"
                 else grid if grid is not None else (DEFAULT_FRICTION,))
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
