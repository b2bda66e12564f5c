# cython: language_level=3
"""Row access for the engine: dense C-contiguous or CSR data, float32/float64.

The hot per-row kernels (``row_dot`` and ``row_axpy``) are ``inline`` functions
on a plain C struct so that every estimator gets a direct, inlinable call per
datum.  The struct is filled by :class:`RowData`, which also keeps the numpy
arrays alive (no copies: read-only and memory-mapped inputs are used in place).

The parameter is a ``K x dext`` row-major matrix (``K`` outputs, ``dext`` =
n_features + fit_intercept); the intercept is an implicit constant feature 1
in the last column.
"""
from numpy cimport npy_intp as intp

cdef enum Layout:
    DENSE = 0
    CSR = 1

cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define SKB_PREFETCH(p) __builtin_prefetch((const void*)(p), 0, 3)
    #else
    #define SKB_PREFETCH(p) ((void)0)
    #endif
    """
    void SKB_PREFETCH(const void* p) noexcept nogil

cdef extern from *:
    """
    static volatile char skb_touch_sink;
    #define SKB_TOUCH(p) (skb_touch_sink = *(const volatile char*)(p))
    """
    void SKB_TOUCH(const void* p) noexcept nogil

ctypedef fused floating_t:
    float
    double

ctypedef fused index_t:
    int
    long long

ctypedef struct RowStore:
    int layout          # DENSE or CSR
    int is_f32          # values are float32 (else float64)
    int idx_is_64       # CSR indices / indptr are int64 (else int32)
    int fit_intercept
    intp n_rows
    intp n_features     # d
    intp dext           # d + fit_intercept: length of one output's parameter row
    const double* values64
    const float* values32
    const int* indices32
    const int* indptr32
    const long long* indices64
    const long long* indptr64


cdef inline double _dense_dot(const floating_t* row, const double* w, intp d) noexcept nogil:
    # four accumulators: breaks the add dependency chain without -ffast-math
    cdef double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0
    cdef intp j = 0
    while j + 4 <= d:
        s0 += row[j] * w[j]
        s1 += row[j + 1] * w[j + 1]
        s2 += row[j + 2] * w[j + 2]
        s3 += row[j + 3] * w[j + 3]
        j += 4
    while j < d:
        s0 += row[j] * w[j]
        j += 1
    return (s0 + s1) + (s2 + s3)


cdef inline void _dense_axpy(const floating_t* row, double a, double* w, intp d) noexcept nogil:
    cdef intp j
    for j in range(d):
        w[j] += a * row[j]


cdef inline double _sparse_dot(const floating_t* vals, const index_t* ind, intp nnz,
                               const double* w) noexcept nogil:
    cdef double s = 0.0
    cdef intp p
    for p in range(nnz):
        s += vals[p] * w[ind[p]]
    return s


cdef inline void _sparse_axpy(const floating_t* vals, const index_t* ind, intp nnz,
                              double a, double* w) noexcept nogil:
    cdef intp p
    for p in range(nnz):
        w[ind[p]] += a * vals[p]


cdef inline void _prefetch_bytes(const char* p, intp nbytes) noexcept nogil:
    cdef intp off = 0
    # a real load of each end walks the page tables (a prefetch hint that
    # misses the TLB may be dropped); hints then cover the lines between
    SKB_TOUCH(p)
    SKB_TOUCH(p + nbytes - 1)
    off = 64
    while off < nbytes - 1:
        SKB_PREFETCH(p + off)
        off += 64


cdef inline void row_prefetch(const RowStore* X, intp i) noexcept nogil:
    """Ask the CPU to start loading row i (dense rows; CSR values and indices)."""
    cdef intp start, end
    if X.layout == DENSE:
        if X.is_f32:
            _prefetch_bytes(<const char*> (X.values32 + i * X.n_features), X.n_features * 4)
        else:
            _prefetch_bytes(<const char*> (X.values64 + i * X.n_features), X.n_features * 8)
    else:
        if X.idx_is_64:
            start = X.indptr64[i]
            end = X.indptr64[i + 1]
            _prefetch_bytes(<const char*> (X.indices64 + start), (end - start) * 8)
        else:
            start = X.indptr32[i]
            end = X.indptr32[i + 1]
            _prefetch_bytes(<const char*> (X.indices32 + start), (end - start) * 4)
        if X.is_f32:
            _prefetch_bytes(<const char*> (X.values32 + start), (end - start) * 4)
        else:
            _prefetch_bytes(<const char*> (X.values64 + start), (end - start) * 8)


cdef inline void row_dot(const RowStore* X, intp i, const double* theta, int K,
                         double* z) noexcept nogil:
    """z[k] = x_i . theta[k, :d] + theta[k, d] (intercept), k < K."""
    cdef int k
    cdef intp start, end
    cdef const double* w
    cdef intp d = X.n_features
    for k in range(K):
        w = theta + k * X.dext
        if X.layout == DENSE:
            if X.is_f32:
                z[k] = _dense_dot(X.values32 + i * d, w, d)
            else:
                z[k] = _dense_dot(X.values64 + i * d, w, d)
        else:
            if X.idx_is_64:
                start = X.indptr64[i]
                end = X.indptr64[i + 1]
                if X.is_f32:
                    z[k] = _sparse_dot(X.values32 + start, X.indices64 + start, end - start, w)
                else:
                    z[k] = _sparse_dot(X.values64 + start, X.indices64 + start, end - start, w)
            else:
                start = X.indptr32[i]
                end = X.indptr32[i + 1]
                if X.is_f32:
                    z[k] = _sparse_dot(X.values32 + start, X.indices32 + start, end - start, w)
                else:
                    z[k] = _sparse_dot(X.values64 + start, X.indices32 + start, end - start, w)
        if X.fit_intercept:
            z[k] += w[d]


cdef inline void row_axpy(const RowStore* X, intp i, const double* coef, int K,
                          double* grad) noexcept nogil:
    """grad[k, :] += coef[k] * (x_i, 1), k < K."""
    cdef int k
    cdef intp start, end
    cdef double a
    cdef double* w
    cdef intp d = X.n_features
    for k in range(K):
        a = coef[k]
        if a == 0.0:
            continue
        w = grad + k * X.dext
        if X.layout == DENSE:
            if X.is_f32:
                _dense_axpy(X.values32 + i * d, a, w, d)
            else:
                _dense_axpy(X.values64 + i * d, a, w, d)
        else:
            if X.idx_is_64:
                start = X.indptr64[i]
                end = X.indptr64[i + 1]
                if X.is_f32:
                    _sparse_axpy(X.values32 + start, X.indices64 + start, end - start, a, w)
                else:
                    _sparse_axpy(X.values64 + start, X.indices64 + start, end - start, a, w)
            else:
                start = X.indptr32[i]
                end = X.indptr32[i + 1]
                if X.is_f32:
                    _sparse_axpy(X.values32 + start, X.indices32 + start, end - start, a, w)
                else:
                    _sparse_axpy(X.values64 + start, X.indices32 + start, end - start, a, w)
        if X.fit_intercept:
            w[d] += a


cdef class RowData:
    cdef RowStore store
    cdef object _keep   # the arrays whose memory ``store`` points into
