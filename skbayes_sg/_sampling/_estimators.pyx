# cython: language_level=3
"""Gradient estimators: full data and uniform minibatches.

Later estimators (control variates, preferential/adaptive, snapshot tables)
subclass :class:`GradientEstimator`; the chain oracle and the dynamics call
only ``begin_step``, ``candidate`` and ``commit``.
"""
import numpy as np

cimport numpy as cnp
from libc.string cimport memset
from numpy.random cimport bitgen_t
from numpy.random.c_distributions cimport random_interval

from ._models cimport LOGISTIC, GAUSSIAN, SOFTMAX

cnp.import_array()

MODEL_KINDS = {"logistic": LOGISTIC, "gaussian": GAUSSIAN, "softmax": SOFTMAX}


cdef class Problem:
    """Bind data, targets and a GLM for the engine.

    Parameters
    ----------
    data : RowData
        The rows (dense or CSR, float32/float64).
    y : ndarray of shape (n_rows,) or (n_rows, K), float64
        Targets: 0/1 (logistic), class index (softmax), real (Gaussian;
        shape (n_rows, K) for K > 1 outputs).
    model : {"logistic", "gaussian", "softmax"}
    n_outputs : int
        K (number of classes for softmax, else 1).
    noise_var : float
        Gaussian noise variance.
    """

    def __cinit__(self, RowData data, y, str model, int n_outputs, double noise_var=1.0):
        cdef const double[::1] yv
        if model not in MODEL_KINDS:
            raise ValueError("unknown model %r" % model)
        y_arr = np.asarray(y)
        stride = n_outputs if (model == "gaussian" and n_outputs > 1) else 1
        n_rows = int(data.store.n_rows)
        if stride == 1:
            expected = (n_rows,)
        else:
            expected = (n_rows, int(stride))
        if y_arr.shape != expected:
            raise ValueError("y has shape %s, expected %s" % (y_arr.shape, expected))
        yv = np.ascontiguousarray(y_arr, dtype=np.float64).reshape(-1)
        self.data = data
        self._keep = yv
        self.store.X = &data.store
        self.store.y = &yv[0] if yv.shape[0] > 0 else NULL
        self.store.y_stride = stride
        self.store.model = MODEL_KINDS[model]
        self.store.K = n_outputs
        self.store.n = data.store.n_rows
        self.store.dim = n_outputs * data.store.dext
        self.store.inv_noise_var = 1.0 / noise_var

    @property
    def dim(self):
        return self.store.dim

    @property
    def n(self):
        return self.store.n


cdef class GradientEstimator:
    """Base class of the gradient estimators (see the module docstring).

    Parameters
    ----------
    problem : Problem
    """

    def __init__(self, Problem problem):
        self.problem = problem
        self.P = &problem.store
        self.max_batch = 1
        self.zbuf = np.zeros(max(problem.store.K, 1))
        self.rbuf = np.zeros(max(problem.store.K, 1))

    cdef void begin_step(self, const double* theta) noexcept nogil:
        pass

    cdef void candidate(self, const double* theta, Candidate* c) noexcept nogil:
        """Draw a minibatch into ``c.idx`` / ``c.size``, then ``evaluate``."""
        pass

    cdef void evaluate(self, const double* theta, Candidate* c) noexcept nogil:
        """Fill ``c.grad`` (and ``c.resid``) for the indices in ``c``."""
        pass

    cdef void commit(self, const double* theta, Candidate* c) noexcept nogil:
        pass

    def py_evaluate(self, theta, indices=()):
        """The estimate this estimator gives for a fixed minibatch (testing twin).

        Parameters
        ----------
        theta : ndarray of shape (dim,)
        indices : sequence of int
            The minibatch (ignored by the full-gradient estimator).

        Returns
        -------
        grad : ndarray of shape (dim,)
            Estimate of ``sum_i grad U_i(theta)`` (prior not included).
        """
        cdef double[::1] th = np.ascontiguousarray(theta, dtype=np.float64)
        idx = np.ascontiguousarray(indices, dtype=np.intp)
        if th.shape[0] != self.P.dim:
            raise ValueError("theta must have %d values" % self.P.dim)
        if idx.size and (idx.min() < 0 or idx.max() >= self.P.n):
            raise IndexError("index out of range")
        idx_buf = np.zeros(max(idx.size, 1), dtype=np.intp)
        idx_buf[:idx.size] = idx
        cdef intp[::1] iv = idx_buf
        cdef double[::1] resid = np.zeros(max(idx.size * self.P.K, 1))
        out = np.zeros(self.P.dim)
        cdef double[::1] ov = out
        cdef Candidate c
        c.idx = &iv[0]
        c.size = idx.size
        c.resid = &resid[0]
        c.grad = &ov[0]
        self.evaluate(&th[0], &c)
        return out

    @property
    def n_evals(self):
        return self.n_evals

    @property
    def capacity(self):
        """Largest minibatch a candidate can hold."""
        return self.max_batch


cdef class FullGradient(GradientEstimator):
    """Exact data gradient ``sum_i grad U_i`` (with SGLD: ULA / LMC)."""

    cdef void candidate(self, const double* theta, Candidate* c) noexcept nogil:
        c.size = 0
        self.evaluate(theta, c)

    cdef void evaluate(self, const double* theta, Candidate* c) noexcept nogil:
        cdef const ProblemStore* P = self.P
        cdef intp i
        memset(c.grad, 0, P.dim * sizeof(double))
        for i in range(P.n):
            datum_residual(P, i, theta, &self.zbuf[0], &self.rbuf[0])
            row_axpy(P.X, i, &self.rbuf[0], P.K, c.grad)
        self.n_evals += P.n


cdef class UniformSubsampling(GradientEstimator):
    """``(n/b) sum_{j in S} grad U_j`` with S uniform of size b.

    Parameters
    ----------
    problem : Problem
    batch_size : int
        b, 1 <= b <= n.
    replace : bool
        Draw S with replacement (default) or without (a partial
        Fisher-Yates shuffle of a persistent permutation, O(b) per step).
    """

    def __init__(self, Problem problem, Py_ssize_t batch_size, bint replace=True):
        GradientEstimator.__init__(self, problem)
        if not 1 <= batch_size <= max(problem.store.n, 1):
            raise ValueError("batch_size must be in [1, n_samples]")
        self.batch_size = batch_size
        self.max_batch = batch_size
        self.replace = replace
        # the permutation is only needed without replacement (n values per chain)
        self.perm = np.arange(problem.store.n if not replace else 1, dtype=np.intp)

    cdef void candidate(self, const double* theta, Candidate* c) noexcept nogil:
        cdef intp j, t, swap
        cdef intp b = self.batch_size
        if self.replace:
            for j in range(b):
                c.idx[j] = <intp> random_interval(self.rng, self.P.n - 1)
        else:
            for j in range(b):
                t = j + <intp> random_interval(self.rng, self.P.n - 1 - j)
                swap = self.perm[j]
                self.perm[j] = self.perm[t]
                self.perm[t] = swap
                c.idx[j] = self.perm[j]
        c.size = b
        self.evaluate(theta, c)

    cdef void evaluate(self, const double* theta, Candidate* c) noexcept nogil:
        # (n/b) sum_j grad U_j; residuals kept in c.resid for table estimators
        cdef const ProblemStore* P = self.P
        cdef intp j, i
        cdef intp b = c.size
        cdef int k
        cdef double scale = <double> P.n / <double> b
        cdef double* r
        memset(c.grad, 0, P.dim * sizeof(double))
        # issue every row's loads before computing: independent misses overlap
        for j in range(b):
            row_prefetch(P.X, c.idx[j])
        for j in range(b):
            i = c.idx[j]
            r = c.resid + j * P.K
            datum_residual(P, i, theta, &self.zbuf[0], r)
            for k in range(P.K):
                self.rbuf[k] = scale * r[k]
            row_axpy(P.X, i, &self.rbuf[0], P.K, c.grad)
        self.n_evals += b
