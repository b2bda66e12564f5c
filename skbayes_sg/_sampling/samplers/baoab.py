"""BAOAB: underdamped Langevin by the splitting of Leimkuhler and Matthews.

Half kick (B), half drift (A), the exact Ornstein-Uhlenbeck step of the
momentum (O: ``p <- e^{-gamma h} p + sqrt(T (1 - e^{-2 gamma h})) xi``),
half drift, half kick; second order, one gradient per step.  In a whitened
metric the drift and the Gaussian part of the kick are a rotation.

Kernels: ``_dynamics.BAOAB`` (Cython), its lazy step in ``_lazy.pyx``, the
network's ``neural_network._net_dynamics.BAOAB``.
"""
import numpy as np

from .._definitions import DynamicsSpec
from ._common import (Linear, law_step, prepare_underdamped, restore, start_momentum,
                      unit_momentum_variance)

#: its place in the lists of the docs and error messages
LISTED = 6
DEFINITION = DynamicsSpec(
    "baoab", "underdamped Langevin by the BAOAB splitting of Leimkuhler and "
    "Matthews (second order, one gradient per step; ``friction``)", ("friction",),
    has_momentum=True, network_learning_rate=0.01, lazy=True)

#: a second-order splitting: its bias on the remainder allows 0.5
MAX_STEP = 0.5
FRICTION_GRID = None
METROPOLIS = None
IDENTITY_STEP_CHECK = False
MIXING_HINT = ""
prepare = prepare_underdamped
momentum_variance_scale = unit_momentum_variance


def build(dim, cfg, state, generator):
    from .. import _dynamics
    p0 = start_momentum(dim, cfg, state, generator)
    dyn = _dynamics.BAOAB(dim, cfg["step_size"], cfg["temperature"], friction=cfg["friction"],
                          p0=p0, reference_precision=cfg["reference_precision"])
    return restore(dyn, state)


def linear_step(h, friction):
    """The kernel's own law on the unit Gaussian (T = kappa = 1), from the
    state right after the closing kick.  The estimate at the new point
    enters the momentum once per step: the closing half kick and the next
    opening one, with nothing between them (-h eps)."""
    from .. import _dynamics
    step = law_step(_dynamics.BAOAB(1, h, 1.0, friction=friction, reference_precision=1.0))
    return Linear(step.A, np.array([[0.0], [-h]]), step.B_xi)
