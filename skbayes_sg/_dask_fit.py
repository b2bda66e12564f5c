"""``fit`` on a dask array: the set-up as passes on the cluster, the sampling
on rows drawn ahead.

A default fit at large n spends its data passes on the set-up (the mode,
the curvature there, the control variate's sum) and its sampling reads a
number of rows that does not grow with n (Baker et al. 2019).  On a dask
array the two parts go where they belong:

1. **One pass gathers a pool** of ``POOL_ROWS`` rows drawn
   uniformly with replacement from all n rows (per block: a multinomial
   count, then indices within the block; one task per block returns only
   its drawn rows).  The pool is put in random order, so that any run of
   its rows is an i.i.d. uniform draw from the whole data.  A classifier's
   classes (and the weights' checks) take one pass before it.
2. **Newton passes on the cluster** (each: the loss, gradient and Hessian of
   every block, summed on the client) start from the pool's own mode and
   stop on the posterior's scale, as the in-memory search does; the last
   one gives the mode, the Hessian there and the data gradient there
   (:class:`Population`).
3. **The in-memory engine samples on the pool** with the first-order
   control variate anchored at that mode, whose sum is the whole data's
   gradient (:meth:`FitContext.adopt_population`), each row weighted
   ``n / pool size`` (times its ``sample_weight``), and each chain reading
   the pool in order from its own starting row (cyclic access from
   ``c * pool size / n_chains``), each row at most once.  Each minibatch of
   a chain is then an i.i.d. uniform draw from all n rows and the estimate
   ``A + (n / b) sum_j [grad U_j(theta) - grad U_j(theta_hat)]`` is the
   in-memory estimator's, in law: each chain samples the posterior of all
   n rows, not of the pool.  The chains share the pool's rows at different
   times, as in memory they share the data set; what would break the law
   is a chain reading a row twice (reading more rows than the pool holds),
   so the fit counts every chain's rows and, where one read too many,
   draws a larger pool and samples again.  The pool also gives the Newton
   start and the automatic settings (batch size, step, metric): tuning
   read from the rows, as an in-memory fit's is.

The client holds the pool, the draws and d x d sums, never ``X``.

This module is the cluster's side (the row blocks, the pool, the passes);
the steps that read and write the estimator's own state are its methods,
in :mod:`._dask_estimator`.
"""
from dataclasses import dataclass

import dask
import dask.array as da
import numpy as np
import scipy.sparse as sp
from dask.array.utils import meta_from_array

try:                                    # the distributed scheduler is optional
    from distributed import as_completed, get_client as distributed_client
except ImportError:                     # pragma: no cover
    def distributed_client():
        raise ValueError("no distributed client")
from ._dask_rows import whole_rows
from ._sampling._glm import linear_predictor
from ._sampling._row_algebra import MAX_NEWTON_ITER, MODE_TOL_SD, dense_gram_blocks
from ._sampling._shape_search import shape_terms
from .exceptions import ClusterError

__all__ = ["DaskRows", "Population", "population_mode"]

#: rows of the first pool, the most each chain may read (a default logistic
#: fit of 20 features reads about 2.6e5 per chain with the first-order
#: control, at any n); a pool that proves short grows by POOL_GROWTH over
#: the need
POOL_ROWS = 300_000
POOL_GROWTH = 1.5
#: pools drawn at most before the fit gives up (each a pass and a sampling)
MAX_POOLS = 3
#: the gradient estimators whose estimate stays exact on a pool read once
DASK_SUBSAMPLINGS = {"auto": "cv", "cv": "cv", "uniform": "uniform"}


@dataclass(frozen=True)
class Population:
    """What passes over the whole data found, for a fit on a sample of it.

    Attributes
    ----------
    mode : ndarray of shape (dim,)
        The posterior mode (anchor of the control variate).
    hessian : ndarray of shape (dim, dim)
        The potential's Hessian there, prior included.
    data_gradient : ndarray of shape (dim,)
        ``sum_i w_i grad U_i(mode)`` over every row.
    n_rows : int
    chain_rows : int
        Chain ``c`` starts reading the pool at row ``c * chain_rows``.
    potential : float
        The potential ``U`` at the mode (prior included): with ``hessian``,
        the Laplace evidence of logistic regression's ``alpha="auto"``.
    """

    mode: np.ndarray
    hessian: np.ndarray
    data_gradient: np.ndarray
    n_rows: int
    chain_rows: int = 0
    potential: float = np.nan


# ------------------------------------------------------------- the blocks
def _block_terms(X, y, w, theta, glm, fit_intercept):
    """Loss, gradient (K, dext) and Hessian (K, dext, K, dext) of one block's
    weighted data terms at theta (no prior)."""
    K = glm.n_outputs
    d = X.shape[1]
    dext = d + int(fit_intercept)
    Z = linear_predictor(X, theta.reshape(K, dext), fit_intercept)
    y = np.asarray(y, dtype=np.float64)
    w = np.ones(len(y)) if w is None else np.asarray(w, dtype=np.float64)
    loss = float((w * glm.loss(Z, y).reshape(len(y), -1).sum(axis=1)).sum())
    R = glm.residual(Z, y) * w[:, None]
    G = np.zeros((K, dext))
    G[:, :d] = np.asarray(X.T @ R).T
    if fit_intercept:
        G[:, d] = R.sum(axis=0)
    W = glm.hessian_weights(Z, y)
    W = W * w.reshape((-1,) + (1,) * (W.ndim - 1))
    return loss, G, dense_gram_blocks(X, W, K, fit_intercept)


def _take_rows(X, y, w, rows):
    """The drawn rows of one block (a task on the worker that holds it)."""
    return X[rows], np.asarray(y)[rows], None if w is None else np.asarray(w)[rows]


class DaskRows:
    """``X``, ``y`` and ``sample_weight`` as dask arrays of the same row
    blocks (whole rows in each block), with their sizes known."""

    def __init__(self, X, y, sample_weight):
        X, names = whole_rows(X)
        self.feature_names = None if names is None else np.asarray(names, dtype=object)
        if any(np.isnan(c) for c in X.chunks[0]):
            raise ValueError("X has row blocks of unknown size; call X.compute_chunk_sizes() "
                             "(or DataFrame.to_dask_array(lengths=True)) before fit.")
        if X.dtype.kind not in "fiub":
            raise ValueError(f"X must hold numbers; got dtype {X.dtype}.")
        if X.dtype not in (np.float32, np.float64):
            X = X.astype(np.float64)
        self.X = X
        self.y = self._rows_like(y, "y")
        self.w = None if sample_weight is None else self._rows_like(sample_weight,
                                                                   "sample_weight")
        self.n = int(self.X.shape[0])
        self.sizes = np.asarray(self.X.chunks[0], dtype=np.int64)

    def _rows_like(self, v, name):
        if hasattr(v, "to_dask_array"):
            v = v.to_dask_array(lengths=True)
        v = v if isinstance(v, da.Array) else da.from_array(np.asarray(v),
                                                             chunks=(self.X.chunks[0],))
        if v.ndim == 2 and v.shape[1] == 1:
            v = v[:, 0]
        if v.ndim != 1 or v.shape[0] != self.X.shape[0]:
            raise ValueError(f"{name} must have one value per row of X "
                             f"({self.X.shape[0]}); got shape {v.shape}.")
        return v.rechunk((self.X.chunks[0],))

    def blocks(self):
        """``(X, y, w)`` delayed blocks, in order."""
        Xb = self.X.to_delayed().ravel()
        yb = self.y.to_delayed().ravel()
        wb = [None] * len(Xb) if self.w is None else self.w.to_delayed().ravel()
        return list(zip(Xb, yb, wb))

    def summed_terms(self, theta, glm, fit_intercept):
        """Loss, gradient and Hessian of every row's data term at theta: one
        pass on the cluster, summed on the client."""
        tasks = [dask.delayed(_block_terms)(X, y, w, theta, glm, fit_intercept)
                 for X, y, w in self.blocks()]
        parts = dict(_arriving(tasks))
        # summed in the blocks' order: the same bits whichever finished first
        loss = sum(parts[k][0] for k in range(len(tasks)))
        G = sum(parts[k][1] for k in range(len(tasks)))
        H = sum(parts[k][2] for k in range(len(tasks)))
        return loss, G.ravel(), H.reshape(G.size, G.size)

    def draw_pool(self, size, rng):
        """``size`` rows drawn uniformly with replacement, in random order:
        ``(X, y, w)`` on the client (one pass: a task per block).  Dense rows
        are written into their places as each block's arrive, so the client
        holds the pool and one block's share at a time."""
        counts = rng.multinomial(size, self.sizes / self.n)
        places = np.split(rng.permutation(size), np.cumsum(counts)[:-1])
        tasks, slots = [], []
        for (X, y, w), count, rows, place in zip(self.blocks(), counts, self.sizes, places):
            if count:
                picks = np.sort(rng.integers(0, rows, size=count))
                tasks.append(dask.delayed(_take_rows)(X, y, w, picks))
                slots.append(place)
        meta = meta_from_array(self.X)
        if meta is not None and sp.issparse(meta):
            parts = dask.compute(*tasks)
            order = np.argsort(np.concatenate(slots))
            return _finite((sp.vstack([p[0] for p in parts], format="csr")[order],
                            np.concatenate([p[1] for p in parts])[order],
                            None if self.w is None else
                            np.concatenate([p[2] for p in parts])[order]))
        X = np.empty((size, self.X.shape[1]), dtype=self.X.dtype)
        y = np.empty(size, dtype=np.float64)
        w = None if self.w is None else np.empty(size, dtype=np.float64)
        for k, (X_part, y_part, w_part) in _arriving(tasks):
            X[slots[k]] = X_part.toarray() if sp.issparse(X_part) else X_part
            y[slots[k]] = y_part
            if w is not None:
                w[slots[k]] = w_part
        return _finite((X, y, w))


def _finite(pool):
    """The pool, refused if a drawn row holds NaN or infinity (a row not
    drawn that does is found by the Newton passes)."""
    X, y, w = pool
    values = X.data if sp.issparse(X) else X
    if not (np.all(np.isfinite(values)) and np.all(np.isfinite(y))):
        raise ValueError("X or y hold NaN or infinity (found among the rows drawn for the "
                         "pool); clean the rows before fit.")
    return pool


def _arriving(tasks):
    """``(index, result)`` of each delayed task as it completes: on a
    distributed client, as futures finish (each result dropped once used;
    an interrupt or error cancels what is left), else all at once.  A task
    dask gave up on raises :class:`~skbayes_sg.exceptions.ClusterError`."""
    try:
        client = distributed_client()
    except ValueError:
        yield from enumerate(dask.compute(*tasks))
        return
    from distributed import KilledWorker
    from distributed.client import FutureCancelledError
    futures = client.compute(tasks)
    index = {f.key: k for k, f in enumerate(futures)}
    try:
        for future, result in as_completed(futures, with_results=True):
            yield index[future.key], result
    except (FutureCancelledError, KilledWorker) as exc:
        what = ("ran on workers that died" if isinstance(exc, KilledWorker)
                else "was cancelled or lost its data on the cluster")
        raise ClusterError(
            f"A task of a pass over the blocks of X {what} ({exc}); the fit was abandoned. "
            "A worker that dies repeatedly is usually out of memory: give the workers more "
            "memory or X smaller blocks (dask retries a task whose worker died on another "
            "one, up to the scheduler's distributed.scheduler.allowed-failures times, 3 by "
            "default), then fit again.") from exc
    finally:
        client.cancel(futures, force=True)


# ---------------------------------------------------------------- the mode
def population_mode(data, glm, alpha, fit_intercept, theta, temperature):
    """Newton's method on the cluster from ``theta``: ``(Population without
    chain_rows, passes)``.  Each iteration is one pass (loss, gradient,
    Hessian); a step that raises the potential is halved (a pass each).
    Stops when the Newton decrement is under ``MODE_TOL_SD`` posterior sds,
    as the in-memory search; the Hessian and data gradient are those of the
    last point, the anchor."""
    dim = theta.size
    prior = alpha * np.eye(dim)
    previous = None
    for passes in range(1, MAX_NEWTON_ITER + 1):
        loss, G, H = data.summed_terms(theta, glm, fit_intercept)
        u = loss + 0.5 * alpha * float(theta @ theta)
        if not (np.isfinite(u) and np.all(np.isfinite(G)) and np.all(np.isfinite(H))):
            raise ValueError("X, y or sample_weight hold NaN or infinity (the potential "
                             "on the cluster is not finite); clean the rows before fit.")
        if previous is not None and u > previous[1] + 1e-12 * abs(previous[1]):
            theta = 0.5 * (previous[0] + theta)      # backtrack toward the last point
            continue
        g = G + alpha * theta
        step = np.linalg.solve(H + prior, g)
        if np.sqrt(max(float(g @ step), 0.0)) <= MODE_TOL_SD * np.sqrt(temperature):
            return Population(theta, H + prior, G, data.n, potential=u), passes
        previous = (theta, u)
        theta = theta - step
    raise RuntimeError(f"the mode search on the cluster did not converge in "
                       f"{MAX_NEWTON_ITER} passes")


# ------------------------------------------------- the estimator's passes
def check_blocks(data, find_classes):
    """One pass checking the weights (as the in-memory fit checks them)
    and, with ``find_classes``, finding the targets' classes from every row;
    no pass when there is neither.  Returns the sorted classes or None."""
    checks = [da.unique(data.y)] if find_classes else []
    if data.w is not None:
        checks += [data.w.min(), data.w.max(), da.isfinite(data.w).all()]
    if not checks:
        return None
    found = dask.compute(*checks)
    classes = None
    if find_classes:
        classes, found = np.unique(found[0]), found[1:]
    if data.w is not None:
        low, high, finite = found
        if not finite:
            raise ValueError("sample_weight contains NaN or inf; pass finite nonnegative "
                             "weights.")
        if low < 0:
            raise ValueError("Negative values in data passed to sample_weight; pass "
                             "nonnegative weights.")
        if high <= 0:
            raise ValueError("sample_weight is zero for every row, which leaves no data to "
                             "fit; give at least one row a positive weight.")
    return classes


def gram_sums(data, fit_intercept):
    """One pass: ``X_a^T W X_a``, ``X_a^T W y``, ``y^T W y``, ``sum w`` and
    ``sum w y`` over every row (the sufficient statistics of ridge's
    evidence), summed in the blocks' order."""
    tasks = [dask.delayed(_block_gram)(X, y, w, fit_intercept) for X, y, w in data.blocks()]
    parts = dict(_arriving(tasks))
    return [sum(parts[k][j] for k in range(len(tasks))) for j in range(5)]


def shape_terms_on_cluster(data, theta, fit_intercept, log_r):
    """One pass: :func:`~._sampling._shape_search.shape_terms` summed over
    every row."""
    tasks = [dask.delayed(_block_shape_terms)(Xb, yb, wb, theta, fit_intercept, log_r)
             for Xb, yb, wb in data.blocks()]
    parts = dict(_arriving(tasks))
    return sum(parts[k] for k in range(len(tasks)))


def _block_shape_terms(X, y, w, theta, fit_intercept, log_r):
    """One block's :func:`~._sampling._shape_search.shape_terms`."""
    mu = np.exp(linear_predictor(X, theta.reshape(1, -1), fit_intercept)[:, 0])
    return shape_terms(np.asarray(y, dtype=np.float64), mu, log_r,
                       None if w is None else np.asarray(w, dtype=np.float64))


def _block_gram(X, y, w, fit_intercept):
    """``X_a^T W X_a``, ``X_a^T W y``, ``y^T W y``, ``sum w``, ``sum w y`` of a block."""
    Xa = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=np.float64)
    if fit_intercept:
        Xa = np.hstack([Xa, np.ones((Xa.shape[0], 1))])
    y = np.asarray(y, dtype=np.float64)
    w = np.ones(len(y)) if w is None else np.asarray(w, dtype=np.float64)
    Xw = Xa * w[:, None]
    return Xw.T @ Xa, Xw.T @ y, float(w @ (y * y)), float(w.sum()), float(w @ y)


def class_index(y, classes):
    """Each target's index among the sorted ``classes`` (a block's map)."""
    return np.searchsorted(classes, y).astype(np.float64)
