cdef class SegmentBounds:
    """A chain's bounds for one segment, as C pointers (NULL: none)."""
    cdef object center_arr, scale_arr     # keep the arrays the pointers read
    cdef const double* center
    cdef const double* scale
    cdef double max_sds


cdef class KeptRows:
    """Where a segment writes the states it keeps, as a C pointer (NULL: none)."""
    cdef object rows                      # keep the array the pointer writes
    cdef double* first
    cdef Py_ssize_t stride                # doubles from one row to the next
