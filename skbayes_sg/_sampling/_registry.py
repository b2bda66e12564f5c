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
    noise_factor : callable(ctx) -> float
        Ratio of the estimator's gradient-noise variance to the curvature,
        used by the automatic step size (0 for exact gradients).
    """

    prepare: Callable
    build: Callable
    noise_factor: Callable
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
    prepare : callable(ctx, theta0, step_size, friction, noise_factor, temperature) -> dict
        Once per fit: resolves ``"auto"`` settings into numbers.  ``theta0`` is
        None when the chains continue (warm start): they carry their own
        auxiliary state and the settings are already numbers.
    """

    build: Callable
    prepare: Callable
    has_momentum: bool = False


# --------------------------------------------------------------- estimators
def _prepare_none(ctx):
    return {"batch_size": ctx.batch_size}


def _uniform_noise(ctx):
    return ctx.n / ctx.batch_size


SUBSAMPLINGS = {
    "full": SubsamplingSpec(
        prepare=_prepare_none,
        build=lambda problem, cfg: _estimators.FullGradient(problem),
        noise_factor=lambda ctx: 0.0,
        stochastic=False,
    ),
    "uniform": SubsamplingSpec(
        prepare=_prepare_none,
        build=lambda problem, cfg: _estimators.UniformSubsampling(problem, cfg["batch_size"]),
        noise_factor=_uniform_noise,
    ),
    # EWSG: uniform candidate minibatches, chosen by the index chain of the
    # chain oracle (any base estimator can be wrapped the same way)
    "ewsg": SubsamplingSpec(
        prepare=_prepare_none,
        build=lambda problem, cfg: _estimators.UniformSubsampling(problem, cfg["batch_size"]),
        noise_factor=_uniform_noise,
        index_chain=True,
    ),
}


# ----------------------------------------------------------------- dynamics
def _auto_sgld(ctx, noise):
    return AUTO_STEP_FRACTION / (ctx.curvature_bound() * (1.0 + noise))


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
    sampling_var = (n * n / b) * np.maximum(mean_sq - mean ** 2, 0.0) if noise > 0 else 0.0
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
        Gk = G.reshape(K, ctx.dext)
        L = max(ctx.alpha * Gk[k].max()
                + ctx.glm.curvature_bound() * ctx.gram_norm(np.sqrt(Gk[k]))
                for k in range(K))
        h = AUTO_STEP_FRACTION / (L * (1.0 + noise))
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
        L = ctx.curvature_bound()
        h = AUTO_STEP_FRACTION * min(1.0 / np.sqrt(L), 1.0 / gamma,
                                     2.0 * gamma / (L * max(noise, 1e-300)))
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
