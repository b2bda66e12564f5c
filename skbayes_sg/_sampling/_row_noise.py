"""The gradient noise of a fit's estimators, for :class:`~._context.FitContext`:
per-datum residuals, the rows' covariances in the sampler's metric, the
residuals' moments under the posterior, the one-row noise of each estimator,
and the moments of the per-datum gradients."""
import numpy as np
import scipy.sparse as sp

from ._spectrum import largest_eigenvalue
from ._glm import linear_predictor
from ._row_algebra import (ROW_CHUNK, _covariance_of_factor, _sparse_row_forms, dense_times,
                           over_row_chunks)

class RowNoiseMixin:
    """The noise pieces of :class:`~._context.FitContext` (they read its data,
    model, prior, curvature and cache)."""

    def residuals(self, theta):
        """``R[i] = phi'(z_i, y_i)`` at theta, shape (n, K), and the data gradient
        ``sum_i grad U_i(theta)`` (dim,) -- one counted pass (cached); at the
        mode of an adopted population, the population's data gradient."""
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
            G = G.ravel()
            population = self.population
            if population is not None and np.array_equal(theta, population.mode):
                G = np.array(population.data_gradient, dtype=np.float64)
            self._cache[key] = (R, G)
        return self._cache[key]

    def linear_predictors(self, theta):
        """``z_i = (x_i, 1)^T theta`` per datum, shape (n, K): those the
        mode search left at theta (no pass), else one counted pass (cached)."""
        key = ("z", theta.tobytes())
        if key not in self._cache:
            self._cache[key] = linear_predictor(
                self.X, theta.reshape(self.glm.n_outputs, self.dext), self.fit_intercept)
            self.n_grad_evals += self.n
        return self._cache[key]

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

        def chunk_forms(start, stop):    # writes its own rows of out (thread-safe)
            Xc = self.X[start:stop]
            if kind == "dense":
                # Y_k = X_ext L_k: L_k the rows of output k's coefficients
                Lk = factor.reshape(K, dext, self.dim)
                Y = [dense_times(Xc, Lk[k], self.fit_intercept) for k in range(K)]
                for k in range(K):
                    for m in range(k, K):   # symmetric: each pair once
                        q = np.einsum("rD,rD->r", Y[k], Y[m])
                        out[start:stop, k, m] = q
                        out[start:stop, m, k] = q
            else:
                D2 = (factor.reshape(K, dext) ** 2)
                X2 = Xc.multiply(Xc) if sp.issparse(Xc) else np.square(Xc, dtype=np.float64)
                q = np.asarray(X2 @ D2[:, :X2.shape[1]].T)      # (rows, K)
                if self.fit_intercept:
                    q = q + D2[:, -1]
                block = np.zeros((len(q), K, K))
                block[:, np.arange(K), np.arange(K)] = q
                out[start:stop] = block

        for _ in over_row_chunks(chunk_forms, self.n, max(1, ROW_CHUNK // max(K * K, 1))):
            pass
        self.n_grad_evals += self.n
        return out[:, 0, 0].copy() if K == 1 else out

    def row_noise_moments(self, control, Q):
        """Second moment, per datum, of its term in a one-row estimate of the
        data gradient, under the Laplace law (linearised residuals):
        ``E[d_i d_i^T]`` with ``d_i = r_i(theta) - a_i``.

        control : {"fixed", "taylor", "snapshot", "none"}
            ``a_i = r_i(mode)``: ``C_i Q_i C_i`` (C_i the curvature at the
            mode); its second-order expansion (``"taylor"``, one output):
            the moment of the remainder; a snapshot about one posterior draw
            old: twice the fixed one; no control: ``r_i(mode) r_i(mode)^T +
            C_i Q_i C_i``.
        Q : ndarray
            ``x_i^T S x_i`` per datum ((n,) or (n, K, K)), S the posterior
            (Laplace) covariance at the fit's temperature.

        The mode is ``resolved.noise_center`` where one is set.
        """
        mode = self.mode() if self.resolved.noise_center is None else self.resolved.noise_center
        C = self.hessian_row_weights(mode, full=True)
        if C.ndim == 1 and np.ndim(Q) == 1 and (control == "taylor"
                                                 or not self.resolved.linearised_noise):
            # one output: the exact moments under the Laplace law of each
            # row's linear predictor (the linearised C^2 Q misses the rows
            # fitted almost exactly at the mode; the taylor control's
            # remainder has no linearised form at all)
            key = ("resmom", control, mode.tobytes(), Q.tobytes())
            if key not in self._cache:
                E = self._residual_moments(mode, Q, "fixed" if control == "snapshot" else control)
                self._cache[key] = 2.0 * E if control == "snapshot" else E
            return self._cache[key]
        if control == "taylor":
            raise ValueError("the taylor control needs one output (K = 1)")
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

    def _residual_moments(self, theta, Q, control):
        """``E[(r_i(eta) - a_i)^2]`` per datum, ``eta ~ N(z_i(theta), Q_i)``,
        of the weighted data (K = 1; :meth:`GLM.residual_moments`, ``control``
        one of its three).  One counted pass."""
        Theta = theta.reshape(1, self.dext)
        T = float(self.settings.temperature)
        out = np.empty(self.n)
        # the predictors at the mode, where the mode search left them (no pass)
        known = self._cache.get(("z", theta.tobytes()))

        def chunk_moments(start, stop):   # writes its own rows of out (thread-safe)
            Z = (linear_predictor(self.X[start:stop], Theta, self.fit_intercept)
                 if known is None else known[start:stop])
            power = self._weigh(np.ones(stop - start), start) / T
            m = self.glm.residual_moments(Z, self.y[start:stop], Q[start:stop], control, power)
            out[start:stop] = self._weigh(self._weigh(m, start), start)

        # CSR rows in one block (a row slice would copy them)
        for _ in over_row_chunks(chunk_moments, self.n,
                                 max(self.n, 1) if sp.issparse(self.X) else ROW_CHUNK):
            pass
        if known is None:
            self.n_grad_evals += self.n
        return out

    def noise_per_row(self, E, p, kind, factor, scale):
        """``v1``: the largest variance, over directions of the sampler's
        coordinates, of a one-row estimate ``sum_i d_i (x) x_i / p_i``:
        ``lambda_max(scale^2 L^T B L)`` with ``B = sum_i E_i (x) x_i x_i^T / p_i``
        (eigenvalues of the dense matrix, or power iteration for a diagonal
        metric, each product a counted pass).  CSR rows whose Gram is dear
        (:meth:`gram_is_dear`) take a Lanczos iteration on the products in
        either metric (``B u`` a pass, ``L v`` O(dim^2)): 1.01 times its
        largest Ritz value, an upper estimate as the power iteration's."""
        w = E * self.n if p is None else E / (p if E.ndim == 1 else p[:, None, None])
        if self.gram_is_dear():
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

    def laplace_distance_quantile(self, q=0.95, n_draws=20000, seed=0):
        """Quantile of ``||theta - mode||^2`` under the Laplace approximation
        N(mode, S): a weighted chi-square with the eigenvalues of S as weights."""
        S = self.laplace_cov(self.mode())
        lam = np.clip(np.linalg.eigvalsh(S), 0.0, None)
        xi = np.random.default_rng(seed).standard_normal((n_draws, len(lam)))
        return float(np.quantile((xi ** 2) @ lam, q))

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
