# cython: language_level=3
"""The chain driver: estimator + (optional EWSG index chain) + metric + dynamics.

:class:`ChainOracle` turns a :class:`GradientEstimator` into the gradient
oracle the dynamics call: the dynamics move ``z``, the oracle evaluates the
estimator at ``theta = center + L z`` (the :class:`~._metric.Metric`), adds
the exact prior gradient ``alpha theta`` and pulls the result back,
``g_z = s L^T g``.  When ``ewsg_chain_length`` M > 0 it chooses among M + 1
candidate minibatches with a Metropolis index chain targeting
``p_J ∝ exp(½||x + w_J||²)``, ``w_J = (c/s) ⊙ g_J`` whitened by the
dynamics' own transition (EWSG), in the dynamics' coordinates.  Because the
index chain only sees candidates, it runs over any base estimator (EWSG+VR
needs no second copy).

:func:`run_segment` runs ``n_steps`` steps in one ``nogil`` loop.
"""
from contextlib import ExitStack

import numpy as np

cimport numpy as cnp
from cpython.pycapsule cimport PyCapsule_GetPointer
from libc.math cimport exp, fabs, isfinite, INFINITY
from libc.string cimport memcpy
from numpy cimport npy_intp as intp
from numpy.random cimport bitgen_t
from numpy.random.c_distributions cimport random_standard_uniform

from ._dynamics cimport Dynamics
from ._interrupt cimport StopPoll
from ._estimators cimport Candidate, GradientEstimator
from ._metric cimport Metric, METRIC_IDENTITY
from ._oracle cimport GradientOracle
from ._group cimport ChainGroup, GroupTask

cnp.import_array()

from ._dynamics cimport EWSG_X_AUTO, EWSG_X_ZERO, EWSG_X_ONE, EWSG_X_MOMENTUM_STOP

from ._kernel_rules import EWSG_CYCLIC_MESSAGE, EWSG_X_MODES

if EWSG_X_MODES != {"auto": EWSG_X_AUTO, "zero": EWSG_X_ZERO, "one": EWSG_X_ONE,
                    "momentum-stop": EWSG_X_MOMENTUM_STOP}:
    raise ImportError("_kernel_rules.EWSG_X_MODES differs from the EWSG_X_* codes "
                      "of _dynamics.pxd: rebuild, or make them agree")


cdef class _CandidateBuffer:
    """Owns the arrays a :c:type:`Candidate` points into."""
    cdef Candidate c
    cdef intp[::1] idx
    cdef double[::1] resid
    cdef double[::1] grad

    def __init__(self, Py_ssize_t capacity, Py_ssize_t K, Py_ssize_t dim):
        self.idx = np.zeros(max(capacity, 1), dtype=np.intp)
        self.resid = np.zeros(max(capacity * K, 1))
        self.grad = np.zeros(max(dim, 1))
        self.c.idx = &self.idx[0]
        self.c.resid = &self.resid[0]
        self.c.grad = &self.grad[0]
        self.c.size = 0


cdef class ChainOracle(GradientOracle):
    """Gradient oracle of one chain.

    Parameters
    ----------
    estimator : GradientEstimator
    alpha : float
        Prior precision: the oracle returns ``alpha theta + estimate``
        (pulled back to the metric's coordinates).
    ewsg_chain_length : int
        M; 0 disables EWSG (one candidate per gradient).
    dynamics : Dynamics or None
        Needed when M > 0 (its transition whitens the candidates).
    ewsg_x : int
        A value of ``EWSG_X_MODES``.
    metric : Metric or None
        The coordinates the dynamics move in (None: the identity).
    potential : bool, default=False
        Also compute the potential (``gradient_potential``; exact estimators
        only: the Metropolis correction).
    """
    cdef GradientEstimator estimator
    cdef Dynamics dynamics
    cdef Metric metric
    cdef double alpha
    cdef intp dim
    cdef int ewsg_M
    cdef int ewsg_x
    cdef bint potential   # the Metropolis correction asks for the potential
    cdef _CandidateBuffer buf_a, buf_b
    cdef double[::1] scale, shift
    cdef double[::1] theta_buf, zgrad_a, zgrad_b
    cdef int width
    cdef public long long ewsg_accepted, ewsg_proposed
    # checked at every gradient while run_segment runs (a Metropolis trajectory
    # makes up to 1,024 gradients a step): once stopped, gradients are zero
    cdef StopPoll stop
    cdef bint stop_on

    def __init__(self, GradientEstimator estimator, double alpha, int ewsg_chain_length=0,
                 Dynamics dynamics=None, int ewsg_x=EWSG_X_AUTO, Metric metric=None,
                 bint potential=False):
        cdef Py_ssize_t K = estimator.P.K
        self.estimator = estimator
        self.alpha = alpha
        self.dim = estimator.P.dim
        self.ewsg_M = ewsg_chain_length
        self.ewsg_x = ewsg_x
        if ewsg_chain_length > 0 and dynamics is None:
            raise ValueError("EWSG needs the dynamics to whiten candidates")
        if ewsg_chain_length > 0 and estimator.deterministic_access:
            raise ValueError(EWSG_CYCLIC_MESSAGE)
        if ewsg_chain_length > 0 and ewsg_x == EWSG_X_MOMENTUM_STOP and not dynamics.has_momentum:
            raise ValueError("ewsg_x='momentum-stop' needs a sampler with momentum")
        if potential and ewsg_chain_length > 0:
            raise ValueError("the potential needs exact gradients, not EWSG candidates")
        if potential:
            estimator.request_potential(True)
        self.potential = potential
        self.metric = Metric(self.dim) if metric is None else metric
        if self.metric.dim != self.dim:
            raise ValueError("the metric has %d coordinates, the model %d"
                             % (self.metric.dim, self.dim))
        self.dynamics = dynamics
        self.buf_a = _CandidateBuffer(estimator.max_batch, K, self.dim)
        self.buf_b = _CandidateBuffer(estimator.max_batch, K, self.dim)
        width = dynamics.ewsg_width if dynamics is not None else 1
        self.width = width
        self.scale = np.zeros(max(self.dim * width, 1))
        self.shift = np.zeros(max(self.dim * width, 1))
        self.theta_buf = np.zeros(max(self.dim, 1))
        self.zgrad_a = np.zeros(max(self.dim, 1))
        self.zgrad_b = np.zeros(max(self.dim, 1))

    cdef inline double _log_weight(self, const double* gz) noexcept nogil:
        # ½||x + w_J||² with w_J = (c/s) ⊙ g_J in the dynamics' coordinates
        cdef intp j, m
        cdef double s = 0.0, v
        for m in range(self.width):
            for j in range(self.dim):
                v = self.shift[m * self.dim + j] + self.scale[m * self.dim + j] * gz[j]
                s += v * v
        return 0.5 * s

    cdef inline const double* _theta(self, const double* z) noexcept nogil:
        if self.metric.kind == METRIC_IDENTITY:
            return z
        self.metric.to_theta(z, &self.theta_buf[0])
        return &self.theta_buf[0]

    cdef inline void _pull_back(self, const double* theta, const double* g, double* out) noexcept nogil:
        # out = L^T (alpha theta + g) (times the metric's scale)
        cdef intp j
        for j in range(self.dim):
            out[j] = self.alpha * theta[j] + g[j]
        self.metric.grad_to_z(out)

    cdef void gradient(self, const double* z, double* grad) noexcept nogil:
        cdef Candidate* cur = &self.buf_a.c
        cdef Candidate* prop = &self.buf_b.c
        cdef Candidate* tmp
        cdef double* zc = &self.zgrad_a[0]
        cdef double* zp = &self.zgrad_b[0]
        cdef double* ztmp
        cdef double lw_cur, lw_prop
        cdef intp j
        cdef int m
        cdef const double* theta
        if self.stop_on and self.stop.poll():
            # the step is abandoned (its chain is discarded): finish it cheaply
            for j in range(self.dim):
                grad[j] = 0.0
            return
        theta = self._theta(z)
        # a trajectory's inner gradients need no potential (only its end does:
        # gradient_potential); for the logistic model it costs a log1p and an
        # exp a row, a quarter of the pass
        self.estimator.with_potential = False
        self.estimator.begin_step(theta)
        self.estimator.candidate(theta, cur)
        if self.ewsg_M > 0:
            self.dynamics.ewsg_whitening(z, &self.scale[0], &self.shift[0], self.ewsg_x)
            if self.ewsg_x == EWSG_X_ZERO or self.ewsg_x == EWSG_X_ONE:
                for j in range(self.dim * self.width):
                    self.shift[j] = 0.0 if self.ewsg_x == EWSG_X_ZERO else 1.0
            self._pull_back(theta, cur.grad, zc)
            lw_cur = self._log_weight(zc)
            for m in range(self.ewsg_M):
                self.estimator.candidate(theta, prop)
                self._pull_back(theta, prop.grad, zp)
                lw_prop = self._log_weight(zp)
                self.ewsg_proposed += 1
                if lw_prop >= lw_cur or random_standard_uniform(self.estimator.rng) < exp(lw_prop - lw_cur):
                    tmp = cur
                    cur = prop
                    prop = tmp
                    ztmp = zc
                    zc = zp
                    zp = ztmp
                    lw_cur = lw_prop
                    self.ewsg_accepted += 1
            self.estimator.commit(theta, cur)
            memcpy(grad, zc, self.dim * sizeof(double))
        else:
            self.estimator.commit(theta, cur)
            self._pull_back(theta, cur.grad, grad)
        self.n_evals = self.estimator.n_evals

    cdef double gradient_potential(self, const double* z, double* grad) noexcept nogil:
        cdef Candidate* cur = &self.buf_a.c
        cdef const double* theta
        cdef double sq = 0.0
        cdef intp j
        if self.stop_on and self.stop.poll():
            for j in range(self.dim):
                grad[j] = 0.0
            return 0.0
        theta = self._theta(z)
        self.estimator.with_potential = self.potential
        self.estimator.begin_step(theta)
        self.estimator.candidate(theta, cur)
        self.estimator.commit(theta, cur)
        self._pull_back(theta, cur.grad, grad)
        self.n_evals = self.estimator.n_evals
        for j in range(self.dim):
            sq += theta[j] * theta[j]
        return self.metric.scale * (cur.potential + 0.5 * self.alpha * sq)

    def py_gradient(self, theta, bit_generator):
        """Draw one gradient estimate at ``theta`` (the metric's coordinates;
        testing twin)."""
        cdef double[::1] th = np.ascontiguousarray(theta, dtype=np.float64)
        out = np.empty(self.dim)
        cdef double[::1] ov = out
        cdef bitgen_t* rng = _get_bitgen(bit_generator)
        with bit_generator.lock, nogil:
            self.estimator.rng = rng
            self.gradient(&th[0], &ov[0])
        return out

    def py_gradient_potential(self, theta, bit_generator):
        """``(potential, gradient)`` at ``theta`` (exact oracles; testing twin)."""
        cdef double[::1] th = np.ascontiguousarray(theta, dtype=np.float64)
        out = np.empty(self.dim)
        cdef double[::1] ov = out
        cdef double u
        cdef bitgen_t* rng = _get_bitgen(bit_generator)
        with bit_generator.lock, nogil:
            self.estimator.rng = rng
            u = self.gradient_potential(&th[0], &ov[0])
        return u, out

    @property
    def metric(self):
        return self.metric


cdef bitgen_t* _get_bitgen(bit_generator) except NULL:
    capsule = bit_generator.capsule
    return <bitgen_t*> PyCapsule_GetPointer(capsule, "BitGenerator")


cdef inline bint _state_ok(const double* z, intp n, double max_abs_z, const double* theta,
                           const double* center, const double* scale, double max_sds) noexcept nogil:
    """Finite; every ``|z_j| <= max_abs_z``; and, with ``scale``, every
    ``|theta_j - center_j| <= max_sds * scale_j``."""
    cdef intp j
    for j in range(n):
        if not isfinite(z[j]) or fabs(z[j]) > max_abs_z:
            return False
    if scale != NULL:
        for j in range(n):
            if not isfinite(theta[j]) or fabs(theta[j] - center[j]) > max_sds * scale[j]:
                return False
    return True


cdef inline bint _all_finite(const double* z, intp n) noexcept nogil:
    cdef intp j
    for j in range(n):
        if not isfinite(z[j]):
            return False
    return True


def check_segment(out, Py_ssize_t dim, Py_ssize_t n_steps, Py_ssize_t thin, Py_ssize_t offset,
                  Py_ssize_t check_every=1):
    """A segment's arguments (:func:`run_segment`, ``LazyChain.run``): thin
    and check_every >= 1, offset >= 0, ``out`` (or None) with ``dim``
    columns and a row for every state kept; ValueError otherwise."""
    if thin < 1 or check_every < 1 or offset < 0:
        raise ValueError("thin and check_every must be >= 1, offset >= 0")
    if out is not None and (out.shape[1] != dim
                            or out.shape[0] < (offset + n_steps) // thin - offset // thin):
        raise ValueError("out has the wrong shape")


cdef class SegmentBounds:
    """A chain's bounds ``(center, scale, max_sds)`` (the mode, its Laplace
    sds, how many of them a state may stray) as C pointers over float64
    arrays of ``dim`` values, for the kernels' nogil checks; NULL pointers
    and ``max_sds`` inf without bounds (``bounds=None``)."""

    def __init__(self, bounds, Py_ssize_t dim):
        cdef const double[::1] c, s
        self.center = NULL
        self.scale = NULL
        self.max_sds = INFINITY
        if bounds is None:
            return
        self.center_arr = np.ascontiguousarray(bounds[0], dtype=np.float64)
        self.scale_arr = np.ascontiguousarray(bounds[1], dtype=np.float64)
        if self.center_arr.shape[0] != dim or self.scale_arr.shape[0] != dim:
            raise ValueError("bounds must have dim values")
        c, s = self.center_arr, self.scale_arr
        self.center, self.scale = &c[0], &s[0]
        self.max_sds = float(bounds[2])


cdef class KeptRows:
    """The rows of ``out`` (float64, C-contiguous, or None) a segment writes
    its kept states into: ``first`` points at row 0 (NULL without rows) and
    ``stride`` doubles separate two rows."""

    def __init__(self, out):
        cdef double[:, ::1] view
        self.first = NULL
        self.stride = 0
        if out is None:
            return
        view = out
        self.rows = out
        self.stride = view.strides[0] // sizeof(double)
        if view.shape[0]:
            self.first = &view[0, 0]


cdef intp _advance(ChainOracle oracle, Dynamics dynamics, Metric metric, StopPoll stop,
                   bitgen_t* rng,
                   double* theta, double* last_good, double* params, intp dim, intp n_steps,
                   intp thin, intp offset, intp check_every, double max_abs_z,
                   const double* c_ptr, const double* s_ptr, double max_sds, double* out,
                   intp out_stride, intp* n_kept, bint* ok, bint* finite,
                   bint* stopped) noexcept nogil:
    """:func:`run_segment`'s steps: until ``n_steps``, a stop (``stopped``)
    or a state out of its bounds (``ok`` False, ``theta`` back to the last
    good state); kept states written to ``out`` (rows ``out_stride`` apart,
    NULL: none kept).  Returns the steps done."""
    cdef intp s, n_done = 0
    cdef bint keep = out != NULL, check
    for s in range(n_steps):
        if stop.poll():
            stopped[0] = True
            break
        dynamics.step(theta, oracle, rng)
        if stop.stopped:
            stopped[0] = True
            break
        check = (keep and (offset + s + 1) % thin == 0) or (s + 1) % check_every == 0 \
            or s + 1 == n_steps
        if check:
            if s_ptr != NULL or keep:
                metric.to_theta(theta, params)
            if not _state_ok(theta, dim, max_abs_z, params, c_ptr, s_ptr, max_sds):
                ok[0] = False
                finite[0] = _all_finite(theta, dim)
                break
            if keep and (offset + s + 1) % thin == 0:
                memcpy(out + n_kept[0] * out_stride, params, dim * sizeof(double))
                n_kept[0] += 1
            memcpy(last_good, theta, dim * sizeof(double))
        n_done = s + 1
    if not ok[0]:
        memcpy(theta, last_good, dim * sizeof(double))
    return n_done


def run_segment(ChainOracle oracle, Dynamics dynamics, double[::1] theta,
                Py_ssize_t n_steps, Py_ssize_t thin=1, out=None, bit_generator=None,
                Py_ssize_t check_every=16, double max_abs_z=INFINITY, bounds=None,
                dict report=None, Py_ssize_t offset=0, StopPoll stop=None):
    """Advance one chain by ``n_steps`` steps without the GIL.

    Parameters
    ----------
    oracle : ChainOracle
    dynamics : Dynamics
    theta : ndarray of shape (dim,)
        The chain's state in the metric's coordinates ``z``; updated in place.
    n_steps : int
    thin : int
        With ``out``: keep every ``thin``-th state.
    out : ndarray of shape ((offset + n_steps) // thin - offset // thin, dim) or None
        Where kept states are written, mapped to the model's parameters
        (``center + L z``).
    bit_generator : numpy.random.BitGenerator
        Source of every random number of this chain.
    check_every : int
        Steps between checks of the state (every kept state is checked too).
    max_abs_z : float, default=inf
        A state with a coordinate ``|z_j|`` above it counts as diverged (in a
        whitened metric ``z`` is about N(0, I) under the posterior: a chain far
        outside it has blown up even while it stays finite).
    bounds : tuple (center, scale, max_sds) or None
        A state whose parameters leave ``center +- max_sds * scale`` (the
        mode and its Laplace marginal sds) counts as diverged too.
    report : dict, optional
        On divergence receives ``"reason"``: ``"non-finite"`` or ``"far"``.
    offset : int, default=0
        Steps the chain made before this call (segments need not be
        multiples of ``thin``): the states kept are those after step
        ``s + 1`` with ``(offset + s + 1) % thin == 0``.
    stop : StopPoll or None
        Checked at every gradient and step (None: a new one, which runs the
        signal handlers when called from the main thread).  Ctrl-C in the
        main thread raises ``KeyboardInterrupt`` from here within a gradient;
        a stop flag returns early with ``stop.stopped`` set.  Either way the
        chain's state is unspecified (the caller discards it).

    Returns
    -------
    n_done : int
        Steps completed; less than ``n_steps`` only when the state became
        non-finite or left its bounds (theta then holds the last good state),
        or on a stop.
    n_kept : int
        Rows of ``out`` written (all good).
    """
    cdef intp dim = theta.shape[0]
    check_segment(out, dim, n_steps, thin, offset, check_every)
    cdef KeptRows kept = KeptRows(out)
    if stop is None:
        stop = StopPoll()
    cdef bitgen_t* rng = _get_bitgen(bit_generator)
    cdef double[::1] last_good = np.array(theta)
    cdef double[::1] params = np.zeros(max(dim, 1))
    cdef SegmentBounds limits = SegmentBounds(bounds, dim)
    cdef intp n_kept = 0, n_done = 0
    cdef bint ok = True, finite = True, stopped = False
    cdef Metric metric = oracle.metric
    oracle.stop = stop
    oracle.stop_on = True
    try:
        with bit_generator.lock, nogil:
            oracle.estimator.rng = rng
            n_done = _advance(oracle, dynamics, metric, stop, rng, &theta[0], &last_good[0],
                              &params[0],
                              dim, n_steps, thin, offset, check_every, max_abs_z,
                              limits.center, limits.scale, limits.max_sds, kept.first,
                              kept.stride, &n_kept, &ok, &finite, &stopped)
    finally:
        oracle.stop_on = False
        oracle.stop = None
    _segment_end(stop, stopped, ok, finite, report)
    return n_done, n_kept


cdef class _SegmentTask(GroupTask):
    """One chain's :func:`run_segment` steps inside a :class:`ChainGroup`."""
    cdef ChainOracle oracle
    cdef Dynamics dynamics
    cdef StopPoll stop
    cdef object bit_generator
    cdef bitgen_t* rng
    cdef double[::1] theta, last_good, params
    cdef SegmentBounds limits
    cdef KeptRows kept
    cdef intp n_steps, thin, offset, check_every, n_kept, n_done
    cdef double max_abs_z
    cdef bint ok, finite, stopped

    cdef void run(self) noexcept nogil:
        self.n_done = _advance(self.oracle, self.dynamics, self.oracle.metric, self.stop,
                               self.rng, &self.theta[0], &self.last_good[0], &self.params[0],
                               self.theta.shape[0], self.n_steps, self.thin, self.offset,
                               self.check_every, self.max_abs_z, self.limits.center,
                               self.limits.scale, self.limits.max_sds, self.kept.first,
                               self.kept.stride, &self.n_kept, &self.ok, &self.finite,
                               &self.stopped)


def _segment_task(ChainGroup group, ChainOracle oracle, Dynamics dynamics, double[::1] theta,
                  Py_ssize_t n_steps, Py_ssize_t thin, out, bit_generator,
                  Py_ssize_t check_every, double max_abs_z, bounds, Py_ssize_t offset):
    cdef _SegmentTask task = _SegmentTask()
    cdef intp dim = theta.shape[0]
    check_segment(out, dim, n_steps, thin, offset, check_every)
    task.oracle, task.dynamics, task.theta = oracle, dynamics, theta
    task.bit_generator = bit_generator
    task.rng = _get_bitgen(bit_generator)
    task.last_good = np.array(theta)
    task.params = np.zeros(max(dim, 1))
    task.limits = SegmentBounds(bounds, dim)
    task.kept = KeptRows(out)
    task.n_steps, task.thin, task.offset, task.check_every = n_steps, thin, offset, check_every
    task.max_abs_z = max_abs_z
    task.n_kept = task.n_done = 0
    task.ok, task.finite, task.stopped = True, True, False
    # the members see a stop through the group's flag (no signal handler
    # runs on a member's stack: the scheduler runs them)
    task.stop = StopPoll(group.stop_flag, signals=False)
    return task


def run_group_segment(ChainGroup group, oracles, dynamics, thetas, Py_ssize_t n_steps,
                      Py_ssize_t thin=1, outs=None, bit_generators=None,
                      Py_ssize_t check_every=16, double max_abs_z=INFINITY, bounds=None,
                      reports=None, Py_ssize_t offset=0, StopPoll stop=None):
    """:func:`run_segment` for the chains of a group, in lockstep: every
    full-data pass serves all of them (:mod:`._group`), and each chain's
    draws are the ones it makes alone.

    The arguments are :func:`run_segment`'s, one per chain in a list
    (``oracles``, ``dynamics``, ``thetas``, ``outs``, ``bit_generators``,
    ``reports``), except ``stop``: one for the group, polled between passes.
    Each chain's estimator is a :class:`._group.GroupedFullGradient` of
    ``group``.

    Returns
    -------
    list of (n_done, n_kept)
        Per chain, as :func:`run_segment`.
    """
    cdef _SegmentTask task
    n = len(oracles)
    outs = [None] * n if outs is None else outs
    reports = [None] * n if reports is None else reports
    if stop is None:
        stop = StopPoll()
    tasks = [_segment_task(group, oracles[c], dynamics[c], thetas[c], n_steps, thin, outs[c],
                           bit_generators[c], check_every, max_abs_z, bounds, offset)
             for c in range(n)]
    with ExitStack() as locks:
        for task in tasks:
            locks.enter_context(task.bit_generator.lock)
            task.oracle.stop, task.oracle.stop_on = task.stop, True
            task.oracle.estimator.rng = task.rng
        try:
            group.run(tasks, [task.oracle.estimator for task in tasks], stop)
        finally:
            for task in tasks:
                task.oracle.stop_on, task.oracle.stop = False, None
    for c, task in enumerate(tasks):
        # a Ctrl-C the scheduler saw is raised here (stop's pending exception)
        _segment_end(stop, task.stopped or stop.stopped, task.ok, task.finite, reports[c])
    return [(task.n_done, task.n_kept) for task in tasks]


def _segment_end(StopPoll stop, bint stopped, bint ok, bint finite, dict report):
    """After a segment: Ctrl-C raised (``KeyboardInterrupt``), and the reason
    of an early end in ``report``."""
    if stopped:
        stop.raise_pending()
        if report is not None:
            report["reason"] = "stopped"
    elif not ok and report is not None:
        report["reason"] = "far" if finite else "non-finite"
