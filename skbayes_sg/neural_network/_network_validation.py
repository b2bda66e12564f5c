"""Held-out rows for the network's convergence check (``validation_fraction``).

The chains first run on the other rows, and the model average's error on the
held-out ones checks that run; then the chains continue on every row for the
same span, so the draws kept are the full data's posterior and the check
describes a run of their length (the logic of early stopping on a validation
split followed by a refit on all rows).

A network's posterior has many basins: chains started apart stay apart, and
R-hat on any quantity that tells the basins apart stays large however long
they run, while the model average the user predicts with may already be
reliable. On rows the chains were not fitted to, the jackknife of
:func:`~skbayes_sg.diagnostics.model_average_error` says how much an endless
run would still move the held-out log-loss; that is what the fit warns on
when it has such rows. On training rows it cannot stand in (the draws agree
on the rows they were fitted to: doc/mlp.rst).
"""
import math

import numpy as np
from sklearn.model_selection import train_test_split
from sklearn.utils import check_random_state

#: nats per row: the smallest difference in held-out log-loss that tells
#: apart the settings compared in doc/mlp.rst
PREDICTION_TOLERANCE = 0.01


def held_out_rows(estimator, X, y, fraction=None, required=True):
    """Boolean mask of the rows the run is checked on (stratified by class,
    drawn from ``random_state``): ``fraction`` of them, by default
    ``validation_fraction``; None when that is None, or (not ``required``)
    when the rows cannot be stratified."""
    if fraction is None:
        fraction = estimator.validation_fraction
    if fraction is None:
        return None
    n_rows = X.shape[0]
    seed = check_random_state(estimator.random_state).randint(np.iinfo(np.int32).max)
    try:
        _, held = train_test_split(np.arange(n_rows), test_size=fraction, stratify=y,
                                   random_state=seed)
    except ValueError as exc:
        if not required:
            return None
        raise ValueError(
            f"validation_fraction={fraction!r} cannot hold out a stratified share of these "
            f"{n_rows} rows ({exc}); use a fraction that leaves every class a row on each "
            "side, or validation_fraction=None.") from exc
    mask = np.zeros(n_rows, dtype=bool)
    mask[held] = True
    return mask


def fit_messages(estimator):
    """The sentences of the fit's convergence warning: on the checked run's
    held-out prediction when ``validation_fraction`` is set
    (``validation_error_``), else the linear estimators' warning on the
    network's permutation-invariant quantities (one writer of that advice)."""
    held_out = getattr(estimator, "validation_error_", None)
    if held_out is not None:
        return prediction_messages(held_out, estimator.validation_fraction_, estimator.thin_)
    from ..diagnostics._advice import assess, convergence_messages
    return convergence_messages(estimator, assess(estimator))


def prediction_messages(error, fraction, thin, tolerance=PREDICTION_TOLERANCE):
    """The warning's sentences when the held-out prediction is not reliable.

    Parameters
    ----------
    error : ModelAverageError
        :func:`~skbayes_sg.diagnostics.model_average_error` on the held-out rows.
    fraction : float
        ``validation_fraction``, for the wording.
    thin : int
        The fit's ``thin_``: the advice multiplies it.
    tolerance : float, default=PREDICTION_TOLERANCE
        Largest acceptable finite-run bias and Monte Carlo se, nats per row.

    Returns
    -------
    messages : list of str
        Empty when both are within ``tolerance``.
    """
    if error.bias <= tolerance and error.se <= tolerance:
        return []
    # the jackknife's bias falls like 1 / span and its se like 1 / sqrt(span)
    # (measured on digits: 4 times the span took the bias from 0.022 to 0.003)
    factor = max(2, math.ceil(error.bias / tolerance), math.ceil((error.se / tolerance) ** 2))
    return [
        f"The model average is not yet reliable on the {error.n_rows} held-out rows "
        f"(validation_fraction={fraction!r}; the run checked there before the chains "
        f"continued on every row): its log-loss there, {error.log_loss:.4f}, has "
        f"an estimated finite-run bias of {error.bias:+.4f} and a Monte Carlo se of "
        f"{error.se:.4f} (jackknife over {error.n_pieces} pieces), and either above "
        f"{tolerance} nats a row means a longer run would still move the prediction. Use "
        f"thin={thin * factor} ({factor} times the span of kept draws: on digits a longer "
        "span, not a longer warm-up nor more chains, is what moved it). Chains in different "
        "basins are not a failure of this check: it reads the prediction, not the weights."
    ]
