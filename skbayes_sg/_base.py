"""Shared machinery of the SG-MCMC linear estimators."""
import numbers
from abc import abstractmethod

import numpy as np
from joblib import Parallel, delayed
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from ._sampling._chain import EWSG_CYCLIC_MESSAGE, EWSG_X_MODES
from ._sampling._context import FitContext
from ._sampling._registry import (
    ACCESS_SUBSAMPLINGS, SAMPLERS, SUBSAMPLINGS, GradientNoise)
from ._sampling._runner import ChainSpec, run_chain

DEFAULT_BATCH_SIZE = 100


class SamplingDivergedError(FloatingPointError, ValueError):
    """A chain produced non-finite parameters (the step size is too large)."""


class BaseSGMCMC(BaseEstimator):
    """Base class: parameter handling, the chains, posterior storage.

    Subclasses define the model (``_make_glm``), how targets are encoded
    (``_encode_targets``) and the prediction methods.
    """

    _parameter_constraints = {
        "sampler": [StrOptions(set(SAMPLERS))],
        "subsampling": [StrOptions(set(SUBSAMPLINGS))],
        "step_size": [Interval(numbers.Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "n_samples": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_warmup": [Interval(numbers.Integral, 0, None, closed="left")],
        "thin": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_chains": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_jobs": [numbers.Integral, None],
        "random_state": ["random_state"],
        "alpha": [Interval(numbers.Real, 0, None, closed="neither")],
        "fit_intercept": ["boolean"],
        "temperature": [Interval(numbers.Real, 0, None, closed="neither")],
        "friction": [Interval(numbers.Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "init": [StrOptions({"mode", "zeros", "prior"}), "array-like"],
        "ewsg_chain_length": [Interval(numbers.Integral, 0, None, closed="left")],
        "ewsg_x": [StrOptions(set(EWSG_X_MODES))],
        "access": [StrOptions({"random", "reshuffle", "cyclic"})],
        "snapshot_period": [Interval(numbers.Integral, 1, None, closed="left"),
                            StrOptions({"auto"})],
        "pv_threshold": [Interval(numbers.Real, 0, None, closed="neither"),
                         StrOptions({"auto", "pilot"})],
        "pilot_steps": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_leapfrog": [Interval(numbers.Integral, 1, None, closed="left")],
        "inv_mass": [Interval(numbers.Real, 0, None, closed="neither")],
        "warm_start": ["boolean"],
        "verbose": ["verbose"],
    }

    def __init__(
        self,
        *,
        sampler="sgld",
        subsampling="uniform",
        step_size="auto",
        batch_size="auto",
        n_samples=1000,
        n_warmup=1000,
        thin=1,
        n_chains=4,
        n_jobs=None,
        random_state=None,
        alpha=1.0,
        fit_intercept=True,
        temperature=1.0,
        friction="auto",
        init="mode",
        ewsg_chain_length=1,
        ewsg_x="auto",
        access="random",
        snapshot_period="auto",
        pv_threshold="auto",
        pilot_steps=500,
        n_leapfrog=10,
        inv_mass=1.0,
        warm_start=False,
        verbose=0,
    ):
        self.sampler = sampler
        self.subsampling = subsampling
        self.step_size = step_size
        self.batch_size = batch_size
        self.n_samples = n_samples
        self.n_warmup = n_warmup
        self.thin = thin
        self.n_chains = n_chains
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.temperature = temperature
        self.friction = friction
        self.init = init
        self.ewsg_chain_length = ewsg_chain_length
        self.ewsg_x = ewsg_x
        self.access = access
        self.snapshot_period = snapshot_period
        self.pv_threshold = pv_threshold
        self.pilot_steps = pilot_steps
        self.n_leapfrog = n_leapfrog
        self.inv_mass = inv_mass
        self.warm_start = warm_start
        self.verbose = verbose

    # ------------------------------------------------------------ subclass API
    @abstractmethod
    def _make_glm(self, X, y):
        """Return the GLM for the encoded targets."""

    @abstractmethod
    def _encode_targets(self, y):
        """Validate and encode ``y`` as float64 (sets ``classes_`` etc.)."""

    def _validate_X_y(self, X, y, reset):
        return validate_data(
            self, X, y, reset=reset, accept_sparse="csr", dtype=[np.float64, np.float32],
            order="C", y_numeric=False, multi_output=False,
        )

    # -------------------------------------------------------------------- fit
    def fit(self, X, y):
        """Draw posterior samples of the coefficients.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data; float32 and float64 are sampled without a copy
            (C-contiguous dense, or CSR), memory-mapped arrays included.
        y : array-like of shape (n_samples,)
            Targets.

        Returns
        -------
        self : object
            Fitted estimator with ``coef_samples_`` and friends.
        """
        self._validate_params()
        continuing = self.warm_start and hasattr(self, "_chain_states")
        if continuing and len(self._chain_states) != self.n_chains:
            raise ValueError(
                f"warm_start=True continues the {len(self._chain_states)} previous chains; "
                f"n_chains={self.n_chains} differs. Set n_chains={len(self._chain_states)} "
                "or warm_start=False.")
        if continuing and self._chain_sampler != self.sampler:
            raise ValueError(
                f"warm_start=True continues the previous sampler={self._chain_sampler!r} "
                f"chains; sampler={self.sampler!r} differs. Set "
                f"sampler={self._chain_sampler!r} or warm_start=False.")
        if continuing and self._chain_subsampling != self.subsampling:
            raise ValueError(
                f"warm_start=True continues the previous subsampling="
                f"{self._chain_subsampling!r} chains; subsampling={self.subsampling!r} "
                f"differs. Set subsampling={self._chain_subsampling!r} or warm_start=False.")
        X, y = self._validate_X_y(X, y, reset=not continuing)
        y_enc = self._encode_targets(y)
        glm = self._make_glm(X, y_enc)
        n = X.shape[0]
        batch = DEFAULT_BATCH_SIZE if self.batch_size == "auto" else self.batch_size
        ctx = FitContext(X, y_enc, glm, float(self.alpha), bool(self.fit_intercept),
                         int(min(batch, n)))
        self._fit_context_hook(ctx)
        if self.access != "random" and self.subsampling not in ACCESS_SUBSAMPLINGS:
            raise ValueError(
                f"access={self.access!r} does not apply to subsampling={self.subsampling!r}, "
                "which draws from its own weights. Use access='random' or one of "
                f"subsampling in {sorted(ACCESS_SUBSAMPLINGS)}.")
        if (SUBSAMPLINGS[self.subsampling].index_chain and self.ewsg_x == "momentum-stop"
                and not SAMPLERS[self.sampler].has_momentum):
            raise ValueError(
                f"ewsg_x='momentum-stop' assumes r_(k+1) = 0 and needs a sampler with momentum; "
                f"sampler={self.sampler!r} has none. Use ewsg_x='auto' or sampler='sghmc'.")
        if SUBSAMPLINGS[self.subsampling].index_chain and self.access == "cyclic":
            raise ValueError(f"subsampling={self.subsampling!r}, access='cyclic': "
                             + EWSG_CYCLIC_MESSAGE)
        if not continuing:
            seed = check_random_state(self.random_state).randint(np.iinfo(np.int32).max)
            seeds = np.random.SeedSequence(seed).spawn(self.n_chains + 1)
        ctx.options.update(
            access=self.access, snapshot_period=self.snapshot_period,
            pv_threshold=self.pv_threshold, pilot_steps=self.pilot_steps,
            step_size=self.step_size,
            n_leapfrog=self.n_leapfrog, inv_mass=self.inv_mass,
            # the set-up's own randomness (pilot chains) never shares a chain's stream
            pilot_seed=None if continuing else seeds[-1])
        if continuing and hasattr(self, "mode_"):
            ctx._cache["mode"] = self.mode_.ravel().copy()  # the mode does not move

        step_size, friction = self.step_size, self.friction
        if continuing:
            # the chains continue where they stopped: no new start point (no
            # mode search), and "auto" settings keep the values resolved when
            # the chains started, so that k calls of n steps equal one of k*n
            theta0 = None
            if step_size == "auto":
                step_size = self.step_size_
            if friction == "auto" and hasattr(self, "friction_"):
                friction = self.friction_
        else:
            theta0 = self._initial_theta(ctx)
            if isinstance(self.init, str) and self.init == "prior":
                # the chains start at independent prior draws, but the
                # automatic settings are calibrated where they will sample:
                # near the mode (calibrating at zeros gave steps ~40x too small)
                theta0 = ctx.mode()
            else:
                ctx.options["shared_start"] = theta0  # every chain starts here
        sub = SUBSAMPLINGS[self.subsampling]
        if continuing:
            # same estimator set-up as when the chains started (mode, weights,
            # pilot threshold, tables): the continuation is one longer run
            sub_config = self._subsampling_config
        else:
            sub_config = sub.prepare(ctx)
        noise = GradientNoise(ctx, sub, theta0)
        samp_config = SAMPLERS[self.sampler].prepare(
            ctx, theta0, step_size, friction, noise, float(self.temperature))
        use_ewsg = sub.index_chain
        spec = ChainSpec(
            model=glm.name, n_outputs=glm.n_outputs, noise_var=glm.noise_var,
            fit_intercept=bool(self.fit_intercept), alpha=float(self.alpha),
            sampler=self.sampler, sampler_config=samp_config,
            subsampling=self.subsampling, subsampling_config=sub_config,
            ewsg_chain_length=int(self.ewsg_chain_length) if use_ewsg else 0,
            ewsg_x=EWSG_X_MODES[self.ewsg_x],
            n_warmup=int(self.n_warmup), n_samples=int(self.n_samples), thin=int(self.thin),
            verbose=int(self.verbose),
        )

        if continuing:
            starts = self._chain_states
            theta_starts = [None] * self.n_chains
        else:
            starts = seeds[:self.n_chains]
            theta_starts = self._chain_start_points(ctx, theta0, starts)

        results = Parallel(n_jobs=self.n_jobs, prefer="threads")(
            delayed(run_chain)(X, y_enc, spec, start, th, chain_id=c)
            for c, (start, th) in enumerate(zip(starts, theta_starts))
        )
        for c, res in enumerate(results):
            if res.diverged:
                h = samp_config["step_size"]
                self._discard_posterior(keep_chains=continuing)
                raise SamplingDivergedError(
                    f"Chain {c} diverged (non-finite parameters) after {res.n_steps_done} steps "
                    f"with sampler={self.sampler!r}, subsampling={self.subsampling!r} and "
                    f"step_size={h:.3g}. Pass a smaller step_size, e.g. step_size={h / 10:.3g} "
                    "(or standardise X). No samples were kept.")

        K, dext = glm.n_outputs, ctx.dext
        draws = np.stack([r.samples for r in results]).reshape(
            self.n_chains, self.n_samples, K, dext)
        self._store_draws(draws, ctx)
        self._chain_states = [r.state for r in results]
        self._chain_sampler = self.sampler
        self._chain_subsampling = self.subsampling
        self._subsampling_config = sub_config
        self.step_size_ = float(samp_config["step_size"])
        if "friction" in samp_config:
            self.friction_ = float(samp_config["friction"])
        elif hasattr(self, "friction_"):
            del self.friction_  # left by an earlier SGHMC fit
        if not continuing and "mode" not in ctx._cache and hasattr(self, "mode_"):
            del self.mode_  # left by an earlier init="mode" fit
        self.batch_size_ = ctx.batch_size
        self.n_grad_evals_ = int(sum(r.n_grad_evals for r in results) + ctx.n_grad_evals)
        self.sampling_time_ = float(max(r.seconds for r in results))
        if "mode" in ctx._cache:
            self.mode_ = ctx._cache["mode"].reshape(K, dext)
        laplace = [v for k, v in ctx._cache.items() if isinstance(k, tuple) and k[0] == "laplace"]
        if laplace:
            self.laplace_cov_ = laplace[0]
        elif hasattr(self, "laplace_cov_") and not continuing:
            del self.laplace_cov_
        sizes = [r.batch_sizes for r in results]
        if sizes[0] is not None:
            self.batch_sizes_ = np.stack(sizes)
            self.mean_batch_size_ = float(self.batch_sizes_.mean())
        else:
            for name in ("batch_sizes_", "mean_batch_size_"):
                if hasattr(self, name):
                    delattr(self, name)
        if "pilot_q95" in ctx.options:
            self.pv_threshold_ = ctx.options["pilot_q95"]
        return self

    def _discard_posterior(self, keep_chains):
        """Drop the draws of a failed fit (and the chains unless they can be retried).

        The data-dependent attributes were already reset by this fit, so the
        previous draws would no longer match them; a warm-start call keeps
        ``_chain_states`` (the states its chains started from), so it can be
        retried with a smaller ``step_size``.
        """
        names = ["coef_samples_", "intercept_samples_", "coef_", "intercept_"]
        if not keep_chains:
            names.append("_chain_states")
        for name in names:
            if hasattr(self, name):
                delattr(self, name)

    def _fit_context_hook(self, ctx):
        """Subclasses may resolve data-dependent settings (e.g. noise_var)."""

    def _initial_theta(self, ctx):
        if isinstance(self.init, str):
            if self.init == "mode":
                return ctx.mode()
            return np.zeros(ctx.dim)
        theta = np.asarray(self.init, dtype=np.float64).ravel()
        if theta.shape != (ctx.dim,):
            raise ValueError(
                f"init has {theta.size} values; this model has {ctx.dim} parameters "
                f"({ctx.glm.n_outputs} output(s) x {ctx.dext} coefficients incl. intercept). "
                "Pass an array of that size, or init='mode'.")
        if not np.all(np.isfinite(theta)):
            raise ValueError("init contains NaN or inf; pass finite starting values.")
        return theta

    def _chain_start_points(self, ctx, theta0, seeds):
        if isinstance(self.init, str) and self.init == "prior":
            # an independent prior draw per chain (overdispersed starts for R-hat)
            return [np.random.default_rng(s.spawn(1)[0]).standard_normal(ctx.dim)
                    / np.sqrt(ctx.alpha) for s in seeds]
        return [theta0] * len(seeds)


    def _store_draws(self, draws, ctx):
        """draws: (n_chains, n_samples, K, dext) -> public attributes."""
        d = ctx.dext - int(ctx.fit_intercept)
        coef = draws[..., :d]
        intercept = draws[..., d] if ctx.fit_intercept else np.zeros(draws.shape[:-1])
        if ctx.glm.n_outputs == 1:
            coef, intercept = coef[:, :, 0, :], intercept[:, :, 0]
        self.coef_samples_ = coef
        self.intercept_samples_ = intercept
        self.coef_ = coef.mean(axis=(0, 1))
        self.intercept_ = intercept.mean(axis=(0, 1))

    # ------------------------------------------------------------- posterior
    def _flat_draws(self):
        """Draws as (n_draws, K, d) coefficients and (n_draws, K) intercepts."""
        coef = self.coef_samples_
        icpt = self.intercept_samples_
        if coef.ndim == 3:
            coef = coef[:, :, None, :]
            icpt = icpt[:, :, None]
        S = coef.shape[0] * coef.shape[1]
        return coef.reshape(S, coef.shape[2], coef.shape[3]), icpt.reshape(S, icpt.shape[2])

    def _linear_predictor_draws(self, X):
        """Yield (rows slice, Z) with Z of shape (rows, n_draws, K), memory-bounded."""
        W, b = self._flat_draws()
        S, K, d = W.shape
        Wt = W.reshape(S * K, d).T  # (d, S*K)
        rows = max(1, int(2 ** 22 // max(S * K, 1)))
        for start in range(0, X.shape[0], rows):
            Xc = X[start:start + rows]
            Z = np.asarray(Xc @ Wt, dtype=np.float64).reshape(-1, S, K) + b[None]
            yield slice(start, start + Xc.shape[0]), Z

    # ----------------------------------------------------------- diagnostics
    def summary(self, quantiles=(0.05, 0.5, 0.95), names=None):
        """Posterior summary: mean, sd, quantiles, ESS and R-hat per parameter.

        See :func:`skbayes_sg.diagnostics.summary`.

        Parameters
        ----------
        quantiles : sequence of float in [0, 1], default=(0.05, 0.5, 0.95)
            Posterior quantiles to report.
        names : sequence of str or None, default=None
            Feature names; by default ``feature_names_in_`` or ``x0, x1, ...``.

        Returns
        -------
        table : pandas.DataFrame or SummaryTable
            One row per coefficient and intercept.
        """
        from .diagnostics import summary
        return summary(self, quantiles=quantiles, names=names)

    def check_convergence(self, *, rhat_threshold=1.01, min_ess_per_chain=100):
        """Warn when the chains have not converged (R-hat) or mixed (ESS).

        See :func:`skbayes_sg.diagnostics.check_convergence`.

        Parameters
        ----------
        rhat_threshold : float, default=1.01
            Largest acceptable rank-normalised split R-hat.
        min_ess_per_chain : float, default=100
            Smallest acceptable bulk and tail ESS per chain.

        Returns
        -------
        converged : bool
            True when every parameter passes both checks; otherwise an
            ``MCMCConvergenceWarning`` names what to change.
        """
        from .diagnostics import check_convergence
        return check_convergence(self, rhat_threshold=rhat_threshold,
                                 min_ess_per_chain=min_ess_per_chain)

    def to_inference_data(self):
        """The draws as an ``arviz.InferenceData`` (needs the ``arviz`` extra).

        See :func:`skbayes_sg.diagnostics.to_inference_data`.

        Returns
        -------
        idata : arviz.InferenceData
            Posterior group with ``coef`` and ``intercept``.
        """
        from .diagnostics import to_inference_data
        return to_inference_data(self)

    def _validate_X_predict(self, X):
        check_is_fitted(self, "coef_samples_")
        return validate_data(self, X, reset=False, accept_sparse="csr",
                             dtype=[np.float64, np.float32])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

