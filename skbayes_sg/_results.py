"""What a linear fit keeps, and what it says about it.

:class:`FitResultsMixin` writes a fit's outcome into the estimator's
attributes (the draws, their means and sds, every resolved setting, the
mode and Laplace covariance, the diagnostics of the stopping rule) and
warns when the draws cannot be trusted, with the settings to change (the
advice of :mod:`.diagnostics._advice`: one writer for the fit and for
``check_convergence``).
"""
import warnings
from dataclasses import replace

import numpy as np

from ._sampling import _error_model, _schedule
from ._sampling._metric import Metric
from ._sampling._registry import SUBSAMPLINGS
from ._sampling.samplers import BY_NAME as SAMPLER_MODULES
from ._setup import STEP_ERROR_WARN
from .diagnostics._advice import RunReport, duration_words
from ._warn_location import user_stacklevel

#: an automatic minibatch above this fraction of the rows is said to cost
#: nearly a full gradient (uniform subsampling on 50,000 well-determined rows
#: chose 89-97% of them)
BATCH_NEAR_FULL = 0.5


class FitResultsMixin:
    """The storage and the warnings of :class:`~._base.BaseSGMCMC`'s fits."""

    def _store(self, ctx, setup, pool, plan, outcome):
        K, dext = ctx.glm.n_outputs, ctx.dext
        draws = outcome.draws
        n_kept = draws.shape[1]
        self._store_draws(draws.reshape(self.n_chains, n_kept, K, dext), ctx, outcome.moments)
        self._storage_stride = int(outcome.storage_stride)
        self.n_distinct_draws_ = (np.asarray(outcome.distinct, dtype=np.int64)
                                  if outcome.distinct is not None
                                  else np.full(self.n_chains, n_kept, dtype=np.int64))
        self.ess_ = np.asarray(outcome.ess, dtype=np.float64)
        self.rhat_ = np.asarray(outcome.rhat, dtype=np.float64)
        self._ess_tail = (None if outcome.ess_tail is None
                          else np.asarray(outcome.ess_tail, dtype=np.float64))
        self.target_ess_ = float(plan.target_ess)
        self._budget_exhausted = bool(outcome.budget_exhausted)
        self._chain_states = pool.states
        if not (self.warm_start and hasattr(self, "_started_together")):
            # a continuation keeps the record of the fit that started its chains
            self._started_together = ctx.resolved.shared_start is not None
        # the metric adapted during warm-up: a warm start continues with it
        self._fit_setup = setup = replace(setup, metric=pool.spec.metric)
        self._chain_request = {name: getattr(self, name)
                               for name in ("n_chains", "sampler", "subsampling", "metric")}
        self.sampler_ = setup.sampler
        self.subsampling_ = setup.subsampling
        self.metric_ = Metric.from_config(pool.spec.metric).kind
        self.lazy_ = bool(pool.spec.lazy)
        self.metropolis_ = bool(setup.metropolis)
        steps = outcome.step_sizes
        if steps.size and np.ptp(steps) > 0:   # adapted per chain: their geometric mean
            step = float(np.exp(np.mean(np.log(steps))))
        else:
            step = float(steps[0]) if steps.size else float(setup.sampler_config["step_size"])
        self.step_size_ = step
        if setup.metropolis:
            # (warm starts continue with each chain's adapted step: its state's)
            self.acceptance_rate_ = float(outcome.accept_rate)
        elif hasattr(self, "acceptance_rate_"):
            del self.acceptance_rate_
        if "friction" in setup.sampler_config:
            self.friction_ = float(setup.sampler_config["friction"])
        elif hasattr(self, "friction_"):
            del self.friction_  # left by an earlier fit with momentum
        # the rows a gradient read: every row with exact gradients
        stochastic = SUBSAMPLINGS[setup.subsampling].stochastic
        self.batch_size_ = setup.batch_size if stochastic else int(ctx.n)
        self.n_warmup_ = int(outcome.n_warmup)
        self.n_samples_ = int(n_kept)
        self.thin_ = int(plan.thin) * int(outcome.storage_stride)
        self.n_grad_evals_ = int(pool.n_grad_evals + ctx.n_grad_evals)
        self.n_passes_ = self.n_grad_evals_ / ctx.n
        self.n_setup_passes_ = ctx.n_grad_evals / ctx.n
        self.sampling_time_ = float(pool.seconds)
        mode, laplace = ctx.known_mode(), ctx.known_laplace_cov()
        if mode is not None:
            self.mode_ = mode.reshape(K, dext)
        elif hasattr(self, "mode_") and not self.warm_start:
            del self.mode_
        if laplace is None and setup.metric["kind"] == "dense" and mode is not None:
            laplace = ctx.laplace_cov(mode)
        if laplace is not None:
            self.laplace_cov_ = laplace
        elif hasattr(self, "laplace_cov_") and not self.warm_start:
            del self.laplace_cov_
        if outcome.batch_sizes is not None:
            self.batch_sizes_ = outcome.batch_sizes
            self.mean_batch_size_ = float(self.batch_sizes_.mean())
        else:
            for name in ("batch_sizes_", "mean_batch_size_"):
                if hasattr(self, name):
                    delattr(self, name)
        if ctx.resolved.pilot_q95 is not None:
            self.pv_threshold_ = ctx.resolved.pilot_q95
        self._warmup_log = outcome.log
        self._sampling_cost = (outcome.sampling_evals / ctx.n, outcome.sampling_seconds)
        if hasattr(self, "n_rows_span_"):     # an earlier fit's (a rows' span fit sets it after)
            del self.n_rows_span_

    def _warn_if_unreliable(self):
        """A ``ConvergenceWarning`` naming what to change when the draws fall
        short of their effective sample size or the chains disagree (the
        advice of :func:`~skbayes_sg.diagnostics.check_convergence`: one
        writer, so the two name the same settings)."""
        from .diagnostics._advice import assess, convergence_messages
        from .diagnostics._convergence import MCMCConvergenceWarning
        # the stopping rule's bulk and tail ESS and R-hat are those of the
        # kept draws: reused
        report = assess(self, rhat_threshold=_schedule.RHAT_TARGET, ess_bulk=self.ess_,
                        rhat=self.rhat_, ess_tail=getattr(self, "_ess_tail", None))
        messages = convergence_messages(self, report)
        if not self._stuck_chains_message():   # stuck draws: that alone is said
            messages.extend(self._step_error_message())
        if messages:
            warnings.warn(" ".join(messages), MCMCConvergenceWarning, stacklevel=user_stacklevel())

    def _stuck_chains_message(self):
        """The warning for chains whose kept draws mostly repeat one state
        (a Metropolis chain that rejects nearly every proposal), or ""."""
        distinct = getattr(self, "n_distinct_draws_", None)
        if distinct is None:
            return ""
        bad = np.flatnonzero(_schedule.stuck_chains(distinct, self.n_samples_))
        if not bad.size:
            return ""
        which = ", ".join(str(int(c)) for c in bad)
        accept = getattr(self, "acceptance_rate_", np.nan)
        why = (f" (Metropolis acceptance rate {accept:.3f} at step_size_={self.step_size_:.3g})"
               if np.isfinite(accept) else "")
        if self.step_size == "auto" and np.isfinite(accept):
            fix = (f"The step adaptation did not find a step the proposals pass within the "
                   f"budget: raise max_passes (the warm-up adapts the step within it), or pass "
                   f"step_size={self.step_size_ / 10:.3g}")
        else:
            fix = f"Pass a smaller step_size (e.g. {self.step_size_ / 10:.3g}), or leave it 'auto'"
        # the model's own words first, where it knows why (a wide prior on few rows)
        hint = self._model_hint()
        return (f"The fit failed: chain(s) {which} did not move (chain {int(bad[0])}'s "
                f"{self.n_samples_} kept draws are {int(distinct[bad[0]])} distinct states"
                f"{why}). These draws are not samples of the posterior, and no effective sample "
                f"size is counted for the repeats (ess_ is at most {int(distinct.sum())}). "
                + (f"{hint} Otherwise: {fix[0].lower()}{fix[1:]}." if hint else f"{fix}."))

    def _converged_cost_message(self, min_ess, target):
        """" A converged fit would need about ...": the passes and seconds
        spent before sampling, plus the sampling rounds' scaled by the
        effective draws still missing (their pace measured in this fit)."""
        passes, seconds = getattr(self, "_sampling_cost", (0.0, 0.0))
        if not (min_ess > 0 and np.isfinite(min_ess) and passes > 0):
            return ""
        factor = target / min_ess
        total_seconds = getattr(self, "_fit_seconds", None) or self.sampling_time_
        need_passes = self.n_passes_ + passes * (factor - 1.0)
        need_seconds = total_seconds + seconds * (factor - 1.0)
        return (f" At this fit's pace a converged one would need about "
                f"{need_passes:,.0f} data passes (max_passes={need_passes * 1.2:.3g}), "
                f"about {duration_words(need_seconds)}.")

    def _step_error_message(self):
        """A user-set step (or batch) whose predicted error is large: the draws
        converge, but to the wrong spread (the error model of the dynamics
        in the whitened metric; automatic settings keep it within 4%)."""
        setup = self._fit_setup
        error = setup.predicted_variance_error
        user_set = self.step_size != "auto" or self.batch_size != "auto"
        if not (user_set and error > STEP_ERROR_WARN):   # NaN: no prediction
            return []
        advice = setup.advised_step
        if advice is not None:
            fix = (f"Pass step_size={advice:.3g} or less (predicted error "
                   f"{_error_model.VARIANCE_ERROR:.0%}), or leave step_size='auto'")
        else:
            fix = "Leave step_size='auto' and batch_size='auto'"
        head = (f"With step_size={self.step_size!r} and batch_size={self.batch_size!r}, the "
                f"{setup.sampler} dynamics with {setup.subsampling} gradients")
        if not np.isfinite(error):
            return [head + " are unstable on the posterior's Gaussian approximation (the "
                    "step exceeds the stability limit of its stiffest direction): the draws "
                    f"are not the posterior. {fix}."]
        return [head + f" are predicted to get the posterior variances wrong by {error:.0%} "
                "(discretisation and gradient noise; the draws mix, but around the wrong "
                f"spread). {fix}."]

    def __skbayes_sg_run__(self):
        """What the convergence advice reads of this fit's run, beyond its
        draws and public attributes (:class:`~.diagnostics._advice.RunReport`)."""
        return RunReport(
            storage_stride=getattr(self, "_storage_stride", 1),
            budget_exhausted=getattr(self, "_budget_exhausted", False),
            stuck_chains_message=self._stuck_chains_message(),
            mixing_hint=self._mixing_hint(), extend_limits=getattr(self, "_extend_limits", None),
            auto_seconds=getattr(self, "_auto_seconds", None),
            chains_share_a_start=self._chains_share_a_start(),
            converged_cost=self._converged_cost_message)

    def _chains_share_a_start(self):
        """Whether every chain started at one point (``init`` "mode", "zeros"
        or an array; "auto" without a metric): R-hat is then optimistic.
        "laplace" and "prior" draw each chain's own start."""
        return self._started_together

    def _mixing_hint(self):
        """The convergence warning's last words: the dynamics' own hint (its
        module's ``MIXING_HINT``), then the metric's or the data's."""
        if self.metric_ == "identity":
            advice = ("metric='identity' (or sampler='psgld') moves every coordinate at the "
                      "pace of the stiffest one; the default metric='auto' whitens the "
                      "posterior and mixes far faster.")
        else:
            advice = "Check the data are scaled (standardise X) and the model fits."
        return " ".join(filter(None, [SAMPLER_MODULES[self.sampler_].MIXING_HINT,
                                      self._model_hint(), advice]))

    def _model_hint(self):
        """The model's own words in the convergence warning's hint ("": none)."""
        return ""

    def __sklearn_is_fitted__(self):
        """Fitted when it holds draws (``check_is_fitted``): a fit that
        raised may have left the data's attributes without a posterior."""
        return hasattr(self, "coef_samples_")

    def _discard_posterior(self, keep_chains):
        """Drop the draws of a failed fit (and the chains unless they can be retried).

        The data-dependent attributes were already reset by this fit, so the
        previous draws would no longer match them; a warm-start call keeps
        ``_chain_states`` (the states its chains started from), so it can be
        retried with a smaller ``step_size``.
        """
        names = ["coef_samples_", "intercept_samples_", "coef_", "intercept_", "coef_std_",
                 "intercept_std_"]
        if not keep_chains:
            names.append("_chain_states")
        for name in names:
            if hasattr(self, name):
                delattr(self, name)

    def _store_draws(self, draws, ctx, moments):
        """draws: (n_chains, n_samples, K, dext) -> public attributes; the
        means and sds from ``moments`` (over every draw made, float64)."""
        K, dext = ctx.glm.n_outputs, ctx.dext
        d = dext - int(ctx.fit_intercept)
        mean, var = (m.reshape(K, dext) for m in moments)
        sd = np.sqrt(np.maximum(var, 0.0))
        coef = draws[..., :d]
        if ctx.fit_intercept:
            intercept = draws[..., d]
            icpt_mean, icpt_sd = mean[:, d], sd[:, d]
        else:
            intercept = np.zeros(draws.shape[:-1], dtype=draws.dtype)
            icpt_mean, icpt_sd = np.zeros(K), np.zeros(K)
        coef_mean, coef_sd = mean[:, :d], sd[:, :d]
        if K == 1:
            coef, intercept = coef[:, :, 0, :], intercept[:, :, 0]
            coef_mean, coef_sd = coef_mean[0], coef_sd[0]
            icpt_mean, icpt_sd = float(icpt_mean[0]), float(icpt_sd[0])
        self.coef_samples_ = coef
        self.intercept_samples_ = intercept
        self.coef_, self.coef_std_ = coef_mean, coef_sd
        self.intercept_, self.intercept_std_ = icpt_mean, icpt_sd

    def _warn_if_batch_near_full(self, ctx, setup):
        """Before the chains run: an automatic minibatch of more than
        ``BATCH_NEAR_FULL`` of the rows costs nearly a full gradient a step
        without exact gradients' Metropolis correction; say so, and what
        costs less."""
        if (self.batch_size != "auto" or not SUBSAMPLINGS[setup.subsampling].stochastic
                or setup.batch_size <= BATCH_NEAR_FULL * ctx.n):
            return
        warnings.warn(
            f"subsampling={setup.subsampling!r} with batch_size='auto' reads "
            f"{setup.batch_size:,} of the {ctx.n:,} rows a step "
            f"({100 * setup.batch_size / ctx.n:.0f}%): its gradient noise needs that "
            "minibatch to keep the posterior variances within 4%, so a step costs nearly "
            "a full data pass, without the Metropolis correction exact gradients get. "
            "subsampling='auto' (control variates at the mode, whose noise is far "
            "smaller, or exact gradients where a pass is cheap), 'cv-preferential' or "
            "'full' cost less; or pass a batch_size of your own.",
            UserWarning, stacklevel=user_stacklevel())

    def _warn_if_thinned_for_memory(self):
        """Say so when the memory budget made the store keep fewer draws."""
        stride = getattr(self, "_storage_stride", 1)
        if stride <= 1:
            return
        made = self.n_samples_ * stride
        itemsize = self.coef_samples_.dtype.itemsize
        need = self.n_chains * made * self.ess_.size * itemsize / (1 << 30)   # one ESS a parameter
        warnings.warn(
            f"The {made} draws per chain would need {need:.2f} GiB, more than "
            f"draws_memory_limit={self.draws_memory_limit!r} allows: every {stride}-th was "
            f"stored (thin_={self.thin_}, n_samples_={self.n_samples_}). coef_, intercept_, "
            "coef_std_ and intercept_std_ use every draw. To store them all, raise "
            "draws_memory_limit, store float32 (draws_dtype='float32'), or ask for fewer "
            "draws (n_samples, target_ess).", UserWarning, stacklevel=user_stacklevel())
