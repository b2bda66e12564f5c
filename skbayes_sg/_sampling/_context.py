"""Everything computed once per ``fit`` before the chains start.

A :class:`FitContext` holds the validated data, the GLM, the prior and the
fit-level quantities several pieces need (curvature bound L, the mode,
per-datum gradient moments).  Expensive pieces are computed lazily and
cached, so an estimator that needs the mode pays for it once, and one that
does not never does.
"""
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from scipy.optimize import minimize

from ._glm import GLM, linear_predictor, potential_and_grad

ROW_CHUNK = 8192
# above this many parameters the Laplace covariance is approximated by its diagonal
MAX_DENSE_LAPLACE = 4000


def _dense_ext(Xc, fit_intercept):
    """A dense float64 copy of a row chunk, with the constant column."""
    Xd = Xc.toarray() if sp.issparse(Xc) else np.asarray(Xc, dtype=np.float64)
    Xd = np.asarray(Xd, dtype=np.float64)
    if fit_intercept:
        Xd = np.hstack([Xd, np.ones((Xd.shape[0], 1))])
    return Xd


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
    """

    X: object
    y: np.ndarray
    glm: GLM
    alpha: float
    fit_intercept: bool
    batch_size: int
    options: dict = field(default_factory=dict)   # estimator settings (access, ...)
    _cache: dict = field(default_factory=dict, repr=False)
    # per-datum gradient evaluations spent on set-up: every full pass over the
    # data (mode search, power iteration, moments) counts n
    n_grad_evals: int = 0

    @property
    def n(self):
        return self.X.shape[0]

    @property
    def dext(self):
        return self.X.shape[1] + int(self.fit_intercept)

    @property
    def dim(self):
        return self.glm.n_outputs * self.dext

    # ------------------------------------------------------------------
    def potential_and_grad(self, theta):
        """Exact ``U(theta)`` and its gradient (numpy)."""
        return potential_and_grad(theta, self.X, self.y, self.glm, self.alpha,
                                  self.fit_intercept)

    def mode(self):
        """MAP estimate ``theta_hat`` by L-BFGS on the exact objective (cached)."""
        if "mode" not in self._cache:
            x0 = np.zeros(self.dim)
            # scale-aware tolerance: stop when the gradient is tiny relative to
            # its size at the origin
            _, g0 = self.potential_and_grad(x0)
            gtol = 1e-10 * max(1.0, np.max(np.abs(g0)))
            res = minimize(self.potential_and_grad, x0, jac=True, method="L-BFGS-B",
                           options={"maxiter": 2000, "gtol": gtol, "ftol": 1e-15})
            self.n_grad_evals += (int(res.nfev) + 1) * self.n  # + the pass at x0 for gtol
            self._cache["mode"] = res.x
            self._cache["mode_result"] = res
        return self._cache["mode"]

    def curvature_bound(self):
        """L >= lambda_max(grad^2 U) for every theta: alpha + c lambda_max(X_ext^T X_ext)."""
        if "L" not in self._cache:
            self._cache["L"] = self.alpha + self.glm.curvature_bound() * self.gram_norm()
        return self._cache["L"]

    def curvature(self, theta=None, col_scale=None):
        """lambda_max of ``grad^2 U`` at theta, in the metric diag(col_scale):
        ``alpha max(D^2) + lambda_max(D X^T diag(h_i) X D)`` with h_i the
        per-datum curvature at theta (a softmax datum: the trace of its K x K
        block, which bounds its largest eigenvalue).  theta None: the global
        bound (``curvature_bound``).  The chains start at theta and stay in
        its posterior neighbourhood, where this is the curvature they meet;
        the global bound can overstate it several times (logistic: 1/4 vs
        s(1 - s) at the mode).
        """
        if theta is None:
            if col_scale is None:
                return self.curvature_bound()
            return (self.alpha * np.max(col_scale) ** 2
                    + self.glm.curvature_bound() * self.gram_norm(col_scale))
        hw = self.hessian_row_weights(theta)
        scale_max = 1.0 if col_scale is None else np.max(col_scale) ** 2
        return self.alpha * scale_max + self.gram_norm(col_scale, hw)

    def hessian_row_weights(self, theta):
        """Per-datum curvature ``d^2 phi / dz^2`` at theta as one number per datum
        (a softmax datum: the trace of its K x K block, which bounds its largest
        eigenvalue), shape (n,); one counted pass (cached)."""
        key = ("hrow", theta.tobytes())
        if key not in self._cache:
            K, dext = self.glm.n_outputs, self.dext
            Theta = theta.reshape(K, dext)
            hw = np.empty(self.n)
            for start in range(0, self.n, ROW_CHUNK):
                Xc = self.X[start:start + ROW_CHUNK]
                H = self.glm.hessian_weights(linear_predictor(Xc, Theta, self.fit_intercept),
                                             self.y[start:start + ROW_CHUNK])
                hw[start:start + len(H)] = H if H.ndim == 1 else np.einsum("nkk->n", H)
            self.n_grad_evals += self.n
            self._cache[key] = hw
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
            for start in range(0, self.n, ROW_CHUNK):
                Xc = self.X[start:start + ROW_CHUNK]
                Rc = self.glm.residual(linear_predictor(Xc, Theta, self.fit_intercept),
                                       self.y[start:start + ROW_CHUNK])
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
                self._cache[key] = np.linalg.inv(self.hessian(theta))
        return self._cache[key]

    def hessian(self, theta):
        """Dense ``grad^2 U(theta)`` (prior included), shape (dim, dim)."""
        K, dext = self.glm.n_outputs, self.dext
        Theta = theta.reshape(K, dext)
        H = np.zeros((K, dext, K, dext))
        for start in range(0, self.n, ROW_CHUNK):
            Xc = self.X[start:start + ROW_CHUNK]
            Xe = _dense_ext(Xc, self.fit_intercept)
            Hw = self.glm.hessian_weights(linear_predictor(Xc, Theta, self.fit_intercept),
                                          self.y[start:start + ROW_CHUNK])
            if Hw.ndim == 1:  # the same curvature for every output (C_i = h_i I_K)
                block = Xe.T @ (Xe * Hw[:, None])
                for k in range(K):
                    H[k, :, k, :] += block
            else:
                for k in range(K):
                    for m in range(K):
                        H[k, :, m, :] += Xe.T @ (Xe * Hw[:, k, m][:, None])
        self.n_grad_evals += self.n
        return H.reshape(self.dim, self.dim) + self.alpha * np.eye(self.dim)

    def hessian_trace_weights(self, theta):
        """``sqrt(tr(H_i S H_i))`` per datum, H_i = grad^2 U_i(theta), S the
        Laplace covariance at theta: the SGLD-CV-PS weights (closed form for a
        GLM: H_i = C_i (x) x_i x_i^T, so tr(H_i S H_i) = ||x_i||^2 tr(C_i Q_i C_i),
        Q_i[k, m] = x_i^T S_km x_i)."""
        K, dext = self.glm.n_outputs, self.dext
        S = self.laplace_cov(theta).reshape(K, dext, K, dext)
        Theta = theta.reshape(K, dext)
        out = np.empty(self.n)
        for start in range(0, self.n, ROW_CHUNK):
            Xc = self.X[start:start + ROW_CHUNK]
            Xe = _dense_ext(Xc, self.fit_intercept)
            Hw = self.glm.hessian_weights(linear_predictor(Xc, Theta, self.fit_intercept),
                                          self.y[start:start + ROW_CHUNK])
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
        the posterior variance of z_i: how far residuals move under the posterior."""
        K, dext = self.glm.n_outputs, self.dext
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
        for start in range(0, self.n, ROW_CHUNK):
            Xc = self.X[start:start + ROW_CHUNK]
            R = self.glm.residual(linear_predictor(Xc, Theta, self.fit_intercept),
                                  self.y[start:start + ROW_CHUNK])
            X2 = Xc.multiply(Xc) if sp.issparse(Xc) else np.square(Xc, dtype=np.float64)
            s1[:, :d] += np.asarray(Xc.T @ R).T
            s2[:, :d] += np.asarray(X2.T @ (R * R)).T
            if self.fit_intercept:
                s1[:, d] += R.sum(axis=0)
                s2[:, d] += (R * R).sum(axis=0)
        self.n_grad_evals += self.n
        return s1.ravel() / self.n, s2.ravel() / self.n

    def hessian_diag(self, theta):
        """Diagonal of ``grad^2 U(theta)`` (prior included), shape (dim,)."""
        K, dext, d = self.glm.n_outputs, self.dext, self.X.shape[1]
        Theta = theta.reshape(K, dext)
        out = np.zeros((K, dext))
        for start in range(0, self.n, ROW_CHUNK):
            Xc = self.X[start:start + ROW_CHUNK]
            Hw = self.glm.hessian_weights(linear_predictor(Xc, Theta, self.fit_intercept),
                                          self.y[start:start + ROW_CHUNK])
            Hw = Hw[:, None] if Hw.ndim == 1 else np.einsum("nkk->nk", Hw)  # (rows, K)
            X2 = Xc.multiply(Xc) if sp.issparse(Xc) else np.square(Xc, dtype=np.float64)
            out[:, :d] += np.asarray(X2.T @ Hw).T
            if self.fit_intercept:
                out[:, d] += Hw.sum(axis=0)
        self.n_grad_evals += self.n
        return out.ravel() + self.alpha


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
