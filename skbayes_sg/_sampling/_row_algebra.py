"""The row algebra of a fit's set-up: Grams ``X^T W X`` and quadratic forms
``x_i^T S x_i`` of dense or CSR rows (no row densified), and the iterative
solvers (preconditioned CG, power iteration) the context's pieces use, with
the constants that size their blocks and choose their routes."""
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp
from threadpoolctl import threadpool_limits
from scipy.linalg.lapack import dlauum as lauum

from . import _sparse_forms

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
#: rows from which the dense Newton search starts at the mode of a subsample
#: (every SUBSAMPLE_MODE_STRIDE-th row): 5-6 passes from 0 become 2-3
SUBSAMPLE_MODE_MIN_ROWS = 200_000
#: rows from which the set-up's passes over dense rows use every core
#: (:func:`over_row_chunks`)
PARALLEL_MIN_ROWS = 100_000
SUBSAMPLE_MODE_STRIDE = 32
# from there, chord steps in the subsample's Hessian (BFGS-corrected) while
# each shrinks the Newton decrement at least 1 / CHORD_MIN_CONTRACTION times
# (a gradient estimated on a subsample instead of a pass was tried: its error
# is that of the subsample's curvature over the whole way from the start,
# 1.5 sds at n = 10^6 on every 16th row, so it cannot reach the 0.01 sd stop)
CHORD_MIN_CONTRACTION = 0.25
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


def pass_threads():
    """Threads for the set-up's passes over dense rows: the cores this
    process may run on, at most ``OMP_NUM_THREADS`` where that is set (the
    limit scikit-learn's OpenMP estimators honour)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:      # not on Linux
        cores = os.cpu_count() or 1
    limit = os.environ.get("OMP_NUM_THREADS", "").strip()
    if limit.isdigit() and int(limit) > 0:
        cores = min(cores, int(limit))
    return max(1, cores)


def over_row_chunks(chunk_fn, n, chunk=ROW_CHUNK):
    """``chunk_fn(start, stop)`` for the chunks of ``n`` rows, its results in
    the chunks' order (an iterator).  From ``PARALLEL_MIN_ROWS`` rows on, the
    chunks run on :func:`pass_threads` threads, BLAS one thread each (numpy's
    kernels and BLAS release the GIL; the fit already holds BLAS to one
    thread): a caller that sums the results in this order gets the bits of
    the sequential loop."""
    bounds = [(start, min(start + chunk, n)) for start in range(0, n, chunk)]
    workers = min(pass_threads(), len(bounds))
    if n < PARALLEL_MIN_ROWS or workers < 2:
        for start, stop in bounds:
            yield chunk_fn(start, stop)
        return
    pool = ThreadPoolExecutor(workers)
    try:
        with threadpool_limits(limits=1, user_api="blas"):
            yield from pool.map(lambda b: chunk_fn(*b), bounds)
    finally:    # Ctrl-C, an error or an early stop: the chunks not started are dropped
        pool.shutdown(wait=True, cancel_futures=True)


def laplace_log_evidence(potential, alpha, hessian):
    """``log p(y | alpha)`` by the Laplace approximation at a mode whose
    potential is ``potential`` and whose Hessian (prior included, dense) is
    ``hessian``, up to a constant that does not depend on alpha:
    ``-U(theta_hat) + (dim / 2) log alpha - (1/2) log det H``."""
    return (-potential + 0.5 * hessian.shape[0] * np.log(alpha)
            - 0.5 * np.linalg.slogdet(hessian)[1])


def dense_gram(Xc, w, fit_intercept):
    """``X_ext^T diag(w) X_ext`` of a row chunk (x_i with the constant
    column), dense (dext, dext), without the chunk's copy with that column
    (:func:`_dense_ext`): the constant's row and column are ``X^T w`` and
    ``sum w``.  At d = 50 the copy cost as much as the product."""
    Xd = np.asarray(Xc.toarray() if sp.issparse(Xc) else Xc, dtype=np.float64)
    d = Xd.shape[1]
    Xw = Xd * w[:, None]
    B = np.empty((d + int(fit_intercept),) * 2)
    B[:d, :d] = Xd.T @ Xw
    if fit_intercept:
        col = Xw.sum(axis=0)
        B[:d, d] = col
        B[d, :d] = col
        B[d, d] = w.sum()
    return B


def dense_gram_blocks(Xc, W, K, fit_intercept):
    """``sum_i W_i (x) x_i x_i^T`` of a row chunk, shape (K, dext, K, dext):
    W of shape (rows,) (the same block on every output's diagonal) or
    (rows, K, K) (each pair of outputs its own weights)."""
    dext = Xc.shape[1] + int(fit_intercept)
    G = np.zeros((K, dext, K, dext))
    if W.ndim == 1:
        B = dense_gram(Xc, W, fit_intercept)
        for k in range(K):
            G[k, :, k, :] = B
    else:
        for k in range(K):
            for m in range(K):
                G[k, :, m, :] = dense_gram(Xc, W[:, k, m], fit_intercept)
    return G


def dense_times(Xc, A, fit_intercept):
    """``X_ext A`` of a row chunk (A of dext rows), without the chunk's copy
    with the constant column."""
    Xd = Xc.toarray() if sp.issparse(Xc) else Xc
    d = Xd.shape[1]
    out = np.asarray(Xd @ A[:d], dtype=np.float64)
    if fit_intercept:
        out += A[d]
    return out


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
    (:func:`._sparse_forms.row_forms`, compiled, each pair once in a
    symmetric block: 0.05-0.06 s for 10^5 rows of 20 non-zeros in 1,000
    columns on an AMD EPYC, where every ordered pair took 0.39-0.65 s), against
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
