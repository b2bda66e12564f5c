"""Predictions on dask arrays: lazy, one task per block of rows.

A fitted estimator's draws are small (``n_draws x n_params``), so a
prediction on data larger than one machine's memory is a map over blocks of
rows: each block's model average needs only its own rows and the draws
(dask-ml's ``ParallelPostFit`` does the same for point estimates).  The
decorator :func:`rowwise` gives a prediction method this behaviour: given a
``dask.array.Array`` it returns one, built with ``map_blocks`` and computed
only when the caller computes it; given anything else it is the method
itself.  dask is imported only when such an array is passed (it is an
optional dependency).
"""
import functools
import sys

import numpy as np

__all__ = ["is_dask_array", "is_dask_collection", "rowwise", "sample_rows", "whole_rows"]


def is_dask_collection(X):
    """Whether ``X`` is a dask collection (array, DataFrame, Series), without
    importing dask."""
    dask = sys.modules.get("dask")
    return dask is not None and X is not None and dask.is_dask_collection(X)


def is_dask_array(X):
    """Whether ``X`` is a ``dask.array.Array`` (without importing dask)."""
    da = sys.modules.get("dask.array")
    return da is not None and isinstance(X, da.Array)


def whole_rows(X):
    """``(X as a 2-d dask array whose blocks hold whole rows, its column
    names or None)``: a dask DataFrame becomes its array (row counts
    computed) and keeps its names; blocks split over columns are joined
    (each task needs whole rows)."""
    names = None
    if hasattr(X, "to_dask_array"):                  # a dask DataFrame
        names = list(X.columns)
        X = X.to_dask_array(lengths=True)
    if not is_dask_array(X):
        raise TypeError(f"X must be a dask array or DataFrame whose row blocks decide the "
                        f"tasks (with a dask y or sample_weight too); got {type(X).__name__}.")
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-d dask array of rows; got {X.ndim} dimension(s).")
    if X.numblocks[1] > 1:
        X = X.rechunk({1: -1})
    return X, names


def _probe(method, n_features):
    """The method's output on one row of zeros: its trailing shape and dtype
    (a tuple of them for a method that returns a tuple)."""
    out = method(np.zeros((1, n_features)))
    if isinstance(out, tuple):
        return tuple(np.asarray(part) for part in out)
    return np.asarray(out)


def _map_rows(method, X, probe, part=None):
    """``method`` over X's blocks of rows (all columns in each block)."""
    tail = probe.shape[1:]

    def block(rows):
        out = method(rows)
        return np.asarray(out if part is None else out[part])

    if not tail:
        return X.map_blocks(block, dtype=probe.dtype, drop_axis=1, chunks=(X.chunks[0],))
    if len(tail) == 1:
        return X.map_blocks(block, dtype=probe.dtype, chunks=(X.chunks[0], (tail[0],)))
    raise ValueError("rowwise predictions return one or two axes")


def rowwise(method):
    """Make a prediction method ``method(self, X, ...)`` lazy on dask arrays.

    With ``X`` a 2-d ``dask.array.Array`` (dense or scipy.sparse blocks) or a
    dask DataFrame (its blocks passed on as pandas DataFrames), the
    method is checked at once on one row of zeros (a NotFittedError or a
    wrong number of features is raised here, not at compute time) and the
    result is a dask array with X's row chunks, each block the method's
    output on that block's rows.  A method that returns a tuple (ridge's
    ``return_std=True``) returns a tuple of dask arrays, each computing the
    method on its blocks.
    """
    @functools.wraps(method)
    def wrapper(self, X, *args, **kwargs):
        if not is_dask_collection(X):
            return method(self, X, *args, **kwargs)
        X, names = whole_rows(X)

        def on_rows(rows):
            if names is not None:           # the blocks keep the DataFrame's column names
                import pandas as pd
                rows = pd.DataFrame(rows, columns=names)
            return method(self, rows, *args, **kwargs)

        probe = _probe(on_rows, X.shape[1])
        if isinstance(probe, tuple):
            return tuple(_map_rows(on_rows, X, p, part=k) for k, p in enumerate(probe))
        return _map_rows(on_rows, X, probe)
    return wrapper


def sample_rows(X, n_draws, random_state, n_posterior_draws, draw_rows):
    """``sample_y(X, n_draws, random_state)`` on a dask array or DataFrame: a
    dask array of X's row chunks.  ``draw_rows(rows, pick, rng)`` is the
    estimator's own ``sample_y`` of a block of rows, from the posterior
    draws ``pick`` (of ``n_posterior_draws``; None: every one in order).
    The draws are picked once, on the client, so that every block's column
    ``j`` comes from the same draw (a column is a draw of the whole
    ``y(X)``); each block's observation noise comes from its own seed, drawn
    from ``random_state`` in block order, so the result does not depend on
    which worker computes which block."""
    from sklearn.utils import check_random_state

    X, names = whole_rows(X)
    rng = check_random_state(random_state)
    pick = None if n_draws is None else rng.randint(n_posterior_draws, size=n_draws)
    seeds = rng.randint(np.iinfo(np.int32).max, size=X.numblocks[0])

    def block(rows, block_info=None):
        if names is not None:           # the blocks keep the DataFrame's column names
            import pandas as pd
            rows = pd.DataFrame(rows, columns=names)
        seed = seeds[block_info[0]["chunk-location"][0]] if block_info else 0
        return draw_rows(rows, pick, np.random.RandomState(seed))

    probe = block(np.zeros((1, X.shape[1])))          # checks the width and fit, at once
    return X.map_blocks(block, dtype=probe.dtype, chunks=(X.chunks[0], (probe.shape[1],)))
