# cython: language_level=3
"""Chains in lockstep: one pass over the rows serves every chain of a group.

On sparse rows a full-data gradient is a gather (``x_i . theta``) and a
scatter (``grad += r_i x_i``) per stored value, and their cost is the loads of
the index and the value, not the arithmetic.  With the parameters of several
chains side by side (``block[j * m + c]``: coordinate j of chain c), one load
of each serves every chain: on 100,000 text rows x 10^4 features, 4 chains
cost about a third of 4 separate passes (C, this project's machine).

The chains keep their own loops: each runs :func:`._chain.run_group_segment`'s
steps (its dynamics, checks and kept draws, as alone) on a stack of its own
(a cooperative coroutine, glibc's ``ucontext``).  At a gradient its estimator
(:class:`GroupedFullGradient`) posts the parameters and switches to the
group's scheduler, which runs every chain until it posts (or ends), makes one
pass for all the posted gradients and switches back to each.  Nothing
runs concurrently (one thread), so nothing is locked.

Each chain's sums are taken in the same order as alone, so its draws are
bit-identical to the chain run alone: grouping changes the time, not the
result.  Where there are no coroutines (``COROUTINES`` False: Windows, musl,
macOS) nothing groups.

The scheduler runs the interpreter's signal handlers (Ctrl-C) on the
thread's own stack, between passes, and stops the members through a flag
they poll: no Python runs on a member's stack, except the holding of its
task object at its start and end.
"""
import numpy as np

from libc.stdlib cimport malloc, free
from libc.string cimport memset, memcmp

from ._dataset cimport RowStore, CSR, floating_t, index_t
from ._models cimport LOGISTIC
from ._estimators cimport (SIGMOID_BLOCK, datum_potential, datum_residual_at,
                           logistic_block_potentials, logistic_block_residuals)

#: glibc's ucontext is there: chains of one thread can run in lockstep
COROUTINES = bool(SKB_COROUTINES)
#: a member's stack (its loop, the metric's BLAS calls; pages untouched cost nothing)
STACK_BYTES = 1 << 20
cdef size_t _STACK = STACK_BYTES


cdef class GroupTask:
    """One chain's share of a group: :meth:`run` is its loop (subclasses)."""

    cdef void run(self) noexcept nogil:
        pass


cdef void _task_entry() noexcept nogil:
    _run_task(skb_entry())


cdef void _run_task(void* task) noexcept with gil:
    # the GIL only to hold the task object; its loop runs without it.  On
    # return the context goes back to the scheduler (uc_link).
    cdef GroupTask t = <GroupTask> task
    with nogil:
        t.run()


cdef class ChainGroup:
    """The scheduler of up to ``MAX_GROUP`` chains over one data set.

    Parameters
    ----------
    first : FullGradient
        A member's estimator: the rows, targets and model every member reads.
    size : int
        Chains in the group.
    """

    def __cinit__(self):
        cdef int i
        for i in range(MAX_GROUP):
            self.stacks[i] = NULL

    def __init__(self, FullGradient first, int size):
        cdef int i
        if not COROUTINES:
            raise RuntimeError("chains run in lockstep only where glibc's ucontext is")
        if not 1 <= size <= MAX_GROUP:
            raise ValueError("a group holds 1 to %d chains, not %d" % (MAX_GROUP, size))
        if first.P.X.layout != CSR or first.P.K != 1:
            raise ValueError("a group shares passes over sparse rows of one output")
        self.size = size
        self.P = first.P
        self._first = first
        self.flag = np.zeros(1, dtype=np.int32)
        self.block = np.zeros(max(first.P.dim * size, 1))
        self.grads = np.zeros(max(first.P.dim * size, 1))
        for i in range(size):
            self.stacks[i] = <char*> malloc(_STACK)
            if self.stacks[i] == NULL:
                raise MemoryError()

    def __dealloc__(self):
        cdef int i
        for i in range(MAX_GROUP):
            free(self.stacks[i])

    @property
    def stop_flag(self):
        """The int32 flag the members' :class:`StopPoll` reads."""
        return np.asarray(self.flag)

    def _check_member(self, FullGradient est):
        cdef const ProblemStore* Q = est.P
        cdef const ProblemStore* P = self.P
        same = (Q.X.values64 == P.X.values64 and Q.X.values32 == P.X.values32
                and Q.X.indices32 == P.X.indices32 and Q.X.indices64 == P.X.indices64
                and Q.X.fit_intercept == P.X.fit_intercept and Q.n == P.n and Q.dim == P.dim
                and Q.model == P.model and Q.K == P.K and Q.y_stride == P.y_stride
                and memcmp(Q.param, P.param, sizeof(P.param)) == 0
                and (Q.y == P.y or memcmp(Q.y, P.y, P.n * P.y_stride * sizeof(double)) == 0)
                and (Q.weight == NULL) == (P.weight == NULL)
                and (Q.weight == P.weight
                     or memcmp(Q.weight, P.weight, P.n * sizeof(double)) == 0))
        if not same:
            raise ValueError("every chain of a group must read the same rows and targets")

    def run(self, tasks, estimators, StopPoll stop):
        """Run every task's loop to its end, the gradients of its estimator
        (``estimators[i]``, a :class:`GroupedFullGradient`) in shared passes.

        ``stop`` is polled between passes (in the main thread it runs the
        signal handlers); once it says stop, the members are told through
        :attr:`stop_flag`.  Returns ``stop.stopped``."""
        cdef int i, n = len(tasks), waiting
        cdef void* ptrs[MAX_GROUP]
        cdef GroupedFullGradient est
        if n > self.size or len(estimators) != n:
            raise ValueError("%d tasks for a group of %d" % (n, self.size))
        self.flag[0] = 0
        for i in range(n):
            self._check_member(estimators[i])
        try:
            for i in range(n):
                est = estimators[i]
                (<GroupTask> tasks[i]).group = self
                (<GroupTask> tasks[i]).slot = i
                est.group, est.slot = self, i
                ptrs[i] = <void*> tasks[i]
                self.posted[i] = False
            with nogil:
                for i in range(n):
                    skb_start(&self.contexts[i], &self.scheduler, self.stacks[i], _STACK,
                              _task_entry, ptrs[i])
                while True:
                    waiting = 0
                    for i in range(n):
                        waiting += self.posted[i]
                    if waiting == 0:
                        break                     # every loop has ended
                    self._evaluate_posted()
                    if stop.poll():
                        self.flag[0] = 1
                    for i in range(n):
                        if self.posted[i]:
                            self.posted[i] = False
                            skb_switch(&self.scheduler, &self.contexts[i])
        finally:
            for est in estimators:
                est.group = None
        return stop.stopped

    def py_gradients(self, thetas, potential=False):
        """One shared pass at each row of ``thetas`` (testing twin): the data
        gradients (m, dim) and, with ``potential``, the potentials (m,)."""
        cdef double[:, ::1] th = np.ascontiguousarray(thetas, dtype=np.float64)
        cdef int c, m = th.shape[0]
        if not 1 <= m <= self.size or th.shape[1] != self.P.dim:
            raise ValueError("thetas must be (1..%d, %d)" % (self.size, self.P.dim))
        grads = np.zeros((m, self.P.dim))
        cdef double[:, ::1] gv = grads
        cdef Candidate cs[MAX_GROUP]
        for c in range(m):
            cs[c].grad = &gv[c, 0]
            cs[c].size = 0
            self.thetas[c] = &th[c, 0]
            self.candidates[c] = &cs[c]
            self.potentials[c] = potential
            self.posted[c] = True
        for c in range(m, self.size):
            self.posted[c] = False
        with nogil:
            self._evaluate_posted()
        for c in range(m):
            self.posted[c] = False
        return grads, np.array([cs[c].potential for c in range(m)])

    cdef void request(self, int slot, const double* theta, Candidate* c,
                      bint potential) noexcept nogil:
        """A member's gradient at ``theta`` into ``c`` (and its potential when
        asked): posted, then the scheduler runs until the pass is made."""
        self.thetas[slot] = theta
        self.candidates[slot] = c
        self.potentials[slot] = potential
        self.posted[slot] = True
        skb_switch(&self.contexts[slot], &self.scheduler)

    cdef void _evaluate_posted(self) noexcept nogil:
        cdef int slots[MAX_GROUP]
        cdef bint want[MAX_GROUP]
        cdef double u[MAX_GROUP]
        cdef int i, c, m = 0
        cdef intp j, dim = self.P.dim
        cdef const RowStore* X = self.P.X
        cdef double* block = &self.block[0]
        cdef double* grads = &self.grads[0]
        cdef Candidate* cand
        for i in range(self.size):
            if self.posted[i]:
                slots[m] = i
                want[m] = self.potentials[i]
                u[m] = 0.0
                m += 1
        for c in range(m):
            for j in range(dim):
                block[j * m + c] = self.thetas[slots[c]][j]
        memset(grads, 0, dim * m * sizeof(double))
        if X.is_f32:
            if X.idx_is_64:
                _csr_pass(X.values32, X.indices64, X.indptr64, self.P, block, grads, m, want, u)
            else:
                _csr_pass(X.values32, X.indices32, X.indptr32, self.P, block, grads, m, want, u)
        elif X.idx_is_64:
            _csr_pass(X.values64, X.indices64, X.indptr64, self.P, block, grads, m, want, u)
        else:
            _csr_pass(X.values64, X.indices32, X.indptr32, self.P, block, grads, m, want, u)
        for c in range(m):
            cand = self.candidates[slots[c]]
            for j in range(dim):
                cand.grad[j] = grads[j * m + c]
            cand.potential = u[c]
        self.n_batches += 1
        self.n_requests += m


cdef extern from *:
    """
    /* A row's gather (z_c = x_i . theta_c) and scatter (grad_c += r_c x_i)
       for m chains side by side, each chain's sum in the order of
       _dataset.pxd's _sparse_dot / _sparse_axpy.  A constant m per case, so
       that the chains' loop unrolls and its sums stay in registers. */
    #define SKB_GATHER_M(M) do { \
        double s_[M]; int c_; npy_intp p_; \
        for (c_ = 0; c_ < (M); c_++) s_[c_] = 0.0; \
        for (p_ = start; p_ < end; p_++) { \
            double x_ = values[p_]; const double* b_ = block + (npy_intp)indices[p_] * (M); \
            for (c_ = 0; c_ < (M); c_++) s_[c_] += x_ * b_[c_]; \
        } \
        for (c_ = 0; c_ < (M); c_++) z[c_] = s_[c_]; \
    } while (0)
    #define SKB_SCATTER_M(M) do { \
        double a_[M]; int c_; npy_intp p_; \
        for (c_ = 0; c_ < (M); c_++) a_[c_] = r[c_]; \
        for (p_ = start; p_ < end; p_++) { \
            double x_ = values[p_]; double* g_ = grads + (npy_intp)indices[p_] * (M); \
            for (c_ = 0; c_ < (M); c_++) g_[c_] += a_[c_] * x_; \
        } \
    } while (0)
    #define SKB_ROW_KERNELS(SUFFIX, VT, IT) \
    static inline void skb_gather_##SUFFIX(const VT* values, const IT* indices, npy_intp start, \
                                           npy_intp end, const double* block, int m, double* z) { \
        switch (m) { \
        case 1: SKB_GATHER_M(1); break; case 2: SKB_GATHER_M(2); break; \
        case 3: SKB_GATHER_M(3); break; case 4: SKB_GATHER_M(4); break; \
        default: { int c; npy_intp p; for (c = 0; c < m; c++) z[c] = 0.0; \
            for (p = start; p < end; p++) for (c = 0; c < m; c++) \
                z[c] += values[p] * block[(npy_intp)indices[p] * m + c]; } \
        } \
    } \
    static inline void skb_scatter_##SUFFIX(const VT* values, const IT* indices, npy_intp start, \
                                            npy_intp end, double* grads, int m, const double* r) { \
        switch (m) { \
        case 1: SKB_SCATTER_M(1); break; case 2: SKB_SCATTER_M(2); break; \
        case 3: SKB_SCATTER_M(3); break; case 4: SKB_SCATTER_M(4); break; \
        default: { int c; npy_intp p; for (p = start; p < end; p++) for (c = 0; c < m; c++) \
                grads[(npy_intp)indices[p] * m + c] += r[c] * values[p]; } \
        } \
    }
    SKB_ROW_KERNELS(f64_i32, double, int)
    SKB_ROW_KERNELS(f64_i64, double, long long)
    SKB_ROW_KERNELS(f32_i32, float, int)
    SKB_ROW_KERNELS(f32_i64, float, long long)
    """
    void skb_gather_f64_i32(const double* values, const int* indices, intp start, intp end,
                            const double* block, int m, double* z) noexcept nogil
    void skb_gather_f64_i64(const double* values, const long long* indices, intp start,
                            intp end, const double* block, int m, double* z) noexcept nogil
    void skb_gather_f32_i32(const float* values, const int* indices, intp start, intp end,
                            const double* block, int m, double* z) noexcept nogil
    void skb_gather_f32_i64(const float* values, const long long* indices, intp start,
                            intp end, const double* block, int m, double* z) noexcept nogil
    void skb_scatter_f64_i32(const double* values, const int* indices, intp start, intp end,
                             double* grads, int m, const double* r) noexcept nogil
    void skb_scatter_f64_i64(const double* values, const long long* indices, intp start,
                             intp end, double* grads, int m, const double* r) noexcept nogil
    void skb_scatter_f32_i32(const float* values, const int* indices, intp start, intp end,
                             double* grads, int m, const double* r) noexcept nogil
    void skb_scatter_f32_i64(const float* values, const long long* indices, intp start,
                             intp end, double* grads, int m, const double* r) noexcept nogil


cdef inline void _gather(const floating_t* values, const index_t* indices, intp start, intp end,
                         const double* block, int m, double* z) noexcept nogil:
    if floating_t is double:
        if index_t is int:
            skb_gather_f64_i32(values, indices, start, end, block, m, z)
        else:
            skb_gather_f64_i64(values, indices, start, end, block, m, z)
    else:
        if index_t is int:
            skb_gather_f32_i32(values, indices, start, end, block, m, z)
        else:
            skb_gather_f32_i64(values, indices, start, end, block, m, z)


cdef inline void _scatter(const floating_t* values, const index_t* indices, intp start, intp end,
                          double* grads, int m, const double* r) noexcept nogil:
    if floating_t is double:
        if index_t is int:
            skb_scatter_f64_i32(values, indices, start, end, grads, m, r)
        else:
            skb_scatter_f64_i64(values, indices, start, end, grads, m, r)
    else:
        if index_t is int:
            skb_scatter_f32_i32(values, indices, start, end, grads, m, r)
        else:
            skb_scatter_f32_i64(values, indices, start, end, grads, m, r)


cdef void _csr_pass(const floating_t* values, const index_t* indices, const index_t* indptr,
                    const ProblemStore* P, const double* block, double* grads, int m,
                    const bint* want, double* u) noexcept nogil:
    # FullGradient.evaluate of a one-output problem for m chains at once, each
    # chain's sums in the same order as alone (row_dot, datum_residual1,
    # row_axpy): the same bits
    cdef intp i, start, end
    cdef intp icpt = P.X.n_features * m
    cdef bint fit_intercept = P.X.fit_intercept
    cdef int c
    cdef bint any_zero, any_potential = False
    cdef double z[MAX_GROUP]
    cdef double r[MAX_GROUP]
    if P.model == LOGISTIC:
        _csr_pass_logistic(values, indices, indptr, P, block, grads, m, want, u)
        return
    for c in range(m):
        any_potential = any_potential or want[c]
    for i in range(P.n):
        start = indptr[i]
        end = indptr[i + 1]
        _gather(values, indices, start, end, block, m, z)
        any_zero = False
        for c in range(m):
            if fit_intercept:
                z[c] += block[icpt + c]
            r[c] = datum_residual_at(P, i, z[c])
            any_zero = any_zero or r[c] == 0.0
        if any_potential:
            for c in range(m):
                if want[c]:
                    u[c] += datum_potential(P, i, z[c])
        _scatter_row(values, indices, start, end, grads, m, r, any_zero, fit_intercept, icpt)


cdef void _csr_pass_logistic(const floating_t* values, const index_t* indices,
                             const index_t* indptr, const ProblemStore* P, const double* block,
                             double* grads, int m, const bint* want, double* u) noexcept nogil:
    # _csr_pass of the logistic model: a block of rows' predictors, their
    # residuals in one vectorised loop, their scatter (as _logistic_pass
    # alone, each chain's sums in its order: the same bits)
    cdef intp i, i0, k, rows
    cdef intp icpt = P.X.n_features * m
    cdef bint fit_intercept = P.X.fit_intercept
    cdef int c
    cdef bint any_zero, any_potential = False
    cdef double z[SIGMOID_BLOCK * MAX_GROUP]
    cdef double r[SIGMOID_BLOCK * MAX_GROUP]
    cdef double pot[SIGMOID_BLOCK * MAX_GROUP]
    for c in range(m):
        any_potential = any_potential or want[c]
    i0 = 0
    while i0 < P.n:
        rows = min(<intp> SIGMOID_BLOCK, P.n - i0)
        for k in range(rows):
            i = i0 + k
            _gather(values, indices, indptr[i], indptr[i + 1], block, m, &z[k * m])
            if fit_intercept:
                for c in range(m):
                    z[k * m + c] += block[icpt + c]
        logistic_block_residuals(P, i0, rows, m, z, r)
        if any_potential:
            logistic_block_potentials(P, i0, rows, m, z, pot)
        for k in range(rows):
            i = i0 + k
            if any_potential:
                for c in range(m):
                    if want[c]:
                        u[c] += pot[k * m + c]
            any_zero = False
            for c in range(m):
                any_zero = any_zero or r[k * m + c] == 0.0
            _scatter_row(values, indices, indptr[i], indptr[i + 1], grads, m, &r[k * m],
                         any_zero, fit_intercept, icpt)
        i0 += rows


cdef inline void _scatter_row(const floating_t* values, const index_t* indices, intp start,
                              intp end, double* grads, int m, const double* r, bint any_zero,
                              bint fit_intercept, intp icpt) noexcept nogil:
    # a row's r_c x_i into every chain's gradient, as row_axpy: a zero
    # residual (rare) adds nothing
    cdef int c
    if any_zero:
        _scatter_skipping_zeros(values, indices, start, end, grads, m, r, fit_intercept, icpt)
        return
    _scatter(values, indices, start, end, grads, m, r)
    if fit_intercept:
        for c in range(m):
            grads[icpt + c] += r[c]


cdef void _scatter_skipping_zeros(const floating_t* values, const index_t* indices, intp start,
                                  intp end, double* grads, int m, const double* r,
                                  bint fit_intercept, intp icpt) noexcept nogil:
    cdef intp p, base
    cdef int c
    for p in range(start, end):
        base = indices[p] * m
        for c in range(m):
            if r[c] != 0.0:
                grads[base + c] += r[c] * values[p]
    if fit_intercept:
        for c in range(m):
            if r[c] != 0.0:
                grads[icpt + c] += r[c]


cdef class GroupedFullGradient(FullGradient):
    """:class:`FullGradient` whose passes, while its :class:`ChainGroup`
    runs, serve every chain of the group (the same values, bit for bit)."""

    cdef void candidate(self, const double* theta, Candidate* c) noexcept nogil:
        if self.group is None:
            FullGradient.candidate(self, theta, c)
            return
        c.size = 0
        self.group.request(self.slot, theta, c, self.with_potential)
        self.n_evals += self.P.n
