"""The posterior mode of a fit and the Hessian there, for
:class:`~._context.FitContext`: Newton's method with a line search on dense
Hessians (from a subsample's mode with chord steps on many rows), a
truncated Newton-CG above ``MAX_DENSE_LAPLACE`` parameters or where CSR
rows' Grams are dear (:class:`ModeSearchMixin`)."""
import numpy as np
import scipy.sparse as sp
from scipy.linalg import cho_factor, cho_solve

from ._glm import linear_predictor
from ._row_algebra import (CHORD_MIN_CONTRACTION, MAX_DENSE_LAPLACE, MAX_NEWTON_ITER, MODE_TOL_SD,
                           ROW_CHUNK, SPARSE_CG_TIGHTEN, SUBSAMPLE_MODE_MIN_ROWS,
                           SUBSAMPLE_MODE_STRIDE, _pcg, dense_gram_blocks, over_row_chunks)


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


class ModeSearchMixin:
    """The mode searches of :class:`~._context.FitContext` (they read its
    data, model, prior, settings, counters and cache)."""

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
        CSR rows whose Gram is dear (:meth:`gram_is_dear`) take the
        truncated Newton-CG and one Gram at its end (:meth:`_newton_sparse`).
        """
        if "mode" not in self._cache:
            if self.dim <= MAX_DENSE_LAPLACE:
                theta, H = (self._newton_sparse() if self.gram_is_dear()
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

        def chunk_terms(start, stop):
            """U, the gradient, the Hessian of rows start:stop (thread-safe)."""
            Xc, yc = self.X[start:stop], self.y[start:stop]
            Z = linear_predictor(Xc, Theta, self.fit_intercept)
            u_c = float(self._weigh(self.glm.loss(Z, yc), start).sum())
            R = self._weigh(self.glm.residual(Z, yc), start)
            G_c = np.zeros((K, dext))
            G_c[:, :d] = np.asarray(Xc.T @ R).T
            if self.fit_intercept:
                G_c[:, d] = R.sum(axis=0)
            if not hessian:
                return u_c, G_c, R, Z, None, None
            W = self._weigh(self.glm.hessian_weights(Z, yc), start)
            return u_c, G_c, R, Z, W, dense_gram_blocks(Xc, W, K, self.fit_intercept)

        R_rows = np.empty((self.n, K))
        Z_rows = np.empty((self.n, K))
        W_rows = None
        # summed in the chunks' order: the bits of one loop, on every core
        for start, (u_c, G_c, R, Z, W, H_c) in zip(range(0, self.n, ROW_CHUNK),
                                                   over_row_chunks(chunk_terms, self.n)):
            u += u_c
            G += G_c
            R_rows[start:start + len(R)] = R
            Z_rows[start:start + len(Z)] = Z
            if W is not None:
                if W_rows is None:
                    W_rows = np.empty((self.n,) + W.shape[1:])
                W_rows[start:start + len(W)] = W
                H += H_c
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
            step, decrement = self._newton_step(H, g)
            if stale and decrement <= tol:
                H, stale = self._hessian_at_last_rows(theta), False
                step, decrement = self._newton_step(H, g)
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

    def _newton_step(self, H, g):
        """The Newton step ``H^-1 g`` and its decrement ``sqrt(g^T H^-1 g)``
        (the step's length in the posterior sds that H measures)."""
        step = cho_solve(self._posterior_cholesky(H, cho_factor), g)
        return step, float(np.sqrt(max(g @ step, 0.0)))

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
        sub = type(self)(X, self.y[rows], self.glm, self.alpha * X.shape[0] / self.n,
                         self.fit_intercept, 1, weights, settings=self.settings)
        theta = sub.mode()
        self.n_grad_evals += sub.n_grad_evals
        return theta, sub.hessian_at(theta) * (self.n / X.shape[0])

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
            step, decrement = self._newton_step(H, g)
            if decrement <= MODE_TOL_SD * np.sqrt(T):
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
