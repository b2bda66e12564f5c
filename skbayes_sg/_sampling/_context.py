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
from scipy.linalg import cho_factor, cho_solve

from ._glm import GLM, linear_predictor, potential_and_grad
from ._row_algebra import (CHORD_MIN_CONTRACTION, GRAM_DEAR_RATIO, MAX_DENSE_LAPLACE, MAX_NEWTON_ITER, MODE_TOL_SD,
                           ROW_CHUNK, SPARSE_CG_TIGHTEN, SUBSAMPLE_MODE_MIN_ROWS,
                           SUBSAMPLE_MODE_STRIDE, _pcg, dense_gram)
from ._curvature import CurvatureMixin
from ._row_noise import RowNoiseMixin


def _bfgs_update(H, s, y):
    """The BFGS update of a Hessian approximation ``H`` by the step ``s`` and
    the change of gradient ``y`` along it (kept as is where ``y^T s <= 0``,
    which a convex potential gives only by rounding)."""
    ys = float(y @ s)
    Hs = H @ s
    sHs = float(s @ Hs)
    if ys <= 0.0 or sHs <= 0.0:
        return H
    return H + np.outer(y, y) / ys - np.outer(Hs, Hs) / sHs


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
class FitContext(CurvatureMixin, RowNoiseMixin):
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
            self._adopt_row_terms(theta)
            self._cache["mode"] = theta
        return self._cache["mode"]

    def _value_grad_hessian(self, theta, hessian=True):
        """``U``, ``grad U`` and the dense ``grad^2 U`` at theta in one counted
        pass (CSR rows: the Hessian is a sparse Gram, O(sum_i nnz_i^2));
        ``hessian=False``: None in its place, and no Gram (dense rows)."""
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
            W = self._weigh(self.glm.hessian_weights(Z, self.y), 0) if hessian else None
            self.n_grad_evals += self.n
            self._keep_row_terms(theta, R, G, W, Z)
            return (u, G.ravel() + self.alpha * theta,
                    self._sparse_weighted_gram(W) + self.alpha * np.eye(self.dim) if hessian
                    else None)
        G = np.zeros((K, dext))
        H = np.zeros((K, dext, K, dext))
        R_rows = W_rows = Z_rows = None
        for start in range(0, self.n, ROW_CHUNK):
            Xc = self.X[start:start + ROW_CHUNK]
            yc = self.y[start:start + ROW_CHUNK]
            Z = linear_predictor(Xc, Theta, self.fit_intercept)
            u += float(self._weigh(self.glm.loss(Z, yc), start).sum())
            R = self._weigh(self.glm.residual(Z, yc), start)
            G[:, :d] += np.asarray(Xc.T @ R).T
            if self.fit_intercept:
                G[:, d] += R.sum(axis=0)
            if R_rows is None:
                R_rows = np.empty((self.n,) + R.shape[1:])
                Z_rows = np.empty((self.n,) + Z.shape[1:])
            R_rows[start:start + len(R)] = R
            Z_rows[start:start + len(Z)] = Z
            if not hessian:
                continue
            W = self._weigh(self.glm.hessian_weights(Z, yc), start)
            if W_rows is None:
                W_rows = np.empty((self.n,) + W.shape[1:])
            W_rows[start:start + len(W)] = W
            if W.ndim == 1:
                B = dense_gram(Xc, W, self.fit_intercept)
                for k in range(K):
                    H[k, :, k, :] += B
            else:
                for k in range(K):
                    for m in range(K):
                        H[k, :, m, :] += dense_gram(Xc, W[:, k, m], self.fit_intercept)
        self.n_grad_evals += self.n
        self._keep_row_terms(theta, R_rows, G, W_rows, Z_rows)
        return (u, G.ravel() + self.alpha * theta,
                H.reshape(self.dim, self.dim) + self.alpha * np.eye(self.dim) if hessian
                else None)

    def _keep_row_terms(self, theta, R, G, W, Z):
        """Keep the rows' residuals, the data gradient, the rows' curvatures
        and linear predictors of the latest Newton evaluation: at the mode
        they are :meth:`residuals`, :meth:`hessian_row_weights` and the
        predictors of the residual moments there, which the noise model and
        the control variate read (three passes saved).  Only the latest is
        kept (O(n) memory)."""
        if R is None:
            return
        self._cache["newton_rows"] = (theta.tobytes(), R, G.ravel().copy(), W, Z)

    def _adopt_row_terms(self, theta):
        """File the kept Newton rows under the caches of :meth:`residuals` and
        :meth:`hessian_row_weights` when they were computed at ``theta``
        (the same arithmetic, so the same bits)."""
        kept = self._cache.pop("newton_rows", None)
        if kept is None or kept[0] != theta.tobytes():
            return
        key, R, G, W, Z = kept
        self._cache[("res", key)] = (R, G)
        self._cache[("z", key)] = Z
        if W is not None:
            self._cache[("hrow", True, key)] = W
            self._cache[("hrow", False, key)] = W if W.ndim == 1 else np.einsum("nkk->n", W)

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

    def search_mode_from(self, theta):
        """Start the mode search at ``theta`` instead of 0 (a point near the
        mode of a closely related posterior: the negative binomial's shape
        search moves the mode a little at each of its rounds)."""
        self._cache["mode_start"] = np.array(theta, dtype=np.float64).ravel()

    def _mode_start(self):
        start = self._cache.get("mode_start")
        return np.zeros(self.dim) if start is None else start.copy()

    def _newton_dense(self):
        """Each iteration: one pass for U, the gradient and the Hessian at the
        new point (shared by the line search's first, usually accepted, trial).
        From ``SUBSAMPLE_MODE_MIN_ROWS`` rows on, without a given start and
        for a model that is not quadratic (whose first step lands on the
        mode from anywhere), the search starts at the mode of every
        ``SUBSAMPLE_MODE_STRIDE``-th row (:meth:`_subsample_mode`): a few sds
        from the mode.  From there the steps are chord steps in the
        subsample's Hessian at its mode, scaled to all rows and corrected by
        each step's secant (BFGS), and their passes skip the Hessian's Gram,
        most of a pass's cost: each step shrinks the Newton decrement 10-20
        times (1/sqrt(m) is the subsample's curvature error), where exact
        steps from there would cost a Gram each.  Where the decrement in that
        Hessian meets the stop, one Gram gives the Hessian there and the
        stop is checked again in it: met, that point is the mode (its
        remaining step is under ``MODE_TOL_SD`` sds) and the Hessian the
        curvature kept.  A chord step that shrinks the decrement by less than
        ``1 / CHORD_MIN_CONTRACTION`` hands over to exact Newton steps."""
        T = float(self.settings.temperature)
        tol = MODE_TOL_SD * np.sqrt(T)
        H = None
        if ("mode_start" not in self._cache and self.n >= SUBSAMPLE_MODE_MIN_ROWS
                and not self.glm.spec.quadratic):
            self._cache["mode_start"], H = self._subsample_mode()
        theta = self._mode_start()
        u, g, H_here = self._value_grad_hessian(theta, hessian=H is None)
        H = H if H_here is None else H_here
        stale, last = H_here is None, np.inf    # stale: H is not the Hessian at theta
        for _ in range(MAX_NEWTON_ITER):
            step = cho_solve(self._posterior_cholesky(H, cho_factor), g)
            decrement = float(np.sqrt(max(g @ step, 0.0)))
            if stale and decrement <= tol:
                H, stale = self._hessian_at_last_rows(theta), False
                step = cho_solve(self._posterior_cholesky(H, cho_factor), g)
                decrement = float(np.sqrt(max(g @ step, 0.0)))
                if decrement <= tol:
                    break
            exact = not stale or decrement > CHORD_MIN_CONTRACTION * last
            new, values = self._line_search(
                theta, u, g, step, lambda point: self._value_grad_hessian(point, hessian=exact))
            if values is None:  # no decrease left: at the optimum to rounding
                break
            (u_new, g_new, H_new), last = values, decrement
            H = _bfgs_update(H, new - theta, g_new - g) if H_new is None else H_new
            theta, u, g, stale = new, u_new, g_new, H_new is None
            if not stale and decrement <= tol:
                break
        if stale:    # the curvature kept is the Hessian at the mode
            H = self._hessian_at_last_rows(theta)
        return theta, H

    def _hessian_at_last_rows(self, theta):
        """``grad^2 U(theta)`` where the latest :meth:`_value_grad_hessian`
        (without its Hessian) kept the rows' linear predictors at theta: the
        rows' curvatures from them and their Gram, a counted pass without the
        predictors, the loss and the gradient; else that whole evaluation."""
        kept = self._cache.get("newton_rows")
        if kept is None or kept[0] != theta.tobytes():
            return self._value_grad_hessian(theta)[2]
        key, R, G, _, Z = kept
        W = np.concatenate([
            self._weigh(self.glm.hessian_weights(Z[start:start + ROW_CHUNK],
                                                 self.y[start:start + ROW_CHUNK]), start)
            for start in range(0, self.n, ROW_CHUNK)])
        self._cache["newton_rows"] = (key, R, G, W, Z)
        return self.weighted_gram(W) + self.alpha * np.eye(self.dim)

    def _subsample_mode(self):
        """The mode of the posterior of every ``SUBSAMPLE_MODE_STRIDE``-th row
        under the prior scaled by the same fraction (the posterior of the
        whole data tempered to the subsample's size, whose mode is the
        whole data's to O(1/sqrt(m)) sds), and its Hessian there scaled to
        all rows (``n/m`` times: the data's part to all rows, the prior's
        back to ``alpha``); its passes are counted at the subsample's size."""
        rows = slice(0, self.n, SUBSAMPLE_MODE_STRIDE)
        X = self.X[rows]
        if not sp.issparse(X):
            X = np.ascontiguousarray(X)
        weights = None if self.sample_weight is None else self.sample_weight[rows]
        sub = FitContext(X, self.y[rows], self.glm, self.alpha * X.shape[0] / self.n,
                         self.fit_intercept, 1, weights, settings=self.settings)
        theta = sub.mode()
        self.n_grad_evals += sub.n_grad_evals
        return theta, sub._cache["hessian_mode"] * (self.n / X.shape[0])

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
        """Truncated Newton-CG from 0 (or :meth:`search_mode_from`'s point),
        stopped when the gradient in the diagonal Laplace metric is at most
        ``tol sqrt(T)`` in every coordinate."""
        T = float(self.settings.temperature)
        theta = self._mode_start()
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
