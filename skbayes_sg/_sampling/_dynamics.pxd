# cython: language_level=3
"""Dynamics axis (the ``sampler``): one integrator step given a gradient oracle.

A dynamics owns its auxiliary state (momentum, preconditioner accumulator)
and asks the oracle for gradients; it also describes its own Gaussian
transition to index chains (EWSG) through ``ewsg_whitening``.

In a whitened metric (``reference_precision`` kappa > 0) the oracle's
gradient is that of a target close to N(0, I / kappa): the integrators move
the Gaussian part ``kappa z`` exactly and discretise only the remainder
``g - kappa z``, so a Gaussian posterior has no discretisation bias at any
step.  Dynamics whose proposal is reversible can add a Metropolis correction
when the gradients are exact (``metropolis``); their step is then adapted
by dual averaging while ``adapting`` is set (warm-up).
"""
from numpy cimport npy_intp as intp
from numpy.random cimport bitgen_t

from ._oracle cimport GradientOracle
from ._dual_averaging cimport DualAveragingState
from ._laws cimport LawCoefficients

cdef enum EwsgX:
    # choices of EWSG's whitened increment x (EWSG paper, Fig. 1c)
    EWSG_X_AUTO = 0            # the paper's default: r_{k+1} = r_k (theta_{k+1} = theta_k for SGLD)
    EWSG_X_ZERO = 1            # x = 0
    EWSG_X_ONE = 2             # x = (1, ..., 1)
    EWSG_X_MOMENTUM_STOP = 3   # r_{k+1} = 0 (momentum dynamics only)


cdef class Dynamics:
    cdef intp dim
    cdef int ewsg_width             # whitened components per coordinate (1, or 2 for ULD)
    cdef double temperature        # T
    # the step's law coefficients (_laws.pxd): h, kappa (the reference
    # precision of the Gaussian part, 0: none) and each dynamics' own; the
    # step size lives here only (law.h)
    cdef LawCoefficients law
    cdef double[::1] grad          # scratch: g_hat
    cdef double[::1] noise         # scratch: xi
    # Metropolis correction (exact gradients) and dual-averaging step adaptation
    cdef bint metropolis
    cdef bint adapting
    cdef DualAveragingState da     # the step's adaptation (_dual_averaging.pxd)
    cdef long long n_proposed
    cdef double accept_sum
    # the gradient (and potential) at the current state, when the integrator reuses it
    cdef bint cache_valid
    cdef double cache_potential
    cdef double[::1] cache_grad

    cdef void step(self, double* theta, GradientOracle oracle, bitgen_t* rng) noexcept nogil
    cdef void ewsg_whitening(self, const double* theta, double* scale, double* shift,
                             int x_mode) noexcept nogil
    cdef void set_step(self, double h) noexcept nogil
    cdef void record_accept(self, double accept_prob) noexcept nogil


cdef class SGLD(Dynamics):
    # law.c, law.s: the gradient coefficient (h, or (1 - e^{-kappa h}) / kappa), noise scale
    cdef double[::1] proposal
    cdef double[::1] grad2


cdef class PSGLD(Dynamics):
    cdef double decay              # a
    cdef double eps                # lambda
    cdef double n_data             # n: g_bar = g_hat / n
    cdef double[::1] V             # RMSprop accumulator


cdef class MomentumDynamics(Dynamics):
    # a momentum p (or r) that persists between steps, saved with the state
    cdef double[::1] momentum


cdef class SGHMC(MomentumDynamics):
    pass                            # law.gamma: the friction; law.s its noise


cdef class SGHMCLeapfrog(Dynamics):
    cdef int n_leapfrog             # K (0: from the trajectory length)
    cdef double trajectory          # trajectory length in time units (n_leapfrog = 0)
    cdef double jitter              # the length is drawn from [1 - jitter, 1 + jitter] x trajectory
    # law.rot_c, law.rot_s: cos / sin of the reference rotation over one step
    cdef double[::1] momentum       # p (redrawn each outer step)
    cdef double[::1] start          # the trajectory's start (Metropolis)

    cdef void _kick(self, const double* theta, double t) noexcept nogil


cdef class ULD(MomentumDynamics):
    # law.gamma: the friction; law.e_*, f_*, l_*: the exact step of the
    # linear SDE with the remainder frozen (_laws.uld_move); momentum: the
    # velocity v
    cdef double inv_mass            # u
    cdef double[::1] noise2


cdef class BAOAB(MomentumDynamics):
    # law.gamma, law.rot_c / rot_s (the reference rotation over h/2), law.o_decay / o_noise

    cdef void _kick(self, const double* theta, const double* g, double t) noexcept nogil


cdef class SGNHT(MomentumDynamics):
    cdef double diffusion           # A: the injected noise is sqrt(2 A T h) xi
    # law.gamma: the thermostat xi, the adaptive friction
