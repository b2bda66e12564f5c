# cython: language_level=3
"""Abstract stochastic gradient oracle (see ``_oracle.pxd``)."""


cdef class GradientOracle:
    """Base class: ``gradient(theta, grad)`` writes an estimate of grad U."""

    cdef void gradient(self, const double* theta, double* grad) noexcept nogil:
        pass

    @property
    def n_evals(self):
        """Per-datum gradient evaluations spent so far."""
        return self.n_evals
