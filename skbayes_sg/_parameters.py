"""An estimator's parameters or fitted state set for a block and restored
after it.

``parameters_set``: the fit on a dask array samples under the pool's
settings, and ``temperature="auto"`` continues the chosen model's chains
under its settings, while ``get_params`` afterwards returns what the user
set.  ``restored_on_interrupt``: a ``fit`` or ``partial_fit`` stopped by
Ctrl-C leaves the estimator as it was before the call (its previous
posterior, chains and validated data attributes), with one note on the
exception that says so."""
from contextlib import contextmanager


@contextmanager
def parameters_set(estimator, **values):
    """``estimator`` with ``values`` as its parameters inside the block, and
    every parameter as it was before it afterwards (after an exception or
    Ctrl-C too), including any the block itself set (a model's ``"auto"``
    setting resolved to a number for the fit)."""
    saved = estimator.get_params(deep=False)
    estimator.set_params(**values)
    try:
        yield estimator
    finally:
        estimator.set_params(**saved)


def _state(estimator):
    """What a fit writes: every attribute that is not a parameter."""
    params = estimator.get_params(deep=False)
    return {k: v for k, v in vars(estimator).items() if k not in params}


@contextmanager
def restored_on_interrupt(estimator, method="fit"):
    """A ``method`` call interrupted in the block (Ctrl-C) leaves
    ``estimator`` as it was before it: every attribute that is not a
    parameter is put back (none, before a first fit), so a refit or a
    continuation stopped half-way loses neither the previous posterior nor
    its chains, and an unfitted estimator stays unfitted
    (``check_is_fitted`` raises).  Without it a fit of two runs (the
    network's ``validation_fraction`` or ``temperature="auto"``)
    interrupted in its second would leave the first run's posterior, of
    some of the rows, and a first call would leave the data's attributes
    (``n_features_in_``, ``classes_``) on an estimator without draws.
    Parameters are the caller's (``parameters_set`` restores its own)."""
    saved = _state(estimator)
    try:
        yield
    except KeyboardInterrupt as exc:
        for name in _state(estimator):
            delattr(estimator, name)
        vars(estimator).update(saved)
        # one note, of this call: not an inner fit's (a temperature candidate's)
        if getattr(exc, "__notes__", None):
            exc.__notes__.clear()
        elif not hasattr(exc, "add_note"):      # Python 3.10: the note is the message
            exc.args = ()
        note_interrupt(exc, f"{type(estimator).__name__}.{method}",
                       has_posterior="coef_samples_" in saved,
                       continues=_continues(estimator, method, saved))
        raise


def _continues(estimator, method, saved):
    """How the saved chains are continued, or None when the interrupted call
    was not a continuation."""
    if "_chain_states" not in saved:
        return None
    if method == "partial_fit":
        return "partial_fit"
    return "fit with warm_start=True" if getattr(estimator, "warm_start", False) else None


def note_interrupt(exc, call, has_posterior, continues=None):
    """Say on a KeyboardInterrupt what an interrupted ``call`` (``"Class.fit"``)
    left: its draws are discarded and the estimator is as before the call,
    with or without a posterior, and how its chains continue (``continues``:
    a warm start's or partial_fit's, else None)."""
    if not has_posterior:
        left = "is unfitted, as it was before the call"
    elif continues is None:
        left = "holds its previous posterior, as before the call"
    else:
        left = (f"holds its previous posterior and the chains this call began from "
                f"({continues} continues them)")
    msg = (f"{call} was interrupted: the draws of this call were discarded and the "
           f"estimator {left}.")
    if hasattr(exc, "add_note"):            # Python >= 3.11: printed under the traceback
        exc.add_note(msg)
    elif not exc.args:
        exc.args = (msg,)
