"""The one writer of convergence advice.

A fit's warning (``_warn_if_unreliable`` of the linear estimators and of
the network), :func:`~skbayes_sg.diagnostics.check_convergence` and the
command line all measure the chains with :func:`assess` and word what to
change with :func:`convergence_messages`, so the same fitted estimator gets
the same verdict and the same numbers (``n_samples=...``, ``n_warmup=...``)
whichever of them is asked.

The criteria (Vehtari et al., 2021, and the fit's own target):

* split R-hat at most ``rhat_threshold`` (1.01) for every quantity; a NaN
  R-hat (draws that never moved) fails too;
* bulk ESS at least the fit's own target: ``target_ess_`` when the fit aimed
  at one (``n_samples="auto"`` or an explicit ``target_ess``), else 100 per
  chain;
* tail ESS (5% and 95% quantiles) at least 100 per chain.

The quantities are the parameters of a linear model, and for the network
the permutation-invariant ones of its ``convergence_quantities`` (its weights
are identified only up to permutations of hidden units).
"""
import math
import numbers
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ._convergence import (
    MCMCConvergenceWarning, MIN_ESS_PER_CHAIN, RHAT_THRESHOLD, _MIN_DRAWS, _SUMMARY_BLOCK_ELEMENTS,
    _as_chains, _final_estimator, _parameter_reader, _rank_block)
from .._warn_location import user_stacklevel

__all__ = ["Assessment", "RunReport", "assess", "check_convergence", "convergence_messages",
           "ess_targets", "recommend", "run_report"]

# when only R-hat fails (the effective draws suffice), chains this many
# times longer give it the draws to settle
RHAT_LENGTH_FACTOR = 2
# smallest warm-up recommended when it is a number (the network's default)
MIN_ADVISED_WARMUP = 1000


def duration_words(seconds):
    """A duration in words: "40 s", "12 min", "3.5 h"."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@dataclass(frozen=True)
class RunReport:
    """What a fit knows of its own run that the advice reads, beyond the
    draws and the estimator's public attributes.

    An estimator gives it through ``__skbayes_sg_run__()`` (a protocol
    method, as scikit-learn's ``__sklearn_tags__``): the diagnostics read no
    private name of an estimator.  An object without it (draws held by
    hand) reports the defaults.

    Attributes
    ----------
    storage_stride : int
        The fit kept every ``storage_stride``-th draw to bound its memory.
    budget_exhausted : bool
        The automatic length stopped on its budget, not on its target.
    stuck_chains_message : str
        The warning for chains that did not move, or "".
    mixing_hint : str
        The advice's last words (the dynamics' and the metric's hints).
    extend_limits : tuple (seconds, factor) or None
        How far the automatic budget may run on while converging is
        predicted in time.
    auto_seconds : float or None
        The automatic budget's time, where it set one.
    chains_share_a_start : bool
        Every chain started at one point (R-hat is then optimistic).
    converged_cost : callable or None
        ``converged_cost(min_ess, target)``: what a converged fit would
        cost at this fit's pace, in words ("" when unknown).
    """
    storage_stride: int = 1
    budget_exhausted: bool = False
    stuck_chains_message: str = ""
    mixing_hint: str = ""
    extend_limits: tuple = None
    auto_seconds: float = None
    chains_share_a_start: bool = False
    converged_cost: object = None


def run_report(estimator):
    """The estimator's :class:`RunReport` (the defaults without one)."""
    report = getattr(estimator, "__skbayes_sg_run__", None)
    return report() if report is not None else RunReport()


@dataclass
class Assessment:
    """What :func:`assess` measured on a fitted estimator's draws.

    Attributes
    ----------
    labels : sequence of str
        The quantities' names (made on demand for the linear models).
    n_chains, n_kept : int
        Chains, and draws kept per chain.
    ess_bulk, ess_tail, rhat : ndarray of shape (n_quantities,)
        Per quantity (NaN: too few draws, or constant draws).
    bulk_target, tail_target : float
        Smallest acceptable bulk and tail ESS, all chains together.
    per_chain : float or None
        The per-chain minimum the targets were set from, for the wording
        (None when the bulk target is the fit's own ``target_ess_``).
    rhat_threshold : float
    """

    labels: Sequence
    n_chains: int
    n_kept: int
    ess_bulk: np.ndarray
    ess_tail: np.ndarray
    rhat: np.ndarray
    bulk_target: float
    tail_target: float
    per_chain: object
    rhat_threshold: float = RHAT_THRESHOLD

    def ess_shortfall(self):
        """``(kind, index, ess, target)`` of the quantity furthest below its
        ESS target (by the ratio ``ess / target``), ``("none", ...)`` when no
        ESS can be estimated (too few draws), or None when every one is met."""
        if not (np.any(np.isfinite(self.ess_bulk)) or np.any(np.isfinite(self.ess_tail))):
            return ("none", 0, np.nan, self.bulk_target)
        worst = None
        for kind, values, target in (("bulk", self.ess_bulk, self.bulk_target),
                                     ("tail", self.ess_tail, self.tail_target)):
            if not np.any(np.isfinite(values)) or target <= 0:
                continue
            i = int(np.nanargmin(values))
            ratio = values[i] / target
            if ratio < 1.0 and (worst is None or ratio < worst[0]):
                worst = (ratio, kind, i, float(values[i]), float(target))
        return None if worst is None else worst[1:]

    def rhat_failures(self):
        """Indices of the quantities whose R-hat is above the threshold, or
        NaN (with enough draws to compute one: else the ESS says it)."""
        if self.n_kept < _MIN_DRAWS:
            return np.empty(0, dtype=np.intp)
        return np.flatnonzero(~(self.rhat <= self.rhat_threshold))

    @property
    def converged(self):
        return self.ess_shortfall() is None and not len(self.rhat_failures())


def ess_targets(estimator, n_chains, min_ess_per_chain=None):
    """``(bulk_target, tail_target, per_chain)``: the ESS the draws must reach.

    ``min_ess_per_chain`` given: both are ``min_ess_per_chain * n_chains``.
    None: the bulk target is the fit's own (``target_ess_`` when it aimed at
    one), else 100 per chain; the tail target 100 per chain.
    """
    if min_ess_per_chain is not None:
        total = float(min_ess_per_chain) * n_chains
        return total, total, float(min_ess_per_chain)
    floor = float(MIN_ESS_PER_CHAIN * n_chains)
    params = _params(estimator)
    own = getattr(estimator, "target_ess_", None)
    aimed = params.get("n_samples") == "auto" or params.get("target_ess", "auto") != "auto"
    if own is not None and aimed:
        return float(own), floor, None
    return floor, floor, float(MIN_ESS_PER_CHAIN)


def assess(estimator, *, rhat_threshold=RHAT_THRESHOLD, min_ess_per_chain=None, names=None,
           ess_bulk=None, rhat=None, ess_tail=None):
    """Measure the chains of a fitted estimator (bulk and tail ESS, R-hat).

    Parameters
    ----------
    estimator : fitted SG-MCMC estimator
        Its draws are read with the labels of :func:`summary` (for the
        network: its permutation-invariant quantities).
    rhat_threshold : float, default=1.01
        Largest acceptable split R-hat.
    min_ess_per_chain : float or None, default=None
        See :func:`ess_targets`.
    names : sequence of str or None, default=None
        Labels (as in :func:`summary`).
    ess_bulk, rhat, ess_tail : ndarray or None, default=None
        Values already computed on the same draws (the fit's ``ess_``,
        ``rhat_`` and tail ESS); only the missing ones are computed.

    Returns
    -------
    assessment : Assessment
        The values per quantity and the targets.
    """
    (n_chains, n_kept, n_params), labels, read = _parameter_reader(estimator, names)
    need_bulk, need_rhat, need_tail = ess_bulk is None, rhat is None, ess_tail is None
    tail = np.empty(n_params) if need_tail else np.asarray(ess_tail, dtype=np.float64)
    bulk = np.empty(n_params) if need_bulk else np.asarray(ess_bulk, dtype=np.float64)
    r = np.empty(n_params) if need_rhat else np.asarray(rhat, dtype=np.float64)
    # blocks of parameters: memory stays near one block's copies of the draws
    block = max(1, _SUMMARY_BLOCK_ELEMENTS // max(n_chains * n_kept, 1))
    for start in range(0, n_params if need_bulk or need_rhat or need_tail else 0, block):
        stop = min(start + block, n_params)
        a, _ = _as_chains(read(start, stop), copy=False)
        # one pass of the compiled kernel: the sorts are shared
        ess_bulk, rhat_values, ess_tail = _rank_block(a, bulk=need_bulk or need_rhat,
                                                      tail=need_tail)
        for values, new, needed in ((tail, ess_tail, need_tail), (bulk, ess_bulk, need_bulk),
                                    (r, rhat_values, need_rhat)):
            if needed:
                values[start:stop] = new
    bulk_target, tail_target, per_chain = ess_targets(estimator, n_chains, min_ess_per_chain)
    return Assessment(labels, n_chains, n_kept, bulk, tail, r, bulk_target, tail_target,
                      per_chain, float(rhat_threshold))


def _params(estimator):
    return estimator.get_params() if hasattr(estimator, "get_params") else {}


def _settings(estimator, n_kept):
    """The settings the fit used ("auto" resolved) and what it offers."""
    params = _params(estimator)
    n_samples = params.get("n_samples", n_kept)
    report = run_report(estimator)
    stride = int(report.storage_stride or 1)
    n_warmup = params.get("n_warmup")
    return dict(
        n_samples=n_samples,
        # draws made per chain (a memory-thinned store keeps every stride-th)
        n_made=int(getattr(estimator, "n_samples_", n_kept)) * stride,
        n_warmup=n_warmup,
        n_warmup_used=getattr(estimator, "n_warmup_", n_warmup),
        thin=int(getattr(estimator, "thin_", params.get("thin", 1)) or 1),
        # only the linear estimators can size the run themselves
        auto_length="target_ess" in params,
        budget_exhausted=bool(report.budget_exhausted),
    )


def recommend(estimator, assessment):
    """The settings to change, as numbers.

    ``n_samples`` is the length per chain that reaches the ESS target at the
    pace measured (``n_samples * target / ess`` for the quantity furthest
    below it), at least twice the current one when R-hat fails; ``thin`` the
    same length with the current number of draws kept; ``n_warmup`` is
    raised only when R-hat fails ("auto" stays "auto": it adapts its length).

    Parameters
    ----------
    estimator : fitted SG-MCMC estimator
        Its settings (``n_samples``, ``n_warmup``, ``thin``, used values).
    assessment : Assessment
        From :func:`assess` on the same estimator.

    Returns
    -------
    advice : dict
        ``{"n_samples": int or None, "n_warmup": int, "auto" or None,
        "thin": int or None}``; None: no change.
    """
    s = _settings(estimator, assessment.n_kept)
    short = assessment.ess_shortfall()
    bad_r = assessment.rhat_failures()
    need = None
    if short is not None:
        kind, _, value, target = short
        if np.isfinite(value) and value > 0:
            need = math.ceil(s["n_made"] * target / value)
        else:   # no ESS yet: at best every draw is an independent one
            need = max(math.ceil(target / assessment.n_chains), 2 * s["n_made"])
    if len(bad_r):
        need = max(need or 0, RHAT_LENGTH_FACTOR * s["n_made"])
    out = {"n_samples": need, "n_warmup": None, "thin": None}
    if need is not None:
        out["thin"] = s["thin"] * math.ceil(need / max(s["n_made"], 1))
    if len(bad_r):
        used = s["n_warmup_used"]
        # "auto" stays where it adapts (the linear models) or where no length is
        # known; the network's "auto" is a rule whose length is n_warmup_
        if s["n_warmup"] == "auto" and (s["auto_length"]
                                        or not isinstance(used, numbers.Integral)):
            out["n_warmup"] = "auto"
        elif used is not None:
            out["n_warmup"] = max(2 * int(used), MIN_ADVISED_WARMUP)
    return out


def _target_words(target, per_chain, n_chains):
    if per_chain is None:
        return f"{target:.0f}"
    return f"{target:.0f} ({per_chain:g} per chain x {n_chains} chain{'s' * (n_chains > 1)})"


def convergence_messages(estimator, assessment):
    """The sentences of a convergence warning, one string per problem.

    Parameters
    ----------
    estimator : fitted SG-MCMC estimator
        The estimator assessed (its settings word the advice).
    assessment : Assessment
        From :func:`assess` on the same estimator.

    Returns
    -------
    messages : list of str
        Empty when the chains pass every check.  A fit joins them into one
        warning; :func:`check_convergence` warns once per string.  The
        estimator's mixing hint (:class:`RunReport`, when it has one) ends the last.
    """
    report = run_report(estimator)
    if report.stuck_chains_message:   # repeats are no posterior draws: say that alone
        return [report.stuck_chains_message]
    a = assessment
    s = _settings(estimator, a.n_kept)
    rec = recommend(estimator, a)
    short = a.ess_shortfall()
    bad_r = a.rhat_failures()
    messages = []
    if short is not None:
        messages.append(_ess_message(estimator, a, s, rec, short))
    if len(bad_r):
        messages.append(_rhat_message(estimator, a, s, rec, bad_r))
    if messages:
        if report.mixing_hint:
            messages[-1] += " " + report.mixing_hint
    return messages


def _length_advice(s, rec, why=""):
    """ "Use n_samples='auto' ... or n_samples=N or more." in the estimator's terms."""
    need = rec["n_samples"]
    if s["auto_length"] and s["n_samples"] != "auto":
        return (f"Use n_samples='auto' (runs until the target is met) or n_samples={need} "
                "or more.")
    if s["auto_length"]:
        return f"Use n_samples={need} or more{why}."
    return (f"Use n_samples={need} or more, or thin={rec['thin']} (now {s['thin']}) to keep "
            f"{s['n_made']} draws per chain.")


def _ess_message(estimator, a, s, rec, short):
    kind, i, value, target = short
    if kind == "none":
        if s["auto_length"] and s["n_samples"] != "auto":
            return (f"{a.n_kept} draws per chain are too few to estimate the effective sample "
                    f"size: use n_samples='auto' (runs until the draws are worth {target:.0f} "
                    f"independent ones) or n_samples={rec['n_samples']} or more.")
        return (f"{a.n_kept} draws per chain are too few to estimate the effective sample "
                f"size. " + _length_advice(s, rec))
    which = ("bulk effective sample size" if kind == "bulk"
             else "tail effective sample size, of its 5% and 95% quantiles")
    # the tail target is always per chain; the bulk one may be the fit's own
    per_chain = a.per_chain if (kind == "bulk" or a.per_chain is not None) \
        else float(MIN_ESS_PER_CHAIN)
    target_words = _target_words(target, per_chain, a.n_chains)
    head = (f"The draws are worth {value:.0f} independent ones for {a.labels[i]!r} (the "
            f"smallest {which}), short of the target {target_words}")
    if s["n_samples"] == "auto" and (s["budget_exhausted"] or kind == "bulk"):
        # the automatic length stops on the bulk target or on the budget
        limit = []
        max_passes = getattr(estimator, "max_passes_", None)
        if max_passes is not None:
            used = getattr(estimator, "n_passes_", 0.0)
            # the automatic budget may run on while converging is predicted in time
            report = run_report(estimator)
            extend = report.extend_limits
            past = (f", sampling went on past it while converging was predicted within "
                    f"{extend[1]:g} times the budget and {extend[0] / 60:g} minutes"
                    if extend and used > 1.05 * max_passes else "")
            seconds = report.auto_seconds
            also = (f" or {duration_words(seconds)}, the time its flops take at the rate the "
                    f"automatic budget assumes, whichever came first" if seconds else "")
            limit.append(f"max_passes (the budget was {max_passes:,.0f} data passes{also}; "
                         f"{used:,.0f} were used{past})")
        max_time = _params(estimator).get("max_time")
        if max_time is not None:
            limit.append(f"max_time={max_time:g}")
        cost = run_report(estimator).converged_cost
        return (head + ": the budget ran out. Raise " + " or ".join(limit or ["the budget"])
                + "." + (cost(value, target) if cost is not None else ""))
    if s["n_samples"] == "auto":
        # the automatic length stops on the bulk ESS: a tail short of its own
        # target needs a longer run than it asks for
        return head + ". " + _length_advice(
            s, rec, " (the automatic length stops on the bulk effective sample size)")
    return head + f" with n_samples={s['n_samples']}. " + _length_advice(s, rec)


def _rhat_message(estimator, a, s, rec, bad):
    r = a.rhat[bad]
    worst = bad[int(np.argmax(np.where(np.isnan(r), np.inf, r)))]
    value = a.rhat[worst]
    n = len(a.rhat)
    if a.n_chains == 1:
        what = ("the two halves of the chain disagree (one chain: split R-hat), so it has "
                "not reached the posterior")
    else:
        what = "the chains disagree, so they have not all reached the posterior"
    if np.isnan(value):
        head = (f"Split R-hat cannot be computed for {a.labels[worst]!r} (its draws are "
                f"constant or not finite; {len(bad)} of {n} quantities fail the check)")
    else:
        # enough digits to show it above the threshold (1.0102, not 1.010)
        digits = 3 if round(value, 3) > a.rhat_threshold else 4
        head = (f"Split R-hat is {value:.{digits}f} for {a.labels[worst]!r} (above "
                f"{a.rhat_threshold:g} for {len(bad)} of {n} "
                f"{'parameters' if s['auto_length'] else 'quantities'})")
    if rec["n_warmup"] == "auto":
        warmup = (f"Leave n_warmup='auto' (or raise it above the {s['n_warmup_used']} steps "
                  "it ran)")
    elif rec["n_warmup"] is not None:
        warmup = f"Raise n_warmup to {rec['n_warmup']} (now {s['n_warmup_used']})"
    else:
        warmup = "Warm up longer"
    if s["n_samples"] == "auto":
        # it stops only when R-hat passes, or on the budget
        longer = f"sample longer (raise max_passes, or pass n_samples={rec['n_samples']})"
    elif s["auto_length"]:
        longer = f"sample longer (n_samples='auto', or n_samples={rec['n_samples']})"
    else:
        longer = f"sample longer (n_samples={rec['n_samples']}, now {s['n_samples']})"
    msg = f"{head}: {what}. {warmup} and {longer}."
    if a.n_chains > 1 and _shared_start(estimator):
        init = _params(estimator).get("init")
        msg += (f" Chains started at the same point (init="
                f"{init if isinstance(init, str) else 'array'!r}) make R-hat optimistic; "
                "refit with init='prior' (overdispersed starts) to check that they forget it.")
    return msg


def _shared_start(estimator):
    """Whether every chain started at the same point (R-hat is then
    optimistic), as the estimator's fit recorded it."""
    return bool(run_report(estimator).chains_share_a_start)


def check_convergence(estimator, *, rhat_threshold=RHAT_THRESHOLD,
                      min_ess_per_chain=None, names=None):
    """Warn when the chains have not converged (R-hat) or mixed (ESS).

    The same check, and the same advice, as the warning at the end of
    ``fit``: both are written by one function, so they name the same
    settings (``n_samples=...``, ``n_warmup=...``) for the same fit.

    Parameters
    ----------
    estimator : fitted SG-MCMC estimator or Pipeline ending with one
        For :class:`~skbayes_sg.neural_network.SGMCMCMLPClassifier`, the
        quantities checked are the permutation-invariant ones of its
        :meth:`~skbayes_sg.neural_network.SGMCMCMLPClassifier.summary`
        (the weights themselves are identified only up to permutations of
        the hidden units).
    rhat_threshold : float, default=1.01
        Largest acceptable rank-normalised split R-hat.
    min_ess_per_chain : float or None, default=None
        Smallest acceptable bulk and tail ESS, per chain: the total must
        reach ``min_ess_per_chain * n_chains``.  None: the fit's own
        target for the bulk ESS (``target_ess_`` when the fit aimed at one:
        ``n_samples="auto"`` or an explicit ``target_ess``), else 100 per
        chain, and 100 per chain for the tail ESS.
    names : sequence of str or None, default=None
        Feature names used in the messages (as in :func:`summary`).

    Returns
    -------
    converged : bool
        True when every parameter passes both checks.

    Warns
    -----
    MCMCConvergenceWarning
        One warning per failed check (ESS, then R-hat), naming the worst
        parameter and the settings to change.

    Notes
    -----
    The defaults are the recommendations of Vehtari et al. (2021): R-hat
    below 1.01, and bulk and tail ESS above 100 per chain (400 for the
    default 4 chains), the bulk ESS raised to the fit's own target when it
    had one.  Below about 100 per chain the ESS and R-hat
    estimates are themselves unreliable (the autocorrelations they rest on
    are too noisy), and the Monte Carlo error of a posterior mean is
    ``sd / sqrt(ESS)``, 10% of a posterior standard deviation at ESS = 100.

    These checks measure mixing, not the bias of SG-MCMC: a stochastic-
    gradient chain converges to a distribution that differs from the
    posterior by an amount that grows with the step size, and R-hat and ESS
    cannot see that.  The kernel Stein discrepancy
    (:func:`skbayes_sg.diagnostics.ksd_from_estimator`) does.
    """
    estimator = _final_estimator(estimator)
    if not (isinstance(rhat_threshold, numbers.Real) and rhat_threshold >= 1):
        raise ValueError(f"rhat_threshold must be a number >= 1; got {rhat_threshold!r}.")
    if min_ess_per_chain is not None and not (
            isinstance(min_ess_per_chain, numbers.Real) and min_ess_per_chain >= 0):
        raise ValueError("min_ess_per_chain must be None or a non-negative number; got "
                         f"{min_ess_per_chain!r}.")
    # the advice is the fit's own (one writer): same criteria, same numbers
    report = assess(estimator, rhat_threshold=rhat_threshold,
                    min_ess_per_chain=min_ess_per_chain, names=names)
    messages = convergence_messages(estimator, report)
    for msg in messages:
        warnings.warn(msg, MCMCConvergenceWarning, stacklevel=user_stacklevel())
    return not messages
