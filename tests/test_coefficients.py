"""The update coefficients are written once (``_sampling/_coefficients.pxd``):
the kernels, their Python twins (which the error model and the network
engine call) and the closed forms agree."""
import math
from pathlib import Path

import numpy as np
import pytest

from skbayes_sg._sampling import _dynamics
from skbayes_sg._sampling._coefficients import (py_friction_noise, py_langevin_coefficients,
                                                py_ou_coefficients)
from skbayes_sg._sampling._error_model import linear_step

STEPS = (1e-9, 1e-4, 0.05, 0.3, 1.0, 2.5)


@pytest.mark.parametrize("h", STEPS)
@pytest.mark.parametrize("kappa", [0.0, 1.0, 2.7])
def test_the_kernel_takes_the_twins_coefficients(h, kappa):
    T = 0.8
    sgld = _dynamics.SGLD(3, h, T, kappa)
    assert sgld.coefficients == py_langevin_coefficients(h, kappa, T)
    baoab = _dynamics.BAOAB(3, h, T, friction=1.3, reference_precision=kappa)
    assert baoab.o_step == py_ou_coefficients(1.3, h, T)


@pytest.mark.parametrize("h", STEPS)
def test_the_coefficients_are_the_closed_forms(h):
    T, kappa, gamma = 0.8, 1.7, 1.3
    c, s = py_langevin_coefficients(h, kappa, T)
    assert c == pytest.approx((1 - math.exp(-kappa * h)) / kappa, rel=1e-12)
    assert s == pytest.approx(math.sqrt(T * (1 - math.exp(-2 * kappa * h)) / kappa), rel=1e-9)
    assert py_langevin_coefficients(h, 0.0, T) == (h, math.sqrt(2 * h * T))
    d, s = py_ou_coefficients(gamma, h, T)
    assert d == math.exp(-gamma * h)
    assert s == pytest.approx(math.sqrt(T * (1 - math.exp(-2 * gamma * h))), rel=1e-9)
    assert py_friction_noise(gamma, T, h) == math.sqrt(2 * gamma * T * h)


def test_the_error_model_reads_the_kernels_coefficients():
    h = 0.3
    step = linear_step("sgld", h)
    c, s = py_langevin_coefficients(h, 1.0, 1.0)
    assert step.A[0, 0] == 1.0 - c and step.B_eps[0, 0] == -c and step.B_xi[0, 0] == s
    d, s = py_ou_coefficients(1.0, h, 1.0)
    baoab = linear_step("baoab", h, 1.0)
    # O between two half rotations: the noise enters through s
    R = np.array([[math.cos(h / 2), math.sin(h / 2)], [-math.sin(h / 2), math.cos(h / 2)]])
    np.testing.assert_allclose(baoab.B_xi[:, 0], R @ [0.0, s], rtol=1e-15)


def test_the_network_dynamics_call_the_twins():
    """The torch engine's coefficient code calls the twins (no formula of its own).

    The file is read as text, not imported: it imports torch, and this test
    runs without it."""
    import skbayes_sg.neural_network as network
    source = (Path(network.__file__).parent / "_net_dynamics.py").read_text()
    assert "py_langevin_coefficients" in source    # the file is the one that calls them
    for formula in ("math.sqrt(2.0", "math.expm1", "math.exp(-"):
        assert formula not in source, formula
