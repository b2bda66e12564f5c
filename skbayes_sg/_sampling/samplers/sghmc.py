"""SGHMC: underdamped Langevin dynamics by Euler-Maruyama (Chen et al., 2014).

``theta' = theta + h p``, ``p' = p - h grad U - h gamma p + sqrt(2 gamma T h)
xi``; the friction gamma is ``friction``.  Its Euler discretisation is
biased on a Gaussian (``var0 != 1``), which the error model counts.

Kernels: ``_dynamics.SGHMC`` (Cython), its lazy step in ``_lazy.pyx``, the
network's ``neural_network._net_dynamics.SGHMC``.
"""

from .._definitions import DynamicsSpec
from ._common import (FRICTIONS, law_step, prepare_underdamped, restore, start_momentum,
                      unit_momentum_variance)

#: its place in the lists of the docs and error messages
LISTED = 3
DEFINITION = DynamicsSpec(
    "sghmc", "SG Hamiltonian Monte Carlo as underdamped Langevin integrated by "
    "Euler-Maruyama (``friction``)", ("friction",), has_momentum=True,
    network_learning_rate=0.01, lazy=True)

MAX_STEP = 0.5
#: the error model searches the friction too: Euler's bias depends on it
FRICTION_GRID = FRICTIONS
METROPOLIS = None
IDENTITY_STEP_CHECK = False
MIXING_HINT = ""
prepare = prepare_underdamped
momentum_variance_scale = unit_momentum_variance


def build(dim, cfg, state, generator):
    from .. import _dynamics
    r0 = start_momentum(dim, cfg, state, generator)
    dyn = _dynamics.SGHMC(dim, cfg["step_size"], cfg["temperature"], friction=cfg["friction"],
                          r0=r0, reference_precision=cfg["reference_precision"])
    return restore(dyn, state)


def linear_step(h, friction):
    """The kernel's own law on the unit Gaussian (T = 1)."""
    from .. import _dynamics
    return law_step(_dynamics.SGHMC(1, h, 1.0, friction=friction, reference_precision=1.0))
