# cython: language_level=3
"""Python twins of the inline residuals, for tests."""
import numpy as np

#: the C enum ModelKind as the engine was compiled with it: the registry
#: (_glm.MODEL_KINDS) must agree, which _estimators checks when it loads
C_MODEL_KINDS = {"logistic": LOGISTIC, "gaussian": GAUSSIAN, "softmax": SOFTMAX,
                 "poisson": POISSON}


def py_glm_residual(int model, const double[::1] z, y, double inv_noise_var=1.0):
    """Residual ``phi'(z, y)`` computed by the engine's inline kernel.

    Parameters
    ----------
    model : int
        0 logistic, 1 Gaussian, 2 softmax, 3 Poisson.
    z : ndarray of shape (K,)
        Linear predictor(s).
    y : float or ndarray of shape (K,)
        Target (class index for softmax; K values for a multi-output Gaussian).
    inv_noise_var : float
        ``1/sigma^2`` for the Gaussian model.

    Returns
    -------
    r : ndarray of shape (K,)
    """
    cdef int K = z.shape[0]
    cdef double[::1] yv = np.atleast_1d(np.asarray(y, dtype=np.float64)).copy()
    if (model == LOGISTIC or model == POISSON) and K != 1:
        raise ValueError("the logistic and Poisson models have one output")
    if model == GAUSSIAN and yv.shape[0] != K:
        raise ValueError("a Gaussian model needs K targets per datum")
    if model == SOFTMAX and not (0 <= yv[0] < K):
        raise ValueError("softmax target must be a class index < K")
    r = np.empty(K)
    cdef double[::1] rv = r
    glm_residual(model, &z[0], K, &yv[0], inv_noise_var, &rv[0])
    return r


def py_glm_loss(int model, const double[::1] z, y, double inv_noise_var=1.0):
    """Per-datum potential ``phi(z, y)`` computed by the engine's inline kernel
    (testing twin of ``glm_loss``)."""
    cdef int K = z.shape[0]
    cdef double[::1] yv = np.atleast_1d(np.asarray(y, dtype=np.float64)).copy()
    return glm_loss(model, &z[0], K, &yv[0], inv_noise_var)
