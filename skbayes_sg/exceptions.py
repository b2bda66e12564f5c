"""The exceptions and warnings that skbayes_sg raises, in one public place
(like :mod:`sklearn.exceptions`), shared by the linear and network engines."""

__all__ = ["ClusterError", "SamplingDivergedError", "UncentredTargetWarning"]


class SamplingDivergedError(FloatingPointError, ValueError):
    """A chain diverged: non-finite parameters, or far outside the posterior.

    Raised by ``fit`` of every estimator (linear models and the network); its
    message names the setting to change (usually a smaller ``step_size``).
    A subclass of both :class:`FloatingPointError` and :class:`ValueError`.
    """


class ClusterError(RuntimeError):
    """A task the dask cluster could not complete.

    Raised by ``fit`` under ``joblib.parallel_config(backend="dask")`` when
    dask gives up on a chain's task (its workers died
    ``distributed.scheduler.allowed-failures`` times) or the cluster lost its
    data, and by ``fit`` on a dask array when dask gives up on a task of a
    pass over the array's blocks; the fit is abandoned.  Its message names
    what failed (the chains and the phase, or the pass) and what to change.
    A subclass of :class:`RuntimeError`.
    """


class UncentredTargetWarning(UserWarning):
    """``SGMCMCRidge``'s target is far from 0 for its prior.

    The prior ``N(0, 1/alpha)`` covers the intercept too, so a mean of ``y``
    far from 0 sets ``alpha="auto"`` (or, with ``alpha`` given, shrinks the
    intercept and inflates ``noise_var_``); the message names the fix:
    centre or standardise ``y``.  A subclass of :class:`UserWarning`, so that
    code (and ``python -m skbayes_sg fit``, which names its own fix) can tell
    it apart.
    """
