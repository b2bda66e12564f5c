"""Bayesian linear regression with a Gaussian prior (ridge) by SG-MCMC."""
import numbers
import warnings

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.sparse.linalg import LinearOperator
from sklearn.base import RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions

from .._dask_rows import rowwise
from .._base import BaseSGMCMC, PosteriorPredictiveMixin, estimator_parameters
from .._sampling._glm import GAUSSIAN, GLM, model_spec
from .._sampling._spectrum import (EVIDENCE_LOG_SE, EVIDENCE_MAX_PROBES, EVIDENCE_PROBE_STEPS,
                                   EVIDENCE_PROBES, StochasticTrace, gauss_quadrature,
                                   jackknife_se)
from ._logistic import _DOC_ATTRS, _DOC_PARAMS, _single_output_attrs
from .._warn_location import user_stacklevel
from ..exceptions import UncentredTargetWarning


@estimator_parameters(noise_var="auto", alpha="auto")
class SGMCMCRidge(PosteriorPredictiveMixin, RegressorMixin, BaseSGMCMC):
    # assembled from shared parameter text: a bare string expression would
    # not become the docstring
    __doc__ = """Bayesian ridge regression sampled by stochastic-gradient MCMC.

    Model: ``y_i ~ N(x_i^T w + b, noise_var)``, prior ``(w, b) ~ N(0, alpha^-1 I)``;
    its posterior is Gaussian in closed form, which makes this estimator the
    exact yardstick of the samplers.

    Parameters
    ----------""" + _DOC_PARAMS.replace(
        """    alpha : float, default=1.0
        Precision of the Gaussian prior N(0, alpha^-1 I) on every
        coefficient, intercept included.""",
        """    alpha : float or "auto", default="auto"
        Precision of the Gaussian prior N(0, alpha^-1 I) on every
        coefficient, intercept included.  "auto" sets it, with the noise
        variance, to the values that maximise the evidence (as
        :class:`sklearn.linear_model.BayesianRidge` does); stored as
        ``alpha_``.""") + """
    noise_var : float or "auto", default="auto"
        Observation noise variance sigma^2.  "auto" (or None) sets it once
        before sampling to the value that maximises the evidence (the
        marginal likelihood ``N(y; 0, sigma^2 I + X X^T / alpha)``, as
        :class:`sklearn.linear_model.BayesianRidge` does), which stays right
        when there are more features than rows; stored as ``noise_var_``.
        The draws are then of the coefficients given that variance (an
        empirical-Bayes plug-in: its own uncertainty, of relative size
        ``sqrt(2 / n)``, is not propagated).

    Attributes
    ----------""" + _single_output_attrs() + """
    noise_var_ : float
        The noise variance used.""" + _DOC_ATTRS + """
    Examples
    --------
    >>> import numpy as np
    >>> from skbayes_sg import SGMCMCRidge
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 3))
    >>> y = X @ [1.0, -2.0, 0.5] + rng.normal(size=200)
    >>> reg = SGMCMCRidge(random_state=0).fit(X, y)
    >>> mean, std = reg.predict(X[:2], return_std=True)
    """

    #: its likelihood: the model registry entry (``_sampling._glm.MODELS``)
    likelihood = "gaussian"

    _parameter_constraints = {
        **BaseSGMCMC._parameter_constraints,
        "noise_var": [Interval(numbers.Real, 0, None, closed="neither"),
                      StrOptions({"auto"}), None],
        "alpha": [Interval(numbers.Real, 0, None, closed="neither"), StrOptions({"auto"})],
    }


    def _encode_targets(self, y):
        return model_spec(GAUSSIAN).validate_targets(y)

    def _make_glm(self, X, y):
        return GLM(GAUSSIAN, 1)  # noise variance resolved in _fit_context_hook

    def _hyperparameters_from_gram(self, gram, xty, yty, weight_sum, y_sum):
        """``alpha`` and ``noise_var`` as numbers, those given kept and those
        set to ``"auto"`` found by the evidence from the data's sufficient
        statistics (a fit on a dask array, :mod:`skbayes_sg._dask_fit`, sums
        them in one pass on the cluster); the same spectrum and search as
        :func:`_maximise_evidence` on rows in memory."""
        given_noise = (float(self.noise_var) if self.noise_var is not None
                       and not isinstance(self.noise_var, str) else None)
        given_alpha = None if isinstance(self.alpha, str) else float(self.alpha)
        sigma2, alpha = evidence_from_gram(gram, xty, yty, weight_sum, y_sum,
                                           alpha=given_alpha, noise_var=given_noise)
        return {"alpha": alpha, "noise_var": sigma2}

    def _fit_context_hook(self, ctx):
        given_noise = (float(self.noise_var) if self.noise_var is not None
                       and not isinstance(self.noise_var, str) else None)
        given_alpha = None if isinstance(self.alpha, str) else float(self.alpha)
        trace_cache = {}            # the quadrature's probes, for the centred y's evidence
        sigma2, alpha, n_passes = _maximise_evidence(ctx.X, ctx.y, ctx.fit_intercept,
                                                     alpha=given_alpha, noise_var=given_noise,
                                                     sample_weight=ctx.sample_weight,
                                                     trace_cache=trace_cache)
        ctx.n_grad_evals += n_passes * ctx.n
        ctx.alpha = alpha
        ctx.glm.set_param("noise_var", sigma2)
        self.noise_var_ = sigma2
        collapsed = sigma2 <= 1e-9 * (_weighted_moments(ctx.y, ctx.sample_weight)[1] + 1.0)
        if given_noise is None and collapsed and ctx.sample_weight is not None:
            warnings.warn(
                f"The evidence puts the noise variance at {sigma2:.3g}: the weights act as "
                "repeated rows, and repeated rows that the coefficients can fit exactly "
                "(here the features outnumber the distinct rows) look noise-free. Pass "
                "noise_var, or weights that do not count rows more than once.",
                UserWarning, stacklevel=user_stacklevel())
        elif given_noise is None and given_alpha is not None and collapsed:
            # the user's prior lets the coefficients interpolate y: the
            # evidence then leaves no noise, and predictions away from the
            # data carry the prior's whole variance
            warnings.warn(
                f"The evidence puts the noise variance at {sigma2:.3g}: with alpha={alpha:g} "
                "the coefficients can explain y exactly (more features than rows, or "
                "noise-free targets), so the posterior is nearly degenerate. Leave "
                "alpha='auto' (estimated with the noise variance) or pass noise_var.",
                UserWarning, stacklevel=user_stacklevel())
        self._warn_if_intercept_prior_binds(ctx, given_noise, trace_cache)

    def _warn_if_intercept_prior_binds(self, ctx, given_noise=None, trace_cache=None):
        # The prior N(0, 1/alpha) covers the intercept too (the model as
        # specified); a target far from 0 then gets a shrunk intercept and an
        # inflated noise variance (alpha given), or an alpha set by the
        # intercept rather than the slopes (alpha="auto").  Say so, with the
        # fix, rather than fail quietly.
        if not self.fit_intercept or ctx.n < 2:
            return
        y_mean, y_var = _weighted_moments(ctx.y, ctx.sample_weight)
        y_sd = float(np.sqrt(y_var))
        if isinstance(self.alpha, str):
            centred = self._alpha_of_centred_y(ctx, y_mean, given_noise, trace_cache)
            if centred is not None and not 1 / ALPHA_SHIFT_WARN < centred / ctx.alpha \
                    < ALPHA_SHIFT_WARN:
                warnings.warn(
                    f"The mean of y ({y_mean:.3g}, {abs(y_mean) / max(y_sd, 1e-300):.2g} "
                    f"sd of y from 0) sets alpha='auto': the prior N(0, "
                    f"1/alpha) also covers the intercept, and the evidence puts alpha_ at "
                    f"{ctx.alpha:.3g} where the centred y puts it at {centred:.3g} "
                    f"({max(centred / ctx.alpha, ctx.alpha / centred):.3g} times "
                    "apart; sklearn's BayesianRidge, which leaves the intercept "
                    "unpenalised, is near the centred value), so the slopes' prior is set "
                    "by the intercept. Centre or standardise y (e.g. "
                    "sklearn.compose.TransformedTargetRegressor with StandardScaler).",
                    UncentredTargetWarning, stacklevel=user_stacklevel())
            return
        prior_sd = 1.0 / np.sqrt(ctx.alpha)
        if abs(y_mean) > 3.0 * prior_sd:
            warnings.warn(
                f"The mean of y ({y_mean:.3g}) is more than 3 prior standard deviations "
                f"(1/sqrt(alpha) = {prior_sd:.3g}) from 0, and the prior N(0, 1/alpha) also "
                "covers the intercept: it will be shrunk toward 0 and noise_var_ inflated. "
                "Centre or standardise y (e.g. sklearn.compose.TransformedTargetRegressor "
                "with StandardScaler), or lower alpha.", UncentredTargetWarning,
                stacklevel=user_stacklevel())

    def _alpha_of_centred_y(self, ctx, y_mean, given_noise, trace_cache=None):
        """The evidence's alpha for ``y - mean(y)`` (None where the mean
        cannot move it: ``alpha_ mean(y)^2``, the intercept's share of the
        fixed point ``alpha = gamma / ||m||^2`` with ``gamma >= 1``, is
        below ``ALPHA_SHIFT_SCREEN``); its passes are counted."""
        if ctx.alpha * y_mean ** 2 <= ALPHA_SHIFT_SCREEN:
            return None
        _, alpha, n_passes = _maximise_evidence(ctx.X, ctx.y - y_mean, ctx.fit_intercept,
                                                noise_var=given_noise,
                                                sample_weight=ctx.sample_weight,
                                                trace_cache=trace_cache)
        ctx.n_grad_evals += n_passes * ctx.n
        return alpha

    # ---------------------------------------------------------- predictions
    @rowwise
    def predict(self, X, return_std=False):
        """Posterior predictive mean (and standard deviation).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        return_std : bool, default=False
            Also return the predictive standard deviation, which includes
            the observation noise: ``sqrt(Var_s[x^T w_s + b_s] + noise_var_)``.

        Returns
        -------
        y_mean : ndarray of shape (n_samples,)
        y_std : ndarray of shape (n_samples,)
            Only when ``return_std=True``.
        """
        X = self._validate_X_predict(X)
        mean = np.empty(X.shape[0])
        std = np.empty(X.shape[0]) if return_std else None
        for rows, Z in self._linear_predictor_draws(X):
            mean[rows] = Z[:, :, 0].mean(axis=1)
            if return_std:
                std[rows] = np.sqrt(Z[:, :, 0].var(axis=1) + self.noise_var_)
        return (mean, std) if return_std else mean

    def _model_spec(self):
        """The fitted Gaussian model, with ``noise_var_``."""
        return GLM(GAUSSIAN, 1, (float(self.noise_var_),))


#: alpha="auto" warns when the evidence's alpha for the centred y is more than
#: this factor from alpha_ (the target's mean, through the intercept's prior,
#: then sets the slopes' prior); diabetes at its own mean, 2 sd from 0: 14x
ALPHA_SHIFT_WARN = 1.5
#: ... computed only where alpha_ * mean(y)^2 exceeds this (below it the
#: intercept's share of ||m||^2 moves alpha by under ~5%)
ALPHA_SHIFT_SCREEN = 0.05
#: above this many rows and coefficients both, the evidence is maximised on
#: a quadrature of the Gram matrix's spectrum (:func:`_quadrature_evidence`)
#: in place of its dense eigendecomposition where the quadrature is the
#: cheaper (:func:`_quadrature_pays`: sparse rows) ...
MAX_EVIDENCE_DIM = 3000
#: ... and everywhere above this (the spectrum's matrix would pass 512 MB)
MAX_EXACT_EVIDENCE_DIM = 8000
#: the dense spectrum with fewer rows than coefficients forms ``X X^T`` from
#: a dense copy of ``X`` up to this many bytes of it, and by the sparse
#: product above (2,000 sparse rows of 10^6 features would take 16 GB)
MAX_DENSE_COPY_BYTES = 512 << 20
#: Lanczos steps from ``X_a^T y`` (or ``y``): the data term's Gauss quadrature
EVIDENCE_DATA_STEPS = 128


def _weighted_moments(y, sample_weight):
    """Mean and variance of y, each row counted ``sample_weight`` times."""
    mean = float(np.average(y, weights=sample_weight))
    return mean, float(np.average((y - mean) ** 2, weights=sample_weight))


def _maximise_evidence(X, y, fit_intercept, alpha=None, noise_var=None, sample_weight=None,
                       trace_cache=None):
    """Type-II maximum likelihood of the prior precision and noise variance.

    With ``w ~ N(0, I / alpha)`` (intercept included), the targets are
    marginally ``y ~ N(0, sigma^2 I + X_a X_a^T / alpha)``; the unknowns among
    ``alpha`` and ``sigma^2`` (those passed as None) maximise that density, as
    :class:`sklearn.linear_model.BayesianRidge` does.  Unlike ``RSS / (n - p)``
    this stays right when ``p >= n``: the prior, not the data, then limits how
    much of ``y`` the coefficients can explain.

    From the eigendecomposition ``X_a^T X_a = V diag(lambda) V^T`` (or of
    ``X_a X_a^T`` when there are fewer rows than coefficients), with
    ``q_i = (u_i^T y)^2`` and ``R = ||y||^2 - sum_i q_i``, minus twice the log
    evidence is, up to a constant,
    ``(n - r) log s + R / s + sum_i [log(s + lambda_i / alpha) + q_i / (s + lambda_i / alpha)]``
    over the ``r`` nonzero eigenvalues; each unknown is found on a log grid
    (half a decade) refined by Brent's method, ``alpha`` in an outer search
    with ``sigma^2`` profiled out.  Above ``MAX_EVIDENCE_DIM`` rows and
    coefficients the same sums come from a Lanczos quadrature of the
    spectrum (:func:`_quadrature_evidence`), with the same search.

    Frequency weights ``w_i`` (the log-likelihood ``sum_i w_i log N(y_i;
    x_i^T theta, s)``) enter as the rows ``sqrt(w_i) (x_i, 1)`` and targets
    ``sqrt(w_i) y_i``, with ``N = sum_i w_i`` in place of ``n`` in the
    normaliser (``(N - r) log s``): the evidence of the data with row i
    repeated ``w_i`` times, exactly, for integer weights.

    Parameters
    ----------
    X : ndarray or CSR matrix of shape (n, d)
        Used in place (the intercept column is applied implicitly).
    y : ndarray of shape (n,)
    fit_intercept : bool
    alpha, noise_var : float or None
        Given values, or None to estimate.
    sample_weight : ndarray of shape (n,) or None
        Frequency weights (None: all 1).
    trace_cache : dict or None
        Kept between calls on the same rows and weights (another ``y``): the
        quadrature route keeps its log-determinant's probes there, which
        depend on the rows alone.

    Returns
    -------
    sigma2 : float
        The noise variance (floored at ``1e-12`` times ``var(y) + 1``: a
        perfect fit would make the posterior degenerate).
    alpha : float
    n_passes : int
        Passes over the data spent: one for the Gram matrix, or, on the
        quadrature route, one per multiplication by ``X_a`` and ``X_a^T``.
    """
    y = np.asarray(y, dtype=np.float64)
    n = X.shape[0]
    p = X.shape[1] + int(fit_intercept)
    floor = 1e-12 * (_weighted_moments(y, sample_weight)[1] + 1.0)
    if alpha is not None and noise_var is not None:
        return float(noise_var), float(alpha), 0
    sqrt_w = None
    if sample_weight is not None:
        sqrt_w = np.sqrt(sample_weight)
        y = sqrt_w * y
        n_eff = float(np.sum(sample_weight))   # N: the normaliser's count of rows
    if _quadrature_pays(X, n, p):
        return _quadrature_evidence(X, y, fit_intercept, alpha, noise_var, floor, sqrt_w,
                                    n_eff if sqrt_w is not None else n,
                                    {} if trace_cache is None else trace_cache)
    lam, q = _spectrum(X, y, fit_intercept, dual=n < p, sqrt_w=sqrt_w)
    if sqrt_w is not None:
        n = n_eff
    return _spectral_evidence(lam, q, y, n, alpha, noise_var, floor)


def _quadrature_pays(X, n, p):
    """Whether the evidence takes the quadrature route: where the dense
    spectrum would not fit (over MAX_EXACT_EVIDENCE_DIM), and above MAX_EVIDENCE_DIM
    rows and coefficients where it costs fewer flops, counted at its most
    probes: the spectrum's Gram product ``2 n p min(n, p)`` (row chunks are
    made dense) and its eigendecomposition ``~10 min(n, p)^3``, against
    ``4 nnz`` a product with ``A``.  Sparse text rows take the quadrature
    (100,000 x 10^4: 5.6 s against 238 s); dense rows the spectrum up to
    MAX_EXACT_EVIDENCE_DIM (3,300 x 3,100 float32: 12 s against 100-230 s)."""
    m = min(n, p)
    if m > MAX_EXACT_EVIDENCE_DIM:
        return True
    if m <= MAX_EVIDENCE_DIM:
        return False
    nnz = float(X.nnz) if hasattr(X, "nnz") else float(n) * X.shape[1]
    products = EVIDENCE_DATA_STEPS + EVIDENCE_MAX_PROBES * EVIDENCE_PROBE_STEPS
    return 4.0 * nnz * products < 2.0 * n * p * m + 10.0 * float(m) ** 3


def evidence_from_gram(gram, xty, yty, weight_sum, y_sum, alpha=None, noise_var=None):
    """``(sigma2, alpha)`` of :func:`_maximise_evidence` from sums over the
    (weighted) rows: ``gram = X_a^T W X_a``, ``xty = X_a^T W y``,
    ``yty = y^T W y``, ``weight_sum = sum_i w_i`` and ``y_sum = sum_i w_i y_i``
    (``X_a`` with its intercept column).  The primal spectrum only: it is
    what :func:`_maximise_evidence` takes when there are at least as many
    rows as coefficients."""
    mean = y_sum / weight_sum
    floor = 1e-12 * (max(yty / weight_sum - mean * mean, 0.0) + 1.0)
    if alpha is not None and noise_var is not None:
        return float(noise_var), float(alpha)
    lam, q = _gram_spectrum(gram, xty)
    sigma2, alpha, _ = _spectral_evidence(lam, q, np.array([np.sqrt(yty)]), weight_sum,
                                          alpha, noise_var, floor)
    return sigma2, alpha


def _quadrature_evidence(X, y, fit_intercept, alpha, noise_var, floor, sqrt_w, n_rows,
                         trace_cache):
    """``(sigma2, alpha, n_passes)`` of :func:`_maximise_evidence` above
    ``MAX_EVIDENCE_DIM`` rows and coefficients, from products with the
    smaller Gram matrix ``A`` (``X_a^T X_a``, or ``X_a X_a^T`` with fewer
    rows), never formed.

    With ``c = alpha s``, minus twice the log evidence is
    ``N log s + tr log(I + A / c) + data(s, alpha)``, the data term
    ``(||y||^2 - b^T (A + c I)^-1 b) / s`` with ``b = X_a^T y`` (primal) or
    ``alpha y^T (A + c I)^-1 y`` (dual).  Both are sums over the spectrum
    that Lanczos quadrature gives for every ``(s, alpha)`` at once: the data
    term from ``EVIDENCE_DATA_STEPS`` steps started at ``b`` (or ``y``), the
    trace from Rademacher probes of ``EVIDENCE_PROBE_STEPS`` steps each
    (stochastic Lanczos quadrature, Ubaru, Chen and Saad 2017).  The search
    is the exact route's.  Probes are added (up to ``EVIDENCE_MAX_PROBES``)
    until the Monte Carlo se of the logarithms of ``alpha`` and ``sigma2``
    (the larger of the two), a delete-a-group jackknife over
    ``EVIDENCE_PROBE_GROUPS`` groups of the probes, is under
    ``EVIDENCE_LOG_SE``.  The probes depend on the rows alone: they are kept
    in ``trace_cache`` for a later call with another ``y``.  Each product
    reads ``X`` twice (two passes)."""
    trace = trace_cache.setdefault(
        "trace", _TraceQuadrature(_intercept_operator(X, fit_intercept, sqrt_w)))
    Xa, dual, dim = trace.Xa, trace.dual, trace.dim
    made = trace.products
    start = y if dual else Xa.rmatvec(y)
    data_nodes, data_mass = gauss_quadrature(trace.matvec, dim, start, EVIDENCE_DATA_STEPS)
    yy = float(y @ y)
    scale = yy / max(n_rows, 1) + 1e-300

    def search(nodes, masses):
        @np.errstate(over="ignore")     # alpha at the search's far end: c = inf
        def objective(log_s, log_a):
            # minus twice the log evidence (vectorised over an array of log_s)
            s = np.exp(np.atleast_1d(log_s))
            c = (s * np.exp(log_a))[:, None]
            solved = np.sum(data_mass / (c + data_nodes), axis=1)
            data = np.exp(log_a) * solved if dual else (yy - solved) / s
            return n_rows * np.log(s) + np.sum(masses * np.log1p(nodes / c), axis=1) + data
        return _search_evidence(objective, alpha, noise_var, floor, scale,
                                float(masses @ nodes) / dim)

    want = EVIDENCE_PROBES
    while True:
        trace.add_probes(want - trace.n_probes)
        found = search(*trace.sums())
        # delete-a-group jackknife of the logs of what the search found
        logs = np.log([search(*trace.sums(without=g)) for g in range(trace.groups)])
        more = trace.more_probes(float(np.max(jackknife_se(logs))), EVIDENCE_LOG_SE)
        if not more:
            return found[0], found[1], 2 * (trace.products - made)
        want = trace.n_probes + more


class _TraceQuadrature(StochasticTrace):
    """The stochastic Lanczos quadrature of ``tr f(A)``, ``A`` the smaller
    Gram matrix of the operator ``Xa`` (``Xa Xa^T`` with fewer rows:
    ``dual``); every product with ``A`` (the data term's too) is counted."""

    def __init__(self, Xa):
        self.Xa = Xa
        self.dual = Xa.shape[0] < Xa.shape[1]
        gram = ((lambda v: Xa.matvec(Xa.rmatvec(v))) if self.dual
                else (lambda v: Xa.rmatvec(Xa.matvec(v))))
        super().__init__(gram, min(Xa.shape))


def _spectral_evidence(lam, q, y, n, alpha, noise_var, floor):
    """``(sigma2, alpha, n_passes)`` of :func:`_maximise_evidence` from the
    spectrum ``(lam, q)`` of :func:`_spectrum`: the unknowns among ``alpha``
    and ``noise_var`` (None) on a log grid refined by Brent's method, with
    ``y`` the (weighted) targets and ``n`` the normaliser's count of rows."""
    keep = lam > 1e-12 * max(float(lam.max(initial=0.0)), 1e-300)
    lam, q = lam[keep], q[keep]
    residual = max(float(y @ y) - float(q.sum()), 0.0)
    r = lam.size
    scale = float(y @ y) / max(n, 1) + 1e-300

    def objective(log_s, log_a):
        # minus twice the log evidence (vectorised over an array of log_s)
        s = np.exp(np.atleast_1d(log_s))[:, None]
        c = s + lam[None, :] * np.exp(-log_a)
        return ((n - r) * np.log(s[:, 0]) + residual / s[:, 0]
                + np.sum(np.log(c) + q[None, :] / c, axis=1))

    sigma2, alpha = _search_evidence(objective, alpha, noise_var, floor, scale,
                                     float(lam.mean()) if r else 1.0)
    return sigma2, alpha, 1


def _search_evidence(objective, alpha, noise_var, floor, scale, lam_scale):
    """``(sigma2, alpha)`` minimising ``objective(log_s, log_alpha)`` (minus
    twice the log evidence, vectorised over ``log_s``) over the unknowns
    among ``alpha`` and ``noise_var`` (None): ``s`` on a log grid from
    ``floor`` to 10 ``scale`` (``y``'s second moment) refined by Brent's
    method for each ``alpha``, ``alpha`` likewise in an outer search over 8
    decades either side of ``lam_scale / scale`` (``lam_scale``: the Gram's
    mean eigenvalue)."""
    s_range = (np.log(floor), np.log(10.0 * scale + floor))

    def best_noise(log_a):
        if noise_var is not None:
            log_s = np.log(float(noise_var))
            return float(objective(log_s, log_a)[0]), log_s
        return _grid_then_brent(lambda t: objective(t, log_a), *s_range)

    if alpha is not None:
        _, log_s = best_noise(np.log(float(alpha)))
        return max(float(np.exp(log_s)), floor), float(alpha)
    # alpha spans the scales of the data: lambda / alpha from 1e-8 to 1e8 of var(y)
    a_range = (np.log(lam_scale / scale) - 8 * np.log(10), np.log(lam_scale / scale)
               + 8 * np.log(10))
    _, log_a = _grid_then_brent(lambda t: np.array([best_noise(float(u))[0] for u in
                                                    np.atleast_1d(t)]), *a_range)
    _, log_s = best_noise(log_a)
    return max(float(np.exp(log_s)), floor), float(np.exp(log_a))


def _grid_then_brent(f, lo, hi, spacing=0.5 * np.log(10.0)):
    """Global minimum of a scalar function of one variable on ``[lo, hi]``:
    the best point of a grid (``spacing`` apart), refined by bounded Brent
    between its neighbours.  ``f`` takes an array and returns an array."""
    grid = np.linspace(lo, hi, max(3, int(np.ceil((hi - lo) / spacing)) + 1))
    values = f(grid)
    i = int(np.argmin(values))
    a, b = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    res = minimize_scalar(lambda t: float(f(np.array([t]))[0]), bounds=(a, b),
                          method="bounded", options={"xatol": 1e-7})
    if res.fun <= values[i]:
        return float(res.fun), float(res.x)
    return float(values[i]), float(grid[i])


def _spectrum(X, y, fit_intercept, dual, sqrt_w=None):
    """Nonnegative eigenvalues ``lambda`` of ``X_a^T X_a`` (or ``X_a X_a^T``
    with ``dual``) and ``q_i = (u_i^T y)^2`` for the unit left singular
    vectors ``u_i``; one pass over ``X`` in row chunks.  ``sqrt_w``: the
    rows of ``X_a`` scaled by it (``y`` comes scaled already)."""
    n, d = X.shape
    p = d + int(fit_intercept)
    if dual:
        if hasattr(X, "toarray") and 8.0 * n * d > MAX_DENSE_COPY_BYTES:
            K = np.asarray((X @ X.T).toarray(), dtype=np.float64)
        else:
            Xd = X.toarray() if hasattr(X, "toarray") else np.asarray(X, dtype=np.float64)
            K = np.asarray(Xd @ Xd.T, dtype=np.float64)
        if fit_intercept:
            K += 1.0
        if sqrt_w is not None:
            K = sqrt_w[:, None] * K * sqrt_w[None, :]
        lam, U = np.linalg.eigh(K)
        return np.clip(lam, 0.0, None), (U.T @ y) ** 2
    G = np.zeros((p, p))
    c = np.zeros(p)
    for start in range(0, n, 4096):
        Xc = X[start:start + 4096]
        Xc = Xc.toarray() if hasattr(Xc, "toarray") else np.asarray(Xc, dtype=np.float64)
        if fit_intercept:
            Xc = np.hstack([Xc, np.ones((Xc.shape[0], 1))])
        if sqrt_w is not None:
            Xc = Xc * sqrt_w[start:start + 4096, None]
        G += Xc.T @ Xc
        c += Xc.T @ y[start:start + 4096]
    return _gram_spectrum(G, c)


def _gram_spectrum(G, c):
    """``lambda`` (nonnegative eigenvalues of the Gram ``G = X_a^T X_a``) and
    ``q_i = (v_i^T c)^2 / lambda_i`` with ``c = X_a^T y``: the primal
    :func:`_spectrum` from its sums (also :func:`evidence_from_gram`'s)."""
    lam, V = np.linalg.eigh(G)
    lam = np.clip(lam, 0.0, None)
    b = V.T @ c
    q = np.where(lam > 0, b * b / np.where(lam > 0, lam, 1.0), 0.0)
    return lam, q


def _intercept_operator(X, fit_intercept, row_scale=None):
    """``diag(row_scale) (X, 1)`` (or without the constant column, or the
    scale) as a float64 linear operator, without copying ``X``: each product
    is taken in ``X``'s own precision (a float32 ``X`` times a float64 vector
    would copy ``X`` to float64 at every product, 20 times the time of a
    3,300 x 3,100 product), its result in float64."""
    d = X.shape[1]
    p = d + int(fit_intercept)
    dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.float64
    XT = X.T                              # made once: a sparse transpose is an object

    def matvec(w):
        w = np.ravel(w)
        z = np.asarray(X @ w[:d].astype(dtype, copy=False), dtype=np.float64)
        z = z + w[d] if fit_intercept else z
        return z if row_scale is None else z * row_scale

    def rmatvec(u):
        u = np.ravel(u) if row_scale is None else np.ravel(u) * row_scale
        g = np.asarray(XT @ u.astype(dtype, copy=False), dtype=np.float64)
        return np.append(g, u.sum()) if fit_intercept else g

    return LinearOperator((X.shape[0], p), matvec=matvec, rmatvec=rmatvec, dtype=np.float64)
