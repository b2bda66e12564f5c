# cython: language_level=3
"""Wrap a dense or CSR matrix for the engine without copying it."""
import numpy as np
import scipy.sparse as sp

cimport numpy as cnp

cnp.import_array()


cdef class RowData:
    """Read-only row access to ``X`` for the nogil kernels.

    Parameters
    ----------
    X : ndarray of shape (n_rows, n_features) or CSR matrix
        Dense input must be C-contiguous; float32 or float64.  Read-only
        and memory-mapped arrays are used in place.  CSR input must have
        float32/float64 values and int32/int64 indices.
    fit_intercept : bool
        Whether the parameter rows carry an intercept in their last column.
    """

    def __cinit__(self, X, bint fit_intercept):
        cdef cnp.ndarray values, indices, indptr
        self.store.fit_intercept = fit_intercept
        self.store.n_rows = X.shape[0]
        self.store.n_features = X.shape[1]
        self.store.dext = X.shape[1] + (1 if fit_intercept else 0)
        if sp.issparse(X):
            if X.format != "csr":
                raise ValueError("RowData needs CSR sparse input, got %r" % X.format)
            values, indices, indptr = X.data, X.indices, X.indptr
            if indices.dtype != indptr.dtype:
                indptr = indptr.astype(indices.dtype)
            if indices.dtype not in (np.int32, np.int64):
                raise ValueError("CSR indices must be int32 or int64")
            if not (values.flags.c_contiguous and indices.flags.c_contiguous
                    and indptr.flags.c_contiguous):
                raise ValueError("CSR arrays must be contiguous")
            self.store.layout = CSR
            self.store.idx_is_64 = indices.dtype == np.int64
            if self.store.idx_is_64:
                self.store.indices64 = <const long long*> cnp.PyArray_DATA(indices)
                self.store.indptr64 = <const long long*> cnp.PyArray_DATA(indptr)
            else:
                self.store.indices32 = <const int*> cnp.PyArray_DATA(indices)
                self.store.indptr32 = <const int*> cnp.PyArray_DATA(indptr)
            self._keep = (X, values, indices, indptr)
        else:
            values = X if isinstance(X, np.ndarray) else np.asarray(X)
            if values.ndim != 2 or not values.flags.c_contiguous:
                raise ValueError("dense input must be a 2-D C-contiguous array")
            self.store.layout = DENSE
            self._keep = (X, values)
        if values.dtype == np.float32:
            self.store.is_f32 = 1
            self.store.values32 = <const float*> cnp.PyArray_DATA(values)
        elif values.dtype == np.float64:
            self.store.is_f32 = 0
            self.store.values64 = <const double*> cnp.PyArray_DATA(values)
        else:
            raise ValueError("X values must be float32 or float64, got %s" % values.dtype)

    @property
    def n_rows(self):
        return self.store.n_rows

    @property
    def dext(self):
        return self.store.dext

    def py_row_dot(self, Py_ssize_t i, const double[:, ::1] theta):
        """Return ``theta @ (x_i, 1)`` (testing twin of the inline kernel)."""
        if theta.shape[1] != self.store.dext:
            raise ValueError("theta must have %d columns" % self.store.dext)
        if not 0 <= i < self.store.n_rows:
            raise IndexError(i)
        z = np.empty(theta.shape[0])
        cdef double[::1] zv = z
        row_dot(&self.store, i, &theta[0, 0], theta.shape[0], &zv[0])
        return z

    def py_row_axpy(self, Py_ssize_t i, const double[::1] coef, double[:, ::1] grad):
        """``grad[k] += coef[k] * (x_i, 1)`` in place (testing twin)."""
        if grad.shape[1] != self.store.dext or grad.shape[0] != coef.shape[0]:
            raise ValueError("shape mismatch")
        if not 0 <= i < self.store.n_rows:
            raise IndexError(i)
        row_axpy(&self.store, i, &coef[0], coef.shape[0], &grad[0, 0])
