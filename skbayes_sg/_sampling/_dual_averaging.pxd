# cython: language_level=3
"""Dual averaging of ``log h`` toward a target acceptance rate (Hoffman and
Gelman, 2014, with Stan's constants), written once.

``cdef inline`` so that the linear kernels adapt their step inside a
``nogil`` loop (``_dynamics.pyx``, ``Dynamics.record_accept``);
``_dual_averaging.pyx`` wraps the same functions as the Python class
:class:`DualAveraging`, which the network's Metropolis step calls
(``neural_network/_net_metropolis.py``).
"""
from libc.math cimport exp, log, sqrt


cdef extern from *:
    """
    /* shrinkage gamma, offset t0, decay kappa; the updates after which the
       average is trusted as the final step */
    #define SKB_DA_GAMMA 0.05
    #define SKB_DA_T0 10.0
    #define SKB_DA_KAPPA 0.75
    #define SKB_DA_SETTLED 20
    """
    double DA_GAMMA "SKB_DA_GAMMA"
    double DA_T0 "SKB_DA_T0"
    double DA_KAPPA "SKB_DA_KAPPA"
    int DA_SETTLED "SKB_DA_SETTLED"


cdef struct DualAveragingState:
    double target_accept    # the acceptance rate adapted toward
    double max_step         # the largest step returned (inf: none)
    double mu               # log h is shrunk toward this (log 10 h0)
    double log_h            # the last iterate
    double log_hbar         # the average
    double hbar             # the averaged error of the acceptance
    long long t             # updates made


cdef inline void dual_averaging_start(DualAveragingState* s, double h, double target_accept,
                                      double max_step) noexcept nogil:
    """Start at step ``h``."""
    s.target_accept = target_accept
    s.max_step = max_step
    s.t = 0
    s.hbar = 0.0
    s.mu = log(10.0 * h)
    s.log_h = log(h)
    s.log_hbar = 0.0


cdef inline double dual_averaging_update(DualAveragingState* s,
                                         double accept_prob) noexcept nogil:
    """One update with this iteration's acceptance probability; returns the
    next step."""
    cdef double eta, w, log_h
    s.t += 1
    eta = 1.0 / (s.t + DA_T0)
    s.hbar = (1.0 - eta) * s.hbar + eta * (s.target_accept - accept_prob)
    log_h = s.mu - sqrt(<double> s.t) / DA_GAMMA * s.hbar
    if log_h > log(s.max_step):
        log_h = log(s.max_step)
    w = (<double> s.t) ** (-DA_KAPPA)
    s.log_hbar = w * log_h + (1.0 - w) * s.log_hbar
    s.log_h = log_h
    return exp(log_h)


cdef inline double dual_averaging_final(const DualAveragingState* s) noexcept nogil:
    """The step kept after warm-up: the average, or, after fewer than
    ``DA_SETTLED`` updates (a warm-up cut short by its budget), the smaller
    of the average and the last iterate -- the average still leans on the
    first iterates, which swing up to ``10 h0``, and a step too large
    rejects every proposal while one too small still moves."""
    cdef double log_h = s.log_hbar
    if s.t < DA_SETTLED and s.log_h < log_h:
        log_h = s.log_h
    return min(exp(log_h), s.max_step)
