# cython: language_level=3
"""SGLD, pSGLD and SGHMC exactly as in ALGORITHMS.md.

Each ``step`` makes the oracle calls its integrator needs and updates
``theta`` in place.  ``ewsg_whitening`` gives, per coordinate of the
variable that carries the noise, ``c/s`` (gradient coefficient over noise
scale of the one-step Gaussian transition) and the whitened increment ``x``
the EWSG weights are computed at.
"""
import numpy as np

from libc.math cimport exp, expm1, sqrt
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
        self.ewsg_width = 1
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

    @property
    def ewsg_width(self):
        """Whitened components per coordinate (1, or 2 when two correlated
        variables carry the noise)."""
        return self.ewsg_width

    def py_ewsg_whitening(self, int x_mode=EWSG_X_AUTO):
        """Return ``(c/s, x)`` arrays for the current state (testing twin):
        length ``ewsg_width * dim``, component m of coordinate j at m*dim + j."""
        scale = np.empty(self.dim * self.ewsg_width)
        shift = np.empty(self.dim * self.ewsg_width)
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


cdef class SGHMCLeapfrog(Dynamics):
    """SG-HMC with leapfrog (the SG-HMC slides): each step draws p ~ N(0, T I),
    makes K leapfrog steps ``p -= (h/2) g(q); q += h p; p -= (h/2) g(q)`` with
    fresh stochastic gradients (K + 1 per step: the closing half-kick of one
    leapfrog step and the opening one of the next share a gradient), and
    keeps q, with no Metropolis correction.

    Parameters
    ----------
    dim, step_size, temperature : see :class:`Dynamics`
    n_leapfrog : int
        K >= 1.
    """

    def __init__(self, Py_ssize_t dim, double step_size, double temperature=1.0,
                 int n_leapfrog=10):
        Dynamics.__init__(self, dim, step_size, temperature)
        if n_leapfrog < 1:
            raise ValueError("n_leapfrog must be >= 1")
        self.n_leapfrog = n_leapfrog
        self.momentum = np.zeros(dim)

    cdef void step(self, double* theta, GradientOracle oracle, bitgen_t* rng) noexcept nogil:
        cdef intp j
        cdef int l
        cdef double h = self.step_size
        cdef double sT = sqrt(self.temperature)
        random_standard_normal_fill(rng, self.dim, &self.momentum[0])
        oracle.gradient(theta, &self.grad[0])
        for j in range(self.dim):
            self.momentum[j] = sT * self.momentum[j] - 0.5 * h * self.grad[j]
        for l in range(self.n_leapfrog):
            for j in range(self.dim):
                theta[j] += h * self.momentum[j]
            oracle.gradient(theta, &self.grad[0])
            for j in range(self.dim):
                # a full kick between positions, a half kick after the last one
                self.momentum[j] -= (0.5 if l == self.n_leapfrog - 1 else 1.0) * h * self.grad[j]

    cdef void ewsg_whitening(self, double* scale, double* shift, int x_mode) noexcept nogil:
        # one leapfrog step from a fresh p ~ N(0, T): q' = q + h p - (h^2/2) g,
        # so q' ~ N(q - (h^2/2) g, h^2 T): c/s = h / (2 sqrt(T)); x = 0 (q' = q).
        # Exact for K = 1; the same whitening is used for every kick when K > 1.
        cdef intp j
        cdef double w = self.step_size / (2.0 * sqrt(self.temperature))
        for j in range(self.dim):
            scale[j] = w
            shift[j] = 0.0

    has_momentum = False  # p is redrawn every step: no momentum carried


cdef class ULD(Dynamics):
    """SG underdamped Langevin with the exact Ornstein-Uhlenbeck step (Cheng et al.).

    dv = -gamma v dt - u grad U dt + sqrt(2 gamma u T) dB,  dx = v dt, integrated
    exactly over one step with grad U frozen at g = g_hat(x_k); with
    a = exp(-gamma h):

    v' = a v - (u/gamma)(1 - a) g + xi_v,
    x' = x + (1 - a)/gamma v - (u/gamma)(h - (1 - a)/gamma) g + xi_x,

    (xi_v, xi_x) Gaussian, per coordinate, with Var xi_v = u T (1 - a^2),
    Cov = (u T/gamma)(1 - a)^2, Var xi_x = (u T/gamma^2)(2 gamma h + 4a - a^2 - 3).
    The stationary law is exp(-U(x)/T - |v|^2 / (2 u T)).

    Parameters
    ----------
    dim, step_size, temperature : see :class:`Dynamics`
    friction : float
        gamma > 0.
    inv_mass : float
        u > 0.
    v0 : ndarray of shape (dim,) or None
        Initial velocity (None: zeros).
    """

    def __init__(self, Py_ssize_t dim, double step_size, double temperature=1.0,
                 double friction=2.0, double inv_mass=1.0, v0=None):
        Dynamics.__init__(self, dim, step_size, temperature)
        if not friction > 0 or not inv_mass > 0:
            raise ValueError("friction and inv_mass must be > 0")
        self.ewsg_width = 2
        self.friction = friction
        self.inv_mass = inv_mass
        self.velocity = np.zeros(dim) if v0 is None else np.array(v0, dtype=np.float64)
        self.noise2 = np.zeros(dim)
        g, h, u, T = friction, step_size, inv_mass, temperature
        em1 = expm1(-g * h)                  # a - 1, accurate for small gamma h
        a = 1.0 + em1
        self.a = a
        self.cv = -(u / g) * em1             # (u/gamma)(1 - a)
        self.cx = (u / g) * (h + em1 / g)    # (u/gamma)(h - (1 - a)/gamma)
        s_vv = -u * T * em1 * (2.0 + em1)    # u T (1 - a^2)
        s_xv = (u * T / g) * em1 * em1       # (u T/gamma)(1 - a)^2
        # 2 gamma h + 4a - a^2 - 3 = 2 (gamma h + em1) - em1^2
        s_xx = (u * T / (g * g)) * (2.0 * (g * h + em1) - em1 * em1)
        self.l_vv = sqrt(s_vv)
        self.l_xv = s_xv / self.l_vv
        self.l_xx = sqrt(max(s_xx - self.l_xv * self.l_xv, 0.0))

    cdef void step(self, double* theta, GradientOracle oracle, bitgen_t* rng) noexcept nogil:
        cdef intp j
        cdef double v, xi1, xi2
        cdef double one_minus_a_over_g = (1.0 - self.a) / self.friction
        oracle.gradient(theta, &self.grad[0])
        random_standard_normal_fill(rng, self.dim, &self.noise[0])
        random_standard_normal_fill(rng, self.dim, &self.noise2[0])
        for j in range(self.dim):
            v = self.velocity[j]
            xi1 = self.noise[j]
            xi2 = self.noise2[j]
            theta[j] += (one_minus_a_over_g * v - self.cx * self.grad[j]
                         + self.l_xv * xi1 + self.l_xx * xi2)
            self.velocity[j] = self.a * v - self.cv * self.grad[j] + self.l_vv * xi1

    cdef void ewsg_whitening(self, double* scale, double* shift, int x_mode) noexcept nogil:
        # The gradient moves the mean of (v', x') by -(cv, cx) g; whitening with
        # the Cholesky factor L = [[l_vv, 0], [l_xv, l_xx]] gives two components
        # per coordinate: w_v = (cv / l_vv) g, w_x = ((cx - l_xv cv / l_vv) / l_xx) g.
        # x (auto): v' = v (the momentum analogue of r_{k+1} = r_k) and x' at its
        # gradient-free mean; MOMENTUM_STOP: v' = 0.
        cdef intp j
        cdef double av = self.cv / self.l_vv
        cdef double ax = (self.cx - self.l_xv * av) / self.l_xx if self.l_xx > 0 else 0.0
        cdef double xv_coef, xx_coef
        cdef double target
        for j in range(self.dim):
            target = 0.0 if x_mode == EWSG_X_MOMENTUM_STOP else self.velocity[j]
            # whitened v-residual of (v' - a v) at v' = target; x component from
            # the gradient-free x' (residual 0) minus the v correlation
            xv_coef = (target - self.a * self.velocity[j]) / self.l_vv
            xx_coef = -self.l_xv * xv_coef / self.l_xx if self.l_xx > 0 else 0.0
            scale[j] = av
            shift[j] = xv_coef
            scale[self.dim + j] = ax
            shift[self.dim + j] = xx_coef

    has_momentum = True

    def get_state(self):
        return {"velocity": np.array(self.velocity)}

    def set_state(self, state):
        if "velocity" in state:
            self.velocity = np.array(state["velocity"], dtype=np.float64)
