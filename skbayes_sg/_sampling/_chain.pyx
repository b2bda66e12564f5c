# cython: language_level=3
"""The chain driver: estimator + (optional EWSG index chain) + dynamics.

:class:`ChainOracle` turns a :class:`GradientEstimator` into the gradient
oracle the dynamics call: it adds the exact prior gradient ``alpha theta``,
and, when ``ewsg_chain_length`` M > 0, chooses among M + 1 candidate
minibatches with a Metropolis index chain targeting
``p_J ∝ exp(½||x + w_J||²)``, ``w_J = (c/s) ⊙ g_J`` whitened by the
dynamics' own transition (EWSG).  Because the index chain only sees
candidates, it runs over any base estimator (EWSG+VR needs no second copy).

:func:`run_segment` runs ``n_steps`` steps in one ``nogil`` loop.
"""
import numpy as np

cimport numpy as cnp
from cpython.pycapsule cimport PyCapsule_GetPointer
from libc.math cimport exp, isfinite
from libc.string cimport memcpy
from numpy cimport npy_intp as intp
from numpy.random cimport bitgen_t
from numpy.random.c_distributions cimport random_standard_uniform

from ._dynamics cimport Dynamics
from ._estimators cimport Candidate, GradientEstimator
from ._oracle cimport GradientOracle

cnp.import_array()

from ._dynamics cimport EWSG_X_AUTO, EWSG_X_ZERO, EWSG_X_ONE, EWSG_X_MOMENTUM_STOP

#: why EWSG cannot run over cyclic minibatches
EWSG_CYCLIC_MESSAGE = (
    "EWSG's index chain is a Metropolis chain whose proposals must be random "
    "minibatches; with access='cyclic' the candidates are the next blocks in a "
    "fixed order, so the chain keeps comparing the same neighbours and never "
    "targets its weights (with M = 1 half the blocks are never used). Use "
    "access='random' or 'reshuffle' with EWSG.")

#: ``ewsg_x`` names -> codes (EWSG paper Fig. 1c)
EWSG_X_MODES = {"auto": EWSG_X_AUTO, "zero": EWSG_X_ZERO, "one": EWSG_X_ONE,
                "momentum-stop": EWSG_X_MOMENTUM_STOP}


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
        Prior precision: the oracle returns ``alpha theta + estimate``.
    ewsg_chain_length : int
        M; 0 disables EWSG (one candidate per gradient).
    dynamics : Dynamics or None
        Needed when M > 0 (its transition whitens the candidates).
    ewsg_x : int
        A value of ``EWSG_X_MODES``.
    """
    cdef GradientEstimator estimator
    cdef Dynamics dynamics
    cdef double alpha
    cdef intp dim
    cdef int ewsg_M
    cdef int ewsg_x
    cdef _CandidateBuffer buf_a, buf_b
    cdef double[::1] scale, shift
    cdef int width
    cdef public long long ewsg_accepted, ewsg_proposed

    def __init__(self, GradientEstimator estimator, double alpha, int ewsg_chain_length=0,
                 Dynamics dynamics=None, int ewsg_x=EWSG_X_AUTO):
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
        self.dynamics = dynamics
        self.buf_a = _CandidateBuffer(estimator.max_batch, K, self.dim)
        self.buf_b = _CandidateBuffer(estimator.max_batch, K, self.dim)
        width = dynamics.ewsg_width if dynamics is not None else 1
        self.width = width
        self.scale = np.zeros(max(self.dim * width, 1))
        self.shift = np.zeros(max(self.dim * width, 1))

    cdef inline double _log_weight(self, const double* theta, const double* g) noexcept nogil:
        # ½||x + w_J||² with w_J = (c/s) ⊙ (alpha theta + g_J)
        cdef intp j, m
        cdef double s = 0.0, v
        for m in range(self.width):
            for j in range(self.dim):
                v = self.shift[m * self.dim + j] + self.scale[m * self.dim + j] * (
                    self.alpha * theta[j] + g[j])
                s += v * v
        return 0.5 * s

    cdef void gradient(self, const double* theta, double* grad) noexcept nogil:
        cdef Candidate* cur = &self.buf_a.c
        cdef Candidate* prop = &self.buf_b.c
        cdef Candidate* tmp
        cdef double lw_cur, lw_prop
        cdef intp j
        cdef int m
        self.estimator.begin_step(theta)
        self.estimator.candidate(theta, cur)
        if self.ewsg_M > 0:
            self.dynamics.ewsg_whitening(&self.scale[0], &self.shift[0], self.ewsg_x)
            if self.ewsg_x == EWSG_X_ZERO or self.ewsg_x == EWSG_X_ONE:
                for j in range(self.dim * self.width):
                    self.shift[j] = 0.0 if self.ewsg_x == EWSG_X_ZERO else 1.0
            lw_cur = self._log_weight(theta, cur.grad)
            for m in range(self.ewsg_M):
                self.estimator.candidate(theta, prop)
                lw_prop = self._log_weight(theta, prop.grad)
                self.ewsg_proposed += 1
                if lw_prop >= lw_cur or random_standard_uniform(self.estimator.rng) < exp(lw_prop - lw_cur):
                    tmp = cur
                    cur = prop
                    prop = tmp
                    lw_cur = lw_prop
                    self.ewsg_accepted += 1
        self.estimator.commit(theta, cur)
        for j in range(self.dim):
            grad[j] = self.alpha * theta[j] + cur.grad[j]
        self.n_evals = self.estimator.n_evals

    def py_gradient(self, theta, bit_generator):
        """Draw one gradient estimate at ``theta`` (testing twin)."""
        cdef double[::1] th = np.ascontiguousarray(theta, dtype=np.float64)
        out = np.empty(self.dim)
        cdef double[::1] ov = out
        cdef bitgen_t* rng = _get_bitgen(bit_generator)
        with bit_generator.lock, nogil:
            self.estimator.rng = rng
            self.gradient(&th[0], &ov[0])
        return out


cdef bitgen_t* _get_bitgen(bit_generator) except NULL:
    capsule = bit_generator.capsule
    return <bitgen_t*> PyCapsule_GetPointer(capsule, "BitGenerator")


cdef inline bint _all_finite(const double* x, intp n) noexcept nogil:
    cdef intp j
    for j in range(n):
        if not isfinite(x[j]):
            return False
    return True


def run_segment(ChainOracle oracle, Dynamics dynamics, double[::1] theta,
                Py_ssize_t n_steps, Py_ssize_t thin=1, out=None, bit_generator=None,
                Py_ssize_t check_every=16):
    """Advance one chain by ``n_steps`` steps without the GIL.

    Parameters
    ----------
    oracle : ChainOracle
    dynamics : Dynamics
    theta : ndarray of shape (dim,)
        Updated in place.
    n_steps : int
    thin : int
        With ``out``: keep every ``thin``-th state.
    out : ndarray of shape (n_steps // thin, dim) or None
        Where kept states are written.
    bit_generator : numpy.random.BitGenerator
        Source of every random number of this chain.
    check_every : int
        Steps between finiteness checks (every kept state is checked too).

    Returns
    -------
    n_done : int
        Steps completed; less than ``n_steps`` only when theta became
        non-finite (theta then holds the last finite state).
    n_kept : int
        Rows of ``out`` written (all finite).
    """
    cdef intp dim = theta.shape[0]
    cdef double[:, ::1] out_v
    cdef bint keep = out is not None
    if keep:
        out_v = out
        if out_v.shape[1] != dim or out_v.shape[0] < n_steps // thin:
            raise ValueError("out has the wrong shape")
    if thin < 1 or check_every < 1:
        raise ValueError("thin and check_every must be >= 1")
    cdef bitgen_t* rng = _get_bitgen(bit_generator)
    cdef double[::1] last_good = np.array(theta)
    cdef intp s, n_kept = 0, n_done = 0
    cdef bint ok = True
    with bit_generator.lock, nogil:
        oracle.estimator.rng = rng
        for s in range(n_steps):
            dynamics.step(&theta[0], oracle, rng)
            if keep and (s + 1) % thin == 0:
                if not _all_finite(&theta[0], dim):
                    ok = False
                    break
                memcpy(&out_v[n_kept, 0], &theta[0], dim * sizeof(double))
                n_kept += 1
                memcpy(&last_good[0], &theta[0], dim * sizeof(double))
            elif (s + 1) % check_every == 0 or s + 1 == n_steps:
                if not _all_finite(&theta[0], dim):
                    ok = False
                    break
                memcpy(&last_good[0], &theta[0], dim * sizeof(double))
            n_done = s + 1
        if not ok:
            memcpy(&theta[0], &last_good[0], dim * sizeof(double))
    return n_done, n_kept
