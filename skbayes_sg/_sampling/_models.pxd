# cython: language_level=3
"""Model axis of the engine: generalised linear models.

Every model has per-datum potential ``U_i(theta) = phi(z_i, y_i)`` with
``z_i = theta @ (x_i, 1)`` (K outputs), so ``grad U_i = phi'(z_i, y_i) (x) x_i``:
a K-vector of *residuals* times the row.  Only the residual is model
specific; it is an inline function picked by an integer constant, so the
per-datum call costs no virtual dispatch.

A model's own parameters (the Gaussian's noise variance, the negative
binomial's shape) reach the kernel as a short vector ``param``, in the
form the kernel reads (``ModelSpec.kernel_params`` of ``_glm.py``): adding
a model with parameters changes no signature.
"""
from libc.math cimport exp, log, log1p, fabs

cdef enum ModelKind:
    LOGISTIC = 0      # y in {0, 1}, K = 1
    GAUSSIAN = 1      # y real (K targets per datum), noise variance sigma^2
    SOFTMAX = 2       # y in {0..K-1} stored as double, K outputs
    POISSON = 3       # counts y >= 0, log link, K = 1
    NEGATIVE_BINOMIAL = 4   # counts y >= 0, log link, shape r; K = 1

# the length of the kernel's model-parameter vector (ProblemStore.param)
cdef enum:
    MAX_MODEL_PARAMS = 4

# Poisson: beyond this z the rate exp(z) continues linearly (C^1), so the
# potential stays finite where exp would overflow; _glm.POISSON_Z_MAX
cdef enum:
    POISSON_Z_MAX = 700


cdef inline double sigmoid(double z) noexcept nogil:
    # 1 / (1 + e^-z) for z >= 0, e^z / (1 + e^z) below, with one exp and a
    # select instead of a branch: z's sign is a coin flip on a fitted model,
    # and a mispredicted branch cost as much as the exp
    cdef double e = exp(-fabs(z))
    return (1.0 if z >= 0 else e) / (1.0 + e)


cdef inline double softplus(double v) noexcept nogil:
    """log(1 + e^v) without overflow."""
    return (v if v > 0 else 0.0) + log1p(exp(-fabs(v)))


cdef inline double glm_residual1(int model, double z, double y,
                                 const double* param) noexcept nogil:
    """d phi / d z at (z, y) for a one-output model (every model but softmax;
    the Gaussian with one target): by value, so a caller's loop keeps z and
    the residual in registers."""
    if model == LOGISTIC:
        return sigmoid(z) - y
    elif model == POISSON:
        return exp(z if z < POISSON_Z_MAX else POISSON_Z_MAX) - y
    elif model == GAUSSIAN:
        return (z - y) * param[0]
    # negative binomial: (y + r) sigma(z - log r) - y = r (e^z - y) / (r + e^z),
    # bounded by r
    return (y + param[0]) * sigmoid(z - param[1]) - y


cdef inline void glm_residual(int model, const double* z, int K, const double* y,
                              const double* param, double* r) noexcept nogil:
    """r = d phi / d z at (z, y): the per-datum gradient is r (x) (x_i, 1).

    ``y`` points to the datum's target(s): one value (logistic, softmax class
    index) or K values (multi-output Gaussian).  ``param``: the model's
    kernel parameters (Gaussian: 1/sigma^2; negative binomial: r, log r).
    """
    cdef int k
    cdef double m, s
    if model == GAUSSIAN:
        for k in range(K):
            r[k] = (z[k] - y[k]) * param[0]
    elif model != SOFTMAX:
        r[0] = glm_residual1(model, z[0], y[0], param)
    else:
        m = z[0]
        for k in range(1, K):
            if z[k] > m:
                m = z[k]
        s = 0.0
        for k in range(K):
            r[k] = exp(z[k] - m)
            s += r[k]
        for k in range(K):
            r[k] /= s
        r[<int> y[0]] -= 1.0


cdef inline double glm_loss(int model, const double* z, int K, const double* y,
                            const double* param) noexcept nogil:
    """phi(z, y) = U_i: the datum's negative log-likelihood (up to a constant
    for the Gaussian and Poisson), computed stably; the Metropolis correction
    needs it."""
    cdef int k
    cdef double m, s, v
    if model == LOGISTIC:
        # log(1 + e^z) - y z, without overflow for large |z|
        return softplus(z[0]) - y[0] * z[0]
    elif model == POISSON:
        # exp(z) - y z (log y! dropped: the Metropolis ratio needs differences)
        v = z[0]
        if v <= POISSON_Z_MAX:
            return exp(v) - y[0] * v
        return exp(POISSON_Z_MAX) * (1.0 + v - POISSON_Z_MAX) - y[0] * v
    elif model == GAUSSIAN:
        s = 0.0
        for k in range(K):
            v = z[k] - y[k]
            s += v * v
        return 0.5 * s * param[0]
    elif model == NEGATIVE_BINOMIAL:
        # (y + r) log(1 + e^z / r) - y z (terms free of z dropped)
        return (y[0] + param[0]) * softplus(z[0] - param[1]) - y[0] * z[0]
    m = z[0]
    for k in range(1, K):
        if z[k] > m:
            m = z[k]
    s = 0.0
    for k in range(K):
        s += exp(z[k] - m)
    return m + log(s) - z[<int> y[0]]
