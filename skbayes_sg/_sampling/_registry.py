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

# Fraction of the stability/variance limit the automatic step sizes use:
# with it the stationary variance of a Gaussian target is inflated by
# about 5-10% in its stiffest direction (ALGORITHMS.md's SGLD analysis).
AUTO_STEP_FRACTION = 0.1


@dataclass(frozen=True)
class SubsamplingSpec:
    """How one ``subsampling=`` value builds its estimator.

    Attributes
    ----------
    prepare : callable(ctx) -> dict
        Once per fit (main process); the dict is passed to every chain.
    build : callable(problem, config) -> GradientEstimator
        Once per chain.
    noise_curvature : callable(ctx, theta, col_scale) -> float
        Upper bound on the largest eigenvalue of the covariance of the
        estimate at theta (in the metric diag(col_scale) when given), used by
        the automatic step size; 0 for exact gradients.
    """

    prepare: Callable
    build: Callable
    noise_curvature: Callable
    stochastic: bool = True
    index_chain: bool = False   # choose among candidates with the EWSG index chain


@dataclass(frozen=True)
class SamplerSpec:
    """How one ``sampler=`` value builds its dynamics.

    Attributes
    ----------
    build : callable(dim, config, state, generator) -> Dynamics
        ``state`` is the dynamics' saved state (warm start) or None, in which
        case it draws its initial auxiliary state from ``generator``.
    prepare : callable(ctx, theta0, step_size, friction, noise, temperature) -> dict
        Once per fit: resolves ``"auto"`` settings into numbers.  ``noise`` is
        a :class:`GradientNoise`.  ``theta0`` is None when the chains continue
        (warm start): they carry their own auxiliary state and the settings
        are already numbers.
    """

    build: Callable
    prepare: Callable
    has_momentum: bool = False


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
    return {"batch_size": ctx.batch_size}


def _uniform_noise(ctx, theta, col_scale=None):
    return ctx.minibatch_noise_curvature(theta, col_scale)


def _no_noise(ctx, theta, col_scale=None):
    return 0.0


SUBSAMPLINGS = {
    "full": SubsamplingSpec(
        prepare=_prepare_none,
        build=lambda problem, cfg: _estimators.FullGradient(problem),
        noise_curvature=_no_noise,
        stochastic=False,
    ),
    "uniform": SubsamplingSpec(
        prepare=_prepare_none,
        build=lambda problem, cfg: _estimators.UniformSubsampling(problem, cfg["batch_size"]),
        noise_curvature=_uniform_noise,
    ),
    # EWSG: uniform candidate minibatches, chosen by the index chain of the
    # chain oracle (any base estimator can be wrapped the same way)
    "ewsg": SubsamplingSpec(
        prepare=_prepare_none,
        build=lambda problem, cfg: _estimators.UniformSubsampling(problem, cfg["batch_size"]),
        noise_curvature=_uniform_noise,
        index_chain=True,
    ),
}


# ----------------------------------------------------------------- dynamics
def _auto_sgld(ctx, noise):
    # ULA inflates the stationary variance along curvature lambda by
    # 1/(1 - h lambda/2); gradient noise of variance v along a direction by
    # about 1 + h v / 2: both stay near 5% with h = 0.1 / (L + v_max)
    return AUTO_STEP_FRACTION / (ctx.curvature_bound() + noise.curvature())


def _prepare_sgld(ctx, theta0, step_size, friction, noise, temperature):
    h = _auto_sgld(ctx, noise) if step_size == "auto" else float(step_size)
    return {"step_size": h, "temperature": temperature}


def _build_sgld(dim, cfg, state, generator):
    return _dynamics.SGLD(dim, cfg["step_size"], cfg["temperature"])


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
        L = max(ctx.alpha * Gk[k].max() ** 2
                + ctx.glm.curvature_bound() * ctx.gram_norm(Gk[k]) for k in range(K))
        v = max(noise.curvature(Gk[k]) for k in range(K)) if noise.stochastic else 0.0
        h = AUTO_STEP_FRACTION / (L + v)
    else:
        h = float(step_size)
    return {**config, "step_size": h, "V0": V0}


def _build_psgld(dim, cfg, state, generator):
    dyn = _dynamics.PSGLD(dim, cfg["step_size"], cfg["temperature"], n_data=cfg["n_data"],
                          V0=cfg["V0"])
    if state:
        dyn.set_state(state)
    return dyn


def _prepare_sghmc(ctx, theta0, step_size, friction, noise, temperature):
    # the curvature bound costs a power iteration: only computed when needed
    gamma = 2.0 * np.sqrt(ctx.curvature_bound()) if friction == "auto" else float(friction)
    if step_size == "auto":
        # critical damping of the stiffest direction by default; the step keeps
        # h sqrt(L), h gamma and the gradient-noise inflation h noise L / (2 gamma) small
        # the gradient noise enters r with variance h^2 v per step against
        # 2 gamma T h injected: inflation about 1 + h v / (2 gamma)
        L = ctx.curvature_bound()
        v = noise.curvature()
        h = AUTO_STEP_FRACTION * min(1.0 / np.sqrt(L), 1.0 / gamma,
                                     2.0 * gamma / v if v > 0 else np.inf)
    else:
        h = float(step_size)
    return {"step_size": h, "temperature": temperature, "friction": gamma}


def _build_sghmc(dim, cfg, state, generator):
    if state and "momentum" in state:
        r0 = state["momentum"]
    else:  # momentum starts at its stationary law N(0, T I)
        r0 = np.sqrt(cfg["temperature"]) * generator.standard_normal(dim)
    return _dynamics.SGHMC(dim, cfg["step_size"], cfg["temperature"],
                           friction=cfg["friction"], r0=r0)


SAMPLERS = {
    "sgld": SamplerSpec(build=_build_sgld, prepare=_prepare_sgld),
    "psgld": SamplerSpec(build=_build_psgld, prepare=_prepare_psgld),
    "sghmc": SamplerSpec(build=_build_sghmc, prepare=_prepare_sghmc, has_momentum=True),
}
