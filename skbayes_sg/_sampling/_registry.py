"""Registries of the two user-facing axes: ``sampler`` and ``subsampling``.

Adding a dynamics or an estimator means adding one entry here (and its
Cython class); the public estimators only look names up.

A :class:`SamplerSpec` turns the user's settings into a Cython
:class:`~._dynamics.Dynamics` per chain and knows its own automatic step
size.  A :class:`SubsamplingSpec` prepares, once per fit in the main
process, whatever its estimator needs (a picklable dict), then builds a
Cython :class:`~._estimators.GradientEstimator` per chain.
"""
from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import _dynamics, _estimators
from ._specs import DYNAMICS, ESTIMATORS, LINEAR, DynamicsSpec, EstimatorSpec

# Fraction of the stability/variance limit the automatic step sizes use:
# with it the stationary variance of a Gaussian target is inflated by
# about 5-10% in its stiffest direction (the analysis in ``_auto_sgld`` below,
# of the SGLD step of the formula sheet, doc/algorithms.rst).
AUTO_STEP_FRACTION = 0.1


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
        centre=cfg.get("centre"), alias=cfg.get("alias"))


def _with_alias(cfg):
    """Vose's alias table of ``cfg["weights"]``, built once per fit (every
    chain and every round rebuilds its estimator from the config)."""
    if "weights" in cfg:
        w = cfg["weights"] / cfg["weights"].sum()
        cfg["alias"] = _estimators.alias_table(w)
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


def _cvps_weights(ctx):
    """SGLD-CV-PS: p_i ∝ sqrt(tr(H_i S H_i M)) at the mode, S the Laplace
    covariance and M the sampler's metric: the expected squared norm, in the
    coordinates the sampler moves in, of the datum's control-variate term
    (the paper's rule, M = I, in the identity metric; in the Laplace metric
    p_i ∝ w_i x_i^T S x_i, the datum's curvature in the whitened metric).
    Cached: the prepare step and the noise model share it."""
    if "cvps_weights" not in ctx._cache:
        kind = ctx.resolved.metric_kind
        if kind == "identity":
            w = ctx.hessian_trace_weights(ctx.mode())
        else:
            Q = ctx.resolved.metric_row_cov          # x_i^T M x_i
            C = ctx.hessian_row_weights(ctx.mode(), full=True)
            if C.ndim == 1 and np.ndim(Q) == 1:
                # sqrt(E_i Q_i): E_i the term's second moment under the
                # Laplace law (C^2 Q at first order, when p_i ∝ C_i Q_i)
                E = ctx.row_noise_moments("fixed", ctx.resolved.posterior_row_cov)
                w = np.sqrt(np.maximum(E * Q, 0.0))
            elif C.ndim == 1:
                w = C * Q
            else:
                CQ = np.einsum("nkl,nlm->nkm", C, Q)
                w = np.sqrt(np.maximum(np.einsum("nkl,nlk->n", CQ, CQ), 0.0))
        ctx._cache["cvps_weights"] = _positive(w)
    return ctx._cache["cvps_weights"]


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


def _prepare_cv(ctx, weighted=False, adaptive=False):
    cfg = {"batch_size": ctx.batch_size, "control": "fixed",
           "access": "weighted" if weighted else ctx.settings.access}
    cfg.update(_mode_control(ctx))
    if weighted:
        cfg["weights"] = _cvps_weights(ctx)
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

    pilot = {k: v for k, v in cfg.items() if k not in ("centre", "adaptive_coef")}
    problem = _estimators.Problem(RowData(ctx.X, ctx.fit_intercept), ctx.y,
                                  ctx.glm.name, ctx.glm.n_outputs, ctx.glm.params,
                                  ctx.sample_weight)
    est = _build_glm(problem, pilot)
    noise = GradientNoise(ctx, SUBSAMPLINGS["cv"], ctx.mode())
    # the fit's step when it is in these coordinates (identity metric); a
    # whitened metric's step is in other units, and the pilot takes its own
    h = ctx.settings.step_size if ctx.resolved.metric_kind == "identity" else "auto"
    h = _auto_sgld(ctx, noise) if h == "auto" else float(h)
    dyn = _dynamics.SGLD(problem.dim, h, 1.0)
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
    if spec.weighting == "cvps":
        p = _cvps_weights(ctx)
    elif spec.weighting == "ps":
        p = _ps_weights(ctx)
    else:
        p = None
    if p is not None:
        p = p / p.sum()
    return ctx.noise_per_row(E, p, kind, factor, scale)


#: estimators that accept ``access=`` (the others draw from their own weights)
ACCESS_SUBSAMPLINGS = {name for name, spec in ESTIMATORS.items() if spec.access}


# ----------------------------------------------------------------- dynamics
def _dynamics_frame(ctx, temperature):
    """Temperature and reference precision the dynamics run with.  A whitened
    metric carries the temperature in its scale (the oracle returns
    ``L^T grad U / T``), so the dynamics sample exp(-(U/T)) at temperature 1
    around a unit reference Gaussian; the identity metric has no reference."""
    if ctx.resolved.metric_kind == "identity":
        return {"temperature": temperature, "reference_precision": 0.0}
    return {"temperature": 1.0, "reference_precision": 1.0}


def _restore(dyn, state):
    if state:
        dyn.set_state(state)
    return dyn


def _auto_sgld(ctx, noise):
    # ULA inflates the stationary variance along curvature lambda by
    # 1/(1 - h lambda/2); gradient noise of variance v along a direction by
    # about 1 + h v / 2: both stay near 5% with h = 0.1 / (L + v_max)
    return AUTO_STEP_FRACTION / (ctx.curvature(noise.theta0) + noise.curvature())


def _prepare_sgld(ctx, theta0, step_size, friction, noise, temperature):
    h = _auto_sgld(ctx, noise) if step_size == "auto" else float(step_size)
    return {**_dynamics_frame(ctx, temperature), "step_size": h}


def _build_sgld(dim, cfg, state, generator):
    return _restore(_dynamics.SGLD(dim, cfg["step_size"], cfg["temperature"],
                                   cfg["reference_precision"], cfg.get("metropolis", False)),
                    state)


def _psgld_V0(ctx, theta0, noise, temperature):
    """Start value of the RMSprop accumulator: E[gbar^2], gbar = g_hat / n, for
    theta near theta0 under the Laplace approximation of the target.

    E[g_hat^2] = (grad U(theta0))^2 + T diag(grad^2 U) (the identity
    E_pi[grad U grad U^T] = T E_pi[grad^2 U]) + the minibatch variance
    (n^2/b) Var_i(grad U_i).  A zero start would make G = 1/lambda and the
    first steps enormous; the plain squared gradient is ~0 at the mode and
    would make them tiny.
    """
    n, b = ctx.n, ctx.batch_size
    mean, mean_sq = ctx.gradient_moments(theta0)
    full_grad = n * mean + ctx.alpha * theta0
    sampling_var = ((n * n / b) * np.maximum(mean_sq - mean ** 2, 0.0)
                    if noise.stochastic else 0.0)
    return (full_grad ** 2 + temperature * ctx.hessian_diag(theta0) + sampling_var) / n ** 2


def _prepare_psgld(ctx, theta0, step_size, friction, noise, temperature):
    config = {"temperature": temperature, "n_data": float(ctx.n), "V0": None}
    if theta0 is None:  # continuing chains keep their accumulator
        return {**config, "step_size": float(step_size)}
    V0 = _psgld_V0(ctx, theta0, noise, temperature)
    G = 1.0 / (1e-5 + np.sqrt(V0))
    if step_size == "auto":
        # curvature of U in the preconditioned metric G^(1/2) H G^(1/2);
        # H <= alpha I + c X^T X (x) I_K, so bound it output by output
        K = ctx.glm.n_outputs
        Gk = np.sqrt(G.reshape(K, ctx.dext))
        L = max(ctx.curvature(theta0, Gk[k]) for k in range(K))
        v = max(noise.curvature(Gk[k]) for k in range(K)) if noise.stochastic else 0.0
        h = AUTO_STEP_FRACTION / (L + v)
    else:
        h = float(step_size)
    return {**config, "step_size": h, "V0": V0}


def _build_psgld(dim, cfg, state, generator):
    dyn = _dynamics.PSGLD(dim, cfg["step_size"], cfg["temperature"], n_data=cfg["n_data"],
                          V0=cfg["V0"])
    return _restore(dyn, state)


def _underdamped_auto(ctx, theta0, step_size, friction, noise, temperature):
    """Identity metric: critical damping of the stiffest direction by default;
    the step keeps h sqrt(L), h gamma and the gradient-noise inflation
    h v / (2 gamma) small (the noise adds h^2 v per step against 2 gamma T h
    injected)."""
    gamma = 2.0 * np.sqrt(ctx.curvature(theta0)) if friction == "auto" else float(friction)
    if step_size == "auto":
        L = ctx.curvature(theta0)
        v = noise.curvature()
        h = AUTO_STEP_FRACTION * min(1.0 / np.sqrt(L), 1.0 / gamma,
                                     2.0 * gamma / v if v > 0 else np.inf)
    else:
        h = float(step_size)
    return h, gamma


def _prepare_sghmc(ctx, theta0, step_size, friction, noise, temperature):
    h, gamma = _underdamped_auto(ctx, theta0, step_size, friction, noise, temperature)
    return {**_dynamics_frame(ctx, temperature), "step_size": h, "friction": gamma}


def _stationary_momentum(generator, dim, cfg, scale=1.0):
    # momentum starts at its stationary law N(0, scale T I)
    return np.sqrt(scale * cfg["temperature"]) * generator.standard_normal(dim)


def _start_momentum(dim, cfg, state, generator):
    """None when the saved state carries the momentum, else a stationary draw."""
    return None if state and "momentum" in state else _stationary_momentum(generator, dim, cfg)


def _build_sghmc(dim, cfg, state, generator):
    r0 = _start_momentum(dim, cfg, state, generator)
    dyn = _dynamics.SGHMC(dim, cfg["step_size"], cfg["temperature"], friction=cfg["friction"],
                          r0=r0, reference_precision=cfg["reference_precision"])
    return _restore(dyn, state)


def _build_baoab(dim, cfg, state, generator):
    p0 = _start_momentum(dim, cfg, state, generator)
    dyn = _dynamics.BAOAB(dim, cfg["step_size"], cfg["temperature"], friction=cfg["friction"],
                          p0=p0, reference_precision=cfg["reference_precision"])
    return _restore(dyn, state)


def _prepare_leapfrog(ctx, theta0, step_size, friction, noise, temperature):
    frame = _dynamics_frame(ctx, temperature)
    K = ctx.settings.n_leapfrog
    if K == "auto":
        # a whitened metric draws the number of steps per trajectory so that
        # its length is a jittered quarter period of the reference Gaussian;
        # the identity metric has no scale to set it from
        K = 0 if frame["reference_precision"] > 0 else 10
    K = int(K)
    if step_size == "auto":
        # 0.1 of leapfrog's stability limit 2/sqrt(L), and the gradient noise
        # gathered by p over K kicks (K h^2 v) at most 0.1 of its variance T
        L = ctx.curvature(theta0)
        v = noise.curvature()
        Kn = max(K, 1)
        h = min(0.2 / np.sqrt(L), np.sqrt(0.1 * temperature / (Kn * v)) if v > 0 else np.inf)
    else:
        h = float(step_size)
    return {**frame, "step_size": h, "n_leapfrog": K}


def _build_leapfrog(dim, cfg, state, generator):
    kappa = cfg["reference_precision"]
    # a diagonal metric's set-up may lengthen it to its slowest direction's
    trajectory = cfg.get("trajectory",
                         np.pi / (2.0 * np.sqrt(kappa)) if kappa > 0 else 1.0)
    dyn = _dynamics.SGHMCLeapfrog(dim, cfg["step_size"], cfg["temperature"],
                                  n_leapfrog=cfg["n_leapfrog"], reference_precision=kappa,
                                  metropolis=cfg.get("metropolis", False),
                                  trajectory=trajectory, jitter=cfg.get("jitter", 0.25))
    return _restore(dyn, state)


def _prepare_uld(ctx, theta0, step_size, friction, noise, temperature):
    u = float(ctx.settings.inv_mass)
    frame = _dynamics_frame(ctx, temperature)
    if frame["reference_precision"] > 0 or "auto" not in (friction, step_size):
        return {**frame, "step_size": float(step_size), "friction": float(friction),
                "inv_mass": u}
    # in time units the curvature seen by x is u L (frequency sqrt(u L)); the
    # power iteration it costs runs only for the "auto" settings that need it
    uL = u * ctx.curvature(theta0)
    gamma = 2.0 * np.sqrt(uL) if friction == "auto" else float(friction)
    if step_size == "auto":
        # the exact OU step is stable for any h; the frozen gradient needs
        # h sqrt(uL) small, and the gradient noise (u h)^2 v per step against
        # the injected 2 gamma u T h inflates v's variance by ~ u h v / (2 gamma T)
        v = u * noise.curvature()
        h = AUTO_STEP_FRACTION * min(1.0 / np.sqrt(uL), 1.0 / gamma,
                                     2.0 * gamma * temperature / v if v > 0 else np.inf)
    else:
        h = float(step_size)
    return {**frame, "step_size": h, "friction": gamma, "inv_mass": u}


def _build_uld(dim, cfg, state, generator):
    v0 = (None if state and "velocity" in state
          else _stationary_momentum(generator, dim, cfg, cfg["inv_mass"]))
    dyn = _dynamics.ULD(dim, cfg["step_size"], cfg["temperature"], friction=cfg["friction"],
                        inv_mass=cfg["inv_mass"], v0=v0,
                        reference_precision=cfg["reference_precision"])
    return _restore(dyn, state)


def _build_sgnht(dim, cfg, state, generator):
    p0 = _start_momentum(dim, cfg, state, generator)
    dyn = _dynamics.SGNHT(dim, cfg["step_size"], cfg["temperature"], diffusion=cfg["friction"],
                          p0=p0, reference_precision=cfg["reference_precision"])
    return _restore(dyn, state)


# the linear engine's builders per dynamics: (build, prepare)
_DYNAMICS_KERNELS = {
    "sgld": (_build_sgld, _prepare_sgld),
    "psgld": (_build_psgld, _prepare_psgld),
    "sghmc": (_build_sghmc, _prepare_sghmc),
    "sghmc-leapfrog": (_build_leapfrog, _prepare_leapfrog),
    "uld": (_build_uld, _prepare_uld),
    "baoab": (_build_baoab, _prepare_sghmc),
    # the thermostat starts at the friction the identity metric's rule sets
    # for SGHMC (critical damping of the stiffest direction)
    "sgnht": (_build_sgnht, _prepare_sghmc),
}

SAMPLERS = {name: SamplerSpec(definition, *_DYNAMICS_KERNELS[name])
            for name, definition in DYNAMICS.items() if LINEAR in definition.engines}
