# cython: language_level=3
"""Python twins of the inline residuals, for tests."""
import numpy as np

#: the C enum ModelKind as the engine was compiled with it: the registry
#: (_glm.MODEL_KINDS) must agree, which _estimators checks when it loads
C_MODEL_KINDS = {"logistic": LOGISTIC, "gaussian": GAUSSIAN, "softmax": SOFTMAX,
                 "poisson": POISSON, "negative_binomial": NEGATIVE_BINOMIAL}
#: the length of the kernel's parameter vector (``ModelSpec.kernel_params``)
C_MAX_MODEL_PARAMS = MAX_MODEL_PARAMS


cdef _kernel_param_array(param):
    """The kernel's parameter vector, zero-padded to MAX_MODEL_PARAMS."""
    values = np.zeros(MAX_MODEL_PARAMS)
    given = np.atleast_1d(np.asarray(param, dtype=np.float64))
    if given.shape[0] > MAX_MODEL_PARAMS:
        raise ValueError("at most %d kernel parameters" % MAX_MODEL_PARAMS)
    values[:given.shape[0]] = given
    return values


def py_glm_residual(int model, const double[::1] z, y, param=()):
    """Residual ``phi'(z, y)`` computed by the engine's inline kernel.

    Parameters
    ----------
    model : int
        0 logistic, 1 Gaussian, 2 softmax, 3 Poisson, 4 negative binomial.
    z : ndarray of shape (K,)
        Linear predictor(s).
    y : float or ndarray of shape (K,)
        Target (class index for softmax; K values for a multi-output Gaussian).
    param : sequence of float
        The model's kernel parameters (``ModelSpec.kernel_params``):
        ``(1/sigma^2,)`` for the Gaussian, ``(r, log r)`` for the negative
        binomial, empty otherwise.

    Returns
    -------
    r : ndarray of shape (K,)
    """
    cdef int K = z.shape[0]
    cdef double[::1] yv = np.atleast_1d(np.asarray(y, dtype=np.float64)).copy()
    cdef double[::1] pv = _kernel_param_array(param)
    if model in (LOGISTIC, POISSON, NEGATIVE_BINOMIAL) and K != 1:
        raise ValueError("the logistic, Poisson and negative binomial models have one output")
    if model == GAUSSIAN and yv.shape[0] != K:
        raise ValueError("a Gaussian model needs K targets per datum")
    if model == SOFTMAX and not (0 <= yv[0] < K):
        raise ValueError("softmax target must be a class index < K")
    r = np.empty(K)
    cdef double[::1] rv = r
    glm_residual(model, &z[0], K, &yv[0], &pv[0], &rv[0])
    return r


def py_glm_loss(int model, const double[::1] z, y, param=()):
    """Per-datum potential ``phi(z, y)`` computed by the engine's inline kernel
    (testing twin of ``glm_loss``)."""
    cdef int K = z.shape[0]
    cdef double[::1] yv = np.atleast_1d(np.asarray(y, dtype=np.float64)).copy()
    cdef double[::1] pv = _kernel_param_array(param)
    return glm_loss(model, &z[0], K, &yv[0], &pv[0])
