"""Convergence diagnostics of the chains: R-hat, effective sample size, summaries.

The definitions are those of Vehtari, Gelman, Simpson, Carpenter and Bürkner
(2021), "Rank-normalization, folding, and localization: an improved R-hat for
assessing convergence of MCMC", *Bayesian Analysis* 16(2), the ones ArviZ and
Stan's ``posterior`` package implement:

* every chain is **split** in two halves (a trend inside a chain then shows
  up as disagreeing halves); with an odd number of draws the middle draw is
  dropped;
* the draws of one parameter are **rank-normalised**: pooled over all
  (split) chains, replaced by their ranks ``r`` and mapped to normal scores
  ``Phi^-1((r - 3/8) / (S + 1/4))`` (Blom), so heavy tails or an infinite
  variance do not break the statistics;
* **R-hat** is the classical potential scale reduction
  ``sqrt(((n - 1) / n W + B / n) / W)`` (``W`` the mean within-chain
  variance, ``B / n`` the variance of the chain means) of the rank-normalised
  split chains ("bulk"), and of the same for the draws folded around their
  median, ``|theta - median|`` ("tail", sensitive to chains that differ in
  scale); the larger of the two is reported;
* the **effective sample size** (ESS) is ``S / tau`` with the integrated
  autocorrelation time ``tau = -1 + 2 sum_t rho_t`` estimated from the
  multi-chain autocorrelations ``rho_t = 1 - (W - mean_chains acov_t) /
  var_plus``, summed with Geyer's initial positive and monotone sequence
  truncation.  *Bulk* ESS applies it to the rank-normalised split chains,
  *tail* ESS to the indicators ``theta <= q`` of the 5% and 95% quantiles
  (the smaller of the two).

The numpy functions here (vectorised FFTs and truncations over all
parameters at once) are the definitions; the results agree with
``arviz.rhat`` and ``arviz.ess`` to rounding (``tests/test_diagnostics.py``).
The public functions and the fit compute them with a compiled kernel
(:mod:`._rank_kernel`: one sort per parameter, autocovariances summed lag by
lag, the FFT route for autocorrelations that outlast 32 pairs of lags),
equal to these definitions to rounding (``tests/test_rank_kernel.py``) and
6 to 40 times faster.
"""
import functools
import numbers
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from scipy.fft import irfft, next_fast_len, rfft
from scipy.special import ndtri
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted

__all__ = ["ess", "rhat", "summary", "MCMCConvergenceWarning",
           "SummaryTable"]

# thresholds of Vehtari et al. (2021, section 4): R-hat below 1.01, and bulk
# and tail ESS above 100 per chain
RHAT_THRESHOLD = 1.01
MIN_ESS_PER_CHAIN = 100

# elements of the (chains, 2 * draws, parameters) FFT work array held at once
_BLOCK_ELEMENTS = 2 ** 22
# draws of one block of summary(): a dozen work arrays of this size per thread
_SUMMARY_BLOCK_ELEMENTS = 2 ** 19
_MIN_DRAWS = 4


class MCMCConvergenceWarning(ConvergenceWarning):
    """The chains have not converged or mixed well enough (R-hat or ESS).

    A subclass of :class:`sklearn.exceptions.ConvergenceWarning` (itself a
    :class:`UserWarning`), so ``warnings.filterwarnings("ignore",
    category=ConvergenceWarning)`` silences both.
    """


# ----------------------------------------------------------------- array helpers
# Internally the draws are (n_params, n_chains, n_draws), C-contiguous: every
# per-parameter operation (sort, FFT) then runs along the last axis.
def _as_chains(draws, copy=True):
    """``draws`` as float64 of shape (n_params, n_chains, n_draws), plus the
    parameter shape to restore; ``copy=False``: a transposed view where it
    can be (float32 kept; for the compiled kernel, which reads any strides)."""
    a = np.asarray(draws)
    if copy or a.dtype not in (np.float32, np.float64):
        a = np.asarray(a, dtype=np.float64)
    if a.ndim == 0:
        raise ValueError("draws must have at least one dimension (n_draws,), "
                         "or (n_chains, n_draws, ...) for several chains.")
    if a.ndim == 1:
        a = a[None, :]
    param_shape = a.shape[2:]
    a = a.reshape(a.shape[0], a.shape[1], -1)
    if not copy:
        return a.transpose(2, 0, 1), param_shape
    return np.ascontiguousarray(a.transpose(2, 0, 1)), param_shape


def _restore(values, param_shape):
    values = np.asarray(values, dtype=np.float64)
    if param_shape == ():
        return float(values[0])
    return values.reshape(param_shape)


def _split_chains(a):
    """(P, m, n) -> (P, 2m, n // 2): first halves then second halves (an odd
    n drops its middle draw)."""
    n = a.shape[2]
    half = n // 2
    return np.concatenate([a[:, :, :half], a[:, :, n - half:]], axis=1)


def _average_ranks(x):
    """Ranks 1..N along the last axis of a 2-D array, ties sharing their
    average rank (``scipy.stats.rankdata(method="average")``, row-wise)."""
    P, N = x.shape
    order = np.argsort(x, axis=1)  # ties get one rank: stability is moot
    ranks = np.empty((P, N))
    positions = np.arange(1.0, N + 1.0)
    s = np.take_along_axis(x, order, axis=1)
    tie = s[:, 1:] == s[:, :-1]
    if not tie.any():
        np.put_along_axis(ranks, order, np.broadcast_to(positions, (P, N)), axis=1)
        return ranks
    starts = np.ones((P, N), dtype=bool)
    starts[:, 1:] = ~tie
    ends = np.ones((P, N), dtype=bool)
    ends[:, :-1] = ~tie
    first = np.maximum.accumulate(np.where(starts, positions, 0.0), axis=1)
    last = np.minimum.accumulate(np.where(ends, positions, np.inf)[:, ::-1], axis=1)[:, ::-1]
    np.put_along_axis(ranks, order, 0.5 * (first + last), axis=1)
    return ranks


def _z_scale(a):
    """Rank-normalise each parameter over all chains and draws (Blom scores,
    average ranks for ties)."""
    P, m, n = a.shape
    ranks = _average_ranks(a.reshape(P, m * n))
    return ndtri((ranks - 0.375) / (m * n + 0.25)).reshape(P, m, n)


def _rhat_basic(a):
    """Classical R-hat of (P, m, n) chains: sqrt((B/W + n - 1) / n)."""
    n = a.shape[2]
    within = a.var(axis=2, ddof=1).mean(axis=1)
    between = n * a.mean(axis=2).var(axis=1, ddof=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.sqrt((between / within + n - 1) / n)


def _autocov(a):
    """Autocovariances of every chain at every lag (biased: divided by n),
    along the last axis, by FFT."""
    n = a.shape[-1]
    n_fft = next_fast_len(2 * n, real=True)
    centred = a - a.mean(axis=-1, keepdims=True)
    spec = rfft(centred, n=n_fft, axis=-1)
    spec *= np.conjugate(spec)
    return irfft(spec, n=n_fft, axis=-1)[..., :n] / n


def _ess_basic(a):
    """ESS of (P, m, n) chains (no splitting, no rank normalisation), with
    Geyer's initial positive and monotone sequences, as ArviZ's ``_ess``.

    With the autocorrelation pairs ``P_k = rho_2k + rho_2k+1`` (k = 0 ..
    (n - 3) // 2), the sum stops at the first pair ``k*`` that is not
    positive (or at the last pair); the pairs before it enter as their
    running minimum (monotone sequence) and ``rho_2k*`` is added when it is
    positive: ``tau = -1 + 2 sum_{k<k*} min_{j<=k} P_j + max(rho_2k*, 0)``,
    bounded below by ``1 / log10(m n)``.
    """
    P, m, n = a.shape
    out = np.full(P, np.nan)
    if n < 2:
        return out
    size = m * n
    flat = a.reshape(P, size)
    finite = np.all(np.isfinite(flat), axis=1)
    const = np.zeros(P, dtype=bool)
    const[finite] = (np.ptp(flat[finite], axis=1) < np.finfo(np.float64).resolution)
    out[const] = size
    todo = np.flatnonzero(finite & ~const)
    block = max(1, _BLOCK_ELEMENTS // (m * 2 * n))
    k_max = max((n - 3) // 2, 0)
    n_lags = 2 * k_max + 2
    for start in range(0, len(todo), block):
        rows = todo[start:start + block]
        x = a[rows]                                            # (p, m, n)
        acov = _autocov(x)
        mean_var = acov[:, :, 0].mean(axis=1) * n / (n - 1.0)
        var_plus = mean_var * (n - 1.0) / n
        if m > 1:
            var_plus = var_plus + x.mean(axis=2).var(axis=1, ddof=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            rho = 1.0 - (mean_var[:, None] - acov[:, :, :n_lags].mean(axis=1)) / var_plus[:, None]
        rho[:, 0] = 1.0
        pairs = rho[:, 0::2] + rho[:, 1::2]                    # (p, k_max + 1)
        nonpos = pairs <= 0.0
        k_star = np.where(nonpos.any(axis=1), nonpos.argmax(axis=1), k_max)
        monotone = np.minimum.accumulate(pairs, axis=1)
        before = np.arange(k_max + 1)[None, :] < k_star[:, None]
        head = np.sum(np.where(before, monotone, 0.0), axis=1)
        idx = np.arange(len(rows))
        even = rho[idx, 2 * k_star]
        # the last pair is kept whole when it is non-negative (the sum ran
        # out of lags, not of positive pairs); else only a positive rho_2k*
        tail = np.where((even > 0.0) | (pairs[idx, k_star] >= 0.0), even, 0.0)
        tau = np.maximum(-1.0 + 2.0 * head + tail, 1.0 / np.log10(size))
        ess_rows = size / tau
        ess_rows[np.isnan(rho).any(axis=1)] = np.nan
        out[rows] = ess_rows
    return out


# ------------------------------------------------------------------ public API
def ess(draws, method="bulk", *, relative=False):
    """Effective sample size of MCMC draws (rank-normalised, split chains).

    Parameters
    ----------
    draws : array-like of shape (n_chains, n_draws, ...) or (n_draws,)
        Posterior draws; trailing dimensions are parameters, each diagnosed
        separately.  A 1-D array is one chain.  ``coef_samples_`` and
        ``intercept_samples_`` of a fitted estimator have this layout.
    method : {"bulk", "tail", "mean"}, default="bulk"
        ``"bulk"``: the ESS of the rank-normalised split chains (Vehtari et
        al., 2021), which measures how well the centre of the distribution
        is explored (the efficiency of mean and median estimates).
        ``"tail"``: the smaller ESS of the indicators ``theta <= q`` for the
        5% and 95% quantiles ``q`` (the efficiency of interval estimates).
        ``"mean"``: the classical ESS of the split chains (no ranks), which
        assumes a finite variance.
    relative : bool, default=False
        Divide by the number of draws ``n_chains * n_draws`` (the ESS per
        draw, about 1 for independent draws; with an odd ``n_draws`` the
        middle draw of each chain, dropped by the split, is not counted).

    Returns
    -------
    ess : float or ndarray of shape ``draws.shape[2:]``
        NaN for parameters with non-finite draws, or fewer than 4 draws per
        chain.  Constant parameters get the number of draws.

    Notes
    -----
    The ESS of independent draws is close to ``n_chains * n_draws``; for
    an AR(1) chain with lag-one autocorrelation ``rho`` it is about
    ``n_chains * n_draws * (1 - rho) / (1 + rho)``.  ArviZ's
    ``arviz.ess(..., method=method)`` gives the same numbers.

    Examples
    --------
    >>> import numpy as np
    >>> from skbayes_sg.diagnostics import ess
    >>> draws = np.random.default_rng(0).normal(size=(4, 1000, 3))
    >>> ess(draws).shape
    (3,)
    """
    if method not in ("bulk", "tail", "mean"):
        raise ValueError(f"method={method!r} is not one of 'bulk', 'tail', 'mean'.")
    a, param_shape = _as_chains(draws)
    values = _ess(a, method)
    if relative:
        # per draw used: an odd chain length drops the middle draw (as ArviZ)
        values = values / (a.shape[1] * 2 * (a.shape[2] // 2))
    return _restore(values, param_shape)


def _ess(a, method):
    """:func:`ess` of (P, m, n) draws, as an array of shape (P,) (bulk and
    tail: the compiled kernel, :func:`_rank_block`)."""
    if method == "mean":
        return _ess_numpy(a, method)
    ess_bulk, _, ess_tail = _rank_block(a, bulk=method == "bulk", tail=method == "tail")
    return ess_bulk if method == "bulk" else ess_tail


def _ess_numpy(a, method):
    """:func:`ess` of (P, m, n) draws in numpy (vectorised FFTs: the
    definition, which the kernel reproduces to rounding)."""
    P, m, n = a.shape
    if n < _MIN_DRAWS:
        return np.full(P, np.nan)
    if method == "bulk":
        return _ess_basic(_z_scale_finite(_split_chains(a)))
    if method == "mean":
        return _ess_basic(_split_chains(a))
    flat = a.reshape(P, m * n)
    per_quantile = []
    for prob in (0.05, 0.95):
        with np.errstate(invalid="ignore"):
            q = np.quantile(flat, prob, axis=1)                # type 7, as ArviZ
        indicator = (a <= q[:, None, None]).astype(np.float64)
        per_quantile.append(_ess_basic(_split_chains(indicator)))
    values = np.minimum(*per_quantile)
    values[~np.all(np.isfinite(flat), axis=1)] = np.nan
    return values


def _z_scale_finite(a):
    """Rank-normalise; parameters with non-finite draws become NaN."""
    bad = ~np.all(np.isfinite(a), axis=(1, 2))
    z = _z_scale(np.where(np.isfinite(a), a, 0.0))
    z[bad] = np.nan
    return z


def rhat(draws):
    """Rank-normalised split R-hat (Vehtari et al., 2021).

    Parameters
    ----------
    draws : array-like of shape (n_chains, n_draws, ...) or (n_draws,)
        Posterior draws, trailing dimensions are parameters.

    Returns
    -------
    rhat : float or ndarray of shape ``draws.shape[2:]``
        The larger of the bulk R-hat (rank-normalised split chains) and the
        tail R-hat (the same, for the draws folded around their median).
        Values above 1.01 mean the chains have not mixed.  NaN for
        constant parameters, parameters with non-finite draws, or fewer than
        4 draws per chain.

    Notes
    -----
    With one chain the statistic compares its two halves (as Stan's
    ``posterior`` package does; ArviZ returns NaN for a single chain).
    Chains that all start at the same point (``init="mode"``, the default
    of the estimators) make R-hat optimistic: it cannot see a slow drift
    that all chains share.  Start them apart with ``init="prior"`` for a
    stricter check.

    Examples
    --------
    >>> import numpy as np
    >>> from skbayes_sg.diagnostics import rhat
    >>> draws = np.random.default_rng(0).normal(size=(4, 1000))
    >>> bool(rhat(draws) < 1.01)
    True
    """
    a, param_shape = _as_chains(draws)
    return _restore(_rhat(a), param_shape)


def _rhat(a):
    """:func:`rhat` of (P, m, n) draws, as an array of shape (P,) (the
    compiled kernel, :func:`_rank_block`)."""
    return _rank_block(a, bulk=True, tail=False)[1]


def _rhat_numpy(a):
    """:func:`rhat` of (P, m, n) draws in numpy (the definition; the median
    of the folded draws is ``np.median``, the kernel's the type-7 one of the
    sorted draws, which may differ in the last bit)."""
    P, m, n = a.shape
    values = np.full(P, np.nan)
    if n < _MIN_DRAWS:
        return values
    split = _split_chains(a)
    ok = np.all(np.isfinite(split), axis=(1, 2))
    if ok.any():
        s = split[ok]
        bulk = _rhat_basic(_z_scale(s))
        median = np.median(s.reshape(s.shape[0], -1), axis=1)
        tail = _rhat_basic(_z_scale(np.abs(s - median[:, None, None])))
        values[ok] = np.maximum(bulk, tail)      # NaN (constant draws) stays NaN
    return values


def bulk_ess_and_rhat(draws, n_jobs=None, tail=False):
    """:func:`ess` (bulk) and :func:`rhat` of the same draws, sharing the
    rank normalisation of the split chains (the fit's stopping rule calls
    this after every round).

    Parameters
    ----------
    draws : array of shape (n_chains, n_draws, n_params)
    n_jobs : int or None
        Threads over blocks of parameters (None or 1: none; -1: one per
        core; the compiled kernel releases the GIL).  The values do not
        depend on it.
    tail : bool, default=False
        Also the tail ESS (:func:`ess` with ``method="tail"``), from the same
        sort of the draws.

    Returns
    -------
    ess, rhat : ndarrays of shape (n_params,)
        And ``ess_tail`` where ``tail``.
    """
    draws = np.asarray(draws)
    m, n, P = draws.shape
    values = [np.full(P, np.nan) for _ in range(3 if tail else 2)]
    block = max(1, _BLOCK_ELEMENTS // max(m * n, 1))
    starts = range(0, P, block)
    threads = _thread_count(n_jobs)

    def part(start):
        a, _ = _as_chains(draws[:, :, start:start + block], copy=False)
        ess_bulk, rhat, ess_tail = _rank_block(a, bulk=True, tail=tail)
        return (ess_bulk, rhat, ess_tail) if tail else (ess_bulk, rhat)

    if len(starts) > 1 and threads > 1:
        # plain threads (not joblib's active backend: a dask one would ship
        # the draws to the cluster)
        with ThreadPoolExecutor(min(threads, len(starts))) as pool:
            parts = list(pool.map(part, starts))
    else:
        parts = [part(start) for start in starts]
    for start, blocks in zip(starts, parts):
        for full, block_values in zip(values, blocks):
            full[start:start + len(block_values)] = block_values
    return tuple(values)


def _thread_count(n_jobs):
    """Threads for ``n_jobs`` (an int, joblib's convention; anything else: 1)."""
    if not isinstance(n_jobs, numbers.Integral) or n_jobs == 0:
        return 1
    cores = os.cpu_count() or 1
    return max(1, int(n_jobs) if n_jobs > 0 else cores + 1 + int(n_jobs))


def _rank_block(a, bulk=True, tail=False):
    """``(bulk ESS, R-hat, tail ESS)`` of (P, m, n) draws, by the compiled
    kernel (:mod:`._rank_kernel`): NaN for parameters with non-finite draws,
    for fewer than ``_MIN_DRAWS`` draws a chain and for what was not asked.  Parameters whose
    autocorrelation outlasts the kernel's direct sums get the numpy (FFT)
    values."""
    from ._rank_kernel import rank_diagnostics
    P, m, n = a.shape
    out = [np.full(P, np.nan) for _ in range(3)]
    if n < _MIN_DRAWS or not P:
        return tuple(out)
    ess_bulk, rhat, ess_tail = out
    fallback = np.zeros(P, dtype=np.int32)
    # the flagged parameters' scores, for the FFT (pages touched only for them)
    scores = np.empty((P, 2 * m * (n // 2))) if bulk else None
    # the kernel skips parameters with non-finite draws (their NaN stays)
    rank_diagnostics(a, _score_table(2 * m * (n // 2)), bulk, tail, ess_bulk, rhat, ess_tail,
                     fallback, scores)
    slow = np.flatnonzero(fallback & 1)
    if slow.size:
        ess_bulk[slow] = _ess_basic(scores[slow].reshape(slow.size, 2 * m, n // 2))
    slow = np.flatnonzero(fallback & 2)
    if slow.size:
        ess_tail[slow] = _ess_numpy(np.asarray(a[slow], dtype=np.float64), "tail")
    return tuple(out)


@functools.lru_cache(maxsize=8)
def _score_table(N):
    """The kernel's Blom scores of every average rank among N draws."""
    from ._rank_kernel import score_table
    return score_table(N)


# --------------------------------------------------------------- the estimator
def _final_estimator(estimator):
    """The fitted SG-MCMC estimator (the last step of a pipeline)."""
    if hasattr(estimator, "steps") and not hasattr(estimator, "coef_samples_"):
        estimator = estimator.steps[-1][1]
    if not hasattr(estimator, "coef_samples_"):
        check_is_fitted(estimator, "coef_samples_")   # NotFittedError, naming the class
    return estimator


def _parameter_draws(estimator, names=None):
    """All sampled parameters as (n_chains, n_samples, n_params), and their names.

    Order: for every output (class), its coefficients then its intercept.
    """
    (_, _, n_params), labels, read = _parameter_reader(estimator, names)
    return read(0, n_params), list(labels)


def _parameter_reader(estimator, names=None):
    """Like :func:`_parameter_draws` without the copy: ``(n_chains,
    n_samples, n_params)``, the labels, and ``read(start, stop)`` that
    gathers parameters ``start:stop`` (same order) from the stored draws."""
    derived = getattr(estimator, "convergence_quantities", None)
    if derived is not None:
        # the network: quantities without the weights' permutation symmetry
        draws, labels = derived()
        if names is not None:
            if len(names) != draws.shape[2]:
                raise ValueError(f"names has {len(names)} entries; the estimator has "
                                 f"{draws.shape[2]} summarised quantities.")
            labels = [str(v) for v in names]
        return draws.shape, list(labels), lambda start, stop: draws[:, :, start:stop]
    coef = np.asarray(estimator.coef_samples_)
    icpt = np.asarray(estimator.intercept_samples_)
    if coef.ndim == 3:
        coef, icpt = coef[:, :, None, :], icpt[:, :, None]
    n_chains, n_samples, K, d = coef.shape
    fit_intercept = bool(getattr(estimator, "fit_intercept", True))
    labels = _parameter_labels(estimator, names, d, fit_intercept, multi=K > 1 or
                               np.ndim(estimator.coef_samples_) == 4)
    per_output = d + int(fit_intercept)

    def read(start, stop):
        index = np.arange(start, stop)
        output, j = np.divmod(index, per_output)
        is_coef = j < d
        out = np.empty((n_chains, n_samples, index.size))
        out[:, :, is_coef] = coef[:, :, output[is_coef], j[is_coef]]
        if not np.all(is_coef):
            out[:, :, ~is_coef] = icpt[:, :, output[~is_coef]]
        return out
    return (n_chains, n_samples, K * per_output), labels, read


class _ParameterLabels(Sequence):
    """Each output's coefficient labels (``names``, else ``x0, x1, ...``) then
    ``intercept``, as ``label[class]`` where there are several outputs; made
    on demand (a warning names one parameter of a million, and the list of
    them cost 4 SGD epochs of a one-pass fit)."""

    def __init__(self, names, d, fit_intercept, classes):
        self._names, self._d, self._classes = names, d, classes
        self._per_output = d + int(fit_intercept)

    def __len__(self):
        return self._per_output * (len(self._classes) if self._classes is not None else 1)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        k, j = divmod(range(len(self))[i], self._per_output)   # IndexError, negative i
        own = ("intercept" if j == self._d
               else self._names[j] if self._names is not None else f"x{j}")
        return own if self._classes is None else f"{own}[{self._classes[k]}]"


def _feature_names(estimator, names, d):
    """``names``, else ``feature_names_in_``, else ``x0, x1, ...`` (checked: d of them)."""
    given = _given_feature_names(estimator, names, d)
    return given if given is not None else [f"x{j}" for j in range(d)]


def _given_feature_names(estimator, names, d):
    """``names``, else ``feature_names_in_`` (checked: d of them), else None."""
    if names is None:
        names = getattr(estimator, "feature_names_in_", None)
        if names is None:
            return None
    names = [str(v) for v in names]
    if len(names) != d:
        raise ValueError(f"names has {len(names)} entries; the estimator has {d} "
                         "coefficients per output.")
    return names


def _parameter_labels(estimator, names, d, fit_intercept, multi):
    """The parameters' labels as a sequence made on demand (``list()`` it for
    a table)."""
    return _ParameterLabels(_given_feature_names(estimator, names, d), d, fit_intercept,
                            list(estimator.classes_) if multi else None)


class SummaryTable:
    """A small read-only table (the result of :func:`summary` without pandas).

    Parameters
    ----------
    index : list of str
        Row labels (parameter names).
    columns : list of str
        Column labels.
    values : ndarray of shape (n_rows, n_columns)
        The numbers.

    Attributes
    ----------
    index : list of str
        Row labels.
    columns : list of str
        Column labels.
    values : ndarray of shape (n_rows, n_columns)
        The numbers.
    """

    def __init__(self, index, columns, values):
        self.index = list(index)
        self.columns = list(columns)
        self.values = np.asarray(values, dtype=np.float64)

    def __getitem__(self, column):
        """The column named ``column``, as an ndarray."""
        return self.values[:, self.columns.index(column)]

    def __len__(self):
        return len(self.index)

    @property
    def shape(self):
        """(n_rows, n_columns)."""
        return self.values.shape

    def to_string(self, float_format="{:.3f}"):
        """The table as aligned text, one parameter per line.

        Parameters
        ----------
        float_format : str, default="{:.3f}"
            Format of the statistics; ESS columns are printed as integers.

        Returns
        -------
        text : str
        """
        cells = []
        for row in self.values:
            line = []
            for col, v in zip(self.columns, row):
                if np.isnan(v):
                    line.append("nan")
                elif col.startswith("ess"):
                    line.append(f"{v:.0f}")
                else:
                    line.append(float_format.format(v))
            cells.append(line)
        first = max([len(s) for s in self.index] + [len("parameter")])
        widths = [max([len(c)] + [len(r[j]) for r in cells]) for j, c in enumerate(self.columns)]
        lines = [f"{'parameter':<{first}}"
                 + "".join(f"  {c:>{w}}" for c, w in zip(self.columns, widths))]
        for label, row in zip(self.index, cells):
            lines.append(f"{label:<{first}}" + "".join(f"  {v:>{w}}"
                                                       for v, w in zip(row, widths)))
        return "\n".join(lines)

    def __str__(self):
        return self.to_string()

    def __repr__(self):
        return self.to_string()


def _quantile_label(q):
    return f"{100 * q:g}%"


def summary(estimator, quantiles=(0.05, 0.5, 0.95), names=None):
    """Posterior summary of a fitted estimator, one row per parameter.

    Parameters
    ----------
    estimator : fitted SG-MCMC estimator or Pipeline ending with one
        Anything with ``coef_samples_`` and ``intercept_samples_``; for
        :class:`~skbayes_sg.neural_network.SGMCMCMLPClassifier`, one row per
        permutation-invariant quantity (``log_likelihood``,
        ``weight_norm[l]``) instead of one per weight.
    quantiles : sequence of float in [0, 1], default=(0.05, 0.5, 0.95)
        Posterior quantiles to report (pooled over chains).
    names : sequence of str or None, default=None
        Names of the features; by default ``feature_names_in_`` when the
        estimator was fitted on named columns, else ``x0, x1, ...``.

    Returns
    -------
    table : pandas.DataFrame or SummaryTable
        Rows: the coefficients then ``intercept`` (when
        ``fit_intercept=True``); for a multinomial model every class in
        ``classes_`` order, labelled ``"name[class]"``.  Columns: ``mean``,
        ``sd``, one column per quantile (``"5%"``, ...), ``ess_bulk``,
        ``ess_tail`` and ``r_hat`` (see :func:`ess` and :func:`rhat`).  A
        :class:`pandas.DataFrame` when pandas is installed, otherwise a
        :class:`SummaryTable` with the same ``index``, ``columns``,
        ``values``, column access ``table["r_hat"]`` and ``to_string()``.

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.preprocessing import scale
    >>> from skbayes_sg import SGMCMCLogisticRegression
    >>> from skbayes_sg.diagnostics import summary
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> clf = SGMCMCLogisticRegression(n_samples=200, random_state=0).fit(scale(X), y)
    >>> table = summary(clf)
    >>> list(table.columns)
    ['mean', 'sd', '5%', '50%', '95%', 'ess_bulk', 'ess_tail', 'r_hat']
    """
    estimator = _final_estimator(estimator)
    quantiles = np.atleast_1d(np.asarray(quantiles, dtype=np.float64))
    if quantiles.ndim != 1 or np.any((quantiles < 0) | (quantiles > 1)):
        raise ValueError(f"quantiles must be numbers in [0, 1]; got {quantiles.tolist()}.")
    (n_chains, n_samples, n_params), labels, read = _parameter_reader(estimator, names)
    labels = list(labels)
    columns = ["mean", "sd"] + [_quantile_label(q) for q in quantiles] + [
        "ess_bulk", "ess_tail", "r_hat"]
    values = np.empty((n_params, len(columns)))
    # parameters in blocks: the sorts and FFTs need a few copies of the draws
    # they work on, so memory stays near one copy of the draws whatever d;
    # blocks run in threads (sorts and FFTs release the GIL)
    block = max(1, _SUMMARY_BLOCK_ELEMENTS // max(n_chains * n_samples, 1))
    starts = range(0, n_params, block)

    def fill(start):
        stop = min(start + block, n_params)
        values[start:stop] = _summary_block(read(start, stop), quantiles)
    if len(starts) > 1:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
            list(pool.map(fill, starts))
    else:
        for start in starts:
            fill(start)
    try:
        import pandas as pd
    except ImportError:
        return SummaryTable(labels, columns, values)
    return pd.DataFrame(values, index=pd.Index(labels, name="parameter"), columns=columns)


def _summary_block(part, quantiles):
    """The columns of :func:`summary` for draws (m, n, p): the compiled
    kernel's bulk and tail ESS and R-hat (one sort per parameter), the
    quantiles by ``np.quantile``."""
    m, n, p = part.shape
    flat_draws = part.reshape(m * n, p)
    mean = flat_draws.mean(axis=0)
    sd = flat_draws.std(axis=0, ddof=1) if m * n > 1 else np.full(p, np.nan)
    a, _ = _as_chains(part)                                     # (p, m, n)
    ess_bulk, rhat, ess_tail = _rank_block(a, bulk=True, tail=True)
    with np.errstate(invalid="ignore"):
        const = np.ptp(a.reshape(p, m * n), axis=1) < np.finfo(np.float64).resolution
    rhat[const] = np.nan
    with np.errstate(invalid="ignore"):
        q = np.quantile(flat_draws, quantiles, axis=0)
    return np.column_stack([mean, sd, *q, ess_bulk, ess_tail, rhat])
