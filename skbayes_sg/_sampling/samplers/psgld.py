"""pSGLD: SGLD preconditioned by an RMSprop diagonal (Li et al., 2016).

``G = 1 / (eps + sqrt(V))`` with ``V`` the running mean of squared
gradients per datum; the step ``theta' = theta - h G grad U + sqrt(2 h T G)
xi``, the Gamma (divergence of G) term dropped as in the paper's practice.
It runs in its own metric, never a whitened one, and has no error model.

Kernels: ``_dynamics.PSGLD`` (Cython), the network's
``neural_network._net_dynamics.PSGLD`` (its V starts at the first squared
estimate there: a network has no Laplace moments).
"""
import numpy as np

from .._definitions import DynamicsSpec
from ._common import AUTO_STEP_FRACTION, restore, unit_momentum_variance
from .sgld import MIXING_HINT as SGLD_MIXING_HINT

#: its place in the lists of the docs and error messages
LISTED = 2
DEFINITION = DynamicsSpec(
    "psgld", "its RMSprop-preconditioned variant (its own metric, the Gamma "
    "correction dropped)", whitened=False, network_learning_rate=1e-3)

MAX_STEP = None          # no error model: it is never whitened
FRICTION_GRID = None
METROPOLIS = None
IDENTITY_STEP_CHECK = True
MIXING_HINT = SGLD_MIXING_HINT
momentum_variance_scale = unit_momentum_variance


def start_accumulator(ctx, theta0, noise, temperature):
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


def prepare(ctx, theta0, step_size, friction, noise, temperature):
    config = {"temperature": temperature, "n_data": float(ctx.n), "V0": None}
    if theta0 is None:  # continuing chains keep their accumulator
        return {**config, "step_size": float(step_size)}
    V0 = start_accumulator(ctx, theta0, noise, temperature)
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


def build(dim, cfg, state, generator):
    from .. import _dynamics
    dyn = _dynamics.PSGLD(dim, cfg["step_size"], cfg["temperature"], n_data=cfg["n_data"],
                          V0=cfg["V0"])
    return restore(dyn, state)


linear_step = None


def identity_preconditioner(cfg, states, dim):
    """The chains' RMSprop diagonal G at the end of the fit, averaged."""
    V = np.mean([np.asarray(s.dynamics["V"]) for s in states], axis=0)
    return np.sqrt(1.0 / (float(cfg.get("eps", 1e-5)) + np.sqrt(V)))
