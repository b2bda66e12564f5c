# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Quadratic forms of CSR rows against dense matrices, without densifying a
row: the set-up's sparse Gram ``X^T diag(w) X`` and the rows' quadratic
forms ``x_i^T S x_i`` (the Laplace law of each row's linear predictor); and
the Hessian-vector product ``X^T diag(w) X v`` in one read of the rows.

The first two cost ``sum_i nnz_i^2`` multiply-adds: each row's pairs of non-zeros
only.  scipy's sparse product builds the same Gram through a sparse result
(its index bookkeeping dominates at 10^5 rows of 20 non-zeros: 0.15 s
against 0.03 s here), and numpy's gathers of the pairs allocate per block.
Column indices need not be sorted; a repeated column within a row counts
as the sum of its entries, as in the sparse product.
"""
import numpy as np

cimport numpy as cnp

ctypedef cnp.npy_intp intp
# scipy's CSR index arrays: int32, or int64 past 2^31 non-zeros
ctypedef fused index_t:
    cnp.int32_t
    cnp.int64_t


def gram(const index_t[::1] indptr, const index_t[::1] indices, const double[::1] data,
         const double[::1] w, Py_ssize_t d):
    """``sum_i w_i x_i x_i^T`` of CSR rows (``indptr``, ``indices``,
    ``data``), dense (d, d)."""
    cdef double[:, ::1] B = np.zeros((d, d))
    cdef Py_ssize_t n = indptr.shape[0] - 1, i, a, b, lo, hi
    cdef Py_ssize_t ca, cb
    cdef double va
    with nogil:
        for i in range(n):
            lo, hi = indptr[i], indptr[i + 1]
            for a in range(lo, hi):
                ca = indices[a]
                va = w[i] * data[a]
                B[ca, ca] += va * data[a]
                for b in range(a + 1, hi):
                    cb = indices[b]
                    # the upper triangle only (mirrored below): each pair once
                    if ca < cb:
                        B[ca, cb] += va * data[b]
                    elif cb < ca:
                        B[cb, ca] += va * data[b]
                    else:       # a repeated column: its cross term twice
                        B[ca, ca] += 2.0 * va * data[b]
        for a in range(d):
            for b in range(a + 1, d):
                B[b, a] = B[a, b]
    return np.asarray(B)


def row_forms(const index_t[::1] indptr, const index_t[::1] indices, const double[::1] data,
              const intp[::1] rows, const double[:, ::1] S, Py_ssize_t K,
              Py_ssize_t dext, bint fit_intercept, double[:, :, ::1] Q):
    """``Q[r, k, j] = x_r^T S_kj x_r`` for the CSR rows ``rows`` (x_r with
    the constant column ``dext - 1`` valued 1 when ``fit_intercept``), S of
    shape (K dext, K dext) and ``S_kj`` its (k, j) block of (dext, dext);
    Q (n, K, K) is written at those rows, symmetric in (k, j)."""
    cdef Py_ssize_t t, r, a, b, lo, hi, k, j, ok, oj
    cdef Py_ssize_t ca, cb, c1 = dext - 1
    cdef double q, va
    with nogil:
        for t in range(rows.shape[0]):
            r = rows[t]
            lo = indptr[r]
            hi = indptr[r + 1]
            for k in range(K):
                ok = k * dext
                for j in range(k, K):
                    oj = j * dext
                    q = 0.0
                    for a in range(lo, hi):
                        ca = indices[a]
                        va = data[a]
                        if j == k:
                            # a symmetric block (S is a covariance): each pair
                            # once, half the gathers from S
                            q = q + va * va * S[ok + ca, ok + ca]
                            for b in range(a + 1, hi):
                                q = q + 2.0 * va * data[b] * S[ok + ca, ok + indices[b]]
                        else:
                            for b in range(lo, hi):
                                q = q + va * data[b] * S[ok + ca, oj + indices[b]]
                        if fit_intercept:
                            # the constant column: x_a 1 (S[a, c1] + S[c1, a])
                            q = q + va * (S[ok + ca, oj + c1] + S[ok + c1, oj + ca])
                    if fit_intercept:
                        q = q + S[ok + c1, oj + c1]
                    Q[r, k, j] = q
                    Q[r, j, k] = q


def weighted_normal_product(const index_t[::1] indptr, const index_t[::1] indices,
                            const double[::1] data, const double[::1] w,
                            const double[::1] v, double intercept,
                            Py_ssize_t start, Py_ssize_t stop,
                            double[::1] residual, double[::1] out):
    """One part of ``X^T diag(w) (X v + intercept)`` over the CSR rows
    ``start:stop``: ``residual[i] = w_i (x_i . v + intercept)`` is written
    and ``out += sum_i residual[i] x_i`` accumulated, in one read of the rows
    (the Hessian-vector product of a one-output GLM; scipy reads them twice).

    The sums run in scipy's order (each row's dot from 0 over its non-zeros,
    then ``out`` row after row), so a single part over every row gives the
    bits of ``X.T @ (w * (X @ v + intercept))``.  Without the GIL: parts of
    the rows may run in threads, each into its own ``out``.
    """
    cdef Py_ssize_t i, a
    cdef double z
    with nogil:
        for i in range(start, stop):
            z = 0.0
            for a in range(indptr[i], indptr[i + 1]):
                z = z + data[a] * v[indices[a]]
            z = w[i] * (z + intercept)
            residual[i] = z
            for a in range(indptr[i], indptr[i + 1]):
                out[indices[a]] += data[a] * z
