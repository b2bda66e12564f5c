# cython: language_level=3
"""Each dynamics' update coefficients, written once.

``cdef inline`` so that the kernels may recompute them inside a ``nogil``
loop (dual averaging adapts the step there); ``_coefficients.pyx`` has a
``def`` twin of each, which the network engine calls.  The dynamics'
``set_step`` puts them in its ``LawCoefficients`` (``_laws.pxd``), which
its moves (``laws.h.tp``) read in every kernel; the torch steps
(``neural_network/_net_dynamics.py``) take theirs from the twins.  ULD's
exact Ornstein-Uhlenbeck step has its own (``_dynamics.uld_coefficients``,
shared the same way).
"""
from libc.math cimport exp, expm1, sqrt


cdef inline void langevin_coefficients(double h, double kappa, double T, double* c_grad,
                                       double* c_noise) noexcept nogil:
    """SGLD's step ``theta' = theta - c_grad g + c_noise xi``: with a
    reference Gaussian of precision ``kappa > 0`` its part moved exactly
    (``c_grad = (1 - e^{-kappa h}) / kappa``, ``c_noise = sqrt(T (1 -
    e^{-2 kappa h}) / kappa)``), else Euler-Maruyama (``h``, ``sqrt(2 h T)``)."""
    if kappa > 0:
        c_grad[0] = -expm1(-kappa * h) / kappa
        c_noise[0] = sqrt(-T * expm1(-2.0 * kappa * h) / kappa)
    else:
        c_grad[0] = h
        c_noise[0] = sqrt(2.0 * h * T)


cdef inline double friction_noise(double gamma, double T, double h) noexcept nogil:
    """``sqrt(2 gamma T h)``: the noise an Euler-Maruyama step puts into a
    momentum under friction ``gamma`` (SGHMC; SGNHT with its diffusion A)."""
    return sqrt(2.0 * gamma * T * h)


cdef inline void ou_coefficients(double gamma, double h, double T, double* decay,
                                 double* noise) noexcept nogil:
    """BAOAB's O step, the exact Ornstein-Uhlenbeck flow of a momentum over
    ``h``: ``p <- decay p + noise xi``, ``decay = e^{-gamma h}``,
    ``noise = sqrt(T (1 - e^{-2 gamma h}))``."""
    decay[0] = exp(-gamma * h)
    noise[0] = sqrt(-T * expm1(-2.0 * gamma * h))
