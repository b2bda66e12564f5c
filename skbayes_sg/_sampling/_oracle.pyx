# cython: language_level=3
"""Abstract stochastic gradient oracle (see ``_oracle.pxd``)."""


cdef class GradientOracle:
    """Base class: ``gradient(theta, grad)`` writes an estimate of grad U;
    ``gradient_potential`` also returns U (exact oracles only)."""

    cdef void gradient(self, const double* theta, double* grad) noexcept nogil:
        pass

    cdef double gradient_potential(self, const double* theta, double* grad) noexcept nogil:
        self.gradient(theta, grad)
        return 0.0

    @property
    def n_evals(self):
        """Per-datum gradient evaluations spent so far."""
        return self.n_evals
