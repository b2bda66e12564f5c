# cython: language_level=3
"""Python twins of the update coefficients of ``_coefficients.pxd`` (the
same compiled arithmetic), for the error model and the network engine."""


def py_langevin_coefficients(double h, double kappa, double T):
    """``(c_grad, c_noise)`` of SGLD's step (see ``langevin_coefficients``)."""
    cdef double c_grad, c_noise
    langevin_coefficients(h, kappa, T, &c_grad, &c_noise)
    return c_grad, c_noise


def py_friction_noise(double gamma, double T, double h):
    """``sqrt(2 gamma T h)`` (see ``friction_noise``)."""
    return friction_noise(gamma, T, h)


def py_ou_coefficients(double gamma, double h, double T):
    """``(decay, noise)`` of BAOAB's O step (see ``ou_coefficients``)."""
    cdef double decay, noise
    ou_coefficients(gamma, h, T, &decay, &noise)
    return decay, noise
