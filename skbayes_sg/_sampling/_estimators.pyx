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
from numpy.random.c_distributions cimport random_interval, random_standard_uniform
from libc.math cimport ceil
from scipy.linalg.cython_blas cimport dgemv

from ._glm import MODEL_KINDS, model_spec
from ._models import C_MODEL_KINDS

cnp.import_array()

# the registry's kinds are the compiled kernel's enum: a model added to one
# and not the other would sample the wrong likelihood
if MODEL_KINDS != C_MODEL_KINDS:
    raise ImportError("the model registry (_glm.MODEL_KINDS = %r) disagrees with the "
                      "compiled ModelKind enum (%r): rebuild the extension modules"
                      % (MODEL_KINDS, C_MODEL_KINDS))


cdef class Problem:
    """Bind data, targets and a GLM for the engine.

    Parameters
    ----------
    data : RowData
        The rows (dense or CSR, float32/float64).
    y : ndarray of shape (n_rows,) or (n_rows, K), float64
        Targets: 0/1 (logistic), class index (softmax), real (Gaussian;
        shape (n_rows, K) for K > 1 outputs), counts (Poisson).
    model : str
        A name of the model registry (``_glm.MODELS``): "logistic",
        "gaussian", "softmax" or "poisson".
    n_outputs : int
        K (number of classes for softmax, else 1).
    model_params : sequence of float
        The model's own parameters, in the order of its ``param_names``
        (the Gaussian's noise variance, the negative binomial's shape);
        empty for a model without any, or for its defaults.
    sample_weight : ndarray of shape (n_rows,) or None
        Nonnegative weights ``w_i``: datum i's potential is ``w_i U_i``
        (frequency weights: an integer weight is that many copies of the row).
    """

    def __cinit__(self, RowData data, y, str model, int n_outputs, model_params=(),
                  sample_weight=None):
        cdef const double[::1] yv
        cdef const double[::1] wv
        if model not in MODEL_KINDS:
            raise ValueError("unknown model %r" % model)
        y_arr = np.asarray(y)
        stride = n_outputs if (model_spec(model).multi_target and n_outputs > 1) else 1
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
        spec = model_spec(model)
        kernel = spec.kernel_params(spec.resolve_params(tuple(model_params)))
        if len(kernel) > MAX_MODEL_PARAMS:
            raise ValueError("model %r has %d kernel parameters; the engine carries %d"
                             % (model, len(kernel), MAX_MODEL_PARAMS))
        for k in range(MAX_MODEL_PARAMS):
            self.store.param[k] = float(kernel[k]) if k < len(kernel) else 0.0
        self.store.weight = NULL
        self._weight = None
        if sample_weight is not None:
            wv = np.ascontiguousarray(sample_weight, dtype=np.float64)
            if wv.shape[0] != n_rows:
                raise ValueError("sample_weight has %d values, expected %d"
                                 % (wv.shape[0], n_rows))
            self._weight = wv
            if n_rows > 0:
                self.store.weight = &wv[0]

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
        c.potential = 0.0
        self.evaluate(&th[0], &c)
        return out

    @property
    def n_evals(self):
        return self.n_evals

    @property
    def capacity(self):
        """Largest minibatch a candidate can hold."""
        return self.max_batch

    @property
    def deterministic_access(self):
        """Whether successive minibatches follow a fixed order (no random draw)."""
        return False

    @property
    def exact(self):
        """Whether the estimate is the exact data gradient."""
        return False

    def request_potential(self, bint flag):
        """Ask an exact estimator to also return ``sum_i U_i`` (Metropolis)."""
        if flag and not self.exact:
            raise ValueError("only an exact (full-data) estimator can give the potential")
        self.with_potential = flag


cdef double _logistic_pass(const ProblemStore* P, const double* theta, double* grad,
                           bint with_potential) noexcept nogil:
    # the logistic full pass: a block of rows' predictors, their residuals in
    # one vectorised loop, then their scatter (the sums in row order)
    cdef intp i0 = 0, k, rows
    cdef double u = 0.0
    cdef double z[SIGMOID_BLOCK]
    cdef double r[SIGMOID_BLOCK]
    cdef double pot[SIGMOID_BLOCK]
    while i0 < P.n:
        rows = min(<intp> SIGMOID_BLOCK, P.n - i0)
        for k in range(rows):
            row_dot(P.X, i0 + k, theta, 1, &z[k])
        logistic_block_residuals(P, i0, rows, 1, z, r)
        if with_potential:
            logistic_block_potentials(P, i0, rows, 1, z, pot)
        for k in range(rows):
            if with_potential:
                u += pot[k]
            row_axpy(P.X, i0 + k, &r[k], 1, grad)
        i0 += rows
    return u


cdef class FullGradient(GradientEstimator):
    """Exact data gradient ``sum_i grad U_i`` (with SGLD: ULA / LMC)."""

    cdef void candidate(self, const double* theta, Candidate* c) noexcept nogil:
        c.size = 0
        self.evaluate(theta, c)

    cdef void evaluate(self, const double* theta, Candidate* c) noexcept nogil:
        cdef const ProblemStore* P = self.P
        cdef intp i
        cdef double u = 0.0
        cdef double z, r
        memset(c.grad, 0, P.dim * sizeof(double))
        if P.K == 1 and P.model == LOGISTIC:
            c.potential = _logistic_pass(P, theta, c.grad, self.with_potential)
            self.n_evals += P.n
            return
        if P.K == 1:  # the residual by value, in registers
            for i in range(P.n):
                r = datum_residual1(P, i, theta, &z)
                if self.with_potential:
                    u += datum_potential(P, i, z)
                row_axpy(P.X, i, &r, 1, c.grad)
            c.potential = u
            self.n_evals += P.n
            return
        for i in range(P.n):
            datum_residual(P, i, theta, &self.zbuf[0], &self.rbuf[0])
            if self.with_potential:  # z_i is in zbuf: the loss costs no second dot product
                u += datum_weight(P, i) * glm_loss(P.model, &self.zbuf[0], P.K,
                                                   P.y + i * P.y_stride, P.param)
            row_axpy(P.X, i, &self.rbuf[0], P.K, c.grad)
        c.potential = u
        self.n_evals += P.n

    @property
    def exact(self):
        """Whether the estimate is the exact data gradient (a Metropolis
        correction can then use it)."""
        return True


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
        # the permutation is only needed without replacement (n values per chain);
        # it is the estimator's state (get_state / set_state)
        self.perm = np.arange(problem.store.n if not replace else 1, dtype=np.intp)

    def get_state(self):
        """The permutation drawn without replacement (warm start)."""
        return {"perm": np.array(self.perm)}

    def set_state(self, state):
        """Restore :meth:`get_state` output."""
        self.perm = np.array(state["perm"], dtype=np.intp)

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


ACCESS_MODES = {"random": ACCESS_RANDOM, "reshuffle": ACCESS_RESHUFFLE,
                "cyclic": ACCESS_CYCLIC, "weighted": ACCESS_WEIGHTED}
CONTROL_MODES = {"none": CONTROL_NONE, "fixed": CONTROL_FIXED,
                 "snapshot": CONTROL_SNAPSHOT, "table": CONTROL_TABLE,
                 "taylor": CONTROL_TAYLOR}


ctypedef void (*_BlockFunction)(const double*, long long, double*) noexcept nogil


cdef _block_twin(_BlockFunction f, z):
    cdef double[::1] zv = np.array(z, dtype=np.float64).reshape(-1)
    out = np.empty(zv.shape[0])
    cdef double[::1] ov = out
    if zv.shape[0]:
        f(&zv[0], zv.shape[0], &ov[0])
    return out


def py_sigmoid_block(z):
    """``sigmoid_kernel.h``'s vectorised sigmoid of an array (testing twin)."""
    return _block_twin(skb_sigmoid_block, z)


def py_softplus_block(z):
    """``sigmoid_kernel.h``'s vectorised ``log(1 + e^z)`` of an array (testing twin)."""
    return _block_twin(skb_softplus_block, z)


def alias_table(p):
    """Vose's alias method: O(n) set-up for O(1) draws from weights ``p``.

    Returns
    -------
    prob : ndarray of shape (n,)
        Acceptance probability of column i.
    alias : ndarray of shape (n,)
        The other outcome of column i.

    The small and large columns are two stacks (ascending, popped from the
    top), typed: 0.04 s for a million rows where Python lists took 1.6 s.
    """
    p = np.asarray(p, dtype=np.float64)
    cdef Py_ssize_t n = len(p)
    scaled_arr = p * (n / p.sum())
    prob_arr = np.ones(n)
    alias_arr = np.arange(n, dtype=np.intp)
    small_arr = np.empty(n, dtype=np.intp)
    large_arr = np.empty(n, dtype=np.intp)
    cdef double[::1] scaled = scaled_arr
    cdef double[::1] prob = prob_arr
    cdef intp[::1] alias = alias_arr
    cdef intp[::1] small = small_arr
    cdef intp[::1] large = large_arr
    cdef Py_ssize_t i, n_small = 0, n_large = 0
    cdef intp s_, l_
    with nogil:
        for i in range(n):
            if scaled[i] < 1.0:
                small[n_small] = i
                n_small += 1
            elif scaled[i] >= 1.0:      # a NaN weight joins neither stack
                large[n_large] = i
                n_large += 1
        while n_small > 0 and n_large > 0:
            n_small -= 1
            s_ = small[n_small]
            n_large -= 1
            l_ = large[n_large]
            prob[s_] = scaled[s_]
            alias[s_] = l_
            scaled[l_] = (scaled[l_] + scaled[s_]) - 1.0
            if scaled[l_] < 1.0:
                small[n_small] = l_
                n_small += 1
            else:
                large[n_large] = l_
                n_large += 1
    return prob_arr, alias_arr


cdef class GLMEstimator(GradientEstimator):
    """Control-variate / importance-weighted estimators of a GLM's data gradient.

    ``g = A + sum_{j in S} w_j (r_j(theta) - a_j) (x) x_j``, with

    - ``w_j = n / b`` (uniform access) or ``1 / (b p_j)`` (weighted access),
    - the control residuals ``a_j`` and their sum ``A`` set by ``control``:
      none (plain subsampling), fixed at a point (SGLD-CV), its second-order
      Taylor expansion there (one output: ``a_j = r_j(theta_hat) + c_j
      (x_j^T theta - x_j^T theta_hat)``, whose sum over the rows,
      ``A + H (theta - theta_hat)``, is added exactly), a snapshot
      refreshed every ``period`` steps and recomputed on the fly (SVRG-LD,
      PTU), or a table updated with the visited data (SAGA-LD, PPU; plus a full
      refresh every ``period`` steps: TMU),
    - the minibatch drawn by ``access``: random with replacement, reshuffled
      (a fresh permutation per pass, consecutive blocks), cyclic blocks
      (sequential reads, memory-mapped data friendly), or from fixed weights
      ``p`` with the alias method (O(1) per draw),
    - optionally an adaptive size ``b_k = clip(ceil(coef ||theta - centre||^2), 1, n)``
      (ASGLD-CV).

    A GLM's per-datum gradient is a K-vector times the row, so every table
    holds n*K scalars, never n gradient vectors.  Every estimate is unbiased
    for random and weighted access (the periodic refreshes only move A and
    a_j, never the expectation).

    Parameters
    ----------
    problem : Problem
    batch_size : int
        b (the pilot size when ``adaptive_coef`` is given).
    access : {"random", "reshuffle", "cyclic", "weighted"}
    control : {"none", "fixed", "taylor", "snapshot", "table"}
    period : int
        Steps between full refreshes (snapshot: required; table: 0 = SAGA,
        > 0 = TMU).
    weights : ndarray of shape (n,) or None
        Sampling weights for weighted access (normalised here).
    control_point : ndarray of shape (dim,) or None
        theta_hat for fixed control, or the first snapshot / table point
        (else theta at the first step).
    control_residuals, control_sum : ndarrays or None
        ``r_j(control_point)`` (n*K values) and ``sum_j grad U_j(control_point)``
        (dim values), computed once for all chains; without them the
        estimator makes that data pass itself (counted in ``n_evals``).
    control_curvature, control_predictor : ndarrays of shape (n,) or None
        ``c_j`` (the weighted curvature of row j's loss at theta_hat) and
        ``x_j^T theta_hat``: required by the taylor control.
    control_hessian : ndarray of shape (dim, dim) or None
        ``H = sum_j c_j (x_j, 1) (x_j, 1)^T``: required by the taylor control.
    adaptive_coef : float or None
        Enables the adaptive size with this coefficient.
    centre : ndarray of shape (dim,) or None
        Centre of the adaptive rule (the mode).
    alias : tuple of ndarrays or None
        ``alias_table(weights)`` when already built (it is O(n) Python), or
        ``alias_table(p) + (1 / (n p),)`` with ``p`` the normalised weights,
        checked by the caller (the chains of one fit share it).
    """

    def __init__(self, Problem problem, Py_ssize_t batch_size, str access="random",
                 str control="none", Py_ssize_t period=0, weights=None, control_point=None,
                 control_residuals=None, control_sum=None, adaptive_coef=None, centre=None,
                 alias=None, control_curvature=None, control_predictor=None,
                 control_hessian=None):
        GradientEstimator.__init__(self, problem)
        cdef intp n = problem.store.n
        cdef intp K = problem.store.K
        if not 1 <= batch_size <= max(n, 1):
            raise ValueError("batch_size must be in [1, n_samples]")
        if access not in ACCESS_MODES or control not in CONTROL_MODES:
            raise ValueError("unknown access %r or control %r" % (access, control))
        self.access = ACCESS_MODES[access]
        self.control = CONTROL_MODES[control]
        self.batch_size = batch_size
        self.period = period
        self.adaptive = adaptive_coef is not None
        self.adaptive_coef = adaptive_coef if self.adaptive else 0.0
        self.max_batch = n if self.adaptive else batch_size
        self.zbuf2 = np.zeros(max(K, 1))
        self.abuf = np.zeros(max(K, 1))
        self.A = np.zeros(max(problem.store.dim, 1))
        self.table = np.zeros(n * K if self.control in (CONTROL_FIXED, CONTROL_TABLE,
                                                        CONTROL_TAYLOR) else 1)
        self.snapshot = np.zeros(max(problem.store.dim, 1))
        self.order = np.arange(n if self.access == ACCESS_RESHUFFLE else 1, dtype=np.intp)
        self.cursor = n  # RESHUFFLE: shuffle at the first draw
        if self.access == ACCESS_CYCLIC:
            self.cursor = 0
        self.size_log = np.zeros(1, dtype=np.intp)
        self.log_pos = 0
        if self.control == CONTROL_SNAPSHOT and period < 1:
            raise ValueError("a snapshot estimator needs period >= 1")
        self.curvature = np.zeros(1)
        self.predictor = np.zeros(1)
        self.hessian = np.zeros((1, 1))
        self.offset = np.zeros(max(problem.store.dim, 1))
        if self.control == CONTROL_TAYLOR:
            self._set_taylor(control_curvature, control_predictor, control_hessian)
        self._set_weights(weights, alias)
        self.centre = np.zeros(max(problem.store.dim, 1))
        if self.adaptive:
            if centre is None:
                raise ValueError("the adaptive size needs a centre (the mode)")
            self.centre = np.array(centre, dtype=np.float64)
        cdef double[::1] th
        if control_point is not None and self.control != CONTROL_NONE:
            th = np.ascontiguousarray(control_point, dtype=np.float64)
            if th.shape[0] != problem.store.dim:
                raise ValueError("control_point must have dim values")
            if control_residuals is not None and control_sum is not None:
                self.A = np.array(control_sum, dtype=np.float64)
                if self.control == CONTROL_FIXED or self.control == CONTROL_TAYLOR:
                    # never written: shared by the chains
                    self.table = np.ascontiguousarray(control_residuals,
                                                      dtype=np.float64).reshape(-1)
                elif self.control != CONTROL_SNAPSHOT:
                    self.table = np.array(control_residuals, dtype=np.float64).reshape(-1)
                self.snapshot = np.array(th)
                self.n_refreshes = 1
            else:
                self._refresh(&th[0])
        elif self.control == CONTROL_FIXED or self.control == CONTROL_TAYLOR:
            raise ValueError("fixed control needs control_point (the mode)")

    def _set_weights(self, weights, alias):
        """The alias table of weighted access (unit placeholders otherwise)."""
        cdef intp n = self.P.n
        if self.access != ACCESS_WEIGHTED:
            self.alias_prob = np.ones(1)
            self.alias_index = np.zeros(1, dtype=np.intp)
            self.inv_np = np.ones(1)
            return
        if weights is None:
            raise ValueError("weighted access needs weights")
        if alias is not None and len(alias) == 3:
            # built once per fit by the caller from the same weights
            # (alias_table and 1 / (n p)): n-long checks and divisions
            # per chain and round cost a sixth of a fit at n = 4e6
            prob, index, inv_np = alias
        else:
            w = np.asarray(weights, dtype=np.float64)
            if w.shape != (n,) or not np.all(np.isfinite(w)) or np.any(w <= 0):
                raise ValueError("weights must be n positive finite numbers")
            w = w / w.sum()
            prob, index = alias_table(w) if alias is None else alias
            inv_np = 1.0 / (n * w)
        self.alias_prob = np.asarray(prob, dtype=np.float64)
        self.alias_index = np.asarray(index, dtype=np.intp)
        self.inv_np = np.asarray(inv_np, dtype=np.float64)

    def _set_taylor(self, curvature, predictor, hessian):
        cdef intp n = self.P.n, dim = self.P.dim
        if self.P.K != 1:
            raise ValueError("the taylor control needs one output (K = 1)")
        if curvature is None or predictor is None or hessian is None:
            raise ValueError("the taylor control needs control_curvature, control_predictor "
                             "and control_hessian")
        self.curvature = np.ascontiguousarray(curvature, dtype=np.float64).reshape(-1)
        self.predictor = np.ascontiguousarray(predictor, dtype=np.float64).reshape(-1)
        self.hessian = np.ascontiguousarray(hessian, dtype=np.float64)
        if (self.curvature.shape[0] != n or self.predictor.shape[0] != n
                or self.hessian.shape[0] != dim or self.hessian.shape[1] != dim):
            raise ValueError("control_curvature and control_predictor need n values, "
                             "control_hessian dim x dim")

    # ------------------------------------------------------------ indices
    cdef intp _draw(self, intp* idx, intp b) noexcept nogil:
        cdef intp j, t, swap, i
        cdef intp n = self.P.n
        if self.access == ACCESS_RANDOM:
            for j in range(b):
                idx[j] = <intp> random_interval(self.rng, n - 1)
        elif self.access == ACCESS_WEIGHTED:
            for j in range(b):
                i = <intp> random_interval(self.rng, n - 1)
                if random_standard_uniform(self.rng) >= self.alias_prob[i]:
                    i = self.alias_index[i]
                idx[j] = i
        elif self.access == ACCESS_RESHUFFLE:
            if self.cursor + b > n:  # start a pass: a fresh uniform permutation
                for j in range(n - 1, 0, -1):
                    t = <intp> random_interval(self.rng, j)
                    swap = self.order[j]
                    self.order[j] = self.order[t]
                    self.order[t] = swap
                self.cursor = 0
            for j in range(b):
                idx[j] = self.order[self.cursor + j]
            self.cursor += b
        else:  # cyclic blocks, wrapping around
            for j in range(b):
                idx[j] = self.cursor
                self.cursor += 1
                if self.cursor == n:
                    self.cursor = 0
        return b

    # ------------------------------------------------------------ control
    cdef void _refresh(self, const double* theta) noexcept nogil:
        """a_j = r_j(theta) for all j and A = sum_j grad U_j(theta) (a data pass)."""
        cdef const ProblemStore* P = self.P
        cdef intp i, j
        cdef int k
        memset(&self.A[0], 0, P.dim * sizeof(double))
        for i in range(P.n):
            datum_residual(P, i, theta, &self.zbuf[0], &self.rbuf[0])
            row_axpy(P.X, i, &self.rbuf[0], P.K, &self.A[0])
            if (self.control == CONTROL_FIXED or self.control == CONTROL_TABLE
                    or self.control == CONTROL_TAYLOR):
                for k in range(P.K):
                    self.table[i * P.K + k] = self.rbuf[k]
        if self.control == CONTROL_SNAPSHOT or self.control == CONTROL_TAYLOR:
            for j in range(P.dim):
                self.snapshot[j] = theta[j]
        self.n_evals += P.n
        self.n_refreshes += 1

    cdef void begin_step(self, const double* theta) noexcept nogil:
        if self.period > 0 and (self.control == CONTROL_SNAPSHOT or self.control == CONTROL_TABLE):
            if self.n_steps % self.period == 0 and not (self.n_steps == 0 and self.n_refreshes > 0):
                self._refresh(theta)
        self.n_steps += 1

    # ------------------------------------------------------------ estimate
    cdef void candidate(self, const double* theta, Candidate* c) noexcept nogil:
        cdef intp b = self.batch_size
        cdef double dist2 = 0.0, v
        cdef intp j
        if self.adaptive:
            for j in range(self.P.dim):
                v = theta[j] - self.centre[j]
                dist2 += v * v
            v = ceil(self.adaptive_coef * dist2)
            b = 1 if v < 1.0 else (self.P.n if v > <double> self.P.n else <intp> v)
            if self.log_pos < self.size_log.shape[0]:
                self.size_log[self.log_pos] = b
                self.log_pos += 1
        c.size = self._draw(c.idx, b)
        self.evaluate(theta, c)

    cdef void evaluate(self, const double* theta, Candidate* c) noexcept nogil:
        cdef const ProblemStore* P = self.P
        cdef intp j, i
        cdef intp b = c.size
        cdef int k
        cdef double w
        cdef double inv_b = 1.0 / <double> b
        cdef double* r
        cdef int dim = <int> P.dim, inc = 1
        cdef double one = 1.0
        for j in range(P.dim):
            c.grad[j] = self.A[j]
        if self.control == CONTROL_TAYLOR:
            # the expansion's sum over every row, exactly: grad += H (theta -
            # theta_hat) (H symmetric, so its row-major layout needs no transpose)
            for j in range(P.dim):
                self.offset[j] = theta[j] - self.snapshot[j]
            dgemv(b"N", &dim, &dim, &one, &self.hessian[0, 0], &dim, &self.offset[0], &inc,
                  &one, c.grad, &inc)
        for j in range(b):
            # the row and the datum's own values, each a random access into
            # an n-long array (hints only: the row's loads walk its page)
            i = c.idx[j]
            row_prefetch(P.X, i)
            SKB_PREFETCH(P.y + i * P.y_stride)
            if (self.control == CONTROL_FIXED or self.control == CONTROL_TABLE
                    or self.control == CONTROL_TAYLOR):
                SKB_PREFETCH(&self.table[i * P.K])
            if self.access == ACCESS_WEIGHTED:
                SKB_PREFETCH(&self.inv_np[i])
        for j in range(b):
            i = c.idx[j]
            r = c.resid + j * P.K
            datum_residual(P, i, theta, &self.zbuf[0], r)
            if self.control == CONTROL_SNAPSHOT:
                datum_residual(P, i, &self.snapshot[0], &self.zbuf2[0], &self.abuf[0])
            elif self.control == CONTROL_NONE:
                for k in range(P.K):
                    self.abuf[k] = 0.0
            elif self.control == CONTROL_TAYLOR:   # K = 1: zbuf holds x_i^T theta
                self.abuf[0] = self.table[i] + self.curvature[i] * (
                    self.zbuf[0] - self.predictor[i])
            else:
                for k in range(P.K):
                    self.abuf[k] = self.table[i * P.K + k]
            if self.access == ACCESS_WEIGHTED:
                w = self.inv_np[i] * P.n * inv_b   # 1 / (b p_i)
            else:
                w = P.n * inv_b
            for k in range(P.K):
                self.rbuf[k] = w * (r[k] - self.abuf[k])
            row_axpy(P.X, i, &self.rbuf[0], P.K, c.grad)
        self.n_evals += 2 * b if self.control == CONTROL_SNAPSHOT else b

    cdef void commit(self, const double* theta, Candidate* c) noexcept nogil:
        # SAGA / TMU: a_j <- r_j(theta) for the visited j, A by the differences.
        # Sequential, so a duplicate index adds a zero difference: A stays the
        # exact sum of the table whatever the minibatch.
        cdef const ProblemStore* P = self.P
        cdef intp j, i
        cdef int k
        cdef double* r
        if self.control != CONTROL_TABLE:
            return
        for j in range(c.size):
            i = c.idx[j]
            r = c.resid + j * P.K
            for k in range(P.K):
                self.rbuf[k] = r[k] - self.table[i * P.K + k]
                self.table[i * P.K + k] = r[k]
            row_axpy(P.X, i, &self.rbuf[0], P.K, &self.A[0])

    # ------------------------------------------------------------ python
    def start_size_log(self, Py_ssize_t capacity):
        """Record the next ``capacity`` adaptive minibatch sizes."""
        self.size_log = np.zeros(max(capacity, 1), dtype=np.intp)
        self.log_pos = 0

    def size_log_values(self):
        """Sizes recorded since :meth:`start_size_log`."""
        return np.array(self.size_log[:self.log_pos])

    def control_state(self):
        """``(A, table)`` copies: the running sum and the control residuals."""
        return np.array(self.A), np.array(self.table)

    def py_refresh(self, theta):
        """Full refresh at theta (testing twin)."""
        cdef double[::1] th = np.ascontiguousarray(theta, dtype=np.float64)
        self._refresh(&th[0])

    def py_commit(self, theta, indices, residuals):
        """Commit a minibatch with given residuals (testing twin)."""
        cdef double[::1] th = np.ascontiguousarray(theta, dtype=np.float64)
        idx = np.ascontiguousarray(indices, dtype=np.intp)
        res = np.ascontiguousarray(residuals, dtype=np.float64).reshape(-1)
        cdef intp[::1] iv = idx
        cdef double[::1] rv = res
        cdef Candidate c
        c.idx = &iv[0]
        c.size = idx.size
        c.resid = &rv[0]
        c.grad = NULL
        self.commit(&th[0], &c)

    @property
    def n_refreshes(self):
        return self.n_refreshes

    @property
    def deterministic_access(self):
        """Whether successive minibatches follow a fixed order (cyclic access)."""
        return self.access == ACCESS_CYCLIC

    def start_at(self, Py_ssize_t row):
        """Begin cyclic reads at ``row`` (each chain at its own row of a pool
        of rows drawn ahead, :mod:`skbayes_sg._dask_fit`)."""
        if self.access != ACCESS_CYCLIC or not 0 <= row < self.P.n:
            raise ValueError("start_at needs cyclic access and a row in [0, n)")
        self.cursor = row

    def get_state(self):
        """The estimator's own state as arrays (tables, running sum, snapshot,
        schedule and access cursor), so that a continued chain is the same
        chain (warm start)."""
        # a fixed control's table is never written: shared, not copied (an
        # n-long copy per chain and round, twice, at n = 4e6 cost 0.1 s each)
        shared = self.control == CONTROL_FIXED or self.control == CONTROL_TAYLOR
        table = np.asarray(self.table) if shared else np.array(self.table)
        return {"A": np.array(self.A), "table": table,
                "snapshot": np.array(self.snapshot), "order": np.array(self.order),
                "counters": np.array([self.n_steps, self.n_refreshes, self.cursor],
                                     dtype=np.int64)}

    def set_state(self, state):
        """Restore :meth:`get_state` output."""
        self.A = np.array(state["A"], dtype=np.float64)
        self.table = (np.ascontiguousarray(state["table"], dtype=np.float64)
                      if self.control == CONTROL_FIXED or self.control == CONTROL_TAYLOR else
                      np.array(state["table"], dtype=np.float64))
        self.snapshot = np.array(state["snapshot"], dtype=np.float64)
        self.order = np.array(state["order"], dtype=np.intp)
        self.n_steps, self.n_refreshes, self.cursor = (int(v) for v in state["counters"])

    @property
    def is_adaptive(self):
        """Whether the minibatch size is chosen per step."""
        return bool(self.adaptive)
