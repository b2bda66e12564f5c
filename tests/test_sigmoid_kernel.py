"""The logistic full passes' vectorised sigmoid and softplus
(``_sampling/sigmoid_kernel.h``).

Their exp and log1p are polynomials of their own, so their values are
checked against ``scipy.special.expit`` and ``np.logaddexp`` to the last
bits, and against numpy twins that do the same arithmetic operation by
operation: the same bits on every CPU the loader may pick a clone for (no
fused multiply-add in any of them).
"""
import numpy as np
from scipy.special import expit

from skbayes_sg._sampling._estimators import py_sigmoid_block, py_softplus_block

SHIFT = 6755399441055744.0          # 1.5 * 2^52
LOG2E = 1.4426950408889634
LN2_HI, LN2_LO = 0.6931471805598903, 5.497923018708371e-14
FACTORIALS = [479001600.0, 39916800.0, 3628800.0, 362880.0, 40320.0, 5040.0, 720.0,
              120.0, 24.0, 6.0, 2.0, 1.0, 1.0]


def numpy_exp_nonpositive(x):
    """The kernel's exp, one rounding an operation."""
    xc = np.where(x < -708.0, -708.0, x)
    t = xc * LOG2E + SHIFT
    n = t - SHIFT
    r = (xc - n * LN2_HI) - n * LN2_LO
    p = np.full_like(r, 1.0 / FACTORIALS[0])
    for f in FACTORIALS[1:]:
        p = p * r + 1.0 / f
    bits = p.view(np.int64) + ((t.view(np.int64) - 0x4338000000000000) << 52)
    return bits.view(np.float64) * np.where(x < -708.0, 0.0, 1.0)


def numpy_sigmoid(z):
    e = numpy_exp_nonpositive(-np.abs(z))
    return np.where(z >= 0.0, 1.0, e) / (1.0 + e)


def numpy_softplus(z):
    e = numpy_exp_nonpositive(-np.abs(z))
    s = e / (2.0 + e)
    s2 = s * s
    p = np.full_like(s, 1.0 / 33.0)
    for j in range(31, 0, -2):
        p = p * s2 + 1.0 / j
    return np.where(z > 0.0, z, 0.0) + (2.0 * s) * p


def test_the_sigmoid_is_expit_to_the_last_bits():
    rng = np.random.default_rng(0)
    z = np.concatenate([rng.standard_normal(100_000) * 8, np.linspace(-700, 700, 20_001),
                        [0.0, -0.0, 1e-300, -1e-300, 36.0, -36.0, 745.0]])
    got = py_sigmoid_block(z)
    rel = np.abs(got - expit(z)) / expit(z)
    assert rel.max() < 8e-16, rel.max()      # 3.6 ulp; glibc's exp is within 1
    assert got[z >= 745.0][0] == 1.0


def test_the_softplus_is_logaddexp_to_the_last_bits():
    rng = np.random.default_rng(2)
    z = np.concatenate([rng.standard_normal(100_000) * 8, np.linspace(-700, 700, 20_001),
                        [0.0, -0.0, 1e-300, 36.0, -36.0, 745.0, 1e6]])
    exact = np.logaddexp(0.0, z)
    rel = np.abs(py_softplus_block(z) - exact) / exact
    assert rel.max() < 8e-16, rel.max()
    assert py_softplus_block([-800.0])[0] == 0.0     # logaddexp: 3.7e-348 is 0 too


def test_far_below_the_normal_range_the_sigmoid_is_zero():
    got = py_sigmoid_block([-708.5, -745.0, -1e6, -np.inf])
    assert np.all(got == 0.0)                 # expit: subnormals below 2.2e-308
    assert np.isnan(py_sigmoid_block([np.nan])[0])


def test_the_kernel_gives_the_numpy_twins_bits():
    rng = np.random.default_rng(1)
    # the clone the loader picked for this CPU; odd lengths: the vector
    # loops' remainders run too
    for size in (1, 3, 17, 1001):
        z = rng.standard_normal(size) * rng.choice([0.5, 5.0, 50.0, 500.0], size)
        np.testing.assert_array_equal(py_sigmoid_block(z), numpy_sigmoid(z))
        np.testing.assert_array_equal(py_softplus_block(z), numpy_softplus(z))
