"""Bayesian negative binomial regression (log link, overdispersed counts) by SG-MCMC."""
import numbers

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.special import digamma, gammaln, polygamma
from sklearn.utils._param_validation import Interval, StrOptions

from .._base import BaseSGMCMC, estimator_parameters
from .._sampling._context import FitContext
from .._sampling._glm import GLM, NEGATIVE_BINOMIAL, linear_predictor
from ._logistic import _DOC_ATTRS, _DOC_PARAMS, _single_output_attrs
from ._poisson import SGMCMCPoissonRegressor

#: the shape's search interval in ``shape="auto"``: below it a count is
#: almost all dispersion, above it the model is the Poisson one to 1e-6
SHAPE_BOUNDS = (1e-4, 1e6)
#: alternate (mode | shape) and (shape | mode) until the shape moves less
#: than this fraction, or for at most SHAPE_ROUNDS rounds
SHAPE_RTOL, SHAPE_ROUNDS = 1e-3, 20


@estimator_parameters(shape="auto")
class SGMCMCNegativeBinomialRegressor(SGMCMCPoissonRegressor):
    __doc__ = """Bayesian negative binomial regression (log link) by stochastic-gradient MCMC.

    Model: ``y_i ~ NegativeBinomial(mean mu_i = exp(x_i^T w + b), shape r)``,
    the Gamma-Poisson mixture with ``Var y_i = mu_i + mu_i^2 / r`` (Stan's
    ``neg_binomial_2``, PyMC's ``NegativeBinomial(mu, alpha=r)``), prior
    ``(w, b) ~ N(0, alpha^-1 I)``; the posterior is ``exp(-U/T)`` with
    ``U(theta) = alpha ||theta||^2 / 2 + sum_i [(y_i + r) log(1 + e^{z_i} / r)
    - y_i z_i]``, ``z_i = x_i^T w + b``.  For counts more variable than a
    Poisson law allows (the usual case with real counts), where
    :class:`SGMCMCPoissonRegressor` would give too narrow a posterior.  As
    ``r -> inf`` it is the Poisson model.

    The shape ``r`` is the model's own parameter: it is fixed while the
    coefficients are sampled.  ``shape="auto"`` sets it to its joint
    maximum a posteriori value with the coefficients (a flat prior on
    ``log r``; what R's ``MASS::glm.nb`` and statsmodels call the maximum
    likelihood estimate, here with the coefficients' prior), stored as
    ``shape_``.  The uncertainty in ``r`` is then not carried into the
    draws: with few rows, or to study it, fit at several shapes.

    Parameters
    ----------
    shape : float or "auto", default="auto"
        The negative binomial shape ``r > 0`` (``Var y = mu + mu^2 / r``;
        small: much overdispersion).  ``"auto"``: estimated with the mode
        (above), within ``[1e-4, 1e6]``; an estimate near ``1e6`` says the
        counts are no more variable than Poisson ones (the fit is then the
        Poisson one: on Poisson counts the sds agree to 1e-6).""" + _DOC_PARAMS + """
    Attributes
    ----------
    shape_ : float
        The shape the draws were made at (``shape``, or its estimate).""" + (
        _single_output_attrs(" (on the log scale of the mean)")) + _DOC_ATTRS + """
    Examples
    --------
    >>> import numpy as np
    >>> from skbayes_sg import SGMCMCNegativeBinomialRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 2))
    >>> mu = np.exp(1.0 + X @ [0.3, -0.2])
    >>> y = rng.negative_binomial(2.0, 2.0 / (2.0 + mu))
    >>> reg = SGMCMCNegativeBinomialRegressor(random_state=0).fit(X, y)
    >>> reg.predict(X[:2]).shape
    (2,)
    """

    _registry_model = "negative_binomial"
    _model_words = "negative binomial"

    _parameter_constraints = {
        **BaseSGMCMC._parameter_constraints,
        "shape": [Interval(numbers.Real, 0, None, closed="neither"), StrOptions({"auto"})],
    }

    def _make_glm(self, X, y):
        # an "auto" shape is resolved in _fit_context_hook, from the data
        return GLM(NEGATIVE_BINOMIAL, 1, () if self.shape == "auto" else (self.shape,))

    def _fit_context_hook(self, ctx):
        if self.shape == "auto":
            shape, n_passes = _estimate_shape(ctx)
            ctx.n_grad_evals += n_passes * ctx.n
            ctx.glm.set_param("shape", shape)
        self.shape_ = ctx.glm.param("shape")

    def _model_spec(self):
        """The fitted negative binomial model, at ``shape_``."""
        return GLM(NEGATIVE_BINOMIAL, 1, (float(self.shape_),))


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
    """The shape of ``shape="auto"`` (:func:`_estimate_shape`'s alternation,
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


def _estimate_shape(ctx):
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
