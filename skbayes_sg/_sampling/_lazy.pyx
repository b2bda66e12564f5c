# cython: language_level=3
"""Lazy, exact SGLD and SGHMC on sparse rows: O(nnz) a step instead of O(dim).

On CSR data a minibatch touches only the columns of its rows.  Between two
touches a coordinate ``z_j`` moves under the prior alone (and the constant
drift of a control variate's sum ``A_j``): in a diagonal or identity metric
``theta_j = c_j + D_j z_j`` its SGLD step is the linear Gaussian recursion

    z_j <- a_j z_j + b_j + s xi,     a_j = 1 - o_j,  o_j = c s_m alpha D_j^2,
                                      b_j = -c s_m D_j (alpha c_j + A_j),

(``c``, ``s`` the dynamics' gradient and noise coefficients, ``s_m`` the
metric's scale), whose k-step law is exact in closed form (AR(1)):

    z_j <- a^k z_j + b (1 - a^k) / o + s sqrt((1 - a^(2k)) / (o (2 - o))) xi.

Euler SGHMC's untouched pair ``(z_j, r_j)`` follows the 2 x 2 recursion
``z <- z + h r``, ``r <- r - h (a_j z + beta_j + gamma r) + s xi``
(``a_j = s_m alpha D_j^2``, ``beta_j = s_m D_j (alpha c_j + A_j)``); its k-step
law (matrix power, mean and covariance) is composed from binary powers of
the one-step law in O(log k), where every term adds (nothing cancels, in the
over- and the underdamped regime alike).

A coordinate is brought up to date only when a row of the minibatch touches
it, before its residuals are computed, and every coordinate at a kept draw
and at the end of a round: the chain has the same law, step for step, as
the eager loop of :func:`._chain.run_segment` (not the same random numbers).
The touched coordinates then take their full step with the minibatch's data
term.  The other dynamics run the eager loop: the exact-OU ULD and BAOAB
(their untouched steps are linear too; not written yet), pSGLD (its
preconditioner moves with every gradient), Metropolis-adjusted steps (the
accept test needs the whole state), and dense metrics (which mix every
coordinate); so do the snapshot estimators (their drift changes at each
refresh) and EWSG (its index chain weighs whole gradients).
"""
import numpy as np

from cpython.pycapsule cimport PyCapsule_GetPointer
from libc.math cimport exp, expm1, log1p, sqrt, pow, isfinite, fabs, INFINITY
from libc.string cimport memcpy
from numpy cimport npy_intp as intp
from numpy.random cimport bitgen_t
from numpy.random.c_distributions cimport (random_interval, random_standard_normal,
                                           random_standard_uniform)

from ._chain import parse_bounds
from ._dataset cimport RowStore, CSR, SKB_PREFETCH
from ._dynamics cimport SGHMC, SGLD
from ._estimators cimport (ProblemStore, GradientEstimator, GLMEstimator, UniformSubsampling,
                           datum_weight, ACCESS_RANDOM, ACCESS_WEIGHTED, CONTROL_NONE,
                           CONTROL_FIXED)
from ._metric cimport Metric, METRIC_IDENTITY, METRIC_DIAGONAL
from ._models cimport glm_residual
from ._normal_stream cimport skb_normal_state, skb_normal_seed, skb_normal_fill_f64
from libc.stdint cimport uint64_t


#: the ``sampler`` and ``subsampling`` names this module has kernels for
#: (``"uniform"`` with ``access="random"``); :func:`lazy_supported` checks the
#: built objects
LAZY_SAMPLERS = ("sgld", "sghmc")
LAZY_SUBSAMPLINGS = ("uniform", "cv", "preferential", "cv-preferential")


def lazy_supported(GradientEstimator estimator, dynamics, Metric metric, int ewsg_chain_length=0):
    """Whether :func:`run_segment_lazy` can run this chain (else the eager loop).

    CSR rows; SGLD without a Metropolis correction, or Euler SGHMC; an identity or diagonal
    metric; no EWSG index chain; uniform minibatches with replacement, or a
    fixed control variate and/or fixed importance weights (``"cv"``,
    ``"preferential"``, ``"cv-preferential"``), at a fixed batch size.
    """
    cdef GLMEstimator glm
    cdef UniformSubsampling uni
    if estimator.P.X.layout != CSR or ewsg_chain_length > 0:
        return False
    if type(dynamics) is SGLD:
        if dynamics.metropolis:
            return False
    elif type(dynamics) is not SGHMC:
        return False
    if metric.kind != METRIC_IDENTITY and metric.kind != METRIC_DIAGONAL:
        return False
    if isinstance(estimator, UniformSubsampling):
        uni = estimator
        return bool(uni.replace)
    if isinstance(estimator, GLMEstimator):
        glm = estimator
        return ((glm.access == ACCESS_RANDOM or glm.access == ACCESS_WEIGHTED)
                and (glm.control == CONTROL_NONE or glm.control == CONTROL_FIXED)
                and not glm.adaptive)
    return False


cdef inline intp _row_start(const RowStore* X, intp i) noexcept nogil:
    return X.indptr64[i] if X.idx_is_64 else X.indptr32[i]


cdef inline intp _column(const RowStore* X, intp p) noexcept nogil:
    return X.indices64[p] if X.idx_is_64 else X.indices32[p]


cdef inline double _value(const RowStore* X, intp p) noexcept nogil:
    return X.values32[p] if X.is_f32 else X.values64[p]


cdef struct Coord:
    # one cache line per coordinate: everything a touch reads or writes
    double z            # the state, in the metric's coordinates
    double k1           # SGLD: o = 1 - a of the untouched recursion; SGHMC: its curvature
    double k2           # SGLD: log(a) (o < 1);                        SGHMC: the momentum r
    double k3           # the untouched recursion's constant drift (b; SGHMC: beta)
    double center       # theta = center + D z
    double D
    double delta        # the step's data term sum_i w_i (r_i - a_i) x_ij
    long long last      # steps applied to z; -(t + 1) while in step t's touched list


#: normals made at a time by the vectorised stream (``normal_kernel.h``)
cdef enum:
    NORMAL_BLOCK = 4096


cdef struct Normals:
    # a buffer of standard normals refilled in blocks (~0.5 ns a number,
    # against ~8 ns for numpy's generator one at a time: two are drawn per
    # touched coordinate per step, the main cost of a lazy step)
    skb_normal_state* state
    double* buf
    intp pos


cdef inline double _normal(Normals* N) noexcept nogil:
    if N.pos == NORMAL_BLOCK:
        skb_normal_fill_f64(N.state, N.buf, NORMAL_BLOCK)
        N.pos = 0
    N.pos += 1
    return N.buf[N.pos - 1]


cdef class _NormalSource:
    """Owns a :c:type:`Normals` buffer over a stream seeded with ``seed``."""
    cdef skb_normal_state state
    cdef double[::1] buf
    cdef Normals normals

    def __init__(self, seed):
        skb_normal_seed(&self.state, <uint64_t> (int(seed) % (1 << 64)))
        self.buf = np.zeros(NORMAL_BLOCK)
        self.normals.state = &self.state
        self.normals.buf = &self.buf[0]
        self.normals.pos = NORMAL_BLOCK


cdef inline double _advance(double z, double o, double log_a, double b, double s, long long k,
                            Normals* rng) noexcept nogil:
    """z after k untouched steps, exactly (one Gaussian draw)."""
    cdef double em, ak, one_m_ak
    if k <= 0:
        return z
    if k == 1:
        return (1.0 - o) * z + b + s * _normal(rng)
    if o < 1.0:
        em = expm1(<double> k * log_a)       # a^k - 1, accurate for a^k near 1
        ak = 1.0 + em
        one_m_ak = -em
    else:  # a <= 0 (a step beyond the stiffest direction's half period)
        ak = pow(1.0 - o, <double> k)
        one_m_ak = 1.0 - ak
    return (ak * z + b * one_m_ak / o
            + s * sqrt(one_m_ak * (1.0 + ak) / (o * (2.0 - o))) * _normal(rng))


cdef inline void _compose(double* P, double* mu, double* C, const double* Q, const double* nu,
                          const double* D) noexcept nogil:
    """(P, mu, C) <- the law of (P, mu, C) followed by (Q, nu, D): x -> Q (P x + mu) + nu,
    covariance Q C Q^T + D (2 x 2, row-major; C, D symmetric as c00, c01, c11)."""
    cdef double p00 = Q[0] * P[0] + Q[1] * P[2], p01 = Q[0] * P[1] + Q[1] * P[3]
    cdef double p10 = Q[2] * P[0] + Q[3] * P[2], p11 = Q[2] * P[1] + Q[3] * P[3]
    cdef double m0 = Q[0] * mu[0] + Q[1] * mu[1] + nu[0]
    cdef double m1 = Q[2] * mu[0] + Q[3] * mu[1] + nu[1]
    # Q C Q^T
    cdef double a0 = Q[0] * C[0] + Q[1] * C[1], a1 = Q[0] * C[1] + Q[1] * C[2]
    cdef double b0 = Q[2] * C[0] + Q[3] * C[1], b1 = Q[2] * C[1] + Q[3] * C[2]
    C[0] = a0 * Q[0] + a1 * Q[1] + D[0]
    C[1] = a0 * Q[2] + a1 * Q[3] + D[1]
    C[2] = b0 * Q[2] + b1 * Q[3] + D[2]
    P[0], P[1], P[2], P[3] = p00, p01, p10, p11
    mu[0], mu[1] = m0, m1


cdef inline void _advance_momentum(double* z, double* r, double a, double beta, double h,
                                   double gamma, double s, long long k,
                                   Normals* rng) noexcept nogil:
    """(z, r) after k untouched Euler SGHMC steps, exactly:
    ``z' = z + h r``, ``r' = r - h (a z + beta + gamma r) + s xi``, a linear
    Gaussian recursion whose k-step law (P, mu, C) comes from binary powers
    of the one-step law (O(log k); every term adds, nothing cancels)."""
    cdef double z0 = z[0], r0 = r[0], L11, L21, L22, x1, x2
    cdef double P[4]
    cdef double mu[2]
    cdef double C[3]
    cdef double B[4]
    cdef double bu[2]
    cdef double BC[3]
    cdef double B2[4]
    cdef double bu2[2]
    cdef double BC2[3]
    if k <= 0:
        return
    if k == 1:
        z[0] = z0 + h * r0
        r[0] = r0 - h * (a * z0 + beta + gamma * r0) + s * _normal(rng)
        return
    P[0], P[1], P[2], P[3] = 1.0, 0.0, 0.0, 1.0
    mu[0], mu[1] = 0.0, 0.0
    C[0], C[1], C[2] = 0.0, 0.0, 0.0
    B[0], B[1], B[2], B[3] = 1.0, h, -h * a, 1.0 - h * gamma
    bu[0], bu[1] = 0.0, -h * beta
    BC[0], BC[1], BC[2] = 0.0, 0.0, s * s
    while k:
        if k & 1:
            _compose(P, mu, C, B, bu, BC)
        k >>= 1
        if k:
            # the base doubles: (B, bu, BC) followed by itself
            B2[0], B2[1], B2[2], B2[3] = B[0], B[1], B[2], B[3]
            bu2[0], bu2[1] = bu[0], bu[1]
            BC2[0], BC2[1], BC2[2] = BC[0], BC[1], BC[2]
            _compose(B, bu, BC, B2, bu2, BC2)
    x1 = _normal(rng)
    x2 = _normal(rng)
    L11 = sqrt(C[0]) if C[0] > 0.0 else 0.0
    L21 = C[1] / L11 if L11 > 0.0 else 0.0
    L22 = C[2] - L21 * L21
    L22 = sqrt(L22) if L22 > 0.0 else 0.0
    z[0] = P[0] * z0 + P[1] * r0 + mu[0] + L11 * x1
    r[0] = P[2] * z0 + P[3] * r0 + mu[1] + L21 * x1 + L22 * x2


cdef inline void _advance_coord(Coord* c, bint momentum, double s, double h, double gamma,
                                long long k, Normals* rng) noexcept nogil:
    if momentum:
        _advance_momentum(&c.z, &c.k2, c.k1, c.k3, h, gamma, s, k, rng)
    else:
        c.z = _advance(c.z, c.k1, c.k2, c.k3, s, k, rng)


cdef inline bint _bad(const Coord* c, double max_abs_z, const double* bc, const double* bs,
                      double max_sds, intp j) noexcept nogil:
    if not isfinite(c.z) or fabs(c.z) > max_abs_z:
        return True
    return bs != NULL and fabs(c.center + c.D * c.z - bc[j]) > max_sds * bs[j]


cdef class LazyChain:
    """Lazy SGLD or SGHMC steps of one chain (see the module docstring).

    Built once per chain run from its estimator, prior, metric and SGLD
    dynamics (the per-coordinate recursions are computed here, O(dim)); then
    :meth:`run` advances it segment by segment without bringing every
    coordinate up to date in between, and :meth:`finish` writes the current
    state back.

    Parameters
    ----------
    estimator : UniformSubsampling or GLMEstimator
        See :func:`lazy_supported`.
    alpha : float
        Prior precision.
    metric : Metric
        Identity or diagonal.
    dynamics : SGLD or SGHMC
        SGHMC's momentum is read now and written back by :meth:`finish`.
    theta : ndarray of shape (dim,)
        The state ``z`` (read now; written by :meth:`finish`).
    seed : int
        Seed of the kernel's Gaussian stream (the minibatches come from the
        chain's bit generator); the caller draws it from the chain's
        generator, so the chain stays reproducible from its own seed.
    """
    cdef GradientEstimator estimator
    cdef const ProblemStore* P
    cdef Coord[::1] coords_mem
    cdef Coord* coords
    cdef intp dim, b
    cdef int access, control
    cdef double[::1] table, inv_np, alias_prob
    cdef intp[::1] alias_index
    cdef double[::1] params
    cdef intp[::1] idx, touched
    cdef double[::1] zbuf, rbuf
    cdef double s, kscale          # noise coefficient; the data term's factor (times D_j)
    cdef bint momentum             # SGHMC (else SGLD)
    cdef double h, gamma           # SGHMC's step and friction
    cdef object dynamics
    cdef long long t               # steps taken
    cdef _NormalSource noise       # the Gaussian draws (vectorised stream)

    def __init__(self, GradientEstimator estimator, double alpha, Metric metric, dynamics,
                 theta, seed=0):
        cdef GLMEstimator glm
        cdef bint diagonal
        cdef const double[::1] zv, Av, rv
        cdef intp j
        cdef double Dj, cj, oj, cs
        cdef Coord* rec
        if not lazy_supported(estimator, dynamics, metric):
            raise ValueError("this estimator, dynamics or metric has no lazy kernel")
        self.estimator = estimator
        self.P = estimator.P
        dim = self.P.dim
        self.dim = dim
        if np.shape(theta) != (dim,):
            raise ValueError("theta must have %d values" % dim)
        if not alpha > 0:
            raise ValueError("the lazy kernel needs alpha > 0")
        self.access, self.control = ACCESS_RANDOM, CONTROL_NONE
        self.table = np.zeros(1)
        self.inv_np = np.zeros(1)
        self.alias_prob = np.zeros(1)
        self.alias_index = np.zeros(1, dtype=np.intp)
        A = np.zeros(dim)
        if isinstance(estimator, GLMEstimator):
            glm = estimator
            self.b = glm.batch_size
            self.access, self.control = glm.access, glm.control
            if self.control == CONTROL_FIXED:
                A = np.asarray(glm.A)
                self.table = glm.table
            if self.access == ACCESS_WEIGHTED:
                self.inv_np, self.alias_prob = glm.inv_np, glm.alias_prob
                self.alias_index = glm.alias_index
        else:
            self.b = (<UniformSubsampling> estimator).batch_size
        sm = metric.scale
        self.dynamics = dynamics
        self.momentum = type(dynamics) is SGHMC
        if self.momentum:
            # z' = z + h r, r' = r - h (g + gamma r) + sqrt(2 gamma T h) xi, g = s_m D (alpha theta + G)
            self.h = (<SGHMC> dynamics).step_size
            self.gamma = (<SGHMC> dynamics).friction
            self.s = sqrt(2.0 * self.gamma * (<SGHMC> dynamics).temperature * self.h)
            c = 1.0                      # the curvature and drift below enter as gradients
            self.kscale = self.h * sm
            r0 = np.asarray((<SGHMC> dynamics).momentum)
        else:
            c = (<SGLD> dynamics).c_grad
            self.s = (<SGLD> dynamics).c_noise
            self.kscale = c * sm
            r0 = None
        # 64-byte aligned: each coordinate's record is exactly one cache line
        dtype = np.dtype([("z", "f8"), ("k1", "f8"), ("k2", "f8"), ("k3", "f8"),
                          ("center", "f8"), ("D", "f8"), ("delta", "f8"), ("last", "i8")])
        raw = np.empty(max(dim, 1) * dtype.itemsize + 64, dtype=np.uint8)
        offset = (-raw.ctypes.data) % 64
        self.coords_mem = raw[offset:offset + max(dim, 1) * dtype.itemsize].view(dtype)
        self.coords = &self.coords_mem[0]
        diagonal = metric.kind == METRIC_DIAGONAL
        zv = np.ascontiguousarray(theta, dtype=np.float64)
        rv = np.ascontiguousarray(r0 if r0 is not None else np.zeros(max(dim, 1)),
                                  dtype=np.float64)
        Av = np.ascontiguousarray(A, dtype=np.float64)
        cs = c * sm
        for j in range(dim):
            Dj = metric.diag[j] if diagonal else 1.0
            cj = metric.center[j] if diagonal else 0.0
            oj = cs * alpha * Dj * Dj
            rec = &self.coords[j]
            rec.z = zv[j]
            if self.momentum:            # the untouched gradient a z + beta, and r
                rec.k1 = oj
                rec.k2 = rv[j]
                rec.k3 = sm * Dj * (alpha * cj + Av[j])
            else:                        # o, log(a), b of the AR(1)
                rec.k1 = oj
                rec.k2 = log1p(-oj) if oj < 1.0 else 0.0
                rec.k3 = -cs * Dj * (alpha * cj + Av[j])
            rec.center = cj
            rec.D = Dj
            rec.delta = 0.0
            rec.last = 0
        self.params = np.zeros(max(dim, 1))
        self.idx = np.zeros(max(self.b, 1), dtype=np.intp)
        self.touched = np.zeros(max(dim, 1), dtype=np.intp)
        K = self.P.K
        self.zbuf = np.zeros(max(K, 1))
        self.rbuf = np.zeros(max(K, 1))
        self.t = 0
        self.noise = _NormalSource(seed)

    cdef void _bring_all(self) noexcept nogil:
        cdef intp j
        cdef Coord* c
        for j in range(self.dim):
            c = &self.coords[j]
            _advance_coord(c, self.momentum, self.s, self.h, self.gamma, self.t - c.last,
                           &self.noise.normals)
            c.last = self.t

    def finish(self, double[::1] theta):
        """Bring every coordinate up to date and write the state into ``theta``
        (and SGHMC's momentum into its dynamics)."""
        cdef intp j
        cdef double[::1] r
        with nogil:
            self._bring_all()
            for j in range(self.dim):
                theta[j] = self.coords[j].z
        if self.momentum:
            r = (<SGHMC> self.dynamics).momentum
            for j in range(self.dim):
                r[j] = self.coords[j].k2

    def run(self, Py_ssize_t n_steps, Py_ssize_t thin=1, out=None, bit_generator=None,
            double max_abs_z=INFINITY, bounds=None, dict report=None):
        """Advance by ``n_steps`` steps without the GIL.

        ``out`` receives every ``thin``-th state mapped to the parameters
        (all coordinates brought up to date and checked there); the touched
        coordinates are checked at every step.  On divergence the state is
        left as it is (the caller discards the chain).

        Returns
        -------
        n_done, n_kept : int
        """
        cdef const ProblemStore* P = self.P
        cdef const RowStore* X = P.X
        cdef intp dim = self.dim, d = X.n_features, dext = X.dext, b = self.b
        cdef int K = P.K
        cdef double[:, ::1] out_v
        cdef bint keep = out is not None
        if keep:
            out_v = out
            if out_v.shape[1] != dim or out_v.shape[0] < n_steps // thin:
                raise ValueError("out has the wrong shape")
        if thin < 1:
            raise ValueError("thin must be >= 1")
        cdef double[::1] bc_arr, bs_arr
        cdef const double* bc = NULL
        cdef const double* bs = NULL
        cdef double max_sds
        bc_obj, bs_obj, max_sds = parse_bounds(bounds, dim)
        if bc_obj is not None:
            bc_arr, bs_arr = bc_obj, bs_obj
            bc = &bc_arr[0]
            bs = &bs_arr[0]
        cdef bitgen_t* rng = <bitgen_t*> PyCapsule_GetPointer(bit_generator.capsule,
                                                              "BitGenerator")
        cdef Coord* coords = self.coords
        cdef Coord* c
        cdef Normals* nrm = &self.noise.normals
        cdef bint mom = self.momentum
        cdef double h = self.h, gamma = self.gamma
        cdef double* params = &self.params[0]
        cdef intp* idx = &self.idx[0]
        cdef intp* touched = &self.touched[0]
        cdef double* zb = &self.zbuf[0]
        cdef double* rb = &self.rbuf[0]
        cdef double s = self.s, ks = self.kscale, w, x, v
        cdef double inv_b = 1.0 / <double> b
        cdef intp n = P.n, step, jb, i, p, p0, p1, col, j, q, n_touched, n_kept = 0, n_done = 0
        cdef long long t, in_list
        cdef int k
        cdef bint ok = True, finite = True
        with bit_generator.lock, nogil:
            for step in range(n_steps):
                t = self.t
                in_list = -(t + 1)
                # 1. the minibatch
                for jb in range(b):
                    i = <intp> random_interval(rng, n - 1)
                    if self.access == ACCESS_WEIGHTED and \
                            random_standard_uniform(rng) >= self.alias_prob[i]:
                        i = self.alias_index[i]
                    idx[jb] = i
                # 2. bring its columns (and the intercepts) up to step t; every
                # coordinate's line is requested first, so that the misses of a
                # large model overlap instead of queueing
                for jb in range(b):
                    i = idx[jb]
                    for p in range(_row_start(X, i), _row_start(X, i + 1)):
                        for k in range(K):
                            SKB_PREFETCH(&coords[k * dext + _column(X, p)])
                n_touched = 0
                for jb in range(b):
                    i = idx[jb]
                    p0 = _row_start(X, i)
                    p1 = _row_start(X, i + 1)
                    for p in range(p0, p1):
                        col = _column(X, p)
                        for k in range(K):
                            j = k * dext + col
                            c = &coords[j]
                            if c.last != in_list:
                                _advance_coord(c, mom, s, h, gamma, t - c.last, nrm)
                                c.last = in_list
                                touched[n_touched] = j
                                n_touched += 1
                if dext > d:
                    for k in range(K):
                        j = k * dext + d
                        c = &coords[j]
                        _advance_coord(c, mom, s, h, gamma, t - c.last, nrm)
                        c.last = in_list
                        touched[n_touched] = j
                        n_touched += 1
                # 3. each row's residuals at the touched theta, and the data term
                for jb in range(b):
                    i = idx[jb]
                    p0 = _row_start(X, i)
                    p1 = _row_start(X, i + 1)
                    for k in range(K):
                        v = 0.0
                        for p in range(p0, p1):
                            c = &coords[k * dext + _column(X, p)]
                            v += _value(X, p) * (c.center + c.D * c.z)
                        if dext > d:
                            c = &coords[k * dext + d]
                            v += c.center + c.D * c.z
                        zb[k] = v
                    glm_residual(P.model, zb, K, P.y + i * P.y_stride, P.inv_noise_var, rb)
                    # the estimator's term: importance weight times (w_i r_i - a_i)
                    w = (self.inv_np[i] if self.access == ACCESS_WEIGHTED else 1.0) \
                        * <double> n * inv_b
                    x = datum_weight(P, i)
                    for k in range(K):
                        rb[k] *= x
                        if self.control == CONTROL_FIXED:
                            rb[k] -= self.table[i * K + k]
                        rb[k] *= w
                    for k in range(K):
                        if rb[k] == 0.0:
                            continue
                        for p in range(p0, p1):
                            coords[k * dext + _column(X, p)].delta += rb[k] * _value(X, p)
                        if dext > d:
                            coords[k * dext + d].delta += rb[k]
                # 4. their full step; every touched coordinate is checked
                for q in range(n_touched):
                    c = &coords[touched[q]]
                    if mom:   # Euler SGHMC: z moves with the old r, r with the gradient at z
                        x = c.z
                        c.z = x + h * c.k2
                        c.k2 = c.k2 - h * (c.k1 * x + c.k3 + gamma * c.k2) - ks * c.D * c.delta \
                            + s * _normal(nrm)
                    else:
                        c.z = (1.0 - c.k1) * c.z + c.k3 - ks * c.D * c.delta + s * _normal(nrm)
                    c.delta = 0.0
                    c.last = t + 1
                    if _bad(c, max_abs_z, bc, bs, max_sds, touched[q]):
                        ok = False
                        finite = finite and isfinite(c.z)
                self.t = t + 1
                if not ok:
                    break
                # 5. a kept draw: every coordinate up to date and checked
                if keep and (step + 1) % thin == 0:
                    for j in range(dim):
                        c = &coords[j]
                        _advance_coord(c, mom, s, h, gamma, self.t - c.last, nrm)
                        c.last = self.t
                        params[j] = c.center + c.D * c.z
                        if _bad(c, max_abs_z, bc, bs, max_sds, j):
                            ok = False
                            finite = finite and isfinite(c.z)
                    if not ok:
                        break
                    memcpy(&out_v[n_kept, 0], params, dim * sizeof(double))
                    n_kept += 1
                n_done = step + 1
        self.estimator.n_evals += <long long> n_done * b
        if not ok and report is not None:
            report["reason"] = "far" if finite else "non-finite"
        return n_done, n_kept


def run_segment_lazy(GradientEstimator estimator, double alpha, Metric metric, dynamics,
                     double[::1] theta, Py_ssize_t n_steps, Py_ssize_t thin=1, out=None,
                     bit_generator=None, double max_abs_z=INFINITY, bounds=None,
                     dict report=None):
    """One segment of lazy steps (:class:`LazyChain` built, run and
    finished): the same contract as :func:`._chain.run_segment` for the
    chains :func:`lazy_supported` accepts (``theta``, the state ``z``, is
    updated in place; ``out`` receives kept draws mapped to the parameters).

    Returns
    -------
    n_done, n_kept : int
    """
    seed = np.random.Generator(bit_generator).integers(2 ** 63)
    kernel = LazyChain(estimator, alpha, metric, dynamics, theta, seed)
    result = kernel.run(n_steps, thin, out, bit_generator, max_abs_z, bounds, report)
    kernel.finish(theta)
    return result


def py_catch_up(double o, double b, double s, double z0, long long k, Py_ssize_t n_draws,
                seed=0):
    """``n_draws`` independent k-step catch-ups of one coordinate from ``z0``
    (``a = 1 - o``, drift ``b``, noise ``s``): the testing twin of the kernel
    that brings an untouched coordinate up to date."""
    cdef double[::1] z = np.full(n_draws, z0)
    cdef double log_a = np.log1p(-o) if o < 1.0 else 0.0
    cdef _NormalSource noise = _NormalSource(seed)
    cdef intp i
    with nogil:
        for i in range(n_draws):
            z[i] = _advance(z[i], o, log_a, b, s, k, &noise.normals)
    return np.asarray(z)


def py_catch_up_momentum(double a, double beta, double h, double gamma, double s, double z0,
                         double r0, long long k, Py_ssize_t n_draws, seed=0):
    """``n_draws`` independent k-step catch-ups of one SGHMC coordinate from
    ``(z0, r0)`` (untouched gradient ``a z + beta``): the testing twin of the
    kernel's :func:`_advance_momentum`.  Returns ``(z, r)`` arrays."""
    cdef double[::1] z = np.full(n_draws, z0)
    cdef double[::1] r = np.full(n_draws, r0)
    cdef _NormalSource noise = _NormalSource(seed)
    cdef intp i
    with nogil:
        for i in range(n_draws):
            _advance_momentum(&z[i], &r[i], a, beta, h, gamma, s, k, &noise.normals)
    return np.asarray(z), np.asarray(r)
