"""Bayesian negative binomial regression (log link, overdispersed counts) by SG-MCMC."""
import numbers
import warnings

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions

from .._base import BaseSGMCMC, estimator_parameters
from .._sampling._glm import GLM, NEGATIVE_BINOMIAL
from .._sampling._shape_search import SHAPE_RTOL, estimate_shape
from .._warn_location import user_stacklevel
from ._logistic import (_DOC_ATTRS, _few_rows, _laplace_evidence_alpha, _params_with_alpha_auto,
                        _single_output_attrs)
from ._poisson import SGMCMCPoissonRegressor

#: with both ``alpha`` and ``shape`` "auto": alternate the shape at alpha and
#: alpha at the shape until each moves less than ``SHAPE_RTOL`` (relative), or
#: for at most this many rounds
SHAPE_ALPHA_ROUNDS = 10

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
        Poisson one: on Poisson counts the sds agree to 1e-6).""" + _params_with_alpha_auto(
        """  ``"auto"`` sets it once before
        sampling to the maximum of the Laplace approximation of the
        marginal likelihood at the shape, as :class:`SGMCMCPoissonRegressor`
        does; with ``shape="auto"`` too, the two searches alternate (the
        shape at alpha, then alpha at the shape) until neither moves by
        more than 0.1 %.  Stored in ``alpha_``; a shape and an alpha both
        "auto" are refused on a dask array.""") + """
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

    likelihood = "negative_binomial"
    _model_words = "negative binomial"

    _parameter_constraints = {
        **BaseSGMCMC._parameter_constraints,
        "alpha": [Interval(numbers.Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "shape": [Interval(numbers.Real, 0, None, closed="neither"), StrOptions({"auto"})],
    }

    def _make_glm(self, X, y):
        # an "auto" shape is resolved in _fit_context_hook, from the data
        return GLM(NEGATIVE_BINOMIAL, 1, () if self.shape == "auto" else (self.shape,))

    def _fit_context_hook(self, ctx):
        if isinstance(self.alpha, str):
            _shape_and_alpha(ctx, self.shape == "auto")
            self._few_rows = None
        else:
            if self.shape == "auto":
                _set_shape(ctx)
            self._few_rows = _few_rows(ctx, getattr(self, "_rows_span_dext", None))
        self.shape_ = ctx.glm.param("shape")

    def _model_spec(self):
        """The fitted negative binomial model, at ``shape_``."""
        return GLM(NEGATIVE_BINOMIAL, 1, (float(self.shape_),))


def _set_shape(ctx):
    """``shape="auto"`` at the context's alpha (:func:`estimate_shape`), set
    in its model; the passes counted, the caches of another shape dropped."""
    shape, n_passes = estimate_shape(ctx)
    ctx.n_grad_evals += n_passes * ctx.n
    ctx.glm.set_param("shape", shape)
    ctx.set_alpha(ctx.alpha)


def _shape_and_alpha(ctx, shape_auto):
    """``alpha="auto"``: the Laplace evidence's alpha at the shape
    (:func:`_laplace_evidence_alpha`); with ``shape="auto"`` too, the shape
    at alpha (from alpha = 1) and alpha at the shape, alternated until each
    moves less than ``SHAPE_RTOL``, at most ``SHAPE_ALPHA_ROUNDS`` rounds:
    a point where each is its own search's answer given the other.  Only the
    last round's warnings are shown (an evidence edge met on the way and left
    is not the answer's)."""
    if not shape_auto:
        _laplace_evidence_alpha(ctx)
        return
    caught, shape = [], None
    for _ in range(SHAPE_ALPHA_ROUNDS):
        previous = (shape, ctx.alpha)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _set_shape(ctx)
            _laplace_evidence_alpha(ctx)
        shape = ctx.glm.param("shape")
        if previous[0] is not None and max(abs(np.log(shape / previous[0])),
                                           abs(np.log(ctx.alpha / previous[1]))) <= SHAPE_RTOL:
            break
    for w in caught:
        warnings.warn(w.message, w.category, stacklevel=user_stacklevel())
