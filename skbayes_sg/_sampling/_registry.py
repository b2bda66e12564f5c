"""Registries of the two user-facing axes: ``sampler`` and ``subsampling``.

A dynamics is its own file (``samplers/<name>.py``, with its Cython class);
:data:`SAMPLERS` is built from those files.  A gradient estimator is one
entry here (and its Cython class).  The public estimators only look names up.

A :class:`SamplerSpec` turns the user's settings into a Cython
:class:`~._dynamics.Dynamics` per chain and knows its own automatic step
size.  A :class:`SubsamplingSpec` prepares, once per fit in the main
process, whatever its estimator needs (a picklable dict), then builds a
Cython :class:`~._estimators.GradientEstimator` per chain.
"""
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import _estimators
from ._specs import ESTIMATORS, LINEAR, DynamicsSpec, EstimatorSpec
from .samplers import BY_NAME, sgld


def _read_through(spec, name):
    """A definition's field, read through a registry entry (never for private
    names or ``definition`` itself: unpickling probes those before they exist)."""
    if name.startswith("_") or name == "definition":
        raise AttributeError(name)
    return getattr(spec.definition, name)


@dataclass(frozen=True)
class SubsamplingSpec:
    """How the linear engine builds one ``subsampling=`` value's estimator.

    The algorithm's definition (hyperparameters, noise model, compatibility)
    is its :class:`~._specs.EstimatorSpec`, ``definition``; its fields read
    through (``spec.control``, ``spec.index_chain``, ...).

    Attributes
    ----------
    definition : EstimatorSpec
    prepare : callable(ctx) -> dict
        Once per fit (main process); the dict is passed to every chain.
    build : callable(problem, config) -> GradientEstimator
        Once per chain.
    noise_curvature : callable(ctx, theta, col_scale) -> float
        Upper bound on the largest eigenvalue of the covariance of the
        estimate at theta (in the metric diag(col_scale) when given), used by
        the automatic step size in the identity metric; 0 for exact gradients.
    """

    definition: EstimatorSpec
    prepare: Callable
    build: Callable
    noise_curvature: Callable

    def __getattr__(self, name):
        # stochastic, index_chain, access, control, weighting, hyperparameters
        return _read_through(self, name)


@dataclass(frozen=True)
class SamplerSpec:
    """How the linear engine builds one ``sampler=`` value's dynamics.

    The algorithm's definition (hyperparameters, momentum, Metropolis,
    whitened) is its :class:`~._specs.DynamicsSpec`, ``definition``; its
    fields read through (``spec.has_momentum``, ``spec.metropolis``, ...).

    Attributes
    ----------
    definition : DynamicsSpec
    build : callable(dim, config, state, generator) -> Dynamics
        ``state`` is the dynamics' saved state (warm start) or None, in which
        case it draws its initial auxiliary state from ``generator``.
    prepare : callable(ctx, theta0, step_size, friction, noise, temperature) -> dict
        Once per fit: resolves ``"auto"`` settings into numbers (the rules
        of the identity metric; in a whitened metric the error model has
        already chosen them).  ``noise`` is a :class:`GradientNoise`.
        ``theta0`` is None when the chains continue (warm start): they carry
        their own auxiliary state and the settings are already numbers.
    """

    definition: DynamicsSpec
    build: Callable
    prepare: Callable

    def __getattr__(self, name):
        return _read_through(self, name)


@dataclass
class GradientNoise:
    """What the dynamics' automatic settings know of the estimator's noise."""

    ctx: object
    spec: SubsamplingSpec
    theta0: object

    @property
    def stochastic(self):
        return self.spec.stochastic

    def curvature(self, col_scale=None):
        """Largest eigenvalue of the estimate's covariance at theta0 (0 if exact)."""
        return self.spec.noise_curvature(self.ctx, self.theta0, col_scale)


# --------------------------------------------------------------- estimators
def _prepare_none(ctx):
    return {"batch_size": ctx.batch_size, "access": ctx.settings.access}


def _uniform_noise(ctx, theta, col_scale=None):
    return ctx.minibatch_noise_curvature(theta, col_scale)


def _no_noise(ctx, theta, col_scale=None):
    return 0.0


def _build_uniform(problem, cfg):
    if cfg["access"] == "random":  # the lean kernel of plain SGLD
        return _estimators.UniformSubsampling(problem, cfg["batch_size"])
    return _estimators.GLMEstimator(problem, cfg["batch_size"], access=cfg["access"])


def _build_glm(problem, cfg):
    return _estimators.GLMEstimator(
        problem, cfg["batch_size"], access=cfg["access"], control=cfg["control"],
        period=cfg.get("period", 0), weights=cfg.get("weights"),
        control_point=cfg.get("control_point"), control_residuals=cfg.get("control_residuals"),
        control_sum=cfg.get("control_sum"), adaptive_coef=cfg.get("adaptive_coef"),
        centre=cfg.get("centre"), alias=cfg.get("alias"),
        control_curvature=cfg.get("control_curvature"),
        control_predictor=cfg.get("control_predictor"),
        control_hessian=cfg.get("control_hessian"))


def _with_alias(cfg):
    """Vose's alias table of ``cfg["weights"]`` and the importance factors
    ``1 / (n p_i)``, checked and built once per fit (every chain and every
    round rebuilds its estimator from the config)."""
    if "weights" in cfg:
        w = np.asarray(cfg["weights"], dtype=np.float64)
        if w.ndim != 1 or not np.all(np.isfinite(w)) or np.any(w <= 0):
            raise ValueError("weights must be n positive finite numbers")
        w = w / w.sum()
        cfg["alias"] = _estimators.alias_table(w) + (1.0 / (len(w) * w),)
    return cfg


# -- mode-based (SGLD-CV, SGLD-PS, SGLD-CV-PS, adaptive sizes) ----------------
def _mode_control(ctx):
    """theta_hat, its residuals and data gradient: one pass, shared by all chains."""
    mode = ctx.mode()
    R, G = ctx.residuals(mode)
    return {"control_point": mode, "control_residuals": R.ravel(), "control_sum": G}


def _ps_weights(ctx):
    """SGLD-PS: p_i ∝ ||grad U_i(theta_hat)|| = ||r_i|| ||(x_i, 1)||."""
    R, _ = ctx.residuals(ctx.mode())
    w = np.sqrt(np.einsum("nk,nk->n", R, R) * ctx.row_norms_sq())
    return _positive(w)


def _taylor_control(ctx):
    """The second-order control's per-row curvatures ``c_i`` and linear
    predictors at the mode, and the data Hessian there (the mode search's,
    less the prior), shared by all chains."""
    mode = ctx.mode()
    return {"control_curvature": ctx.hessian_row_weights(mode),
            "control_predictor": ctx.linear_predictors(mode)[:, 0],
            "control_hessian": ctx.hessian_at(mode) - ctx.alpha * np.eye(ctx.dim)}


def _cvps_weights(ctx, control="fixed"):
    """SGLD-CV-PS: p_i ∝ sqrt(tr(H_i S H_i M)) at the mode, S the Laplace
    covariance and M the sampler's metric: the expected squared norm, in the
    coordinates the sampler moves in, of the datum's control-variate term
    (the paper's rule, M = I, in the identity metric; in the Laplace metric
    p_i ∝ w_i x_i^T S x_i, the datum's curvature in the whitened metric).
    With the second-order control (``control="taylor"``) the rule of a
    whitened metric with one output reads that control's moments E_i (the
    identity metric keeps the paper's rule).  Cached: the prepare step and
    the noise model share it."""
    return ctx.memo(f"cvps_weights_{control}",
                    lambda: _positive(_cvps_raw_weights(ctx, control)))


def _cvps_raw_weights(ctx, control="fixed"):
    """The weights of :func:`_cvps_weights` before their floor."""
    kind = ctx.resolved.metric_kind
    if kind == "identity":
        w = ctx.hessian_trace_weights(ctx.mode())
    else:
        Q = ctx.resolved.metric_row_cov          # x_i^T M x_i
        C = ctx.hessian_row_weights(ctx.mode(), full=True)
        if C.ndim == 1 and np.ndim(Q) == 1:
            # sqrt(E_i Q_i): E_i the term's second moment under the
            # Laplace law (C^2 Q at first order, when p_i ∝ C_i Q_i)
            E = ctx.row_noise_moments(control, ctx.resolved.posterior_row_cov)
            w = np.sqrt(np.maximum(E * Q, 0.0))
        elif C.ndim == 1:
            w = C * Q
        else:
            CQ = np.einsum("nkl,nlm->nkm", C, Q)
            w = np.sqrt(np.maximum(np.einsum("nkl,nlk->n", CQ, CQ), 0.0))
    return w


#: share of uniform draws mixed into the importance weights (defensive
#: importance sampling, Hesterberg 1995): no datum's 1 / (n p_i) exceeds
#: 1 / DEFENSIVE_SHARE, at most a 1 / (1 - DEFENSIVE_SHARE) variance cost at
#: the mode
DEFENSIVE_SHARE = 0.1


def _positive(w):
    """Sampling weights from the static ones ``w``: mixed with the uniform
    law.  The static weights are the rows' gradient (PS) or curvature (CV-PS)
    at the mode; a row fitted to 1e-12 there has a weight of that order, yet
    a few posterior sds away its term is orders of magnitude larger, and
    divided by its tiny ``p_i`` one draw of it throws the chain out (breast
    cancer, SGHMC-CV-PS: a blow-up at every step size).  The mixture bounds
    every importance ratio by ``1 / DEFENSIVE_SHARE``."""
    w = np.asarray(w, dtype=np.float64)
    total = float(w.sum())
    if not np.isfinite(total) or total <= 0.0:
        return np.full(w.shape, 1.0 / max(w.size, 1))
    return (1.0 - DEFENSIVE_SHARE) * w / total + DEFENSIVE_SHARE / w.size


def _prepare_cv(ctx, weighted=False, adaptive=False, control="fixed"):
    cfg = {"batch_size": ctx.batch_size, "control": control,
           "access": "weighted" if weighted else ctx.settings.access}
    cfg.update(_mode_control(ctx))
    if control == "taylor":
        cfg.update(_taylor_control(ctx))
    if weighted:
        cfg["weights"] = _cvps_weights(ctx, control)
    if adaptive:
        cfg["centre"] = ctx.mode()
        cfg["adaptive_coef"] = _adaptive_coef(ctx, cfg)
    return _with_alias(cfg)


def _prepare_ps(ctx):
    return _with_alias({"batch_size": ctx.batch_size, "control": "none", "access": "weighted",
                        "weights": _ps_weights(ctx)})


def _adaptive_coef(ctx, cfg):
    """b_k = ceil(coef ||theta - theta_hat||^2): the pseudo-variance bound
    (1/b) sum_i (L_i^2 / p_i) ||theta - theta_hat||^2 kept under V*.

    ``pv_threshold`` given: coef = sum_i(L_i^2/p_i) / V*.  ``"pilot"``: the
    paper's rule, coef = b_pilot / q95 with q95 the 95% quantile of
    ||theta - theta_hat||^2 over a fixed-size pilot chain (SGLD with this
    estimator at b_pilot = batch_size and the fit's step size, started at the
    mode).  ``"auto"``: the same with the q95 the pilot estimates computed
    under the Laplace approximation (a short pilot from the mode has not
    reached stationarity and under-estimates it).
    """
    V = ctx.settings.pv_threshold
    if V not in ("auto", "pilot"):
        L = ctx.lipschitz()
        p = cfg["weights"] / cfg["weights"].sum() if "weights" in cfg else np.full(ctx.n, 1 / ctx.n)
        return float(np.sum(L ** 2 / p) / V)
    if V == "auto":
        # the stationary q95 the pilot estimates, under the Laplace approximation
        q95 = ctx.laplace_distance_quantile(0.95, seed=ctx.settings.pilot_seed)
        ctx.resolved.pilot_q95 = q95
        return ctx.batch_size / max(q95, 1e-300)
    from ._chain import ChainOracle, run_segment
    from ._dataset import RowData
    from ._dynamics import SGLD

    pilot = {k: v for k, v in cfg.items() if k not in ("centre", "adaptive_coef")}
    problem = _estimators.Problem(RowData(ctx.X, ctx.fit_intercept), ctx.y,
                                  ctx.glm.name, ctx.glm.n_outputs, ctx.glm.params,
                                  ctx.sample_weight)
    est = _build_glm(problem, pilot)
    noise = GradientNoise(ctx, SUBSAMPLINGS["cv"], ctx.mode())
    # the fit's step when it is in these coordinates (identity metric); a
    # whitened metric's step is in other units, and the pilot takes its own
    h = ctx.settings.step_size if ctx.resolved.metric_kind == "identity" else "auto"
    h = sgld.auto_step(ctx, noise) if h == "auto" else float(h)
    dyn = SGLD(problem.dim, h, 1.0)
    oracle = ChainOracle(est, ctx.alpha)
    steps = int(ctx.settings.pilot_steps)
    theta = np.array(ctx.mode())
    out = np.empty((steps, problem.dim))
    run_segment(oracle, dyn, theta, steps, 1, out,
                np.random.PCG64(ctx.settings.pilot_seed))
    ctx.n_grad_evals += oracle.n_evals
    q95 = float(np.quantile(np.sum((out - ctx.mode()) ** 2, axis=1), 0.95))
    ctx.resolved.pilot_q95 = q95
    return ctx.batch_size / max(q95, 1e-300)


def _cv_noise(ctx, theta, col_scale=None, weights=None):
    """Noise of a control-variate estimate at posterior distance from the
    control point: |r_i(theta) - r_i(theta_hat)| ~ h_i |x_i . (theta - theta_hat)|
    (h_i the datum's curvature at the mode), whose square is
    h_i^2 x_i^T S x_i on average under the Laplace law S."""
    mode = ctx.mode()
    row = ctx.hessian_row_weights(mode) ** 2 * ctx.leverages(mode)
    return _importance_noise(ctx, row, col_scale, weights)


def _importance_noise(ctx, row, col_scale, weights):
    if weights is None:
        return (ctx.n / ctx.batch_size) * ctx.gram_norm(col_scale, row)
    p = weights / weights.sum()
    return ctx.gram_norm(col_scale, row / (ctx.batch_size * p))


def _ps_noise(ctx, theta, col_scale=None):
    return _importance_noise(ctx, ctx.residual_norms_sq(theta), col_scale, _ps_weights(ctx))


def _cvps_noise(ctx, theta, col_scale=None):
    return _cv_noise(ctx, theta, col_scale, _cvps_weights(ctx))


# -- snapshot / aggregated gradients (SVRG-LD, SAGA-LD, TMU) -------------------
def _prepare_snapshot(ctx, control, periodic):
    cfg = {"batch_size": ctx.batch_size, "control": control,
           "access": ctx.settings.access}
    if periodic:
        m = ctx.settings.snapshot_period
        cfg["period"] = int(np.ceil(ctx.n / ctx.batch_size)) if m == "auto" else int(m)
    theta0 = ctx.resolved.shared_start
    if theta0 is not None:  # every chain starts here: one table for all of them
        R, G = ctx.residuals(theta0)
        cfg.update(control_point=theta0, control_residuals=R.ravel(), control_sum=G)
    return cfg


def _snapshot(control, periodic):
    return lambda ctx: _prepare_snapshot(ctx, control, periodic)


# the linear engine's builders per estimator: (prepare, build, noise_curvature)
_ESTIMATOR_KERNELS = {
    "full": (_prepare_none, lambda problem, cfg: _estimators.FullGradient(problem), _no_noise),
    "uniform": (_prepare_none, _build_uniform, _uniform_noise),
    # EWSG: uniform candidate minibatches, chosen by the index chain of the
    # chain oracle (any base estimator is wrapped the same way: "ewsg-svrg", ...)
    "ewsg": (_prepare_none, _build_uniform, _uniform_noise),
    "cv": (_prepare_cv, _build_glm, _cv_noise),
    "preferential": (_prepare_ps, _build_glm, _ps_noise),
    "cv-preferential": (lambda ctx: _prepare_cv(ctx, weighted=True), _build_glm, _cvps_noise),
    "cv2": (lambda ctx: _prepare_cv(ctx, control="taylor"), _build_glm, _cv_noise),
    "cv2-preferential": (lambda ctx: _prepare_cv(ctx, weighted=True, control="taylor"),
                         _build_glm, _cvps_noise),
    "adaptive-cv": (lambda ctx: _prepare_cv(ctx, adaptive=True), _build_glm, _cv_noise),
    "adaptive-cv-preferential": (lambda ctx: _prepare_cv(ctx, weighted=True, adaptive=True),
                                 _build_glm, _cvps_noise),
    "svrg": (_snapshot("snapshot", True), _build_glm, _cv_noise),
    "saga": (_snapshot("table", False), _build_glm, _cv_noise),
    "tmu": (_snapshot("table", True), _build_glm, _cv_noise),
    # EWSG over variance-reduced bases (EWSG paper, section G): the same index chain
    "ewsg-cv": (_prepare_cv, _build_glm, _cv_noise),
    "ewsg-svrg": (_snapshot("snapshot", True), _build_glm, _cv_noise),
}

SUBSAMPLINGS = {name: SubsamplingSpec(definition, *_ESTIMATOR_KERNELS[name])
                for name, definition in ESTIMATORS.items()}


def noise_per_row(ctx, spec, factor, kind, scale):
    """``v1`` of an estimator in a whitened metric: the largest variance, over
    directions of the sampler's coordinates, of its estimate with one row
    per minibatch, under the Laplace law at the mode (linearised residuals;
    the minibatch of b rows has ``v1 / b``).  0 for exact gradients.

    The rows' terms have second moments ``E_i`` (:meth:`FitContext.row_noise_moments`)
    and probabilities ``p_i``; the estimate's covariance in ``z`` is
    ``scale^2 L^T (sum_i E_i (x) x_i x_i^T / p_i) L``.
    """
    if spec.control is None:
        return 0.0
    Q = ctx.resolved.posterior_row_cov
    E = ctx.row_noise_moments(spec.control, Q)
    return ctx.noise_per_row(E, row_probabilities(ctx, spec), kind, factor, scale)


def row_probabilities(ctx, spec):
    """The probabilities ``p_i`` (summing to 1) with which estimator ``spec``
    draws rows, or None for uniform draws."""
    if spec.weighting == "cvps":
        p = _cvps_weights(ctx, spec.control)
    elif spec.weighting == "ps":
        p = _ps_weights(ctx)
    else:
        return None
    return p / p.sum()


#: estimators that accept ``access=`` (the others draw from their own weights)
ACCESS_SUBSAMPLINGS = {name for name, spec in ESTIMATORS.items() if spec.access}


# ----------------------------------------------------------------- dynamics
# each dynamics' builder and automatic settings are in its own file
# (samplers/<name>.py)
SAMPLERS = {name: SamplerSpec(module.DEFINITION, module.build, module.prepare)
            for name, module in BY_NAME.items() if LINEAR in module.DEFINITION.engines}
