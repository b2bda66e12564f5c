"""Bayesian Poisson regression (log link, counts) by SG-MCMC."""

import numbers

import numpy as np
from sklearn.base import RegressorMixin
from sklearn.metrics import d2_tweedie_score
from sklearn.utils._param_validation import Interval, StrOptions

from .._dask_rows import rowwise
from .._base import BaseSGMCMC, PosteriorPredictiveMixin
from .._sampling._glm import GLM, POISSON, model_spec
from ._logistic import (_DOC_ATTRS, EvidenceAlphaMixin, _params_with_alpha_auto,
                        _single_output_attrs)


class SGMCMCPoissonRegressor(EvidenceAlphaMixin, PosteriorPredictiveMixin, RegressorMixin,
                             BaseSGMCMC):
    # assembled from shared parameter text: a bare string expression would
    # not become the docstring
    __doc__ = """Bayesian Poisson regression (log link) sampled by stochastic-gradient MCMC.

    Model: ``y_i ~ Poisson(exp(x_i^T w + b))`` for counts ``y_i >= 0``,
    prior ``(w, b) ~ N(0, alpha^-1 I)``; the posterior is ``exp(-U/T)`` with
    ``U(theta) = alpha ||theta||^2 / 2 + sum_i (exp(z_i) - y_i z_i)``,
    ``z_i = x_i^T w + b``.  Predictions average the per-draw rates
    ``exp(z)`` (Bayesian model averaging); :meth:`score` is the fraction of
    Poisson deviance explained, as for
    :class:`sklearn.linear_model.PoissonRegressor`.

    The curvature ``exp(z)`` of a Poisson datum has no global bound, so
    where the automatic settings of the identity metric need one they take
    the curvature at the posterior mode, doubled (the formula sheet,
    "Algorithms: the formulas", Models); the default whitened metric is
    built from the Hessian at the mode as for the other models.  ``y``
    need not be integer (as in scikit-learn, a rate times an exposure may
    be fitted), but must be nonnegative with a positive sum.

    Parameters
    ----------""" + _params_with_alpha_auto(
        """  ``"auto"`` sets it once before
        sampling to the maximum of the Laplace approximation of the
        marginal likelihood, as :class:`SGMCMCLogisticRegression` does
        (MacKay's fixed point, then a Brent search on the approximation;
        its passes counted in ``n_setup_passes_``), stored in
        ``alpha_``; also on a dask array.""") + """
    Attributes
    ----------""" + _single_output_attrs(" (on the log scale of the rate)") + _DOC_ATTRS + """
    Examples
    --------
    >>> import numpy as np
    >>> from skbayes_sg import SGMCMCPoissonRegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 2))
    >>> y = rng.poisson(np.exp(0.5 + X @ [0.3, -0.2]))
    >>> reg = SGMCMCPoissonRegressor(random_state=0).fit(X, y)
    >>> reg.predict(X[:2]).shape
    (2,)
    """

    #: its likelihood: the model registry entry (``_sampling._glm.MODELS``)
    likelihood = "poisson"

    #: the model's name in messages
    _model_words = "Poisson"

    _predictor_words = "log-rate"
    _wide_prior_words = ("wide enough for a row's count of 0 to pull its log-rate down with "
                         "little to stop it, where the posterior is far from Gaussian and the "
                         "chains move slowly or not at all")

    _parameter_constraints = {
        **BaseSGMCMC._parameter_constraints,
        "alpha": [Interval(numbers.Real, 0, None, closed="neither"), StrOptions({"auto"})],
    }

    def _encode_targets(self, y):
        y = model_spec(self.likelihood).validate_targets(y)
        if y.size and not np.sum(y) > 0:
            raise ValueError(f"y must have a positive sum for the {self._model_words} model "
                             "(every count is 0): there is no rate to fit.")
        return y

    def _make_glm(self, X, y):
        return GLM(POISSON, 1)

    def _model_spec(self):
        """The Poisson model (it has no fitted settings)."""
        return GLM(POISSON, 1)

    # ---------------------------------------------------------- predictions
    @rowwise
    def predict(self, X):
        """Posterior predictive mean: ``mean_s exp(x^T w_s + b_s)``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        y_mean : ndarray of shape (n_samples,)
            The expected count of each row, averaged over all kept draws of
            all chains (the Bayesian model average of the rates).
        """
        X = self._validate_X_predict(X)
        mean = np.empty(X.shape[0])
        for rows, Z in self._linear_predictor_draws(X):
            mean[rows] = np.exp(Z[:, :, 0]).mean(axis=1)
        return mean

    def score(self, X, y, sample_weight=None):
        """D^2, the fraction of Poisson deviance explained by :meth:`predict`.

        ``1 - D(y, predict(X)) / D(y, mean(y))`` with ``D`` the (weighted)
        Poisson deviance, as :meth:`sklearn.linear_model.PoissonRegressor.score`.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Nonnegative targets.
        sample_weight : array-like of shape (n_samples,), default=None

        Returns
        -------
        score : float
            At most 1; 0 for the constant prediction ``mean(y)``.
        """
        y = self._likelihood_target(np.asarray(y).ravel(), np.shape(X)[0])
        return float(d2_tweedie_score(y, self.predict(X), sample_weight=sample_weight,
                                      power=1))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.positive_only = True
        return tags
