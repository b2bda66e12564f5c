"""The model registry: numpy descriptions of the GLMs the engine samples.

Every model the engine knows is one :class:`ModelSpec` in :data:`MODELS`:
its C kind (the ``ModelKind`` enum of ``_models.pxd``, whose inline
residual and loss the chains call), its name, the numpy per-datum loss,
own parameters (``param_names``, and the form the kernel reads them in,
``kernel_params``), residual and Hessian weights (used once per fit: mode finding, step-size
selection, Laplace pieces, per-datum Lipschitz constants; and by tests as
the independent reference of the Cython kernels), its global curvature
bound (None where there is none), the validation of its targets and the
per-datum log predictive density (the ArviZ export).  The engine
(``_estimators.Problem``), the fit set-up (``_context``), the kernel Stein
discrepancy, the command line and the export read the model from here;
adding a model is one entry here, its branch in ``_models.pxd`` and its
estimator class (the negative binomial, whose shape is a parameter of its
own, was added that way).

Notation follows the formula sheet, doc/algorithms.rst:
``U(theta) = alpha/2 ||theta||^2 + sum_i U_i(theta)``, ``U_i = phi(z_i, y_i)``.
"""
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.special import expit, gammaln, logsumexp, softmax

# must equal the ModelKind enum of _models.pxd (checked when _estimators loads)
LOGISTIC, GAUSSIAN, SOFTMAX, POISSON, NEGATIVE_BINOMIAL = 0, 1, 2, 3, 4

#: Poisson: beyond this linear predictor the rate exp(z) continues linearly
#: (value and slope of exp at the point), in numpy as in the Cython kernel,
#: so that the potential stays finite and convex where exp would overflow
#: (a rate of e^700: no posterior the data support comes near)
POISSON_Z_MAX = 700.0

#: Models without a global curvature bound (Poisson) take the curvature at
#: the mode times this factor wherever the set-up needs a bound (automatic
#: steps in the identity metric, the adaptive estimator's Lipschitz
#: constants): the step rule's 5% variance budget then holds where the
#: per-datum curvatures are up to twice those at the mode (Poisson: every
#: linear predictor up to log 2 above its value at the mode), and the steps
#: stay stable where they are up to 40 times larger.
LOCAL_CURVATURE_SAFETY = 2.0


def _finite(y, name):
    y = np.asarray(y, dtype=np.float64)
    if not np.all(np.isfinite(y)):
        raise ValueError(f"{name} contains NaN or inf; remove or impute those targets.")
    return y


def _counts(y, name, model):
    """Finite nonnegative targets, or a ValueError naming ``name`` and ``model``."""
    y = _finite(y, name)
    if np.any(y < 0):
        raise ValueError(
            f"{name} must be nonnegative counts for the {model} model; got "
            f"{np.sum(y < 0)} negative value(s), the smallest {y.min():g}.")
    return y


class ModelSpec:
    """One model of the registry: ``U_i(theta) = phi(z_i, y_i)`` with
    ``z_i = Theta (x_i, 1)`` (K outputs).

    Subclasses set ``kind`` (the C enum value), ``name`` and ``task``, and
    implement the per-datum pieces; ``glm`` carries the instance settings
    (``n_outputs`` and the model's parameters, ``glm.params`` in the order
    of ``param_names``).  Every piece is vectorised over rows: ``Z`` has
    shape (n, K).
    """

    kind = None
    name = None
    #: the model's own parameters (fixed during sampling), and their defaults
    param_names = ()
    param_defaults = ()
    #: "classification" (targets are class labels) or "regression"
    task = "regression"
    #: y holds K values per datum (multi-output Gaussian) rather than one
    multi_target = False
    #: a location-scale family: y may be standardised before the fit (the
    #: command line's --standardize) and the metrics mapped back
    standardize_target = False
    #: phi is quadratic in z (a constant Hessian): Newton's first step from
    #: anywhere lands on the mode, so no start point saves a pass
    quadratic = False

    def resolve_params(self, params):
        """``params`` (the model's own, in the order of ``param_names``; empty
        for the defaults) as a tuple of floats, or a ValueError."""
        params = tuple(float(v) for v in (params if len(params) else self.param_defaults))
        if len(params) != len(self.param_names):
            raise ValueError(f"the {self.name} model has parameters {self.param_names}; "
                             f"got {len(params)} value(s)")
        return params

    def kernel_params(self, params):
        """The parameters as the Cython kernel reads them (``ProblemStore.param``,
        at most ``MAX_MODEL_PARAMS``): precomputed so that no datum repeats
        a division or a log."""
        return ()

    def loss(self, glm, Z, y):
        """Per-datum potentials ``U_i`` (negative log-likelihood, constants
        that do not depend on theta may be dropped), shape (n,)."""
        raise NotImplementedError

    def residual(self, glm, Z, y):
        """``phi'(z_i, y_i)``, shape (n, K): ``grad U_i = residual_i (x) (x_i, 1)``."""
        raise NotImplementedError

    def hessian_weights(self, glm, Z, y):
        """``d^2 phi / dz^2``: shape (n,) when it is the same for every output,
        (n, K, K) otherwise; ``grad^2 U_i = H_i (x) x_i x_i^T``."""
        raise NotImplementedError

    def curvature_bound(self, glm):
        """c with ``d^2 phi / dz^2 <= c I`` for every z and y, or None when
        there is none (the set-up then uses the curvature at the mode)."""
        return None

    def residual_moments(self, glm, Z, y, Q, control="fixed", power=1.0):
        """``E[(r(eta) - a)^2]`` per datum, under the law of its linear
        predictor ``eta`` in the posterior: the Laplace law ``N(z_i, Q_i)``
        tilted by the datum's own likelihood beyond second order,
        ``exp(power_i (log p(y_i | eta) - its quadratic expansion at z_i))``
        (the leave-one-out cavity times the datum's exact likelihood, as in
        expectation propagation).  ``a = r(z_i)`` (``centred``: a control
        variate at the mode) or 0; ``power`` the datum's weight over the
        temperature.  One output (K = 1); shape (n,).

        Why not the curvature alone (``h_i^2 Q_i``): a row fitted almost
        exactly at the mode has a tiny ``h_i``, yet a few sds away its
        residual is orders of magnitude larger.  Why the tilt: the Laplace
        law alone lets such a row's ``eta`` cross the decision boundary as
        often as a Gaussian would, which its own likelihood forbids (on
        breast cancer the untilted moments overstate the noise 8-fold, the
        tilted ones by 1.2-1.5; a long exact run is the reference).
        Gauss-Hermite quadrature, where the linear predictor's sd exceeds
        ``QUADRATURE_SD`` (elsewhere the first-order moment is exact to
        O(Q_i)); exact for a Gaussian model.
        """
        y = np.asarray(y)
        Q = np.maximum(np.asarray(Q, dtype=np.float64).reshape(-1), 0.0)
        power = np.broadcast_to(np.asarray(power, dtype=np.float64), Q.shape)
        if control not in ("none", "fixed", "taylor"):
            raise ValueError(f"unknown control {control!r}")
        r0 = self.residual(glm, Z, y)[:, 0]
        c0 = np.asarray(self.hessian_weights(glm, Z, y)).reshape(-1)
        # a linear predictor known to within QUADRATURE_SD: the first-order
        # moment is exact to O(Q) (most rows of a large data set), and the
        # taylor control's remainder is O(Q^2); the quadrature only where not
        out = (np.zeros_like(Q) if control == "taylor"
               else c0 * c0 * Q + (r0 * r0 if control == "none" else 0.0))
        # few nodes where the predictor is known to within an sd of 1 (a
        # smooth integrand), many where its law spans the curved region
        for rows, rule in ((np.flatnonzero((Q > QUADRATURE_SD ** 2) & (Q <= 1.0)), _HERMITE_FEW),
                           (np.flatnonzero(Q > 1.0), _HERMITE)):
            if len(rows):
                out[rows] = self._quadrature_moments(glm, Z[rows], y[rows], Q[rows], control,
                                                     power[rows], r0[rows], c0[rows], rule)
        return out

    def _quadrature_moments(self, glm, Z, y, Q, control, power, r0, c0, rule):
        """:meth:`residual_moments` by Gauss-Hermite quadrature (``rule``:
        nodes and weights)."""
        t, w = rule
        z = Z[:, 0]
        l0 = self.log_predictive(glm, Z, y)
        sd = np.sqrt(Q)
        log_w = np.empty((len(t), len(z)))
        values = np.empty((len(t), len(z)))
        for k, tk in enumerate(t):
            dz = sd * tk
            eta = (z + dz)[:, None]
            # log p(y | eta) less its second-order expansion at z
            remainder = (self.log_predictive(glm, eta, y) - l0 + r0 * dz
                         + 0.5 * c0 * dz * dz)
            log_w[k] = np.log(w[k]) + power * remainder
            a = 0.0 if control == "none" else r0 + (c0 * dz if control == "taylor" else 0.0)
            values[k] = (self.residual(glm, eta, y)[:, 0] - a) ** 2
        log_w -= log_w.max(axis=0)
        weights = np.exp(log_w)
        return np.einsum("kn,kn->n", weights, values) / weights.sum(axis=0)

    def log_predictive(self, glm, Z, y):
        """``log p(y_i | z_i)``, the full normalised log density (mass), shape (n,)."""
        raise NotImplementedError

    def validate_targets(self, y, name="y"):
        """Encoded targets as float64, or a ValueError naming ``name``."""
        return _finite(y, name)

    def sample(self, glm, Z, rng):
        """Observations drawn from ``p(y | z)`` for a regression model, shape of
        ``Z`` (one output); the posterior predictive's last step."""
        raise NotImplementedError(f"the {self.name} model draws no observations")

    def settings(self, glm):
        """The fitted settings of the model (saved with the draws), a dict."""
        return dict(zip(self.param_names, map(float, glm.params)))

    def __repr__(self):
        return f"<model {self.name!r}>"


class LogisticSpec(ModelSpec):
    """Bernoulli with the logit link: y in {0, 1}, K = 1."""

    kind, name, task = LOGISTIC, "logistic", "classification"

    def loss(self, glm, Z, y):
        # -log sigmoid(+-z), the sign (1 - 2y) exact for y in {0, 1}: one
        # transcendental a row (two log_expit cost twice a data pass's gemv)
        return np.logaddexp(0.0, (1.0 - 2.0 * y) * Z[:, 0])

    def residual(self, glm, Z, y):
        return (expit(Z[:, 0]) - y)[:, None]

    def hessian_weights(self, glm, Z, y):
        s = expit(Z[:, 0])
        return s * (1 - s)

    def curvature_bound(self, glm):
        return 0.25

    def log_predictive(self, glm, Z, y):
        return -self.loss(glm, Z, y)

    def validate_targets(self, y, name="y"):
        y = _finite(y, name)
        if not np.all((y == 0) | (y == 1)):
            raise ValueError(f"{name} must hold class indices 0 or 1 for the logistic model.")
        return y


class GaussianSpec(ModelSpec):
    """Gaussian with the identity link and variance ``noise_var``; y of shape
    (n, K) for K outputs."""

    kind, name = GAUSSIAN, "gaussian"
    multi_target = True
    standardize_target = True
    quadratic = True
    param_names, param_defaults = ("noise_var",), (1.0,)

    def kernel_params(self, params):
        return (1.0 / params[0],)

    def loss(self, glm, Z, y):
        return ((y.reshape(len(Z), -1) - Z) ** 2).sum(axis=1) / (2 * glm.param("noise_var"))

    def residual(self, glm, Z, y):
        return (Z - y.reshape(len(Z), -1)) / glm.param("noise_var")

    def hessian_weights(self, glm, Z, y):
        return np.full(Z.shape[0], 1.0 / glm.param("noise_var"))

    def curvature_bound(self, glm):
        return 1.0 / glm.param("noise_var")

    def sample(self, glm, Z, rng):
        return Z + rng.normal(scale=np.sqrt(glm.param("noise_var")), size=Z.shape)

    def log_predictive(self, glm, Z, y):
        # the loss drops log(2 pi sigma^2) / 2 per output
        return (-self.loss(glm, Z, y)
                - 0.5 * Z.shape[1] * np.log(2.0 * np.pi * glm.param("noise_var")))


class SoftmaxSpec(ModelSpec):
    """Categorical with the softmax link: y in 0..K-1, K outputs."""

    kind, name, task = SOFTMAX, "softmax", "classification"

    def loss(self, glm, Z, y):
        yi = y.astype(np.intp)
        return logsumexp(Z, axis=1) - Z[np.arange(len(yi)), yi]

    def residual(self, glm, Z, y):
        R = softmax(Z, axis=1)
        R[np.arange(len(y)), y.astype(np.intp)] -= 1.0
        return R

    def hessian_weights(self, glm, Z, y):
        P = softmax(Z, axis=1)
        return np.einsum("nk,kl->nkl", P, np.eye(Z.shape[1])) - P[:, :, None] * P[:, None, :]

    def curvature_bound(self, glm):
        return 0.5  # diag(p) - p p^T has spectral norm <= 1/2

    def log_predictive(self, glm, Z, y):
        return -self.loss(glm, Z, y)

    def validate_targets(self, y, name="y"):
        y = _finite(y, name)
        if not np.all((y >= 0) & (y == np.round(y))):
            raise ValueError(f"{name} must hold class indices 0..K-1 for the softmax model.")
        return y


def _poisson_rate(z):
    """``exp(z)``, continued linearly beyond ``POISSON_Z_MAX`` (C^1)."""
    e_max = np.exp(POISSON_Z_MAX)
    return np.where(z <= POISSON_Z_MAX, np.exp(np.minimum(z, POISSON_Z_MAX)),
                    e_max * (1.0 + (z - POISSON_Z_MAX)))


class PoissonSpec(ModelSpec):
    """Poisson with the log link: counts y >= 0, rate ``exp(z)``, K = 1.

    ``phi(z, y) = exp(z) - y z`` (``log y!`` dropped), residual
    ``exp(z) - y``, curvature ``exp(z)``: unbounded, so no global bound.
    """

    kind, name = POISSON, "poisson"

    def loss(self, glm, Z, y):
        z = Z[:, 0]
        return _poisson_rate(z) - y * z

    def residual(self, glm, Z, y):
        z = Z[:, 0]
        slope = np.exp(np.minimum(z, POISSON_Z_MAX))   # the continuation's slope is e^max
        return (slope - y)[:, None]

    def hessian_weights(self, glm, Z, y):
        z = Z[:, 0]
        return np.where(z <= POISSON_Z_MAX, np.exp(np.minimum(z, POISSON_Z_MAX)), 0.0)

    def log_predictive(self, glm, Z, y):
        return -self.loss(glm, Z, y) - gammaln(y + 1.0)

    def sample(self, glm, Z, rng):
        return rng.poisson(_poisson_rate(Z))

    def validate_targets(self, y, name="y"):
        return _counts(y, name, "Poisson")


class NegativeBinomialSpec(ModelSpec):
    """Negative binomial (Gamma-Poisson) with the log link: counts y >= 0,
    mean ``mu = exp(z)``, shape ``r`` (``Var y = mu + mu^2 / r``), K = 1.

    ``phi(z, y) = (y + r) log(1 + e^z / r) - y z`` (terms free of z
    dropped); residual ``(y + r) sigmoid(z - log r) - y``, bounded by r;
    curvature ``(y + r) s (1 - s)``, ``s = sigmoid(z - log r)``: at most
    ``(y + r) / 4``, which grows with the count, so no global bound.  The
    Poisson model is its limit ``r -> inf``.
    """

    kind, name = NEGATIVE_BINOMIAL, "negative_binomial"
    param_names, param_defaults = ("shape",), (1.0,)

    def kernel_params(self, params):
        return (float(params[0]), float(np.log(params[0])))

    @staticmethod
    def _shifted(glm, Z):
        return Z[:, 0] - np.log(glm.param("shape"))

    def loss(self, glm, Z, y):
        r = glm.param("shape")
        return (y + r) * np.logaddexp(0.0, self._shifted(glm, Z)) - y * Z[:, 0]

    def residual(self, glm, Z, y):
        r = glm.param("shape")
        return ((y + r) * expit(self._shifted(glm, Z)) - y)[:, None]

    def hessian_weights(self, glm, Z, y):
        s = expit(self._shifted(glm, Z))
        return (y + glm.param("shape")) * s * (1.0 - s)

    def log_predictive(self, glm, Z, y):
        r = glm.param("shape")
        return (-self.loss(glm, Z, y) - y * np.log(r)
                + gammaln(y + r) - gammaln(r) - gammaln(y + 1.0))

    def sample(self, glm, Z, rng):
        # elementwise over linear predictors of any shape (as the others)
        r = glm.param("shape")
        return rng.negative_binomial(r, expit(np.log(r) - np.asarray(Z)))

    def validate_targets(self, y, name="y"):
        return _counts(y, name, "negative binomial")


#: the registry: model name -> spec
MODELS = {spec.name: spec for spec in (LogisticSpec(), GaussianSpec(), SoftmaxSpec(),
                                       PoissonSpec(), NegativeBinomialSpec())}
#: name -> C kind, and kind -> name
MODEL_KINDS = {name: spec.kind for name, spec in MODELS.items()}
MODEL_NAMES = {spec.kind: name for name, spec in MODELS.items()}
_BY_KIND = {spec.kind: spec for spec in MODELS.values()}


#: rows whose linear predictor has a posterior sd above this get their
#: residual moments by quadrature (:meth:`ModelSpec.residual_moments`)
QUADRATURE_SD = 0.1
#: probabilists' Gauss-Hermite nodes and weights (normalised to sum to 1)
_HERMITE = (np.polynomial.hermite_e.hermegauss(32)[0],
            np.polynomial.hermite_e.hermegauss(32)[1] / np.sqrt(2.0 * np.pi))
_HERMITE_FEW = (np.polynomial.hermite_e.hermegauss(8)[0],
                np.polynomial.hermite_e.hermegauss(8)[1] / np.sqrt(2.0 * np.pi))


def model_spec(model):
    """The registry entry of a model name or C kind (ValueError if unknown)."""
    spec = MODELS.get(model) if isinstance(model, str) else _BY_KIND.get(model)
    if spec is None:
        raise ValueError(f"unknown model {model!r}; the registry has {sorted(MODELS)}.")
    return spec


@dataclass
class GLM:
    """A generalised linear model ``U_i(theta) = phi(theta @ (x_i, 1), y_i)``:
    a registry entry with its instance settings.

    Parameters
    ----------
    kind : int
        The C kind of a registry entry: ``LOGISTIC`` (y in {0, 1}),
        ``GAUSSIAN`` (real y, variance ``noise_var``; y of shape (n, K) for
        K outputs), ``SOFTMAX`` (y in 0..K-1), ``POISSON`` (counts) or
        ``NEGATIVE_BINOMIAL`` (overdispersed counts, its ``shape``).
    n_outputs : int
        K: 1 for logistic, Poisson and negative binomial, the number of
        classes for softmax, the number of targets per datum for Gaussian.
    params : tuple of float
        The model's own parameters in the order of its ``param_names``
        (Gaussian: ``(noise_var,)``; negative binomial: ``(shape,)``);
        empty for the model's defaults.
    """

    kind: int
    n_outputs: int = 1
    params: tuple = ()

    def __post_init__(self):
        self.params = self.spec.resolve_params(self.params)

    def _index(self, name):
        try:
            return self.spec.param_names.index(name)
        except ValueError:
            raise KeyError(f"the {self.name} model has no parameter {name!r}; it has "
                           f"{self.spec.param_names}") from None

    def param(self, name):
        """The value of the model's parameter ``name``."""
        return self.params[self._index(name)]

    def set_param(self, name, value):
        """Set the model's parameter ``name`` (a fit resolves ``"auto"`` ones)."""
        index = self._index(name)
        self.params = self.params[:index] + (float(value),) + self.params[index + 1:]

    @property
    def spec(self):
        """The registry entry (:class:`ModelSpec`)."""
        return model_spec(self.kind)

    @property
    def name(self):
        """The engine's name of the model (``Problem(..., model=name)``)."""
        return self.spec.name

    def loss(self, Z, y):
        """Per-datum potentials ``U_i``, shape (n,)."""
        return self.spec.loss(self, Z, y)

    def residual(self, Z, y):
        """``phi'(z_i, y_i)``, shape (n, K): grad U_i = residual_i (x) (x_i, 1)."""
        return self.spec.residual(self, Z, y)


    def residual_moments(self, Z, y, Q, control="fixed", power=1.0):
        """Second moments of the residuals in the posterior (K = 1), see
        :meth:`ModelSpec.residual_moments`."""
        return self.spec.residual_moments(self, Z, y, Q, control, power)
    def hessian_weights(self, Z, y):
        """Per-datum curvature ``d^2 phi/dz^2``: shape (n,) for one block per
        datum, (n, K, K) for softmax; ``grad^2 U_i = H_i (x) x_i x_i^T``."""
        return self.spec.hessian_weights(self, Z, y)

    def curvature_bound(self):
        """c with ``d^2 phi / dz^2 <= c I`` for every z, y (global Lipschitz),
        or None (Poisson): see ``FitContext.curvature_bound``."""
        return self.spec.curvature_bound(self)

    def log_predictive(self, Z, y):
        """``log p(y_i | z_i)`` with every constant, shape (n,) (the ArviZ export)."""
        return self.spec.log_predictive(self, Z, y)

    def validate_targets(self, y, name="y"):
        """The targets as the loss reads them (float64), or a ValueError naming ``name``."""
        return self.spec.validate_targets(y, name)

    def sample(self, Z, rng):
        """Observations from ``p(y | z)`` (regression models), shape of ``Z``."""
        return self.spec.sample(self, Z, rng)

    def settings(self):
        """The model's parameters by name (``noise_var`` for Gaussian), a dict."""
        return self.spec.settings(self)

    def lipschitz(self, X, fit_intercept, sample_weight=None):
        """Per-datum Lipschitz constants ``L_i`` of ``grad (w_i U_i)``:
        ``c w_i ||(x_i, 1)||^2`` (``w_i = 1`` without weights).  A model
        without a global bound has none: use ``FitContext.lipschitz``."""
        c = self.curvature_bound()
        if c is None:
            raise ValueError(f"the {self.name} model has no global curvature bound; "
                             "FitContext.lipschitz uses the curvature at the mode.")
        L = c * row_norms_sq(X, fit_intercept)
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
