"""The exceptions and warnings that skbayes_sg raises, in one public place
(like :mod:`sklearn.exceptions`), shared by the linear and network engines."""

__all__ = ["SamplingDivergedError"]


class SamplingDivergedError(FloatingPointError, ValueError):
    """A chain diverged: non-finite parameters, or far outside the posterior.

    Raised by ``fit`` of every estimator (linear models and the network); its
    message names the setting to change (usually a smaller ``step_size``).
    A subclass of both :class:`FloatingPointError` and :class:`ValueError`.
    """
