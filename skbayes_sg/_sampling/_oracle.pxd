# cython: language_level=3
"""The one interface the dynamics see: a stochastic gradient oracle.

A dynamics asks the oracle for ``g_hat ~ grad U(theta)`` (prior included)
as many times per step as its integrator needs; which estimator, minibatch
rule or index chain (EWSG) produces it is invisible to the dynamics.  When
the gradients are exact the oracle can also return the potential itself
(a Metropolis correction needs it).
"""

cdef class GradientOracle:
    cdef long long n_evals   # per-datum gradient evaluations spent so far
    cdef void gradient(self, const double* theta, double* grad) noexcept nogil
    cdef double gradient_potential(self, const double* theta, double* grad) noexcept nogil
