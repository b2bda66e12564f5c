"""The automatic settings of a linear fit, resolved once.

:class:`SetupPolicy` holds a snapshot of the estimator's parameters (it is
made from ``get_params()``; it never calls back into the estimator and
writes nothing into it) and :meth:`SetupPolicy.resolve` turns every
``"auto"`` into a number or a name for one fit's data: the metric (dense,
diagonal, low-rank or identity), the gradient estimator, the dynamics, the
Metropolis correction, the step, the batch and the lazy sparse path, as one
:class:`FitSetup` (see the user guide, "What the defaults do").  Where the
chains start and what counts as a divergence are in :mod:`._starts`.
"""
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
from sklearn.utils._param_validation import InvalidParameterError

from ._sampling import _error_model, _schedule
from ._sampling._kernel_rules import EWSG_CYCLIC_MESSAGE
from ._sampling._draws import resolve_budget, resolve_dtype
from ._sampling._kernel_rules import on_lazy_grid
from ._sampling._metric import Metric
from ._sampling._registry import (
    ACCESS_SUBSAMPLINGS, SAMPLERS, SUBSAMPLINGS, GradientNoise, noise_per_row)
from ._sampling._specs import LAZY_SAMPLERS, LAZY_SUBSAMPLINGS, ineffective_settings
from ._sampling._spectrum import LOWRANK_STEPS, Lanczos, extreme_eigenvalues
from ._sampling.samplers import BY_NAME as SAMPLER_MODULES

DEFAULT_BATCH_SIZE = 100
#: the dense (Cholesky) Laplace metric up to this many parameters, a
#: diagonal one above (a step costs O(dim^2) in a dense metric)
MAX_DENSE_METRIC = 2000
#: the second-order control variate (``cv2``) up to this many parameters:
#: it keeps the dim x dim data Hessian and multiplies by it at every step
#: (the dense metric's own cost and limit)
MAX_TAYLOR_DIM = MAX_DENSE_METRIC
#: subsampling="auto" picks the second-order control ("cv2-preferential") in
#: the dense metric when the error model's cost per effective draw with it is
#: at most TAYLOR_PREFERENCE times the first-order control's (the margin pays
#: its set-up pass and the step halving after the rare chain a tail row throws
#: out), and only when the first-order control's sampling would read at least
#: TAYLOR_WORTH_PASSES passes (at large n the sampling reads a fraction of one
#: pass, and the second-order control's set-up would cost more than it saves)
TAYLOR_PREFERENCE = 0.5
TAYLOR_WORTH_PASSES = 20.0
#: a per-datum gradient's cost in multiply-adds of a BLAS matrix-vector
#: product (the unit of a dense metric's per-step work):
#: ROW_COST_FIXED + ROW_COST_PER_NONZERO x nnz per output. Measured through
#: est.fit (baoab, thin 20, one core; a9a, dense d=600, CSR d=1,000 at 20
#: non-zeros): 0.09 / 0.82 / 0.15 us a row against 0.25-0.3 ns a product's
#: multiply-add; the modelled per-step overhead in rows is within 2x of the
#: measured one on all three (the old one, d^2 / nnz, was 5-26x too high)
ROW_COST_FIXED = 200.0
ROW_COST_PER_NONZERO = 4.5
#: a diagonal (or identity) metric's step, per parameter, in the same unit
#: (measured at d=2,500, dense rows: 22 us a step besides its rows)
DIAGONAL_STEP_COST = 24.0
#: full gradients (exact, Metropolis-adjusted) when the whole fit with them
#: costs less than this many flops, or when subsampling would save less than
#: FULL_GRADIENT_PREFERENCE times their cost
CHEAP_FIT_FLOPS = 2e9
FULL_GRADIENT_PREFERENCE = 2.0
#: data passes an effective draw costs with exact gradients (Metropolis-adjusted
#: HMC in the Laplace metric: 2-8 on the benchmark posteriors)
FULL_PASSES_PER_DRAW = 4.0
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
#: a user-set step (or batch) whose predicted relative error of the posterior
#: variances exceeds this is warned about (automatic settings: 4%)
STEP_ERROR_WARN = 0.25
#: at most this many low-rank directions at each end of the whitened
#: Hessian's spectrum; how many are taken is a cost (:func:`_cheapest_lowrank`)
LOWRANK_DIRECTIONS = 128
#: the dense metric's check (:func:`_dense_pays`) compares it with a low-rank
#: metric of the Ritz pairs of DENSE_CHECK_STEPS Lanczos steps, at most
#: DENSE_CHECK_DIRECTIONS at each end and at most 2 nnz / (4 dim) in all: the
#: rule as it was measured (a correlated design of 2,100 parameters and 300
#: rows: dense, ESS 674 in 22.7 s; the cost rule's 59 directions from 384
#: steps: ESS 16 at its budget)
DENSE_CHECK_STEPS = 128
DENSE_CHECK_DIRECTIONS = 32
#: a step's products with the low-rank metric's k directions cost this many
#: multiply-adds per parameter and direction (the basis read for L z and
#: for L^T g, twice each), in the units of ``ROW_COST_*``
LOWRANK_DIRECTION_COST = 4.0
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
#: a Metropolis-adjusted HMC trajectory in a diagonal or low-rank metric is
#: at most this many quarter periods of the reference Gaussian
MAX_TRAJECTORY_FACTOR = 8.0
#: its lengths are drawn uniform in [1 - j, 1 + j] times a centre; the
#: centre (on a log grid) and j (one of these) are those the exact-HMC model
#: of the spectrum left prefers (:func:`trajectory_lengths`).  Wider jitters
#: draw many short trajectories: at 3,000 text features (jitter 0.9) the sd
#: ratios strayed to 0.11-0.14 in 400 draws, against 0.09-0.10 at 2/3
TRAJECTORY_JITTERS = (0.25, 1.0 / 3.0, 0.5, 2.0 / 3.0)
#: lazy sparse steps where a minibatch touches fewer than 1/LAZY_DENSITY of the
#: coordinates (a lazy coordinate update costs a few eager ones)
LAZY_DENSITY = 4.0


def trajectory_lengths(lam_min, lam_max=1.0):
    """HMC's trajectory lengths in a whitened metric whose remaining
    eigenvalues lie in ``[lam_min, lam_max]``: ``{"trajectory": centre,
    "jitter": j}`` for :class:`~._sampling._dynamics.SGHMCLeapfrog`, lengths
    uniform in ``[1 - j, 1 + j]`` times the centre.

    They maximise the worst effective draws per gradient of exact HMC on a
    Gaussian with that spectrum.  Along an eigenvalue ``lam`` a trajectory
    of length ``t`` rotates ``(z, p)`` by ``sqrt(lam) t``: the lag-1
    autocorrelation is ``E cos(sqrt(lam) t)`` for ``z`` and ``E cos^2`` for
    ``z^2``, averaged over the lengths drawn, and an AR(1) chain with
    autocorrelation ``rho`` gives ``(1 - rho) / (1 + rho)`` effective draws
    a step.  The worst of the two over a log grid of the spectrum, divided
    by the centre (the step is set by ``lam_max`` alone), is maximised over
    the centres (up to ``MAX_TRAJECTORY_FACTOR`` reference quarter periods)
    and ``TRAJECTORY_JITTERS``.  Both matter: a quarter period of the
    slowest direction that turns the bulk by a half turn flips ``z`` and
    keeps ``|z|`` (the bulk ESS then overstates the scale's: on the text
    ridge 4,519 against 1,884 folded), and a length that suits the bulk
    leaves the slowest direction barely moved."""
    lam_min = float(np.clip(lam_min, 1e-12, 1.0))
    lam_max = max(float(lam_max), lam_min * (1.0 + 1e-9))
    lam = np.exp(np.linspace(np.log(lam_min), np.log(lam_max), 64))[:, None]
    centres = 0.5 * np.pi * np.exp(np.linspace(np.log(0.25), np.log(MAX_TRAJECTORY_FACTOR), 97))
    unit = np.linspace(-1.0, 1.0, 101)
    best, choice = -np.inf, None
    for j in TRAJECTORY_JITTERS:
        for centre in centres:
            phase = np.sqrt(lam) * (centre * (1.0 + j * unit))[None, :]
            cos = np.cos(phase)
            rho_z, rho_sq = cos.mean(axis=1), (cos * cos).mean(axis=1)
            worst = min(np.min((1 - rho_z) / (1 + rho_z)), np.min((1 - rho_sq) / (1 + rho_sq)))
            if worst / centre > best:
                best, choice = worst / centre, {"trajectory": float(centre), "jitter": j}
    return choice


@dataclass(frozen=True)
class FitSetup:
    """Every setting a fit resolved (kept for warm starts).

    Frozen: a later stage that adds to it (the divergence bounds of the
    starts, the post-fit step check, the metric warm-up adapted) makes a new
    one with :func:`dataclasses.replace`.

    Attributes
    ----------
    sampler, subsampling : str
    metric : dict
        ``Metric.get_config()``.
    metropolis : bool
    sampler_config, subsampling_config : dict
        The algorithms' own configurations (their ``prepare``).
    batch_size : int
    iat : float
        Predicted steps per effective draw (NaN: no prediction).
    predicted_variance_error : float
        The error model's (or the identity-step check's) relative error of
        the stationary variance (NaN: no prediction).
    momentum_scale : float
        Standard deviation of the momentum per unit temperature.
    lazy : bool
        The lazy O(nnz) sparse steps run the chains.
    max_step : float
        The largest step dual averaging may adapt to (Metropolis).
    advised_step : float or None
        A hand-set step's fix: the step that keeps the variance error in budget.
    bounds : tuple or None
        ``(center, sd, k)``: a chain more than ``k`` sds from ``center`` diverged.
    max_abs_z : float
        The same in whitened units.
    """

    sampler: str
    subsampling: str
    metric: dict
    metropolis: bool
    sampler_config: dict
    subsampling_config: dict
    batch_size: int
    iat: float
    predicted_variance_error: float
    momentum_scale: float = 1.0
    lazy: bool = False
    max_step: float = np.inf
    advised_step: object = None
    bounds: object = None
    max_abs_z: float = np.inf


def row_nonzeros(ctx):
    """Mean non-zeros of a row (CSR), or its columns (dense); at least 1."""
    X = ctx.X
    return max(X.nnz / max(X.shape[0], 1) if hasattr(X, "nnz") else X.shape[1], 1.0)


def row_flops(ctx):
    """Floating-point work of one per-datum gradient (about 2 x nnz x K)."""
    return 2.0 * row_nonzeros(ctx) * ctx.glm.n_outputs


def target_ess_for(target_ess, dim):
    """The ESS target of ``target_ess`` (``"auto"``: the schedule's rule for ``dim``)."""
    return _schedule.auto_target_ess(dim) if target_ess == "auto" else float(target_ess)


class _OneRowNoise:
    """``v1(name)``: the one-row noise of gradient estimator ``name`` in the
    whitened metric (:func:`~._sampling._registry.noise_per_row`), computed
    on first use (it costs set-up passes) and kept for the fit."""

    def __init__(self, ctx, kind, factor, T):
        self.ctx, self.kind, self.factor, self.T = ctx, kind, factor, T
        self.known = {}

    def __call__(self, name):
        ctx = self.ctx
        if name not in self.known:
            if ctx.resolved.posterior_row_cov is None:
                Q = ctx.metric_row_covariances(self.kind, self.factor)
                ctx.resolved.posterior_row_cov = Q
                ctx.resolved.metric_row_cov = Q
            self.known[name] = noise_per_row(ctx, SUBSAMPLINGS[name], self.factor, self.kind,
                                             1.0 / self.T)
        return self.known[name]


class SetupPolicy:
    """The estimator's parameters, and the rules that resolve them for a fit.

    Parameters
    ----------
    params : dict
        The estimator's ``get_params(deep=False)``: read as ``self.p.<name>``.
    sampler_owners, subsampling_owners : dict
        ``{parameter: (default, {algorithms it acts with})}``
        (:func:`~._sampling._specs.sampler_owners`, ``estimator_owners``):
        a parameter set away from its default with another algorithm is
        refused.
    """

    def __init__(self, params, sampler_owners, subsampling_owners):
        self.p = SimpleNamespace(**params)
        self.sampler_owners = sampler_owners
        self.subsampling_owners = subsampling_owners

    def resolve(self, ctx):
        """Every ``"auto"`` setting of this fit as a number or a name: a
        :class:`FitSetup` (see the user guide, "What the defaults do").

        In order: the metric; the gradient estimator (by the error model's
        cost per effective draw, or exact gradients where a pass is cheap);
        the dynamics and its Metropolis correction; the step, batch and
        friction (dual averaging's start, or the error model's choice); then
        each algorithm's own configuration and the lazy sparse path."""
        T = float(self.p.temperature)
        self._check_combinations()
        self._check_parameters_act(self.p.sampler, self.p.subsampling)  # before the set-up
        _check_taylor(ctx, self.p.subsampling)
        kind, metric_cfg, factor = self._resolve_metric(ctx, T)
        v1 = _OneRowNoise(ctx, kind, factor, T)
        # sparse rows, few touched a step: lazy steps cost O(nnz), and a
        # step then costs its rows alone (no O(dim) overhead to amortise)
        lazy = self._lazy_candidate(ctx, kind)
        overhead = 1.0 if lazy else self.step_overhead(ctx, kind)
        subsampling = self._resolve_subsampling(ctx, kind, v1, overhead)
        exact = not SUBSAMPLINGS[subsampling].stochastic
        lazy = lazy and subsampling in LAZY_SUBSAMPLINGS and (
            subsampling != "uniform" or self.p.access == "random")
        if not lazy:
            overhead = self.step_overhead(ctx, kind, SUBSAMPLINGS[subsampling].control)
        sampler = self._resolve_sampler(kind, exact)
        lazy = lazy and sampler in LAZY_SAMPLERS
        self._check_parameters_act(sampler, subsampling)
        self._check_momentum_stop(sampler, subsampling)
        metropolis = self._resolve_metropolis(sampler, subsampling, exact)
        theta0 = ctx.mode() if kind != "identity" else self.calibration_point(ctx)
        # the identity metric's settings stay as given ("auto" is its sampler's rule)
        step, friction, iat, error = self.p.step_size, self.p.friction, np.nan, np.nan
        batch = None if self.p.batch_size == "auto" else int(min(self.p.batch_size, ctx.n))
        trajectory, max_step, advised = None, np.inf, None
        if kind != "identity" and metropolis:
            step, iat, metric_cfg, trajectory, max_step = self._metropolis_settings(
                ctx, kind, metric_cfg, sampler)
        elif kind != "identity":
            step, friction, batch, iat, error, advised = self._error_model_settings(
                ctx, sampler, exact, batch, v1(subsampling) if not exact else 0.0, overhead)
        ctx.batch_size = int(min(batch if batch is not None else DEFAULT_BATCH_SIZE, ctx.n))
        return self._configure(ctx, kind, metric_cfg, sampler, subsampling, metropolis,
                               theta0, step, friction, lazy, trajectory, float(iat),
                               float(error), max_step=max_step, advised_step=advised)

    def _resolve_metric(self, ctx, T):
        """``(kind, metric config, factor)``; the kind is also the context's."""
        kind = self._metric_kind(ctx)
        ctx.resolved.metric_kind = kind
        metric_cfg = Metric(ctx.dim).get_config()
        factor = None
        if kind != "identity":
            center, factor = ctx.laplace_metric(kind, T)
            metric_cfg = Metric(ctx.dim, kind, center, factor, 1.0 / T, 1.0).get_config()
        return kind, metric_cfg, factor

    def _resolve_sampler(self, kind, exact):
        """``sampler="auto"``: SGLD in the identity metric; HMC with exact
        gradients, BAOAB with subsampled ones, in a whitened metric."""
        if self.p.sampler != "auto":
            return self.p.sampler
        if kind == "identity":
            return "sgld"
        return "sghmc-leapfrog" if exact else "baoab"

    def _check_momentum_stop(self, sampler, subsampling):
        if (SUBSAMPLINGS[subsampling].index_chain and self.p.ewsg_x == "momentum-stop"
                and not SAMPLERS[sampler].has_momentum):
            raise InvalidParameterError(
                f"ewsg_x='momentum-stop' assumes r_(k+1) = 0 and needs a sampler with "
                f"momentum; sampler={sampler!r} has none. Use ewsg_x='auto' or "
                "sampler='sghmc'.")

    def _resolve_metropolis(self, sampler, subsampling, exact):
        """``metropolis="auto"``: on with exact gradients and a reversible
        proposal; ``True`` where it cannot act is refused."""
        if self.p.metropolis == "auto":
            return exact and SAMPLERS[sampler].metropolis
        metropolis = bool(self.p.metropolis)
        if metropolis and not (exact and SAMPLERS[sampler].metropolis):
            raise InvalidParameterError(
                f"metropolis=True needs exact gradients (subsampling='full') and a "
                f"sampler with a reversible proposal "
                f"({sorted(s for s in SAMPLERS if SAMPLERS[s].metropolis)}); got "
                f"sampler={sampler!r}, subsampling={subsampling!r}. Use metropolis='auto'.")
        return metropolis

    def _metropolis_settings(self, ctx, kind, metric_cfg, sampler):
        """A Metropolis-adjusted dynamics in a whitened metric: dual
        averaging's start (its file's :class:`MetropolisRule`), the planned
        iterations per draw (for sizing the windows and the first round;
        then measured), HMC's trajectory (length and jitter, or None) and the
        largest step; ``(step, iat, metric, trajectory, max_step)``."""
        rule = SAMPLER_MODULES[sampler].METROPOLIS
        h_start, trajectory, metric_cfg = self._metropolis_start(ctx, kind, metric_cfg, rule)
        step = h_start if self.p.step_size == "auto" else float(self.p.step_size)
        return step, rule.iterations_per_draw, metric_cfg, trajectory, rule.max_step

    def _error_model_settings(self, ctx, sampler, exact, batch, noise, overhead):
        """An unadjusted dynamics in a whitened metric: step, batch (None:
        "auto") and friction from the error model
        (:func:`._sampling._error_model.choose`) for the estimator's one-row
        noise ``noise``; a hand-set step predicted to be far off gets the
        step that would not be; ``(step, friction, batch, iat, predicted
        variance error, advised step or None)``."""
        n = ctx.n
        settings = _error_model.choose(
            sampler, noise, n, step_size=self.p.step_size,
            batch_size=batch if batch is not None else "auto", friction=self.p.friction,
            overhead_rows=overhead)
        step, friction = settings.step_size, settings.friction
        if batch is None and not exact:
            batch = settings.batch_size
        predicted_error, advised = settings.variance_error, None
        if predicted_error > STEP_ERROR_WARN and self.p.step_size != "auto":
            # the step that would keep the error in budget (warned after the fit)
            advice = _error_model.choose(
                sampler, noise, n, friction=friction,
                batch_size=batch if batch is not None else "auto",
                overhead_rows=overhead)
            if advice.variance_error <= _error_model.VARIANCE_ERROR * (1 + 1e-9):
                advised = advice.step_size
        return step, friction, batch, settings.iat, predicted_error, advised

    def _configure(self, ctx, kind, metric_cfg, sampler, subsampling, metropolis, theta0,
                   step, friction, lazy, trajectory, iat, predicted_error, **fields):
        """The algorithms' own configurations (their ``prepare``), the shared
        start, the momentum's scale and the lazy path, as the :class:`FitSetup`
        (with ``fields``, its other fields the settings above decided)."""
        T = float(self.p.temperature)
        shared = self._shared_start(ctx, kind)
        if shared is not None:  # every chain starts here: one snapshot table for all
            ctx.resolved.shared_start = shared
        noise = GradientNoise(ctx, SUBSAMPLINGS[subsampling], theta0)
        sub_config = SUBSAMPLINGS[subsampling].prepare(ctx)
        samp_config = SAMPLERS[sampler].prepare(ctx, theta0, step, friction, noise, T)
        samp_config["metropolis"] = metropolis
        if trajectory is not None:
            samp_config.update(trajectory)
        t_dyn = samp_config.get("temperature", T)
        momentum_scale = np.sqrt(
            t_dyn * SAMPLER_MODULES[sampler].momentum_variance_scale(samp_config))
        # the batch is known now: lazy where it still touches few coordinates
        lazy = lazy and self._touches_few(ctx, ctx.batch_size)
        if lazy:
            # scales on a grid: lazy coordinates of a class share their k-step laws
            metric_cfg = on_lazy_grid(metric_cfg)
        return FitSetup(sampler, subsampling, metric_cfg, metropolis, samp_config, sub_config,
                        ctx.batch_size, iat, predicted_error, momentum_scale, lazy=lazy,
                        **fields)

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
          each end, as many as pay: :func:`_cheapest_lowrank`) become a
          low-rank metric (``metric="auto"``): each direction scaled by
          ``lambda^(-1/2)``, so that A is 1 there.  A step then costs
          O(dim k) more, against the gradient's O(nnz);
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
        T = float(self.p.temperature)
        D = np.asarray(metric_cfg["factor"], dtype=np.float64)
        weights = ctx.hessian_row_weights(ctx.mode(), full=True)

        def whitened_hessian(v):
            ctx.n_grad_evals += ctx.n
            return D * ctx.hessian_vector(weights, D * v) / T

        lowrank = self.p.metric == "auto"
        if lowrank:
            # one Lanczos sequence: the dense check's steps are the low-rank metric's first
            lanczos = Lanczos(whitened_hessian, ctx.dim, max(LOWRANK_STEPS, DENSE_CHECK_STEPS))
            if _dense_pays(ctx, lanczos):
                ctx.resolved.metric_kind = "dense"    # what the pieces after this see
                center, factor = ctx.laplace_metric("dense", T)
                metric_cfg = Metric(ctx.dim, "dense", center, factor, 1.0 / T, 1.0).get_config()
                shrink = min(1.0, (MAX_DENSE_METRIC / ctx.dim) ** 0.25)
                return float(rule.start_step * shrink), None, metric_cfg
            values, vectors, residuals, ritz_weights = lanczos.pairs(LOWRANK_STEPS)
            chosen = _cheapest_lowrank(ctx, values, residuals, ritz_weights)
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
        if rule.trajectory and self.p.n_leapfrog == "auto":
            trajectory = trajectory_lengths(lam_min, lam_max)
        return float(rule.start_step * min(shrink, 1.0)), trajectory, metric_cfg

    def _check_parameters_act(self, sampler, subsampling):
        """Every parameter set away from its default acts on the fit, or the
        fit is refused (a setting silently ignored is a wrong answer given
        quietly).  ``sampler`` / ``subsampling``: the resolved names, or
        "auto" for a name not yet resolved (then nothing is checked for it)."""
        problems = (
            ineffective_settings(self.sampler_owners, self.p, "sampler", sampler)
            + ineffective_settings(self.subsampling_owners, self.p, "subsampling",
                                   subsampling))
        if (subsampling != "auto" and self.p.pilot_steps != 500
                and self.p.pv_threshold != "pilot"):
            problems.append(f"pilot_steps={self.p.pilot_steps!r} has no effect unless "
                            "pv_threshold='pilot'")
        if subsampling == "full" and self.p.batch_size != "auto":
            problems.append(f"batch_size={self.p.batch_size!r} has no effect with "
                            "subsampling='full' (every row, every step)")
        if problems:
            what = [f"sampler={sampler!r}" if sampler != "auto" else "",
                    f"subsampling={subsampling!r}" if subsampling != "auto" else ""]
            resolved = " and ".join(w for w in what if w)
            raise InvalidParameterError(
                "; ".join(problems) + ". Leave the parameter at its default, or choose a "
                f"sampler / subsampling it applies to (this fit uses {resolved}).")

    def _check_combinations(self):
        sub = self.p.subsampling
        if self.p.access != "random" and sub != "auto" and sub not in ACCESS_SUBSAMPLINGS:
            raise InvalidParameterError(
                f"access={self.p.access!r} does not apply to subsampling={sub!r}, "
                "which draws from its own weights. Use access='random' or one of "
                f"subsampling in {sorted(ACCESS_SUBSAMPLINGS)}.")
        if sub != "auto" and SUBSAMPLINGS[sub].index_chain and self.p.access == "cyclic":
            raise InvalidParameterError(
                f"subsampling={sub!r}, access='cyclic': " + EWSG_CYCLIC_MESSAGE)

    def _metric_kind(self, ctx):
        sampler_whitens = self.p.sampler == "auto" or SAMPLERS[self.p.sampler].whitened
        if self.p.metric == "auto":
            if not sampler_whitens:
                return "identity"
            return "dense" if ctx.dim <= MAX_DENSE_METRIC else "diagonal"
        if self.p.metric != "identity" and not sampler_whitens:
            raise InvalidParameterError(
                f"sampler={self.p.sampler!r} is preconditioned by its own RMSprop metric, as "
                f"its paper defines it; metric={self.p.metric!r} does not apply. Use "
                "metric='auto' (or 'identity').")
        return self.p.metric

    def _touches_few(self, ctx, batch):
        """Whether a minibatch of ``batch`` CSR rows touches fewer than
        ``1 / LAZY_DENSITY`` of the coordinates (lazy steps then pay)."""
        if not hasattr(ctx.X, "nnz"):
            return False
        return LAZY_DENSITY * min(batch, ctx.n) * row_nonzeros(ctx) * ctx.glm.n_outputs < ctx.dim

    def _lazy_candidate(self, ctx, kind):
        """Whether the chains can take lazy O(nnz) steps (:mod:`._sampling._lazy`):
        CSR rows, an identity or diagonal metric, a sampler and estimator with
        a lazy kernel (or "auto") without a Metropolis correction, and a
        default-size minibatch touching few coordinates."""
        if kind not in ("identity", "diagonal") or self.p.metropolis is True:
            return False
        if self.p.sampler not in ("auto",) + LAZY_SAMPLERS:
            return False
        if self.p.subsampling not in ("auto",) + LAZY_SUBSAMPLINGS:
            return False
        return self._touches_few(
            ctx, DEFAULT_BATCH_SIZE if self.p.batch_size == "auto" else self.p.batch_size)

    def step_overhead(self, ctx, kind, control=None):
        """A step's cost besides its rows, in row evaluations: the metric's
        products (O(dim^2) dense, O(dim) otherwise), and the second-order
        control's Hessian product (``control="taylor"``, O(dim^2)), against
        one row's cost (``ROW_COST_FIXED + ROW_COST_PER_NONZERO x nnz``)."""
        per_row = (ROW_COST_FIXED + ROW_COST_PER_NONZERO * row_nonzeros(ctx)) * ctx.glm.n_outputs
        work = ctx.dim * ctx.dim if kind == "dense" else DIAGONAL_STEP_COST * ctx.dim
        if control == "taylor":
            work += ctx.dim * ctx.dim
        return work / per_row

    def _resolve_subsampling(self, ctx, kind, v1, overhead):
        """``subsampling="auto"``: full gradients when a pass is cheap, a
        control-variate scheme with preferential rows in the metric when
        subsampling pays (the error model's cost per effective draw): the
        second-order control where that cost is at most
        ``TAYLOR_PREFERENCE`` times the first-order one's."""
        if self.p.subsampling != "auto":
            return self.p.subsampling
        if kind == "identity":
            return "uniform"
        if self.p.batch_size != "auto":   # a minibatch size asks for minibatches
            return "cv-preferential"
        n = ctx.n
        sampler = "baoab" if self.p.sampler in ("auto", "sghmc-leapfrog") else self.p.sampler
        settings = _error_model.choose(
            sampler, v1("cv-preferential"), n, step_size=self.p.step_size,
            batch_size=self.p.batch_size, friction=self.p.friction, overhead_rows=overhead)
        cost_sg = settings.cost_per_draw
        ess = target_ess_for(self.p.target_ess, ctx.dim)
        adjustable = self.p.sampler == "auto" or (SAMPLERS[self.p.sampler].metropolis
                                                 and self.p.metropolis is not False)
        if adjustable:
            cost_full = FULL_PASSES_PER_DRAW * (n + overhead)
        else:  # the unadjusted dynamics with exact gradients: the error model's cost
            exact = _error_model.choose(sampler, 0.0, n, step_size=self.p.step_size,
                                        friction=self.p.friction, overhead_rows=overhead)
            cost_full = (n + overhead) * exact.gradients_per_step * exact.iat
        # exact gradients buy a Metropolis correction (exact draws): worth it
        # whenever the whole fit is cheap; otherwise the cheaper scheme wins
        if adjustable and cost_full * ess * row_flops(ctx) <= CHEAP_FIT_FLOPS:
            return "full"
        choice = "cv-preferential"
        second = _second_order_cost(self.p, ctx, kind, v1, sampler, cost_sg * ess,
                                    self.step_overhead(ctx, kind, "taylor"))
        if second <= TAYLOR_PREFERENCE * cost_sg:
            cost_sg, choice = second, "cv2-preferential"
        if cost_full <= FULL_GRADIENT_PREFERENCE * cost_sg:
            return "full"
        return choice

    def calibration_point(self, ctx):
        """Where the identity metric's automatic step is calibrated: the mode
        for chains that start near it (or at independent prior draws, which
        reach it), else the start point itself."""
        if isinstance(self.p.init, str):
            if self.p.init in ("mode", "auto", "laplace", "prior"):
                return ctx.mode()
            return np.zeros(ctx.dim)
        return self.init_array(ctx)

    def init_array(self, ctx):
        theta = np.asarray(self.p.init, dtype=np.float64).ravel()
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
        init = self.p.init
        if isinstance(init, str) and init == "auto":
            init = "laplace" if kind != "identity" else "mode"
        if isinstance(init, str):
            if init == "mode":
                return ctx.mode()
            return np.zeros(ctx.dim) if init == "zeros" else None
        return self.init_array(ctx)


def _second_order_cost(p, ctx, kind, v1, sampler, sampling_rows, overhead):
    """The error model's cost per effective draw of ``"cv2-preferential"``
    where ``subsampling="auto"`` may weigh it: one output, the dense metric,
    a data Hessian within ``MAX_TAYLOR_DIM``, and a first-order sampling of
    ``sampling_rows`` at least ``TAYLOR_WORTH_PASSES`` passes; inf elsewhere."""
    if (kind != "dense" or _taylor_refusal(ctx) is not None
            or sampling_rows < TAYLOR_WORTH_PASSES * ctx.n):
        return np.inf
    return _error_model.choose(
        sampler, v1("cv2-preferential"), ctx.n, step_size=p.step_size,
        batch_size=p.batch_size, friction=p.friction, overhead_rows=overhead).cost_per_draw


def _taylor_refusal(ctx):
    """Why the second-order control cannot act on this fit (the middle of
    :func:`_check_taylor`'s message), or None: it needs one output, and a
    data Hessian small enough to keep and multiply at every step."""
    if ctx.glm.n_outputs != 1:
        return ("expands each datum's gradient to second order, which this library does "
                f"for one output only; this model has {ctx.glm.n_outputs}")
    if ctx.dim > MAX_TAYLOR_DIM:
        return (f"keeps the data Hessian ({ctx.dim} x {ctx.dim} here) and multiplies by it "
                f"at every step; it is offered up to {MAX_TAYLOR_DIM} parameters")
    return None


def _check_taylor(ctx, subsampling):
    """A ValueError naming ``subsampling`` where it is a second-order control
    that cannot act on this fit (:func:`_taylor_refusal`)."""
    if subsampling not in SUBSAMPLINGS or SUBSAMPLINGS[subsampling].control != "taylor":
        return
    reason = _taylor_refusal(ctx)
    if reason is not None:
        raise ValueError(f"subsampling={subsampling!r} {reason}. "
                         "Use subsampling='cv-preferential' (or 'auto').")


def _lowrank_directions(values, residuals, per_end=LOWRANK_DIRECTIONS):
    """Indices of the Ritz pairs a low-rank metric may correct, the farthest
    from 1 in log scale first: converged (residual within
    ``LOWRANK_RESIDUAL`` of ``|lambda - 1|``), outside ``[1 /
    LOWRANK_SPREAD, LOWRANK_SPREAD]``, at most ``per_end`` at each end."""
    ok = residuals <= LOWRANK_RESIDUAL * np.abs(values - 1.0)
    low = np.flatnonzero(ok & (values < 1.0 / LOWRANK_SPREAD))[:per_end]
    high = np.flatnonzero(ok & (values > LOWRANK_SPREAD))[::-1][:per_end]
    both = np.concatenate([low, high])
    return both[np.argsort(-np.abs(np.log(values[both])), kind="stable")]


def _lowrank_cap(ctx):
    """The earlier rank rule: ``k`` directions cost ``4 dim k`` flops a step,
    at most about the gradient's ``2 nnz K`` (and at least 8)."""
    nnz = ctx.X.nnz if hasattr(ctx.X, "nnz") else ctx.X.size
    return max(8, int(2 * nnz * ctx.glm.n_outputs / (4 * ctx.dim)))


def _cheapest_lowrank(ctx, values, residuals, weights):
    """The Ritz pairs the low-rank metric corrects (sorted indices): the
    first ``k`` candidates of :func:`_lowrank_directions` that minimise the
    predicted cost per effective draw of a Metropolis-adjusted
    full-gradient fit, ``(gradient + LOWRANK_DIRECTION_COST dim k)
    sqrt(kappa_k)``: a leapfrog step's gradient (``n`` rows at their
    measured cost, ``ROW_COST_*``), the metric's products with the ``k``
    directions, and the condition number they leave
    (:func:`_remaining_spectrum`), whose square root the steps per effective
    draw follow.  On the 10^4-feature text ridge (100,000 rows, 13
    non-zeros a row) a step's products with 128 directions cost a tenth of
    its gradient and leave a condition number of 4.1 where 65 leave 6.7."""
    order = _lowrank_directions(values, residuals)
    gradient = ctx.n * (ROW_COST_FIXED + ROW_COST_PER_NONZERO * row_nonzeros(ctx)) \
        * ctx.glm.n_outputs
    # never fewer than the earlier cap: on 300 sparse rows of 2,100 features
    # the rule's estimate took none, and the fit needed 5.6 times the passes
    # of the cap's 8 directions
    floor = min(_lowrank_cap(ctx), len(order))
    costs = []
    for k in range(floor, len(order) + 1):
        low, high = _remaining_spectrum(values, weights, np.sort(order[:k]), ctx.dim)
        costs.append((gradient + LOWRANK_DIRECTION_COST * ctx.dim * k) * np.sqrt(high / low))
    return np.sort(order[:floor + int(np.argmin(costs))])


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


def _dense_pays(ctx, lanczos):
    """Whether the dense Laplace metric beats the low-rank one for a
    Metropolis-adjusted full-gradient fit (``metric="auto"``, above
    ``MAX_DENSE_METRIC`` parameters).

    A leapfrog step costs the gradient's ``2 nnz K`` flops plus the
    metric's: ``4 dim^2`` dense, ``4 dim k`` low-rank.  In the dense
    Laplace metric the remainder is close to the identity; in the low-rank
    one the steps per effective draw grow like ``sqrt(kappa)``, ``kappa``
    the condition number left (:func:`_remaining_spectrum`) by the Ritz
    pairs of ``DENSE_CHECK_STEPS`` Lanczos steps (at most
    ``DENSE_CHECK_DIRECTIONS`` at each end, ``2 nnz K / (4 dim)`` in
    all): the first steps of ``lanczos``, the sequence the low-rank metric
    then continues, so a low-rank outcome makes no extra pass.  Dense when its
    factor fits in ``AUTO_DENSE_BYTES`` and ``(2 nnz K + 4 dim^2) <
    (2 nnz K + 4 dim k) sqrt(kappa)``.  a9a with its pairwise interactions
    (5,439 parameters): sqrt(kappa) 100 against a step 16.5 times dearer,
    dense (the fit converges about 5 times sooner); the 10^4-feature text
    posteriors: 2.6 against 81, low-rank."""
    d = ctx.dim
    if 8.0 * d * d > AUTO_DENSE_BYTES:
        return False
    values, _, residuals, weights = lanczos.pairs(DENSE_CHECK_STEPS, vectors=False)
    nnz = ctx.X.nnz if hasattr(ctx.X, "nnz") else ctx.X.size
    chosen = np.sort(_lowrank_directions(values, residuals,
                                         DENSE_CHECK_DIRECTIONS)[:_lowrank_cap(ctx)])
    lam_min, lam_max = _remaining_spectrum(values, weights, chosen, d)
    gradient = 2.0 * nnz * ctx.glm.n_outputs
    dense = gradient + 4.0 * d * d
    lowrank = gradient + 4.0 * d * len(chosen)
    return dense < lowrank * np.sqrt(lam_max / lam_min)


def plan_rounds(p, ctx, setup, continuing):
    """The warm-up and sampling rounds' plan (:class:`~._sampling._schedule.Plan`):
    thinning, warm-up length, the pass budget (``max_passes="auto"``: flops
    that grow with the parameters past the dense metric, and the same budget
    in seconds when ``max_time`` is None), the ESS target, the step and
    metric adaptation."""
    metric = Metric.from_config(setup.metric)
    iat = setup.iat if np.isfinite(setup.iat) else 10.0
    thin = p.thin
    if thin == "auto":
        # an effective draw per about three stored draws: thinner storage
        # loses little and keeps memory in proportion to the ESS
        thin = max(1, int(iat // 3)) if p.n_samples == "auto" else 1
    adapt_step = setup.metropolis and p.step_size == "auto"
    n_warmup = p.n_warmup
    if n_warmup == "auto" and not metric.whitened and not continuing:
        n_warmup = 1000 if not setup.metropolis else 150
    max_passes = p.max_passes
    auto_seconds = None
    if max_passes == "auto":
        # more parameters mix slower in a diagonal metric and need more
        # effective draws: the budget grows with them past the dense metric
        growth = min(2.0 * max(1.0, ctx.dim / MAX_DENSE_METRIC) ** 2, AUTO_BUDGET_GROWTH)
        flops = AUTO_BUDGET_FLOPS * growth
        max_passes = float(np.clip(flops / (ctx.n * row_flops(ctx)),
                                   *AUTO_BUDGET_PASSES))
        if p.max_time is None:
            # the same budget in seconds, at the rate its flops assume
            # (of the pass budget, where its floor raised it above the flops)
            auto_seconds = max(flops, max_passes * ctx.n * row_flops(ctx)) \
                / AUTO_BUDGET_FLOP_RATE
    return _schedule.Plan(
        n_warmup=n_warmup, n_samples=p.n_samples, thin=int(thin),
        target_ess=target_ess_for(p.target_ess, ctx.dim), max_passes=max_passes,
        max_time=p.max_time, auto_seconds=auto_seconds, iat=iat, n_rows=ctx.n,
        dim=ctx.dim,
        adapt_step=adapt_step and not continuing,
        target_accept=_schedule.MH_TARGET_ACCEPT.get(setup.sampler, 0.8),
        max_step=setup.max_step,
        # a low-rank metric comes from the Hessian's extreme directions
        # at set-up; its warm-up adapts the step only (a window of draws
        # at 10^4 parameters would cost more than it could correct)
        # nor does a dense one above MAX_DENSE_METRIC parameters
        adapt_metric=(metric.whitened and metric.kind != "lowrank" and not continuing
                      and not (metric.kind == "dense" and ctx.dim > MAX_DENSE_METRIC)),
        momentum_scale=setup.momentum_scale, setup_evals=ctx.n_grad_evals,
        draws_dtype=resolve_dtype(p.draws_dtype, ctx.dim),
        max_draws_bytes=resolve_budget(p.draws_memory_limit))
