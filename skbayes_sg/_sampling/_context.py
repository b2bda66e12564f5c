"""Everything computed once per ``fit`` before the chains start.

A :class:`FitContext` holds the validated data, the GLM, the prior and the
fit-level quantities several pieces need (curvature bound L, or the local
curvature at the mode for a model without one, the mode,
per-datum gradient moments).  Expensive pieces are computed lazily and
cached, so an estimator that needs the mode pays for it once, and one that
does not never does.
"""
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np
import scipy.sparse as sp
from scipy.linalg import cho_factor, cho_solve, solve_triangular
from scipy.linalg.lapack import dlauum as lauum

from . import _sparse_forms
from ._spectrum import largest_eigenvalue
from ._glm import LOCAL_CURVATURE_SAFETY, GLM, linear_predictor, potential_and_grad

# dense rows are processed in chunks of this many (their temporaries are
# rows x dim); CSR rows in one block (products with them are O(nnz), and a
# row slice would copy them)
ROW_CHUNK = 8192
# above this many parameters the Laplace covariance is approximated by its diagonal
MAX_DENSE_LAPLACE = 4000
# the mode search stops when the Newton step is below this many posterior sds
# (the Newton decrement, i.e. the gradient in the Laplace metric); the step
# that meets it is still taken, so the error left is about its square
MODE_TOL_SD = 0.01
MAX_NEWTON_ITER = 100
# a dense Gram ``X^T W X`` of CSR rows costs sum_i nnz_i^2 products against
# sum_i nnz_i for a pass (and each of its products is several times dearer):
# above this ratio the mode search takes Hessian-vector products (passes) and
# one Gram at the end, and the dense noise model a Lanczos iteration, instead
# of a Gram per Newton step; below it (short rows) the Grams are cheap
GRAM_DEAR_RATIO = 16.0
# the CG mode search on CSR rows stops at this fraction of MODE_TOL_SD in its
# diagonal metric, so that the exact Newton decrement at its end (one Gram) is
# below MODE_TOL_SD and no second Gram is needed
SPARSE_CG_TIGHTEN = 0.1
# CSR rows' quadratic forms x_i^T S x_i: a row with more non-zeros than
# dext / PAIR_ROW_FRACTION takes a product with S (blocks of about PAIR_BLOCK
# entries) instead of its pairs (a pair gathered from S costs several
# multiply-adds of the streamed product)
PAIR_BLOCK = 1 << 18
PAIR_ROW_FRACTION = 10.0


def _dense_ext(Xc, fit_intercept):
    """A dense float64 copy of a row chunk, with the constant column."""
    Xd = Xc.toarray() if sp.issparse(Xc) else np.asarray(Xc, dtype=np.float64)
    Xd = np.asarray(Xd, dtype=np.float64)
    if fit_intercept:
        Xd = np.hstack([Xd, np.ones((Xd.shape[0], 1))])
    return Xd


def _float64(a):
    """``a`` as float64 (a copy only if it is not)."""
    return np.ascontiguousarray(a, dtype=np.float64)


def _sparse_gram(X, w, fit_intercept):
    """``X_ext^T diag(w) X_ext`` of CSR rows, dense (dext, dext): each row's
    pairs of non-zeros (:func:`._sparse_forms.gram`), O(sum_i nnz_i^2); the
    rows are never densified."""
    d = X.shape[1]
    B = np.zeros((d + int(fit_intercept),) * 2)
    B[:d, :d] = _sparse_forms.gram(X.indptr, X.indices, _float64(X.data), _float64(w), d)
    if fit_intercept:
        col = np.asarray(X.T @ w, dtype=np.float64).ravel()
        B[:d, d] = B[d, :d] = col
        B[d, d] = w.sum()
    return B


def _sparse_gram_blocks(X, W, fit_intercept):
    """``sum_i W_i (x) x_i x_i^T`` (x_i with the constant column) of CSR rows:
    W of shape (n,) (one block for every output, returned (dext, dext)) or
    (n, K, K) (returned (K, dext, K, dext)); symmetric blocks are computed once."""
    if W.ndim == 1:
        return _sparse_gram(X, W, fit_intercept)
    K, dext = W.shape[1], X.shape[1] + int(fit_intercept)
    G = np.zeros((K, dext, K, dext))
    symmetric = np.array_equal(W, W.transpose(0, 2, 1))
    for k in range(K):
        for m in range(K):
            if symmetric and m < k:
                G[k, :, m, :] = G[m, :, k, :].T
            else:
                G[k, :, m, :] = _sparse_gram(X, np.ascontiguousarray(W[:, k, m]),
                                             fit_intercept)
    return G


def _sparse_row_forms(X, fit_intercept, S, K, X2=None):
    """``Q[i, k, m] = x_i^T S_km x_i`` (x_i with the constant column) of CSR
    rows, shape (n, K, K); S is (K dext, K dext) dense or its diagonal
    (K dext,); ``X2``, the squares of X, if at hand.

    A diagonal S costs one pass.  A dense S costs sum_i nnz_i^2 entries of S
    gathered per output pair, the sum over pairs of the row's non-zeros
    (:func:`._sparse_forms.row_forms`, compiled: 0.09 s for 10^5 rows of 20
    non-zeros in 1,000 columns, 0.19 s in numpy blocks), against
    ``rowsum(X .* (X @ S))``, O(nnz dim).  Rows with more than ``dext / PAIR_ROW_FRACTION``
    non-zeros (whose pairs would cost more than the product) take the
    product ``x_i^T S`` (sparse rows times S, O(nnz_i dim)).
    """
    n, d = X.shape
    dext = d + int(fit_intercept)
    Q = np.zeros((n, K, K))
    if S.ndim == 1:
        Sd = S.reshape(K, dext)
        X2 = X.multiply(X).tocsr() if X2 is None else X2
        q = np.asarray(X2 @ Sd[:, :d].T, dtype=np.float64)
        if fit_intercept:
            q = q + Sd[:, d]
        Q[:, np.arange(K), np.arange(K)] = q
        return Q
    lens = np.diff(X.indptr) + int(fit_intercept)
    short = lens <= dext / PAIR_ROW_FRACTION
    long_rows = np.flatnonzero(~short)
    _sparse_forms.row_forms(X.indptr, X.indices, _float64(X.data),
                            np.flatnonzero(short).astype(np.intp),
                            _float64(S), K, dext,
                            bool(fit_intercept), Q)
    block = max(1, PAIR_BLOCK // dext)
    for start in range(0, len(long_rows), block):
        rows = long_rows[start:start + block]
        Xr = X[rows]
        for k in range(K):
            for j in range(k, K):
                Skj = S[k * dext:(k + 1) * dext, j * dext:(j + 1) * dext]
                Y = np.asarray(Xr @ Skj[:d], dtype=np.float64)               # (rows, dext)
                if fit_intercept:
                    Y = Y + Skj[d]
                q = np.asarray(Xr.multiply(Y[:, :d]).sum(axis=1)).ravel()
                if fit_intercept:
                    q = q + Y[:, d]
                Q[rows, k, j] = Q[rows, j, k] = q
    return Q


def _covariance_of_factor(L):
    """``L L^T``: by LAPACK's ``lauum`` (a third of the product's work) when
    L is upper triangular (the Laplace factor), else by a product."""
    if L.shape[0] == L.shape[1] and not np.any(np.tril(L, -1)):
        U, info = lauum(np.asfortranarray(L), lower=0)
        if info == 0:
            U = np.triu(U)
            return U + np.triu(U, 1).T
    return L @ L.T


@dataclass
class FitSettings:
    """The estimator's settings the set-up pieces read (typed: nothing else
    passes between the estimator and the registry's ``prepare`` functions).

    ``step_size``, ``snapshot_period``, ``pv_threshold``, ``n_leapfrog`` may be
    ``"auto"``; ``pilot_seed`` seeds the set-up's own chains (a SeedSequence
    apart from every chain's).
    """

    temperature: float = 1.0
    access: str = "random"
    step_size: object = "auto"
    snapshot_period: object = "auto"
    pv_threshold: object = "auto"
    pilot_steps: int = 500
    pilot_seed: object = 0
    n_leapfrog: object = "auto"
    inv_mass: float = 1.0


@dataclass
class Resolved:
    """What the set-up has decided so far, for the pieces that come after it.

    Attributes
    ----------
    metric_kind : {"identity", "diagonal", "dense"}
    metric_row_cov : ndarray or None
        ``x_i^T M x_i`` per row (and output pair) in the sampler's metric M.
    posterior_row_cov : ndarray or None
        The same under the Laplace covariance (the noise model's).
    shared_start : ndarray or None
        The point every chain starts from, when they share one.
    pilot_q95 : float or None
        The adaptive estimator's q95 of ``||theta - mode||^2`` (pilot or Laplace).
    noise_center : ndarray or None
        Where the noise model's Laplace law is centred when not at the mode
        (:meth:`FitContext.row_noise_moments`): the identity-step check of a
        fit that never needed the mode centres it at the chains' calibration
        point instead of searching for the mode.  None: the mode.
    noise_tol : float
        Relative tolerance of the noise model's Lanczos iterations
        (:meth:`FitContext.noise_per_row` on long CSR rows); the identity-step
        check, a diagnostic, loosens it.
    linearised_noise : bool
        Take each row's residual moment from the curvature at the centre
        (``C_i^2 Q_i``) instead of the posterior law of its predictor (the
        quadrature of :meth:`FitContext.row_noise_moments`).  The
        identity-step check sets it: it asks whether a hand-set step's
        error is near 25%, which the linearised moments answer (on breast
        cancer their noise's largest whitened eigenvalue is 361 against the
        truth's 393) at a fraction of the quadrature's cost (eight loss
        evaluations a row: 1.4 SGD epochs of a 3.8-epoch one-pass fit).
    """

    metric_kind: str = "identity"
    metric_row_cov: object = None
    posterior_row_cov: object = None
    shared_start: object = None
    pilot_q95: object = None
    noise_center: object = None
    noise_tol: float = 1e-3
    linearised_noise: bool = False


@dataclass
class FitContext:
    """Data and model of one fit (shared by every chain; never copied).

    Parameters
    ----------
    X : ndarray (C-contiguous float32/float64) or CSR matrix
    y : ndarray of shape (n,), float64
    glm : GLM
    alpha : float
        Prior precision.
    fit_intercept : bool
    batch_size : int
        The minibatch size b (already clipped to [1, n]).
    sample_weight : ndarray of shape (n,) or None
        Datum weights ``w_i``: the potential is
        ``alpha/2 ||theta||^2 + sum_i w_i U_i`` (None: every ``w_i = 1``).
        Every per-datum quantity below (losses, residuals, curvatures) is
        that of the weighted datum ``w_i U_i``.
    """

    X: object
    y: np.ndarray
    glm: GLM
    alpha: float
    fit_intercept: bool
    batch_size: int
    sample_weight: object = None
    settings: FitSettings = field(default_factory=FitSettings)
    resolved: Resolved = field(default_factory=Resolved)
    _cache: dict = field(default_factory=dict, repr=False)
    # per-datum gradient evaluations spent on set-up: every full pass over the
    # data (mode search, power iteration, moments) counts n
    n_grad_evals: int = 0

    def __post_init__(self):
        if sp.issparse(self.X) and self.X.format != "csr":
            self.X = self.X.tocsr()   # the set-up's row-wise sparse products read CSR

    @property
    def n(self):
        return self.X.shape[0]

    @property
    def dext(self):
        return self.X.shape[1] + int(self.fit_intercept)

    @property
    def dim(self):
        return self.glm.n_outputs * self.dext

    def _blocks(self):
        """``(start, rows)`` over X: dense rows in chunks of ``ROW_CHUNK``, CSR
        rows in one block."""
        if sp.issparse(self.X):
            yield 0, self.X
            return
        for start in range(0, self.n, ROW_CHUNK):
            yield start, self.X[start:start + ROW_CHUNK]

    def _gram_is_dear(self):
        """Whether a dense Gram ``X_ext^T W X_ext`` of the (CSR) rows costs more
        than ``GRAM_DEAR_RATIO`` passes (sum_i nnz_i^2 against sum_i nnz_i,
        times (K + 1) / 2 blocks for K outputs); never for dense rows, whose
        paths stay those of a dense Hessian."""
        if not sp.issparse(self.X):
            return False
        if "gram_dear" not in self._cache:
            lens = np.diff(self.X.indptr).astype(np.float64) + int(self.fit_intercept)
            blocks = 0.5 * (self.glm.n_outputs + 1)
            self._cache["gram_dear"] = bool(
                blocks * float(lens @ lens) > GRAM_DEAR_RATIO * max(float(lens.sum()), 1.0))
        return self._cache["gram_dear"]

    def _weigh(self, values, start):
        """Scale per-datum values of the rows ``start:start + len(values)`` by
        their weights (first axis); unchanged without weights."""
        if self.sample_weight is None:
            return values
        w = self.sample_weight[start:start + len(values)]
        return values * w.reshape((-1,) + (1,) * (np.ndim(values) - 1))

    def _chunk_terms(self, what, Xc, Theta, start):
        """The GLM's per-datum ``what`` (``"residual"`` or
        ``"hessian_weights"``) of the rows ``Xc`` starting at ``start``, at
        ``Theta``: those of the weighted data ``w_i U_i``."""
        Z = linear_predictor(Xc, Theta, self.fit_intercept)
        return self._weigh(getattr(self.glm, what)(Z, self.y[start:start + Z.shape[0]]), start)

    # ------------------------------------------------------------------
    def set_alpha(self, alpha):
        """Change the prior precision; everything cached (mode, Hessians,
        Laplace factors, weights) depended on it and is dropped."""
        self.alpha = float(alpha)
        self._cache.clear()

    @contextmanager
    def uncounted(self):
        """Work that is not part of the fit (a diagnostic after the draws):
        its passes are not counted, and what it caches or resolves is
        forgotten on exit."""
        counted, cache = self.n_grad_evals, dict(self._cache)
        resolved = replace(self.resolved)
        try:
            yield self
        finally:
            self.n_grad_evals, self._cache, self.resolved = counted, cache, resolved

    def has_mode(self):
        """Whether the mode has been found (no pass is spent to know)."""
        return "mode" in self._cache

    def has_mode_hessian(self):
        return "hessian_mode" in self._cache

    def memo(self, key, compute):
        """``compute()``, once per fit: later calls with ``key`` return the
        first result (forgotten with the rest by :meth:`uncounted`)."""
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def known_mode(self):
        """The mode if it has been found (or adopted), else None; spends no pass."""
        return self._cache.get("mode")

    def adopt_mode(self, theta):
        """Take ``theta`` as the mode without searching (a warm start's chains
        continue from a fit whose mode does not move)."""
        self._cache["mode"] = np.array(theta, dtype=np.float64).ravel()

    def known_laplace_cov(self):
        """The first Laplace covariance computed so far (:meth:`laplace_cov`),
        or None; spends no pass."""
        for key, value in self._cache.items():
            if isinstance(key, tuple) and key[0] == "laplace":
                return value
        return None

    def laplace_log_evidence(self):
        """``log p(y | alpha)`` by the Laplace approximation at the mode, up
        to a constant that does not depend on alpha:
        ``-U(theta_hat) + (dim / 2) log alpha - (1/2) log det H``.  Dense
        Hessian (up to ``MAX_DENSE_LAPLACE`` parameters)."""
        theta = self.mode()
        u, _ = self._counted_potential(theta)
        return (-u + 0.5 * self.dim * np.log(self.alpha)
                - 0.5 * np.linalg.slogdet(self.hessian_at(theta))[1])

    def potential_and_grad(self, theta):
        """Exact ``U(theta)`` and its gradient (numpy)."""
        return potential_and_grad(theta, self.X, self.y, self.glm, self.alpha,
                                  self.fit_intercept, self.sample_weight)

    def mode(self):
        """MAP estimate ``theta_hat`` (cached): Newton's method with a
        backtracking line search, stopped on the posterior's own scale.

        Each iteration costs one counted pass (gradient and Hessian).  Up to
        ``MAX_DENSE_LAPLACE`` parameters the Hessian is dense and the stop is
        the Newton decrement ``sqrt(g^T H^-1 g) <= MODE_TOL_SD sqrt(T)`` (the
        step in posterior sds); above it, a truncated Newton-CG (Hessian-vector
        products, each a pass) stopped when the gradient in the diagonal
        Laplace metric is that small.  The Hessian of the last iteration is
        kept as the curvature at the mode (the step after it is under 0.01 sd).
        CSR rows whose Gram is dear (:meth:`_gram_is_dear`) take the
        truncated Newton-CG and one Gram at its end (:meth:`_newton_sparse`).
        """
        if "mode" not in self._cache:
            if self.dim <= MAX_DENSE_LAPLACE:
                theta, H = (self._newton_sparse() if self._gram_is_dear()
                            else self._newton_dense())
                self._cache["hessian_mode"] = H
            else:
                theta = self._newton_cg()
            self._cache["mode"] = theta
        return self._cache["mode"]

    def _value_grad_hessian(self, theta):
        """``U``, ``grad U`` and the dense ``grad^2 U`` at theta in one counted
        pass (CSR rows: the Hessian is a sparse Gram, O(sum_i nnz_i^2))."""
        K, dext, d = self.glm.n_outputs, self.dext, self.X.shape[1]
        Theta = theta.reshape(K, dext)
        u = 0.5 * self.alpha * float(theta @ theta)
        if sp.issparse(self.X):
            Z = linear_predictor(self.X, Theta, self.fit_intercept)
            u += float(self._weigh(self.glm.loss(Z, self.y), 0).sum())
            R = self._weigh(self.glm.residual(Z, self.y), 0)
            G = np.empty((K, dext))
            G[:, :d] = np.asarray(self.X.T @ R).T
            if self.fit_intercept:
                G[:, d] = R.sum(axis=0)
            W = self._weigh(self.glm.hessian_weights(Z, self.y), 0)
            self.n_grad_evals += self.n
            return (u, G.ravel() + self.alpha * theta,
                    self._sparse_weighted_gram(W) + self.alpha * np.eye(self.dim))
        G = np.zeros((K, dext))
        H = np.zeros((K, dext, K, dext))
        for start in range(0, self.n, ROW_CHUNK):
            Xc = self.X[start:start + ROW_CHUNK]
            yc = self.y[start:start + ROW_CHUNK]
            Z = linear_predictor(Xc, Theta, self.fit_intercept)
            u += float(self._weigh(self.glm.loss(Z, yc), start).sum())
            R = self._weigh(self.glm.residual(Z, yc), start)
            G[:, :d] += np.asarray(Xc.T @ R).T
            if self.fit_intercept:
                G[:, d] += R.sum(axis=0)
            Xe = _dense_ext(Xc, self.fit_intercept)
            W = self._weigh(self.glm.hessian_weights(Z, yc), start)
            if W.ndim == 1:
                B = Xe.T @ (Xe * W[:, None])
                for k in range(K):
                    H[k, :, k, :] += B
            else:
                for k in range(K):
                    for m in range(K):
                        H[k, :, m, :] += Xe.T @ (Xe * W[:, k, m][:, None])
        self.n_grad_evals += self.n
        return (u, G.ravel() + self.alpha * theta,
                H.reshape(self.dim, self.dim) + self.alpha * np.eye(self.dim))

    def _line_search(self, theta, u, g, step, evaluate):
        """Backtracking (Armijo) along -step; ``evaluate(point)`` returns a
        tuple starting with U.  Returns the accepted point and its evaluation."""
        slope = float(g @ step)
        t = 1.0
        for _ in range(60):
            cand = theta - t * step
            values = evaluate(cand)
            if np.isfinite(values[0]) and values[0] <= u - 1e-4 * t * slope:
                return cand, values
            t *= 0.5
        return theta, None

    def _posterior_cholesky(self, H, factorise=np.linalg.cholesky):
        """``factorise(H)``, a Cholesky factorisation of the posterior's
        Hessian, or a ValueError that says why it has none (a LinAlgError
        names no parameter)."""
        try:
            return factorise(H)
        except np.linalg.LinAlgError:
            noise = "".join(f", {name}={value:.3g}"
                            for name, value in self.glm.settings().items())
            raise ValueError(
                f"The posterior's curvature is not positive definite to machine precision "
                f"(alpha={self.alpha:.3g}{noise}): some directions are fixed by the data "
                f"far more tightly than others (largest/smallest curvature "
                f"{np.max(np.abs(np.diag(H))) / max(self.alpha, 1e-300):.1e}). Standardise X, "
                f"or pass a larger noise_var (regression) or alpha.") from None

    def _newton_dense(self):
        """Each iteration: one pass for U, the gradient and the Hessian at the
        new point (shared by the line search's first, usually accepted, trial)."""
        T = float(self.settings.temperature)
        theta = np.zeros(self.dim)
        u, g, H = self._value_grad_hessian(theta)
        for _ in range(MAX_NEWTON_ITER):
            step = cho_solve(self._posterior_cholesky(H, cho_factor), g)
            decrement = float(np.sqrt(max(g @ step, 0.0)))
            new, values = self._line_search(theta, u, g, step, self._value_grad_hessian)
            if values is None:  # no decrease left: at the optimum to rounding
                break
            theta, (u, g, H) = new, values
            if decrement <= MODE_TOL_SD * np.sqrt(T):
                break
        return theta, H

    def _newton_sparse(self):
        """The mode search of CSR rows whose Gram is dear: the truncated
        Newton-CG (:meth:`_newton_cg`, passes only) to ``SPARSE_CG_TIGHTEN``
        of the tolerance, then one pass with the dense Hessian (a sparse
        Gram) there: its Newton decrement is the stop of :meth:`_newton_dense`.
        Where it is met, that point is the mode (its remaining Newton step is
        under ``MODE_TOL_SD`` sds, the CG's own stop having left about a tenth
        of that) and its Hessian the curvature there; else exact Newton steps
        follow, a Gram each.  One Gram where :meth:`_newton_dense` takes one
        per iteration (seven on a 10^5 x 10^3 text-like logistic problem)."""
        T = float(self.settings.temperature)
        theta = self._newton_cg(tol=SPARSE_CG_TIGHTEN * MODE_TOL_SD)
        u, g, H = self._value_grad_hessian(theta)
        for _ in range(MAX_NEWTON_ITER):
            step = cho_solve(self._posterior_cholesky(H, cho_factor), g)
            if np.sqrt(max(g @ step, 0.0)) <= MODE_TOL_SD * np.sqrt(T):
                break
            new, values = self._line_search(theta, u, g, step, self._value_grad_hessian)
            if values is None:
                break
            theta, (u, g, H) = new, values
        return theta, H

    def _newton_cg(self, cg_iter=30, tol=MODE_TOL_SD):
        """Truncated Newton-CG from 0, stopped when the gradient in the
        diagonal Laplace metric is at most ``tol sqrt(T)`` in every coordinate."""
        T = float(self.settings.temperature)
        theta = np.zeros(self.dim)
        u, g = self.potential_and_grad(theta)
        self.n_grad_evals += self.n
        for _ in range(MAX_NEWTON_ITER):
            hw = self.hessian_row_weights(theta, full=True)
            Hd = self.hessian_diag(theta)      # from hw: no pass of its own
            if np.max(np.abs(g) / np.sqrt(Hd)) <= tol * np.sqrt(T):
                break
            n_products = [0]

            def hvp(v):
                n_products[0] += 1
                return self.hessian_vector(hw, v)
            step = _pcg(hvp, g, 1.0 / Hd, cg_iter, 0.1)
            self.n_grad_evals += self.n * n_products[0]
            new, values = self._line_search(theta, u, g, step, self._counted_potential)
            if values is None:
                break
            theta, (u, g) = new, values
        return theta

    def _counted_potential(self, theta):
        self.n_grad_evals += self.n
        return self.potential_and_grad(theta)

    def hessian_vector(self, hw, v):
        """``(grad^2 U) v`` from per-datum curvatures ``hw`` ((n,) or (n, K, K))."""
        K, dext, d = self.glm.n_outputs, self.dext, self.X.shape[1]
        V = v.reshape(K, dext)
        out = np.zeros((K, dext))
        for start, Xc in self._blocks():
            Z = linear_predictor(Xc, V, self.fit_intercept)            # (rows, K)
            w = hw[start:start + Xc.shape[0]]
            R = Z * w[:, None] if w.ndim == 1 else np.einsum("nkm,nm->nk", w, Z)
            out[:, :d] += np.asarray(Xc.T @ R).T
            if self.fit_intercept:
                out[:, d] += R.sum(axis=0)
        res = self.alpha * v
        res += out.ravel()
        return res

    def hessian_max_eigenvalue(self, theta, col_scale=None, tol=1e-3):
        """lambda_max of ``G grad^2 U(theta) G``, G = diag(col_scale) (softmax
        blocks whole; prior included).

        Exact eigenvalues where the dense Hessian at theta is at hand (the
        mode's) and small; else Lanczos (:func:`._spectrum.largest_eigenvalue`, relative
        ``tol``) on products with that Hessian (O(dim^2) each) where they are
        cheaper than a pass, or on Hessian-vector products (a counted pass
        each, the per-datum curvatures one more): 10-20 passes at any dim.
        """
        g = np.ones(self.dim) if col_scale is None else np.asarray(col_scale, dtype=np.float64)
        dense = None
        if "hessian_mode" in self._cache and np.array_equal(theta, self._cache.get("mode")):
            dense = self._cache["hessian_mode"]
        if dense is not None and self.dim <= 500:
            return float(np.linalg.eigvalsh(g[:, None] * dense * g[None, :])[-1])
        nnz = self.X.nnz if sp.issparse(self.X) else self.X.size
        if dense is not None and self.dim * self.dim <= nnz + self.n:
            lam, _ = largest_eigenvalue(lambda v: g * (dense @ (g * v)), self.dim, tol=tol)
            return lam
        hw = self.hessian_row_weights(theta, full=True)
        lam, n_products = largest_eigenvalue(lambda v: g * self.hessian_vector(hw, g * v), self.dim,
                                       tol=tol)
        self.n_grad_evals += self.n * n_products
        return lam

    def curvature_bound(self):
        """L >= lambda_max(grad^2 U) for every theta: alpha + c lambda_max(X_ext^T W X_ext).

        A model without a global bound c (Poisson: exp(z) grows without
        limit) gets the local rule instead: the curvature at the mode with
        every per-datum curvature times ``LOCAL_CURVATURE_SAFETY``
        (:meth:`local_curvature_weights`), the curvature the chains meet in
        the posterior's neighbourhood with a margin.
        """
        if "L" not in self._cache:
            self._cache["L"] = self.alpha + self._data_curvature(None)
        return self._cache["L"]

    def _data_curvature(self, col_scale):
        """lambda_max of the data term's curvature bound in the metric
        diag(col_scale): the global bound, or the local rule at the mode."""
        c = self.glm.curvature_bound()
        if c is not None:
            return c * self.gram_norm(col_scale, self.sample_weight)
        return self.gram_norm(col_scale, self.local_curvature_weights())

    def local_curvature_weights(self):
        """``LOCAL_CURVATURE_SAFETY h_i(mode)``: the per-datum curvatures (of
        the weighted data) at the mode with the safety factor, the stand-in
        for a global bound where the model has none (cached; finds the mode)."""
        if "local_curvature" not in self._cache:
            self._cache["local_curvature"] = (
                LOCAL_CURVATURE_SAFETY * self.hessian_row_weights(self.mode()))
        return self._cache["local_curvature"]

    def lipschitz(self):
        """Per-datum Lipschitz constants ``L_i`` of ``grad (w_i U_i)``, shape
        (n,): ``c w_i ||(x_i, 1)||^2`` with the model's global bound c, or
        with ``LOCAL_CURVATURE_SAFETY`` times the datum's curvature at the
        mode where there is none (Poisson)."""
        if self.glm.curvature_bound() is not None:
            return self.glm.lipschitz(self.X, self.fit_intercept, self.sample_weight)
        return self.local_curvature_weights() * self.row_norms_sq()

    def curvature(self, theta=None, col_scale=None):
        """lambda_max of ``grad^2 U`` at theta, in the metric diag(col_scale):
        ``alpha max(D^2) + lambda_max(D X^T diag(h_i) X D)`` with h_i the
        per-datum curvature at theta (a softmax datum: the trace of its K x K
        block, which bounds its largest eigenvalue).  theta None: the global
        bound (``curvature_bound``).  The chains start at theta and stay in
        its posterior neighbourhood, where this is the curvature they meet;
        the global bound can overstate it several times (logistic: 1/4 vs
        s(1 - s) at the mode).  A model without a global bound (Poisson),
        whose curvature can grow fast away from theta, takes the h_i times
        ``LOCAL_CURVATURE_SAFETY``.
        """
        scale_max = 1.0 if col_scale is None else np.max(col_scale) ** 2
        if theta is None:
            if col_scale is None:
                return self.curvature_bound()
            return self.alpha * scale_max + self._data_curvature(col_scale)
        hw = self.hessian_row_weights(theta)
        if self.glm.curvature_bound() is None:
            hw = LOCAL_CURVATURE_SAFETY * hw
        return self.alpha * scale_max + self.gram_norm(col_scale, hw)

    def hessian_row_weights(self, theta, full=False):
        """Per-datum curvature ``d^2 phi / dz^2`` at theta as one number per datum
        (a softmax datum: the trace of its K x K block, which bounds its largest
        eigenvalue), shape (n,); ``full=True`` keeps softmax blocks whole,
        (n, K, K).  One counted pass (cached)."""
        key = ("hrow", full, theta.tobytes())
        if key not in self._cache:
            K, dext = self.glm.n_outputs, self.dext
            Theta = theta.reshape(K, dext)
            hw = None
            for start, Xc in self._blocks():
                H = self._chunk_terms("hessian_weights", Xc, Theta, start)
                if H.ndim == 3 and not full:
                    H = np.einsum("nkk->n", H)
                if hw is None:
                    hw = np.empty((self.n,) + H.shape[1:])
                hw[start:start + len(H)] = H
            self.n_grad_evals += self.n
            self._cache[key] = hw if hw is not None else np.empty(0)
        return self._cache[key]

    def gram_norm(self, col_scale=None, row_weight=None):
        """lambda_max of ``D X_ext^T W X_ext D`` by power iteration.

        D = diag(col_scale), W = diag(row_weight) (identity when None).
        """
        key = ("gram", None if col_scale is None else col_scale.tobytes(),
               None if row_weight is None else row_weight.tobytes())
        if key not in self._cache:
            lam, n_iter = _power_iteration(self.X, self.fit_intercept, col_scale, row_weight)
            self.n_grad_evals += n_iter * self.n  # one X^T X v product ~ one full gradient
            self._cache[key] = lam
        return self._cache[key]

    def residuals(self, theta):
        """``R[i] = phi'(z_i, y_i)`` at theta, shape (n, K), and the data gradient
        ``sum_i grad U_i(theta)`` (dim,) -- one counted pass (cached)."""
        key = ("res", theta.tobytes())
        if key not in self._cache:
            K, d = self.glm.n_outputs, self.X.shape[1]
            Theta = theta.reshape(K, self.dext)
            R = np.empty((self.n, K))
            G = np.zeros((K, self.dext))
            for start, Xc in self._blocks():
                Rc = self._chunk_terms("residual", Xc, Theta, start)
                R[start:start + len(Rc)] = Rc
                G[:, :d] += np.asarray(Xc.T @ Rc).T
                if self.fit_intercept:
                    G[:, d] += Rc.sum(axis=0)
            self.n_grad_evals += self.n
            self._cache[key] = (R, G.ravel())
        return self._cache[key]

    def laplace_cov(self, theta):
        """Laplace covariance ``(alpha I + sum_i grad^2 U_i(theta))^-1`` (cached).

        Dense (K*dext)^2; above ``MAX_DENSE_LAPLACE`` parameters the diagonal
        approximation ``diag(1 / diag H)`` is returned instead.
        """
        key = ("laplace", theta.tobytes())
        if key not in self._cache:
            if self.dim > MAX_DENSE_LAPLACE:
                self._cache[key] = np.diag(1.0 / self.hessian_diag(theta))
            else:
                F = self._laplace_factor(theta)
                self._cache[key] = F @ F.T
        return self._cache[key]

    def _laplace_cov_or_diag(self, theta):
        """The Laplace covariance, dense (:meth:`laplace_cov`) up to
        ``MAX_DENSE_LAPLACE`` parameters, else its diagonal approximation as
        the vector ``1 / diag H`` (never a dim x dim matrix)."""
        if self.dim <= MAX_DENSE_LAPLACE:
            return self.laplace_cov(theta)
        key = ("laplace_diag", theta.tobytes())
        if key not in self._cache:
            self._cache[key] = 1.0 / self.hessian_diag(theta)
        return self._cache[key]

    def hessian_at(self, theta):
        """``grad^2 U(theta)``, dense; the one kept from the mode search when
        theta is the mode (no pass)."""
        if ("hessian_mode" in self._cache and "mode" in self._cache
                and np.array_equal(theta, self._cache["mode"])):
            return self._cache["hessian_mode"]
        return self.hessian(theta)

    def _laplace_factor(self, theta):
        """Upper-triangular ``L`` with ``L L^T = H(theta)^-1`` (cached):
        ``L = R^-T`` from the Cholesky factor ``H = R R^T`` (no explicit inverse)."""
        key = ("laplace_factor", theta.tobytes())
        if key not in self._cache:
            R = self._posterior_cholesky(self.hessian_at(theta))
            self._cache[key] = np.ascontiguousarray(
                solve_triangular(R, np.eye(self.dim), lower=True).T)
        return self._cache[key]

    def laplace_metric(self, kind, temperature=1.0):
        """The Laplace metric at the mode: ``(center, factor)`` with
        ``factor`` the upper-triangular ``L`` (dense, ``L L^T = T H^-1``) or
        the scales ``D = sqrt(T / diag H)`` (diagonal)."""
        mode = self.mode()
        if kind == "dense":
            return mode, np.sqrt(temperature) * self._laplace_factor(mode)
        if kind == "diagonal":
            if "hessian_mode" in self._cache:
                Hd = np.diag(self._cache["hessian_mode"]).copy()
            else:
                Hd = self.hessian_diag(mode)
            return mode, np.sqrt(temperature / Hd)
        raise ValueError(f"no Laplace metric of kind {kind!r}")

    def _sparse_weighted_gram(self, weights):
        """:meth:`weighted_gram` of CSR rows (sparse Grams, uncounted): the
        scalar weights' block repeated on every output's diagonal block, or
        the K x K blocks whole."""
        K, dext = self.glm.n_outputs, self.dext
        B = _sparse_gram_blocks(self.X, weights, self.fit_intercept)
        if weights.ndim != 1:
            return B.reshape(self.dim, self.dim)
        G = np.zeros((K, dext, K, dext))
        for k in range(K):
            G[k, :, k, :] = B
        return G.reshape(self.dim, self.dim)

    def weighted_gram(self, weights):
        """``sum_i W_i (x) x_i x_i^T`` (x_i with the constant column), W_i the
        scalar ``weights[i]`` (the same block for every output) or the K x K
        block ``weights[i]``: shape (dim, dim).  One counted pass (CSR rows:
        sparse Grams, O(sum_i nnz_i^2) per output pair)."""
        K, dext = self.glm.n_outputs, self.dext
        if sp.issparse(self.X):
            self.n_grad_evals += self.n
            return self._sparse_weighted_gram(np.asarray(weights, dtype=np.float64))
        G = np.zeros((K, dext, K, dext))
        for start in range(0, self.n, ROW_CHUNK):
            Xc = self.X[start:start + ROW_CHUNK]
            w = weights[start:start + ROW_CHUNK]
            if w.ndim == 1:  # the same block for every output
                Xe = _dense_ext(Xc, self.fit_intercept)
                B = Xe.T @ (Xe * w[:, None])
                for k in range(K):
                    G[k, :, k, :] += B
            else:
                Xe = _dense_ext(Xc, self.fit_intercept)
                for k in range(K):
                    for m in range(K):
                        G[k, :, m, :] += Xe.T @ (Xe * w[:, k, m][:, None])
        self.n_grad_evals += self.n
        return G.reshape(self.dim, self.dim)

    def hessian(self, theta):
        """Dense ``grad^2 U(theta)`` (prior included), shape (dim, dim): one
        counted pass."""
        before = self.n_grad_evals
        G = self.weighted_gram(self.hessian_row_weights(theta, full=True))
        self.n_grad_evals = before + self.n   # weights and Gram: one pass
        return G + self.alpha * np.eye(self.dim)

    # ------------------------------------------------------- noise model
    def metric_row_covariances(self, kind, factor):
        """``Q_i[k, m] = x_i^T M_km x_i``, M the metric's covariance (``L L^T``
        or ``D^2``): the variance of datum i's linear predictors along the
        metric, shape (n,) for one output, (n, K, K) for K.  Dense metrics
        cost O(n dim^2) on dense rows, O(sum_i nnz_i^2) on CSR rows (pairs of
        a row's non-zeros, :func:`_sparse_row_forms`); counted as a pass."""
        K, dext = self.glm.n_outputs, self.dext
        if sp.issparse(self.X):
            if kind == "dense":
                S = _covariance_of_factor(np.asarray(factor, dtype=np.float64))
            else:
                S = np.asarray(factor, dtype=np.float64).ravel() ** 2
            out = _sparse_row_forms(self.X, self.fit_intercept, S, K, self._squares(self.X))
            self.n_grad_evals += self.n
            return out[:, 0, 0].copy() if K == 1 else out
        out = np.empty((self.n, K, K))
        chunk = max(1, ROW_CHUNK // max(K * K, 1))
        for start in range(0, self.n, chunk):
            Xc = self.X[start:start + chunk]
            if kind == "dense":
                # Y_k = X_ext L_k: L_k the rows of output k's coefficients
                Lk = factor.reshape(K, dext, self.dim)
                Y = np.stack([np.asarray(_dense_ext(Xc, self.fit_intercept) @ Lk[k])
                              for k in range(K)], axis=1)          # (rows, K, dim)
                out[start:start + len(Y)] = np.einsum("rkD,rmD->rkm", Y, Y)
            else:
                D2 = (factor.reshape(K, dext) ** 2)
                X2 = Xc.multiply(Xc) if sp.issparse(Xc) else np.square(Xc, dtype=np.float64)
                q = np.asarray(X2 @ D2[:, :X2.shape[1]].T)      # (rows, K)
                if self.fit_intercept:
                    q = q + D2[:, -1]
                block = np.zeros((len(q), K, K))
                block[:, np.arange(K), np.arange(K)] = q
                out[start:start + len(q)] = block
        self.n_grad_evals += self.n
        return out[:, 0, 0].copy() if K == 1 else out

    def row_noise_moments(self, control, Q):
        """Second moment, per datum, of its term in a one-row estimate of the
        data gradient, under the Laplace law (linearised residuals):
        ``E[d_i d_i^T]`` with ``d_i = r_i(theta) - a_i``.

        control : {"fixed", "snapshot", "none"}
            ``a_i = r_i(mode)``: ``C_i Q_i C_i`` (C_i the curvature at the
            mode); a snapshot about one posterior draw old: twice that; no
            control: ``r_i(mode) r_i(mode)^T + C_i Q_i C_i``.
        Q : ndarray
            ``x_i^T S x_i`` per datum ((n,) or (n, K, K)), S the posterior
            (Laplace) covariance at the fit's temperature.

        The mode is ``resolved.noise_center`` where one is set.
        """
        mode = self.mode() if self.resolved.noise_center is None else self.resolved.noise_center
        C = self.hessian_row_weights(mode, full=True)
        if C.ndim == 1 and np.ndim(Q) == 1 and not self.resolved.linearised_noise:
            # one output: the exact moments under the Laplace law of each
            # row's linear predictor (the linearised C^2 Q misses the rows
            # fitted almost exactly at the mode)
            key = ("resmom", control, mode.tobytes(), Q.tobytes())
            if key not in self._cache:
                E = self._residual_moments(mode, Q, centred=control != "none")
                self._cache[key] = 2.0 * E if control == "snapshot" else E
            return self._cache[key]
        if C.ndim == 1:
            E = C * C * Q
        else:
            E = np.einsum("nkl,nlm,nmj->nkj", C, Q, C)
        if control == "snapshot":
            return 2.0 * E
        if control == "none":
            R, _ = self.residuals(mode)
            E = E + (R[:, 0] ** 2 if C.ndim == 1 else np.einsum("nk,nm->nkm", R, R))
        return E

    def _residual_moments(self, theta, Q, centred):
        """``E[(r_i(eta) - a_i)^2]`` per datum, ``eta ~ N(z_i(theta), Q_i)``,
        of the weighted data (K = 1; :meth:`GLM.residual_moments`).  One
        counted pass."""
        Theta = theta.reshape(1, self.dext)
        T = float(self.settings.temperature)
        out = np.empty(self.n)
        for start, Xc in self._blocks():
            Z = linear_predictor(Xc, Theta, self.fit_intercept)
            stop = start + Z.shape[0]
            power = self._weigh(np.ones(stop - start), start) / T
            m = self.glm.residual_moments(Z, self.y[start:stop], Q[start:stop], centred, power)
            out[start:stop] = self._weigh(self._weigh(m, start), start)
        self.n_grad_evals += self.n
        return out

    def noise_per_row(self, E, p, kind, factor, scale):
        """``v1``: the largest variance, over directions of the sampler's
        coordinates, of a one-row estimate ``sum_i d_i (x) x_i / p_i``:
        ``lambda_max(scale^2 L^T B L)`` with ``B = sum_i E_i (x) x_i x_i^T / p_i``
        (eigenvalues of the dense matrix, or power iteration for a diagonal
        metric, each product a counted pass).  CSR rows whose Gram is dear
        (:meth:`_gram_is_dear`) take a Lanczos iteration on the products in
        either metric (``B u`` a pass, ``L v`` O(dim^2)): 1.01 times its
        largest Ritz value, an upper estimate as the power iteration's."""
        w = E * self.n if p is None else E / (p if E.ndim == 1 else p[:, None, None])
        if self._gram_is_dear():
            F = np.asarray(factor, dtype=np.float64)

            def whitened(v):
                u = F @ v if kind == "dense" else F * v
                Bu = self.hessian_vector(w, u) - self.alpha * u
                return (scale * scale) * (F.T @ Bu if kind == "dense" else F * Bu)
            lam, n_products = largest_eigenvalue(whitened, self.dim, tol=self.resolved.noise_tol)
            self.n_grad_evals += self.n * n_products
            return 1.01 * lam
        if kind == "dense":
            B = self.weighted_gram(w)
            V = (scale * scale) * (factor.T @ B @ factor)
            return float(np.linalg.eigvalsh(0.5 * (V + V.T))[-1])
        D = factor

        def apply(v):
            self.n_grad_evals += self.n
            return (scale * scale) * D * (self.hessian_vector(w, D * v) - self.alpha * D * v)
        v = np.random.default_rng(0).standard_normal(self.dim)
        lam = 0.0
        for _ in range(30):
            u = apply(v / np.linalg.norm(v))
            new = float(np.linalg.norm(u))
            v = u
            if abs(new - lam) <= 1e-3 * new:
                lam = new
                break
            lam = new
        return 1.01 * lam

    def hessian_trace_weights(self, theta):
        """``sqrt(tr(H_i S H_i))`` per datum, H_i = grad^2 U_i(theta), S the
        Laplace covariance at theta: the SGLD-CV-PS weights (closed form for a
        GLM: H_i = C_i (x) x_i x_i^T, so tr(H_i S H_i) = ||x_i||^2 tr(C_i Q_i C_i),
        Q_i[k, m] = x_i^T S_km x_i).  CSR rows: O(sum_i nnz_i^2) for a dense
        S, one pass for the diagonal one (above ``MAX_DENSE_LAPLACE``), never
        a densified row."""
        K, dext = self.glm.n_outputs, self.dext
        if sp.issparse(self.X):
            S = self._laplace_cov_or_diag(theta)
            Q = _sparse_row_forms(self.X, self.fit_intercept, S, K, self._squares(self.X))
            Hw = self._chunk_terms("hessian_weights", self.X, theta.reshape(K, dext), 0)
            if Hw.ndim == 1:  # C_i = h_i I_K: tr(C Q C) = h_i^2 sum_k Q_kk
                out = Hw ** 2 * np.einsum("ikk->i", Q)
            else:
                out = np.einsum("ikl,ilm,imk->i", Hw, Q, Hw)
            self.n_grad_evals += self.n
            return np.sqrt(np.maximum(out * self.row_norms_sq(), 0.0))
        S = self.laplace_cov(theta).reshape(K, dext, K, dext)
        Theta = theta.reshape(K, dext)
        out = np.empty(self.n)
        for start in range(0, self.n, ROW_CHUNK):
            Xc = self.X[start:start + ROW_CHUNK]
            Xe = _dense_ext(Xc, self.fit_intercept)
            Hw = self._chunk_terms("hessian_weights", Xc, Theta, start)
            sq = np.einsum("ij,ij->i", Xe, Xe)
            if Hw.ndim == 1:  # C_i = h_i I_K: tr(C Q C) = h_i^2 sum_k Q_kk
                q = sum(np.einsum("ij,jl,il->i", Xe, S[k, :, k, :], Xe) for k in range(K))
                out[start:start + len(q)] = Hw ** 2 * q * sq
            else:
                Q = np.empty((len(Xe), K, K))
                for k in range(K):
                    for m in range(K):
                        Q[:, k, m] = np.einsum("ij,jl,il->i", Xe, S[k, :, m, :], Xe)
                out[start:start + len(Q)] = sq * np.einsum("ikl,ilm,imk->i", Hw, Q, Hw)
        self.n_grad_evals += self.n
        return np.sqrt(np.maximum(out, 0.0))

    def laplace_distance_quantile(self, q=0.95, n_draws=20000, seed=0):
        """Quantile of ``||theta - mode||^2`` under the Laplace approximation
        N(mode, S): a weighted chi-square with the eigenvalues of S as weights."""
        S = self.laplace_cov(self.mode())
        lam = np.clip(np.linalg.eigvalsh(S), 0.0, None)
        xi = np.random.default_rng(seed).standard_normal((n_draws, len(lam)))
        return float(np.quantile((xi ** 2) @ lam, q))

    def leverages(self, theta):
        """``x_i^T S x_i`` (S the Laplace covariance; max over output blocks),
        the posterior variance of z_i: how far residuals move under the posterior.
        CSR rows: O(sum_i nnz_i^2) for a dense S, one pass for the diagonal one
        (above ``MAX_DENSE_LAPLACE``)."""
        K, dext = self.glm.n_outputs, self.dext
        if sp.issparse(self.X):
            Q = _sparse_row_forms(self.X, self.fit_intercept, self._laplace_cov_or_diag(theta), K,
                                  self._squares(self.X))
            return np.einsum("ikk->ik", Q).max(axis=1)
        S = self.laplace_cov(theta).reshape(K, dext, K, dext)
        out = np.zeros(self.n)
        for start in range(0, self.n, ROW_CHUNK):
            Xe = _dense_ext(self.X[start:start + ROW_CHUNK], self.fit_intercept)
            for k in range(K):
                q = np.einsum("ij,jl,il->i", Xe, S[k, :, k, :], Xe)
                out[start:start + len(q)] = np.maximum(out[start:start + len(q)], q)
        return out

    def row_norms_sq(self):
        """``||(x_i, 1)||^2`` for every row (cached)."""
        if "rownorms" not in self._cache:
            from ._glm import row_norms_sq
            self._cache["rownorms"] = row_norms_sq(self.X, self.fit_intercept)
        return self._cache["rownorms"]

    def residual_norms_sq(self, theta):
        """``||phi'(z_i, y_i)||^2`` at theta for every datum, shape (n,): from the
        cached :meth:`residuals` (no pass of its own)."""
        R, _ = self.residuals(theta)
        return np.einsum("nk,nk->n", R, R)

    def minibatch_noise_curvature(self, theta, col_scale=None):
        """Upper bound on lambda_max of the covariance of the uniform minibatch
        estimate ``(n/b) sum_{j in S} grad U_j`` at theta (S with replacement):
        ``(n^2/b) Cov_i(g_i) <= (n/b) sum_i ||r_i||^2 x_i x_i^T`` (g_i = r_i (x) x_i),
        in the metric D = diag(col_scale) when given.
        """
        return (self.n / self.batch_size) * self.gram_norm(
            col_scale, self.residual_norms_sq(theta))

    def gradient_moments(self, theta):
        """Mean and mean square over i of the per-datum gradients at theta.

        Returns
        -------
        mean : ndarray of shape (dim,)
            ``(1/n) sum_i grad U_i(theta)``.
        mean_sq : ndarray of shape (dim,)
            ``(1/n) sum_i grad U_i(theta)**2`` (elementwise).
        """
        K, dext, d = self.glm.n_outputs, self.dext, self.X.shape[1]
        Theta = theta.reshape(K, dext)
        s1 = np.zeros((K, dext))
        s2 = np.zeros((K, dext))
        for start, Xc in self._blocks():
            R = self._chunk_terms("residual", Xc, Theta, start)
            X2 = self._squares(Xc)
            s1[:, :d] += np.asarray(Xc.T @ R).T
            s2[:, :d] += np.asarray(X2.T @ (R * R)).T
            if self.fit_intercept:
                s1[:, d] += R.sum(axis=0)
                s2[:, d] += (R * R).sum(axis=0)
        self.n_grad_evals += self.n
        return s1.ravel() / self.n, s2.ravel() / self.n

    def hessian_diag(self, theta):
        """Diagonal of ``grad^2 U(theta)`` (prior included), shape (dim,): one
        counted pass, none where the per-datum curvatures at theta are cached
        (:meth:`hessian_row_weights` with ``full=True``)."""
        K, dext, d = self.glm.n_outputs, self.dext, self.X.shape[1]
        Theta = theta.reshape(K, dext)
        cached = self._cache.get(("hrow", True, theta.tobytes()))
        out = np.zeros((K, dext))
        for start, Xc in self._blocks():
            if cached is None:
                Hw = self._chunk_terms("hessian_weights", Xc, Theta, start)
            else:
                Hw = cached[start:start + Xc.shape[0]]
            Hw = Hw[:, None] if Hw.ndim == 1 else np.einsum("nkk->nk", Hw)  # (rows, K)
            out[:, :d] += np.asarray(self._squares(Xc).T @ Hw).T
            if self.fit_intercept:
                out[:, d] += Hw.sum(axis=0)
        if cached is None:
            self.n_grad_evals += self.n
        return out.ravel() + self.alpha

    def _squares(self, Xc):
        """``Xc .* Xc`` (float64 for dense rows); of the whole CSR X, cached."""
        if not sp.issparse(Xc):
            return np.square(Xc, dtype=np.float64)
        if Xc is not self.X:
            return Xc.multiply(Xc).tocsr()
        if "squares" not in self._cache:
            X = self.X
            if not X.has_canonical_format:   # duplicates: squares of their sums
                X = X.copy()
                X.sum_duplicates()
            self._cache["squares"] = sp.csr_matrix(
                (np.square(X.data, dtype=np.float64), X.indices, X.indptr), shape=X.shape)
        return self._cache["squares"]


def _pcg(matvec, b, inv_diag, n_iter, rtol):
    """Preconditioned conjugate gradients for ``A x = b`` (A s.p.d.), at most
    ``n_iter`` products, stopped at ``||r|| <= rtol ||b||``."""
    x = np.zeros_like(b)
    r = b.copy()
    zv = inv_diag * r
    p = zv.copy()
    tmp = np.empty_like(b)     # in place: no new dim-sized array an iteration
    rz = r @ zv
    stop = rtol * np.linalg.norm(b)
    for _ in range(n_iter):
        Ap = matvec(p)
        a = rz / (p @ Ap)
        x += np.multiply(a, p, out=tmp)
        r -= np.multiply(a, Ap, out=tmp)
        if np.linalg.norm(r) <= stop:
            break
        np.multiply(inv_diag, r, out=zv)
        rz_new = r @ zv
        p *= rz_new / rz
        p += zv
        rz = rz_new
    return x


def _power_iteration(X, fit_intercept, col_scale=None, row_weight=None, n_iter=100, tol=1e-6,
                     seed=0):
    """Largest eigenvalue of ``D X_ext^T W X_ext D`` (X_ext = (X, 1), W = diag(row_weight)).

    Returns
    -------
    lam : float
        An upper estimate (||A v|| of the last iterate, times 1.01).
    n_iter : int
        Matrix-vector products with ``X_ext^T X_ext`` done.
    """
    d = X.shape[1]
    dext = d + int(fit_intercept)
    if X.shape[0] == 0 or dext == 0:
        return 0.0, 0
    D = np.ones(dext) if col_scale is None else np.asarray(col_scale, dtype=np.float64)
    v = np.random.default_rng(seed).standard_normal(dext)
    v /= np.linalg.norm(v)
    lam = 0.0
    it = 0
    for it in range(1, n_iter + 1):
        u = D * v
        z = np.asarray(X @ u[:d], dtype=np.float64)
        if fit_intercept:
            z = z + u[d]
        if row_weight is not None:
            z = z * row_weight
        w = np.empty(dext)
        w[:d] = np.asarray(X.T @ z, dtype=np.float64)
        if fit_intercept:
            w[d] = z.sum()
        w *= D
        new = float(v @ w)
        norm = np.linalg.norm(w)
        if norm == 0:
            return 0.0, it
        v = w / norm
        if abs(new - lam) <= tol * abs(new):
            lam = new
            break
        lam = new
    # the Rayleigh quotient under-estimates; ||A v|| of the iterate is larger
    return float(norm) * 1.01, it
