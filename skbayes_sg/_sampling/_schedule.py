"""What the chains do after set-up: warm-up windows, then sampling until the
draws are worth enough.

Warm-up (``n_warmup="auto"``), in the spirit of Stan's windowed adaptation
but starting from the Laplace metric instead of the identity:

1. a first window that forgets the overdispersed start (and, for a
   Metropolis-adjusted dynamics, adapts the step by dual averaging toward a
   target acceptance rate);
2. a metric window whose draws, pooled over chains and whitened by the
   current metric, are checked against the identity: eigen-directions whose
   variance lies outside the range sampling noise explains (the
   Marchenko-Pastur band for that many effective draws) are corrected in
   the metric, the others are left alone (a noisy full covariance would
   undo the Laplace metric's conditioning);
3. after a metric change, a short window to settle (and re-adapt the step).

Sampling (``n_samples="auto"``) runs in rounds until the smallest bulk
effective sample size over parameters reaches ``target_ess`` and the
largest split R-hat is at most 1.01, or the budget (``max_passes`` data
passes, ``max_time`` seconds) runs out.  Each round is sized from the ESS
rate measured so far.
"""
import time
from dataclasses import dataclass, field

import numpy as np
from scipy.special import ndtri

from ..diagnostics._convergence import bulk_ess_and_rhat
from ._draws import DrawStore
from ._kernel_rules import on_lazy_grid
from ._metric import Metric
from .samplers import BY_NAME

RHAT_TARGET = 1.01
# largest error of a posterior mean, in posterior sds, that the automatic ESS
# target allows on every coordinate with 95% probability (Bonferroni)
MEAN_ERROR_SD = 0.1
# warm-up windows (iterations of a Metropolis dynamics; multiples of the
# predicted autocorrelation time otherwise)
MH_FIRST_WINDOW = 50
MH_LAST_WINDOW = 30
#: dual averaging's target acceptance, each Metropolis-adjustable dynamics' own
MH_TARGET_ACCEPT = {name: module.METROPOLIS.target_accept
                    for name, module in BY_NAME.items() if module.METROPOLIS is not None}
# effective draws per parameter the metric window aims at (q = dim / N_eff <= 0.5)
METRIC_WINDOW_DRAWS_PER_PARAM = 2.0
# metric windows at most (each one after a correction twice as long)
MAX_METRIC_WINDOWS = 3
# rounds of sampling when no budget bounds them
MAX_ROUNDS = 20
# Above SCREEN_MIN_PARAMS parameters a round's check looks first at the
# SCREEN_COORDINATES slowest (lowest ESS) and least mixed (highest R-hat)
# coordinates of the last full check (_round_check)
SCREEN_MIN_PARAMS = 4096
SCREEN_COORDINATES = 512
# the first sampling round's share of the predicted length
FIRST_ROUND = 0.6
# a round adds at most this many times the draws already made: the ESS of
# short chains, still close to their start, under-predicts the rate (the
# text logistic regression: 0.68 effective draws an iteration over the
# first 501 iterations, 0.84 over 3,343, so one round sized from the first
# overshot its target by 35%)
MAX_ROUND_GROWTH = 2.0
# and at least this many times them (a round costs its diagnostics; a fit 2%
# short of its target used to add 25%)
MIN_ROUND = 0.1
# largest factor by which one warm-up window changes a direction's variance
MAX_CORRECTION = 4.0
# draws per chain a metric window keeps at least, however many parameters
MIN_WINDOW_DRAWS = 100
# bytes of a metric window's draws (float64, all chains), beyond that minimum
WINDOW_BYTES = 256 << 20
# draws per chain kept even when the warm-up has spent the budget
MIN_DRAWS = 10
# halvings of an automatic step after a divergence
MAX_RETUNES = 4
# a warm-up whose last step-adaptation window accepted less than this share of
# the target acceptance adapts again from a quarter of the step, at most
# MAX_READAPT times (dual averaging can end on a step no proposal passes)
MH_MIN_ACCEPT_SHARE = 0.5
MAX_READAPT = 3
# steps a budget-cut warm-up window keeps at least
MIN_WARMUP_WINDOW = 10


def auto_target_ess(dim):
    """Bulk ESS with which the Monte Carlo error of every one of ``dim``
    posterior means stays under ``MEAN_ERROR_SD`` sds with 95% probability:
    ``(z_{1 - 0.025/dim} / 0.1)^2`` (about 860 for 15 parameters, 1,260 for
    124, 2,080 for 10,000)."""
    z = float(ndtri(1.0 - 0.025 / max(int(dim), 1)))
    return int(np.ceil((z / MEAN_ERROR_SD) ** 2))


@dataclass
class Plan:
    """How long to warm up and sample (see the module docstring)."""

    n_warmup: object              # int or "auto"
    n_samples: object             # int or "auto"
    thin: int
    target_ess: float
    max_passes: object            # float or None
    max_time: object              # float or None
    iat: float                    # predicted steps per effective draw
    n_rows: int
    dim: int
    adapt_step: bool = False      # Metropolis dynamics with an automatic step
    target_accept: float = 0.8
    max_step: float = np.inf
    adapt_metric: bool = False
    momentum_scale: float = 1.0   # stationary sd of the momenta (redrawn after a metric change)
    setup_evals: int = 0          # gradient evaluations spent before the chains
    retune: object = None         # () -> a smaller step (None: cannot), after a divergence
    # (draws, pool, expected rows) -> the batch chosen again from the noise
    # measured on the first warm-up window's draws (_noise_measure.BatchRemeasure)
    remeasure: object = None
    draws_dtype: object = np.float64  # storage type of the kept draws
    max_draws_bytes: int = 1 << 62    # memory budget of the kept draws
    # the automatic budget's seconds (max_passes="auto", max_time=None): its
    # flops at the rate they assume; a limit like max_time, past which the
    # extension below may still run (None: no such limit)
    auto_seconds: object = None
    t_start: float = field(default_factory=time.perf_counter)
    # perf_counter() until which sampling may go past max_passes, round by
    # round, while the measured pace says the round ends before it and within
    # extend_passes data passes (None: not)
    extend_until: float = None
    extend_passes: float = None


@dataclass
class Outcome:
    draws: np.ndarray             # (n_chains, n_kept, dim) parameters
    n_warmup: int                 # warm-up steps per chain
    ess: np.ndarray               # bulk ESS per parameter (nan if too few draws)
    rhat: np.ndarray              # split R-hat per parameter
    budget_exhausted: bool
    metric_changed: bool
    accept_rate: float
    step_sizes: np.ndarray
    batch_sizes: object = None
    log: list = field(default_factory=list)
    moments: tuple = None         # (mean, variance) per parameter over every draw made
    distinct: object = None       # per chain, the distinct states among its kept draws
    sampling_evals: int = 0       # gradient evaluations of the sampling rounds (all chains)
    sampling_seconds: float = 0.0
    storage_stride: int = 1       # the store kept every storage_stride-th draw (memory budget)
    ess_tail: object = None       # tail ESS per parameter of the kept draws


class ChainsDiverged(Exception):
    """A chain diverged; ``results`` holds the pool's last results."""

    def __init__(self, results, phase):
        super().__init__(phase)
        self.results = results
        self.phase = phase


def sampling_diagnostics(draws, n_jobs=None, out=None):
    """Bulk ESS and split R-hat per parameter of the kept draws
    (:func:`~skbayes_sg.diagnostics._convergence.bulk_ess_and_rhat`, ``n_jobs``
    threads over blocks of parameters: the fit's), and each chain's distinct
    states (:func:`distinct_states`): ``(ess, rhat, distinct)``.  With an
    :class:`Outcome` ``out``, its ``ess_tail`` gets the tail ESS too (one
    sort of the draws serves both: the post-fit warning reads it).

    A chain that stays put (:func:`stuck_chains`: a Metropolis chain
    rejecting nearly every proposal) counts its distinct states, not its
    draws: no ESS exceeds the other chains' draws plus those states.
    Repeated draws are worth one, however their ranks and autocorrelations
    look (4 chains stuck at 4 points were reported as 10 effective draws).
    Chains that move are left to the estimator (its autocorrelations
    account for the rejections, and an antithetic chain may exceed its
    draws)."""
    if out is not None:
        ess, rhat, out.ess_tail = bulk_ess_and_rhat(draws, n_jobs, tail=True)
    else:
        ess, rhat = bulk_ess_and_rhat(draws, n_jobs)
    distinct = distinct_states(draws)
    return capped_at_distinct(ess, distinct, draws.shape[1]), rhat, distinct


def capped_at_distinct(ess, distinct, n_draws):
    """``ess`` capped where chains stayed put (:func:`stuck_chains`): at most
    the other chains' ``n_draws`` plus the stuck ones' ``distinct`` states."""
    stuck = stuck_chains(distinct, n_draws)
    if stuck.any():
        ess = np.minimum(ess, float(np.where(stuck, distinct, n_draws).sum()))
    return ess


def stuck_chains(distinct, n_draws):
    """Whether each chain moved at fewer than ``MIN_MOVED_SHARE`` of its
    ``n_draws`` kept draws (none can tell with fewer than 2)."""
    distinct = np.asarray(distinct)
    if n_draws < 2:
        return np.zeros(distinct.shape, dtype=bool)
    return distinct - 1 < MIN_MOVED_SHARE * (n_draws - 1)


#: a chain whose kept draws differ from the one before in fewer than this
#: share of draws did not move: the fit failed (Metropolis-adjusted HMC at
#: its target accepts ~75%, and thinning only raises the share)
MIN_MOVED_SHARE = 0.05
#: draws compared at a time by :func:`distinct_states` (bounded scratch)
DISTINCT_BLOCK = 1 << 22


def distinct_states(draws):
    """Per chain, the number of kept draws that differ from the draw before
    them, plus one (the first): ``(n_chains,)`` ints.  A chain that moves
    at every kept draw has as many states as draws; one that never moved
    has one."""
    draws = np.asarray(draws)
    m, N, dim = draws.shape
    if N == 0:
        return np.zeros(m, dtype=np.int64)
    moved = np.zeros((m, max(N - 1, 0)), dtype=bool)
    rows = max(1, DISTINCT_BLOCK // max(m * dim, 1))
    for lo in range(1, N, rows):
        hi = min(lo + rows, N)
        moved[:, lo - 1:hi - 1] = np.any(draws[:, lo:hi] != draws[:, lo - 1:hi - 1], axis=2)
    return 1 + moved.sum(axis=1)


def _passes(pool, plan):
    return (plan.setup_evals + pool.n_grad_evals) / max(plan.n_rows, 1)


def _check(results, phase):
    if any(r.diverged for r in results):
        raise ChainsDiverged(results, phase)
    return results


def run(pool, plan, continuing=False):
    """Warm up (unless continuing with ``n_warmup`` 0) and sample; see the
    module docstring.  Raises :class:`ChainsDiverged`.

    An automatic step the chains cannot bear (a chain blew up: the
    non-Gaussian part of the posterior is stiffer there than the error model
    assumed) is halved, ``plan.retune`` adjusting what depends on it, and the
    schedule starts again from where the chains are, at most
    ``MAX_RETUNES`` times; a step the user set is never changed."""
    out = Outcome(None, 0, None, None, False, False, np.nan, np.array([]))
    for attempt in range(MAX_RETUNES + 1):
        try:
            if not continuing or plan.n_warmup != "auto":
                out.n_warmup += _warm_up(pool, plan, out, continuing)
            store, sizes = _sample(pool, plan, out)
            break
        except ChainsDiverged as exc:
            if attempt == MAX_RETUNES or plan.retune is None:
                raise
            step = plan.retune()
            if step is None:
                raise
            out.log.append(("diverged: step halved", exc.phase, step))
            pool.set_step(step, plan.momentum_scale)
    pool.finish_progress(out.ess, out.rhat, plan.target_ess)
    out.draws = store.draws()
    out.moments = store.moments()
    out.storage_stride = store.stride
    out.batch_sizes = sizes
    out.accept_rate = float(np.mean([r.accept_rate for r in pool.results]))
    out.step_sizes = np.array([r.step_size for r in pool.results])
    return out


# ------------------------------------------------------------------ warm-up
def _windows(plan, n_chains):
    """Lengths (first, metric, last) of the warm-up windows, per chain."""
    if plan.n_warmup != "auto":
        n = int(plan.n_warmup)
        first, last = int(0.15 * n), int(0.1 * n)
        window = n - first - last
        # a metric window only when it holds enough effective draws to
        # estimate a covariance (a noisy one would undo the Laplace metric)
        enough = window * n_chains / max(plan.iat, 1.0) >= (
            METRIC_WINDOW_DRAWS_PER_PARAM * plan.dim)
        if plan.adapt_metric and n >= (150 if plan.adapt_step else 200) and enough:
            return first, window, last
        return n, 0, 0
    iat = max(plan.iat, 1.0)
    per_param = METRIC_WINDOW_DRAWS_PER_PARAM * plan.dim / max(n_chains, 1)
    if plan.adapt_step:
        if not plan.adapt_metric:
            # no metric window between them: one window of both lengths
            # (dual averaging's average settles on the target with them all)
            return MH_FIRST_WINDOW + MH_LAST_WINDOW, 0, 0
        return MH_FIRST_WINDOW, max(50, int(np.ceil(per_param * iat))), MH_LAST_WINDOW
    first = int(np.ceil(10 * iat))
    if not plan.adapt_metric:
        return max(first, 100), 0, 0
    return first, max(100, int(np.ceil(per_param * iat))), int(np.ceil(5 * iat))


def _warm_up(pool, plan, out, continuing):
    first, metric_window, last = _windows(plan, pool.n_chains)
    total = first + metric_window + last
    if total == 0:
        return 0
    pool.plan_phase("warm-up", total)
    adapt_start = ({"start": plan.target_accept, "max_step": plan.max_step}
                   if plan.adapt_step else None)
    # the first window is cut to the budget too (a trajectory at a step far
    # too small costs up to MAX_LEAPFROG gradients: at 10^4 parameters it
    # spent the whole budget): its first steps measure a step's cost
    first = _first_window(pool, plan, first, adapt_start,
                          finish=metric_window == 0 and plan.adapt_step)
    if metric_window == 0:
        out.log.append(("warm-up", first))
        return first + _readapt_step(pool, plan, out)
    # metric windows, as Stan's: each that changes the metric is followed by
    # one twice as long, measured in the corrected metric (a short window sees
    # only the largest mismatches, and its eigenvectors are noisy); the first
    # that finds nothing to correct ends the adaptation
    window, windows, changed = metric_window, [], False
    restart = None
    for _ in range(MAX_METRIC_WINDOWS):
        window = _warmup_cap(pool, plan, window)
        if window < 10:
            break
        thin = _window_thin(pool, plan, window)
        # the window's draws go into one array (no per-chain copies to stack)
        store = DrawStore(pool.n_chains, plan.dim, np.float64, plan.max_draws_bytes,
                          expected=window // thin)
        _check(pool.advance(window, thin=thin, keep=True, adapt=restart,
                            phase="warm-up (metric)", store=store), "warm-up")
        windows.append(window)
        if plan.remeasure is not None:
            _remeasure_noise(pool, plan, out, store.draws())
        new_metric = adapt_metric(store.draws(), pool.spec.metric, n_jobs=pool.workers)
        del store   # freed before the next window's array exists
        if new_metric is None:
            break
        if pool.spec.lazy:
            new_metric = on_lazy_grid(new_metric)
        pool.rebase(new_metric, plan.momentum_scale)
        changed = out.metric_changed = True
        # the step suited to the old metric is a fine start for the new one
        restart = adapt_start
        window *= 2
    last = _warmup_cap(pool, plan, last) if last else 0
    if plan.adapt_step:
        last = max(last, 1)  # the step adaptation must end before sampling
    total = first + sum(windows) + last
    out.log.append(("warm-up", first, sum(windows), last, changed))
    if last:
        adapt = None
        if plan.adapt_step:
            # dual averaging starts again in a changed metric; otherwise (or
            # in a window the budget cut short, where a restart's first
            # iterates, up to 10x the step, would be the final step) it goes on
            adapt = ({"start": plan.target_accept, "max_step": plan.max_step, "finish": True}
                     if changed and last >= MIN_WARMUP_WINDOW else {"finish": True})
        _check(pool.advance(last, keep=False, adapt=adapt, phase="warm-up"), "warm-up")
    return total + _readapt_step(pool, plan, out)


def _remeasure_noise(pool, plan, out, draws):
    """Once a fit: the batch chosen again from the gradient noise measured
    on a warm-up window's draws (:mod:`._noise_measure`); its row
    evaluations count with the set-up's."""
    remeasure, plan.remeasure = plan.remeasure, None
    # the sampling's predicted cost: target ESS x steps per effective draw x batch
    expected = plan.target_ess * max(plan.iat, 1.0) * pool.spec.subsampling_config["batch_size"]
    batch = remeasure(draws, pool, expected)
    plan.setup_evals += remeasure.n_grad_evals
    out.log.append(("noise measured", remeasure.noise_model, remeasure.noise_measured, batch))


def _first_window(pool, plan, first, adapt_start, finish=False):
    """Run the first warm-up window (dual averaging started when
    ``adapt_start``, and ended after it when ``finish``); returns its
    length.  The chains run its first ``MIN_WARMUP_WINDOW`` steps, then
    the rest cut to half of what the budget has left at the cost those steps
    measured (an eager chain's draws do not depend on how its steps are
    split; a lazy chain's kernel is seeded per call, so its draws depend on
    the split, which is the same for every fit the budget does not cut; run
    whole, one was 2 hours long at a 500-second budget)."""
    end = {"finish": True} if finish else {}
    head = min(first, MIN_WARMUP_WINDOW)
    rest = 0
    if first > head:
        _check(pool.advance(head, keep=False, adapt=adapt_start, phase="warm-up"), "warm-up")
        rest = _warmup_cap(pool, plan, first - head)
        if rest:
            _check(pool.advance(rest, keep=False, adapt=end or None, phase="warm-up"),
                   "warm-up")
        elif end:   # the budget is spent: end the adaptation where it is
            _check(pool.advance(1, keep=False, adapt=end, phase="warm-up"), "warm-up")
            rest = 1
    else:
        _check(pool.advance(head, keep=False, adapt=dict(adapt_start or {}, **end) or None,
                            phase="warm-up"), "warm-up")
    return head + rest


def _readapt_step(pool, plan, out):
    """Steps spent adapting the step again when the last adaptation window
    of a Metropolis dynamics accepted less than ``MH_MIN_ACCEPT_SHARE`` of
    its target: from a quarter of the smallest chain's step, one first
    window at a time (within the budget), at most ``MAX_READAPT`` times.
    A warm-up must not hand the sampling rounds a step at which nothing is
    accepted (the chains would not move)."""
    if not plan.adapt_step:
        return 0
    spent = 0
    for _ in range(MAX_READAPT):
        accept = float(np.nanmean([r.accept_rate for r in pool.results]))
        if not accept < MH_MIN_ACCEPT_SHARE * plan.target_accept:   # NaN: none proposed
            break
        step = 0.25 * min(r.step_size for r in pool.results)
        n = _warmup_cap(pool, plan, MH_FIRST_WINDOW)
        if n < MIN_WARMUP_WINDOW:
            break
        pool.set_step(step, plan.momentum_scale)
        adapt = {"start": plan.target_accept, "max_step": plan.max_step, "finish": True}
        _check(pool.advance(n, keep=False, adapt=adapt, phase="warm-up"), "warm-up")
        out.log.append(("warm-up: step adapted again", accept, step, n))
        spent += n
    return spent


def _window_thin(pool, plan, window):
    """Thinning of a metric window's draws so that they stay within
    ``WINDOW_BYTES`` (and the draws' budget): a long window on many
    parameters (small steps at large dimension) would otherwise keep every
    step, and :func:`adapt_metric` makes a few copies of what it is given.
    At least ``MIN_WINDOW_DRAWS`` per chain are kept, whatever the size."""
    row_bytes = pool.n_chains * plan.dim * 8
    budget = min(plan.max_draws_bytes, WINDOW_BYTES)
    max_rows = max(MIN_WINDOW_DRAWS, int(budget // max(row_bytes, 1)))
    return max(1, -(-int(window) // max_rows))


def _spiked(lam, q):
    """Population eigenvalue behind a sample eigenvalue ``lam`` outside the
    Marchenko-Pastur bulk (ratio ``q``): the root of
    ``lam = l (1 + q / (l - 1))`` on the same side of 1."""
    b = lam + 1.0 - q
    disc = np.sqrt(np.maximum(b * b - 4.0 * lam, 0.0))
    return np.where(lam > 1.0, 0.5 * (b + disc), np.maximum(0.5 * (b - disc), 1e-3))


def adapt_metric(draws, metric_config, band=1.3, n_jobs=None):
    """Correct the metric where the warm-up draws disagree with it.

    Parameters
    ----------
    draws : ndarray of shape (n_chains, n_draws, dim)
        Parameters.
    metric_config : dict
        The current metric (:meth:`Metric.get_config`).
    band : float
        Factor widening the Marchenko-Pastur band (finite samples, and the
        draws' autocorrelation, make it leak).
    n_jobs : int or None
        Threads for the effective draws (the fit's ``n_jobs``; the result
        does not depend on it).

    Returns
    -------
    dict or None
        The corrected metric's config, or None when every direction's
        variance is within sampling noise of 1.
    """
    metric = Metric.from_config(metric_config)
    if metric.kind == "identity":
        return None
    if metric.kind == "diagonal":
        return _adapt_diagonal(draws, metric_config, band, n_jobs)
    m, N, dim = draws.shape
    Z = metric.py_to_z(draws.reshape(-1, dim)).reshape(m, N, dim)
    n_eff = _squares_effective_draws(Z, n_jobs)
    if n_eff < dim:
        # fewer effective draws than parameters: the sample covariance says
        # nothing reliable about most directions
        return None
    Zc = Z.reshape(-1, dim)
    q = dim / n_eff
    C = np.cov(Zc, rowvar=False).reshape(dim, dim)
    lam, U = np.linalg.eigh(0.5 * (C + C.T))
    hi = (1.0 + np.sqrt(q)) ** 2 * band
    lo = (1.0 - np.sqrt(q)) ** 2 / band if q < 1 else 0.0
    sig = (lam > hi) | (lam < lo)
    if not sig.any():
        return None
    # the sample eigenvectors are noisy too: move each direction's variance
    # only by the squared cosine c^2 between sample and population
    # eigenvector (the optimal shrinkage of a spiked covariance), and one
    # warm-up window by at most MAX_CORRECTION
    ell = _spiked(lam[sig], q)
    d = ell - 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        cos2 = np.clip((1.0 - q / (d * d)) / (1.0 + q / d), 0.0, 1.0)
    ell = np.clip(1.0 + cos2 * d, 1.0 / MAX_CORRECTION, MAX_CORRECTION)
    Us = U[:, sig]
    Ct = np.eye(dim) + (Us * (ell - 1.0)) @ Us.T
    F = np.asarray(metric_config["factor"])
    M = F @ Ct @ F.T
    cfg = dict(metric_config)
    cfg["factor"] = upper_cholesky(0.5 * (M + M.T))
    return cfg


#: coordinates a diagonal metric's correction reads at a time (a window's
#: whitened draws and their squares never exist whole: at 10^5 parameters
#: they would be GBs beside the window itself)
ADAPT_BLOCK = 2048
#: coordinates whose effective draws set a diagonal correction's band
ESS_COORDINATES = 512


def _squares_effective_draws(Z, n_jobs=None):
    """The median effective draws of z^2 over the coordinates of whitened
    draws Z (n_chains, n_draws, k), at most their number: a (co)variance is
    a mean of squares, so these count for it (an antithetic sampler has more
    effective draws of z than of z^2)."""
    m, N = Z.shape[:2]
    ess, _ = bulk_ess_and_rhat((Z - Z.mean(axis=(0, 1))) ** 2, n_jobs)
    n_eff = float(np.nanmedian(ess)) if np.any(np.isfinite(ess)) else m * N
    return min(n_eff, m * N)


def _adapt_diagonal(draws, metric_config, band, n_jobs=None):
    """:func:`adapt_metric` for a diagonal metric: per-coordinate variances
    of the whitened draws (the diagonal of their sample covariance, no
    dim x dim matrix), read in blocks of coordinates."""
    dim = draws.shape[2]
    center = np.asarray(metric_config["center"], dtype=np.float64)
    D = np.array(metric_config["factor"], dtype=np.float64)
    var = np.empty(dim)
    for lo in range(0, dim, ADAPT_BLOCK):
        hi = min(lo + ADAPT_BLOCK, dim)
        Z = (np.asarray(draws[:, :, lo:hi], dtype=np.float64) - center[lo:hi]) / D[lo:hi]
        var[lo:hi] = Z.reshape(-1, hi - lo).var(axis=0, ddof=1)
    # the effective draws over ESS_COORDINATES evenly spaced coordinates (the
    # ranks behind the ESS cost O(draws log draws) a coordinate: seconds at 10^4)
    cols = np.unique(np.linspace(0, dim - 1, min(dim, ESS_COORDINATES)).astype(np.intp))
    n_eff = _squares_effective_draws(
        (np.asarray(draws[:, :, cols], dtype=np.float64) - center[cols]) / D[cols], n_jobs)
    # each variance has relative sd sqrt(2 / n_eff), whatever dim (unlike a
    # dense metric's eigenvalues, no n_eff > dim is needed); the band is 3 sds,
    # wider where many coordinates would otherwise cross it by chance (a 2.5%
    # chance that any of them does)
    half = max(3.0, ndtri(1.0 - 0.0125 / dim)) * np.sqrt(2.0 / n_eff) * band
    off = (var > 1.0 + half) | (var < max(1.0 - half, 0.0))
    if not off.any():
        return None
    cfg = dict(metric_config)
    D[off] *= np.sqrt(np.clip(var[off], 1.0 / MAX_CORRECTION, MAX_CORRECTION))
    cfg["factor"] = D
    return cfg


def upper_cholesky(M):
    """Upper-triangular ``L`` with ``L L^T = M`` (Cholesky of the reversed matrix)."""
    G = np.linalg.cholesky(M[::-1, ::-1])
    return np.ascontiguousarray(G[::-1, ::-1])


# ----------------------------------------------------------------- sampling
def _sample(pool, plan, out):
    """Sampling rounds into one :class:`~._draws.DrawStore`; returns it and
    the adaptive estimator's batch sizes (or None)."""
    thin = max(int(plan.thin), 1)
    fixed = plan.n_samples != "auto"
    store = DrawStore(pool.n_chains, plan.dim, plan.draws_dtype, plan.max_draws_bytes,
                      expected=int(plan.n_samples) if fixed else None)
    sizes = []

    def advance(n_steps):
        results = _check(pool.advance(n_steps, thin=thin, keep=True, phase="sampling",
                                      log_sizes=True, store=store), "sampling")
        if results[0].batch_sizes is not None:
            sizes.append(np.stack([r.batch_sizes for r in results]))

    def batch_sizes():
        return np.concatenate(sizes, axis=1) if sizes else None

    evals0, steps0 = pool.n_grad_evals, pool.n_steps
    t0 = time.perf_counter()

    def account():
        out.sampling_evals += pool.n_grad_evals - evals0
        out.sampling_seconds += time.perf_counter() - t0

    if fixed:
        pool.plan_phase("sampling", int(plan.n_samples) * thin)
        advance(int(plan.n_samples) * thin)
        account()
        out.ess, out.rhat, out.distinct = sampling_diagnostics(store.draws(), pool.workers, out)
        return store, batch_sizes()

    target = float(plan.target_ess)
    steps = _first_round(plan, pool.n_chains, thin)
    # the rounds' predicted total (the first aims at FIRST_ROUND of it)
    pool.plan_phase("sampling", int(np.ceil(steps / FIRST_ROUND)))
    to_target = steps       # steps predicted to reach the target (past the round's cap)
    screen = None           # the coordinates a check looks at first (_round_check)
    for round_ in range(MAX_ROUNDS):
        affordable = _affordable(pool, plan, steps, evals0, steps0, t0)
        # past the budget only when the whole way to the target ends in time
        if affordable < steps and _ends_in_time(pool, plan, max(steps, to_target),
                                                evals0, steps0, t0):
            affordable = steps
        if affordable < steps:
            out.budget_exhausted = True
        if store.seen.max() == 0:
            # the warm-up spent the budget: still keep a few draws, so that the
            # fit can say how far from its target it stopped
            affordable = max(affordable, MIN_DRAWS * thin)
        if affordable < thin:
            break
        steps = affordable
        advance(steps)
        min_ess, max_rhat, screen = _round_check(store.draws(), pool.workers, out, target,
                                                 screen)
        out.log.append(("sampling", steps, min_ess, max_rhat))
        if min_ess >= target and max_rhat <= RHAT_TARGET:
            out.budget_exhausted = False
            break
        kept = int(store.seen.min())      # draws made (the store may hold fewer)
        if out.budget_exhausted:
            # the first round's cut used the warm-up's cost a step (dual
            # averaging's small early steps make long trajectories): with the
            # sampling rounds' own cost the budget may hold more
            left = _affordable(pool, plan, 1 << 62, evals0, steps0, t0)
            if left < max(thin, 0.1 * kept * thin):
                break
            out.budget_exhausted = False
        steps, to_target = _next_round(min_ess, target, kept, thin)
        pool.plan_phase("sampling", steps)
    else:
        out.budget_exhausted = True
    if screen is not None and screen.stale:
        # the last check looked at the screened coordinates only
        out.ess, out.rhat, out.distinct = sampling_diagnostics(store.draws(), pool.workers, out)
    account()
    return store, batch_sizes()


class _Screen:
    """The coordinates a round's check looks at first: after a full check,
    the ``SCREEN_COORDINATES`` lowest ESS and highest R-hat; ``stale`` while
    the last check looked at them only."""

    def __init__(self, ess, rhat):
        k = SCREEN_COORDINATES
        low = np.argsort(np.where(np.isfinite(ess), ess, -np.inf), kind="stable")[:k]
        high = np.argsort(-np.where(np.isfinite(rhat), rhat, np.inf), kind="stable")[:k]
        self.index = np.union1d(low, high)
        self.stale = False


def _round_check(draws, workers, out, target, screen):
    """A sampling round's ``(min ESS, max R-hat, screen)``.

    Where there are more than ``SCREEN_MIN_PARAMS`` parameters, the check
    looks first at the coordinates that were the slowest or the least mixed
    at the last full check (:class:`_Screen`).  Where they already fail the
    targets, so would all of them (a minimum over more coordinates is no
    larger, a maximum no smaller, and the stuck-chain cap only lowers an
    ESS): that round's check ends there, for a fraction of its cost (a full
    check of 10^4 coordinates over 2,000 draws takes seconds).  A fit stops
    only on a full check, and its ``out`` (ESS, R-hat, distinct states, tail
    ESS) is always a full check's."""
    if screen is not None:
        ess, rhat = bulk_ess_and_rhat(draws[:, :, screen.index], workers)
        if np.any(np.isfinite(ess)) and np.any(np.isfinite(rhat)):
            min_ess, max_rhat = float(np.nanmin(ess)), float(np.nanmax(rhat))
            if min_ess < target or max_rhat > RHAT_TARGET:
                screen.stale = True
                return min_ess, max_rhat, screen
    ess, rhat, out.distinct = sampling_diagnostics(draws, workers, out)
    out.ess, out.rhat = ess, rhat
    min_ess = float(np.nanmin(ess)) if np.any(np.isfinite(ess)) else 0.0
    max_rhat = float(np.nanmax(rhat)) if np.any(np.isfinite(rhat)) else np.inf
    return min_ess, max_rhat, (_Screen(ess, rhat) if ess.shape[0] > SCREEN_MIN_PARAMS
                               else None)


def _first_round(plan, n_chains, thin):
    """The first sampling round's steps: it aims below the target (the
    predicted autocorrelation is rough; overshooting wastes more than a
    second round costs), the next ones at it, from the effective draws per
    step measured so far."""
    steps = max(100, int(np.ceil(FIRST_ROUND * float(plan.target_ess) * max(plan.iat, 1.0)
                                 / n_chains)))
    return int(np.ceil(steps / thin) * thin)


def _next_round(min_ess, target, kept, thin):
    """``(steps, steps to the target)`` of the next round, after ``kept``
    draws a chain gave ``min_ess``: the missing effective draws at the pace
    measured (10% more), within ``MIN_ROUND`` and ``MAX_ROUND_GROWTH`` times
    the draws so far; half as many again when only R-hat failed."""
    if min_ess < target:
        more = kept * (target / max(min_ess, 1.0) - 1.0) * 1.1
    else:  # enough draws but the chains still disagree
        more = 0.5 * kept
    to_target = int(np.ceil(more * thin))
    steps = int(np.ceil(max(min(more, MAX_ROUND_GROWTH * kept), MIN_ROUND * kept, 25) * thin))
    return steps, to_target


def _ends_in_time(pool, plan, steps, evals0, steps0, t0):
    """Whether a sampling round the pass budget cut may run whole, given
    ``steps``, the steps predicted to reach the target (the round itself
    may be capped shorter): the automatic budget extends to
    ``plan.extend_until`` (seconds) and ``plan.extend_passes`` (data passes,
    all chains, set-up included) when those steps, at the pace measured
    (:func:`_pace`), end within both.  So a fit goes past its budget only
    where converging is predicted within a few budgets' passes and in time;
    one that would need many more stops at its budget and says how long."""
    evals_per_step, seconds_per_step = _pace(pool, evals0, steps0, t0)
    if plan.extend_until is None or seconds_per_step is None:
        return False
    passes = (plan.setup_evals + pool.n_grad_evals + steps * evals_per_step * pool.n_chains) \
        / max(plan.n_rows, 1)
    return (time.perf_counter() + steps * seconds_per_step <= plan.extend_until
            and (plan.extend_passes is None or passes <= plan.extend_passes))


def _pace(pool, evals0, steps0, t0):
    """``(gradient evaluations per step and chain, seconds per step)``
    measured on the sampling rounds so far, else on the warm-up; None, None
    before any step."""
    if pool.n_steps > steps0:
        return ((pool.n_grad_evals - evals0) / ((pool.n_steps - steps0) * pool.n_chains),
                (time.perf_counter() - t0) / (pool.n_steps - steps0))
    if pool.n_steps > 0:
        return pool.n_grad_evals / (pool.n_steps * pool.n_chains), pool.seconds / pool.n_steps
    return None, None


def _warmup_cap(pool, plan, steps):
    """A warm-up window cut to half of what the budget has left."""
    half = Plan(**{**plan.__dict__,
                   "max_passes": None if plan.max_passes is None else
                   0.5 * (plan.max_passes + (plan.setup_evals + pool.n_grad_evals)
                          / max(plan.n_rows, 1)),
                   "max_time": _half_left(plan.max_time, plan),
                   "auto_seconds": _half_left(plan.auto_seconds, plan)})
    return _affordable(pool, half, steps, 0, 0, time.perf_counter())


def _half_left(limit, plan):
    """A time limit moved to half of what is left of it (None stays None)."""
    return None if limit is None else 0.5 * (limit + time.perf_counter() - plan.t_start)


def _affordable(pool, plan, steps, evals0, steps0, t0):
    """``steps`` cut to what the budget has left (per chain); the cost of a
    step is measured on the sampling rounds so far, else on the warm-up."""
    n, m = max(plan.n_rows, 1), pool.n_chains
    evals_per_step, seconds_per_step = _pace(pool, evals0, steps0, t0)
    if plan.max_passes is not None:
        left = plan.max_passes * n - (plan.setup_evals + pool.n_grad_evals)
        if left <= 0:
            return 0
        if evals_per_step:
            steps = min(steps, int(left / (evals_per_step * m)))
    for limit in (plan.max_time, plan.auto_seconds):
        if limit is None:
            continue
        left = limit - (time.perf_counter() - plan.t_start)
        if left <= 0:
            return 0
        if seconds_per_step:
            steps = min(steps, int(left / seconds_per_step))
    return max(int(steps), 0)
