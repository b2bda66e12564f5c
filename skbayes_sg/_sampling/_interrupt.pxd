# cython: language_level=3
"""Stop checks for the nogil loops (see _interrupt.pyx)."""

cdef class StopPoll:
    cdef int* flag              # nonzero: stop (written by another thread); NULL: none
    cdef object flag_owner      # the array ``flag`` points into
    cdef bint signals           # run the interpreter's signal handlers (main thread only)
    cdef long long every        # polls between two clock reads
    cdef long long countdown
    cdef double last            # monotonic seconds of the last clock read
    cdef public int stopped     # 0: go on; 1: the stop flag was seen; 2: a handler raised
    cdef object pending         # the exception a signal handler raised (stopped == 2)
    cdef bint poll(self) noexcept nogil
    cdef void _run_handlers(self) noexcept
