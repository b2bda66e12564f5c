"""SGLD: stochastic gradient Langevin dynamics.

One Euler-Maruyama step of overdamped Langevin dynamics,
``theta' = theta - h grad U / T-scaled + sqrt(2 h T) xi`` in the identity
metric; in a whitened metric the Gaussian part is integrated exactly (an
exponential integrator: ``z' = a z - (1 - a) eps + sqrt(1 - a^2) xi``,
``a = e^-h``), and with exact gradients a Metropolis correction makes it
MALA.  Formulas: the user guide, "Dynamics".

Kernels: the linear engine's ``_dynamics.SGLD`` (Cython), its lazy O(nnz)
step in ``_lazy.pyx``, the network's ``neural_network._net_dynamics.SGLD``.
"""
import numpy as np

from .._definitions import DynamicsSpec
from ._common import (AUTO_STEP_FRACTION, MetropolisRule, dynamics_frame, law_step, restore,
                      unit_momentum_variance)

#: its place in the lists of the docs and error messages
LISTED = 1
DEFINITION = DynamicsSpec(
    "sgld", "stochastic gradient Langevin dynamics (an exponential integrator in a "
    "whitened metric, MALA with exact gradients)", metropolis=True, lazy=True,
    network_metropolis=True)

#: largest whitened step of the error model: a first-order integrator's bias
#: on the non-Gaussian remainder (user guide: "How the step is set")
MAX_STEP = 0.3
FRICTION_GRID = None
#: MALA: starts at 1, at most 3; acceptance 0.6; about 4 iterations a draw
METROPOLIS = MetropolisRule(start_step=1.0, max_step=3.0, target_accept=0.6,
                            iterations_per_draw=4.0)
#: a first-order step whose hand-set size in the identity metric has its
#: variance error predicted after the fit
IDENTITY_STEP_CHECK = True
MIXING_HINT = "sampler='sghmc' often explores faster at the same cost per step."
momentum_variance_scale = unit_momentum_variance      # no momentum: the unit default


def auto_step(ctx, noise):
    """ULA inflates the stationary variance along curvature lambda by
    1/(1 - h lambda/2); gradient noise of variance v along a direction by
    about 1 + h v / 2: both stay near 5% with h = 0.1 / (L + v_max)."""
    return AUTO_STEP_FRACTION / (ctx.curvature(noise.theta0) + noise.curvature())


def prepare(ctx, theta0, step_size, friction, noise, temperature):
    h = auto_step(ctx, noise) if step_size == "auto" else float(step_size)
    return {**dynamics_frame(ctx, temperature), "step_size": h}


def build(dim, cfg, state, generator):
    from .. import _dynamics
    return restore(_dynamics.SGLD(dim, cfg["step_size"], cfg["temperature"],
                                  cfg["reference_precision"], cfg.get("metropolis", False)),
                   state)


def linear_step(h, friction):
    """``z' = z - c (z + eps) + s xi`` on the unit Gaussian: the kernel's own
    law (kappa = T = 1)."""
    from .. import _dynamics
    return law_step(_dynamics.SGLD(1, h, 1.0, reference_precision=1.0))


def identity_preconditioner(cfg, states, dim):
    """The step's preconditioner in the identity metric: none."""
    return np.ones(dim)
