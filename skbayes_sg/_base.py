"""Shared machinery of the SG-MCMC linear estimators.

``fit`` is a pipeline: validate the data and the parameters; find the mode
and build the metric; resolve every ``"auto"`` setting (sampler, gradient
estimator, step, batch) from the error model; start the chains
overdispersed; warm up and sample until the effective sample size reaches
its target (:mod:`._sampling._schedule`); store the draws and say whether
they can be trusted.
"""
import inspect
import numbers
import time
import warnings
from abc import abstractmethod
from dataclasses import dataclass, field

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data
from threadpoolctl import threadpool_limits

from ._sampling import _error_model, _schedule
from ._sampling._chain import EWSG_CYCLIC_MESSAGE, EWSG_X_MODES
from ._sampling._context import FitContext, FitSettings
from ._sampling._draws import resolve_budget, resolve_dtype
from ._sampling._lazy import LAZY_SAMPLERS, LAZY_SUBSAMPLINGS, on_lazy_grid
from ._sampling._metric import Metric
from ._sampling._registry import (
    ACCESS_SUBSAMPLINGS, SAMPLERS, SUBSAMPLINGS, GradientNoise, noise_per_row)
from ._sampling._specs import (
    HYPERPARAMETERS, estimator_owners, hyperparameter_constraints, ineffective_settings,
    sampler_owners)
from ._sampling._spectrum import extreme_eigenpairs, extreme_eigenvalues
from ._sampling.samplers import BY_NAME as SAMPLER_MODULES
from ._sampling._runner import (CHECK_EVERY, ChainPool, ChainSpec, initial_state,
                                note_interrupt)
from .diagnostics._advice import duration_words
from .exceptions import SamplingDivergedError

DEFAULT_BATCH_SIZE = 100
#: the dense (Cholesky) Laplace metric up to this many parameters, a
#: diagonal one above (a step costs O(dim^2) in a dense metric)
MAX_DENSE_METRIC = 2000
#: full gradients (exact, Metropolis-adjusted) when the whole fit with them
#: costs less than this many flops, or when subsampling would save less than
#: FULL_GRADIENT_PREFERENCE times their cost
CHEAP_FIT_FLOPS = 2e9
FULL_GRADIENT_PREFERENCE = 2.0
#: data passes an effective draw costs with exact gradients (Metropolis-adjusted
#: HMC in the Laplace metric: 2-8 on the benchmark posteriors)
FULL_PASSES_PER_DRAW = 4.0
#: a chain whose parameters leave the mode by more than this many Laplace
#: marginal sds has blown up (a posterior draw is within ~4.5 of its sds;
#: the Laplace sds of the nearly separable benchmark are 1.3x too small)
DIVERGENCE_SD = 10.0
#: the same along every whitened direction of a dense metric (z ~ N(0, I))
DIVERGENCE_Z = 12.0
#: a diagonal metric's z_j has variance 1/(1 - R_j^2) (correlated features):
#: only an overflow-like excursion counts
DIVERGENCE_Z_DIAGONAL = 1e4
#: a Metropolis-adjusted chain is exact: its far excursions are the posterior's
#: own tail (skewed posteriors of few rows reach 11 Laplace sds), and a
#: trajectory that blows up is rejected; only an absurd state counts there
DIVERGENCE_EXACT_FACTOR = 10.0
#: the identity-step check takes its dense route (the whitened metric of the
#: mode's Hessian, exact eigenvalues) where that costs at most this many data
#: passes, or this many floating-point operations; else Lanczos iterations on
#: passes at any dim (``_predict_identity_step_error``)
STEP_CHECK_DENSE_PASSES = 50
STEP_CHECK_DENSE_FLOPS = 3e7
#: the iterative route's Lanczos stop (relative change of the largest Ritz
#: value): its eigenvalues within a few per cent, in 5-10 passes each
STEP_CHECK_TOL = 1e-2
#: a user-set step (or batch) whose predicted relative error of the posterior
#: variances exceeds this is warned about (automatic settings: 4%)
STEP_ERROR_WARN = 0.25
#: max_passes="auto": as many data passes as this many flops of per-datum
#: gradients (about ten seconds on one core), times 2 (dim / MAX_DENSE_METRIC)^2
#: above the dense metric's size, at most AUTO_BUDGET_GROWTH times (an
#: effective draw there costs ~dim^(1/4) more passes, and the smallest ESS over
#: more coordinates needs more of them: at 10^4 text features a converged fit
#: took ~60,000 passes; past 10^4 parameters a default fit stops within a few
#: minutes and says what converging would take), within [1,000, 200,000]:
#: cheap passes may be many, dear ones few
AUTO_BUDGET_FLOPS = 5e9
AUTO_BUDGET_GROWTH = 50.0
AUTO_BUDGET_PASSES = (1000, 200_000)
#: the rate (flops a second) at which AUTO_BUDGET_FLOPS is "ten seconds": with
#: max_time=None the automatic budget is also that many seconds, so a fit
#: whose passes run slower than the flop count says (at 10^6 sparse
#: coefficients a pass's random reads and the metric's products cost ~5x
#: its flops) still stops within the minutes the budget means and says how
#: long converging would take, instead of running for most of an hour
AUTO_BUDGET_FLOP_RATE = 5e8
#: max_passes="auto" with max_time=None: sampling goes past the pass budget,
#: one round at a time, while the pace measured says the rest of the way to
#: the ESS target ends within AUTO_EXTEND_SECONDS of the fit's start and
#: within AUTO_EXTEND_FACTOR times the budget's passes.  A fit that converges
#: a little past a flop count is not stopped at it (a9a with pairwise
#: interactions, 5,439 parameters, needs ~2.5x its pass budget: about six
#: minutes, in which NUTS would not finish warm-up); one that would need many
#: budgets (pSGLD on australian: 52) stops at its budget and says how long
AUTO_EXTEND_SECONDS = 900.0
AUTO_EXTEND_FACTOR = 4.0
#: chains start at draws of the Laplace approximation with sds this much wider
#: (overdispersed, so that split R-hat can see chains that have not converged)
OVERDISPERSION = 2.0
#: at most this many low-rank directions at each end of the whitened
#: Hessian's spectrum (a step costs 4 dim k flops more)
LOWRANK_DIRECTIONS = 32
#: a Ritz pair joins the low-rank metric when its eigenvalue is outside
#: [1 / LOWRANK_SPREAD, LOWRANK_SPREAD] and its residual is within
#: LOWRANK_RESIDUAL of its distance to 1 (converged where it matters)
LOWRANK_SPREAD = 1.5
LOWRANK_RESIDUAL = 0.1
#: above MAX_DENSE_METRIC parameters a full-gradient fit with metric="auto"
#: still takes the dense Laplace metric where its factor fits in this many
#: bytes and its O(dim^2) step is cheaper per effective draw than the
#: low-rank metric's (whose steps the condition number left multiplies):
#: :func:`_dense_pays`
AUTO_DENSE_BYTES = 512 << 20
#: a Metropolis-adjusted HMC trajectory in a diagonal metric lasts a quarter
#: period of its slowest direction, at most this many of the reference's
MAX_TRAJECTORY_FACTOR = 8.0
#: its lengths are drawn uniform in NARROW_SPAN times it, or in WIDE_SPAN
#: times it where it is longer than the reference's by at least
#: WIDE_SPAN_TURN.  From there on the longest of the narrow
#: span's lengths (1.25 quarter periods of the slowest direction) turns the
#: bulk (whitened eigenvalues near 1) by a half turn, which flips z and
#: keeps |z|: on the text ridge (slowest quarter period 1.70 times the
#: reference's) lag-1 autocorrelations -0.6 in z and +0.6 in |z|, and split
#: R-hat on the folded draws, not the ESS, set the fit's length (118,000
#: passes; 82,600 with the wide span).  Below it the narrow span is better:
#: the text logistic regression (1.33 times) took 134,000 passes with it and
#: 205,000 with the wide one, which gives its slowest direction shorter,
#: positively correlated moves.  The span [0.25, 1.25] was chosen over [0.5,
#: 1.5], [0, 1.5], [0.4, 1.2] and exponential lengths in a simulation of such
#: spectra (2 to 8 times fewer gradients than the narrow span for the same
#: ESS and R-hat)
WIDE_SPAN_TURN = 1.6
NARROW_SPAN = (0.75, 1.25)
WIDE_SPAN = (0.25, 1.25)
#: lazy sparse steps where a minibatch touches fewer than 1/LAZY_DENSITY of the
#: coordinates (a lazy coordinate update costs a few eager ones)
LAZY_DENSITY = 4.0


def trajectory_lengths(lam_min):
    """HMC's trajectory lengths in a whitened metric whose slowest direction
    left has eigenvalue ``lam_min``: ``{"trajectory": centre, "jitter": j}``
    for :class:`~._sampling._dynamics.SGHMCLeapfrog`, lengths uniform in
    ``[1 - j, 1 + j]`` times the centre.  The slowest direction turns by a
    quarter turn in ``(pi / 2) / sqrt(lam_min)`` (at most
    ``MAX_TRAJECTORY_FACTOR`` reference quarter periods); the lengths span
    ``NARROW_SPAN`` of it, or ``WIDE_SPAN`` from ``WIDE_SPAN_TURN``
    reference quarter periods on."""
    turn = min(1.0 / np.sqrt(min(max(lam_min, 1e-12), 1.0)), MAX_TRAJECTORY_FACTOR)
    lo, hi = WIDE_SPAN if turn >= WIDE_SPAN_TURN else NARROW_SPAN
    quarter = 0.5 * np.pi * turn
    return {"trajectory": quarter * (lo + hi) / 2, "jitter": (hi - lo) / (hi + lo)}


@dataclass
class FitSetup:
    """Every setting a fit resolved (kept for warm starts)."""

    sampler: str
    subsampling: str
    metric: dict                       # Metric.get_config()
    metropolis: bool
    sampler_config: dict
    subsampling_config: dict
    batch_size: int
    iat: float                         # predicted steps per effective draw
    predicted_variance_error: float
    momentum_scale: float = 1.0
    notes: dict = field(default_factory=dict)


#: every linear estimator's parameters and defaults, in order; the samplers'
#: hyperparameters (friction, inv_mass, n_leapfrog) come from their specs
BASE_PARAMETERS = {
    "sampler": "auto", "subsampling": "auto", "metric": "auto", "metropolis": "auto",
    "step_size": "auto", "batch_size": "auto", "n_samples": "auto", "n_warmup": "auto",
    "thin": "auto", "target_ess": "auto", "max_passes": "auto", "max_time": None,
    "n_chains": 4, "n_jobs": None, "random_state": None, "alpha": 1.0, "fit_intercept": True,
    "temperature": 1.0, "init": "auto", "ewsg_chain_length": 1, "ewsg_x": "auto",
    "access": "random", "snapshot_period": "auto", "pv_threshold": "auto", "pilot_steps": 500,
    **{hp.name: hp.default for hp in HYPERPARAMETERS.values()},
    "draws_dtype": "auto", "draws_memory_limit": "auto",
    "warm_start": False, "verbose": 0,
}


def _keyword_init(owner, parameters):
    """An ``__init__`` that takes exactly ``parameters`` (name -> default) as
    keywords and stores each unchanged (scikit-learn's contract), with the
    explicit signature scikit-learn's ``get_params`` reads.  Written once, so
    that an estimator lists only what it adds (:func:`estimator_parameters`)
    and a sampler's new hyperparameter reaches every estimator from its spec."""
    def __init__(self, **kwargs):
        for name in kwargs:
            if name not in parameters:
                raise TypeError(f"{type(self).__name__}.__init__() got an unexpected "
                                f"keyword argument {name!r}")
        for name, default in parameters.items():
            setattr(self, name, kwargs.get(name, default))

    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    __init__.__signature__ = inspect.Signature(
        [self_param] + [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
                        for name, default in parameters.items()])
    __init__.__qualname__ = f"{owner}.__init__"
    return __init__


def estimator_parameters(**own):
    """Class decorator: the estimator's parameters are :data:`BASE_PARAMETERS`
    plus ``own`` (name -> default; a base name given here changes its default)."""
    def decorate(cls):
        cls._parameter_defaults = {**BASE_PARAMETERS, **own}
        cls.__init__ = _keyword_init(cls.__name__, cls._parameter_defaults)
        return cls
    return decorate


class PosteriorPredictiveMixin:
    """The posterior predictive of a fitted model: ``sample_y`` and the
    ``posterior_predictive`` group of the ArviZ export.  Regression models
    draw through the registry (``GLM.sample``: ridge, Poisson); a classifier
    overrides ``_draw_observations``."""

    def _likelihood_target(self, y, n_rows):
        if np.shape(y)[0] != n_rows:
            raise ValueError(f"y has {np.shape(y)[0]} values for {n_rows} rows of X; pass "
                             "the targets of the rows of X.")
        return self._model_spec().validate_targets(y)

    def _draw_observations(self, Z, rng):
        """One observation per entry of ``Z[:, :, 0]`` from ``p(y | z)``:
        ``Z`` of shape (rows, m, K) -> (rows, m)."""
        return self._model_spec().sample(Z[:, :, 0], rng)

    def _predictive_draws(self, X, rng):
        """One observation per row and kept draw, from ``p(y | x^T w_s + b_s)``:
        (n_samples, n_draws), the draws in ``coef_samples_`` order (chain-major)."""
        X = self._validate_X_predict(X)
        out = None
        for rows, Z in self._linear_predictor_draws(X):
            block = self._draw_observations(Z, rng)
            if out is None:
                out = np.empty((X.shape[0], self._n_draws()), dtype=block.dtype)
            out[rows] = block
        return out

    def sample_y(self, X, n_draws=1, random_state=None):
        """Draw from the posterior predictive distribution.

        Every draw of ``y`` comes from one posterior draw ``theta_s = (w_s,
        b_s)``: ``y ~ p(y | x, theta_s)`` (ridge: ``x^T w_s + b_s +
        N(0, noise_var_)``; Poisson: ``Poisson(exp(x^T w_s + b_s))``;
        logistic: the label of class ``k`` with probability
        ``p_k(x, theta_s)``).  The same ``theta_s`` serves every row of a
        column, so the columns are draws of the whole vector ``y(X)``, as in
        ``GaussianProcessRegressor.sample_y``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Where to draw ``y``.
        n_draws : int or None, default=1
            How many draws of ``y(X)``.  An int: each picks a stored posterior
            draw uniformly at random (with replacement).  ``None``: one draw
            of ``y(X)`` per stored posterior draw, in the order of
            ``coef_samples_`` (chain-major: column ``c * n_samples + s`` uses
            ``coef_samples_[c, s]``), what the ArviZ export's
            ``posterior_predictive`` group holds.
        random_state : int, RandomState instance or None, default=None
            Seeds the picks and the observation noise.

        Returns
        -------
        y_samples : ndarray of shape (n_samples, n_draws)
            Column ``j`` is one draw of ``y`` at every row of ``X``
            (``n_draws = n_chains * n_samples`` when ``n_draws=None``); class
            labels (``classes_``) for a classifier.
        """
        X = self._validate_X_predict(X)
        if n_draws is not None and not (
                isinstance(n_draws, numbers.Integral) and not isinstance(n_draws, bool)
                and n_draws >= 1):
            raise ValueError(f"n_draws must be a positive integer, or None for one draw per "
                             f"posterior draw; got {n_draws!r}.")
        rng = check_random_state(random_state)
        if n_draws is None:
            return self._predictive_draws(X, rng)
        W, b = self._flat_draws()
        pick = rng.randint(W.shape[0], size=n_draws)
        Wp = W[pick]                                       # (n_draws, K, d)
        Wt = Wp.reshape(n_draws * Wp.shape[1], -1).T       # (d, n_draws * K)
        Z = np.asarray(X @ Wt, dtype=np.float64).reshape(X.shape[0], n_draws, -1) + b[pick][None]
        return self._draw_observations(Z, rng)


class BaseSGMCMC(BaseEstimator):
    """Base class: parameter handling, the chains, posterior storage.

    Subclasses define the model (``_make_glm``), how targets are encoded
    (``_encode_targets``) and the prediction methods.
    """

    _parameter_constraints = {
        "sampler": [StrOptions(set(SAMPLERS) | {"auto"})],
        "subsampling": [StrOptions(set(SUBSAMPLINGS) | {"auto"})],
        "metric": [StrOptions({"auto", "dense", "diagonal", "identity"})],
        "metropolis": ["boolean", StrOptions({"auto"})],
        "step_size": [Interval(numbers.Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "n_samples": [Interval(numbers.Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "n_warmup": [Interval(numbers.Integral, 0, None, closed="left"), StrOptions({"auto"})],
        "thin": [Interval(numbers.Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "target_ess": [Interval(numbers.Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "max_passes": [Interval(numbers.Real, 0, None, closed="neither"), StrOptions({"auto"}),
                       None],
        "max_time": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "n_chains": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_jobs": [numbers.Integral, None],
        "random_state": ["random_state"],
        "alpha": [Interval(numbers.Real, 0, None, closed="neither")],
        "fit_intercept": ["boolean"],
        "temperature": [Interval(numbers.Real, 0, None, closed="neither")],
        "init": [StrOptions({"auto", "laplace", "mode", "zeros", "prior"}), "array-like"],
        "ewsg_chain_length": [Interval(numbers.Integral, 1, None, closed="left")],
        "ewsg_x": [StrOptions(set(EWSG_X_MODES))],
        "access": [StrOptions({"random", "reshuffle", "cyclic"})],
        "snapshot_period": [Interval(numbers.Integral, 1, None, closed="left"),
                            StrOptions({"auto"})],
        "pv_threshold": [Interval(numbers.Real, 0, None, closed="neither"),
                         StrOptions({"auto", "pilot"})],
        "pilot_steps": [Interval(numbers.Integral, 1, None, closed="left")],
        "warm_start": ["boolean"],
        "verbose": ["verbose"],
        **hyperparameter_constraints(),   # friction, inv_mass, n_leapfrog
        "draws_dtype": [StrOptions({"auto", "float32", "float64"})],
        "draws_memory_limit": [Interval(numbers.Real, 0, None, closed="neither"),
                             StrOptions({"auto"})],
    }

    _parameter_defaults = BASE_PARAMETERS
    __init__ = _keyword_init("BaseSGMCMC", BASE_PARAMETERS)

    # ------------------------------------------------------------ subclass API
    @abstractmethod
    def _make_glm(self, X, y):
        """Return the GLM for the encoded targets."""

    @abstractmethod
    def _encode_targets(self, y):
        """Validate and encode ``y`` as float64 (sets ``classes_`` etc.)."""

    @abstractmethod
    def _model_spec(self):
        """The fitted model (a ``_glm.GLM``, a registry entry with its
        settings): what the diagnostics, the export and the command line
        read, so that none of them needs to know the estimator classes."""

    def _validate_X_y(self, X, y, reset):
        return validate_data(
            self, X, y, reset=reset, accept_sparse="csr", dtype=[np.float64, np.float32],
            order="C", y_numeric=False, multi_output=False,
        )

    # -------------------------------------------------------------------- fit
    def fit(self, X, y, sample_weight=None):
        """Draw posterior samples of the coefficients.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Training data; float32 and float64 are sampled without a copy
            (C-contiguous dense, or CSR), memory-mapped arrays included.
        y : array-like of shape (n_samples,)
            Targets.
        sample_weight : array-like of shape (n_samples,), default=None
            Nonnegative frequency weights: datum i's log-likelihood is
            multiplied by ``w_i``, so the potential is
            ``alpha ||theta||^2 / 2 + sum_i w_i U_i`` and an integer weight
            gives the posterior of that many copies of the row (a zero weight,
            of the data without it).  Every gradient estimator stays unbiased
            for the weighted potential (the weight multiplies the datum's
            residual), and the set-up (mode, metric, noise model, evidence)
            uses it.  None, or all ones: unweighted (the same draws).

        Returns
        -------
        self : object
            Fitted estimator with ``coef_samples_`` and friends.

        Warns
        -----
        MCMCConvergenceWarning
            (a :class:`sklearn.exceptions.ConvergenceWarning`) when the draws
            fall short: the smallest bulk effective sample size is below its
            target, or a split R-hat is above 1.01.  The message names what to
            change.  A fit that reached both stays silent.

        Raises
        ------
        SamplingDivergedError
            When a chain diverged (no draws are kept).
        KeyboardInterrupt
            Ctrl-C stops the fit within milliseconds in any phase (set-up,
            warm-up, sampling), whatever a step costs and whatever ``thin``
            is; every chain thread has stopped when it propagates.  The draws
            of the interrupted call are discarded (the estimator then holds no
            posterior: a partial run has unadapted or too few draws), which a
            note on the exception says; a warm start keeps the chains it began
            from, so ``fit`` again with ``warm_start=True`` continues them.
        """
        self._validate_params()
        continuing = self.warm_start and hasattr(self, "_chain_states")
        if continuing:
            self._check_continuation()
        X, y = self._validate_X_y(X, y, reset=not continuing)
        y_enc = self._encode_targets(y)
        weights = self._row_weights(X, y, sample_weight)
        glm = self._make_glm(X, y_enc)
        # one BLAS thread: the chains run in threads of their own, and a
        # multithreaded BLAS on busy cores slows set-up by orders of magnitude
        t_fit = time.perf_counter()
        with threadpool_limits(limits=1, user_api="blas"):
            self._fit(X, y_enc, glm, continuing, weights)
        self._fit_seconds = time.perf_counter() - t_fit
        self._warn_if_unreliable()
        self._warn_if_thinned_for_memory()
        return self

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
            "draws (n_samples, target_ess).", UserWarning, stacklevel=3)

    def _row_weights(self, X, y, sample_weight):
        """The datum weights of this fit: ``sample_weight`` times the
        estimator's own per-row weights (:meth:`_target_weights`), as float64;
        None when every weight is 1 (the unweighted fit, bit for bit).
        Weights that leave no data (the posterior would be the prior) are
        refused."""
        target_weights = self._target_weights(y)
        if sample_weight is None and target_weights is None:
            return None
        w = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True,
                                 allow_all_zero_weights=True)
        if target_weights is not None:
            w = w * target_weights
        if not np.all(np.isfinite(w)):
            raise ValueError("sample_weight contains NaN or inf; pass finite nonnegative weights.")
        if w.size and not np.any(w > 0):
            raise ValueError("sample_weight is zero for every row, which leaves no data to "
                             "fit; give at least one row a positive weight.")
        return None if np.all(w == 1.0) else np.ascontiguousarray(w)

    def _target_weights(self, y):
        """Per-row weights the estimator derives from the targets (a
        classifier's ``class_weight``), or None."""
        return None

    def _check_continuation(self):
        previous = self._chain_request
        for name in ("n_chains", "sampler", "subsampling", "metric"):
            if previous[name] != getattr(self, name):
                raise ValueError(
                    f"warm_start=True continues the previous {name}={previous[name]!r} "
                    f"chains; {name}={getattr(self, name)!r} differs. Set "
                    f"{name}={previous[name]!r} or warm_start=False.")

    def _fit(self, X, y, glm, continuing, sample_weight=None):
        """The fit after validation: context → set-up (mode, metric, steps)
        → chains → store."""
        t_start = time.perf_counter()       # the progress's final line counts the set-up
        ctx = self._fit_context(X, y, glm, sample_weight)
        try:
            setup, states = self._set_up(ctx, continuing)
        except KeyboardInterrupt as exc:    # as in the chains: nothing of this call is kept
            self._discard_posterior(keep_chains=continuing)
            note_interrupt(exc, type(self).__name__, continuing)
            raise
        pool = ChainPool(X, y, self._chain_spec(ctx, glm, setup, sample_weight), states,
                         n_jobs=self.n_jobs, t_start=t_start)
        plan = self._plan(ctx, setup, continuing)
        plan.retune = self._retuner(setup, pool)
        self._extend_limits = None
        if self.max_passes == "auto" and self.max_time is None:
            self._extend_limits = (AUTO_EXTEND_SECONDS, AUTO_EXTEND_FACTOR)
            plan.extend_until = t_start + AUTO_EXTEND_SECONDS
            plan.extend_passes = AUTO_EXTEND_FACTOR * plan.max_passes
        outcome = self._run_chains(pool, plan, setup, continuing)
        if (self.step_size != "auto" and setup.metric["kind"] == "identity"
                and SAMPLER_MODULES[setup.sampler].IDENTITY_STEP_CHECK
                and not setup.metropolis):
            self._identity_step_error(ctx, setup, pool)
        self._store(ctx, setup, pool, plan, outcome)

    def _fit_context(self, X, y, glm, sample_weight):
        """The :class:`FitContext` of this fit, its settings typed, with
        ``alpha`` resolved (ridge's ``alpha="auto"``, by the hook)."""
        batch = DEFAULT_BATCH_SIZE if self.batch_size == "auto" else self.batch_size
        alpha = 1.0 if isinstance(self.alpha, str) else float(self.alpha)
        settings = FitSettings(
            temperature=float(self.temperature), access=self.access, step_size=self.step_size,
            snapshot_period=self.snapshot_period, pv_threshold=self.pv_threshold,
            pilot_steps=self.pilot_steps, n_leapfrog=self.n_leapfrog, inv_mass=self.inv_mass)
        ctx = FitContext(X, y, glm, alpha, bool(self.fit_intercept),
                         int(min(batch, X.shape[0])), sample_weight, settings=settings)
        self._fit_context_hook(ctx)
        self.alpha_ = float(ctx.alpha)
        return ctx

    def _set_up(self, ctx, continuing):
        """``(FitSetup, chain states)``: resolved afresh (mode, metric, step,
        starting points), or those of the chains a warm start continues."""
        if continuing:
            if hasattr(self, "mode_"):
                ctx.adopt_mode(self.mode_)   # the mode does not move
            return self._fit_setup, self._chain_states
        seed = check_random_state(self.random_state).randint(np.iinfo(np.int32).max)
        seeds = np.random.SeedSequence(seed).spawn(self.n_chains + 1)
        # the set-up's own randomness (pilot chains) never shares a chain's stream
        ctx.settings.pilot_seed = seeds[-1]
        setup = self._resolve_setup(ctx)
        starts = self._start_points(ctx, setup, seeds)
        setup.notes.update(self._divergence_bounds(ctx, setup, starts))
        return setup, [initial_state(s, z0) for s, z0 in zip(seeds[:self.n_chains], starts)]

    def _chain_spec(self, ctx, glm, setup, sample_weight):
        """What every chain is built from (:class:`ChainSpec`, picklable)."""
        return ChainSpec(
            model=glm.name, n_outputs=glm.n_outputs, model_params=glm.params,
            fit_intercept=bool(self.fit_intercept), alpha=float(ctx.alpha),
            sampler=setup.sampler, sampler_config=setup.sampler_config,
            subsampling=setup.subsampling, subsampling_config=setup.subsampling_config,
            ewsg_chain_length=(int(self.ewsg_chain_length)
                               if SUBSAMPLINGS[setup.subsampling].index_chain else 0),
            ewsg_x=EWSG_X_MODES[self.ewsg_x], metric=setup.metric,
            metropolis=setup.metropolis, max_abs_z=setup.notes.get("max_abs_z", np.inf),
            bounds=setup.notes.get("bounds"), verbose=int(self.verbose),
            sample_weight=sample_weight,
            lazy=bool(setup.notes.get("lazy", False)))

    def _run_chains(self, pool, plan, setup, continuing):
        """Warm-up and sampling rounds (:mod:`._sampling._schedule`); a
        divergence or an interrupt discards the draws (a warm start keeps
        the chains it began from)."""
        try:
            with pool.session():
                return _schedule.run(pool, plan, continuing)
        except _schedule.ChainsDiverged as exc:
            self._discard_posterior(keep_chains=continuing)
            raise self._divergence_error(exc, setup) from None
        except KeyboardInterrupt as exc:
            # every chain thread has stopped (ChainPool); the note says what is left
            self._discard_posterior(keep_chains=continuing)
            note_interrupt(exc, type(self).__name__, continuing)
            raise

    # ---------------------------------------------------------------- set-up
    def _resolve_setup(self, ctx):
        """Every ``"auto"`` setting as a number or a name (see the user guide,
        "What the defaults do")."""
        n, T = ctx.n, float(self.temperature)
        self._check_combinations()
        self._check_parameters_act(self.sampler, self.subsampling)  # before the set-up
        kind = self._metric_kind(ctx)
        ctx.resolved.metric_kind = kind
        metric_cfg = Metric(ctx.dim).get_config()
        factor = None
        if kind != "identity":
            center, factor = ctx.laplace_metric(kind, T)
            metric_cfg = Metric(ctx.dim, kind, center, factor, 1.0 / T, 1.0).get_config()
        noise_cache = {}

        def v1(name):
            """The estimator's one-row noise in the whitened metric (lazy: set-up passes)."""
            if name not in noise_cache:
                if ctx.resolved.posterior_row_cov is None:
                    Q = ctx.metric_row_covariances(kind, factor)
                    ctx.resolved.posterior_row_cov = Q
                    ctx.resolved.metric_row_cov = Q
                noise_cache[name] = noise_per_row(ctx, SUBSAMPLINGS[name], factor, kind, 1.0 / T)
            return noise_cache[name]

        # sparse rows, few touched a step: lazy steps cost O(nnz), and a
        # step then costs its rows alone (no O(dim) overhead to amortise)
        lazy = self._lazy_candidate(ctx, kind)
        overhead = 1.0 if lazy else self._step_overhead(ctx, kind)
        subsampling, notes = self._resolve_subsampling(ctx, kind, v1, overhead, lazy)
        exact = not SUBSAMPLINGS[subsampling].stochastic
        lazy = lazy and subsampling in LAZY_SUBSAMPLINGS and (
            subsampling != "uniform" or self.access == "random")
        if not lazy:
            overhead = self._step_overhead(ctx, kind)
        sampler = self.sampler
        if sampler == "auto":
            if kind == "identity":
                sampler = "sgld"
            else:
                sampler = "sghmc-leapfrog" if exact else "baoab"
        lazy = lazy and sampler in LAZY_SAMPLERS
        self._check_parameters_act(sampler, subsampling)
        if (SUBSAMPLINGS[subsampling].index_chain and self.ewsg_x == "momentum-stop"
                and not SAMPLERS[sampler].has_momentum):
            raise ValueError(
                f"ewsg_x='momentum-stop' assumes r_(k+1) = 0 and needs a sampler with "
                f"momentum; sampler={sampler!r} has none. Use ewsg_x='auto' or "
                "sampler='sghmc'.")
        if self.metropolis == "auto":
            metropolis = exact and SAMPLERS[sampler].metropolis
        else:
            metropolis = bool(self.metropolis)
            if metropolis and not (exact and SAMPLERS[sampler].metropolis):
                raise ValueError(
                    f"metropolis=True needs exact gradients (subsampling='full') and a "
                    f"sampler with a reversible proposal "
                    f"({sorted(s for s in SAMPLERS if SAMPLERS[s].metropolis)}); got "
                    f"sampler={sampler!r}, subsampling={subsampling!r}. Use metropolis='auto'.")
        theta0 = ctx.mode() if kind != "identity" else self._calibration_point(ctx)
        step, friction = self.step_size, self.friction
        batch = None if self.batch_size == "auto" else int(min(self.batch_size, n))
        iat, predicted_error = np.nan, np.nan
        if kind != "identity" and metropolis:
            rule = SAMPLER_MODULES[sampler].METROPOLIS
            h_start, trajectory, metric_cfg = self._metropolis_start(
                ctx, kind, metric_cfg, rule)
            step = h_start if step == "auto" else float(step)
            if trajectory is not None:
                notes["trajectory"] = trajectory     # length and jitter
            # iterations per effective draw, for sizing the windows and the first
            # round (then measured)
            iat = rule.iterations_per_draw
            notes["max_step"] = rule.max_step
        elif kind != "identity":
            notes["noise_per_row"] = v1(subsampling) if not exact else 0.0
            settings = _error_model.choose(
                sampler, notes["noise_per_row"], n, step_size=step,
                batch_size=batch if batch is not None else "auto", friction=friction,
                overhead_rows=overhead)
            step, friction = settings.step_size, settings.friction
            if batch is None and not exact:
                batch = settings.batch_size
            iat = settings.iat
            predicted_error = settings.variance_error
            if predicted_error > STEP_ERROR_WARN and self.step_size != "auto":
                # the step that would keep the error in budget (warned after the fit)
                advice = _error_model.choose(
                    sampler, notes["noise_per_row"], n, friction=friction,
                    batch_size=batch if batch is not None else "auto",
                    overhead_rows=overhead)
                if advice.variance_error <= _error_model.VARIANCE_ERROR * (1 + 1e-9):
                    notes["advised_step"] = advice.step_size
        ctx.batch_size = int(min(batch if batch is not None else DEFAULT_BATCH_SIZE, n))
        shared = self._shared_start(ctx, kind)
        if shared is not None:  # every chain starts here: one snapshot table for all
            ctx.resolved.shared_start = shared
        noise = GradientNoise(ctx, SUBSAMPLINGS[subsampling], theta0)
        sub_config = SUBSAMPLINGS[subsampling].prepare(ctx)
        samp_config = SAMPLERS[sampler].prepare(ctx, theta0, step, friction, noise, T)
        samp_config["metropolis"] = metropolis
        if "trajectory" in notes:
            samp_config.update(notes["trajectory"])
        t_dyn = samp_config.get("temperature", T)
        momentum_scale = np.sqrt(
            t_dyn * SAMPLER_MODULES[sampler].momentum_variance_scale(samp_config))
        # the batch is known now: lazy where it still touches few coordinates
        notes["lazy"] = lazy = lazy and self._touches_few(ctx, ctx.batch_size)
        if lazy:
            # scales on a grid: lazy coordinates of a class share their k-step laws
            metric_cfg = on_lazy_grid(metric_cfg)
        return FitSetup(sampler, subsampling, metric_cfg, metropolis, samp_config, sub_config,
                        ctx.batch_size, float(iat), float(predicted_error), momentum_scale,
                        notes)

    def _metropolis_start(self, ctx, kind, metric_cfg, rule):
        """``(step, trajectory, metric)``: where dual averaging starts the
        step of a Metropolis-adjusted dynamics in a whitened metric (its
        :class:`MetropolisRule` ``rule``; ``h0`` its start step), HMC's
        trajectory (None: the reference Gaussian's quarter period; else a
        dict of the leapfrog's ``trajectory`` length and ``jitter``),
        and the metric's config (a diagonal one may gain low-rank
        directions).

        A dense Laplace metric leaves a remainder close to zero (the split
        integrators move the Gaussian part exactly): ``h0`` and a quarter
        period suit every dimension.  A diagonal one leaves the
        correlations: the whitened precision ``A = D H D / T`` has
        eigenvalues on both sides of 1 (10^4 text features: 0.2 to 12).
        Lanczos on Hessian-vector products (:mod:`._spectrum`, O(nnz) each,
        no dim x dim matrix) finds its extreme eigenpairs, and

        * the converged ones far from 1 (at most ``LOWRANK_DIRECTIONS`` at
          each end) become a low-rank metric (``metric="auto"``): each
          direction scaled by ``lambda^(-1/2)``, so that A is 1 there.  A
          step then costs O(dim k) more, against the gradient's O(nnz);
        * the extremes left, ``lambda_min`` and ``lambda_max``, set the step:
          the leapfrog error of the stiffest direction grows like ``(h^2
          lambda_max)^2`` and a trajectory's energy error sums ``dim`` such
          terms, so the acceptance falls to zero at ``h0`` from a few
          thousand parameters on (none accepted at 1.3 there).  The start is
          ``h0 / sqrt(lambda_max) (MAX_DENSE_METRIC / dim)^(1/4)`` (HMC's
          d^(-1/4) scaling), which dual averaging refines;
        * and the trajectory: the slowest direction turns by
          ``sqrt(lambda_min) t``, so a quarter period of it is ``(pi / 2) /
          sqrt(lambda_min)`` (at most ``MAX_TRAJECTORY_FACTOR`` quarter
          periods of the reference).  On the text posterior a quarter period
          of the slowest direction cut the passes per effective draw of the
          slowest coefficient 3.8x (228 to 60) in the diagonal metric.
        """
        if kind != "diagonal":
            return rule.start_step, None, metric_cfg
        T = float(self.temperature)
        D = np.asarray(metric_cfg["factor"], dtype=np.float64)
        weights = ctx.hessian_row_weights(ctx.mode(), full=True)

        def whitened_hessian(v):
            ctx.n_grad_evals += ctx.n
            return D * ctx.hessian_vector(weights, D * v) / T

        lowrank = self.metric == "auto"
        if lowrank:
            values, vectors, residuals, ritz_weights = extreme_eigenpairs(whitened_hessian, ctx.dim)
            # k directions cost 4 dim k flops a step: at most about the
            # gradient's 2 nnz (and at least 8)
            nnz = ctx.X.nnz if hasattr(ctx.X, "nnz") else ctx.X.size
            max_rank = max(8, int(2 * nnz * ctx.glm.n_outputs / (4 * ctx.dim)))
            chosen = _lowrank_directions(values, residuals, max_rank)
            if _dense_pays(ctx, values, ritz_weights, chosen, nnz):
                ctx.resolved.metric_kind = "dense"    # what the pieces after this see
                center, factor = ctx.laplace_metric("dense", T)
                metric_cfg = Metric(ctx.dim, "dense", center, factor, 1.0 / T, 1.0).get_config()
                shrink = min(1.0, (MAX_DENSE_METRIC / ctx.dim) ** 0.25)
                return float(rule.start_step * shrink), None, metric_cfg
            rest = np.delete(values, chosen)
            lam_min = float(rest.min()) if rest.size else 1.0
            lam_max = float(rest.max()) if rest.size else 1.0
            if chosen.size:
                metric_cfg = dict(metric_cfg, kind="lowrank", basis=vectors[chosen],
                                  basis_scale=1.0 / np.sqrt(values[chosen]))
        else:
            lam_min, lam_max = extreme_eigenvalues(whitened_hessian, ctx.dim)
        shrink = min(1.0, (MAX_DENSE_METRIC / ctx.dim) ** 0.25) / np.sqrt(max(lam_max, 1.0))
        trajectory = None
        if rule.trajectory and self.n_leapfrog == "auto":
            trajectory = trajectory_lengths(lam_min)
        return float(rule.start_step * min(shrink, 1.0)), trajectory, metric_cfg

    def _identity_step_error(self, ctx, setup, pool):
        """The predicted variance error of a hand-set step of Euler SGLD or
        pSGLD in the identity metric (``setup.predicted_variance_error``, and
        ``notes["advised_step"]``).

        On the Laplace approximation, in the whitened coordinates
        ``z = L^-1 (theta - mode)`` (``L L^T = T H^-1``), a step with
        preconditioner ``G`` (1 for SGLD; pSGLD's RMSprop diagonal, averaged
        over the chains at the end of the run) is
        ``z' = (I - h M) z - h M eps + sqrt(2 h M) xi`` with
        ``M = T L^-1 G L^-T``, whose eigenvalues are those of
        ``G^1/2 H G^1/2``.  With gradient noise ``eps`` of variance ``v``
        per direction (the estimator's ``v1 / b``), every eigen-direction
        ``mu`` has the stationary variance ``(2 + h mu v) / (2 - h mu)``:
        the relative error ``k (1 + v) / (2 - k)`` with ``k = h mu_max``
        (unstable for ``k >= 2``).

        A diagnostic after the draws, like ESS: its passes (a few dozen at
        most, at any dim) are not counted in ``n_grad_evals_``, and nothing it
        computes reaches the chains.
        """
        with ctx.uncounted():
            self._predict_identity_step_error(ctx, setup, pool)

    def _predict_identity_step_error(self, ctx, setup, pool):
        """``mu = lambda_max(G^1/2 H G^1/2)`` and the noise ``v`` of
        :meth:`_identity_step_error`, by one of two routes.

        Dense (where it costs at most ``STEP_CHECK_DENSE_PASSES`` passes or
        ``STEP_CHECK_DENSE_FLOPS`` operations, the mode search included
        where the fit did not need the mode: small problems, as before): H the
        Hessian at the mode, ``v`` the estimator's one-row noise in the dense
        Laplace metric, exact eigenvalues.

        Iterative (every other fit, at any dim; passes only, no dense
        dim x dim matrix, no mode search): H the Hessian at the mode if the
        fit found it, else at the chains' calibration point (the start for
        ``init="zeros"`` or an array; for the logistic model the curvature
        there is at most the global bound 1/4 per datum, so ``mu`` is then
        an upper estimate); ``mu`` by Lanczos on Hessian-vector products.
        ``v`` approximates the whitened noise by the diagonal Laplace metric
        ``D = sqrt(T / diag H)`` at the same point: the rows' variances
        ``x_i^T D^2 x_i`` for the dense ``x_i^T S x_i``, and the largest
        noise variance along a direction whitened by D instead of L (exact
        where H is diagonal; where the features are correlated in H the two
        differ, by 13% on a 5-feature logistic test), Lanczos on passes.
        About 10-30 passes in all.
        """
        T = float(self.temperature)
        spec = SUBSAMPLINGS[setup.subsampling]
        g = SAMPLER_MODULES[setup.sampler].identity_preconditioner(
            setup.sampler_config, pool.states, ctx.dim)
        v = 0.0
        # the dense route's work: two dense products of the rows (O(nnz_i^2)
        # a row and output pair) and O(dim^3) algebra, and the mode search
        # (about 8 such Hessians) where the fit did not need the mode
        X, K = ctx.X, ctx.glm.n_outputs
        lens = (np.diff(X.indptr).astype(np.float64) + int(ctx.fit_intercept)
                if hasattr(X, "indptr") else np.full(X.shape[0], float(ctx.dext)))
        hessian = K * K * float(lens @ lens) + float(ctx.dim) ** 3
        work = 2.0 * hessian + 2.0 * float(ctx.dim) ** 3
        if not ctx.has_mode():
            work += 8.0 * hessian
        elif not ctx.has_mode_hessian():     # a mode without its Hessian (warm start)
            work = np.inf
        if (work <= STEP_CHECK_DENSE_PASSES * K * max(float(lens.sum()), 1.0)
                or work <= STEP_CHECK_DENSE_FLOPS):
            center, factor = ctx.laplace_metric("dense", T)
            H = ctx.hessian_at(center)
            mu = float(np.linalg.eigvalsh(g[:, None] * H * g[None, :])[-1])
            if spec.stochastic:
                if ctx.resolved.posterior_row_cov is None:
                    ctx.resolved.posterior_row_cov = ctx.metric_row_covariances("dense", factor)
                v = noise_per_row(ctx, spec, factor, "dense", 1.0 / T) / max(setup.batch_size, 1)
        else:
            center = ctx.mode() if ctx.has_mode() else self._calibration_point(ctx)
            mu = ctx.hessian_max_eigenvalue(center, g, tol=STEP_CHECK_TOL)
            if spec.stochastic:
                ctx.resolved.noise_tol = STEP_CHECK_TOL
                ctx.resolved.linearised_noise = True
                if not ctx.has_mode():
                    ctx.resolved.noise_center = center
                D = np.sqrt(T / ctx.hessian_diag(center))
                ctx.resolved.posterior_row_cov = ctx.metric_row_covariances("diagonal", D)
                v = noise_per_row(ctx, spec, D, "diagonal", 1.0 / T) / max(setup.batch_size, 1)
        kappa = float(setup.sampler_config["step_size"]) * mu
        error = kappa * (1.0 + v) / (2.0 - kappa) if kappa < 2.0 else np.inf
        setup.predicted_variance_error = float(error)
        budget = _error_model.VARIANCE_ERROR
        setup.notes["advised_step"] = 2.0 * budget / ((1.0 + v + budget) * mu)

    def _divergence_bounds(self, ctx, setup, starts):
        """What a chain must stay within to count as not diverged.

        Every parameter within ``DIVERGENCE_SD`` posterior sds of the mode,
        with the sds of the Laplace approximation where they are at hand (a
        dense metric's factor, or a Hessian at the mode already computed) and
        otherwise the bound ``sqrt(T / alpha)`` (the likelihoods are
        log-concave, so the posterior is ``alpha / T``-strongly log-concave
        and no marginal sd exceeds the prior's); in a dense metric also every
        ``|z_j|`` within ``DIVERGENCE_Z``.  A diagonal metric's ``z`` is not
        standardised (correlations), so only an overflow-like excursion counts
        there.  The bounds widen to twice the farthest start, so that a chain
        started far out (``init``) may travel in, and tenfold for a
        Metropolis-adjusted chain (exact: a far excursion is the posterior's
        own tail, and a trajectory that blows up is rejected).  Without a mode
        only non-finite states count.
        """
        out = {}
        T = float(self.temperature)
        widen = DIVERGENCE_EXACT_FACTOR if setup.metropolis else 1.0
        metric = Metric.from_config(setup.metric)
        kind = setup.metric["kind"]
        z0 = np.abs(np.asarray(starts)).max() if len(starts) else 0.0
        if kind == "dense":
            F = np.asarray(setup.metric["factor"])
            center, sd = np.asarray(setup.metric["center"]), np.sqrt(np.einsum("ij,ij->i", F, F))
            out["max_abs_z"] = max(widen * DIVERGENCE_Z, 2.0 * z0)
        elif kind in ("diagonal", "lowrank"):
            out["max_abs_z"] = max(DIVERGENCE_Z_DIAGONAL, 2.0 * z0)
            return out
        elif ctx.has_mode():
            center = ctx.mode()
            if ctx.has_mode_hessian():
                sd = np.sqrt(T * np.diag(ctx.laplace_cov(center)))
            else:
                sd = np.full(ctx.dim, np.sqrt(T / ctx.alpha))
        else:
            return out
        thetas = metric.py_to_theta(np.asarray(starts))
        farthest = np.max(np.abs(thetas - center) / sd) if len(starts) else 0.0
        out["bounds"] = (center, sd, max(widen * DIVERGENCE_SD, 2.0 * farthest))
        return out

    # parameter -> (its default, the samplers / subsamplings it acts with): the
    # owners are the algorithms' specs (_sampling/_specs.py)
    _SAMPLER_PARAMETERS = sampler_owners()
    _SUBSAMPLING_PARAMETERS = estimator_owners(BASE_PARAMETERS)

    def _check_parameters_act(self, sampler, subsampling):
        """Every parameter set away from its default acts on the fit, or the
        fit is refused (a setting silently ignored is a wrong answer given
        quietly).  ``sampler`` / ``subsampling``: the resolved names, or
        "auto" for a name not yet resolved (then nothing is checked for it)."""
        problems = (
            ineffective_settings(self._SAMPLER_PARAMETERS, self, "sampler", sampler)
            + ineffective_settings(self._SUBSAMPLING_PARAMETERS, self, "subsampling",
                                   subsampling))
        if (subsampling != "auto" and self.pilot_steps != 500
                and self.pv_threshold != "pilot"):
            problems.append(f"pilot_steps={self.pilot_steps!r} has no effect unless "
                            "pv_threshold='pilot'")
        if subsampling == "full" and self.batch_size != "auto":
            problems.append(f"batch_size={self.batch_size!r} has no effect with "
                            "subsampling='full' (every row, every step)")
        if problems:
            what = [f"sampler={sampler!r}" if sampler != "auto" else "",
                    f"subsampling={subsampling!r}" if subsampling != "auto" else ""]
            resolved = " and ".join(w for w in what if w)
            raise ValueError(
                "; ".join(problems) + ". Leave the parameter at its default, or choose a "
                f"sampler / subsampling it applies to (this fit uses {resolved}).")

    def _check_combinations(self):
        sub = self.subsampling
        if self.access != "random" and sub != "auto" and sub not in ACCESS_SUBSAMPLINGS:
            raise ValueError(
                f"access={self.access!r} does not apply to subsampling={sub!r}, "
                "which draws from its own weights. Use access='random' or one of "
                f"subsampling in {sorted(ACCESS_SUBSAMPLINGS)}.")
        if sub != "auto" and SUBSAMPLINGS[sub].index_chain and self.access == "cyclic":
            raise ValueError(f"subsampling={sub!r}, access='cyclic': " + EWSG_CYCLIC_MESSAGE)

    def _metric_kind(self, ctx):
        sampler_whitens = self.sampler == "auto" or SAMPLERS[self.sampler].whitened
        if self.metric == "auto":
            if not sampler_whitens:
                return "identity"
            return "dense" if ctx.dim <= MAX_DENSE_METRIC else "diagonal"
        if self.metric != "identity" and not sampler_whitens:
            raise ValueError(
                f"sampler={self.sampler!r} is preconditioned by its own RMSprop metric, as "
                f"its paper defines it; metric={self.metric!r} does not apply. Use "
                "metric='auto' (or 'identity').")
        return self.metric

    def _retuner(self, setup, pool):
        """After a divergence with an automatic step: halve it, the batch
        kept; None when the user set the step, or for a Metropolis
        correction (which rejects instead of diverging).

        Why the batch is kept: a divergence says the error model understated
        the gradient noise somewhere, often one row whose term, divided by
        its ``b p_i``, throws the chain out.  That kick is ``h / b`` times the
        row's term: halving the batch with the step (the error model's own
        trade) would leave it as it was, and every halving would diverge
        again (breast cancer, SGHMC-CV-PS, before the tilted noise model)."""
        if self.step_size != "auto" or setup.metropolis:
            return None

        def retune():
            h = 0.5 * float(pool.spec.sampler_config["step_size"])
            setup.sampler_config = dict(setup.sampler_config, step_size=h)
            return h
        return retune

    def _row_flops(self, ctx):
        """Floating-point work of one per-datum gradient (about 2 x nnz x K)."""
        X = ctx.X
        nnz = X.nnz / max(X.shape[0], 1) if hasattr(X, "nnz") else X.shape[1]
        return 2.0 * max(nnz, 1.0) * ctx.glm.n_outputs

    def _touches_few(self, ctx, batch):
        """Whether a minibatch of ``batch`` CSR rows touches fewer than
        ``1 / LAZY_DENSITY`` of the coordinates (lazy steps then pay)."""
        X = ctx.X
        if not hasattr(X, "nnz"):
            return False
        nnz = X.nnz / max(X.shape[0], 1)
        return LAZY_DENSITY * min(batch, ctx.n) * max(nnz, 1.0) * ctx.glm.n_outputs < ctx.dim

    def _lazy_candidate(self, ctx, kind):
        """Whether the chains can take lazy O(nnz) steps (:mod:`._sampling._lazy`):
        CSR rows, an identity or diagonal metric, a sampler and estimator with
        a lazy kernel (or "auto") without a Metropolis correction, and a
        default-size minibatch touching few coordinates."""
        if kind not in ("identity", "diagonal") or self.metropolis is True:
            return False
        if self.sampler not in ("auto",) + LAZY_SAMPLERS:
            return False
        if self.subsampling not in ("auto",) + LAZY_SUBSAMPLINGS:
            return False
        return self._touches_few(
            ctx, DEFAULT_BATCH_SIZE if self.batch_size == "auto" else self.batch_size)

    def _step_overhead(self, ctx, kind):
        """A step's cost besides its rows, in row evaluations: the metric's
        products (O(dim^2) dense, O(dim) otherwise) against one row's nnz."""
        X = ctx.X
        nnz = X.nnz / max(X.shape[0], 1) if hasattr(X, "nnz") else X.shape[1]
        per_row = max(nnz, 1.0) * ctx.glm.n_outputs
        work = ctx.dim * ctx.dim if kind == "dense" else 4.0 * ctx.dim
        return work / per_row

    def _resolve_subsampling(self, ctx, kind, v1, overhead, lazy=False):
        """``subsampling="auto"``: full gradients when a pass is cheap, a
        control-variate scheme with preferential rows in the metric when
        subsampling pays (the error model's cost per effective draw)."""
        notes = {}
        if self.subsampling != "auto":
            return self.subsampling, notes
        if kind == "identity":
            return "uniform", notes
        if self.batch_size != "auto":   # a minibatch size asks for minibatches
            return "cv-preferential", notes
        n = ctx.n
        sampler = "baoab" if self.sampler in ("auto", "sghmc-leapfrog") else self.sampler
        settings = _error_model.choose(
            sampler, v1("cv-preferential"), n, step_size=self.step_size,
            batch_size=self.batch_size, friction=self.friction, overhead_rows=overhead)
        cost_sg = settings.cost_per_draw
        adjustable = self.sampler == "auto" or (SAMPLERS[self.sampler].metropolis
                                                 and self.metropolis is not False)
        if adjustable:
            cost_full = FULL_PASSES_PER_DRAW * (n + overhead)
        else:  # the unadjusted dynamics with exact gradients: the error model's cost
            exact = _error_model.choose(sampler, 0.0, n, step_size=self.step_size,
                                        friction=self.friction, overhead_rows=overhead)
            cost_full = (n + overhead) * exact.gradients_per_step * exact.iat
        full_flops = cost_full * self._target_ess(ctx.dim) * self._row_flops(ctx)
        notes.update(cost_subsampled=cost_sg, cost_full=cost_full)
        # exact gradients buy a Metropolis correction (exact draws): worth it
        # whenever the whole fit is cheap; otherwise the cheaper scheme wins
        if (adjustable and full_flops <= CHEAP_FIT_FLOPS) \
                or cost_full <= FULL_GRADIENT_PREFERENCE * cost_sg:
            return "full", notes
        return "cv-preferential", notes

    def _target_ess(self, dim):
        return _schedule.auto_target_ess(dim) if self.target_ess == "auto" \
            else float(self.target_ess)

    def _calibration_point(self, ctx):
        """Where the identity metric's automatic step is calibrated: the mode
        for chains that start near it (or at independent prior draws, which
        reach it), else the start point itself."""
        if isinstance(self.init, str):
            if self.init in ("mode", "auto", "laplace", "prior"):
                return ctx.mode()
            return np.zeros(ctx.dim)
        return self._init_array(ctx)

    def _init_array(self, ctx):
        theta = np.asarray(self.init, dtype=np.float64).ravel()
        if theta.shape != (ctx.dim,):
            raise ValueError(
                f"init has {theta.size} values; this model has {ctx.dim} parameters "
                f"({ctx.glm.n_outputs} output(s) x {ctx.dext} coefficients incl. intercept). "
                "Pass an array of that size, or init='auto'.")
        if not np.all(np.isfinite(theta)):
            raise ValueError("init contains NaN or inf; pass finite starting values.")
        return theta

    def _shared_start(self, ctx, kind):
        """The parameters every chain starts from, when they share one."""
        init = self.init
        if isinstance(init, str) and init == "auto":
            init = "laplace" if kind != "identity" else "mode"
        if isinstance(init, str):
            if init == "mode":
                return ctx.mode()
            return np.zeros(ctx.dim) if init == "zeros" else None
        return self._init_array(ctx)

    def _start_points(self, ctx, setup, seeds):
        """Every chain's start, in the metric's coordinates."""
        metric = Metric.from_config(setup.metric)
        init = self.init
        if isinstance(init, str) and init == "auto":
            init = "laplace" if metric.whitened else "mode"
        rngs = [np.random.default_rng(s.spawn(1)[0]) for s in seeds[:self.n_chains]]
        if isinstance(init, str) and init == "laplace":
            # overdispersed draws of the Laplace approximation (split R-hat
            # then sees chains that have not converged)
            # (normals truncated at 3: a start is at most 6 sds out, well
            # inside the divergence bounds whatever the dimension)
            xis = [np.clip(r.standard_normal(ctx.dim), -3.0, 3.0) for r in rngs]
            if metric.whitened:
                return [OVERDISPERSION * xi for xi in xis]
            F = np.linalg.cholesky(ctx.laplace_cov(ctx.mode()) * self.temperature)
            thetas = [ctx.mode() + OVERDISPERSION * F @ xi for xi in xis]
        elif isinstance(init, str) and init == "prior":
            thetas = [r.standard_normal(ctx.dim) / np.sqrt(ctx.alpha) for r in rngs]
        elif isinstance(init, str):
            theta = ctx.mode() if init == "mode" else np.zeros(ctx.dim)
            thetas = [theta] * self.n_chains
        else:
            thetas = [self._init_array(ctx)] * self.n_chains
        return [metric.py_to_z(t) for t in thetas]

    def _plan(self, ctx, setup, continuing):
        metric = Metric.from_config(setup.metric)
        iat = setup.iat if np.isfinite(setup.iat) else 10.0
        thin = self.thin
        if thin == "auto":
            # an effective draw per about three stored draws: thinner storage
            # loses little and keeps memory in proportion to the ESS
            thin = max(1, int(iat // 3)) if self.n_samples == "auto" else 1
        adapt_step = setup.metropolis and self.step_size == "auto"
        n_warmup = self.n_warmup
        if n_warmup == "auto" and not metric.whitened and not continuing:
            n_warmup = 1000 if not setup.metropolis else 150
        max_passes = self.max_passes
        auto_seconds = None
        if max_passes == "auto":
            # more parameters mix slower in a diagonal metric and need more
            # effective draws: the budget grows with them past the dense metric
            growth = min(2.0 * max(1.0, ctx.dim / MAX_DENSE_METRIC) ** 2, AUTO_BUDGET_GROWTH)
            flops = AUTO_BUDGET_FLOPS * growth
            max_passes = float(np.clip(flops / (ctx.n * self._row_flops(ctx)),
                                       *AUTO_BUDGET_PASSES))
            if self.max_time is None:
                # the same budget in seconds, at the rate its flops assume
                # (of the pass budget, where its floor raised it above the flops)
                auto_seconds = max(flops, max_passes * ctx.n * self._row_flops(ctx)) \
                    / AUTO_BUDGET_FLOP_RATE
        self.max_passes_ = max_passes
        self._auto_seconds = auto_seconds
        return _schedule.Plan(
            n_warmup=n_warmup, n_samples=self.n_samples, thin=int(thin),
            target_ess=self._target_ess(ctx.dim), max_passes=max_passes,
            max_time=self.max_time, auto_seconds=auto_seconds, iat=iat, n_rows=ctx.n,
            dim=ctx.dim,
            adapt_step=adapt_step and not continuing,
            target_accept=_schedule.MH_TARGET_ACCEPT.get(setup.sampler, 0.8),
            max_step=setup.notes.get("max_step", np.inf),
            # a low-rank metric comes from the Hessian's extreme directions
            # at set-up; its warm-up adapts the step only (a window of draws
            # at 10^4 parameters would cost more than it could correct)
            # nor does a dense one above MAX_DENSE_METRIC parameters
            adapt_metric=(metric.whitened and metric.kind != "lowrank" and not continuing
                          and not (metric.kind == "dense" and ctx.dim > MAX_DENSE_METRIC)),
            momentum_scale=setup.momentum_scale, setup_evals=ctx.n_grad_evals,
            draws_dtype=resolve_dtype(self.draws_dtype, ctx.dim),
            max_draws_bytes=resolve_budget(self.draws_memory_limit))

    # ---------------------------------------------------------------- results
    def _divergence_error(self, exc, setup):
        bad = [(c, r) for c, r in enumerate(exc.results) if r.diverged]
        c, r = bad[0]
        h = r.step_size
        bounds = setup.notes.get("bounds")
        what = ("non-finite parameters" if r.reason == "non-finite" else
                f"parameters more than {bounds[2]:.0f} posterior sds from the mode"
                if bounds is not None else "parameters implausibly far from the mode")
        return SamplingDivergedError(
            f"Chain {c} diverged ({what}) during {exc.phase}, {r.n_steps_done} to "
            f"{r.n_steps_done + CHECK_EVERY} steps into that round, with "
            f"sampler={setup.sampler!r}, subsampling={setup.subsampling!r} and step_size={h:.3g}. Pass a smaller step_size, e.g. step_size={h / 10:.3g} "
            "(or leave step_size='auto', or standardise X). No samples were kept.")

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
        self._fit_setup = setup
        self._chain_request = {name: getattr(self, name)
                               for name in ("n_chains", "sampler", "subsampling", "metric")}
        self.sampler_ = setup.sampler
        self.subsampling_ = setup.subsampling
        self.metric_ = Metric.from_config(pool.spec.metric).kind
        self.lazy_ = bool(pool.spec.lazy)
        self.metropolis_ = bool(setup.metropolis)
        setup.metric = pool.spec.metric       # adapted during warm-up: continue with it
        steps = outcome.step_sizes
        if steps.size and np.ptp(steps) > 0:   # adapted per chain: their geometric mean
            step = float(np.exp(np.mean(np.log(steps))))
        else:
            step = float(steps[0]) if steps.size else float(setup.sampler_config["step_size"])
        self.step_size_ = step
        if setup.metropolis:
            # warm starts continue with the adapted step
            setup.sampler_config = dict(setup.sampler_config, step_size=step)
            self.acceptance_rate_ = float(outcome.accept_rate)
        elif hasattr(self, "acceptance_rate_"):
            del self.acceptance_rate_
        if "friction" in setup.sampler_config:
            self.friction_ = float(setup.sampler_config["friction"])
        elif hasattr(self, "friction_"):
            del self.friction_  # left by an earlier fit with momentum
        self.batch_size_ = setup.batch_size
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
            warnings.warn(" ".join(messages), MCMCConvergenceWarning, stacklevel=3)

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
        return (f"The fit failed: chain(s) {which} did not move (chain "
                f"{int(bad[0])}'s {self.n_samples_} kept draws are {int(distinct[bad[0]])} "
                f"distinct states{why}). These draws are not samples of the posterior, and "
                f"no effective sample size is counted for the repeats (ess_ is at most "
                f"{int(distinct.sum())}). {fix}.")

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
        advice = setup.notes.get("advised_step")
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

    def _mixing_hint(self):
        if self.metric_ == "identity":
            return ("metric='identity' (or sampler='psgld') moves every coordinate at the "
                    "pace of the stiffest one; the default metric='auto' whitens the "
                    "posterior and mixes far faster.")
        return "Check the data are scaled (standardise X) and the model fits."

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

    def _fit_context_hook(self, ctx):
        """Subclasses may resolve data-dependent settings (e.g. noise_var)."""

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

    def _log_likelihood_draws(self, X, y):
        """``log p(y_i | x_i, theta_s)``, shape (n_samples, n_draws): the
        fitted model's log predictive density from the registry
        (``GLM.log_predictive``: the potential the sampler uses plus every
        constant); for the ArviZ export."""
        X = self._validate_X_predict(X)
        target = self._likelihood_target(np.asarray(y).ravel(), X.shape[0])
        glm = self._model_spec()
        out = np.empty((X.shape[0], self._n_draws()))
        for rows, Z in self._linear_predictor_draws(X):
            r, S, K = Z.shape
            logp = glm.log_predictive(Z.reshape(r * S, K), np.repeat(target[rows], S))
            out[rows] = logp.reshape(r, S)
        return out

    def _n_draws(self):
        return int(np.prod(np.shape(self.intercept_samples_)[:2]))

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

    def check_convergence(self, *, rhat_threshold=1.01, min_ess_per_chain=None):
        """Warn when the chains have not converged (R-hat) or mixed (ESS).

        See :func:`skbayes_sg.diagnostics.check_convergence`: the same
        check and advice as the warning at the end of ``fit``.

        Parameters
        ----------
        rhat_threshold : float, default=1.01
            Largest acceptable rank-normalised split R-hat.
        min_ess_per_chain : float or None, default=None
            Smallest acceptable bulk and tail ESS per chain; None: the fit's
            own target (``target_ess_`` when it aimed at one, else 100 per
            chain) for the bulk ESS and 100 per chain for the tail ESS.

        Returns
        -------
        converged : bool
            True when every parameter passes both checks; otherwise an
            ``MCMCConvergenceWarning`` names what to change.
        """
        from .diagnostics import check_convergence
        return check_convergence(self, rhat_threshold=rhat_threshold,
                                 min_ess_per_chain=min_ess_per_chain)

    def to_inference_data(self, X=None, y=None, *, posterior_predictive=None,
                          random_state=None):
        """The draws as an ``arviz.InferenceData`` (needs the ``arviz`` extra).

        See :func:`skbayes_sg.diagnostics.to_inference_data`.

        Parameters
        ----------
        X, y : array-like or None, default=None
            Observations: with them the export holds ``log_likelihood``
            (for :func:`skbayes_sg.diagnostics.loo`, ``az.loo``, ``az.waic``,
            ``az.compare``), ``observed_data`` and the log posterior ``lp``
            in ``sample_stats``.  ``X`` without ``y`` (new data): the
            ``posterior_predictive`` group alone.
        posterior_predictive : bool or None, default=None
            Also draw ``y`` at ``X`` once per posterior draw (``az.plot_ppc``,
            a held-out predictive check).  ``None``: True when ``X`` comes
            without ``y``.
        random_state : int, RandomState instance or None, default=None
            For the posterior predictive draws.

        Returns
        -------
        idata : arviz.InferenceData
        """
        from .diagnostics import to_inference_data
        return to_inference_data(self, X, y, posterior_predictive=posterior_predictive,
                                 random_state=random_state)

    def _validate_X_predict(self, X):
        check_is_fitted(self, "coef_samples_")
        return validate_data(self, X, reset=False, accept_sparse="csr",
                             dtype=[np.float64, np.float32])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags


def _lowrank_directions(values, residuals, max_rank=2 * LOWRANK_DIRECTIONS):
    """Indices of the Ritz pairs a low-rank metric corrects: converged
    (residual within ``LOWRANK_RESIDUAL`` of ``|lambda - 1|``), outside
    ``[1 / LOWRANK_SPREAD, LOWRANK_SPREAD]``, at most
    ``LOWRANK_DIRECTIONS`` at each end and ``max_rank`` in all, the
    farthest from 1 in log scale first."""
    ok = residuals <= LOWRANK_RESIDUAL * np.abs(values - 1.0)
    low = np.flatnonzero(ok & (values < 1.0 / LOWRANK_SPREAD))[:LOWRANK_DIRECTIONS]
    high = np.flatnonzero(ok & (values > LOWRANK_SPREAD))[::-1][:LOWRANK_DIRECTIONS]
    both = np.concatenate([low, high])
    both = both[np.argsort(-np.abs(np.log(values[both])), kind="stable")][:max_rank]
    return np.sort(both)


def _remaining_spectrum(values, weights, chosen, dim):
    """``(lambda_min, lambda_max)`` of the whitened precision left after a
    low-rank metric corrects the Ritz pairs ``chosen``.

    The Ritz values a Lanczos run has not converged stand for clusters: the
    quadrature weight of each (``dim * weights[j]`` eigenvalues near
    ``values[j]``) says how many.  Correcting ``k`` directions at the low end
    leaves the ``(k + 1)``-th smallest eigenvalue, the first Ritz value whose
    cumulative count passes ``k`` (and likewise at the top).  The unconverged
    Ritz values themselves are only upper (lower) bounds of the eigenvalues
    they stand for at the low (high) end: on a9a with its pairwise
    interactions the converged pairs alone put the remainder at 0.13-13, the
    counts at 0.006-21 (hundreds of small eigenvalues where Lanczos sees a
    dozen Ritz values)."""
    counts = dim * np.asarray(weights, dtype=np.float64)
    n_low = int(np.sum(values[chosen] < 1.0))
    n_high = int(np.sum(values[chosen] >= 1.0))
    below = np.cumsum(counts)
    above = np.cumsum(counts[::-1])[::-1]
    low = values[np.argmax(below > n_low + 0.5)] if below[-1] > n_low + 0.5 else 1.0
    high = values[np.flatnonzero(above > n_high + 0.5)[-1]] if above[0] > n_high + 0.5 else 1.0
    return float(min(low, 1.0)), float(max(high, 1.0))


def _dense_pays(ctx, values, weights, chosen, nnz):
    """Whether the dense Laplace metric beats the low-rank one for a
    Metropolis-adjusted full-gradient fit (``metric="auto"``, above
    ``MAX_DENSE_METRIC`` parameters).

    A leapfrog step costs the gradient's ``2 nnz K`` flops plus the
    metric's: ``4 dim^2`` dense, ``4 dim k`` low-rank.  In the dense
    Laplace metric the remainder is close to the identity; in the low-rank
    one the steps per effective draw grow like ``sqrt(kappa)``, ``kappa``
    the condition number left (:func:`_remaining_spectrum`).  Dense when its
    factor fits in ``AUTO_DENSE_BYTES`` and ``(2 nnz K + 4 dim^2) <
    (2 nnz K + 4 dim k) sqrt(kappa)``.  a9a with its pairwise interactions
    (5,439 parameters): sqrt(kappa) 100 against a step 16.5 times dearer,
    dense (the fit converges about 5 times sooner); the 10^4-feature text
    posteriors: 2.6 against 81, low-rank."""
    d = ctx.dim
    if 8.0 * d * d > AUTO_DENSE_BYTES:
        return False
    lam_min, lam_max = _remaining_spectrum(values, weights, chosen, d)
    gradient = 2.0 * nnz * ctx.glm.n_outputs
    dense = gradient + 4.0 * d * d
    lowrank = gradient + 4.0 * d * len(chosen)
    return dense < lowrank * np.sqrt(lam_max / lam_min)
