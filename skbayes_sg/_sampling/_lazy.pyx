# cython: language_level=3
"""Lazy, exact SGLD on sparse rows: O(nnz) a step instead of O(dim).

On CSR data a minibatch touches only the columns of its rows.  Between two
touches a coordinate ``z_j`` moves under the prior alone (and the constant
drift of a control variate's sum ``A_j``): in a diagonal or identity metric
``theta_j = c_j + D_j z_j`` its SGLD step is the linear Gaussian recursion

    z_j <- a_j z_j + b_j + s xi,     a_j = 1 - o_j,  o_j = c s_m alpha D_j^2,
                                      b_j = -c s_m D_j (alpha c_j + A_j),

(``c``, ``s`` the dynamics' gradient and noise coefficients, ``s_m`` the
metric's scale), whose k-step law is exact in closed form (AR(1)):

    z_j <- a^k z_j + b (1 - a^k) / o + s sqrt((1 - a^(2k)) / (o (2 - o))) xi.

A coordinate is brought up to date only when a row of the minibatch touches
it, before its residuals are computed, and every coordinate at a kept draw
and at the end of a segment: the chain has the same law, step for step, as
the eager loop of :func:`._chain.run_segment` (not the same random numbers).
The touched coordinates then take their full step with the minibatch's data
term.  The dynamics whose untouched coordinates follow such a recursion and
are implemented here: SGLD (Euler, or the exponential integrator of a
whitened metric, non-Metropolis).  The others (momentum dynamics: a 2 x 2
recursion per coordinate; pSGLD, whose preconditioner moves with every
gradient; Metropolis-adjusted steps; dense metrics, which mix all
coordinates) run the eager loop.
"""
import numpy as np

from cpython.pycapsule cimport PyCapsule_GetPointer
from libc.math cimport exp, expm1, log1p, sqrt, pow, isfinite, fabs, INFINITY
from libc.string cimport memcpy
from numpy cimport npy_intp as intp
from numpy.random cimport bitgen_t
from numpy.random.c_distributions cimport (random_interval, random_standard_normal,
                                           random_standard_uniform)

from ._dataset cimport RowStore, CSR, row_axpy
from ._dynamics cimport SGLD
from ._estimators cimport (ProblemStore, GradientEstimator, GLMEstimator, UniformSubsampling,
                           datum_residual, ACCESS_RANDOM, ACCESS_WEIGHTED, CONTROL_NONE,
                           CONTROL_FIXED)
from ._metric cimport Metric, METRIC_IDENTITY, METRIC_DIAGONAL


def lazy_supported(GradientEstimator estimator, dynamics, Metric metric, int ewsg_chain_length=0):
    """Whether :func:`run_segment_lazy` can run this chain (else the eager loop).

    CSR rows; SGLD without a Metropolis correction; an identity or diagonal
    metric; no EWSG index chain; uniform minibatches with replacement, or a
    fixed control variate and/or fixed importance weights (``"cv"``,
    ``"preferential"``, ``"cv-preferential"``), at a fixed batch size.
    """
    cdef GLMEstimator glm
    cdef UniformSubsampling uni
    if estimator.P.X.layout != CSR or ewsg_chain_length > 0:
        return False
    if type(dynamics) is not SGLD or dynamics.metropolis:
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


cdef struct Recursion:
    # per-coordinate AR(1) of an untouched coordinate (see the module docstring)
    double* o           # 1 - a
    double* log_a       # log(a) (o < 1)
    double* b
    double s            # the dynamics' noise coefficient


cdef inline void _catch_up(const Recursion* R, double* z, intp j, long long k,
                           bitgen_t* rng) noexcept nogil:
    """Apply k untouched steps to z_j exactly (one Gaussian draw)."""
    cdef double o = R.o[j], ak, one_m_ak, one_m_a2k
    if k <= 0:
        return
    if o < 1.0:
        ak = exp(<double> k * R.log_a[j])
        one_m_ak = -expm1(<double> k * R.log_a[j])
    else:  # a <= 0 (a step beyond the stiffest direction's half period)
        ak = pow(1.0 - o, <double> k)
        one_m_ak = 1.0 - ak
    one_m_a2k = one_m_ak * (1.0 + ak)
    z[j] = (ak * z[j] + R.b[j] * one_m_ak / o
            + R.s * sqrt(one_m_a2k / (o * (2.0 - o))) * random_standard_normal(rng))


def run_segment_lazy(GradientEstimator estimator, double alpha, Metric metric, SGLD dynamics,
                     double[::1] theta, Py_ssize_t n_steps, Py_ssize_t thin=1, out=None,
                     bit_generator=None, double max_abs_z=INFINITY, bounds=None,
                     dict report=None):
    """Advance one SGLD chain by ``n_steps`` lazy steps without the GIL.

    The same contract as :func:`._chain.run_segment` (``theta`` is the state
    ``z`` in the metric's coordinates, updated in place; ``out`` receives kept
    draws mapped to the parameters), for the chains :func:`lazy_supported`
    accepts.  Every touched coordinate is checked at every step, every
    coordinate at every kept draw and at the end; on divergence ``theta``
    is set back to the segment's starting state.

    Returns
    -------
    n_done, n_kept : int
    """
    if not lazy_supported(estimator, dynamics, metric):
        raise ValueError("this estimator, dynamics or metric has no lazy kernel")
    cdef const ProblemStore* P = estimator.P
    cdef const RowStore* X = P.X
    cdef intp dim = P.dim, d = X.n_features, dext = X.dext
    cdef int K = P.K
    if theta.shape[0] != dim:
        raise ValueError("theta must have %d values" % dim)
    cdef double[:, ::1] out_v
    cdef bint keep = out is not None
    if keep:
        out_v = out
        if out_v.shape[1] != dim or out_v.shape[0] < n_steps // thin:
            raise ValueError("out has the wrong shape")
    if thin < 1:
        raise ValueError("thin must be >= 1")

    # ---- the estimator's settings
    cdef intp b
    cdef int access = ACCESS_RANDOM, control = CONTROL_NONE
    cdef GLMEstimator glm
    cdef double[::1] A = np.zeros(dim)
    cdef double[::1] table = np.zeros(1)
    cdef double[::1] inv_np = np.zeros(1)
    cdef double[::1] alias_prob = np.zeros(1)
    cdef intp[::1] alias_index = np.zeros(1, dtype=np.intp)
    if isinstance(estimator, GLMEstimator):
        glm = estimator
        b = glm.batch_size
        access, control = glm.access, glm.control
        if control == CONTROL_FIXED:
            A = glm.A
            table = glm.table
        if access == ACCESS_WEIGHTED:
            inv_np, alias_prob, alias_index = glm.inv_np, glm.alias_prob, glm.alias_index
    else:
        b = (<UniformSubsampling> estimator).batch_size

    # ---- per-coordinate recursion of an untouched coordinate
    cdef double c = dynamics.c_grad, s = dynamics.c_noise, sm = metric.scale
    D_arr = (np.asarray(metric.diag) if metric.kind == METRIC_DIAGONAL else np.ones(dim))
    c_arr = (np.asarray(metric.center)[:dim] if metric.kind == METRIC_DIAGONAL
             else np.zeros(dim))
    o_arr = c * sm * alpha * D_arr ** 2
    if not np.all(o_arr > 0):
        raise ValueError("the lazy kernel needs alpha > 0")
    cdef double[::1] o = o_arr
    cdef double[::1] log_a = np.log1p(-np.where(o_arr < 1.0, o_arr, 0.0))
    cdef double[::1] bvec = -c * sm * D_arr * (alpha * c_arr + np.asarray(A))
    cdef double[::1] Dv = D_arr
    cdef double[::1] cv = c_arr
    cdef double[::1] kstep = c * sm * D_arr     # multiplies the data term of a touched step
    cdef Recursion R
    R.o = &o[0]
    R.log_a = &log_a[0]
    R.b = &bvec[0]
    R.s = s

    # ---- bounds
    cdef double[::1] bc, bs
    cdef const double* c_ptr = NULL
    cdef const double* s_ptr = NULL
    cdef double max_sds = INFINITY
    if bounds is not None:
        bc = np.ascontiguousarray(bounds[0], dtype=np.float64)
        bs = np.ascontiguousarray(bounds[1], dtype=np.float64)
        if bc.shape[0] != dim or bs.shape[0] != dim:
            raise ValueError("bounds must have dim values")
        max_sds = bounds[2]
        c_ptr = &bc[0]
        s_ptr = &bs[0]

    # ---- work arrays
    cdef double[::1] start = np.array(theta)                 # restored on divergence
    cdef double[::1] params = np.zeros(max(dim, 1))          # theta of touched coordinates
    cdef double[::1] delta = np.zeros(max(dim, 1))           # sum_i w_i (r_i - a_i) x_i
    cdef long long[::1] last = np.zeros(max(dim, 1), dtype=np.int64)
    cdef long long[::1] mark = np.full(max(dim, 1), -1, dtype=np.int64)
    cdef intp[::1] idx = np.zeros(max(b, 1), dtype=np.intp)
    cdef intp[::1] touched = np.zeros(max(dim, 1), dtype=np.intp)
    cdef double[::1] zbuf = np.zeros(max(K, 1))
    cdef double[::1] rbuf = np.zeros(max(K, 1))
    cdef bitgen_t* rng = <bitgen_t*> PyCapsule_GetPointer(bit_generator.capsule, "BitGenerator")

    cdef double* z = &theta[0]
    cdef intp n = P.n, t, jb, i, p, p0, p1, col, j, q, n_touched, n_kept = 0, n_done = 0
    cdef int k
    cdef double w, inv_b = 1.0 / <double> b
    cdef bint ok = True, finite = True
    with bit_generator.lock, nogil:
        for t in range(n_steps):
            # 1. the minibatch
            for jb in range(b):
                i = <intp> random_interval(rng, n - 1)
                if access == ACCESS_WEIGHTED and random_standard_uniform(rng) >= alias_prob[i]:
                    i = alias_index[i]
                idx[jb] = i
            # 2. bring its columns (and the intercepts) up to step t
            n_touched = 0
            for jb in range(b):
                i = idx[jb]
                p0 = _row_start(X, i)
                p1 = _row_start(X, i + 1)
                for p in range(p0, p1):
                    col = _column(X, p)
                    for k in range(K):
                        j = k * dext + col
                        if mark[j] != t:
                            mark[j] = t
                            _catch_up(&R, z, j, t - last[j], rng)
                            params[j] = cv[j] + Dv[j] * z[j]
                            touched[n_touched] = j
                            n_touched += 1
            if dext > d:
                for k in range(K):
                    j = k * dext + d
                    _catch_up(&R, z, j, t - last[j], rng)
                    params[j] = cv[j] + Dv[j] * z[j]
                    mark[j] = t
                    touched[n_touched] = j
                    n_touched += 1
            # 3. the data term of the touched coordinates
            for jb in range(b):
                i = idx[jb]
                datum_residual(P, i, &params[0], &zbuf[0], &rbuf[0])
                w = (inv_np[i] if access == ACCESS_WEIGHTED else 1.0) * <double> n * inv_b
                for k in range(K):
                    if control == CONTROL_FIXED:
                        rbuf[k] = w * (rbuf[k] - table[i * K + k])
                    else:
                        rbuf[k] = w * rbuf[k]
                row_axpy(X, i, &rbuf[0], K, &delta[0])
            # 4. their full step; every touched coordinate is checked
            for q in range(n_touched):
                j = touched[q]
                z[j] = (1.0 - o[j]) * z[j] + bvec[j] - kstep[j] * delta[j] \
                    + s * random_standard_normal(rng)
                delta[j] = 0.0
                last[j] = t + 1
                if not isfinite(z[j]) or fabs(z[j]) > max_abs_z or (
                        s_ptr != NULL and fabs(cv[j] + Dv[j] * z[j] - c_ptr[j]) > max_sds * s_ptr[j]):
                    ok = False
            if not ok:
                for q in range(n_touched):
                    if not isfinite(z[touched[q]]):
                        finite = False
                break
            # 5. a kept draw (and the end): every coordinate up to date, checked
            if (keep and (t + 1) % thin == 0) or t + 1 == n_steps:
                for j in range(dim):
                    _catch_up(&R, z, j, t + 1 - last[j], rng)
                    last[j] = t + 1
                    params[j] = cv[j] + Dv[j] * z[j]
                    if not isfinite(z[j]) or fabs(z[j]) > max_abs_z or (
                            s_ptr != NULL and fabs(params[j] - c_ptr[j]) > max_sds * s_ptr[j]):
                        ok = False
                        finite = isfinite(z[j])
                        break
                if not ok:
                    break
                if keep and (t + 1) % thin == 0:
                    memcpy(&out_v[n_kept, 0], &params[0], dim * sizeof(double))
                    n_kept += 1
            n_done = t + 1
        if not ok:
            memcpy(z, &start[0], dim * sizeof(double))
    estimator.n_evals += <long long> n_done * b
    if not ok and report is not None:
        report["reason"] = "far" if finite else "non-finite"
    return n_done, n_kept


def py_catch_up(double o, double b, double s, double z0, long long k, Py_ssize_t n_draws,
                bit_generator):
    """``n_draws`` independent k-step catch-ups of one coordinate from ``z0``
    (``a = 1 - o``, drift ``b``, noise ``s``): the testing twin of the kernel
    that brings an untouched coordinate up to date."""
    cdef double[::1] z = np.full(n_draws, z0)
    cdef double[::1] ov = np.full(n_draws, o)
    cdef double[::1] lv = np.full(n_draws, np.log1p(-o) if o < 1.0 else 0.0)
    cdef double[::1] bv = np.full(n_draws, b)
    cdef Recursion R
    cdef intp i
    cdef bitgen_t* rng = <bitgen_t*> PyCapsule_GetPointer(bit_generator.capsule, "BitGenerator")
    R.o = &ov[0]
    R.log_a = &lv[0]
    R.b = &bv[0]
    R.s = s
    with bit_generator.lock, nogil:
        for i in range(n_draws):
            _catch_up(&R, &z[0], i, k, rng)
    return np.asarray(z)
