"""Leave-one-out cross-validation by Pareto-smoothed importance sampling.

PSIS-LOO (Vehtari, Gelman and Gabry, 2017; Vehtari, Simpson, Gelman, Yao and
Gabry, 2024, "Pareto smoothed importance sampling"), as the ``loo`` R
package computes it, with one difference that matters for the confident
classifiers this library fits: importance ratios that are constant, or
nearly so, are the exact case (the leave-one-out predictive density equals
the full-posterior one, the uniform weights are right, k-hat is reported as
``-inf``), not a failed Pareto fit.  ArviZ's ``az.loo`` returns NaN there
(0.x) or raises (1.x).  "Nearly": the observations whose log-likelihood
varies least over the draws, as long as the sum of their spreads (the most
any weighting can change their ``elpd_loo_i``) stays within ``exact_tol``
nats.

Needs numpy and scipy only; ArviZ is optional (an ``InferenceData`` or
``DataTree`` export is read when given).
"""
import math
import numbers
import warnings

import numpy as np
from scipy.special import logsumexp

from .._warn_location import user_stacklevel

__all__ = ["loo", "compare", "psislw", "LOOResult", "LOOWarning"]

#: k-hat above this (and above the sample-size bound 1 - 1/log10(S)) marks
#: an observation whose PSIS estimate is unreliable (Vehtari et al., 2024)
K_THRESHOLD = 0.7
#: the observations treated as the exact case may change elpd_loo by at most
#: this many nats in all (far below its Monte Carlo error)
EXACT_TOL = 0.01
#: the weakly informative prior on k of the generalized Pareto fit: a
#: normal centred at 0.5 worth this many observations (Vehtari et al., 2024)
PRIOR_K_WEIGHT = 10
PRIOR_K_CENTRE = 0.5


class LOOWarning(UserWarning):
    """PSIS-LOO is unreliable for some observations (Pareto k-hat too large)."""


def _gpdfit(x):
    """Generalized Pareto fit of sorted exceedances ``x >= 0`` (``x[-1] > 0``):
    the empirical Bayes estimate of Zhang and Stephens (2009) with the
    weakly informative prior on ``k`` of Vehtari et al. (2024), as in the
    ``loo`` / ``posterior`` R packages.  Returns ``(k, sigma)``; NaNs when
    the sample is too degenerate for the fit (its first quartile is 0)."""
    n = x.shape[0]
    m = 30 + int(math.sqrt(n))
    xstar = x[int(n / 4 + 0.5) - 1]           # the first quartile
    if not (xstar > 0 and x[-1] > 0):
        return np.nan, np.nan
    theta = 1.0 / x[-1] + (1.0 - np.sqrt(m / (np.arange(1, m + 1) - 0.5))) / (3.0 * xstar)
    with np.errstate(divide="ignore", invalid="ignore"):
        k_grid = np.log1p(-theta[:, None] * x[None, :]).mean(axis=1)
        profile = n * (np.log(-theta / k_grid) - k_grid - 1.0)
    ok = np.isfinite(profile)
    if not ok.any():
        return np.nan, np.nan
    theta, profile = theta[ok], profile[ok]
    w = np.exp(profile - logsumexp(profile))
    theta_hat = float(w @ theta)
    k = float(np.log1p(-theta_hat * x).mean())
    sigma = -k / theta_hat
    k = (n * k + PRIOR_K_WEIGHT * PRIOR_K_CENTRE) / (n + PRIOR_K_WEIGHT)
    return k, sigma


def _qgpd(p, k, sigma):
    """Quantiles of the generalized Pareto distribution (location 0)."""
    if k == 0:
        return -sigma * np.log1p(-p)
    return sigma * np.expm1(-k * np.log1p(-p)) / k


def _tail_length(n_draws, r_eff):
    """M = ceil(min(0.2 S, 3 sqrt(S / r_eff))), the ``loo`` package's tail."""
    return int(math.ceil(min(0.2 * n_draws, 3.0 * math.sqrt(n_draws / r_eff))))


def _psis_column(log_ratios, tail_len, exact):
    """Normalised smoothed log weights and k-hat of one observation."""
    S = log_ratios.shape[0]
    lw = log_ratios - log_ratios.max()
    if exact or lw.min() == 0.0:
        # the exact case (constant ratios, or nearly: exact_tol): uniform weights
        return np.full(S, -math.log(S)), -np.inf
    if tail_len < 5:
        # too few draws for a tail fit: raw weights, k-hat unknown (inf)
        return lw - logsumexp(lw), np.inf
    order = np.argsort(lw, kind="stable")
    tail = order[S - tail_len:]
    cutoff = lw[order[S - tail_len - 1]]
    # the exceedances exp(lw) - exp(cutoff), scaled by exp(-cutoff) (exact
    # for tiny differences) and by their largest value (k-hat does not
    # depend on the scale); a tail at the cutoff is a bounded (atom) tail
    excess = np.expm1(lw[tail] - cutoff)
    top = excess[-1]
    if not top > 0:
        return lw - logsumexp(lw), -np.inf
    k, sigma = _gpdfit(excess / top)
    if not (np.isfinite(k) and sigma > 0):
        return lw - logsumexp(lw), np.inf
    p = (np.arange(tail_len) + 0.5) / tail_len
    lw[tail] = cutoff + np.log1p(_qgpd(p, k, sigma) * top)
    np.minimum(lw, 0.0, out=lw)      # truncated at the largest raw weight
    return lw - logsumexp(lw), float(k)


def _exact_columns(spread, budget):
    """The columns of least spread whose spreads sum to at most ``budget``
    (and every constant one)."""
    if not (isinstance(budget, numbers.Real) and budget >= 0):
        raise ValueError(f"exact_tol must be a number of nats >= 0, e.g. 0.01; got "
                         f"{budget!r}.")
    order = np.argsort(spread, kind="stable")
    exact = np.zeros(spread.shape[0], dtype=bool)
    exact[order[np.cumsum(spread[order]) <= budget]] = True
    return exact | (spread == 0)


def psislw(log_ratios, r_eff=1.0, *, exact_tol=EXACT_TOL):
    """Pareto-smoothed importance sampling log weights.

    Parameters
    ----------
    log_ratios : array-like of shape (n_draws,) or (n_draws, n_obs)
        Log importance ratios, one column per target; for leave-one-out,
        minus the log-likelihood of each observation.
    r_eff : float or array-like of shape (n_obs,), default=1.0
        Relative efficiency of the draws (ESS / n_draws) for each column; it
        sets the tail length ``M = ceil(min(0.2 S, 3 sqrt(S / r_eff)))``.
    exact_tol : float, default=0.01
        The exact case: the columns whose log ratios span the smallest
        ranges (``max - min``), as many as keep the sum of those ranges
        within ``exact_tol``, get uniform weights and ``k = -inf``.  A
        self-normalised importance-sampling estimate of ``log E[f]`` for a
        positive ``f`` such as ``p(y_i | theta)``, with any positive
        weights, changes by at most the range of the column's log ratios.
        Constant columns are always exact; ``exact_tol=0``: only those.

    Returns
    -------
    log_weights : ndarray, the shape of ``log_ratios``
        Smoothed log weights, normalised to log-sum-exp 0 per column.
    pareto_k : float or ndarray of shape (n_obs,)
        The Pareto shape estimate k-hat per column: ``-inf`` in the exact
        case or for a bounded tail at the cutoff, ``inf`` where no tail could
        be fitted (fewer than 5 tail draws, or a degenerate tail).
    """
    lr = np.asarray(log_ratios, dtype=np.float64)
    one = lr.ndim == 1
    if one:
        lr = lr[:, None]
    if lr.ndim != 2:
        raise ValueError(f"log_ratios must have shape (n_draws,) or (n_draws, n_obs); got "
                         f"{np.shape(log_ratios)}.")
    if not np.all(np.isfinite(lr)):
        raise ValueError("log_ratios holds non-finite values; PSIS needs a finite log "
                         "likelihood for every draw and observation.")
    S, n = lr.shape
    r_eff = np.broadcast_to(np.asarray(r_eff, dtype=np.float64), (n,))
    if not np.all((r_eff > 0) & np.isfinite(r_eff)):
        raise ValueError("r_eff must be positive and finite, e.g. 1.0 for independent draws.")
    exact = _exact_columns(lr.max(axis=0) - lr.min(axis=0), exact_tol)
    lw = np.empty_like(lr)
    k = np.empty(n)
    for j in range(n):
        lw[:, j], k[j] = _psis_column(lr[:, j], _tail_length(S, r_eff[j]), exact[j])
    return (lw[:, 0], float(k[0])) if one else (lw, k)


class LOOResult:
    """The PSIS-LOO estimate of the expected log pointwise predictive density.

    Attributes
    ----------
    elpd_loo : float
        ``sum_i log p(y_i | y_-i)``, estimated.
    se : float
        Its standard error, ``sqrt(n var(elpd_loo_i))``: the uncertainty
        about the predictive performance on new data.
    mcse_elpd_loo : float
        Its Monte Carlo standard error (the error of the importance-sampling
        estimate from a finite number of draws), ``sqrt(sum_i
        mcse_i^2)``, ``mcse_i`` by the delta method for self-normalised
        importance sampling, ``sqrt(sum_s w_s^2 (p_s - p_hat)^2 / r_eff) /
        p_hat``; 0 for the exact and the refitted observations.
    mcse_elpd_loo_i : ndarray of shape (n_obs,)
        The pointwise ``mcse_i``.
    p_loo : float
        Effective number of parameters, ``lpd - elpd_loo``.
    p_loo_se : float
        Standard error of ``p_loo``.
    lpd : float
        ``sum_i log mean_s p(y_i | theta_s)``, the in-sample fit.
    looic : float
        ``-2 elpd_loo``.
    elpd_loo_i : ndarray of shape (n_obs,)
        Pointwise ``log p(y_i | y_-i)``.
    pareto_k : ndarray of shape (n_obs,)
        Pointwise k-hat: ``-inf`` for the exact case (constant ratios, or
        nearly: ``exact_tol`` of :func:`loo`), above ``k_threshold`` where
        the estimate of that observation is unreliable.
    k_threshold : float
        ``min(1 - 1 / log10(n_draws), 0.7)``.
    n_draws, n_obs : int
        Posterior draws and observations.
    r_eff : ndarray of shape (n_obs,)
        Relative efficiencies used for the tail lengths.
    refitted : ndarray of int
        Observations whose ``elpd_loo_i`` was computed by refitting without
        them (``loo(..., reloo=True)``), empty otherwise.
    """

    def __init__(self, elpd_loo_i, lpd_i, pareto_k, n_draws, r_eff, refitted=(),
                 mcse_i=None):
        self.elpd_loo_i = np.asarray(elpd_loo_i, dtype=np.float64)
        self.mcse_elpd_loo_i = (np.zeros_like(self.elpd_loo_i) if mcse_i is None
                                else np.asarray(mcse_i, dtype=np.float64))
        self.mcse_elpd_loo = float(math.sqrt(np.sum(self.mcse_elpd_loo_i ** 2)))
        self.lpd_i = np.asarray(lpd_i, dtype=np.float64)
        self.pareto_k = np.asarray(pareto_k, dtype=np.float64)
        self.n_draws = int(n_draws)
        self.n_obs = self.elpd_loo_i.shape[0]
        self.r_eff = np.asarray(r_eff, dtype=np.float64)
        self.refitted = np.asarray(refitted, dtype=np.intp)
        n = self.n_obs
        self.elpd_loo = float(self.elpd_loo_i.sum())
        self.se = float(math.sqrt(n * np.var(self.elpd_loo_i, ddof=1))) if n > 1 else np.nan
        p_i = self.lpd_i - self.elpd_loo_i
        self.p_loo = float(p_i.sum())
        self.p_loo_se = float(math.sqrt(n * np.var(p_i, ddof=1))) if n > 1 else np.nan
        self.lpd = float(self.lpd_i.sum())
        self.looic = -2.0 * self.elpd_loo
        self.k_threshold = k_threshold(self.n_draws)

    @property
    def bad_k(self):
        """Indices of the observations with k-hat above ``k_threshold``
        (those refitted by ``reloo`` excepted)."""
        bad = self.pareto_k > self.k_threshold
        bad[self.refitted] = False
        return np.flatnonzero(bad)

    def __repr__(self):
        k = self.pareto_k
        exact = int(np.sum(k == -np.inf))
        lines = [f"PSIS-LOO from {self.n_draws} posterior draws and {self.n_obs} observations",
                 "           Estimate       SE",
                 f"elpd_loo {self.elpd_loo:10.2f} {self.se:8.2f}",
                 f"p_loo    {self.p_loo:10.2f} {self.p_loo_se:8.2f}",
                 f"Monte Carlo SE of elpd_loo {self.mcse_elpd_loo:.2f}",
                 f"Pareto k-hat: {exact} exact (constant or nearly constant ratios), "
                 f"{int(np.sum((k > -np.inf) & (k <= self.k_threshold)))} good "
                 f"(<= {self.k_threshold:.2f}), {int(np.sum(k > self.k_threshold))} bad"]
        if len(self.refitted):
            lines.append(f"  of which {len(self.refitted)} computed by refitting without them "
                         "(reloo)")
        return "\n".join(lines)


def k_threshold(n_draws):
    """The sample-size dependent k-hat bound ``min(1 - 1/log10(S), 0.7)``."""
    return min(1.0 - 1.0 / math.log10(n_draws), K_THRESHOLD) if n_draws > 10 else 0.0


def _log_likelihood_of(data, X, y, var_name):
    """``(log_lik (chains, draws, n_obs), temperature, estimator or None)``."""
    if hasattr(data, "coef_samples_") or hasattr(data, "steps"):
        from ._arviz import _final_estimator_and_features
        from ._convergence import _final_estimator
        if X is None or y is None:
            raise ValueError("loo of an estimator needs the observations: pass X and y (the "
                             "data it was fitted on).")
        final = _final_estimator(data)
        model, Xt = _final_estimator_and_features(data, X)
        if not hasattr(model, "log_likelihood"):
            raise ValueError(f"{type(model).__name__} has no pointwise log likelihood.")
        ll = model.log_likelihood(Xt, np.asarray(y).ravel()).T
        chains, draws = np.shape(final.coef_samples_)[:2]
        temperature = float(getattr(final, "temperature_", getattr(final, "temperature", 1.0)))
        return ll.reshape(chains, draws, -1), temperature, data
    if X is not None or y is not None:
        raise ValueError("X and y are read only with a fitted estimator; an export or an "
                         "array already holds the log likelihood.")
    if not isinstance(data, np.ndarray) and hasattr(data, "groups"):
        # an ArviZ export: InferenceData (0.x) or DataTree (1.x)
        try:
            group = data["log_likelihood"]
        except (KeyError, TypeError):
            group = getattr(data, "log_likelihood", None)
        if group is None:
            raise ValueError("the export has no log_likelihood group: export it with the "
                             "observations, estimator.to_inference_data(X, y).")
        names = list(group.data_vars)
        if var_name is None:
            if len(names) != 1:
                raise ValueError(f"the log_likelihood group holds {names}; pass var_name.")
            var_name = names[0]
        da = group[var_name]
        if "chain" in da.dims and "draw" in da.dims:
            da = da.transpose("chain", "draw", ...)
        arr = np.asarray(da.values, dtype=np.float64)
        return arr.reshape(arr.shape[0], arr.shape[1], -1), 1.0, None
    try:
        arr = np.asarray(data, dtype=np.float64)
    except (TypeError, ValueError):
        arr = None
    if arr is not None and arr.ndim == 2:
        return arr[None], 1.0, None
    if arr is not None and arr.ndim == 3:
        return arr, 1.0, None
    raise ValueError("loo reads a fitted estimator (with X and y), an ArviZ export with a "
                     "log_likelihood group, or an array of shape (n_chains, n_draws, n_obs) "
                     f"or (n_draws, n_obs); got {type(data).__name__}"
                     + (f" of shape {arr.shape}" if arr is not None else "") + ".")


def _relative_eff(ll):
    """loo's ``relative_eff``: the ESS of ``p(y_i | theta_s)`` per draw."""
    from ._convergence import ess
    chains, draws, n = ll.shape
    if draws < 4:
        return np.ones(n)
    lik = np.exp(ll - ll.max(axis=(0, 1), keepdims=True))
    with np.errstate(all="ignore"):
        r = np.asarray(ess(lik, method="mean", relative=True), dtype=np.float64).reshape(n)
    return np.where(np.isfinite(r) & (r > 0), r, 1.0)


def loo(data, X=None, y=None, *, r_eff="auto", var_name=None, exact_tol=EXACT_TOL,
        reloo=False, warn=True):
    """Leave-one-out cross-validation by Pareto-smoothed importance sampling.

    Estimates ``elpd_loo = sum_i log p(y_i | y_-i)``, the expected log predictive
    density of a new observation, from one fit by PSIS (Vehtari et al., 2024): the
    draws reweighted (Notes), the largest weights smoothed by a generalized Pareto fit.

    Parameters
    ----------
    data : fitted estimator, Pipeline, ArviZ export or array-like
        A fitted SG-MCMC estimator (or a pipeline ending with one) with the ``X``
        and ``y`` it was fitted on; an ``InferenceData`` / ``DataTree`` with a
        ``log_likelihood`` group (``estimator.to_inference_data(X, y)``); or the
        log-likelihood, of shape ``(n_chains, n_draws, n_obs)`` or ``(n_draws, n_obs)``.
    X : {array-like, sparse matrix} of shape (n_obs, n_features) or None
        With an estimator: the observations (the training data).
    y : array-like of shape (n_obs,) or None
        With an estimator: their targets.
    r_eff : "auto", float or array-like of shape (n_obs,), default="auto"
        Relative efficiency of the draws (ESS / n_draws), which sets the Pareto
        tail length.  ``"auto"``: the ESS of ``p(y_i | theta)`` over the chains,
        as the ``loo`` package's ``relative_eff`` (1 for a 2-D array).
    var_name : str or None, default=None
        The variable of the ``log_likelihood`` group (needed when it holds several).
    exact_tol : float, default=0.01
        Error budget of the exact case, in nats: the observations of least spread
        ``max_s - min_s log p(y_i | theta_s)``, as many as keep the sum of spreads within
        it, get uniform weights, ``k = -inf`` and ``elpd_loo_i = lpd_i`` (the full
        predictive; ``az.loo``: NaN); ``0``: only constant ratios.  See :doc:`/diagnostics`.
    reloo : bool, default=False
        With an estimator: compute ``elpd_loo_i`` of every observation with k-hat
        above the threshold exactly, by refitting a clone without it (one fit each).
    warn : bool, default=True
        Issue a :class:`LOOWarning` when some k-hat (after ``reloo``) is too large.

    Returns
    -------
    result : LOOResult
        ``elpd_loo``, ``se``, ``p_loo``, ``lpd``, ``looic``, ``elpd_loo_i``, ``pareto_k``.

    Warns
    -----
    LOOWarning
        When k-hat exceeds ``min(1 - 1/log10(S), 0.7)`` for some observations:
        their importance-sampling estimate is unreliable (usually too optimistic).

    Notes
    -----
    The ratios are ``1 / p(y_i | theta_s)^(1/T)`` for a fit at ``temperature=T`` (1 for
    an export or an array); they assume that each row enters the likelihood once (with
    ``sample_weight`` or ``class_weight`` its leave-one-out posterior differs).

    References
    ----------
    - Vehtari, Gelman, Gabry (2017). Practical Bayesian model evaluation using LOO-CV and WAIC.
    - Vehtari, Simpson, Gelman, Yao, Gabry (2024). Pareto smoothed importance sampling. JMLR.
    - Zhang, Stephens (2009). Estimation of the generalized Pareto distribution. Technometrics.

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.preprocessing import scale
    >>> from skbayes_sg import SGMCMCLogisticRegression
    >>> from skbayes_sg.diagnostics import loo
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> X = scale(X)
    >>> clf = SGMCMCLogisticRegression(random_state=0).fit(X, y)
    >>> res = loo(clf, X, y)                                # doctest: +SKIP
    >>> res.elpd_loo, res.se                                # doctest: +SKIP
    """
    flat, temperature, estimator, r_eff = _loo_inputs(data, X, y, var_name, r_eff, reloo)
    elpd_i, lpd_i, mcse_i, k = _psis_loo_pointwise(flat, temperature, r_eff, exact_tol)
    refitted = []
    if reloo:
        elpd_i, mcse_i, refitted = _reloo(estimator, X, y, elpd_i, mcse_i, k, len(flat))
    result = LOOResult(elpd_i, lpd_i, k, len(flat), r_eff, refitted, mcse_i)
    if warn:
        _warn_if_unreliable(result, estimator)
    return result


def _warn_if_unreliable(result, estimator):
    """The LOOWarning of :func:`loo` when some k-hat is too high."""
    if len(result.bad_k):
        warnings.warn(_unreliable_message(result, estimator), LOOWarning,
                      stacklevel=user_stacklevel())


def _loo_inputs(data, X, y, var_name, r_eff, reloo):
    """``(log_lik (n_chains * n_draws, n_obs), temperature, estimator or None,
    r_eff (n_obs,))`` of :func:`loo`'s arguments, validated."""
    ll, temperature, estimator = _log_likelihood_of(data, X, y, var_name)
    if reloo and estimator is None:
        raise ValueError("reloo=True refits the estimator: pass the fitted estimator with "
                         "X and y, not an export or an array.")
    chains, draws, n = ll.shape
    if not np.all(np.isfinite(ll)):
        raise ValueError("the log likelihood holds non-finite values (a draw gives an "
                         "observation zero probability); PSIS-LOO needs finite ones.")
    if isinstance(r_eff, str):
        if r_eff != "auto":
            raise ValueError(f"r_eff must be 'auto', a positive number or an array; got "
                             f"{r_eff!r}.")
        r_eff = _relative_eff(ll) if chains > 1 or draws >= 4 else np.ones(n)
    r_eff = np.broadcast_to(np.asarray(r_eff, dtype=np.float64), (n,)).copy()
    return ll.reshape(chains * draws, n), temperature, estimator, r_eff


def _psis_loo_pointwise(flat, temperature, r_eff, exact_tol):
    """``(elpd_loo_i, lpd_i, mcse_i, pareto_k)``, each of shape (n_obs,), of
    the log-likelihood ``flat`` (n_draws, n_obs) by PSIS."""
    S = flat.shape[0]
    lw, k = psislw(-flat / temperature, r_eff, exact_tol=exact_tol)
    lw = np.atleast_2d(lw.T).T
    k = np.atleast_1d(k)
    elpd_i = logsumexp(lw + flat, axis=0)      # the exact case: lpd_i (uniform weights)
    lpd_i = logsumexp(flat, axis=0) - math.log(S)
    # delta method: var(p_hat) ~ sum_s w_s^2 (p_s - p_hat)^2 / r_eff
    rel = np.exp(flat - elpd_i) - 1.0                  # p_s / p_hat - 1
    mcse_i = np.sqrt(np.sum(np.exp(2.0 * lw) * rel ** 2, axis=0) / r_eff)
    mcse_i[np.isneginf(k)] = 0.0
    return elpd_i, lpd_i, mcse_i, k


def _reloo(estimator, X, y, elpd_i, mcse_i, k, n_draws):
    """``(elpd_loo_i, mcse_i, refitted)``: the observations with k-hat above
    the threshold (``refitted``) recomputed by refitting without each."""
    bad = np.flatnonzero(k > k_threshold(n_draws))
    elpd_i = elpd_i.copy()
    for i in bad:
        elpd_i[i], mcse_i[i] = _refit_elpd(estimator, X, y, int(i))
    return elpd_i, mcse_i, bad


def _unreliable_message(result, estimator):
    """The text of :func:`loo`'s :class:`LOOWarning` on ``result.bad_k``."""
    bad = result.bad_k
    shown = ", ".join(str(i) for i in bad[:10]) + (", ..." if len(bad) > 10 else "")
    fix = ("pass reloo=True to compute them by refitting without each (one fit per "
           "observation), " if estimator is not None else
           "call loo(estimator, X, y, reloo=True) to refit without each of them, ")
    return (f"PSIS-LOO is unreliable for {len(bad)} of {result.n_obs} observations (Pareto "
            f"k-hat > {result.k_threshold:.2f}: rows {shown}); their elpd_loo_i is likely too "
            f"high. {fix[0].upper() + fix[1:]}or use K-fold cross-validation, or a model that "
            "is less sensitive to single observations (a stronger prior: larger alpha).")


def _refit_elpd(estimator, X, y, i):
    """``log p(y_i | y_-i)`` by refitting a clone without row ``i``."""
    from sklearn.base import clone
    from sklearn.utils import _safe_indexing

    keep = np.r_[0:i, i + 1:_n_rows(X)]
    X_i, y_i = _safe_indexing(X, [i]), _safe_indexing(np.asarray(y), [i])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # the refits' own convergence notes
        refit = clone(estimator).fit(_safe_indexing(X, keep), _safe_indexing(np.asarray(y),
                                                                               keep))
    ll, _, _ = _log_likelihood_of(refit, X_i, y_i, None)
    ll = ll.reshape(-1)
    elpd = float(logsumexp(ll) - math.log(ll.shape[0]))
    rel = np.exp(ll - elpd)                   # p_s / mean p, mean 1
    return elpd, float(np.std(rel) / math.sqrt(ll.shape[0]))


def _n_rows(X):
    return X.shape[0] if hasattr(X, "shape") else len(X)


def _stacking_weights(elpd_i):
    """Stacking of predictive distributions (Yao et al., 2018): the weights
    on the simplex that maximise ``sum_i log sum_k w_k exp(elpd_ik)``."""
    from scipy.optimize import minimize

    n, K = elpd_i.shape
    if K == 1:
        return np.ones(1)
    dens = np.exp(elpd_i - elpd_i.max(axis=1, keepdims=True))

    def objective(beta):
        b = np.append(beta, 0.0)
        w = np.exp(b - logsumexp(b))
        mix = dens @ w
        grad_w = -(dens / mix[:, None]).sum(axis=0)
        grad_b = w * (grad_w - grad_w @ w)
        return -np.log(mix).sum(), grad_b[:-1]

    res = minimize(objective, np.zeros(K - 1), jac=True, method="L-BFGS-B")
    b = np.append(res.x, 0.0)
    return np.exp(b - logsumexp(b))


def compare(models, X=None, y=None, **loo_kwargs):
    """Compare models by PSIS-LOO: elpd differences, their standard errors
    and stacking weights (what ``az.compare`` reports).

    Parameters
    ----------
    models : dict of {str: estimator, export, array or LOOResult}
        The models by name, each anything :func:`loo` reads (estimators with
        the shared ``X`` and ``y``) or a :class:`LOOResult`.  Every model
        must predict the same observations.
    X, y : array-like or None, default=None
        The observations, for the estimators among ``models``.
    **loo_kwargs
        Passed to :func:`loo` (``r_eff``, ``exact_tol``, ``reloo``, ...).

    Returns
    -------
    table : pandas.DataFrame or SummaryTable
        One row per model, best first, with columns ``rank``, ``elpd_loo``,
        ``se``, ``p_loo``, ``elpd_diff`` (to the best model, >= 0), ``dse``
        (the standard error of that difference, from the pointwise
        differences: ``sqrt(n var(elpd_i^best - elpd_i^model))``),
        ``weight`` (stacking weights, summing to 1) and ``n_bad_k``.
    """
    if not isinstance(models, dict) or len(models) < 1:
        raise ValueError("models must be a dict {name: fitted estimator, export or "
                         "LOOResult} with at least one model.")
    results = {}
    for name, model in models.items():
        if isinstance(model, LOOResult):
            results[name] = model
        elif hasattr(model, "coef_samples_") or hasattr(model, "steps"):
            results[name] = loo(model, X, y, **loo_kwargs)
        else:
            results[name] = loo(model, **loo_kwargs)
    sizes = {name: r.n_obs for name, r in results.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"the models predict different numbers of observations {sizes}; "
                         "compare them on the same data.")
    names = sorted(results, key=lambda m: -results[m].elpd_loo)
    best = results[names[0]]
    n = best.n_obs
    pointwise = np.column_stack([results[m].elpd_loo_i for m in names])
    weights = _stacking_weights(pointwise)
    columns = ["rank", "elpd_loo", "se", "p_loo", "elpd_diff", "dse", "weight", "n_bad_k"]
    rows = []
    for rank, m in enumerate(names):
        r = results[m]
        diff = best.elpd_loo_i - r.elpd_loo_i
        dse = float(math.sqrt(n * np.var(diff, ddof=1))) if n > 1 and rank else 0.0
        rows.append([rank, r.elpd_loo, r.se, r.p_loo, best.elpd_loo - r.elpd_loo, dse,
                     weights[rank], len(r.bad_k)])
    values = np.array(rows, dtype=np.float64)
    try:
        import pandas as pd
    except ImportError:
        from ._convergence import SummaryTable
        return SummaryTable(names, columns, values)
    table = pd.DataFrame(values, index=names, columns=columns)
    return table.astype({"rank": int, "n_bad_k": int})
