# cython: language_level=3
"""Gradient-estimator axis: unbiased estimates of the data part of grad U.

An estimator produces *candidates*: a minibatch and the estimate of
``sum_i grad U_i(theta)`` it gives.  The chain oracle asks for one candidate
per gradient (or several, when an index chain such as EWSG chooses among
them), then commits the chosen one (estimators with tables update them
there).  Dynamics and models are untouched by this axis.
"""
from numpy cimport npy_intp as intp
from numpy.random cimport bitgen_t

from ._dataset cimport RowStore, RowData, row_dot, row_axpy, row_prefetch, PREFETCH_ROWS
from ._models cimport glm_residual


ctypedef struct Candidate:
    intp* idx          # minibatch indices (capacity: estimator.max_batch)
    intp size          # number of indices used
    double* resid      # size x K residuals phi'(z_j, y_j) at theta
    double* grad       # K*dext: estimate of sum_i grad U_i(theta)


ctypedef struct ProblemStore:
    const RowStore* X
    const double* y    # targets, y_stride values per datum
    intp y_stride      # K for a multi-output Gaussian, else 1
    int model          # ModelKind
    int K              # outputs
    intp n             # rows
    intp dim           # K * dext
    double inv_noise_var


cdef inline void datum_residual(const ProblemStore* P, intp i, const double* theta,
                                double* z, double* r) noexcept nogil:
    """r = phi'(theta @ (x_i, 1), y_i) (K values); z is K scratch."""
    row_dot(P.X, i, theta, P.K, z)
    glm_residual(P.model, z, P.K, P.y + i * P.y_stride, P.inv_noise_var, r)


cdef class Problem:
    """Data + model + targets: what every estimator evaluates."""
    cdef ProblemStore store
    cdef RowData data
    cdef object _keep


cdef class GradientEstimator:
    cdef Problem problem
    cdef const ProblemStore* P
    cdef bitgen_t* rng
    cdef intp max_batch          # capacity a candidate needs
    cdef long long n_evals
    cdef double[::1] zbuf        # K scratch
    cdef double[::1] rbuf        # K scratch

    cdef void begin_step(self, const double* theta) noexcept nogil
    cdef void candidate(self, const double* theta, Candidate* c) noexcept nogil
    cdef void evaluate(self, const double* theta, Candidate* c) noexcept nogil
    cdef void commit(self, const double* theta, Candidate* c) noexcept nogil


cdef class FullGradient(GradientEstimator):
    pass


cdef class UniformSubsampling(GradientEstimator):
    cdef intp batch_size
    cdef bint replace
    cdef intp[::1] perm          # scratch for draws without replacement
