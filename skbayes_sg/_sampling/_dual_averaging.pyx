# cython: language_level=3
"""Python access to the dual averaging of ``_dual_averaging.pxd`` (the one
definition): the class the network's Metropolis step adapts its step with,
and the constants."""
from ._dual_averaging cimport (DA_GAMMA, DA_KAPPA, DA_SETTLED, DA_T0, DualAveragingState,
                               dual_averaging_final, dual_averaging_start,
                               dual_averaging_update)

#: the rule's constants (Stan's)
DUAL_AVERAGING = {"gamma": DA_GAMMA, "t0": DA_T0, "kappa": DA_KAPPA, "settled": DA_SETTLED}


cdef class DualAveraging:
    """Dual averaging of ``log h`` toward ``target_accept``, from step ``h``
    (steps above ``max_step`` are cut to it).

    Parameters
    ----------
    h : float
        The starting step (``> 0``).
    target_accept : float
        The acceptance rate adapted toward.
    max_step : float, default=inf
    """

    cdef DualAveragingState state

    def __init__(self, double h, double target_accept, double max_step=float("inf")):
        if not h > 0:
            raise ValueError(f"h must be > 0, got {h!r}")
        dual_averaging_start(&self.state, h, target_accept, max_step)

    def update(self, double accept_prob):
        """One update with this iteration's acceptance probability; returns
        the next step."""
        return dual_averaging_update(&self.state, accept_prob)

    def final(self):
        """The step kept after warm-up (see ``dual_averaging_final``)."""
        return dual_averaging_final(&self.state)

    @property
    def n_updates(self):
        return self.state.t
