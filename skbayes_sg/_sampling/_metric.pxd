# cython: language_level=3
"""The metric axis: the coordinates the dynamics move in.

The dynamics see ``z``; the model sees ``theta = center + L z``.  With the
Laplace metric ``L L^T = T H(mode)^-1`` the posterior is close to N(0, I) in
``z`` whatever the conditioning of ``theta``: the step is then set by the
posterior's own scale, not by its stiffest direction.
"""
from numpy cimport npy_intp as intp

cdef enum MetricKind:
    METRIC_IDENTITY = 0    # theta = z
    METRIC_DIAGONAL = 1    # theta = center + D z
    METRIC_DENSE = 2       # theta = center + L z, L upper-triangular
    METRIC_LOWRANK = 3     # theta = center + D (I + U^T (S - I) U) z, U (k, dim) orthonormal rows


cdef class Metric:
    cdef intp dim
    cdef int kind
    cdef double scale                 # gradient / potential factor (1/T whitened, 1 identity)
    cdef double reference_precision   # kappa: curvature of the reference Gaussian in z
    cdef double[::1] center
    cdef double[::1] diag             # DIAGONAL: D
    cdef double[:, ::1] factor        # DENSE: L (row-major, upper-triangular)
    cdef double[:, ::1] basis         # LOWRANK: U, k orthonormal directions (rows)
    cdef double[::1] basis_shift      # LOWRANK: s - 1, the directions' scales less one
    cdef double[::1] work             # LOWRANK: k values of scratch (one chain a metric)
    cdef int rank                     # LOWRANK: k

    cdef void _lowrank_apply(self, double* v) noexcept nogil

    cdef void to_theta(self, const double* z, double* theta) noexcept nogil
    cdef void grad_to_z(self, double* g) noexcept nogil
