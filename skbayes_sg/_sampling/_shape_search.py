"""The negative binomial's shape ``r`` by maximum likelihood, jointly with
the coefficients' mode (``shape="auto"``): on rows in memory
(:func:`estimate_shape`), and where every evaluation is a pass over rows
held elsewhere, a dask array (:func:`search_shape`, :func:`shape_terms`)."""
import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import digamma, gammaln, polygamma

from ._context import FitContext
from ._glm import GLM, NEGATIVE_BINOMIAL, linear_predictor

#: the shape's search interval in ``shape="auto"``: below it a count is
#: almost all dispersion, above it the model is the Poisson one to 1e-6
SHAPE_BOUNDS = (1e-4, 1e6)
#: alternate (mode | shape) and (shape | mode) until the shape moves less
#: than this fraction, or for at most SHAPE_ROUNDS rounds
SHAPE_RTOL, SHAPE_ROUNDS = 1e-3, 20



def shape_terms(y, mu, log_r, weight=None):
    """``-sum_i w_i log NB(y_i | mu_i, r)`` (the terms that depend on r) and
    its first two derivatives in ``s = log r``, at ``r = exp(log_r)``: what
    a pass over rows held elsewhere returns to :func:`search_shape`."""
    r = np.exp(log_r)
    rm = r + mu
    f = -(gammaln(y + r) - gammaln(r) + r * np.log(r) - (y + r) * np.log(rm))
    f_r = digamma(r) - digamma(y + r) - np.log(r) - 1.0 + np.log(rm) + (y + r) / rm
    f_rr = (polygamma(1, r) - polygamma(1, y + r) - 1.0 / r + 1.0 / rm
            + (mu - y) / (rm * rm))
    terms = np.stack([f, r * f_r, r * f_r + r * r * f_rr])
    return terms.sum(axis=1) if weight is None else terms @ weight


def search_shape(mode_at, terms_at, shape, theta):
    """The shape of ``shape="auto"`` (:func:`estimate_shape`'s alternation,
    the same stopping rule) when every evaluation is a pass over rows held
    elsewhere (a dask array): ``mode_at(shape, theta)`` is the mode at a
    fixed shape searched from ``theta``; ``terms_at(theta, log_r)`` the
    summed :func:`shape_terms` there.  The shape step is Newton's in
    ``log r`` (a pass each), halved where it does not lower the objective,
    kept in ``SHAPE_BOUNDS``; start from a good guess (a sample's shape).

    Returns
    -------
    shape, theta : the shape and the mode at it
    n_passes : int
        Evaluations of ``terms_at`` (each ``mode_at`` counts its own).
    """
    low, high = np.log(SHAPE_BOUNDS[0]), np.log(SHAPE_BOUNDS[1])
    n_passes = 0
    for _ in range(SHAPE_ROUNDS):
        theta = mode_at(shape, theta)
        s, previous = np.log(shape), shape
        f, g, h = terms_at(theta, s)
        n_passes += 1
        for _ in range(50):
            step = -g / h if h > 0 else -np.sign(g)
            trial = float(np.clip(s + np.clip(step, -2.0, 2.0), low, high))
            while abs(trial - s) > 1e-10:
                f_new, g_new, h_new = terms_at(theta, trial)
                n_passes += 1
                if f_new <= f:
                    break
                trial = 0.5 * (s + trial)
            else:
                break
            converged = abs(trial - s) <= 1e-6
            s, f, g, h = trial, f_new, g_new, h_new
            if converged:
                break
        shape = float(np.exp(s))
        if abs(shape - previous) <= SHAPE_RTOL * previous:
            break
    return shape, theta, n_passes


def _shape_log_likelihood(r, y, mu, weight):
    """``sum_i w_i log NB(y_i | mu_i, r)``, the terms that depend on r."""
    ll = (gammaln(y + r) - gammaln(r) + r * np.log(r) - (y + r) * np.log(r + mu))
    return float(ll @ weight) if weight is not None else float(ll.sum())


def estimate_shape(ctx):
    """The shape ``r`` that maximises the posterior density jointly with
    the coefficients (flat prior on ``log r``), by alternating the mode at
    a fixed shape (Newton, the fit's own set-up, from the last round's
    mode) and the shape at a fixed mean (a one-dimensional search on
    ``log r``).

    Returns
    -------
    shape : float
    n_passes : int
        Data passes spent (the modes' and the searches').
    """
    low, high = np.log(SHAPE_BOUNDS[0]), np.log(SHAPE_BOUNDS[1])
    shape, n_passes, theta = 1.0, 0, None
    for _ in range(SHAPE_ROUNDS):
        at_shape = FitContext(ctx.X, ctx.y, GLM(NEGATIVE_BINOMIAL, 1, (shape,)), ctx.alpha,
                              ctx.fit_intercept, ctx.batch_size, ctx.sample_weight)
        if theta is not None:
            at_shape.search_mode_from(theta)    # the last round's mode: a few steps away
        theta = at_shape.mode()
        n_passes += at_shape.n_grad_evals // max(ctx.n, 1) + 1
        mu = np.exp(linear_predictor(ctx.X, theta.reshape(1, -1), ctx.fit_intercept)[:, 0])
        found = minimize_scalar(
            lambda log_r: -_shape_log_likelihood(np.exp(log_r), ctx.y, mu, ctx.sample_weight),
            bounds=(low, high), method="bounded", options={"xatol": 1e-4})
        previous, shape = shape, float(np.exp(found.x))
        if abs(shape - previous) <= SHAPE_RTOL * previous:
            break
    return shape, n_passes
