"""The curvature of a fit's posterior, for :class:`~._context.FitContext`:
Hessian-vector products, the largest eigenvalue and global or local bounds,
per-datum curvature weights, the Laplace covariance, factor and metric,
weighted Grams and the Hessian's diagonal (cached where they are reused)."""
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp
from scipy.linalg import solve_triangular

from ._spectrum import largest_eigenvalue
from ._glm import LOCAL_CURVATURE_SAFETY, linear_predictor
from . import _sparse_forms
from ._row_algebra import (MAX_DENSE_LAPLACE, PARALLEL_MIN_ROWS, ROW_CHUNK, _dense_ext,
                           _float64, dense_gram_blocks, over_row_chunks, pass_threads,
                           _power_iteration, _sparse_gram_blocks, _sparse_row_forms)

#: fixed parts of the rows of a sparse Hessian-vector product from
#: ``PARALLEL_MIN_ROWS`` rows (each its own d-vector; at most this many threads)
HVP_PARTS = 4

class CurvatureMixin:
    """The curvature pieces of :class:`~._context.FitContext` (they read its
    data, model, prior and cache)."""

    def hessian_vector(self, hw, v):
        """``(grad^2 U) v`` from per-datum curvatures ``hw`` ((n,) or (n, K, K))."""
        K, dext, d = self.glm.n_outputs, self.dext, self.X.shape[1]
        if sp.issparse(self.X) and self.X.format == "csr" and hw.ndim == 1:
            return self.alpha * v + self._sparse_normal_product(hw, v)
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

    def _sparse_normal_product(self, w, v):
        """``X_ext^T diag(w) X_ext v`` of CSR rows (one output) in one read of
        the rows a product (:func:`._sparse_forms.weighted_normal_product`).

        The same bits as scipy's two products below ``PARALLEL_MIN_ROWS``
        rows (one part); from there ``HVP_PARTS`` fixed parts of the rows,
        summed in order, on :func:`pass_threads` threads: the bits depend on
        the rows, never on the cores."""
        X, d = self.X, self.X.shape[1]
        data = self._cache.get("csr_data64")
        if data is None:
            data = self._cache["csr_data64"] = _float64(X.data)
        v = _float64(v)
        intercept = float(v[d]) if self.fit_intercept else 0.0
        w = _float64(w)
        residual = np.empty(self.n)
        parts = HVP_PARTS if self.n >= PARALLEL_MIN_ROWS else 1
        edges = np.linspace(0, self.n, parts + 1).astype(np.intp)
        outs = np.zeros((parts, d))

        def part(p):
            _sparse_forms.weighted_normal_product(X.indptr, X.indices, data, w, v[:d],
                                                  intercept, edges[p], edges[p + 1],
                                                  residual, outs[p])
        threads = min(pass_threads(), parts)
        if threads > 1:
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(part, range(parts)))
        else:
            for p in range(parts):
                part(p)
        out = np.zeros(self.dext)
        for p in range(parts):              # in order: the bits do not depend on threads
            out[:d] += outs[p]
        if self.fit_intercept:
            out[d] += residual.sum()
        return out

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

    def row_gram(self):
        """``X_ext X_ext^T``, shape (n, n): the rows' inner products, the
        constant column included.  The likelihood's Hessian ``X_ext^T W
        X_ext`` shares its nonzero eigenvalues with ``W^1/2 X_ext X_ext^T
        W^1/2`` (Sylvester's identity), the small side where rows are fewer
        than coefficients.  Counted as the passes its multiply-adds make: n
        for dense rows, ``sum_j c_j^2 / nnz`` for CSR rows (``c_j`` the
        non-zeros of column j)."""
        X = self.X
        if sp.issparse(X):
            X = X.tocsr()
            gram = np.asarray((X @ X.T).toarray(), dtype=np.float64)
            counts = np.bincount(X.indices, minlength=X.shape[1]).astype(np.float64)
            passes = float(counts @ counts) / max(X.nnz, 1)
        else:
            X = _float64(X)
            gram, passes = X @ X.T, float(self.n)
        if self.fit_intercept:
            gram += 1.0
        self.n_grad_evals += int(np.ceil(passes)) * self.n
        return gram

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
        def chunk_gram(start, stop):
            return dense_gram_blocks(self.X[start:stop], weights[start:stop], K,
                                     self.fit_intercept)

        G = np.zeros((K, dext, K, dext))
        for G_c in over_row_chunks(chunk_gram, self.n):    # in the chunks' order
            G += G_c
        self.n_grad_evals += self.n
        return G.reshape(self.dim, self.dim)

    def hessian(self, theta):
        """Dense ``grad^2 U(theta)`` (prior included), shape (dim, dim): one
        counted pass."""
        before = self.n_grad_evals
        G = self.weighted_gram(self.hessian_row_weights(theta, full=True))
        self.n_grad_evals = before + self.n   # weights and Gram: one pass
        return G + self.alpha * np.eye(self.dim)

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
