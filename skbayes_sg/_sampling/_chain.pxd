cdef class SegmentBounds:
    """A chain's bounds for one segment, as C pointers (NULL: none)."""
    cdef object center_arr, scale_arr     # keep the arrays the pointers read
    cdef const double* center
    cdef const double* scale
    cdef double max_sds
