"""SGNHT: the stochastic gradient Nose-Hoover thermostat (Ding et al., 2014).

Underdamped Langevin whose friction ``xi`` is a thermostat variable,
``xi' = xi + h (p^T p / d - T)``, so that it adapts until the kinetic
temperature is T and absorbs unknown gradient noise; ``friction`` is its
diffusion A (where the thermostat starts).

Kernels: ``_dynamics.SGNHT`` (Cython), the network's
``neural_network._net_dynamics.SGNHT``; no lazy step (the thermostat reads
every coordinate each step).
"""
from .._definitions import DynamicsSpec
from ._common import (FRICTIONS, law_step, prepare_underdamped, restore, start_momentum,
                      unit_momentum_variance)

#: its place in the lists of the docs and error messages
LISTED = 7
DEFINITION = DynamicsSpec(
    "sgnht", "the stochastic gradient Nose-Hoover thermostat of Ding et al. (2014): "
    "underdamped Langevin whose friction is a thermostat variable that adapts "
    "until the kinetic temperature is T, absorbing unknown gradient noise "
    "(``friction`` is its diffusion A)", ("friction",), has_momentum=True,
    network_learning_rate=0.01)

MAX_STEP = 0.5
FRICTION_GRID = FRICTIONS
METROPOLIS = None
IDENTITY_STEP_CHECK = False
MIXING_HINT = ""
#: the thermostat starts at the friction the identity metric's rule sets for
#: SGHMC (critical damping of the stiffest direction)
prepare = prepare_underdamped
momentum_variance_scale = unit_momentum_variance


def build(dim, cfg, state, generator):
    from .. import _dynamics
    p0 = start_momentum(dim, cfg, state, generator)
    dyn = _dynamics.SGNHT(dim, cfg["step_size"], cfg["temperature"], diffusion=cfg["friction"],
                          p0=p0, reference_precision=cfg["reference_precision"])
    return restore(dyn, state)


def linear_step(h, friction):
    """The kernel's own law on the unit Gaussian (T = 1) with the thermostat
    at its start, xi = A (the friction): Euler SGHMC with the momentum
    updated first.  With gradient noise the thermostat settles above A and
    takes back part of the noise's inflation, so the model is conservative
    for it."""
    from .. import _dynamics
    return law_step(_dynamics.SGNHT(1, h, 1.0, diffusion=friction, reference_precision=1.0))
