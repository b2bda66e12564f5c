"""Everything computed once per ``fit`` before the chains start.

A :class:`FitContext` holds the validated data, the GLM, the prior and the
fit-level quantities several pieces need (curvature bound L, or the local
curvature at the mode for a model without one, the mode,
per-datum gradient moments).  Expensive pieces are computed lazily and
cached, so an estimator that needs the mode pays for it once, and one that
does not never does.
"""
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np
import scipy.sparse as sp
from ._glm import GLM, linear_predictor, potential_and_grad
from ._row_algebra import GRAM_DEAR_RATIO, ROW_CHUNK, laplace_log_evidence
from ._curvature import CurvatureMixin
from ._mode_search import ModeSearchMixin
from ._row_noise import RowNoiseMixin


@dataclass
class FitSettings:
    """The estimator's settings the set-up pieces read (typed: nothing else
    passes between the estimator and the registry's ``prepare`` functions).

    ``step_size``, ``snapshot_period``, ``pv_threshold``, ``n_leapfrog`` may be
    ``"auto"``; ``pilot_seed`` seeds the set-up's own chains (a SeedSequence
    apart from every chain's).
    """

    temperature: float = 1.0
    access: str = "random"
    step_size: object = "auto"
    snapshot_period: object = "auto"
    pv_threshold: object = "auto"
    pilot_steps: int = 500
    pilot_seed: object = 0
    n_leapfrog: object = "auto"
    inv_mass: float = 1.0


@dataclass
class Resolved:
    """What the set-up has decided so far, for the pieces that come after it.

    Attributes
    ----------
    metric_kind : {"identity", "diagonal", "dense"}
    metric_row_cov : ndarray or None
        ``x_i^T M x_i`` per row (and output pair) in the sampler's metric M.
    posterior_row_cov : ndarray or None
        The same under the Laplace covariance (the noise model's).
    shared_start : ndarray or None
        The point every chain starts from, when they share one.
    pilot_q95 : float or None
        The adaptive estimator's q95 of ``||theta - mode||^2`` (pilot or Laplace).
    noise_center : ndarray or None
        Where the noise model's Laplace law is centred when not at the mode
        (:meth:`FitContext.row_noise_moments`): the identity-step check of a
        fit that never needed the mode centres it at the chains' calibration
        point instead of searching for the mode.  None: the mode.
    noise_tol : float
        Relative tolerance of the noise model's Lanczos iterations
        (:meth:`FitContext.noise_per_row` on long CSR rows); the identity-step
        check, a diagnostic, loosens it.
    linearised_noise : bool
        Take each row's residual moment from the curvature at the centre
        (``C_i^2 Q_i``) instead of the posterior law of its predictor (the
        quadrature of :meth:`FitContext.row_noise_moments`).  The
        identity-step check sets it: it asks whether a hand-set step's
        error is near 25%, which the linearised moments answer (on breast
        cancer their noise's largest whitened eigenvalue is 361 against the
        truth's 393) at a fraction of the quadrature's cost (eight loss
        evaluations a row: 1.4 SGD epochs of a 3.8-epoch one-pass fit).
    """

    metric_kind: str = "identity"
    metric_row_cov: object = None
    posterior_row_cov: object = None
    shared_start: object = None
    pilot_q95: object = None
    noise_center: object = None
    noise_tol: float = 1e-3
    linearised_noise: bool = False


@dataclass
class FitContext(ModeSearchMixin, CurvatureMixin, RowNoiseMixin):
    """Data and model of one fit (shared by every chain; never copied).

    Parameters
    ----------
    X : ndarray (C-contiguous float32/float64) or CSR matrix
    y : ndarray of shape (n,), float64
    glm : GLM
    alpha : float
        Prior precision.
    fit_intercept : bool
    batch_size : int
        The minibatch size b (already clipped to [1, n]).
    sample_weight : ndarray of shape (n,) or None
        Datum weights ``w_i``: the potential is
        ``alpha/2 ||theta||^2 + sum_i w_i U_i`` (None: every ``w_i = 1``).
        Every per-datum quantity below (losses, residuals, curvatures) is
        that of the weighted datum ``w_i U_i``.
    """

    X: object
    y: np.ndarray
    glm: GLM
    alpha: float
    fit_intercept: bool
    batch_size: int
    sample_weight: object = None
    settings: FitSettings = field(default_factory=FitSettings)
    resolved: Resolved = field(default_factory=Resolved)
    _cache: dict = field(default_factory=dict, repr=False)
    # per-datum gradient evaluations spent on set-up: every full pass over the
    # data (mode search, power iteration, moments) counts n
    n_grad_evals: int = 0
    # these rows are a sample drawn ahead from a larger data set whose mode,
    # Hessian and data gradient were found by passes over it (adopt_population)
    population: object = None

    def __post_init__(self):
        if sp.issparse(self.X) and self.X.format != "csr":
            self.X = self.X.tocsr()   # the set-up's row-wise sparse products read CSR

    @property
    def n(self):
        return self.X.shape[0]

    @property
    def dext(self):
        return self.X.shape[1] + int(self.fit_intercept)

    @property
    def dim(self):
        return self.glm.n_outputs * self.dext

    def _blocks(self):
        """``(start, rows)`` over X: dense rows in chunks of ``ROW_CHUNK``, CSR
        rows in one block."""
        if sp.issparse(self.X):
            yield 0, self.X
            return
        for start in range(0, self.n, ROW_CHUNK):
            yield start, self.X[start:start + ROW_CHUNK]

    def gram_is_dear(self):
        """Whether a dense Gram ``X_ext^T W X_ext`` of the (CSR) rows costs more
        than ``GRAM_DEAR_RATIO`` passes (sum_i nnz_i^2 against sum_i nnz_i,
        times (K + 1) / 2 blocks for K outputs); never for dense rows, whose
        paths stay those of a dense Hessian."""
        if not sp.issparse(self.X):
            return False
        if "gram_dear" not in self._cache:
            lens = np.diff(self.X.indptr).astype(np.float64) + int(self.fit_intercept)
            blocks = 0.5 * (self.glm.n_outputs + 1)
            self._cache["gram_dear"] = bool(
                blocks * float(lens @ lens) > GRAM_DEAR_RATIO * max(float(lens.sum()), 1.0))
        return self._cache["gram_dear"]

    def _weigh(self, values, start):
        """Scale per-datum values of the rows ``start:start + len(values)`` by
        their weights (first axis); unchanged without weights."""
        if self.sample_weight is None:
            return values
        w = self.sample_weight[start:start + len(values)]
        return values * w.reshape((-1,) + (1,) * (np.ndim(values) - 1))

    def _chunk_terms(self, what, Xc, Theta, start):
        """The GLM's per-datum ``what`` (``"residual"`` or
        ``"hessian_weights"``) of the rows ``Xc`` starting at ``start``, at
        ``Theta``: those of the weighted data ``w_i U_i``."""
        Z = linear_predictor(Xc, Theta, self.fit_intercept)
        return self._weigh(getattr(self.glm, what)(Z, self.y[start:start + Z.shape[0]]), start)

    # ------------------------------------------------------------------
    def set_alpha(self, alpha):
        """Change the prior precision; everything cached (mode, Hessians,
        Laplace factors, weights) depended on it and is dropped."""
        self.alpha = float(alpha)
        self._cache.clear()

    @contextmanager
    def uncounted(self):
        """Work that is not part of the fit (a diagnostic after the draws):
        its passes are not counted, and what it caches or resolves is
        forgotten on exit."""
        counted, cache = self.n_grad_evals, dict(self._cache)
        resolved = replace(self.resolved)
        try:
            yield self
        finally:
            self.n_grad_evals, self._cache, self.resolved = counted, cache, resolved

    def has_mode(self):
        """Whether the mode has been found (no pass is spent to know)."""
        return "mode" in self._cache

    def has_mode_hessian(self):
        return "hessian_mode" in self._cache

    def memo(self, key, compute):
        """``compute()``, once per fit: later calls with ``key`` return the
        first result (forgotten with the rest by :meth:`uncounted`)."""
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def known_mode(self):
        """The mode if it has been found (or adopted), else None; spends no pass."""
        return self._cache.get("mode")

    def adopt_mode(self, theta):
        """Take ``theta`` as the mode without searching (a warm start's chains
        continue from a fit whose mode does not move)."""
        self._cache["mode"] = np.array(theta, dtype=np.float64).ravel()

    def adopt_population(self, population):
        """Take the mode, the Hessian there (prior included) and the data
        gradient there from passes over the data set these rows were drawn
        from (:class:`skbayes_sg._dask_fit.Population`).  The control
        variate's sum is then the whole data's (:meth:`residuals` at the
        mode), so chains that read each drawn row once sample the whole
        data's posterior, not the sample's."""
        self.population = population
        self._cache["mode"] = np.array(population.mode, dtype=np.float64)
        self._cache["hessian_mode"] = np.array(population.hessian, dtype=np.float64)

    def known_laplace_cov(self):
        """The first Laplace covariance computed so far (:meth:`laplace_cov`),
        or None; spends no pass."""
        for key, value in self._cache.items():
            if isinstance(key, tuple) and key[0] == "laplace":
                return value
        return None

    def laplace_log_evidence(self):
        """``log p(y | alpha)`` by the Laplace approximation at the mode
        (:func:`~._row_algebra.laplace_log_evidence`; dense Hessian, up to
        ``MAX_DENSE_LAPLACE`` parameters)."""
        theta = self.mode()
        u, _ = self._counted_potential(theta)
        return laplace_log_evidence(u, self.alpha, self.hessian_at(theta))

    def potential_and_grad(self, theta):
        """Exact ``U(theta)`` and its gradient (numpy)."""
        return potential_and_grad(theta, self.X, self.y, self.glm, self.alpha,
                                  self.fit_intercept, self.sample_weight)

    def _counted_potential(self, theta):
        self.n_grad_evals += self.n
        return self.potential_and_grad(theta)
