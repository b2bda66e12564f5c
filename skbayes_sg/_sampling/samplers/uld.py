"""ULD: underdamped Langevin with the exact Ornstein-Uhlenbeck step of
Cheng, Chatterji, Bartlett and Jordan (2018).

The gradient is frozen over a step and the linear SDE of (x, v) with
friction gamma and inverse mass u is integrated exactly: its mean maps and
the Cholesky factor of its Gaussian increment are ``uld_coefficients``
(a Cython function with a Python twin, which the error model reads too).

Kernels: ``_dynamics.ULD`` (Cython), its lazy step in ``_lazy.pyx``, the
network's ``neural_network._net_dynamics.ULD``.
"""
import numpy as np

from .._definitions import DynamicsSpec
from ._common import (AUTO_STEP_FRACTION, dynamics_frame, law_step, restore,
                      stationary_momentum)

#: its place in the lists of the docs and error messages
LISTED = 5
DEFINITION = DynamicsSpec(
    "uld", "SG underdamped Langevin with the exact Ornstein-Uhlenbeck step of "
    "Cheng et al. (``friction``, ``inv_mass``)", ("friction", "inv_mass"),
    has_momentum=True, momentum_key="velocity", network_learning_rate=0.01, lazy=True)

#: the remainder is frozen over a step: first order, like SGLD
MAX_STEP = 0.3
FRICTION_GRID = None
METROPOLIS = None
IDENTITY_STEP_CHECK = False
MIXING_HINT = ""


def prepare(ctx, theta0, step_size, friction, noise, temperature):
    u = float(ctx.settings.inv_mass)
    frame = dynamics_frame(ctx, temperature)
    if frame["reference_precision"] > 0 or "auto" not in (friction, step_size):
        return {**frame, "step_size": float(step_size), "friction": float(friction),
                "inv_mass": u}
    # in time units the curvature seen by x is u L (frequency sqrt(u L)); the
    # power iteration it costs runs only for the "auto" settings that need it
    uL = u * ctx.curvature(theta0)
    gamma = 2.0 * np.sqrt(uL) if friction == "auto" else float(friction)
    if step_size == "auto":
        # the exact OU step is stable for any h; the frozen gradient needs
        # h sqrt(uL) small, and the gradient noise (u h)^2 v per step against
        # the injected 2 gamma u T h inflates v's variance by ~ u h v / (2 gamma T)
        v = u * noise.curvature()
        h = AUTO_STEP_FRACTION * min(1.0 / np.sqrt(uL), 1.0 / gamma,
                                     2.0 * gamma * temperature / v if v > 0 else np.inf)
    else:
        h = float(step_size)
    return {**frame, "step_size": h, "friction": gamma, "inv_mass": u}


def build(dim, cfg, state, generator):
    from .. import _dynamics
    v0 = (None if state and DEFINITION.momentum_key in state
          else stationary_momentum(generator, dim, cfg, cfg["inv_mass"]))
    dyn = _dynamics.ULD(dim, cfg["step_size"], cfg["temperature"], friction=cfg["friction"],
                        inv_mass=cfg["inv_mass"], v0=v0,
                        reference_precision=cfg["reference_precision"])
    return restore(dyn, state)


def linear_step(h, friction):
    """The kernel's own law on the unit Gaussian (u = T = kappa = 1)."""
    from .. import _dynamics
    return law_step(_dynamics.ULD(1, h, 1.0, friction=friction, inv_mass=1.0,
                                  reference_precision=1.0))


def momentum_variance_scale(cfg):
    """The velocity's stationary variance per unit temperature: u."""
    return cfg.get("inv_mass", 1.0)
