# cython: language_level=3
"""Stop checks that the nogil loops make between steps and between gradients.

A compiled loop runs without the GIL, so neither Ctrl-C (Python runs its
signal handlers only between bytecodes of the main thread) nor a stop request
from another thread would be seen until the loop returns, and one step of a
Metropolis-adjusted HMC trajectory on a large data set costs up to 1,024 data
passes (seconds).  :class:`StopPoll` is checked at every gradient and every
step instead:

* a stop flag (an ``int32`` array another thread sets: the pool, when the
  fitting thread was interrupted) is read at every check, a memory load;
* in the main thread, the interpreter's signal handlers are run (with the GIL,
  ``PyErr_CheckSignals``) about every ``POLL_SECONDS``: the clock is read
  every ``every`` checks, a number adapted to the cost of a check, so that
  cheap steps pay nothing measurable.  A handler that raises (the default
  SIGINT handler raises ``KeyboardInterrupt``) stops the loop, which raises
  that exception once it holds the GIL again (:meth:`StopPoll.raise_pending`).

A stopped loop leaves its chain in an unspecified state (the interrupted
step's gradients are not computed): the caller discards it.
"""
import threading

import numpy as np

from cpython.exc cimport PyErr_CheckSignals
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

cdef extern from *:
    """
    /* a load the compiler may not hoist out of the loop: another thread writes it */
    static inline int skb_load_flag(const int* p) { return *(const volatile int*) p; }
    """
    int skb_load_flag(const int* p) noexcept nogil

#: seconds between two runs of the signal handlers (Ctrl-C is seen within this)
POLL_SECONDS = 0.002
cdef double _POLL = POLL_SECONDS
cdef long long MAX_EVERY = 1 << 16


cdef inline double _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return ts.tv_sec + 1e-9 * ts.tv_nsec


cdef class StopPoll:
    """What a nogil loop checks to stop early.

    Parameters
    ----------
    flag : ndarray of shape (1,) and dtype int32, or None
        Nonzero: stop.  Another thread sets it (``flag[0] = 1``).
    signals : bool or None
        Run the interpreter's signal handlers while polling; None: when
        constructed in the main thread (the only one where Python runs them).

    Attributes
    ----------
    stopped : int
        0 while running; 1 once the flag was seen; 2 once a signal handler
        raised (the exception is kept for :meth:`raise_pending`).
    """

    def __cinit__(self):
        self.flag = NULL
        self.every = 1
        self.countdown = 1
        self.stopped = 0
        self.pending = None

    def __init__(self, flag=None, signals=None):
        cdef int[::1] view
        if flag is not None:
            view = flag
            if view.shape[0] < 1:
                raise ValueError("flag must hold one int32")
            self.flag = &view[0]
            self.flag_owner = flag
        if signals is None:
            signals = threading.current_thread() is threading.main_thread()
        self.signals = signals
        self.last = _now()

    cdef bint poll(self) noexcept nogil:
        """True when the loop must stop (cheap: called at every gradient)."""
        cdef double now
        if self.stopped:
            return True
        if self.flag != NULL and skb_load_flag(self.flag):
            self.stopped = 1
            return True
        if not self.signals:
            return False
        self.countdown -= 1
        if self.countdown > 0:
            return False
        now = _now()
        # the next clock read after about POLL_SECONDS at the polls' measured
        # pace (growing at most twofold a read; a slower pace is followed at once)
        self.every = <long long> max(1.0, min(2.0 * self.every, <double> MAX_EVERY,
                                              self.every * _POLL / max(now - self.last, 1e-9)))
        self.countdown = self.every
        self.last = now
        with gil:
            self._run_handlers()
        return self.stopped != 0

    cdef void _run_handlers(self) noexcept:
        try:
            PyErr_CheckSignals()
        except BaseException as exc:
            self.pending = exc
            self.stopped = 2

    def check(self):
        """Poll once (with the GIL; testing twin); returns ``stopped``."""
        self.poll()
        return self.stopped

    def raise_pending(self):
        """Raise the exception a signal handler raised during the loop, if any."""
        if self.pending is not None:
            exc, self.pending = self.pending, None
            raise exc
