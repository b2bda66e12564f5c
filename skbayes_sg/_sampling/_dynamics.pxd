# cython: language_level=3
"""Dynamics axis (the ``sampler``): one integrator step given a gradient oracle.

A dynamics owns its auxiliary state (momentum, preconditioner accumulator)
and asks the oracle for gradients; it also describes its own Gaussian
transition to index chains (EWSG) through ``ewsg_whitening``.
"""
from numpy cimport npy_intp as intp
from numpy.random cimport bitgen_t

from ._oracle cimport GradientOracle

cdef enum EwsgX:
    # choices of EWSG's whitened increment x (EWSG paper, Fig. 1c)
    EWSG_X_AUTO = 0            # the paper's default: r_{k+1} = r_k (theta_{k+1} = theta_k for SGLD)
    EWSG_X_ZERO = 1            # x = 0
    EWSG_X_ONE = 2             # x = (1, ..., 1)
    EWSG_X_MOMENTUM_STOP = 3   # r_{k+1} = 0 (momentum dynamics only)


cdef class Dynamics:
    cdef intp dim
    cdef int ewsg_width             # whitened components per coordinate (1, or 2 for ULD)
    cdef double step_size          # h
    cdef double temperature        # T
    cdef double[::1] grad          # scratch: g_hat
    cdef double[::1] noise         # scratch: xi

    cdef void step(self, double* theta, GradientOracle oracle, bitgen_t* rng) noexcept nogil
    cdef void ewsg_whitening(self, double* scale, double* shift, int x_mode) noexcept nogil


cdef class SGLD(Dynamics):
    pass


cdef class PSGLD(Dynamics):
    cdef double decay              # a
    cdef double eps                # lambda
    cdef double n_data             # n: g_bar = g_hat / n
    cdef double[::1] V             # RMSprop accumulator


cdef class SGHMC(Dynamics):
    cdef double friction           # gamma
    cdef double[::1] momentum      # r


cdef class SGHMCLeapfrog(Dynamics):
    cdef int n_leapfrog             # K
    cdef double[::1] momentum       # p (redrawn each outer step)


cdef class ULD(Dynamics):
    cdef double friction            # gamma
    cdef double inv_mass            # u
    cdef double[::1] velocity       # v
    # exact OU step with the gradient frozen: means and noise Cholesky factors
    cdef double a                   # exp(-gamma h)
    cdef double cv, cx              # gradient coefficients in v and x
    cdef double l_vv, l_xv, l_xx    # Cholesky of the (v, x) noise covariance
    cdef double[::1] noise2
