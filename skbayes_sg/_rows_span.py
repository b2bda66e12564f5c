"""Fewer rows than coefficients: the posterior sampled in the rows' span.

A linear model's likelihood reads its coefficients ``theta`` (the intercept
included, ``X_ext`` the rows with their constant column) only through
``X_ext theta``.  With ``V`` (``dext x r``) an orthonormal basis of the
rows' span (``r <= n``), ``theta = V u + w`` with ``w`` orthogonal to every
row, and the prior ``N(0, I / alpha)`` splits exactly into ``N(0, I /
alpha)`` on ``u`` and on ``w``: the data touch ``u`` only.  So the
posterior ``exp(-U / T)`` is that of ``u`` -- the same model on the ``r``
columns ``Z = X_ext V``, without an intercept -- times ``N(0, T / alpha)``
on ``w``, exactly.  Its Laplace evidence is the same function of alpha too
(the ``(dext - r) / 2 log alpha`` terms of the prior and of the Hessian
cancel), so ``alpha="auto"`` finds the same value on ``Z``.

A step then reads ``n x r`` numbers instead of ``n x dext``, and the metric
works on ``r`` coordinates (dense and exact at the mode for a few hundred
rows).  On 500 rows of 5,000 correlated features (``benchmarks/
bench_few_rows.py``, ``alpha="auto"``) the whole fit took 5.4 s against
10.8 s on ``theta`` itself (logistic) and 4.9 s against 22.3 s (Poisson), in
the same run, within 0.053 posterior sd of an independent reference.
"""
import numpy as np
import scipy.sparse as sp
from sklearn.utils import check_random_state

from ._parameters import parameters_set
from ._sampling import _schedule
from ._setup import target_ess_for
from .diagnostics._convergence import bulk_ess_and_rhat

#: the rows' span is sampled where a model has at least this many times as
#: many coefficients (intercept included) as rows
ROWS_SPAN_RATIO = 2.0
#: ... and where the basis ``V`` (``dext x n`` doubles) fits in this many bytes
ROWS_SPAN_BYTES = 512 << 20
#: eigenvalues of the rows' Gram below this fraction of the largest are
#: directions the rows do not span (repeated or dependent rows)
RANK_TOL = 1e-10
#: the draws are expanded this many at a time (two ``chunk x dext`` arrays)
EXPAND_CHUNK = 1024


def rows_span_pays(n_rows, dext, nnz):
    """Whether ``n_rows`` rows of ``dext`` coefficients holding ``nnz``
    values are sampled in their span: :data:`ROWS_SPAN_RATIO`,
    :data:`ROWS_SPAN_BYTES`, and rows dense enough (``nnz >= n_rows^2``)
    that a pass over the ``r <= n`` dense columns costs no more than one over
    them.  Sparse text rows are not: 2,000 rows of 20,000 words (30 a row)
    took 193 s in their span against 86 s on the coefficients."""
    return (dext >= ROWS_SPAN_RATIO * n_rows and 8.0 * dext * n_rows <= ROWS_SPAN_BYTES
            and nnz >= float(n_rows) * n_rows)


class RowsSpan:
    """The rows' span of ``X`` (with the constant column when
    ``fit_intercept``): ``Z`` (``n x r``), the columns the model is fitted on,
    and ``V`` (``dext x r``, orthonormal columns), from the eigenvectors of
    the rows' Gram ``X_ext X_ext^T = Q diag(lam) Q^T``: ``V = X_ext^T Q
    lam^(-1/2)`` and ``Z = X_ext V = Q lam^(1/2)``.  ``passes``: its cost in
    passes over ``X`` (the Gram, then ``V``)."""

    def __init__(self, X, fit_intercept):
        n = X.shape[0]
        if sp.issparse(X):
            X = X.tocsr()
            gram = np.asarray((X @ X.T).todense(), dtype=np.float64)
            columns = np.diff(X.tocsc().indptr).astype(np.float64)
            gram_passes = float(columns @ columns) / max(X.nnz, 1)
        else:
            X = np.asarray(X, dtype=np.float64)
            gram = X @ X.T
            gram_passes = float(n)
        if fit_intercept:
            gram += 1.0
        lam, Q = np.linalg.eigh(gram)
        keep = lam > RANK_TOL * max(float(lam[-1]), np.finfo(float).tiny)
        root = np.sqrt(lam[keep])
        scaled = Q[:, keep] / root
        V = np.asarray(X.T @ scaled)
        if fit_intercept:
            V = np.vstack([V, scaled.sum(axis=0)])
        self.V = V
        self.Z = np.ascontiguousarray(Q[:, keep] * root)
        self.passes = gram_passes + self.rank

    @property
    def rank(self):
        return self.V.shape[1]

    @property
    def dext(self):
        return self.V.shape[0]

    def draws(self, U, scale, rng, dtype):
        """``theta = V u + (I - V V^T) xi``, ``xi ~ N(0, scale^2 I)``, for
        draws ``U`` of shape ``(..., r)``: shape ``(..., dext)``."""
        flat = U.reshape(-1, self.rank)
        out = np.empty((flat.shape[0], self.dext), dtype=dtype)
        for start in range(0, flat.shape[0], EXPAND_CHUNK):
            u = np.asarray(flat[start:start + EXPAND_CHUNK], dtype=np.float64)
            xi = scale * rng.standard_normal((u.shape[0], self.dext))
            out[start:start + u.shape[0]] = (u - xi @ self.V) @ self.V.T + xi
        return out.reshape(U.shape[:-1] + (self.dext,))

    def mean(self, u_mean):
        """The posterior mean of ``theta`` from ``u``'s (``w``'s is 0)."""
        return self.V @ u_mean

    def sd(self, U, scale):
        """The posterior sds of ``theta``: ``(V C_u V^T)_jj + scale^2 (1 -
        |V_j|^2)``, ``C_u`` the covariance of the draws ``U`` (``(..., r)``)."""
        cov = np.atleast_2d(np.cov(U.reshape(-1, self.rank), rowvar=False))
        span = np.einsum("ij,jk,ik->i", self.V, cov, self.V)
        rest = np.clip(1.0 - np.einsum("ij,ij->i", self.V, self.V), 0.0, None)
        return np.sqrt(span + scale * scale * rest)


class RowsSpanMixin:
    """A linear fit on fewer rows than coefficients, sampled in the rows'
    span (:class:`RowsSpan`) and stored as one of the coefficients."""

    #: whether the model's likelihood reads the coefficients only through
    #: the rows (a GLM with one output and the isotropic prior): then fewer
    #: rows than coefficients are sampled in their span (:mod:`._rows_span`)
    _ROWS_SPAN = False

    def _rows_span_of(self, X, glm, continuing, population):
        """The rows' span this fit samples (:class:`RowsSpan`), or None: a
        one-output model that allows it, with at least ``ROWS_SPAN_RATIO``
        times as many coefficients as rows, in memory, not continuing chains
        (nor keeping them for a warm start), from a start given by name, and
        rows that span something."""
        dext = X.shape[1] + int(bool(self.fit_intercept))
        if not (self._ROWS_SPAN and glm.n_outputs == 1 and population is None
                and not continuing and not self.warm_start and isinstance(self.init, str)
                and rows_span_pays(X.shape[0], dext, X.nnz if sp.issparse(X) else X.size)):
            return None
        space = RowsSpan(X, bool(self.fit_intercept))
        return space if space.rank else None

    def _fit_in_rows_span(self, space, y, glm, sample_weight):
        """The fit of ``u`` on the rows' span ``space.Z``, the model's own
        hooks and checks included, then its draws and summaries as
        ``theta`` (:meth:`_store_rows_span`)."""
        self._rows_span_dext = space.dext       # the few-rows hint's coefficients
        # the ESS target of theta's coefficients, not of the r columns'
        target = target_ess_for(self.target_ess, space.dext)
        try:
            with parameters_set(self, fit_intercept=False, target_ess=target):
                self._fit(space.Z, y, glm, False, sample_weight)
        finally:
            del self._rows_span_dext
        self._store_rows_span(space)

    def _store_rows_span(self, space):
        """A fit of ``u`` on the rows' span (:mod:`._rows_span`) as one of
        ``theta``: each draw expanded with the prior's exact part orthogonal
        to the rows (a stream of its own, from ``random_state``); the means
        from ``u``'s (the orthogonal part's is 0), the sds from ``u``'s
        covariance and that part's exactly; the mode mapped; ESS and R-hat of
        the ``theta`` draws (a stuck chain's cap kept: its ``u`` repeats);
        the basis's passes counted with the set-up's.  The chains of ``u``
        are not kept: a warm start begins afresh."""
        scale = float(np.sqrt(float(self.temperature) / self.alpha_))
        U = self.coef_samples_
        seed = np.random.SeedSequence(check_random_state(self.random_state).randint(2 ** 31))
        theta = space.draws(U, scale, np.random.default_rng(seed), U.dtype)
        d = space.dext - int(bool(self.fit_intercept))
        mean, sd = space.mean(self.coef_), space.sd(U, scale)
        self.coef_samples_, self.coef_, self.coef_std_ = theta[..., :d], mean[:d], sd[:d]
        if self.fit_intercept:
            self.intercept_samples_ = theta[..., d]
            self.intercept_, self.intercept_std_ = float(mean[d]), float(sd[d])
        if hasattr(self, "mode_"):
            self.mode_ = space.mean(self.mode_[0])[None, :]
        for name in ("laplace_cov_", "_chain_states"):
            if hasattr(self, name):
                delattr(self, name)
        ess, self.rhat_, self._ess_tail = bulk_ess_and_rhat(theta, tail=True)
        self.ess_ = _schedule.capped_at_distinct(ess, self.n_distinct_draws_, self.n_samples_)
        n = space.Z.shape[0]
        self.n_grad_evals_ += int(round(space.passes * n))
        self.n_passes_ = self.n_grad_evals_ / n
        self.n_setup_passes_ += space.passes
        self.n_rows_span_ = space.rank
