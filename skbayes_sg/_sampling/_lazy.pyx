# cython: language_level=3
"""Lazy, exact SGLD, SGHMC, ULD and BAOAB on sparse rows: O(nnz) a step instead of O(dim).

On CSR data a minibatch touches only the columns of its rows.  Between two
touches a coordinate moves under the prior alone (and the constant drift of
a control variate's sum ``A_j``): in a diagonal or identity metric
``theta_j = c_j + D_j z_j`` its untouched step is a linear Gaussian
recursion whose k-step law is sampled exactly when the coordinate is next
needed (formulas in the user guide, "Lazy sparse steps").

* SGLD: ``z <- a z + b + s xi`` (AR(1)), kept in parameter units,
  ``theta <- m + a (theta - m) + sd_theta sqrt(1 - a^2) xi`` with the
  stationary mean ``m = -A_j / alpha`` and sd ``sd_theta``; the k-step law is
  ``m + a^k (theta - m) + sd_theta sqrt(1 - a^(2k)) xi``.  A touched step
  defers its noise into the next catch-up: it stores ``theta - g delta / a``
  one step behind, whose one-step law is exactly the eager step's (one
  Gaussian a touch instead of two).
* SGHMC (Euler), ULD (the exact OU step with the gradient frozen) and BAOAB:
  the pair ``(z_j, r_j)`` follows ``x <- M_j x + u_j + N(0, C_j)``, a 2 x 2
  law per coordinate (built from its prior curvature and drift); its k-step
  law is composed from binary powers of the one-step law, O(log k), every
  term adding (nothing cancels).  BAOAB's gradient serves the closing kick
  of one step and the opening kick of the next: a touched coordinate keeps
  its data term pending until its next step.

Every one-step law here is read off its dynamics' move, the code the eager
loop runs (``_laws.one_step_law``, ``laws.h.tp``), and a touched coordinate
takes that move itself: the lazy kernel writes no update of its own.

A coordinate is brought up to date only when a row of the minibatch touches
it, before its residuals are computed, and every coordinate at a kept draw
and at the end of a run: the chain has the same law, step for step, as
the eager loop of :func:`._chain.run_segment` (not the same random numbers).
The touched coordinates then take their full step with the minibatch's data
term.  The other dynamics run the eager loop: pSGLD (its preconditioner
moves with every gradient), SGNHT (its thermostat couples every
coordinate), SG-HMC leapfrog (its momentum is redrawn per trajectory and it
may be Metropolis-adjusted), Metropolis-adjusted steps (the accept test
needs the whole state), and dense metrics (which mix every coordinate); so
do the snapshot estimators (their drift changes at each refresh) and EWSG
(its index chain weighs whole gradients).
"""
import numpy as np

from cpython.pycapsule cimport PyCapsule_GetPointer
from libc.math cimport expm1, log1p, sqrt, pow, isfinite, fabs, INFINITY, NAN
from numpy cimport npy_intp as intp
from numpy.random cimport bitgen_t
from numpy.random.c_distributions cimport random_interval, random_standard_uniform

from ._chain import _segment_end, check_segment
from ._kernel_rules import LAZY_SCALE_GRID
from ._laws cimport (LAW_BAOAB, LAW_SGHMC, LAW_SGLD, LAW_ULD, Law, LawCoefficients, kick,
                     langevin_move, one_step_law, pair_move, uld_move)
from ._dataset cimport RowStore, CSR, SKB_PREFETCH, row_prefetch
from ._dynamics cimport Dynamics, MomentumDynamics
from ._dynamics import SGHMC
from ._chain cimport KeptRows, SegmentBounds
from ._interrupt cimport StopPoll
from ._estimators cimport (ProblemStore, GradientEstimator, GLMEstimator, UniformSubsampling,
                           datum_weight, ACCESS_RANDOM, ACCESS_WEIGHTED, CONTROL_NONE,
                           CONTROL_FIXED)
from ._metric cimport Metric, METRIC_IDENTITY, METRIC_DIAGONAL
from ._models cimport glm_residual
from ._normal_stream cimport skb_normal_state, skb_normal_seed, skb_normal_fill_f64
from libc.stdint cimport uint64_t


# The ``sampler`` and ``subsampling`` names this module has kernels for are
# flagged ``lazy`` in their definitions (``_specs.LAZY_SAMPLERS``,
# ``LAZY_SUBSAMPLINGS``; ``"uniform"`` with ``access="random"``);
# :func:`lazy_supported` checks the built objects, and tests/test_lazy.py
# checks that the two agree.

#: below this ``a`` an SGLD touch takes its own noise (deferring it divides by a)
cdef double A_DEFER = 0.25
#: the touched coordinates are checked against the bounds every this many
#: steps (and for finiteness at every step), as the eager loop checks
cdef enum:
    CHECK_EVERY = 16


def lazy_supported(GradientEstimator estimator, dynamics, Metric metric, int ewsg_chain_length=0):
    """Whether :class:`LazyChain` can run this chain (else the eager loop).

    CSR rows; SGLD without a Metropolis correction, Euler SGHMC, ULD or
    BAOAB; an identity or diagonal metric; no EWSG index chain; uniform
    minibatches with replacement, or a fixed control variate and/or fixed
    importance weights (``"cv"``, ``"preferential"``, ``"cv-preferential"``),
    at a fixed batch size.
    """
    cdef GLMEstimator glm
    cdef UniformSubsampling uni
    if estimator.P.X.layout != CSR or ewsg_chain_length > 0:
        return False
    # a law per coordinate, no coupling besides (its one-step maps are read off it)
    if dynamics.law_kind is None or dynamics.couples_coordinates:
        return False
    if dynamics.law_kind == LAW_SGLD and dynamics.metropolis:
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
    double x            # SGLD: theta_j (parameter units);   pairs: z_j (metric coordinates)
    double k1           # SGLD: a of the AR(1);              pairs: a_j, the untouched curvature
                        #   (with tables: its scale class, whose curvature is class_a[k1])
    double k2           # SGLD: log a (NaN where a <= A_DEFER); pairs: the momentum / velocity r_j
    double k3           # SGLD: its stationary mean m_j;     pairs: beta_j, the untouched drift
    double k4           # SGLD: its stationary sd;           pairs: the centre c_j
    double k5           # SGLD: the data term's factor g_j;  pairs: D_j
    double delta        # the step's data term sum_i w_i (r_i - a_i) x_ij (BAOAB: pending)
    long long last      # steps applied; -(t + 1) while in step t's touched list


cdef struct Dyn:
    # one chain's dynamics: its law's coefficients (the chain's own, copied
    # once per run) and the metric's gradient scale sm
    LawCoefficients law
    double sm
    # where every coordinate has the same untouched curvature (an identity
    # metric): the k-step laws for k <= table_len, LAW_WIDTH numbers each
    # (M, the mean's response to beta = 1, the noise's Cholesky factor), then
    # the same followed by BAOAB's partial step; NULL otherwise
    const double* table
    long long table_len
    long long table_stride          # numbers a class's tables take
    int n_classes
    const double* class_a           # each class's untouched curvature (with the tables)


#: numbers a tabulated k-step law takes: M (4), mean per unit beta (2), Cholesky (3)
cdef enum:
    LAW_WIDTH = 9
#: the k-step laws tabulated when they are shared (k = 0 .. at most LAW_TABLE_LEN) ...
LAW_TABLE_LEN = 4096
#: ... in at most this many bytes for all scale classes together, and no
#: more than the coordinates' records take (a coordinate waits about
#: dim / (touches a step) steps between touches: the tables grow with dim)
LAW_TABLE_BYTES = 32 << 20
#: scale classes (8 per octave) beyond which the laws are not tabulated
MAX_SCALE_CLASSES = 256


#: normals made at a time by the vectorised stream (``normal_kernel.h``)
cdef enum:
    NORMAL_BLOCK = 4096


cdef struct Normals:
    # a buffer of standard normals refilled in blocks (~0.5 ns a number,
    # against ~8 ns for numpy's generator one at a time)
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


# ---------------------------------------------------------------- SGLD

cdef inline double _expm1(double x) noexcept nogil:
    """e^x - 1: its Taylor series to x^6 where |x| < 0.01 (relative error
    below 2e-16, without a libm call), else ``expm1``."""
    if fabs(x) < 0.01:
        return x * (1.0 + x * 0.5 * (1.0 + x * (1.0 / 3.0) * (1.0 + x * 0.25 * (
            1.0 + x * 0.2 * (1.0 + x * (1.0 / 6.0))))))
    return expm1(x)


cdef inline void _sgld_record(Coord* c, double o, double s, double g, double D, double A,
                              double alpha) noexcept nogil:
    """The untouched AR(1) of one SGLD coordinate in parameter units: ``a = 1 - o``,
    ``m = -A / alpha``, ``sd = D s / sqrt(o (2 - o))``; ``g`` the data term's
    factor on theta (divided by a where the touched step defers its noise)."""
    cdef double a = 1.0 - o
    c.k1 = a
    c.k2 = log1p(-o) if a > A_DEFER else NAN
    c.k3 = -A / alpha
    c.k4 = D * s / sqrt(o * (2.0 - o)) if o < 2.0 else NAN
    c.k5 = g / a if a > A_DEFER else g


cdef inline void _sgld_catch_up(Coord* c, long long k, Normals* rng) noexcept nogil:
    """theta after k untouched steps, exactly (one Gaussian draw):
    ``m + a^k (theta - m) + sd sqrt(1 - a^(2k)) xi``."""
    cdef double a = c.k1, ak, var, em
    if k <= 0:
        return
    if k == 1:
        ak = a
        var = (1.0 - a) * (1.0 + a)
    elif a > A_DEFER:
        em = _expm1(<double> k * c.k2)       # a^k - 1, accurate for a^k near 1
        ak = 1.0 + em
        var = -em * (2.0 + em)
    else:                                    # a stiff coordinate (a <= A_DEFER, maybe < 0)
        ak = pow(a, <double> k)
        var = 1.0 - ak * ak
    c.x = c.k3 + ak * (c.x - c.k3) + c.k4 * sqrt(var) * _normal(rng)


# ---------------------------------------------- SGHMC, ULD, BAOAB: 2 x 2 laws

cdef inline void _compose(Law* L, const Law* N) noexcept nogil:
    """L <- the law of L followed by N: x -> N.M (L.M x + L.u) + N.u, covariance
    N.M L.C N.M^T + N.C."""
    cdef const double* Q = N.M
    cdef double* P = L.M
    cdef double* C = L.C
    cdef double p00 = Q[0] * P[0] + Q[1] * P[2], p01 = Q[0] * P[1] + Q[1] * P[3]
    cdef double p10 = Q[2] * P[0] + Q[3] * P[2], p11 = Q[2] * P[1] + Q[3] * P[3]
    cdef double m0 = Q[0] * L.u[0] + Q[1] * L.u[1] + N.u[0]
    cdef double m1 = Q[2] * L.u[0] + Q[3] * L.u[1] + N.u[1]
    cdef double a0 = Q[0] * C[0] + Q[1] * C[1], a1 = Q[0] * C[1] + Q[1] * C[2]
    cdef double b0 = Q[2] * C[0] + Q[3] * C[1], b1 = Q[2] * C[1] + Q[3] * C[2]
    C[0] = a0 * Q[0] + a1 * Q[1] + N.C[0]
    C[1] = a0 * Q[2] + a1 * Q[3] + N.C[1]
    C[2] = b0 * Q[2] + b1 * Q[3] + N.C[2]
    P[0], P[1], P[2], P[3] = p00, p01, p10, p11
    L.u[0], L.u[1] = m0, m1


cdef inline void _law_set(Law* L, double m00, double m01, double m10, double m11, double u0,
                          double u1, double c00, double c01, double c11) noexcept nogil:
    L.M[0], L.M[1], L.M[2], L.M[3] = m00, m01, m10, m11
    L.u[0], L.u[1] = u0, u1
    L.C[0], L.C[1], L.C[2] = c00, c01, c11


cdef inline void _cholesky(const double* C, double* L) noexcept nogil:
    """The lower Cholesky factor (l11, l21, l22) of a 2 x 2 covariance
    (c00, c01, c11), a singular one (an SGHMC step's) included."""
    L[0] = sqrt(C[0]) if C[0] > 0.0 else 0.0
    L[1] = C[1] / L[0] if L[0] > 0.0 else 0.0
    L[2] = C[2] - L[1] * L[1]
    L[2] = sqrt(L[2]) if L[2] > 0.0 else 0.0


cdef void _tabulate(const Dyn* q, double a, double* out, long long n) noexcept nogil:
    """The k-step laws (k = 0 .. n) of a pair with untouched curvature ``a``
    and drift 1 (the mean is linear in beta), each as M, mean, Cholesky of
    the covariance; then the same followed by BAOAB's partial step."""
    cdef Law total, base, withpart, part
    cdef long long k
    cdef double* e
    _law_set(&total, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    one_step_law(&q.law, a, 1.0, False, &base)
    one_step_law(&q.law, a, 1.0, True, &part)
    for k in range(n + 1):
        withpart = total
        _compose(&withpart, &part)
        e = out + k * LAW_WIDTH
        e[0], e[1], e[2], e[3], e[4], e[5] = (total.M[0], total.M[1], total.M[2], total.M[3],
                                              total.u[0], total.u[1])
        _cholesky(total.C, e + 6)
        e = out + (n + 1 + k) * LAW_WIDTH
        e[0], e[1], e[2], e[3], e[4], e[5] = (withpart.M[0], withpart.M[1], withpart.M[2],
                                              withpart.M[3], withpart.u[0], withpart.u[1])
        _cholesky(withpart.C, e + 6)
        _compose(&total, &base)


cdef inline double _curv(const Coord* c, const Dyn* q) noexcept nogil:
    """A pair's untouched curvature a_j (its class's, where the laws are tabulated)."""
    return q.class_a[<intp> c.k1] if q.class_a != NULL else c.k1


cdef inline void _pair_catch_up(Coord* c, const Dyn* q, long long k, bint partial,
                                Normals* rng) noexcept nogil:
    """(z, r) after k untouched steps (and, with ``partial``, BAOAB's B A O A
    of the next), exactly: the k-step law from its scale class's table where
    there is one (O(1), inlined), else from binary powers of the one-step law
    (O(log k), :func:`_pair_catch_up_composed`), then one correlated Gaussian
    pair.  BAOAB's pending data term enters the first step's opening kick."""
    cdef double z0 = c.x, r0 = c.k2, x1, x2
    cdef const double* e
    if k <= 0 and not partial:
        return
    if q.law.kind == LAW_BAOAB and c.delta != 0.0:
        r0 -= 0.5 * q.law.h * q.sm * c.k5 * c.delta
        c.delta = 0.0
    if q.table != NULL and k <= q.table_len:
        e = (q.table + (<intp> c.k1) * q.table_stride
             + (k + (q.table_len + 1 if partial else 0)) * LAW_WIDTH)
        x1 = _normal(rng)
        x2 = _normal(rng)
        c.x = e[0] * z0 + e[1] * r0 + c.k3 * e[4] + e[6] * x1
        c.k2 = e[2] * z0 + e[3] * r0 + c.k3 * e[5] + e[7] * x1 + e[8] * x2
        return
    _pair_catch_up_composed(c, q, z0, r0, k, partial, rng)


cdef void _pair_catch_up_composed(Coord* c, const Dyn* q, double z0, double r0, long long k,
                                  bint partial, Normals* rng) noexcept nogil:
    """:func:`_pair_catch_up` without a table: compose the k-step law."""
    cdef double x1, x2, a = _curv(c, q)
    cdef Law total, base, twice, part
    if q.law.kind == LAW_SGHMC and k == 1:
        c.x, c.k2 = z0, r0
        pair_move(&q.law, &c.x, &c.k2, a, c.k3, _normal(rng), 0.0, False)
        return
    _law_set(&total, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    if k == 1:
        one_step_law(&q.law, a, c.k3, False, &total)
    elif k > 1:
        one_step_law(&q.law, a, c.k3, False, &base)
        while k:
            if k & 1:
                _compose(&total, &base)
            k >>= 1
            if k:
                twice = base
                _compose(&base, &twice)        # the base doubles
    if partial:
        one_step_law(&q.law, a, c.k3, True, &part)
        _compose(&total, &part)
    x1 = _normal(rng)
    x2 = _normal(rng)
    _cholesky(total.C, part.C)
    c.x = total.M[0] * z0 + total.M[1] * r0 + total.u[0] + part.C[0] * x1
    c.k2 = total.M[2] * z0 + total.M[3] * r0 + total.u[1] + part.C[1] * x1 + part.C[2] * x2


cdef inline void _catch_up(Coord* c, const Dyn* q, long long k, bint partial,
                           Normals* rng) noexcept nogil:
    if q.law.kind == LAW_SGLD:
        _sgld_catch_up(c, k, rng)
    else:
        _pair_catch_up(c, q, k, partial, rng)


cdef inline double _theta(const Coord* c, int kind) noexcept nogil:
    return c.x if kind == LAW_SGLD else c.k4 + c.k5 * c.x


cdef inline void _touched_step(Coord* c, const Dyn* q, long long t, Normals* rng) noexcept nogil:
    """The full step of a coordinate the minibatch touched (its data term in
    ``delta``), brought up to step t (BAOAB: to the closing kick of step t)."""
    cdef double x, v, g, xi1, xi2, a
    if q.law.kind == LAW_SGLD:
        if c.k1 > A_DEFER:
            # its noise deferred: one step behind, so the next catch-up draws it
            c.x -= c.k5 * c.delta
            c.last = t
        else:
            c.x = c.k3 + c.k1 * (c.x - c.k3) - c.k5 * c.delta \
                + c.k4 * sqrt((1.0 - c.k1) * (1.0 + c.k1)) * _normal(rng)
            c.last = t + 1
        c.delta = 0.0
        return
    x = c.x
    v = c.k2
    a = _curv(c, q)
    if q.law.kind == LAW_SGHMC:   # z moves with the old r, r with the gradient at z
        pair_move(&q.law, &c.x, &c.k2, a, c.k3 + q.sm * c.k5 * c.delta, _normal(rng), 0.0,
                  False)
        c.delta = 0.0
    elif q.law.kind == LAW_ULD:
        g = (a - q.law.kappa) * x + c.k3 + q.sm * c.k5 * c.delta
        xi1 = _normal(rng)
        xi2 = _normal(rng)
        uld_move(&c.x, &c.k2, g, xi1, xi2, &q.law)
        c.delta = 0.0
    else:                      # BAOAB's closing kick; delta stays for the next opening one
        c.k2 = kick(v, (a - q.law.kappa) * x + c.k3 + q.sm * c.k5 * c.delta, 0.5 * q.law.h)
    c.last = t + 1


cdef inline bint _far(const Coord* c, int kind, double max_abs_z, const double* center,
                      const double* scale, const double* bc, const double* bs, double max_sds,
                      intp j) noexcept nogil:
    """A state beyond the divergence bounds (|z_j| > max_abs_z, or theta_j
    more than max_sds bound sds from the bound centre)."""
    cdef double th = _theta(c, kind)
    if not isfinite(th):
        return True
    if isfinite(max_abs_z) and fabs(th - center[j]) > max_abs_z * scale[j]:
        return True
    return bs != NULL and fabs(th - bc[j]) > max_sds * bs[j]


cdef class LazyChain:
    """Lazy SGLD, SGHMC, ULD or BAOAB steps of one chain (see the module docstring).

    Built once per chain run from its estimator, prior, metric and dynamics
    (the per-coordinate recursions are computed here, O(dim)); then
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
    dynamics : SGLD, SGHMC, ULD or BAOAB
        The momentum (velocity) is read now and written back by
        :meth:`finish`; so is BAOAB's cached gradient (drawn afresh at the
        first step when the dynamics has none).
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
    cdef double[::1] center, scale
    cdef intp[::1] idx, touched
    cdef double[::1] zbuf, rbuf
    cdef Dyn q
    cdef double[::1] law_table      # the k-step laws each scale class shares, or empty
    cdef double[::1] class_a        # each class's untouched curvature
    cdef bint need_gradient         # BAOAB without a cached gradient: draw one first
    cdef object dynamics
    cdef long long t                # steps taken
    cdef _NormalSource noise        # the Gaussian draws (vectorised stream)

    def __init__(self, GradientEstimator estimator, double alpha, Metric metric, dynamics,
                 theta, seed=0):
        cdef GLMEstimator glm
        cdef bint diagonal
        cdef double sm, c_grad = 0.0
        cdef Dynamics dyn = dynamics
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
        self.q = _dyn_constants(dynamics, sm)
        if self.q.law.kind == LAW_SGLD:
            c_grad = dyn.law.c
            r0 = None
        else:                  # the momentum or velocity of a pair law
            r0 = np.asarray((<MomentumDynamics> dynamics).momentum)
        self.need_gradient = self.q.law.kind == LAW_BAOAB and not dyn.cache_valid
        # 64-byte aligned: each coordinate's record is exactly one cache line
        dtype = np.dtype([("x", "f8"), ("k1", "f8"), ("k2", "f8"), ("k3", "f8"),
                          ("k4", "f8"), ("k5", "f8"), ("delta", "f8"), ("last", "i8")])
        raw = np.empty(max(dim, 1) * dtype.itemsize + 64, dtype=np.uint8)
        offset = (-raw.ctypes.data) % 64
        self.coords_mem = raw[offset:offset + max(dim, 1) * dtype.itemsize].view(dtype)
        self.coords = &self.coords_mem[0]
        diagonal = metric.kind == METRIC_DIAGONAL
        self.center = (np.array(metric.center, dtype=np.float64) if diagonal
                       else np.zeros(max(dim, 1)))
        self.scale = (np.array(metric.diag, dtype=np.float64) if diagonal
                      else np.ones(max(dim, 1)))
        self._init_records(theta, r0, A, dyn, sm, alpha, c_grad)
        self.law_table = np.zeros(1)
        self.class_a = np.zeros(1)
        self.q.table = NULL
        self.q.class_a = NULL
        if self.q.law.kind != LAW_SGLD and dim > 0:
            self._tabulate_classes()
        self.idx = np.zeros(max(self.b, 1), dtype=np.intp)
        self.touched = np.zeros(max(dim, 1), dtype=np.intp)
        K = self.P.K
        self.zbuf = np.zeros(max(K, 1))
        self.rbuf = np.zeros(max(K, 1))
        self.t = 0
        self.noise = _NormalSource(seed)

    cdef _init_records(self, theta, r0, A, Dynamics dyn, double sm, double alpha,
                       double c_grad):
        """Every coordinate's record from the chain's state: the start
        ``theta`` (z units), the momentum or velocity ``r0`` (None for SGLD),
        the control variates' sum ``A`` and BAOAB's cached gradient."""
        cdef intp j, dim = self.dim
        cdef double Dj, cj, s = self.q.law.s
        cdef Coord* rec
        cdef const double[::1] zv, Av, rv, gv
        zv = np.ascontiguousarray(theta, dtype=np.float64)
        rv = np.ascontiguousarray(r0 if r0 is not None else np.zeros(max(dim, 1)),
                                  dtype=np.float64)
        gv = np.ascontiguousarray(dyn.cache_grad if self.q.law.kind == LAW_BAOAB and
                                  dyn.cache_valid else np.zeros(max(dim, 1)), dtype=np.float64)
        Av = np.ascontiguousarray(A, dtype=np.float64)
        for j in range(dim):
            Dj = self.scale[j]
            cj = self.center[j]
            rec = &self.coords[j]
            rec.delta = 0.0
            rec.last = 0
            if self.q.law.kind == LAW_SGLD:
                # the AR(1) in parameter units, read off the law's move (the
                # responses to a gradient and a draw): o = c s_m alpha D^2 from
                # the prior's curvature, the data term's factor c s_m D^2, noise D s
                _sgld_record(rec, -langevin_move(0.0, sm * alpha * Dj * Dj, 0.0, c_grad, s),
                             langevin_move(0.0, 0.0, 1.0, c_grad, s),
                             -langevin_move(0.0, sm * Dj * Dj, 0.0, c_grad, s), Dj, Av[j], alpha)
                rec.x = cj + Dj * zv[j]
            else:
                # the untouched gradient a z + beta (z units), and r
                rec.x = zv[j]
                rec.k1 = sm * alpha * Dj * Dj
                rec.k2 = rv[j]
                rec.k3 = sm * Dj * (alpha * cj + Av[j])
                rec.k4 = cj
                rec.k5 = Dj
                if self.q.law.kind == LAW_BAOAB and dyn.cache_valid:
                    # the cached gradient's data term, pending for the next opening kick
                    rec.delta = (gv[j] - rec.k1 * rec.x - rec.k3) / (sm * Dj)

    cdef _tabulate_classes(self):
        """Where the scales lie on the grid ``2^(i/8)`` (an identity metric, or
        a diagonal one from :func:`._kernel_rules.on_lazy_grid`) and span few classes, the
        coordinates of a class share their untouched curvature: tabulate its
        k-step laws once (O(1) catch-ups instead of O(log k) compositions)."""
        cdef intp j, c, length
        cdef long long stride
        cdef const double[::1] classes
        grid = LAZY_SCALE_GRID * np.log2(np.asarray(self.scale[:self.dim]))
        index = np.round(grid)
        if not np.all(np.abs(grid - index) < 1e-9):
            return
        lo, hi = int(index.min()), int(index.max())
        n_classes = hi - lo + 1
        if n_classes > MAX_SCALE_CLASSES:
            return
        budget = min(LAW_TABLE_BYTES, max(1 << 20, self.dim * sizeof(Coord)))
        length = int(max(64, min(LAW_TABLE_LEN, budget // (n_classes * 2 * LAW_WIDTH * 8) - 1)))
        stride = 2 * (length + 1) * LAW_WIDTH
        self.law_table = np.zeros(n_classes * stride)
        # each class's curvature from one of its coordinates (equal in all of them)
        first = np.full(n_classes, -1, dtype=np.intp)
        first[(index - lo).astype(np.intp)[::-1]] = np.arange(self.dim)[::-1]
        self.class_a = np.full(n_classes, np.nan)
        for c in range(n_classes):
            j = first[c]
            if j >= 0:
                self.class_a[c] = self.coords[j].k1
                _tabulate(&self.q, self.class_a[c], &self.law_table[c * stride], length)
        # each record now names its class (its curvature is the class's)
        classes = np.ascontiguousarray(index - lo, dtype=np.float64)
        for j in range(self.dim):
            self.coords[j].k1 = classes[j]
        self.q.class_a = &self.class_a[0]
        self.q.table = &self.law_table[0]
        self.q.table_len = length
        self.q.table_stride = stride
        self.q.n_classes = n_classes

    @property
    def tabulated_classes(self):
        """How many scale classes have their k-step laws tabulated (0: the
        laws are composed at each catch-up)."""
        return self.q.n_classes if self.q.table != NULL else 0

    cdef void _bring_all(self) noexcept nogil:
        cdef intp j
        cdef Coord* c
        for j in range(self.dim):
            c = &self.coords[j]
            _catch_up(c, &self.q, self.t - c.last, False, &self.noise.normals)
            c.last = self.t

    def finish(self, double[::1] theta):
        """Bring every coordinate up to date and write the state into ``theta``
        (and the momentum, velocity or cached gradient into the dynamics)."""
        cdef intp j
        cdef double[::1] r
        cdef Coord* c
        cdef Dynamics dyn = self.dynamics
        with nogil:
            self._bring_all()
            for j in range(self.dim):
                c = &self.coords[j]
                theta[j] = ((c.x - self.center[j]) / self.scale[j] if self.q.law.kind == LAW_SGLD
                            else c.x)
        if self.q.law.kind == LAW_SGLD:
            return
        r = (<MomentumDynamics> self.dynamics).momentum
        for j in range(self.dim):
            r[j] = self.coords[j].k2
        if self.q.law.kind == LAW_BAOAB and not self.need_gradient:
            for j in range(self.dim):
                c = &self.coords[j]
                dyn.cache_grad[j] = _curv(c, &self.q) * c.x + c.k3 + self.q.sm * c.k5 * c.delta
            dyn.cache_valid = True

    cdef void _first_gradient(self, bitgen_t* rng) noexcept nogil:
        """BAOAB's first opening kick needs a gradient at the start (as the
        eager loop draws one): its data term waits in ``delta``."""
        if self.need_gradient:
            self._draw_minibatch(rng)
            self._data_term()
            self.estimator.n_evals += self.b
            self.need_gradient = False

    cdef void _draw_minibatch(self, bitgen_t* rng) noexcept nogil:
        cdef intp jb, i, n = self.P.n
        for jb in range(self.b):
            i = <intp> random_interval(rng, n - 1)
            if self.access == ACCESS_WEIGHTED and \
                    random_standard_uniform(rng) >= self.alias_prob[i]:
                i = self.alias_index[i]
            self.idx[jb] = i
            row_prefetch(self.P.X, i)

    cdef void _data_term(self) noexcept nogil:
        """Each row's residuals at the current theta of its columns, and the
        estimator's term ``pi_i (w_i r_i - a_i) x_ij`` added to ``delta``."""
        cdef const ProblemStore* P = self.P
        cdef const RowStore* X = P.X
        cdef Coord* coords = self.coords
        cdef intp d = X.n_features, dext = X.dext, jb, i, p, p0, p1
        cdef int K = P.K, k, kind = self.q.law.kind
        cdef double* zb = &self.zbuf[0]
        cdef double* rb = &self.rbuf[0]
        cdef double v, w, x
        cdef double nb = <double> P.n / <double> self.b
        for jb in range(self.b):
            i = self.idx[jb]
            p0 = _row_start(X, i)
            p1 = _row_start(X, i + 1)
            for k in range(K):
                v = 0.0
                for p in range(p0, p1):
                    v += _value(X, p) * _theta(&coords[k * dext + _column(X, p)], kind)
                if dext > d:
                    v += _theta(&coords[k * dext + d], kind)
                zb[k] = v
            glm_residual(P.model, zb, K, P.y + i * P.y_stride, P.param, rb)
            # the estimator's term: importance weight times (w_i r_i - a_i)
            w = (self.inv_np[i] if self.access == ACCESS_WEIGHTED else 1.0) * nb
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

    def run(self, Py_ssize_t n_steps, Py_ssize_t thin=1, out=None, bit_generator=None,
            double max_abs_z=INFINITY, bounds=None, dict report=None, Py_ssize_t offset=0,
            StopPoll stop=None):
        """Advance by ``n_steps`` steps without the GIL.

        ``out`` receives every ``thin``-th state mapped to the parameters
        (all coordinates brought up to date and checked there); the touched
        coordinates are checked for finiteness at every step and against the
        bounds every 16.  On divergence the state is left as it is (the
        caller discards the chain).  ``offset`` and ``stop`` are those of
        :func:`._chain.run_segment` (a stop leaves the kernel unusable).

        Returns
        -------
        n_done, n_kept : int
        """
        cdef const ProblemStore* P = self.P
        cdef const RowStore* X = P.X
        cdef intp dim = self.dim, dext = X.dext, b = self.b
        cdef int K = P.K
        check_segment(out, dim, n_steps, thin, offset)
        cdef KeptRows kept = KeptRows(out)
        cdef bint keep = kept.first != NULL
        if stop is None:
            stop = StopPoll()
        cdef SegmentBounds limits = SegmentBounds(bounds, dim)
        cdef const double* bc = limits.center
        cdef const double* bs = limits.scale
        cdef double max_sds = limits.max_sds
        cdef bitgen_t* rng = <bitgen_t*> PyCapsule_GetPointer(bit_generator.capsule,
                                                              "BitGenerator")
        cdef Coord* coords = self.coords
        # a local copy, so that the compiler keeps its cursor in a register
        cdef Normals local_normals = self.noise.normals
        cdef Normals* nrm = &local_normals
        cdef const Dyn* q = &self.q
        cdef bint partial = q.law.kind == LAW_BAOAB
        cdef const double* center = &self.center[0]
        cdef const double* scale = &self.scale[0]
        cdef intp* idx = &self.idx[0]
        cdef intp* touched = &self.touched[0]
        cdef intp step, n_touched, n_kept = 0, n_done = 0
        cdef long long t
        cdef bint ok = True, finite = True, check, stopped = False
        with bit_generator.lock, nogil:
            self._first_gradient(rng)
            for step in range(n_steps):
                if stop.poll():
                    stopped = True
                    break
                t = self.t
                check = (t + 1) % CHECK_EVERY == 0
                # 1. the minibatch
                self._draw_minibatch(rng)
                # 2. bring its columns (and the intercepts) up to step t
                n_touched = _bring_up(coords, X, idx, b, K, dext, q, t, partial, nrm, touched)
                # 3. each row's residuals at the touched theta, and the data term
                self._data_term()
                # 4. their full step; every touched coordinate is checked
                ok = _step_touched(coords, touched, n_touched, q, t, nrm, check, max_abs_z,
                                   center, scale, bc, bs, max_sds, &finite)
                self.t = t + 1
                if not ok:
                    break
                # 5. a kept draw: every coordinate up to date and checked, straight
                # into the caller's row (it reads n_kept rows only, so a row left
                # half-written by a divergence is never seen)
                if keep and (offset + step + 1) % thin == 0:
                    if not _keep_state(coords, dim, q, self.t, nrm,
                                       kept.first + n_kept * kept.stride,
                                       max_abs_z, center, scale, bc, bs, max_sds, &finite):
                        ok = False
                        break
                    n_kept += 1
                n_done = step + 1
        self.noise.normals.pos = local_normals.pos
        self.estimator.n_evals += <long long> n_done * b
        _segment_end(stop, stopped, ok, finite, report)
        return n_done, n_kept


cdef inline intp _bring_up(Coord* coords, const RowStore* X, const intp* idx, intp b, int K,
                           intp dext, const Dyn* q, long long t, bint partial, Normals* nrm,
                           intp* touched) noexcept nogil:
    """Step 2 of :meth:`LazyChain.run`: the minibatch's columns (and the
    intercepts) brought up to step ``t`` (BAOAB: to the closing kick of step
    ``t``), each once, listed in ``touched``; returns how many.  Every
    coordinate's line is requested first, so that the misses of a large
    model overlap instead of queueing."""
    cdef intp jb, i, p, j, col, n_touched = 0, d = X.n_features
    cdef long long in_list = -(t + 1)
    cdef int k
    cdef Coord* c
    for jb in range(b):
        i = idx[jb]
        for p in range(_row_start(X, i), _row_start(X, i + 1)):
            for k in range(K):
                SKB_PREFETCH(&coords[k * dext + _column(X, p)])
    for jb in range(b):
        i = idx[jb]
        for p in range(_row_start(X, i), _row_start(X, i + 1)):
            col = _column(X, p)
            for k in range(K):
                j = k * dext + col
                c = &coords[j]
                if c.last != in_list:
                    _catch_up(c, q, t - c.last, partial, nrm)
                    c.last = in_list
                    touched[n_touched] = j
                    n_touched += 1
    if dext > d:
        for k in range(K):
            j = k * dext + d
            c = &coords[j]
            _catch_up(c, q, t - c.last, partial, nrm)
            c.last = in_list
            touched[n_touched] = j
            n_touched += 1
    return n_touched


cdef inline bint _step_touched(Coord* coords, const intp* touched, intp n_touched,
                               const Dyn* q, long long t, Normals* nrm, bint check,
                               double max_abs_z, const double* center, const double* scale,
                               const double* bc, const double* bs, double max_sds,
                               bint* finite) noexcept nogil:
    """Step 4 of :meth:`LazyChain.run`: the touched coordinates' full step,
    each checked for finiteness (and, at a ``check`` step, against its
    bounds).  False if one failed (``finite`` False if one is not finite)."""
    cdef intp jb, j
    cdef Coord* c
    cdef bint ok = True
    for jb in range(n_touched):
        j = touched[jb]
        c = &coords[j]
        _touched_step(c, q, t, nrm)
        if not isfinite(c.x) or (check and _far(c, q.law.kind, max_abs_z, center, scale,
                                                bc, bs, max_sds, j)):
            ok = False
            finite[0] = finite[0] and isfinite(c.x)
    return ok


cdef inline bint _keep_state(Coord* coords, intp dim, const Dyn* q, long long t, Normals* nrm,
                             double* params, double max_abs_z, const double* center,
                             const double* scale, const double* bc, const double* bs,
                             double max_sds, bint* finite) noexcept nogil:
    """Step 5 of :meth:`LazyChain.run`: every coordinate brought up to step
    ``t`` and its parameter written to ``params``; False where one is out of
    its bounds (``finite`` False where one is not finite)."""
    cdef intp j
    cdef bint ok = True
    cdef Coord* c
    cdef int kind = q.law.kind
    for j in range(dim):
        c = &coords[j]
        _catch_up(c, q, t - c.last, False, nrm)
        c.last = t
        params[j] = _theta(c, kind)
        if _far(c, kind, max_abs_z, center, scale, bc, bs, max_sds, j):
            ok = False
            finite[0] = finite[0] and isfinite(c.x)
    return ok


cdef Dyn _dyn_constants(dynamics, double sm) except *:
    """The kernel's constants of ``dynamics``: its law's coefficients (in the
    metric's coordinates) and the gradient scale ``sm``."""
    cdef Dyn q
    cdef Dynamics dyn = dynamics
    q.law = dyn.law
    q.table = NULL
    q.class_a = NULL
    q.table_len = q.table_stride = 0
    q.n_classes = 1
    q.sm = sm
    return q


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
    """``n_draws`` independent k-step catch-ups of one SGLD coordinate from
    ``z0`` (``z <- (1 - o) z + b + s xi``; identity metric): the testing twin
    of the kernel that brings an untouched coordinate up to date."""
    cdef double[::1] z = np.empty(n_draws)
    cdef _NormalSource noise = _NormalSource(seed)
    cdef Coord c
    cdef intp i
    # the record of a coordinate whose stationary mean is b / o (A = -alpha b / o, alpha 1)
    _sgld_record(&c, o, s, 0.0, 1.0, -b / o, 1.0)
    with nogil:
        for i in range(n_draws):
            c.x = z0
            _sgld_catch_up(&c, k, &noise.normals)
            z[i] = c.x
    return np.asarray(z)


def py_catch_up_pair(dynamics, double a, double beta, double z0, double r0, long long k,
                     Py_ssize_t n_draws, bint partial=False, double pending=0.0,
                     double scale=1.0, bint tabulated=False, seed=0):
    """``n_draws`` independent catch-ups of one SGHMC, ULD or BAOAB
    coordinate from ``(z0, r0)`` over k untouched steps (untouched gradient
    ``a z + beta``; BAOAB: a pending data term ``pending`` in the first
    opening kick, and with ``partial`` the B A O A of the next step): the
    testing twin of the kernel's catch-up (``tabulated``: from the table of
    shared k-step laws an identity metric uses).  Returns ``(z, r)`` arrays."""
    cdef double[::1] z = np.empty(n_draws)
    cdef double[::1] r = np.empty(n_draws)
    cdef _NormalSource noise = _NormalSource(seed)
    cdef Dyn q = _dyn_constants(dynamics, scale)
    cdef double[::1] table = np.empty(2 * (k + 1) * LAW_WIDTH if tabulated else 1)
    cdef double[::1] class_a = np.full(1, a)
    cdef Coord c
    cdef intp i
    if q.law.kind == LAW_SGLD:
        raise ValueError("py_catch_up_pair takes SGHMC, ULD or BAOAB; SGLD is py_catch_up")
    if tabulated:
        _tabulate(&q, a, &table[0], k)
        q.table = &table[0]
        q.table_len = k
        q.table_stride = 2 * (k + 1) * LAW_WIDTH
        q.class_a = &class_a[0]
    c.k1, c.k3, c.k4, c.k5 = (0.0 if tabulated else a), beta, 0.0, 1.0
    with nogil:
        for i in range(n_draws):
            c.x, c.k2, c.delta = z0, r0, pending
            _pair_catch_up(&c, &q, k, partial, &noise.normals)
            z[i] = c.x
            r[i] = c.k2
    return np.asarray(z), np.asarray(r)


def py_catch_up_momentum(double a, double beta, double h, double gamma, double s, double z0,
                         double r0, long long k, Py_ssize_t n_draws, bint tabulated=False,
                         seed=0):
    """``n_draws`` k-step catch-ups of one Euler SGHMC coordinate (noise
    ``s = sqrt(2 gamma T h)``): :func:`py_catch_up_pair` for SGHMC."""
    dynamics = SGHMC(1, h, s * s / (2.0 * gamma * h), gamma)
    return py_catch_up_pair(dynamics, a, beta, z0, r0, k, n_draws, tabulated=tabulated,
                            seed=seed)
