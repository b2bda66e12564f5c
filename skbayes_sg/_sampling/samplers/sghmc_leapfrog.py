"""SG-HMC with leapfrog: Hamiltonian Monte Carlo with stochastic gradients.

The momentum is redrawn every step and ``n_leapfrog`` leapfrog steps
integrate a trajectory; in a whitened metric the Gaussian part is rotated
exactly (a split leapfrog: kicks by the non-Gaussian remainder only), and
with exact gradients a Metropolis correction makes it HMC.  With
``n_leapfrog="auto"`` in a whitened metric the number of steps is drawn
per trajectory, so that its length is a jittered quarter period of the
reference Gaussian (the set-up may lengthen it to a diagonal metric's
slowest direction).

Kernels: ``_dynamics.SGHMCLeapfrog`` (Cython), the network's
``neural_network._net_dynamics.SGHMCLeapfrog``; no lazy step.
"""
import numpy as np

from .._definitions import DynamicsSpec
from ._common import (Linear, MetropolisRule, dynamics_frame, restore,
                      unit_momentum_variance)

#: its place in the lists of the docs and error messages
LISTED = 4
DEFINITION = DynamicsSpec(
    "sghmc-leapfrog", "SG-HMC with leapfrog (momentum redrawn every step, "
    "``n_leapfrog`` steps; in a whitened metric the Gaussian part is rotated "
    "exactly)", ("n_leapfrog",), metropolis=True, network_learning_rate=0.01,
    second_order=True)

MAX_STEP = 0.5
FRICTION_GRID = None
#: HMC: starts at 0.5, at most pi/2 (a quarter period in one step);
#: acceptance 0.75; about 1.6 iterations a draw
METROPOLIS = MetropolisRule(start_step=0.5, max_step=np.pi / 2, target_accept=0.75,
                            iterations_per_draw=1.6, trajectory=True)
IDENTITY_STEP_CHECK = False
MIXING_HINT = ""
#: trajectory length of the split leapfrog in whitened units: a quarter
#: period of the reference Gaussian carries a draw to an independent one
TRAJECTORY = np.pi / 2
momentum_variance_scale = unit_momentum_variance


def prepare(ctx, theta0, step_size, friction, noise, temperature):
    frame = dynamics_frame(ctx, temperature)
    K = ctx.settings.n_leapfrog
    if K == "auto":
        # a whitened metric draws the number of steps per trajectory so that
        # its length is a jittered quarter period of the reference Gaussian;
        # the identity metric has no scale to set it from
        K = 0 if frame["reference_precision"] > 0 else 10
    K = int(K)
    if step_size == "auto":
        # 0.1 of leapfrog's stability limit 2/sqrt(L), and the gradient noise
        # gathered by p over K kicks (K h^2 v) at most 0.1 of its variance T
        L = ctx.curvature(theta0)
        v = noise.curvature()
        Kn = max(K, 1)
        h = min(0.2 / np.sqrt(L), np.sqrt(0.1 * temperature / (Kn * v)) if v > 0 else np.inf)
    else:
        h = float(step_size)
    return {**frame, "step_size": h, "n_leapfrog": K}


def build(dim, cfg, state, generator):
    from .. import _dynamics
    kappa = cfg["reference_precision"]
    # a diagonal metric's set-up may lengthen it to its slowest direction's
    trajectory = cfg.get("trajectory",
                         np.pi / (2.0 * np.sqrt(kappa)) if kappa > 0 else 1.0)
    dyn = _dynamics.SGHMCLeapfrog(dim, cfg["step_size"], cfg["temperature"],
                                  n_leapfrog=cfg["n_leapfrog"], reference_precision=kappa,
                                  metropolis=cfg.get("metropolis", False),
                                  trajectory=trajectory, jitter=cfg.get("jitter", 0.25))
    return restore(dyn, state)


def linear_step(h, friction):
    """A fresh momentum, then K leapfrog steps on the unit Gaussian (kappa =
    T = 1), read off the kernel's own moves: each kick by its estimate's noise
    alone (the remainder), each drift the exact rotation.  z after K steps is
    linear in (z0, p0, eps_0 .. eps_K): the moves act on those coefficients."""
    from .. import _dynamics
    K = max(1, int(np.ceil(TRAJECTORY / h)))
    dyn = _dynamics.SGHMCLeapfrog(1, h, 1.0, n_leapfrog=K, reference_precision=1.0)
    z = np.zeros(K + 3)                         # coefficients of (z0, p0, eps_0 .. eps_K)
    p = np.zeros(K + 3)
    z[0] = p[1] = 1.0
    unit = np.eye(K + 3)
    for k in range(K):
        p = _dynamics.law_kick(p, unit[2 + k], h / 2)
        z, p = _dynamics.law_drift(dyn, z, p, h)
        p = _dynamics.law_kick(p, unit[3 + k], h / 2)
    return Linear(np.array([[z[0]]]), z[None, 2:], np.array([[z[1]]]), gradients=K + 1.0)
