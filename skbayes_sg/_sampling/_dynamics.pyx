# cython: language_level=3
"""SGLD, pSGLD and SGHMC exactly as in ALGORITHMS.md.

Each ``step`` makes the oracle calls its integrator needs and updates
``theta`` in place.  ``ewsg_whitening`` gives, per coordinate of the
variable that carries the noise, ``c/s`` (gradient coefficient over noise
scale of the one-step Gaussian transition) and the whitened increment ``x``
the EWSG weights are computed at.
"""
import numpy as np

from libc.math cimport sqrt
from numpy.random cimport bitgen_t
from numpy.random.c_distributions cimport random_standard_normal_fill


cdef class Dynamics:
    """Base class.

    Parameters
    ----------
    dim : int
        Number of parameters.
    step_size : float
        h > 0.
    temperature : float
        T > 0: the target is exp(-U/T).
    """

    def __init__(self, Py_ssize_t dim, double step_size, double temperature=1.0):
        if not step_size > 0:
            raise ValueError("step_size must be > 0")
        if not temperature > 0:
            raise ValueError("temperature must be > 0")
        self.dim = dim
        self.step_size = step_size
        self.temperature = temperature
        self.grad = np.zeros(dim)
        self.noise = np.zeros(dim)

    cdef void step(self, double* theta, GradientOracle oracle, bitgen_t* rng) noexcept nogil:
        pass

    cdef void ewsg_whitening(self, double* scale, double* shift, int x_mode) noexcept nogil:
        """Per coordinate of the noise-carrying variable: scale = c/s and the
        whitened increment x for ``x_mode`` AUTO or MOMENTUM_STOP (the oracle
        sets ZERO and ONE itself)."""
        pass

    def get_state(self):
        """Auxiliary state as a dict of arrays (copied)."""
        return {}

    def set_state(self, state):
        """Restore auxiliary state from :meth:`get_state` output."""
        pass

    has_momentum = False

    def py_ewsg_whitening(self, int x_mode=EWSG_X_AUTO):
        """Return ``(c/s, x)`` arrays for the current state (testing twin)."""
        scale = np.empty(self.dim)
        shift = np.empty(self.dim)
        cdef double[::1] sv = scale, xv = shift
        self.ewsg_whitening(&sv[0], &xv[0], x_mode)
        return scale, shift

    @property
    def step_size(self):
        return self.step_size


cdef class SGLD(Dynamics):
    """Stochastic gradient Langevin dynamics: theta <- theta - h g + sqrt(2hT) xi."""

    cdef void step(self, double* theta, GradientOracle oracle, bitgen_t* rng) noexcept nogil:
        cdef intp j
        cdef double h = self.step_size
        cdef double s = sqrt(2.0 * h * self.temperature)
        oracle.gradient(theta, &self.grad[0])
        random_standard_normal_fill(rng, self.dim, &self.noise[0])
        for j in range(self.dim):
            theta[j] += -h * self.grad[j] + s * self.noise[j]

    cdef void ewsg_whitening(self, double* scale, double* shift, int x_mode) noexcept nogil:
        # c = h, s = sqrt(2hT); x = 0 (assume theta_{k+1} = theta_k)
        cdef intp j
        cdef double w = sqrt(self.step_size / (2.0 * self.temperature))
        for j in range(self.dim):
            scale[j] = w
            shift[j] = 0.0


cdef class PSGLD(Dynamics):
    """Preconditioned SGLD with an RMSprop preconditioner (Gamma dropped).

    V <- a V + (1-a) gbar*gbar, gbar = g/n;  G = 1/(lambda + sqrt(V));
    theta <- theta - h G g + sqrt(2 h T G) xi.

    Parameters
    ----------
    dim, step_size, temperature : see :class:`Dynamics`
    n_data : int
        n, to turn the full-scale estimate into the per-datum mean gradient.
    decay : float
        a in (0, 1), default 0.99.
    eps : float
        lambda > 0, default 1e-5.
    V0 : ndarray of shape (dim,) or None
        Initial accumulator.  Zeros make the first steps enormous
        (G = 1/lambda); the estimators pass E[gbar^2] at the start point.
    """

    def __init__(self, Py_ssize_t dim, double step_size, double temperature=1.0,
                 double n_data=1.0, double decay=0.99, double eps=1e-5, V0=None):
        Dynamics.__init__(self, dim, step_size, temperature)
        if not 0.0 < decay < 1.0:
            raise ValueError("decay must be in (0, 1)")
        self.decay = decay
        self.eps = eps
        self.n_data = n_data
        self.V = np.zeros(dim) if V0 is None else np.array(V0, dtype=np.float64)

    cdef void step(self, double* theta, GradientOracle oracle, bitgen_t* rng) noexcept nogil:
        cdef intp j
        cdef double h = self.step_size
        cdef double gbar, G
        oracle.gradient(theta, &self.grad[0])
        random_standard_normal_fill(rng, self.dim, &self.noise[0])
        for j in range(self.dim):
            gbar = self.grad[j] / self.n_data
            self.V[j] = self.decay * self.V[j] + (1.0 - self.decay) * gbar * gbar
            G = 1.0 / (self.eps + sqrt(self.V[j]))
            theta[j] += -h * G * self.grad[j] + sqrt(2.0 * h * self.temperature * G) * self.noise[j]

    cdef void ewsg_whitening(self, double* scale, double* shift, int x_mode) noexcept nogil:
        # c = hG, s = sqrt(2hTG): c/s = sqrt(hG/(2T)), with G from the current V
        cdef intp j
        cdef double G
        for j in range(self.dim):
            G = 1.0 / (self.eps + sqrt(self.V[j]))
            scale[j] = sqrt(self.step_size * G / (2.0 * self.temperature))
            shift[j] = 0.0

    def get_state(self):
        return {"V": np.array(self.V)}

    def set_state(self, state):
        if "V" in state:
            self.V = np.array(state["V"], dtype=np.float64)


cdef class SGHMC(Dynamics):
    """SG underdamped Langevin, Euler-Maruyama (EWSG paper eq. 3).

    theta_{k+1} = theta_k + h r_k;
    r_{k+1} = r_k - h (g(theta_k) + gamma r_k) + sqrt(2 gamma T h) xi.

    Parameters
    ----------
    dim, step_size, temperature : see :class:`Dynamics`
    friction : float
        gamma > 0.
    r0 : ndarray of shape (dim,) or None
        Initial momentum (default: a draw from N(0, T I) is taken by the
        caller; None means zeros).
    """

    def __init__(self, Py_ssize_t dim, double step_size, double temperature=1.0,
                 double friction=1.0, r0=None):
        Dynamics.__init__(self, dim, step_size, temperature)
        if not friction > 0:
            raise ValueError("friction must be > 0")
        self.friction = friction
        self.momentum = np.zeros(dim) if r0 is None else np.array(r0, dtype=np.float64)

    cdef void step(self, double* theta, GradientOracle oracle, bitgen_t* rng) noexcept nogil:
        cdef intp j
        cdef double h = self.step_size
        cdef double g = self.friction
        cdef double s = sqrt(2.0 * g * self.temperature * h)
        cdef double r
        oracle.gradient(theta, &self.grad[0])
        random_standard_normal_fill(rng, self.dim, &self.noise[0])
        for j in range(self.dim):
            r = self.momentum[j]
            theta[j] += h * r
            self.momentum[j] = r - h * (self.grad[j] + g * r) + s * self.noise[j]

    cdef void ewsg_whitening(self, double* scale, double* shift, int x_mode) noexcept nogil:
        # noise carried by r: c = h, s = sigma sqrt(h), sigma = sqrt(2 gamma T);
        # x = (r_{k+1} - r_k + h gamma r_k) / (sigma sqrt(h)):
        #   AUTO (r_{k+1} = r_k):      x = sqrt(h) gamma r_k / sigma
        #   MOMENTUM_STOP (r_{k+1}=0): x = (h gamma - 1) r_k / (sigma sqrt(h))
        cdef intp j
        cdef double h = self.step_size
        cdef double sigma = sqrt(2.0 * self.friction * self.temperature)
        cdef double w = sqrt(h) / sigma
        cdef double xs
        if x_mode == EWSG_X_MOMENTUM_STOP:
            xs = (h * self.friction - 1.0) / (sigma * sqrt(h))
        else:
            xs = sqrt(h) * self.friction / sigma
        for j in range(self.dim):
            scale[j] = w
            shift[j] = xs * self.momentum[j]

    has_momentum = True

    def get_state(self):
        return {"momentum": np.array(self.momentum)}

    def set_state(self, state):
        if "momentum" in state:
            self.momentum = np.array(state["momentum"], dtype=np.float64)
