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

from ._dataset cimport RowStore, RowData, row_dot, row_axpy, row_prefetch, SKB_PREFETCH
from ._models cimport LOGISTIC, MAX_MODEL_PARAMS, glm_loss, glm_residual, glm_residual1


cdef extern from "sigmoid_kernel.h" nogil:
    void skb_sigmoid_block(const double* z, long long n, double* out)
    void skb_softplus_block(const double* z, long long n, double* out)


#: rows whose residuals a logistic full pass computes together (their
#: predictors first, then one vectorised sigmoid, then the scatter): 2 KB
#: an array a chain
cdef enum:
    SIGMOID_BLOCK = 256


ctypedef struct Candidate:
    intp* idx          # minibatch indices (capacity: estimator.max_batch)
    intp size          # number of indices used
    double* resid      # size x K residuals phi'(z_j, y_j) at theta
    double* grad       # K*dext: estimate of sum_i grad U_i(theta)
    double potential   # sum_i U_i(theta): filled by exact estimators when asked


ctypedef struct ProblemStore:
    const RowStore* X
    const double* y    # targets, y_stride values per datum
    intp y_stride      # K for a multi-output Gaussian, else 1
    int model          # ModelKind
    int K              # outputs
    intp n             # rows
    intp dim           # K * dext
    double param[MAX_MODEL_PARAMS]   # the model's kernel parameters (ModelSpec.kernel_params)
    const double* weight  # per-datum weights w_i (U_i scaled by w_i); NULL: all 1


cdef inline void datum_residual(const ProblemStore* P, intp i, const double* theta,
                                double* z, double* r) noexcept nogil:
    """r = w_i phi'(theta @ (x_i, 1), y_i) (K values); z is K scratch.

    The weight is folded into the residual, so every estimator built on it
    estimates the gradient of the weighted potential ``sum_i w_i U_i``."""
    cdef int k
    row_dot(P.X, i, theta, P.K, z)
    glm_residual(P.model, z, P.K, P.y + i * P.y_stride, P.param, r)
    if P.weight != NULL:
        for k in range(P.K):
            r[k] *= P.weight[i]


cdef inline double datum_weight(const ProblemStore* P, intp i) noexcept nogil:
    return 1.0 if P.weight == NULL else P.weight[i]


cdef inline double datum_residual1(const ProblemStore* P, intp i, const double* theta,
                                   double* z) noexcept nogil:
    """:func:`datum_residual` of a one-output problem (``P.K == 1``), returned by
    value; z receives the linear predictor.  A full pass calls it per row: a
    residual that goes through memory costs a store-to-load round trip a row."""
    row_dot(P.X, i, theta, 1, z)
    return datum_residual_at(P, i, z[0])


cdef inline double datum_residual_at(const ProblemStore* P, intp i, double z) noexcept nogil:
    """Datum i's weighted residual ``w_i phi'(z, y_i)`` at the linear
    predictor ``z`` (one output): what a pass that computed ``z`` itself
    (several chains at once, ``_group.pyx``) scatters."""
    cdef double r = glm_residual1(P.model, z, P.y[i * P.y_stride], P.param)
    if P.weight != NULL:
        r *= P.weight[i]
    return r


cdef inline double datum_potential(const ProblemStore* P, intp i, double z) noexcept nogil:
    """Datum i's weighted potential ``w_i U_i`` at the linear predictor ``z``
    (one output)."""
    return datum_weight(P, i) * glm_loss(P.model, &z, 1, P.y + i * P.y_stride, P.param)


cdef inline void logistic_block_residuals(const ProblemStore* P, intp i0, intp rows, int m,
                                          const double* z, double* r) noexcept nogil:
    """The logistic model's weighted residuals of rows ``i0 .. i0 + rows - 1``
    at their predictors, for m chains side by side (``z[k * m + c]``: row
    ``i0 + k``, chain c) into ``r`` (same layout): the sigmoids in one
    vectorised loop (``sigmoid_kernel.h``; glibc's scalar exp took a fifth of
    a default fit at 10^4 parameters).  The logistic full passes alone
    (:class:`FullGradient`) and in a group (``_group.pyx``) call it, so a
    chain's gradients are the same bits in both.  The other models keep
    :func:`datum_residual1`: their residual costs a multiply, and a row's
    residual kept in a register was 15-25 % faster than blocks."""
    cdef intp k
    cdef int c
    cdef double y
    skb_sigmoid_block(z, rows * m, r)
    for k in range(rows):
        y = P.y[(i0 + k) * P.y_stride]
        for c in range(m):
            r[k * m + c] -= y
    if P.weight != NULL:
        for k in range(rows):
            for c in range(m):
                r[k * m + c] *= P.weight[i0 + k]


cdef inline void logistic_block_potentials(const ProblemStore* P, intp i0, intp rows, int m,
                                           const double* z, double* u) noexcept nogil:
    """The logistic model's weighted potentials ``w_i (log(1 + e^z) - y_i z)``
    of the rows and chains of :func:`logistic_block_residuals` (same layout),
    the softplus in one vectorised loop: a Metropolis trajectory's last pass."""
    cdef intp k
    cdef int c
    cdef double y, w
    skb_softplus_block(z, rows * m, u)
    for k in range(rows):
        y = P.y[(i0 + k) * P.y_stride]
        w = datum_weight(P, i0 + k)
        for c in range(m):
            u[k * m + c] = w * (u[k * m + c] - y * z[k * m + c])


cdef class Problem:
    """Data + model + targets: what every estimator evaluates."""
    cdef ProblemStore store
    cdef RowData data
    cdef object _keep
    cdef object _weight   # keeps the weights ``store.weight`` points into


cdef class GradientEstimator:
    cdef Problem problem
    cdef const ProblemStore* P
    cdef bitgen_t* rng
    cdef intp max_batch          # capacity a candidate needs
    cdef long long n_evals
    cdef double[::1] zbuf        # K scratch
    cdef double[::1] rbuf        # K scratch
    cdef bint with_potential     # also compute sum_i U_i (exact estimators; Metropolis)

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


cdef enum Access:
    ACCESS_RANDOM = 0      # uniform with replacement
    ACCESS_RESHUFFLE = 1   # a fresh permutation per pass, consecutive blocks
    ACCESS_CYCLIC = 2      # blocks 0..n-1 in order
    ACCESS_WEIGHTED = 3    # with replacement from fixed weights p (alias method)

cdef enum Control:
    CONTROL_NONE = 0       # a_j = 0, A = 0
    CONTROL_FIXED = 1      # a_j = r_j(theta_hat) (a table), A = sum grad U_j(theta_hat)
    CONTROL_SNAPSHOT = 2   # a_j = r_j(theta_tilde) recomputed; theta_tilde, A refreshed every period
    CONTROL_TABLE = 3      # SAGA: a_j = residual at j's last visit, updated on commit
    CONTROL_TAYLOR = 4     # a_j = r_j(theta_hat) + c_j (z_j - z_j(theta_hat)), A + H (theta - theta_hat)


cdef class GLMEstimator(GradientEstimator):
    cdef int access
    cdef int control
    cdef intp batch_size            # b (fixed size, or the pilot size when adaptive)
    cdef intp period                # refresh period in steps (SVRG, TMU); 0 = never
    cdef long long n_steps          # steps begun (for the refresh schedule)
    cdef long long n_refreshes
    cdef double[::1] A              # dim: sum_j a_j (x) x_j
    cdef double[::1] table          # n*K control residuals (FIXED, TABLE)
    cdef double[::1] snapshot       # dim: theta_tilde (SNAPSHOT)
    cdef double[::1] zbuf2          # K scratch
    cdef double[::1] abuf           # K scratch
    # second-order control (TAYLOR, one output): each row's curvature and
    # linear predictor at theta_hat, and the data Hessian there (dim x dim)
    cdef double[::1] curvature
    cdef double[::1] predictor
    cdef double[:, ::1] hessian
    cdef double[::1] offset         # dim scratch: theta - theta_hat
    # index selection
    cdef intp[::1] order            # permutation (RESHUFFLE)
    cdef intp cursor                # next position in the pass (RESHUFFLE, CYCLIC)
    cdef double[::1] alias_prob     # alias method (WEIGHTED)
    cdef intp[::1] alias_index
    cdef double[::1] inv_np         # 1 / (n p_j) (WEIGHTED): importance weights
    # adaptive subsample size: b_k = clip(ceil(coef ||theta - centre||^2), 1, n)
    cdef bint adaptive
    cdef double adaptive_coef
    cdef double[::1] centre
    cdef intp[::1] size_log
    cdef intp log_pos

    cdef intp _draw(self, intp* idx, intp b) noexcept nogil
    cdef void _refresh(self, const double* theta) noexcept nogil
