"""Bayesian linear regression with a Gaussian prior (ridge) by SG-MCMC."""
import numbers
import warnings

import numpy as np
from scipy.sparse.linalg import LinearOperator, lsqr
from sklearn.base import RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval

from .._base import BaseSGMCMC
from .._sampling._glm import GAUSSIAN, GLM
from ._logistic import _DOC_ATTRS, _DOC_PARAMS


class SGMCMCRidge(RegressorMixin, BaseSGMCMC):
    # assembled from shared parameter text: a bare string expression would
    # not become the docstring
    __doc__ = """Bayesian ridge regression sampled by stochastic-gradient MCMC.

    Model: ``y_i ~ N(x_i^T w + b, noise_var)``, prior ``(w, b) ~ N(0, alpha^-1 I)``;
    its posterior is Gaussian in closed form, which makes this estimator the
    exact yardstick of the samplers.

    Parameters
    ----------""" + _DOC_PARAMS + """
    noise_var : float or None, default=None
        Observation noise variance sigma^2.  None estimates it once before
        sampling from the residuals of the posterior mode,
        ``||y - X w_MAP||^2 / max(n - p, 1)`` (p = number of coefficients),
        iterated to a fixed point; stored as ``noise_var_``.

    Attributes
    ----------
    coef_samples_ : ndarray of shape (n_chains, n_samples, n_features)
        Posterior draws of the coefficients.
    intercept_samples_ : ndarray of shape (n_chains, n_samples)
        Draws of the intercept (zeros if ``fit_intercept=False``).
    coef_ : ndarray of shape (n_features,)
        Posterior mean of the coefficients.
    intercept_ : float
        Posterior mean of the intercept.
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

    _parameter_constraints = {
        **BaseSGMCMC._parameter_constraints,
        "noise_var": [Interval(numbers.Real, 0, None, closed="neither"), None],
    }

    def __init__(self, *, noise_var=None, sampler="auto", subsampling="auto", metric="auto",
                 metropolis="auto", step_size="auto", batch_size="auto", n_samples="auto",
                 n_warmup="auto", thin="auto", target_ess="auto", max_passes="auto",
                 max_time=None, n_chains=4, n_jobs=None, random_state=None, alpha=1.0,
                 fit_intercept=True, temperature=1.0, friction="auto", init="auto",
                 ewsg_chain_length=1, ewsg_x="auto", access="random", snapshot_period="auto",
                 pv_threshold="auto", pilot_steps=500, n_leapfrog="auto", inv_mass=1.0,
                 warm_start=False, verbose=0):
        super().__init__(
            sampler=sampler, subsampling=subsampling, metric=metric, metropolis=metropolis,
            step_size=step_size, batch_size=batch_size, n_samples=n_samples,
            n_warmup=n_warmup, thin=thin, target_ess=target_ess, max_passes=max_passes,
            max_time=max_time, n_chains=n_chains, n_jobs=n_jobs, random_state=random_state,
            alpha=alpha, fit_intercept=fit_intercept, temperature=temperature,
            friction=friction, init=init, ewsg_chain_length=ewsg_chain_length, ewsg_x=ewsg_x,
            access=access, snapshot_period=snapshot_period, pv_threshold=pv_threshold,
            pilot_steps=pilot_steps, n_leapfrog=n_leapfrog, inv_mass=inv_mass,
            warm_start=warm_start, verbose=verbose)
        self.noise_var = noise_var

    def _encode_targets(self, y):
        y = np.asarray(y, dtype=np.float64)
        if not np.all(np.isfinite(y)):
            raise ValueError("y contains NaN or inf; remove or impute those targets.")
        return y

    def _make_glm(self, X, y):
        return GLM(GAUSSIAN, 1, 1.0)  # noise variance resolved in _fit_context_hook

    def _fit_context_hook(self, ctx):
        self._warn_if_intercept_prior_binds(ctx)
        if self.noise_var is not None:
            sigma2 = float(self.noise_var)
        else:
            sigma2, n_passes = _estimate_noise_var(ctx.X, ctx.y, ctx.alpha, ctx.fit_intercept)
            ctx.n_grad_evals += n_passes * ctx.n
        ctx.glm.noise_var = sigma2
        self.noise_var_ = sigma2

    def _warn_if_intercept_prior_binds(self, ctx):
        # The prior N(0, 1/alpha) covers the intercept too (the model as
        # specified); a target far from 0 then gets a shrunk intercept and an
        # inflated noise variance.  Say so, with the fix, rather than fail quietly.
        if not self.fit_intercept or ctx.n < 2:
            return
        prior_sd = 1.0 / np.sqrt(self.alpha)
        y_mean = float(np.mean(ctx.y))
        if abs(y_mean) > 3.0 * prior_sd:
            warnings.warn(
                f"The mean of y ({y_mean:.3g}) is more than 3 prior standard deviations "
                f"(1/sqrt(alpha) = {prior_sd:.3g}) from 0, and the prior N(0, 1/alpha) also "
                "covers the intercept: it will be shrunk toward 0 and noise_var_ inflated. "
                "Centre or standardise y (e.g. sklearn.compose.TransformedTargetRegressor "
                "with StandardScaler), or lower alpha.", UserWarning, stacklevel=3)

    # ---------------------------------------------------------- predictions
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

    def sample_y(self, X, n_draws=1, random_state=None):
        """Draw from the posterior predictive distribution.

        Each draw picks a stored posterior draw ``(w_s, b_s)`` uniformly and
        adds observation noise: ``y = x^T w_s + b_s + N(0, noise_var_)``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        n_draws : int, default=1
        random_state : int, RandomState instance or None, default=None

        Returns
        -------
        y_samples : ndarray of shape (n_samples, n_draws)
        """
        X = self._validate_X_predict(X)
        if not (isinstance(n_draws, numbers.Integral) and n_draws >= 1):
            raise ValueError(f"n_draws must be a positive integer, got {n_draws!r}.")
        rng = check_random_state(random_state)
        W, b = self._flat_draws()
        pick = rng.randint(W.shape[0], size=n_draws)
        Z = np.asarray(X @ W[pick, 0, :].T, dtype=np.float64) + b[pick, 0]
        return Z + rng.normal(scale=np.sqrt(self.noise_var_), size=Z.shape)


def _estimate_noise_var(X, y, alpha, fit_intercept, n_iter=5):
    """Fixed point sigma^2 = ||y - X w_MAP(sigma^2)||^2 / max(n - p, 1).

    Parameters
    ----------
    X : ndarray or CSR matrix of shape (n, d)
        Used in place (the intercept column is applied implicitly).
    y : ndarray of shape (n,)
    alpha : float
        Prior precision.
    fit_intercept : bool
    n_iter : int, default=5
        Fixed-point iterations.

    Returns
    -------
    sigma2 : float
        The noise variance.
    n_passes : int
        Passes over the data spent, in full-gradient units: each lsqr
        iteration multiplies by ``X`` and ``X^T`` once (like one full
        gradient), plus one pass per call for the start vector and residual.
    """
    Xa = _intercept_operator(X, fit_intercept)
    n, p = Xa.shape
    sigma2 = float(np.var(y)) if n > 1 and np.var(y) > 0 else 1.0
    n_passes = 0
    for _ in range(n_iter):
        # MAP of N(y; Xw, s2) N(w; 0, 1/alpha): lsqr with damp^2 = alpha s2
        w, _, itn = lsqr(Xa, y, damp=np.sqrt(alpha * sigma2), atol=1e-12, btol=1e-12)[:3]
        rss = float(np.sum((y - Xa @ w) ** 2))
        sigma2 = rss / max(n - p, 1)
        n_passes += int(itn) + 1
    # floor: a perfect fit would make the posterior degenerate
    return max(sigma2, 1e-12 * (float(np.var(y)) + 1.0)), n_passes


def _intercept_operator(X, fit_intercept):
    """``(X, 1)`` (or ``X``) as a float64 linear operator, without copying ``X``."""
    d = X.shape[1]
    p = d + int(fit_intercept)

    def matvec(w):
        w = np.ravel(w)
        z = np.asarray(X @ w[:d], dtype=np.float64)
        return z + w[d] if fit_intercept else z

    def rmatvec(u):
        u = np.ravel(u)
        g = np.asarray(X.T @ u, dtype=np.float64)
        return np.append(g, u.sum()) if fit_intercept else g

    return LinearOperator((X.shape[0], p), matvec=matvec, rmatvec=rmatvec, dtype=np.float64)
