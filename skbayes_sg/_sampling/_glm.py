"""Vectorised numpy descriptions of the GLMs the engine samples.

These are used once per fit (mode finding, step-size selection, Laplace
pieces, per-datum Lipschitz constants) and by tests as the independent
reference of the inline Cython residuals.  Notation follows the formula
sheet, doc/algorithms.rst:
``U(theta) = alpha/2 ||theta||^2 + sum_i U_i(theta)``, ``U_i = phi(z_i, y_i)``.
"""
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.special import expit, log_expit, logsumexp, softmax

LOGISTIC, GAUSSIAN, SOFTMAX = 0, 1, 2
MODEL_NAMES = {LOGISTIC: "logistic", GAUSSIAN: "gaussian", SOFTMAX: "softmax"}


@dataclass
class GLM:
    """A generalised linear model ``U_i(theta) = phi(theta @ (x_i, 1), y_i)``.

    Parameters
    ----------
    kind : int
        ``LOGISTIC`` (y in {0, 1}), ``GAUSSIAN`` (real y, variance
        ``noise_var``; y of shape (n, K) for K outputs) or ``SOFTMAX``
        (y in 0..K-1).
    n_outputs : int
        K: 1 for logistic, the number of classes for softmax, the number of
        targets per datum for Gaussian.
    noise_var : float
        Gaussian noise variance sigma^2 (ignored otherwise).
    """

    kind: int
    n_outputs: int = 1
    noise_var: float = 1.0

    @property
    def name(self):
        """The engine's name of the model (``Problem(..., model=name)``)."""
        return MODEL_NAMES[self.kind]

    # ---- per-datum pieces, vectorised over rows: Z has shape (n, K) ----
    def loss(self, Z, y):
        """Per-datum potentials ``U_i``, shape (n,)."""
        if self.kind == LOGISTIC:
            z = Z[:, 0]
            return -(y * log_expit(z) + (1 - y) * log_expit(-z))
        if self.kind == GAUSSIAN:
            return ((y.reshape(len(Z), -1) - Z) ** 2).sum(axis=1) / (2 * self.noise_var)
        yi = y.astype(np.intp)
        return logsumexp(Z, axis=1) - Z[np.arange(len(yi)), yi]

    def residual(self, Z, y):
        """``phi'(z_i, y_i)``, shape (n, K): grad U_i = residual_i (x) (x_i, 1)."""
        if self.kind == LOGISTIC:
            return (expit(Z[:, 0]) - y)[:, None]
        if self.kind == GAUSSIAN:
            return (Z - y.reshape(len(Z), -1)) / self.noise_var
        R = softmax(Z, axis=1)
        R[np.arange(len(y)), y.astype(np.intp)] -= 1.0
        return R

    def curvature_bound(self):
        """c with ``d^2 phi / dz^2 <= c I`` for every z, y (global Lipschitz)."""
        if self.kind == LOGISTIC:
            return 0.25
        if self.kind == GAUSSIAN:
            return 1.0 / self.noise_var
        return 0.5  # softmax Hessian diag(p) - p p^T has spectral norm <= 1/2

    def hessian_weights(self, Z, y):
        """Per-datum curvature ``d^2 phi/dz^2``: shape (n,) for K = 1,
        (n, K, K) for softmax; ``grad^2 U_i = H_i (x) x_i x_i^T``."""
        if self.kind == LOGISTIC:
            s = expit(Z[:, 0])
            return s * (1 - s)
        if self.kind == GAUSSIAN:
            return np.full(Z.shape[0], 1.0 / self.noise_var)
        P = softmax(Z, axis=1)
        return np.einsum("nk,kl->nkl", P, np.eye(Z.shape[1])) - P[:, :, None] * P[:, None, :]

    def lipschitz(self, X, fit_intercept, sample_weight=None):
        """Per-datum Lipschitz constants ``L_i`` of ``grad (w_i U_i)``:
        ``c w_i ||(x_i, 1)||^2`` (``w_i = 1`` without weights)."""
        L = self.curvature_bound() * row_norms_sq(X, fit_intercept)
        return L if sample_weight is None else L * sample_weight


def row_norms_sq(X, fit_intercept):
    """``||(x_i, 1)||^2`` for every row."""
    if sp.issparse(X):
        sq = np.asarray(X.multiply(X).sum(axis=1), dtype=np.float64).ravel()
    else:
        sq = np.einsum("ij,ij->i", X, X, dtype=np.float64)
    return sq + (1.0 if fit_intercept else 0.0)


def linear_predictor(X, Theta, fit_intercept):
    """``Z = X Theta[:, :d]^T + Theta[:, d]``: shape (n, K). Theta is (K, dext)."""
    d = X.shape[1]
    Z = np.asarray(X @ Theta[:, :d].T, dtype=np.float64)
    if fit_intercept:
        Z = Z + Theta[:, d]
    return Z


def potential_and_grad(theta, X, y, glm, alpha, fit_intercept, sample_weight=None):
    """Exact ``U(theta)`` and ``grad U(theta)`` (flat theta of length K*dext);
    with ``sample_weight``, ``U = alpha/2 ||theta||^2 + sum_i w_i U_i``."""
    K = glm.n_outputs
    Theta = theta.reshape(K, -1)
    Z = linear_predictor(X, Theta, fit_intercept)
    R = glm.residual(Z, y)
    loss = glm.loss(Z, y)
    if sample_weight is not None:
        R = R * sample_weight[:, None]
        loss = loss * sample_weight
    G = np.asarray((X.T @ R).T, dtype=np.float64)  # (K, d)
    if fit_intercept:
        G = np.hstack([G, R.sum(axis=0)[:, None]])
    u = loss.sum() + 0.5 * alpha * theta @ theta
    return u, G.ravel() + alpha * theta
