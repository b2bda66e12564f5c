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
from abc import abstractmethod
from dataclasses import replace

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data
from threadpoolctl import threadpool_limits

from ._dask_estimator import DaskFitMixin
from ._dask_rows import is_dask_collection, sample_rows
from ._parameters import restored_on_interrupt
from ._results import FitResultsMixin
from ._rows_span import RowsSpanMixin
from ._sampling import _schedule
from ._sampling._kernel_rules import EWSG_X_MODES
from ._sampling._context import FitContext, FitSettings
from ._sampling._noise_measure import batch_remeasure
from ._sampling._registry import SAMPLERS, SUBSAMPLINGS
from ._sampling._runner import ChainPool, ChainSpec, initial_state
from ._sampling._specs import (
    HYPERPARAMETERS, estimator_owners, hyperparameter_constraints, sampler_owners)
from ._sampling.samplers import BY_NAME as SAMPLER_MODULES
from ._setup import DEFAULT_BATCH_SIZE, SetupPolicy, plan_rounds
from ._starts import (divergence_bounds, divergence_error, identity_step_error, start_points,
                      step_retuner)

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

    def log_likelihood(self, X, y):
        """Every posterior draw's log-likelihood of every row.

        ``log p(y_i | x_i, theta_s)`` with every constant (ridge: the Gaussian
        density at ``noise_var_``; Poisson: with ``log y!``; logistic: the
        log-probability of the observed class), the pointwise quantity of
        leave-one-out cross-validation and WAIC
        (:func:`skbayes_sg.diagnostics.loo`) and of the ArviZ export's
        ``log_likelihood`` group.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            The rows.
        y : array-like of shape (n_samples,)
            Their observations (class labels for a classifier).

        Returns
        -------
        log_lik : ndarray of shape (n_samples, n_draws)
            Column ``c * n_samples_kept + s`` is the draw ``coef_samples_[c, s]``
            (chain-major, as ``sample_y(X, n_draws=None)``).
        """
        X = self._validate_X_predict(X)
        target = self._likelihood_target(np.asarray(y).ravel(), X.shape[0])
        glm = self._model_spec()
        out = np.empty((X.shape[0], self._n_draws()))
        for rows, Z in self._linear_predictor_draws(X):
            r, S, K = Z.shape
            logp = glm.log_predictive(Z.reshape(r * S, K), np.repeat(target[rows], S))
            out[rows] = logp.reshape(r, S)
        return out

    def grad_log_posterior(self, X, y, sample_weight=None, *, draws=None):
        """The score of the posterior the fit sampled, at its draws.

        ``grad log pi(theta) = -grad U(theta) / T`` with ``U`` the potential
        of ``(X, y)`` under this estimator's model, prior precision
        (``alpha_``), ``temperature`` and datum weights, computed exactly
        with full passes over ``X``: the input of Stein discrepancies
        (:func:`skbayes_sg.diagnostics.ksd_from_estimator`) and of other
        gradient-based checks of the draws.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            The training rows.
        y : array-like of shape (n_samples,)
            Their targets (class labels for a classifier).
        sample_weight : array-like of shape (n_samples,), default=None
            The weights of the fit (``class_weight`` is applied as in ``fit``).
        draws : array-like of int or None, default=None
            Which kept draws of each chain (indices along axis 1 of
            ``coef_samples_``); None: every one.

        Returns
        -------
        theta : ndarray of shape (n_chains, n_used, n_params)
            The draws, flat: per output its coefficients, then its intercept.
        score : ndarray of shape (n_chains, n_used, n_params)
            ``grad log pi`` at each of them, in the same layout.
        """
        from .diagnostics._ksd import grad_log_posterior

        X = self._validate_X_predict(X)
        y = np.asarray(y)
        if y.ndim != 1:
            raise ValueError(f"y must be 1-D, got shape {y.shape}.")
        weights = self._row_weights(X, y, sample_weight)
        target = self._likelihood_target(y, X.shape[0])
        C, N = self.coef_samples_.shape[:2]
        W, b = self._flat_draws()                   # (C N, K, d), (C N, K)
        coef = (np.concatenate([W, b[..., None]], axis=-1) if self.fit_intercept
                else W).reshape(C, N, -1)
        if draws is not None:
            coef = coef[:, np.asarray(draws, dtype=np.intp)]
        C, N = coef.shape[:2]
        theta = coef.reshape(C * N, -1)
        score = grad_log_posterior(theta, X, target, self._model_spec(),
                                   float(getattr(self, "alpha_", self.alpha)),
                                   bool(self.fit_intercept), float(self.temperature), weights)
        return theta.reshape(C, N, -1), score.reshape(C, N, -1)

    @property
    def likelihood_params_(self):
        """The likelihood's own parameters, as the draws were made with them,
        by name (ridge: ``noise_var``; negative binomial: ``shape``; none for
        logistic and Poisson regression), a dict."""
        check_is_fitted(self, "coef_samples_")
        return self._model_spec().settings()

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

    def sample_y(self, X, n_draws=1, random_state=None, *, n_samples=None):
        """Draw from the posterior predictive distribution.

        Every draw of ``y`` comes from one posterior draw ``theta_s = (w_s,
        b_s)``: ``y ~ p(y | x, theta_s)`` (ridge: ``x^T w_s + b_s +
        N(0, noise_var_)``; Poisson: ``Poisson(exp(x^T w_s + b_s))``;
        negative binomial: its law at ``shape_``; logistic: the label of class ``k`` with probability
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
        n_samples : int or None, default=None
            ``GaussianProcessRegressor.sample_y``'s name for ``n_draws``,
            accepted for code written for it (here the estimator's
            ``n_samples`` is the draws kept per chain, so this method calls
            the number ``n_draws``).

        Returns
        -------
        y_samples : ndarray of shape (n_samples, n_draws)
            Column ``j`` is one draw of ``y`` at every row of ``X``
            (``n_draws = n_chains * n_samples`` when ``n_draws=None``); class
            labels (``classes_``) for a classifier.
        """
        if n_samples is not None:
            if n_draws != 1:
                raise TypeError(f"sample_y got n_draws={n_draws!r} and n_samples={n_samples!r}: "
                                "they are one argument (n_samples is GaussianProcessRegressor's "
                                "name for it); pass n_draws only.")
            n_draws = n_samples
        if n_draws is not None and not (
                isinstance(n_draws, numbers.Integral) and not isinstance(n_draws, bool)
                and n_draws >= 1):
            raise ValueError(f"n_draws must be a positive integer, or None for one draw per "
                             f"posterior draw; got {n_draws!r}.")
        if is_dask_collection(X):
            return sample_rows(X, n_draws, random_state, self._n_draws(), lambda rows, pick, rng:
                               self._sample_y_rows(self._validate_X_predict(rows), pick, rng))
        X = self._validate_X_predict(X)
        rng = check_random_state(random_state)
        pick = None if n_draws is None else rng.randint(self._n_draws(), size=n_draws)
        return self._sample_y_rows(X, pick, rng)

    def _sample_y_rows(self, X, pick, rng):
        """:meth:`sample_y` of validated rows: the posterior draws ``pick``
        (None: every kept draw in order), the observation noise from ``rng``."""
        if pick is None:
            return self._predictive_draws(X, rng)
        W, b = self._flat_draws()
        n_draws = len(pick)
        Wp = W[pick]                                       # (n_draws, K, d)
        Wt = Wp.reshape(n_draws * Wp.shape[1], -1).T       # (d, n_draws * K)
        Z = np.asarray(X @ Wt, dtype=np.float64).reshape(X.shape[0], n_draws, -1) + b[pick][None]
        return self._draw_observations(Z, rng)


#: every linear estimator's parameter constraints (scikit-learn's validation)
BASE_CONSTRAINTS = {
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


def chain_spec(estimator, ctx, glm, setup, sample_weight):
    """What every chain is built from (:class:`ChainSpec`, picklable)."""
    return ChainSpec(
        model=glm.name, n_outputs=glm.n_outputs, model_params=glm.params,
        fit_intercept=bool(estimator.fit_intercept), alpha=float(ctx.alpha),
        sampler=setup.sampler, sampler_config=setup.sampler_config,
        subsampling=setup.subsampling, subsampling_config=setup.subsampling_config,
        ewsg_chain_length=(int(estimator.ewsg_chain_length)
                           if SUBSAMPLINGS[setup.subsampling].index_chain else 0),
        ewsg_x=EWSG_X_MODES[estimator.ewsg_x], metric=setup.metric,
        metropolis=setup.metropolis, max_abs_z=setup.max_abs_z,
        bounds=setup.bounds, verbose=int(estimator.verbose),
        sample_weight=sample_weight,
        lazy=bool(setup.lazy),
        chain_rows=0 if ctx.population is None else int(ctx.population.chain_rows))


class BaseSGMCMC(DaskFitMixin, RowsSpanMixin, FitResultsMixin, BaseEstimator):
    """Base class: parameter handling, the chains, posterior storage.

    Subclasses define the model (``_make_glm``), how targets are encoded
    (``_encode_targets``) and the prediction methods.
    """

    _parameter_constraints = BASE_CONSTRAINTS
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
            of the interrupted call are discarded (a partial run has
            unadapted or too few draws) and the estimator is as it was before
            the call: unfitted, or holding its previous posterior and chains
            (``fit`` again with ``warm_start=True`` continues them), which a
            note on the exception says.
        """
        self._validate_params()
        with restored_on_interrupt(self):     # Ctrl-C: the estimator as before the call
            return self._fit_validated(X, y, sample_weight)

    def _fit_validated(self, X, y, sample_weight):
        """:meth:`fit` after its parameters' validation."""
        if is_dask_collection(X) or is_dask_collection(y) or is_dask_collection(sample_weight):
            return self._fit_on_dask(X, y, sample_weight)      # ._dask_estimator
        continuing = self.warm_start and hasattr(self, "_chain_states")
        if continuing:
            self._check_continuation(X)
        X, y = self._validate_X_y(X, y, reset=not continuing)
        y_enc = self._encode_targets(y)
        weights = self._row_weights(X, y, sample_weight)
        return self._fit_encoded(X, y_enc, weights, continuing)

    def _fit_encoded(self, X, y_enc, weights, continuing, population=None):
        """The fit of validated rows, encoded targets and datum weights;
        ``population``: the rows are a sample drawn ahead from a larger data
        set (:mod:`._dask_estimator`)."""
        glm = self._make_glm(X, y_enc)
        # one BLAS thread: the chains run in threads of their own, and a
        # multithreaded BLAS on busy cores slows set-up by orders of magnitude
        t_fit = time.perf_counter()
        with threadpool_limits(limits=1, user_api="blas"):
            self._fit(X, y_enc, glm, continuing, weights, population)
        self._fit_seconds = time.perf_counter() - t_fit
        self._warn_if_unreliable()
        self._warn_if_thinned_for_memory()
        return self

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

    def _check_continuation(self, X):
        # the columns first: sklearn's own message would not say warm_start is why
        n_columns = np.shape(X)[1] if np.ndim(X) == 2 else None
        if n_columns is not None and n_columns != self.n_features_in_:
            raise ValueError(
                f"X has {n_columns} features, but {type(self).__name__} is expecting "
                f"{self.n_features_in_} features as input: warm_start=True continues the "
                f"previous fit's chains, of {self.n_features_in_} features. Pass the same "
                "columns, or set warm_start=False for a fit on new ones.")
        previous = self._chain_request
        for name in ("n_chains", "sampler", "subsampling", "metric"):
            if previous[name] != getattr(self, name):
                raise ValueError(
                    f"warm_start=True continues the previous {name}={previous[name]!r} "
                    f"chains; {name}={getattr(self, name)!r} differs. Set "
                    f"{name}={previous[name]!r} or warm_start=False.")

    def _fit(self, X, y, glm, continuing, sample_weight=None, population=None):
        """The fit after validation: context → set-up (mode, metric, steps)
        → chains → store; with fewer rows than coefficients, in the rows'
        span (:meth:`_fit_in_rows_span`)."""
        space = self._rows_span_of(X, glm, continuing, population)
        if space is not None:
            return self._fit_in_rows_span(space, y, glm, sample_weight)
        t_start = time.perf_counter()       # the progress's final line counts the set-up
        ctx = self._fit_context(X, y, glm, sample_weight)
        if population is not None:
            ctx.adopt_population(population)
        setup, states = self._set_up(ctx, continuing)
        self._warn_if_batch_near_full(ctx, setup)
        pool = ChainPool(X, y, chain_spec(self, ctx, glm, setup, sample_weight), states,
                         n_jobs=self.n_jobs, t_start=t_start)
        plan = plan_rounds(self._setup_policy().p, ctx, setup, continuing)
        self.max_passes_, self._auto_seconds = plan.max_passes, plan.auto_seconds
        plan.retune = step_retuner(self.step_size, setup, pool)
        remeasure = None if continuing else batch_remeasure(self._setup_policy(), ctx, setup)
        plan.remeasure = remeasure
        self._extend_limits = None
        if self.max_passes == "auto" and self.max_time is None:
            self._extend_limits = (AUTO_EXTEND_SECONDS, AUTO_EXTEND_FACTOR)
            plan.extend_until = t_start + AUTO_EXTEND_SECONDS
            plan.extend_passes = AUTO_EXTEND_FACTOR * plan.max_passes
        outcome = self._run_chains(pool, plan, setup, continuing)
        if remeasure is not None and remeasure.batch_size is not None:
            setup = replace(setup, batch_size=remeasure.batch_size,
                            subsampling_config=pool.spec.subsampling_config)
        if (self.step_size != "auto" and setup.metric["kind"] == "identity"
                and SAMPLER_MODULES[setup.sampler].IDENTITY_STEP_CHECK
                and not setup.metropolis):
            setup = self._identity_step_error(ctx, setup, pool)
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

    def _setup_policy(self):
        """The rules that resolve this estimator's ``"auto"`` settings, over a
        snapshot of its parameters (:class:`~._setup.SetupPolicy`)."""
        return SetupPolicy(self.get_params(deep=False), self._SAMPLER_PARAMETERS,
                           self._SUBSAMPLING_PARAMETERS)

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
        policy = self._setup_policy()
        setup = policy.resolve(ctx)
        starts = start_points(policy, ctx, setup, seeds)
        setup = replace(setup, **divergence_bounds(policy, ctx, setup, starts))
        return setup, [initial_state(s, z0) for s, z0 in zip(seeds[:self.n_chains], starts)]

    def _run_chains(self, pool, plan, setup, continuing):
        """Warm-up and sampling rounds (:mod:`._sampling._schedule`); a
        divergence discards the draws (a warm start keeps the chains it
        began from). An interrupt propagates once every chain thread has
        stopped (``ChainPool``); ``fit`` then puts the estimator back."""
        try:
            with pool.session():
                return _schedule.run(pool, plan, continuing)
        except _schedule.ChainsDiverged as exc:
            self._discard_posterior(keep_chains=continuing)
            raise divergence_error(exc, setup, self._model_hint()) from None

    # ---------------------------------------------------------------- set-up

    def _identity_step_error(self, ctx, setup, pool):
        """The predicted variance error of a hand-set step of Euler SGLD or
        pSGLD in the identity metric (``setup.predicted_variance_error``, and
        ``advised_step``): the set-up with them.

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
            error, advised = identity_step_error(self._setup_policy(), ctx, setup, pool)
        return replace(setup, predicted_variance_error=error, advised_step=advised)

    # parameter -> (its default, the samplers / subsamplings it acts with): the
    # owners are the algorithms' specs (_sampling/_specs.py)
    _SAMPLER_PARAMETERS = sampler_owners()
    _SUBSAMPLING_PARAMETERS = estimator_owners(BASE_PARAMETERS)

    # ---------------------------------------------------------------- results

    def _fit_context_hook(self, ctx):
        """Subclasses may resolve data-dependent settings (e.g. noise_var)."""

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
