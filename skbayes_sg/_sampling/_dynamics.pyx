# cython: language_level=3
"""SGLD, pSGLD, SGHMC, SG-HMC leapfrog, ULD, BAOAB and SGNHT (formulas in the user guide).

Each ``step`` makes the oracle calls its integrator needs and updates the
state ``theta`` (the sampler's coordinates ``z``) in place.
``ewsg_whitening`` gives, per coordinate of the variable that carries the
noise, ``c/s`` (gradient coefficient over noise scale of the one-step
Gaussian transition) and the whitened increment ``x`` the EWSG weights are
computed at.

With ``reference_precision`` kappa > 0 (a whitened metric) the oracle's
gradient splits as ``g = kappa z + r``; the Gaussian part is integrated
exactly (an exponential integrator for SGLD, a rotation for the
Hamiltonian integrators, the exact linear SDE for ULD) and only ``r`` is
discretised.  kappa = 0 gives the classical integrators unchanged.
"""
import numpy as np

from libc.math cimport cos, expm1, sin, sqrt
from libc.string cimport memcpy

from ._coefficients cimport friction_noise, langevin_coefficients, ou_coefficients
from ._laws cimport (LAW_BAOAB, LAW_SGHMC, LAW_SGLD, LAW_SGNHT, LAW_ULD, Law, LawCoefficients,
                     accept_prob, drift, kick, langevin_move, mala_log_ratio, noise_factor,
                     one_step_law as law_one_step, ou_move, pair_move, psgld_move, sghmc_move,
                     sgnht_move, uld_move)
from ._dual_averaging cimport (dual_averaging_final, dual_averaging_start,
                               dual_averaging_update)
from numpy.random cimport bitgen_t
from numpy.random.c_distributions cimport random_standard_normal_fill, random_standard_uniform

# trajectories drawn from a length are cut at this many leapfrog steps (a step
# far below the posterior's scale would otherwise cost without bound; NUTS
# caps its trees the same way)
cdef int MAX_LEAPFROG = 1024


cdef inline void _rotate(double* z, double* p, intp n, double c, double s, double omega,
                         double t) noexcept nogil:
    """The law's drift (exact flow of the reference Gaussian over t) of every coordinate."""
    cdef intp j
    for j in range(n):
        drift(&z[j], &p[j], c, s, omega, t)


#: the entries every dynamics' saved state has (:meth:`Dynamics.get_state`);
#: the pool edits a saved state only through the functions below
STEP_KEY, CACHE_KEY, CACHE_SCALARS_KEY, ADAPT_KEY = "step_size", "cache", "cache_scalars", "adapt"


def state_step(dict state):
    """The step size a saved dynamics state continues with."""
    return float(state[STEP_KEY][0])


def with_step(dict state, double h):
    """A saved dynamics state that continues with step ``h`` (its other
    coefficients are recomputed from it when the state is restored)."""
    return {**state, STEP_KEY: np.array([h])}


def without_cached_gradient(dict state):
    """A saved dynamics state whose cached gradient and potential are
    dropped (after its coordinates were moved from outside)."""
    if CACHE_SCALARS_KEY not in state:
        return dict(state)
    return {**state, CACHE_SCALARS_KEY: np.array([0.0, 0.0])}


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
    reference_precision : float, default=0.0
        kappa >= 0, the curvature of the reference Gaussian in the sampler's
        coordinates (see the module docstring).
    metropolis : bool, default=False
        Add a Metropolis correction (dynamics with a reversible proposal
        only; the oracle must return exact gradients and potentials).
    """

    def __init__(self, Py_ssize_t dim, double step_size, double temperature=1.0,
                 double reference_precision=0.0, bint metropolis=False):
        if not step_size > 0:
            raise ValueError("step_size must be > 0")
        if not temperature > 0:
            raise ValueError("temperature must be > 0")
        if not reference_precision >= 0:
            raise ValueError("reference_precision must be >= 0")
        if metropolis and not self.supports_metropolis:
            raise ValueError("%s has no Metropolis correction" % type(self).__name__)
        self.dim = dim
        self.ewsg_width = 1
        self.temperature = temperature
        self.law.kind = -1 if self.law_kind is None else self.law_kind
        self.law.kappa = reference_precision
        self.law.omega = sqrt(reference_precision)
        self.grad = np.zeros(dim)
        self.noise = np.zeros(dim)
        self.cache_grad = np.zeros(dim)
        self.cache_valid = False
        self.metropolis = metropolis
        self.da.max_step = np.inf
        self.da.target_accept = 0.8
        self.set_step(step_size)

    cdef void step(self, double* theta, GradientOracle oracle, bitgen_t* rng) noexcept nogil:
        pass

    cdef void ewsg_whitening(self, const double* theta, double* scale, double* shift,
                             int x_mode) noexcept nogil:
        """Per coordinate of the noise-carrying variable: scale = c/s and the
        whitened increment x for ``x_mode`` AUTO or MOMENTUM_STOP (the oracle
        sets ZERO and ONE itself); ``theta`` is the point the gradient is
        evaluated at."""
        pass

    cdef void set_step(self, double h) noexcept nogil:
        self.law.h = h

    cdef void record_accept(self, double accept_prob) noexcept nogil:
        """Acceptance statistics and, while adapting, one dual-averaging update
        of log h toward the target acceptance."""
        self.n_proposed += 1
        self.accept_sum += accept_prob
        if self.adapting:
            self.set_step(dual_averaging_update(&self.da, accept_prob))

    # ------------------------------------------------------------ python side
    supports_metropolis = False
    #: its kind in ``_laws.LawKind`` where the lazy kernel and the error
    #: model read its one-step law (:func:`one_step_law`), else None
    law_kind = None
    #: a law per coordinate whose coordinates are coupled besides (SGNHT's
    #: thermostat): the lazy kernel cannot run it
    couples_coordinates = False
    has_momentum = False

    def start_adaptation(self, double target_accept=0.8, max_step=None):
        """Adapt h by dual averaging from now on (Metropolis dynamics)."""
        if not self.metropolis:
            raise ValueError("step adaptation needs the Metropolis correction")
        self.adapting = True
        dual_averaging_start(&self.da, self.law.h, target_accept,
                             self.da.max_step if max_step is None else max_step)

    def finish_adaptation(self):
        """Stop adapting; h becomes the dual-averaging average
        (``dual_averaging_final``). Returns h."""
        if self.adapting and self.da.t > 0:
            self.set_step(dual_averaging_final(&self.da))
        self.adapting = False
        return self.law.h

    def reset_acceptance(self):
        self.n_proposed = 0
        self.accept_sum = 0.0

    @property
    def acceptance_rate(self):
        """Mean Metropolis acceptance probability since the last reset (nan if none)."""
        return self.accept_sum / self.n_proposed if self.n_proposed else float("nan")

    @property
    def n_proposed(self):
        return self.n_proposed

    def py_set_step(self, double h):
        """Change h (coefficients recomputed)."""
        if not h > 0:
            raise ValueError("step_size must be > 0")
        self.set_step(h)

    def invalidate_cache(self):
        """Forget the cached gradient (after the state was changed from outside)."""
        self.cache_valid = False

    def _base_state(self):
        return {STEP_KEY: np.array([self.law.h]),
                CACHE_KEY: np.array(self.cache_grad),
                CACHE_SCALARS_KEY: np.array([self.cache_potential, float(self.cache_valid)]),
                ADAPT_KEY: np.array([float(self.adapting), self.da.target_accept,
                                     self.da.max_step, self.da.mu, self.da.log_h,
                                     self.da.log_hbar, self.da.hbar, float(self.da.t)])}

    def _set_base_state(self, state):
        if STEP_KEY in state:
            self.set_step(state_step(state))
        if CACHE_KEY in state:
            self.cache_grad = np.array(state[CACHE_KEY], dtype=np.float64)
            self.cache_potential = float(state[CACHE_SCALARS_KEY][0])
            self.cache_valid = bool(state[CACHE_SCALARS_KEY][1])
        if ADAPT_KEY in state:
            a = state[ADAPT_KEY]
            self.adapting = bool(a[0])
            self.da.target_accept, self.da.max_step = a[1], a[2]
            self.da.mu, self.da.log_h, self.da.log_hbar, self.da.hbar = a[3], a[4], a[5], a[6]
            self.da.t = int(a[7])

    def get_state(self):
        """Auxiliary state as a dict of arrays (copied)."""
        return self._base_state()

    def set_state(self, state):
        """Restore auxiliary state from :meth:`get_state` output."""
        self._set_base_state(state)

    @property
    def ewsg_width(self):
        """Whitened components per coordinate (1, or 2 when two correlated
        variables carry the noise)."""
        return self.ewsg_width

    def py_ewsg_whitening(self, int x_mode=EWSG_X_AUTO, theta=None):
        """Return ``(c/s, x)`` arrays for the current state (testing twin):
        length ``ewsg_width * dim``, component m of coordinate j at m*dim + j."""
        scale = np.empty(self.dim * self.ewsg_width)
        shift = np.empty(self.dim * self.ewsg_width)
        cdef double[::1] sv = scale, xv = shift
        cdef double[::1] th = (np.zeros(self.dim) if theta is None
                               else np.ascontiguousarray(theta, dtype=np.float64))
        self.ewsg_whitening(&th[0], &sv[0], &xv[0], x_mode)
        return scale, shift

    @property
    def step_size(self):
        return self.law.h

    @property
    def reference_precision(self):
        return self.law.kappa

    @property
    def metropolis(self):
        return self.metropolis

    @property
    def gradients_per_step(self):
        """Gradient estimates one step draws (on average)."""
        return 1.0


cdef class SGLD(Dynamics):
    """Stochastic gradient Langevin dynamics, ``z <- z - c g + s xi``.

    kappa = 0 (Euler-Maruyama): ``c = h``, ``s = sqrt(2 h T)``.
    kappa > 0 (exponential integrator: the OU part ``kappa z`` exact over h,
    the remainder frozen): ``c = (1 - e^{-kappa h}) / kappa``,
    ``s = sqrt(T (1 - e^{-2 kappa h}) / kappa)``.  With ``metropolis`` the
    step is a proposal accepted with the Metropolis-Hastings ratio (MALA).
    """

    def __init__(self, Py_ssize_t dim, double step_size, double temperature=1.0,
                 double reference_precision=0.0, bint metropolis=False):
        self.proposal = np.zeros(dim)
        self.grad2 = np.zeros(dim)
        Dynamics.__init__(self, dim, step_size, temperature, reference_precision, metropolis)

    supports_metropolis = True
    law_kind = LAW_SGLD

    @property
    def coefficients(self):
        """``(c, s)`` of the step at the current step size."""
        return self.law.c, self.law.s

    cdef void set_step(self, double h) noexcept nogil:
        self.law.h = h
        langevin_coefficients(h, self.law.kappa, self.temperature, &self.law.c, &self.law.s)

    cdef void step(self, double* theta, GradientOracle oracle, bitgen_t* rng) noexcept nogil:
        cdef intp j
        cdef double c = self.law.c, s = self.law.s
        cdef double u1, delta, dg = 0.0, gg = 0.0, gg_new = 0.0, a
        if not self.metropolis:
            oracle.gradient(theta, &self.grad[0])
            random_standard_normal_fill(rng, self.dim, &self.noise[0])
            for j in range(self.dim):
                theta[j] = langevin_move(theta[j], self.grad[j], self.noise[j], c, s)
            return
        if not self.cache_valid:
            self.cache_potential = oracle.gradient_potential(theta, &self.cache_grad[0])
            self.cache_valid = True
        random_standard_normal_fill(rng, self.dim, &self.noise[0])
        for j in range(self.dim):
            self.proposal[j] = langevin_move(theta[j], self.cache_grad[j], self.noise[j], c, s)
        u1 = oracle.gradient_potential(&self.proposal[0], &self.grad2[0])
        for j in range(self.dim):
            delta = self.proposal[j] - theta[j]
            dg += delta * (self.cache_grad[j] + self.grad2[j])
            gg += self.cache_grad[j] * self.cache_grad[j]
            gg_new += self.grad2[j] * self.grad2[j]
        a = accept_prob(mala_log_ratio(u1 - self.cache_potential, dg, gg, gg_new, c, s * s,
                                       self.temperature))
        if random_standard_uniform(rng) < a:
            memcpy(theta, &self.proposal[0], self.dim * sizeof(double))
            memcpy(&self.cache_grad[0], &self.grad2[0], self.dim * sizeof(double))
            self.cache_potential = u1
        self.record_accept(a)

    cdef void ewsg_whitening(self, const double* theta, double* scale, double* shift,
                             int x_mode) noexcept nogil:
        # c/s; x = 0 (assume z_{k+1} = z_k: the gradient-free mean is z itself)
        cdef intp j
        cdef double w = self.law.c / self.law.s
        for j in range(self.dim):
            scale[j] = w
            shift[j] = 0.0


cdef class PSGLD(Dynamics):
    """Preconditioned SGLD with an RMSprop preconditioner (Gamma dropped).

    V <- a V + (1-a) gbar*gbar, gbar = g/n;  G = 1/(lambda + sqrt(V));
    theta <- theta - h G g + sqrt(2 h T G) xi.  The preconditioner is its own
    metric: pSGLD runs in the identity metric, as its paper defines it.

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
        cdef double h = self.law.h
        cdef double s = sqrt(2.0 * h * self.temperature), inv_n = 1.0 / self.n_data
        oracle.gradient(theta, &self.grad[0])
        random_standard_normal_fill(rng, self.dim, &self.noise[0])
        for j in range(self.dim):
            psgld_move(&theta[j], &self.V[j], self.grad[j], self.noise[j], h, s, self.decay,
                       self.eps, inv_n)

    cdef void ewsg_whitening(self, const double* theta, double* scale, double* shift,
                             int x_mode) noexcept nogil:
        # c = hG, s = sqrt(2hTG): c/s = sqrt(hG/(2T)), with G from the current V
        cdef intp j
        cdef double G
        for j in range(self.dim):
            G = 1.0 / (self.eps + sqrt(self.V[j]))
            scale[j] = sqrt(self.law.h * G / (2.0 * self.temperature))
            shift[j] = 0.0

    def get_state(self):
        return {**self._base_state(), "V": np.array(self.V)}

    def set_state(self, state):
        self._set_base_state(state)
        if "V" in state:
            self.V = np.array(state["V"], dtype=np.float64)


cdef class MomentumDynamics(Dynamics):
    """Base of the dynamics whose momentum persists between steps: it is part
    of the saved state (warm start, continued rounds)."""

    has_momentum = True
    #: its entry in the saved state (the sampler definition's ``momentum_key``)
    momentum_key = "momentum"

    def _set_momentum(self, p0, Py_ssize_t dim):
        self.momentum = np.zeros(dim) if p0 is None else np.array(p0, dtype=np.float64)

    def get_state(self):
        return {**self._base_state(), self.momentum_key: np.array(self.momentum)}

    def set_state(self, state):
        self._set_base_state(state)
        if self.momentum_key in state:
            self.momentum = np.array(state[self.momentum_key], dtype=np.float64)


cdef class SGHMC(MomentumDynamics):
    """SG underdamped Langevin, Euler-Maruyama (EWSG paper eq. 3).

    theta_{k+1} = theta_k + h r_k;
    r_{k+1} = r_k - h (g(theta_k) + gamma r_k) + sqrt(2 gamma T h) xi.

    The whole gradient is discretised, in any metric (its Gaussian bias is
    known in closed form and sets the automatic step).

    Parameters
    ----------
    dim, step_size, temperature, reference_precision : see :class:`Dynamics`
    friction : float
        gamma > 0.
    r0 : ndarray of shape (dim,) or None
        Initial momentum (default: a draw from N(0, T I) is taken by the
        caller; None means zeros).
    """

    def __init__(self, Py_ssize_t dim, double step_size, double temperature=1.0,
                 double friction=1.0, r0=None, double reference_precision=0.0):
        if not friction > 0:
            raise ValueError("friction must be > 0")
        self.law.gamma = friction
        Dynamics.__init__(self, dim, step_size, temperature, reference_precision)
        self._set_momentum(r0, dim)

    law_kind = LAW_SGHMC

    cdef void set_step(self, double h) noexcept nogil:
        self.law.h = h
        self.law.s = friction_noise(self.law.gamma, self.temperature, h)

    cdef void step(self, double* theta, GradientOracle oracle, bitgen_t* rng) noexcept nogil:
        cdef intp j
        oracle.gradient(theta, &self.grad[0])
        random_standard_normal_fill(rng, self.dim, &self.noise[0])
        for j in range(self.dim):
            sghmc_move(&theta[j], &self.momentum[j], self.grad[j], self.noise[j], self.law.h,
                       self.law.gamma, self.law.s)

    cdef void ewsg_whitening(self, const double* theta, double* scale, double* shift,
                             int x_mode) noexcept nogil:
        # noise carried by r: c = h, s = sigma sqrt(h), sigma = sqrt(2 gamma T);
        # x = (r_{k+1} - r_k + h gamma r_k) / (sigma sqrt(h)):
        #   AUTO (r_{k+1} = r_k):      x = sqrt(h) gamma r_k / sigma
        #   MOMENTUM_STOP (r_{k+1}=0): x = (h gamma - 1) r_k / (sigma sqrt(h))
        cdef intp j
        cdef double h = self.law.h
        cdef double sigma = sqrt(2.0 * self.law.gamma * self.temperature)
        cdef double w = sqrt(h) / sigma
        cdef double xs
        if x_mode == EWSG_X_MOMENTUM_STOP:
            xs = (h * self.law.gamma - 1.0) / (sigma * sqrt(h))
        else:
            xs = sqrt(h) * self.law.gamma / sigma
        for j in range(self.dim):
            scale[j] = w
            shift[j] = xs * self.momentum[j]



cdef class SGHMCLeapfrog(Dynamics):
    """SG-HMC with leapfrog (the SG-HMC slides): each step draws p ~ N(0, T I),
    makes K leapfrog steps ``p -= (h/2) g(q); q += h p; p -= (h/2) g(q)`` with
    fresh stochastic gradients (K + 1 per step: the closing half-kick of one
    leapfrog step and the opening one of the next share a gradient), and
    keeps q.  With kappa > 0 the drift is the exact rotation of the reference
    Gaussian and the kicks use the remainder ``g - kappa q`` (a split
    integrator, exact for a Gaussian target).  With ``metropolis`` (exact
    gradients) the trajectory is accepted with the Hamiltonian's
    Metropolis ratio: Hamiltonian Monte Carlo (K gradients per step, the one
    at the start is kept from the previous step).

    Parameters
    ----------
    dim, step_size, temperature, reference_precision, metropolis :
        see :class:`Dynamics`
    n_leapfrog : int
        K >= 1; 0 draws the trajectory length per step, uniform in
        ``[1 - jitter, 1 + jitter] x trajectory``, and covers it exactly with
        ``K = ceil(length / h)`` steps of ``length / K`` (jittered lengths
        avoid the periodic trajectories of a fixed K).
    trajectory : float
        Trajectory length (time units) when ``n_leapfrog = 0``.
    jitter : float
        In [0, 1).
    """

    def __init__(self, Py_ssize_t dim, double step_size, double temperature=1.0,
                 int n_leapfrog=10, double reference_precision=0.0, bint metropolis=False,
                 double trajectory=1.5707963267948966, double jitter=0.25):
        if n_leapfrog < 0:
            raise ValueError("n_leapfrog must be >= 1 (or 0 for the trajectory length)")
        if not trajectory > 0 or not 0 <= jitter < 1:
            raise ValueError("trajectory must be > 0 and jitter in [0, 1)")
        self.n_leapfrog = n_leapfrog
        self.trajectory = trajectory
        self.jitter = jitter
        self.momentum = np.zeros(dim)
        self.start = np.zeros(dim)
        Dynamics.__init__(self, dim, step_size, temperature, reference_precision, metropolis)

    supports_metropolis = True

    cdef void set_step(self, double h) noexcept nogil:
        cdef double omega = sqrt(self.law.kappa)
        self.law.h = h
        self.law.rot_c = cos(omega * h)
        self.law.rot_s = sin(omega * h)

    cdef void _kick(self, const double* theta, double t) noexcept nogil:
        cdef intp j
        cdef double k = self.law.kappa
        for j in range(self.dim):
            self.momentum[j] = kick(self.momentum[j], self.grad[j] - k * theta[j], t)

    cdef void step(self, double* theta, GradientOracle oracle, bitgen_t* rng) noexcept nogil:
        cdef intp j
        cdef int l, K = self.n_leapfrog
        cdef double h = self.law.h
        cdef double sT = sqrt(self.temperature)
        cdef double omega = sqrt(self.law.kappa)
        cdef double u0 = 0.0, u1 = 0.0, kin0 = 0.0, kin1 = 0.0, a
        cdef double rot_c = self.law.rot_c, rot_s = self.law.rot_s
        if K == 0:
            # a jittered trajectory length, covered exactly: K steps of
            # length / K <= h (a rotation by just past or short of a quarter
            # turn decorrelates both z and z^2; K h rounded up to a multiple
            # of h could reach a half turn, which flips z and keeps z^2)
            a = self.trajectory * (1.0 - self.jitter
                                   + 2.0 * self.jitter * random_standard_uniform(rng))
            K = <int> min(a / h + 0.999999, <double> MAX_LEAPFROG)
            if K < 1:
                K = 1
            h = a / K
            rot_c = cos(omega * h)
            rot_s = sin(omega * h)
        random_standard_normal_fill(rng, self.dim, &self.momentum[0])
        for j in range(self.dim):
            self.momentum[j] *= sT
        if self.metropolis:
            if not self.cache_valid:
                self.cache_potential = oracle.gradient_potential(theta, &self.cache_grad[0])
                self.cache_valid = True
            memcpy(&self.start[0], theta, self.dim * sizeof(double))
            memcpy(&self.grad[0], &self.cache_grad[0], self.dim * sizeof(double))
            u0 = self.cache_potential
            for j in range(self.dim):
                kin0 += self.momentum[j] * self.momentum[j]
        else:
            oracle.gradient(theta, &self.grad[0])
        for l in range(K):
            self._kick(theta, 0.5 * h)
            _rotate(theta, &self.momentum[0], self.dim, rot_c, rot_s, omega, h)
            if self.metropolis and l == K - 1:
                u1 = oracle.gradient_potential(theta, &self.grad[0])
            else:
                oracle.gradient(theta, &self.grad[0])
            self._kick(theta, 0.5 * h)
        if not self.metropolis:
            return
        for j in range(self.dim):
            kin1 += self.momentum[j] * self.momentum[j]
        a = accept_prob((u0 - u1 + 0.5 * (kin0 - kin1)) / self.temperature)
        if random_standard_uniform(rng) < a:
            memcpy(&self.cache_grad[0], &self.grad[0], self.dim * sizeof(double))
            self.cache_potential = u1
        else:
            memcpy(theta, &self.start[0], self.dim * sizeof(double))
        self.record_accept(a)

    cdef void ewsg_whitening(self, const double* theta, double* scale, double* shift,
                             int x_mode) noexcept nogil:
        # one step from a fresh p ~ N(0, T): q' = c q + (s/omega)(p - (h/2)(g - kappa q)),
        # so q' ~ N(mean - (s/omega)(h/2) g, (s/omega)^2 T): c/s = h / (2 sqrt(T)) and
        # x = (q - gradient-free mean) / ((s/omega) sqrt(T)) (0 when kappa = 0).
        # Exact for K = 1; the same whitening is used for every kick when K > 1.
        cdef intp j
        cdef double h = self.law.h
        cdef double w = h / (2.0 * sqrt(self.temperature))
        cdef double omega = sqrt(self.law.kappa)
        cdef double reach = self.law.rot_s / omega if omega > 0 else h
        cdef double xs = 0.0
        if omega > 0:
            xs = ((1.0 - self.law.rot_c - reach * 0.5 * h * self.law.kappa)
                  / (reach * sqrt(self.temperature)))
        for j in range(self.dim):
            scale[j] = w
            shift[j] = xs * theta[j]

    has_momentum = False  # p is redrawn every step: no momentum carried

    def get_state(self):
        return self._base_state()

    @property
    def gradients_per_step(self):
        cdef double K = self.n_leapfrog
        if K == 0:
            K = min(np.ceil(self.trajectory / self.law.h), MAX_LEAPFROG)
        return K if self.metropolis else K + 1.0


cdef class ULD(MomentumDynamics):
    """SG underdamped Langevin with the exact Ornstein-Uhlenbeck step (Cheng et al.).

    dv = -gamma v dt - u grad U dt + sqrt(2 gamma u T) dB,  dx = v dt, integrated
    exactly over one step with grad U frozen at g = g_hat(x_k); with
    a = exp(-gamma h):

    v' = a v - (u/gamma)(1 - a) g + xi_v,
    x' = x + (1 - a)/gamma v - (u/gamma)(h - (1 - a)/gamma) g + xi_x,

    (xi_v, xi_x) Gaussian, per coordinate, with Var xi_v = u T (1 - a^2),
    Cov = (u T/gamma)(1 - a)^2, Var xi_x = (u T/gamma^2)(2 gamma h + 4a - a^2 - 3).
    The stationary law is exp(-U(x)/T - |v|^2 / (2 u T)).

    With kappa > 0 only the remainder ``g - kappa x`` is frozen: the linear
    SDE of the damped harmonic oscillator (force ``-u kappa x``) is
    integrated exactly (matrix exponentials, Van Loan's method for the noise),
    so a Gaussian target is sampled without bias at any h.

    Parameters
    ----------
    dim, step_size, temperature, reference_precision : see :class:`Dynamics`
    friction : float
        gamma > 0.
    inv_mass : float
        u > 0.
    v0 : ndarray of shape (dim,) or None
        Initial velocity (None: zeros).
    """

    def __init__(self, Py_ssize_t dim, double step_size, double temperature=1.0,
                 double friction=2.0, double inv_mass=1.0, v0=None,
                 double reference_precision=0.0):
        Dynamics.__init__(self, dim, step_size, temperature, reference_precision)
        if not friction > 0 or not inv_mass > 0:
            raise ValueError("friction and inv_mass must be > 0")
        self.ewsg_width = 2
        self.law.gamma = friction
        self.inv_mass = inv_mass
        self._set_momentum(v0, dim)           # the velocity v
        self.noise2 = np.zeros(dim)
        self._set_coefficients()

    law_kind = LAW_ULD

    def _set_coefficients(self):
        """The exact step's coefficients at the current ``step_size`` (they
        depend on it: a step changed without them would integrate another h)."""
        coef = uld_coefficients(self.law.h, self.law.gamma, self.inv_mass,
                                self.temperature, self.law.kappa)
        (self.law.e_xx, self.law.e_xv, self.law.e_vx, self.law.e_vv, self.law.f_x, self.law.f_v,
         self.law.l_vv, self.law.l_xv, self.law.l_xx) = coef

    cdef void step(self, double* theta, GradientOracle oracle, bitgen_t* rng) noexcept nogil:
        cdef intp j
        oracle.gradient(theta, &self.grad[0])
        random_standard_normal_fill(rng, self.dim, &self.noise[0])
        random_standard_normal_fill(rng, self.dim, &self.noise2[0])
        for j in range(self.dim):
            uld_move(&theta[j], &self.momentum[j], self.grad[j] - self.law.kappa * theta[j],
                     self.noise[j], self.noise2[j], &self.law)

    cdef void ewsg_whitening(self, const double* theta, double* scale, double* shift,
                             int x_mode) noexcept nogil:
        # The gradient moves the mean of (v', x') by -(f_v, f_x) g; whitening with
        # the Cholesky factor L = [[l_vv, 0], [l_xv, l_xx]] gives two components
        # per coordinate: w_v = (f_v / l_vv) g, w_x = ((f_x - l_xv f_v / l_vv) / l_xx) g.
        # x (auto): v' = v (the momentum analogue of r_{k+1} = r_k) and x' at its
        # gradient-free mean; MOMENTUM_STOP: v' = 0.
        cdef intp j
        cdef const LawCoefficients* q = &self.law
        cdef double av = q.f_v / q.l_vv
        cdef double ax = (q.f_x - q.l_xv * av) / q.l_xx if q.l_xx > 0 else 0.0
        cdef double xv_coef, xx_coef, target, mean_v
        for j in range(self.dim):
            target = 0.0 if x_mode == EWSG_X_MOMENTUM_STOP else self.momentum[j]
            mean_v = (q.e_vx + q.f_v * q.kappa) * theta[j] + q.e_vv * self.momentum[j]
            xv_coef = (target - mean_v) / q.l_vv
            xx_coef = -q.l_xv * xv_coef / q.l_xx if q.l_xx > 0 else 0.0
            scale[j] = av
            shift[j] = xv_coef
            scale[self.dim + j] = ax
            shift[self.dim + j] = xx_coef

    momentum_key = "velocity"

    def set_state(self, state):
        MomentumDynamics.set_state(self, state)
        if STEP_KEY in state:         # a restored step brings its coefficients
            self._set_coefficients()

    def py_set_step(self, double h):
        """Change h (coefficients recomputed)."""
        Dynamics.py_set_step(self, h)
        self._set_coefficients()


def uld_coefficients(double h, double gamma, double u, double T, double kappa):
    """Coefficients of ULD's exact step (see :class:`ULD`).

    Returns
    -------
    tuple
        ``(e_xx, e_xv, e_vx, e_vv, f_x, f_v, l_vv, l_xv, l_xx)``.
    """
    if kappa == 0.0:
        em1 = expm1(-gamma * h)                  # a - 1, accurate for small gamma h
        a = 1.0 + em1
        f_v = -(u / gamma) * em1                 # (u/gamma)(1 - a)
        f_x = (u / gamma) * (h + em1 / gamma)    # (u/gamma)(h - (1 - a)/gamma)
        s_vv = -u * T * em1 * (2.0 + em1)        # u T (1 - a^2)
        s_xv = (u * T / gamma) * em1 * em1       # (u T/gamma)(1 - a)^2
        # 2 gamma h + 4a - a^2 - 3 = 2 (gamma h + em1) - em1^2
        s_xx = (u * T / (gamma * gamma)) * (2.0 * (gamma * h + em1) - em1 * em1)
        e = (1.0, -em1 / gamma, 0.0, a)
    else:
        from scipy.linalg import expm
        A = np.array([[0.0, 1.0], [-u * kappa, -gamma]])
        E = expm(A * h)
        # forcing: integral_0^h e^{A s} ds (augmented exponential)
        aug = np.zeros((4, 4))
        aug[:2, :2] = A * h
        aug[:2, 2:] = np.eye(2) * h
        G = expm(aug)[:2, 2:]
        f_x, f_v = u * G[0, 1], u * G[1, 1]
        # noise covariance (Van Loan): the stationary law N(0, diag(T/kappa, u T))
        # is preserved, so Q = S - E S E^T exactly
        S = np.diag([T / kappa, u * T])
        Q = S - E @ S @ E.T
        s_xx, s_xv, s_vv = Q[0, 0], Q[0, 1], Q[1, 1]
        e = (E[0, 0], E[0, 1], E[1, 0], E[1, 1])
    l_vv = sqrt(s_vv)
    l_xv = s_xv / l_vv
    l_xx = sqrt(max(s_xx - l_xv * l_xv, 0.0))
    return (*e, f_x, f_v, l_vv, l_xv, l_xx)


cdef class BAOAB(MomentumDynamics):
    """Underdamped Langevin by the BAOAB splitting (Leimkuhler & Matthews).

    B: ``p -= (h/2) g``; A: ``z += (h/2) p``; O: ``p <- e^{-gamma h} p +
    sqrt(T (1 - e^{-2 gamma h})) xi``; one step is B A O A B, and the closing
    B of a step and the opening B of the next share one gradient (one
    estimate per step).  Second order in h for the configurational law.  With
    kappa > 0 the A steps are exact rotations of the reference Gaussian and
    the B steps kick with the remainder ``g - kappa z``: a Gaussian target is
    sampled exactly at any h, and the bias left is second order in the
    remainder.

    Parameters
    ----------
    dim, step_size, temperature, reference_precision : see :class:`Dynamics`
    friction : float
        gamma > 0.
    p0 : ndarray of shape (dim,) or None
        Initial momentum (None: zeros).
    """

    def __init__(self, Py_ssize_t dim, double step_size, double temperature=1.0,
                 double friction=1.0, p0=None, double reference_precision=0.0):
        if not friction > 0:
            raise ValueError("friction must be > 0")
        self.law.gamma = friction
        self._set_momentum(p0, dim)
        Dynamics.__init__(self, dim, step_size, temperature, reference_precision)

    law_kind = LAW_BAOAB

    @property
    def o_step(self):
        """``(decay, noise)`` of the O step at the current step size."""
        return self.law.o_decay, self.law.o_noise

    cdef void set_step(self, double h) noexcept nogil:
        cdef double omega = sqrt(self.law.kappa)
        self.law.h = h
        self.law.rot_c = cos(0.5 * omega * h)
        self.law.rot_s = sin(0.5 * omega * h)
        ou_coefficients(self.law.gamma, h, self.temperature, &self.law.o_decay, &self.law.o_noise)

    cdef void _kick(self, const double* theta, const double* g, double t) noexcept nogil:
        cdef intp j
        cdef double k = self.law.kappa
        for j in range(self.dim):
            self.momentum[j] = kick(self.momentum[j], g[j] - k * theta[j], t)

    cdef void step(self, double* theta, GradientOracle oracle, bitgen_t* rng) noexcept nogil:
        cdef intp j
        cdef double h = self.law.h
        cdef double omega = sqrt(self.law.kappa)
        if not self.cache_valid:
            oracle.gradient(theta, &self.cache_grad[0])
            self.cache_valid = True
        self._kick(theta, &self.cache_grad[0], 0.5 * h)
        _rotate(theta, &self.momentum[0], self.dim, self.law.rot_c, self.law.rot_s, omega, 0.5 * h)
        random_standard_normal_fill(rng, self.dim, &self.noise[0])
        for j in range(self.dim):
            self.momentum[j] = ou_move(self.momentum[j], self.noise[j], self.law.o_decay,
                                       self.law.o_noise)
        _rotate(theta, &self.momentum[0], self.dim, self.law.rot_c, self.law.rot_s, omega, 0.5 * h)
        oracle.gradient(theta, &self.cache_grad[0])
        self._kick(theta, &self.cache_grad[0], 0.5 * h)

    cdef void ewsg_whitening(self, const double* theta, double* scale, double* shift,
                             int x_mode) noexcept nogil:
        # The candidate g_J for the new point enters p through the closing and
        # the next opening half-kicks (-h g_J), is rotated by A(h/2) and
        # damped by O, whose noise carries it: p_O = e^{-gamma h}(-omega s z +
        # c (p + h kappa z - h g_J)) + sigma xi.  So c/s = e^{-gamma h} c h / sigma
        # and x = (target - gradient-free mean) / sigma with target p (auto:
        # r_{k+1} = r_k) or 0 (momentum-stop).
        cdef intp j
        cdef double h = self.law.h
        cdef double omega = sqrt(self.law.kappa)
        cdef double d = self.law.o_decay, c = self.law.rot_c, s = self.law.rot_s
        cdef double sig = self.law.o_noise
        cdef double w = d * c * h / sig
        cdef double target, mean
        for j in range(self.dim):
            target = 0.0 if x_mode == EWSG_X_MOMENTUM_STOP else self.momentum[j]
            mean = d * ((-omega * s + c * h * self.law.kappa) * theta[j] + c * self.momentum[j])
            scale[j] = w
            shift[j] = (target - mean) / sig



cdef class SGNHT(MomentumDynamics):
    """Stochastic gradient Nose-Hoover thermostat (Ding et al. 2014, Algorithm 2).

    ``p <- p - h xi p - h g(theta) + sqrt(2 A T h) eta``;
    ``theta <- theta + h p``;
    ``xi <- xi + h (p.p / d - T)``.

    The friction ``xi`` is a thermostat: it grows while the kinetic
    temperature ``p.p / d`` exceeds T and shrinks while it is below, so it
    settles where the friction dissipates what the injected noise *and* the
    gradient noise put in (``A`` plus the gradient noise's share) without
    knowing the latter.  The whole gradient is discretised, in any metric.

    Parameters
    ----------
    dim, step_size, temperature, reference_precision : see :class:`Dynamics`
    diffusion : float
        A > 0; the thermostat starts at ``xi = A`` (the paper's choice).
    p0 : ndarray of shape (dim,) or None
        Initial momentum (None: zeros).
    """

    def __init__(self, Py_ssize_t dim, double step_size, double temperature=1.0,
                 double diffusion=1.0, p0=None, double reference_precision=0.0):
        if not diffusion > 0:
            raise ValueError("diffusion must be > 0")
        self.diffusion = diffusion
        self.law.gamma = diffusion          # the thermostat starts at A
        Dynamics.__init__(self, dim, step_size, temperature, reference_precision)
        self._set_momentum(p0, dim)

    law_kind = LAW_SGNHT
    couples_coordinates = True

    cdef void set_step(self, double h) noexcept nogil:
        self.law.h = h
        self.law.s = friction_noise(self.diffusion, self.temperature, h)

    cdef void step(self, double* theta, GradientOracle oracle, bitgen_t* rng) noexcept nogil:
        # the law's friction is the thermostat: fixed over a step, it couples
        # the coordinates through the kinetic sum after it
        cdef intp j
        cdef double h = self.law.h
        cdef double s = self.law.s
        cdef double keep = 1.0 - h * self.law.gamma
        cdef double p, kinetic = 0.0
        oracle.gradient(theta, &self.grad[0])
        random_standard_normal_fill(rng, self.dim, &self.noise[0])
        for j in range(self.dim):
            p = sgnht_move(&theta[j], &self.momentum[j], self.grad[j], self.noise[j], h, keep, s)
            kinetic += p * p
        self.law.gamma += h * (kinetic / self.dim - self.temperature)

    cdef void ewsg_whitening(self, const double* theta, double* scale, double* shift,
                             int x_mode) noexcept nogil:
        # noise carried by p: c = h, s = sqrt(2 A T h); x = (p_{k+1} - (1 - h xi) p_k) / s:
        #   AUTO (p_{k+1} = p_k):      x = h xi p_k / s
        #   MOMENTUM_STOP (p_{k+1}=0): x = (h xi - 1) p_k / s
        cdef intp j
        cdef double h = self.law.h
        cdef double s = self.law.s
        cdef double xs
        if x_mode == EWSG_X_MOMENTUM_STOP:
            xs = (h * self.law.gamma - 1.0) / s
        else:
            xs = h * self.law.gamma / s
        for j in range(self.dim):
            scale[j] = h / s
            shift[j] = xs * self.momentum[j]

    @property
    def thermostat(self):
        """The current friction xi."""
        return self.law.gamma

    def get_state(self):
        return {**MomentumDynamics.get_state(self), "thermostat": np.array([self.law.gamma])}

    def set_state(self, state):
        MomentumDynamics.set_state(self, state)
        if "thermostat" in state:
            self.law.gamma = float(state["thermostat"][0])


def one_step_law(Dynamics dynamics, double a=1.0, double beta=1.0, bint partial=False):
    """The one-step law of a coordinate of ``dynamics`` whose gradient is
    ``a z + beta``, read off its compiled move (``_laws.one_step_law``): the
    ``def`` twin the error model and the tests call.

    Returns
    -------
    M : ndarray of shape (2, 2) or (1, 1)
        The state map (SGLD: of z alone; the others: of (z, r)).
    u : ndarray of shape (2,) or (1,)
        The mean's shift.
    noise : ndarray of shape (2, 2) or (1, 1)
        A factor of the step's noise covariance (``noise @ noise.T``), the
        step's Gaussian draws in its columns.
    """
    cdef Law L
    cdef double N[4]
    cdef double c = dynamics.law.c, s = dynamics.law.s
    if dynamics.law_kind is None:
        raise ValueError("%s has no per-coordinate one-step law" % type(dynamics).__name__)
    if dynamics.law.kind == LAW_SGLD:
        # z' = z - c (a z + beta) + s xi
        return (np.array([[langevin_move(1.0, a, 0.0, c, s)]]),
                np.array([langevin_move(0.0, beta, 0.0, c, s)]),
                np.array([[langevin_move(0.0, 0.0, 1.0, c, s)]]))
    law_one_step(&dynamics.law, a, beta, partial, &L)
    noise_factor(&dynamics.law, a, partial, N)
    return (np.array([[L.M[0], L.M[1]], [L.M[2], L.M[3]]]), np.array([L.u[0], L.u[1]]),
            np.array([[N[0], N[1]], [N[2], N[3]]]))


def law_move(Dynamics dynamics, z, r, g, xi1, xi2=None, bint partial=False):
    """The compiled law's move of every coordinate (the ``def`` twin the
    network's torch steps are tested against): position ``z``, momentum or
    velocity ``r`` (ignored by SGLD), the gradient ``g`` at ``z`` (the whole
    of it, as ``beta``), the step's
    draws ``xi1`` (and ``xi2``, ULD's second); BAOAB with ``partial`` is its
    B A O A.  Returns the new ``(z, r)``."""
    cdef double[::1] zv = np.array(z, dtype=np.float64)
    cdef double[::1] rv = np.array(z if r is None else r, dtype=np.float64)
    cdef const double[::1] gv = np.ascontiguousarray(g, dtype=np.float64)
    cdef const double[::1] x1 = np.ascontiguousarray(xi1, dtype=np.float64)
    cdef const double[::1] x2 = np.ascontiguousarray(np.zeros_like(xi1) if xi2 is None else xi2,
                                                     dtype=np.float64)
    cdef intp j
    # the move's gradient is a z + beta (ULD's and BAOAB's remainder (a - kappa) z + beta)
    cdef double a = (dynamics.law.kappa if dynamics.law.kind in (LAW_ULD, LAW_BAOAB)
                     else 0.0)
    if dynamics.law_kind is None:
        raise ValueError("%s has no per-coordinate law" % type(dynamics).__name__)
    for j in range(zv.shape[0]):
        if dynamics.law.kind == LAW_SGLD:
            zv[j] = langevin_move(zv[j], gv[j], x1[j], dynamics.law.c, dynamics.law.s)
        else:
            pair_move(&dynamics.law, &zv[j], &rv[j], a, gv[j], x1[j], x2[j], partial)
    return np.asarray(zv), (None if dynamics.law.kind == LAW_SGLD else np.asarray(rv))


def py_mala_log_ratio(double du, double delta_dot_gsum, double gg, double gg_new, double c,
                      double s2, double T):
    """The Metropolis log ratio of a Langevin proposal ``z' = z - c g + s xi``
    (``laws.h.tp``, the linear engine's own): ``du = U(z') - U(z)``,
    ``delta_dot_gsum = (z' - z).(g + g')``, ``gg = |g|^2``, ``gg_new = |g'|^2``,
    ``s2 = s^2``.  The network's MALA calls it."""
    return mala_log_ratio(du, delta_dot_gsum, gg, gg_new, c, s2, T)


def py_accept_prob(double log_ratio):
    """``min(1, exp(log_ratio))``, 0 where it is not finite (``laws.h.tp``)."""
    return accept_prob(log_ratio)


def law_kick(p, rem, double t):
    """The law's kick ``p - t rem`` of every entry (``def`` twin of
    ``laws.h.tp``'s; the error model applies it to coefficient vectors)."""
    cdef double[::1] pv = np.array(p, dtype=np.float64)
    cdef const double[::1] rv = np.ascontiguousarray(rem, dtype=np.float64)
    cdef intp j
    for j in range(pv.shape[0]):
        pv[j] = kick(pv[j], rv[j], t)
    return np.asarray(pv)


def law_drift(Dynamics dynamics, z, p, double t):
    """The law's drift of every entry of ``(z, p)`` over ``t``: the exact flow
    of the reference Gaussian of ``dynamics`` (its ``law.rot_c``,
    ``law.rot_s`` are the rotation over ``t``), a free drift when kappa = 0
    (``def`` twin of ``laws.h.tp``'s).  Returns the new ``(z, p)``."""
    cdef double[::1] zv = np.array(z, dtype=np.float64)
    cdef double[::1] pv = np.array(p, dtype=np.float64)
    cdef intp j
    for j in range(zv.shape[0]):
        drift(&zv[j], &pv[j], dynamics.law.rot_c, dynamics.law.rot_s, dynamics.law.omega, t)
    return np.asarray(zv), np.asarray(pv)
