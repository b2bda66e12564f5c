"""Bayesian logistic regression (binary and multinomial) by SG-MCMC."""
import numbers
import warnings

import numpy as np
from scipy.special import expit, log_softmax, logsumexp, softmax
from sklearn.base import ClassifierMixin
from sklearn.preprocessing import LabelEncoder
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.class_weight import compute_sample_weight
from sklearn.utils.multiclass import check_classification_targets

from .._dask_rows import rowwise
from .._setup import ROW_COST_FIXED, ROW_COST_PER_NONZERO, row_nonzeros
from .._base import BaseSGMCMC, PosteriorPredictiveMixin, estimator_parameters
from .._sampling._row_algebra import MAX_DENSE_LAPLACE, laplace_log_evidence
from .._sampling._spectrum import (EVIDENCE_LOG_SE, EVIDENCE_PROBE_STEPS, EVIDENCE_PROBES,
                                   StochasticTrace, jackknife_se)
from .._sampling._glm import GLM, LOGISTIC, SOFTMAX
from .._sampling._specs import LINEAR, hyperparameter_doc, sampler_doc
from .._warn_location import user_stacklevel

_DOC_PARAMS = """
""" + sampler_doc(LINEAR, "auto", auto=(
    "The dynamics. ``\"auto\"``: Hamiltonian Monte Carlo (``\"sghmc-leapfrog\"`` "
    "with a Metropolis correction) when the gradients are exact, ``\"baoab\"`` "
    "when they are subsampled.")) + """
    subsampling : str, default="auto"
        The gradient estimator of the data term (formulas in the user guide):

        - ``"auto"``: ``"full"`` when a data pass is cheap (the whole fit
          with exact gradients costs little, or subsampling would not save
          much), else ``"cv-preferential"`` in the sampler's metric.
        - ``"uniform"``: ``(n/b) sum_{j in S} grad U_j``, S uniform with
          replacement (or drawn by ``access``); ``"full"``: the exact gradient.
        - ``"ewsg"``: exponentially weighted stochastic gradients: M + 1
          candidate minibatches per gradient, one chosen by a Metropolis
          index chain targeting ``p_J ∝ exp(½||x + w_J||²)``, ``w_J`` the
          candidate whitened by the sampler's own one-step transition.
          ``"ewsg-cv"``, ``"ewsg-svrg"``: the same over a variance-reduced base.
        - Mode-based (``mode_``):
          ``"cv"`` control variates at the mode (SGLD-CV);
          ``"preferential"`` minibatches drawn with replacement from
          ``p_i ∝ ||grad U_i(mode)||`` (SGLD-PS);
          ``"cv-preferential"`` control variates with
          ``p_i ∝ sqrt(tr(H_i S H_i M))``, S the Laplace covariance
          (``laplace_cov_``) and M the sampler's metric (SGLD-CV-PS; the
          paper's rule in the identity metric);
          ``"adaptive-cv"``, ``"adaptive-cv-preferential"`` the same with a
          minibatch size chosen per step from ``||theta - mode||^2``
          (``batch_sizes_``, ``pv_threshold``).
        - Snapshot (aggregated gradients, AGLD): ``"svrg"`` (periodic total
          update every ``snapshot_period`` steps, SVRG-LD), ``"saga"``
          (per-step partial update of a table of per-datum residuals,
          SAGA-LD), ``"tmu"`` (both: partial updates plus a full refresh every
          ``snapshot_period`` steps).
    metric : {"auto", "dense", "diagonal", "identity"}, default="auto"
        The coordinates the dynamics move in.  ``"dense"``: the Laplace
        metric ``theta = mode + L z``, ``L L^T = T H(mode)^-1`` (a Cholesky
        factor), in which the posterior is close to N(0, I); ``"diagonal"``:
        ``L = diag(sqrt(T / H_jj))``; ``"identity"``: ``theta = z`` (the
        classical samplers).  ``"auto"`` is dense up to 2,000 parameters and
        diagonal above (with exact gradients and a Metropolis correction,
        diagonal plus the whitened Hessian's extreme eigendirections:
        ``metric_ == "lowrank"``, O(dim k) a step), and the identity for
        ``"psgld"``.  During warm-up the
        metric is corrected in the directions where the chains' own draws
        disagree with it (``metric_``).  Whitened dynamics integrate the
        reference Gaussian exactly and discretise only the rest.
    metropolis : bool or "auto", default="auto"
        Accept or reject each proposal with the Metropolis-Hastings ratio, so
        that the draws are exact (MALA for ``"sgld"``, HMC for
        ``"sghmc-leapfrog"``); needs exact gradients.  ``"auto"``: on whenever
        the gradients are exact and the sampler allows it
        (``metropolis_``).  The step is then adapted by dual averaging during
        warm-up (``acceptance_rate_``).
    step_size : float or "auto", default="auto"
        h, in the metric's units: in a whitened metric one unit is the time
        over which the dynamics decorrelate a unit-variance Gaussian (h = 0.5
        moves a quarter of the way); in the identity metric, parameter units.
        ``"auto"``: with a Metropolis correction, adapted during warm-up;
        else the largest step (and the smallest batch) that keep the
        predicted error of every posterior variance under 4% (the error
        model of the user guide); in the identity metric a fixed fraction
        (0.1) of the sampler's stability and gradient-noise limits.  The
        value used is ``step_size_``.
    batch_size : int or "auto", default="auto"
        Minibatch size b; clipped to n.  ``"auto"``: from the error model in
        a whitened metric (``batch_size_``), else ``min(100, n)``.
    n_samples : int or "auto", default="auto"
        Draws kept per chain.  ``"auto"``: sample until the smallest bulk
        effective sample size over parameters reaches ``target_ess`` and
        every split R-hat is at most 1.01, within ``max_passes`` and
        ``max_time`` (``n_samples_``).
    n_warmup : int or "auto", default="auto"
        Steps discarded at the start of each chain, in which the step (with
        a Metropolis correction) and the metric are adapted.  ``"auto"``:
        sized from the dynamics' predicted autocorrelation (``n_warmup_``);
        0 when ``warm_start`` continues chains.
    thin : int or "auto", default="auto"
        Keep every ``thin``-th state after warm-up.  ``"auto"``: 1, or about
        a third of the predicted autocorrelation time with
        ``n_samples="auto"`` (``thin_``).
    draws_dtype : {"auto", "float32", "float64"}, default="auto"
        Storage type of ``coef_samples_`` and ``intercept_samples_``.
        ``"auto"``: float32 from 10,000 parameters on (half the memory; its
        relative rounding, 6e-8, is far below any posterior sd), float64
        below.  The chains, the means and the sds are float64 whatever it is.
    draws_memory_limit : float or "auto", default="auto"
        Budget of the stored draws, in GiB.  The chains write into one array
        of that size whose pages are used only as draws arrive; draws that
        would outgrow it are thinned (every other one kept, as often as
        needed), with a warning and ``thin_`` saying so, while ``coef_``,
        ``intercept_``, ``coef_std_`` and ``intercept_std_`` stay running
        moments over every draw.  ``"auto"``: a quarter of the physical
        memory, at most 4 GiB.
    target_ess : float or "auto", default="auto"
        The bulk effective sample size ``n_samples="auto"`` aims at (smallest
        over parameters).  ``"auto"``: ``(z / 0.1)^2`` with ``z`` the normal
        quantile ``1 - 0.025 / n_params``, so that every posterior mean is
        within 0.1 posterior sd of its Monte Carlo limit with 95%
        probability (about 860 draws for 15 parameters, 1,250 for 124)
        (``target_ess_``).
    max_passes : float, "auto" or None, default="auto"
        Budget of ``n_samples="auto"`` in data passes (gradient evaluations
        over n, set-up included; warm-up windows take at most half of what
        is left).  ``"auto"``: as many passes as 5e9 floating-point
        operations of per-datum gradients (about ten seconds on one core),
        times ``2 (d / 2000)^2`` above 2,000 parameters (at most 50 times),
        between 1,000 and 200,000 (``max_passes_``), and with
        ``max_time=None`` also those flops' seconds at 5e8 flops a second
        (at least ten; a fit whose passes run slower than their flops say
        stops at whichever comes first); with ``max_time=None``
        sampling then goes on past it, a round at a time, while the pace
        measured says the rest of the way to the target ends within 4
        times the budget's passes and 15 minutes of the fit's start (a fit
        that converges a little past a flop count is not cut there; one
        that needs many budgets stops and says how long).  None: no
        limit.
    max_time : float or None, default=None
        Budget of ``n_samples="auto"`` in seconds of fit; None: no limit
        but the passes of ``max_passes``.
    n_chains : int, default=4
        Independent chains, each seeded from its own ``SeedSequence``
        child: the draws do not depend on ``n_jobs``.
    n_jobs : int, default=None
        Chains run in parallel with joblib (threads: the sampling loop
        releases the GIL, so data are shared, not copied).  None: one
        thread per core this process may use, at most ``OMP_NUM_THREADS``
        and one per chain (as scikit-learn's OpenMP estimators), unless a
        ``joblib.parallel_config`` sets the backend or ``n_jobs``.  The
        draws are the same for any value, unless the time budget cuts a
        phase short (where it cuts depends on the measured speed).
    random_state : int, RandomState instance or None, default=None
        Seed of every random number of the fit.
    alpha : float, default=1.0
        Precision of the Gaussian prior N(0, alpha^-1 I) on every
        coefficient, intercept included.
    fit_intercept : bool, default=True
        Fit an intercept (a coefficient on a constant feature).
    temperature : float, default=1.0
        T: the chains target ``exp(-U / T)``.
""" + hyperparameter_doc(LINEAR, ["friction"]) + """
        ``"auto"``: in a whitened metric 1 (``"sghmc"``, ``"sgnht"``: the value
        in {0.5, 1, 2, 4} the error model prefers); in the identity metric
        2 sqrt(L) (2 sqrt(u L) for ULD: critical damping of the stiffest
        direction).
    init : {"auto", "laplace", "mode", "zeros", "prior"} or array-like, \
default="auto"
        Where chains start: ``"laplace"``, independent draws of the Laplace
        approximation with sds doubled (overdispersed, so that split R-hat
        sees chains that have not converged; the default in a whitened
        metric); the posterior mode (the default in the identity metric),
        zeros, an independent prior draw per chain, or given values (flat,
        length n_outputs x (n_features + fit_intercept)).
    ewsg_chain_length : int, default=1
        Length M of the EWSG index chain (``subsampling="ewsg"``): each
        gradient costs M + 1 minibatches, counted in ``n_grad_evals_``.
    ewsg_x : {"auto", "zero", "one", "momentum-stop"}, default="auto"
        EWSG's whitened increment x at which the weights are evaluated (the
        alternatives of the EWSG paper's Fig. 1c): ``"auto"`` is the paper's
        choice (SGHMC: ``x = sqrt(h) gamma r_k / sigma``, i.e. r_{k+1} = r_k;
        SGLD/pSGLD: x = 0); ``"zero"`` x = 0; ``"one"`` x = (1, ..., 1);
        ``"momentum-stop"`` r_{k+1} = 0 (samplers with momentum only).
    n_leapfrog : int or "auto", default="auto"
        Leapfrog steps per step of ``sampler="sghmc-leapfrog"``.  ``"auto"``:
        in a whitened metric drawn per step so that the trajectory is a
        jittered quarter period of the reference Gaussian; 10 in the identity
        metric.
    inv_mass : float, default=1.0
        ULD's inverse mass u (``sampler="uld"``).
    access : {"random", "reshuffle", "cyclic"}, default="random"
        How minibatches visit the data (uniform, EWSG, control-variate and
        snapshot estimators): uniformly at random with replacement, a fresh
        random permutation per data pass taken in consecutive blocks, or
        cyclic blocks ``0..n-1`` (sequential reads: the choice for a
        memory-mapped ``X`` larger than RAM).  Preferential estimators draw
        from their own weights.
    snapshot_period : int or "auto", default="auto"
        Steps between full refreshes of ``"svrg"``, ``"tmu"`` and
        ``"ewsg-svrg"`` (``"auto"``: one data pass, ``ceil(n / b)`` steps).
    pv_threshold : float, "auto" or "pilot", default="auto"
        Adaptive estimators: the bound V* on the pseudo-variance
        ``(1/b) sum_i (L_i^2/p_i) ||theta - mode||^2``, so that
        ``b_k = clip(ceil(||theta_k - mode||^2 sum_i (L_i^2/p_i) / V*), 1, n)``.
        ``"pilot"``: the paper's rule, ``b_k = ceil(b ||theta_k - mode||^2 / q95)``
        with q95 the 95% quantile of ``||theta - mode||^2`` over a pilot chain
        of ``pilot_steps`` steps of fixed size ``batch_size`` from the mode;
        ``"auto"``: the same rule with the stationary q95 the pilot estimates,
        computed under the Laplace approximation.  The q95 used is
        ``pv_threshold_``.
    pilot_steps : int, default=500
        Length of the ``"pilot"`` chain (its gradients count in ``n_grad_evals_``).
    warm_start : bool, default=False
        Continue the previous chains (state, metric, step, momentum,
        preconditioner and random stream) instead of starting new ones;
        ``n_warmup`` steps (0 for ``"auto"``) are discarded first.  Two
        calls of N steps give the same draws as one chain of 2N steps;
        ``sampler``, ``subsampling``, ``metric`` and ``n_chains`` must not
        change.  The samples attributes hold the draws of the latest call.
    verbose : int, default=0
        Show progress: one line per phase (warm-up, sampling) with the steps
        done per chain, the rate and the ETA of the whole phase, redrawn in
        place in a terminal (a tqdm bar when tqdm is installed); then a final
        line with the smallest bulk ESS and the largest R-hat.  In a log (not
        a terminal), or with ``verbose >= 2``, at most one line every few
        seconds, and the final one.
"""

def _params_with_alpha_auto(auto):
    """``_DOC_PARAMS`` with ``alpha : float or "auto"``, its text followed
    by ``auto`` (what "auto" does)."""
    given = """    alpha : float, default=1.0
        Precision of the Gaussian prior N(0, alpha^-1 I) on every
        coefficient, intercept included."""
    either = given.replace("alpha : float, default", 'alpha : float or "auto", default')
    return _DOC_PARAMS.replace(given, either + auto)


def _single_output_attrs(scale=""):
    """The numpydoc of a one-output model's draws and their summaries
    (``scale``: how the coefficients are read, e.g. " (on the log scale of
    the rate)")."""
    return ("""
    coef_samples_ : ndarray of shape (n_chains, n_samples, n_features)
        Posterior draws of the coefficients""" + scale + """.
    intercept_samples_ : ndarray of shape (n_chains, n_samples)
        Draws of the intercept (zeros if ``fit_intercept=False``).
    coef_ : ndarray of shape (n_features,)
        Posterior mean of the coefficients (over every draw the chains made,
        stored or not).
    intercept_ : float
        Posterior mean of the intercept.
    coef_std_ : ndarray of shape (n_features,)
        Posterior standard deviations of the coefficients (the same draws).
    intercept_std_ : float
        Posterior standard deviation of the intercept.""")


_DOC_ATTRS = """
    alpha_ : float
        The prior precision used (``alpha``, or its estimate where
        ``alpha="auto"``).
    ess_ : ndarray of shape (n_params,)
        Bulk effective sample size of every parameter (the order of
        ``summary()``: per output, the coefficients then the intercept).
    rhat_ : ndarray of shape (n_params,)
        Rank-normalised split R-hat of every parameter.
    target_ess_ : float
        The effective sample size the fit aimed at.
    n_distinct_draws_ : ndarray of shape (n_chains,)
        Per chain, the kept draws that differ from the draw before them, plus
        one.  A chain that moved at fewer than 5% of its draws did not move:
        the fit warns that it failed, and its repeats count as one draw in
        ``ess_``.
    sampler_, subsampling_, metric_ : str
        The dynamics, gradient estimator and metric kind used (``"auto"``
        resolved).
    n_rows_span_ : int
        Set only where the fit sampled the rows' span (logistic with two
        classes, Poisson, negative binomial: fewer than half as many rows as
        coefficients; user guide, "Fewer rows than coefficients"): the
        dimension ``r`` of that span, in which the chains ran (``metric_``
        and the steps are theirs); the part of the coefficients orthogonal to
        the rows is the prior's, drawn exactly.
    metropolis_ : bool
        Whether a Metropolis correction was applied.
    lazy_ : bool
        Whether the chains took lazy sparse steps (CSR data whose minibatches
        touch few coordinates, SGLD or SGHMC in an identity or diagonal metric: each
        step costs O(nnz), the untouched coordinates brought up to date
        exactly when touched; user guide, "Large, sparse and memory-mapped
        data").
    acceptance_rate_ : float
        Mean Metropolis acceptance probability while sampling (Metropolis
        dynamics only).
    n_grad_evals_ : int
        Per-datum gradient evaluations spent (all chains, plus the mode
        search and set-up passes): the fair budget unit across samplers.
    n_passes_ : float
        ``n_grad_evals_ / n``: data passes.
    max_passes_ : float or None
        The data-pass budget used.
    n_setup_passes_ : float
        The data passes spent before the chains (mode search, metric,
        estimator and step set-up).
    step_size_ : float
        The step size used (with a Metropolis correction: the adapted step,
        geometric mean over chains).
    friction_ : float
        The friction used (samplers with momentum).
    batch_size_ : int
        The minibatch size used (the number of rows with
        ``subsampling_ == "full"``: every gradient reads them all).
    n_warmup_, n_samples_, thin_ : int
        Warm-up steps, stored draws and thinning per chain (``thin_`` includes
        the thinning the memory budget imposed, ``draws_memory_limit``).
    mode_ : ndarray
        The posterior mode (when it was needed: a whitened metric,
        ``init="mode"`` or a mode-based estimator), shape (n_outputs, n_coef).
    laplace_cov_ : ndarray of shape (n_params, n_params)
        The Laplace covariance at the mode, when it was computed.
    batch_sizes_ : ndarray of shape (n_chains, n_sampling_steps)
        Adaptive estimators: the minibatch size of every sampling step
        (every candidate with EWSG); ``mean_batch_size_`` their mean.
    pv_threshold_ : float
        Adaptive estimators with ``pv_threshold="auto"`` or ``"pilot"``: the q95 used.
    sampling_time_ : float
        Wall time of the slowest chain, seconds (summed over rounds).
    n_features_in_ : int
    feature_names_in_ : ndarray of str
"""


class EvidenceAlphaMixin:
    """``alpha="auto"``: the prior precision that maximises the Laplace
    approximation of the evidence, set before sampling (in memory,
    :func:`_laplace_evidence_alpha`; on a dask array,
    :meth:`_alpha_from_modes`), for the GLMs whose only hyperparameter is
    alpha (logistic, Poisson; the negative binomial alternates it with its
    shape's search); and the hint of a fit at a given alpha on fewer rows
    than coefficients (:meth:`_model_hint`)."""

    #: the few-rows hint's words (:meth:`_model_hint`): a row's linear
    #: predictor, and what a wide prior on it lets the data do
    _predictor_words = "linear predictor"
    _wide_prior_words = ""

    #: a one-output fit on fewer rows than coefficients samples their span
    #: (:mod:`.._rows_span`): the likelihood reads the coefficients only
    #: through the rows, and the prior is isotropic
    _ROWS_SPAN = True

    def _fit_context_hook(self, ctx):
        if isinstance(self.alpha, str):     # and the hint's rows (none: alpha is the data's)
            ctx.alpha = _laplace_evidence_alpha(ctx)
            self._few_rows = None
        else:
            self._few_rows = _few_rows(ctx, getattr(self, "_rows_span_dext", None))

    def _model_hint(self):
        """A given alpha on fewer rows than coefficients: the prior shapes
        the posterior, and a wide one lets the data pull it far from
        Gaussian (the logistic's classes separate; a Poisson row's count of
        0 pulls its log-rate far down: 300 rows of 2,000 features at alpha=1
        left every chain stuck at a step of 1e-11)."""
        if getattr(self, "_few_rows", None) is None:
            return ""
        n, dext, sd = self._few_rows
        per_class = " a class" if len(getattr(self, "classes_", ())) > 2 else ""
        return (f"There are more coefficients ({dext:,}{per_class}) than rows ({n:,}), so the "
                f"prior shapes the posterior: alpha={self.alpha!r} gives a row's "
                f"{self._predictor_words} a prior sd of {sd:.3g} here, {self._wide_prior_words}. "
                f"{self._alpha_advice}")

    #: the few-rows hint's last words
    _alpha_advice = "alpha='auto' chooses the prior from the data."

    def _alpha_from_modes(self, mode_at, start):
        """``alpha="auto"`` from the whole data's modes and Hessians found
        elsewhere (a dask array's Newton passes on the cluster; see
        :class:`_PopulationEvidence`), by the in-memory dense search.
        Returns ``(alpha, the mode there)``."""
        evidence = _PopulationEvidence(mode_at, start)
        alpha = _maximise_evidence(evidence, "dense")
        return alpha, evidence.mode


@estimator_parameters(class_weight=None)
class SGMCMCLogisticRegression(EvidenceAlphaMixin, PosteriorPredictiveMixin, ClassifierMixin,
                               BaseSGMCMC):
    # assembled from shared parameter text: a bare string expression would
    # not become the docstring
    __doc__ = """Bayesian logistic regression sampled by stochastic-gradient MCMC.

    Binary targets use the logistic likelihood; more than two classes the
    multinomial (softmax) one with a coefficient vector per class.  The
    posterior is ``exp(-U/T)`` with
    ``U(theta) = alpha ||theta||^2 / 2 + sum_i -log p(y_i | x_i, theta)``.
    Predictions average the per-draw probabilities (Bayesian model
    averaging).

    Parameters
    ----------""" + _params_with_alpha_auto(
        """  ``"auto"`` sets it once before
        sampling to the maximum of the Laplace approximation of the
        marginal likelihood (type-II maximum likelihood: MacKay's fixed point
        ``alpha = gamma / |theta_hat|^2``, then a Brent search on the
        approximate evidence itself; each step a mode search and the
        Hessian's spectrum there: dense up to 4,000 parameters; above, exact
        from the rows' Gram where that is cheaper (few rows: 500 rows of 5,000
        features, 1,100 passes), else a stochastic Lanczos
        quadrature of Hessian-vector products, about 17,000 passes at 10^4
        text features), counted in ``n_setup_passes_``,
        stored in ``alpha_``.""") + """
    class_weight : dict, "balanced" or None, default=None
        Weights of the classes, as in scikit-learn: ``{label: weight}``, or
        ``"balanced"`` for ``n_samples / (n_classes * np.bincount(y))``.  A
        row's log-likelihood is multiplied by its class's weight (times its
        ``sample_weight`` in ``fit``): the posterior of a reweighted data
        set, not of the data as observed.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    coef_samples_ : ndarray
        Posterior draws of the coefficients: shape
        (n_chains, n_samples, n_features) for two classes,
        (n_chains, n_samples, n_classes, n_features) for more.
    intercept_samples_ : ndarray
        Draws of the intercept(s): (n_chains, n_samples) or
        (n_chains, n_samples, n_classes); zeros if ``fit_intercept=False``.
    coef_ : ndarray
        Posterior mean of the coefficients (over every draw the chains made,
        stored or not).
    intercept_ : float or ndarray
        Posterior mean of the intercept(s).
    coef_std_, intercept_std_ : ndarray or float
        Posterior standard deviations (the same draws).""" + _DOC_ATTRS + """
    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.preprocessing import StandardScaler
    >>> from skbayes_sg import SGMCMCLogisticRegression
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> clf = make_pipeline(StandardScaler(),
    ...                     SGMCMCLogisticRegression(random_state=0)).fit(X, y)
    >>> clf.predict_proba(X[:2]).shape
    (2, 2)
    """

    #: the model registry entry (``_sampling._glm.MODELS``; softmax for more
    #: than two classes)
    likelihood = "logistic"

    _parameter_constraints = {
        **BaseSGMCMC._parameter_constraints,
        "alpha": [Interval(numbers.Real, 0, None, closed="neither"), StrOptions({"auto"})],
        "class_weight": [dict, StrOptions({"balanced"}), None],
    }


    def _target_weights(self, y):
        """Each row's ``class_weight`` (multiplies its ``sample_weight``)."""
        if self.class_weight is None:
            return None
        return compute_sample_weight(self.class_weight, y)

    _predictor_words = "logit"
    _wide_prior_words = ("wide enough for the classes to separate, where the posterior is the "
                         "prior cut by their separating planes and chains cross it slowly")

    def _encode_targets(self, y):
        check_classification_targets(y)
        if hasattr(self, "classes_") and self.warm_start and hasattr(self, "_chain_states"):
            if not np.array_equal(np.unique(y), self.classes_):
                raise ValueError("warm_start=True needs the same classes as the previous fit; "
                                 "set warm_start=False to refit.")
        enc = LabelEncoder()
        y_enc = enc.fit_transform(y)
        self.classes_ = enc.classes_
        if len(self.classes_) < 2:
            raise ValueError(
                "This solver needs samples of at least 2 classes in the data, but the data "
                f"contains only one class: {self.classes_.tolist()[0]!r}. "
                "Pass y with two or more classes.")
        return y_enc.astype(np.float64)

    def _make_glm(self, X, y):
        K = len(self.classes_)
        if K == 2:
            return GLM(LOGISTIC, 1)
        return GLM(SOFTMAX, K)

    # ---------------------------------------------------------- predictions
    @rowwise
    def predict_proba(self, X):
        """Posterior predictive class probabilities (BMA over the draws).

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            ``mean_s p(y | x, theta_s)`` over all kept draws of all chains.
        """
        X = self._validate_X_predict(X)
        out = np.empty((X.shape[0], len(self.classes_)))
        for rows, Z in self._linear_predictor_draws(X):
            if Z.shape[2] == 1:
                p1 = expit(Z[:, :, 0]).mean(axis=1)
                out[rows, 1] = p1
                out[rows, 0] = 1.0 - p1
            else:
                out[rows] = softmax(Z, axis=2).mean(axis=1)
        return out

    def predict_proba_quantiles(self, X, quantiles=(0.05, 0.5, 0.95)):
        """Posterior quantiles of the class probabilities, per row.

        ``predict_proba`` averages ``p(y | x, theta_s)`` over the draws (the
        Bayesian model average); this returns how uncertain that probability
        is: the quantiles of ``p(y = k | x, theta)`` over the posterior draws.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        quantiles : sequence of float in [0, 1], default=(0.05, 0.5, 0.95)

        Returns
        -------
        proba_quantiles : ndarray of shape (n_quantiles, n_samples, n_classes)
        """
        q = np.asarray(quantiles, dtype=np.float64).ravel()
        if q.size == 0 or np.any(~np.isfinite(q)) or np.any((q < 0) | (q > 1)):
            raise ValueError(f"quantiles must be numbers in [0, 1]; got {quantiles!r}.")
        X = self._validate_X_predict(X)
        out = np.empty((q.size, X.shape[0], len(self.classes_)))
        for rows, Z in self._linear_predictor_draws(X):
            if Z.shape[2] == 1:
                P = expit(Z[:, :, 0])                                  # (rows, S)
                p1 = np.quantile(P, q, axis=1)                         # (q, rows)
                out[:, rows, 1] = p1
                # the quantiles of 1 - p are 1 - the mirrored quantiles of p
                out[:, rows, 0] = 1.0 - np.quantile(P, 1.0 - q, axis=1)
            else:
                out[:, rows] = np.quantile(softmax(Z, axis=2), q, axis=1)
        return out

    def predict_proba_interval(self, X, level=0.9):
        """Equal-tailed credible interval of the class probabilities, per row.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        level : float in (0, 1), default=0.9
            Posterior probability inside the interval.

        Returns
        -------
        lower, upper : ndarray of shape (n_samples, n_classes)
            The ``(1 - level) / 2`` and ``(1 + level) / 2`` posterior
            quantiles of ``p(y = k | x, theta)``.
        """
        if not (isinstance(level, (int, float, np.floating)) and 0.0 < level < 1.0):
            raise ValueError(f"level must be a number in (0, 1), e.g. 0.9; got {level!r}.")
        lower, upper = self.predict_proba_quantiles(X, ((1 - level) / 2, (1 + level) / 2))
        return lower, upper

    def _likelihood_target(self, y, n_rows):
        """Labels -> class indices (floats), as the model's loss reads them."""
        index = np.clip(np.searchsorted(self.classes_, y), 0, len(self.classes_) - 1)
        if y.shape[0] != n_rows or not np.array_equal(self.classes_[index], y):
            raise ValueError(
                f"y must hold {n_rows} labels among classes_ "
                f"{self.classes_.tolist()}; pass the labels of the rows of X.")
        return index.astype(np.float64)

    def _model_spec(self):
        """The fitted model: logistic for two classes, softmax for more."""
        return self._make_glm(None, None)

    def _draw_observations(self, Z, rng):
        """One label per entry from ``p(y | z)``: ``Z`` of shape (rows, m, K)
        (K = 1: the logit of ``classes_[1]``; else the class scores) ->
        labels of shape (rows, m); used by ``sample_y`` and the ArviZ export."""
        if Z.shape[2] == 1:
            index = (rng.random_sample(Z.shape[:2]) < expit(Z[:, :, 0])).astype(np.intp)
        else:
            cum = np.cumsum(softmax(Z, axis=2), axis=2)
            u = rng.random_sample(Z.shape[:2] + (1,))
            index = np.minimum((u > cum).sum(axis=2), Z.shape[2] - 1)
        return self.classes_[index]

    @rowwise
    def predict_log_proba(self, X):
        """Log of :meth:`predict_proba`, computed stably.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        log_proba : ndarray of shape (n_samples, n_classes)
        """
        X = self._validate_X_predict(X)
        out = np.empty((X.shape[0], len(self.classes_)))
        for rows, Z in self._linear_predictor_draws(X):
            S = Z.shape[1]
            if Z.shape[2] == 1:
                Z = np.concatenate([np.zeros_like(Z), Z], axis=2)
            out[rows] = logsumexp(log_softmax(Z, axis=2), axis=1) - np.log(S)
        return out

    @rowwise
    def decision_function(self, X):
        """Log-odds of the posterior predictive probabilities.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        scores : ndarray of shape (n_samples,) or (n_samples, n_classes)
            Binary: ``log p(y=classes_[1]) - log p(y=classes_[0])`` under the
            BMA predictive (positive means ``classes_[1]``); multiclass: the
            log predictive probabilities.
        """
        logp = self.predict_log_proba(X)
        if logp.shape[1] == 2:
            return logp[:, 1] - logp[:, 0]
        return logp

    @rowwise
    def predict(self, X):
        """Most probable class under the posterior predictive.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        # the most probable class of the BMA probabilities (the log is monotone:
        # predict_log_proba's stable log-sum-exp is not needed for the argmax)
        proba = self.predict_proba(X)  # checks fitted before classes_ is read
        return self.classes_[np.argmax(proba, axis=1)]


#: MacKay's fixed point (the starting value) stops at this relative change
EVIDENCE_RTOL = 1e-3
EVIDENCE_MAX_ITER = 30
#: then the Laplace evidence itself is maximised over log(alpha) within this
#: distance of the fixed point (MacKay's update neglects how the Hessian
#: moves with the mode: 0.02 nats short on breast cancer)
EVIDENCE_BRACKET = 1.0
#: ... to this tolerance in log(alpha): the dense determinant's, and the
#: quadrature's 0.4 %, under its probes' error (EVIDENCE_ALPHA_LOG_SE).  There
#: the evidence also carries the mode searches' tolerance (0.01 sd a
#: coordinate: up to ~0.1 nats at 10^4 text features, where a step of 0.1 %
#: in alpha moves it by less)
EVIDENCE_XATOL = {"dense": 1e-4, "quadrature": EVIDENCE_LOG_SE}
#: the quadrature's probes are added until the jackknife se of the fixed
#: point's log(alpha) is under this: a third of the evidence's own sd of
#: log(alpha) on 10^4 text features (3.5 %, from its curvature in log alpha;
#: 7.7 % on 2,000).  The ridge's 0.4 % would take ~8x the probes here: an
#: error in gamma moves the logistic fixed point ~3x as far (the mode
#: shrinks as alpha grows); 16 probes left 1.1 % and 0.5 % on two sets of
#: 20,000 x 2,000 text rows, 128 probes 0.05 %
EVIDENCE_ALPHA_LOG_SE = 0.01


def _laplace_evidence_alpha(ctx):
    """The prior precision that maximises the Laplace approximation of the
    marginal likelihood, ``-U(theta_hat) + (dim / 2) log alpha - (1/2) log
    det H`` at the mode ``theta_hat`` of each alpha.

    MacKay's fixed point ``alpha <- gamma / |theta_hat|^2``, ``gamma =
    sum_j lambda_j / (lambda_j + alpha)`` over the eigenvalues of the
    likelihood's Hessian at the mode, gives the start (by secant steps in
    ``log alpha``: the plain iteration's steps shrink geometrically, 14
    modes on separable text rows where secant steps took 5 on others); a
    bounded Brent search on ``log alpha`` then maximises the approximation
    itself.  Every evaluation is a mode search
    (Newton, a few counted passes) and the Hessian's spectrum there: dense
    up to ``MAX_DENSE_LAPLACE`` parameters (:class:`_DenseEvidence`); above
    them, the rows' side of the same spectrum where that is cheaper
    (:func:`_rows_side_pays`; :class:`_DualEvidence`, exact too), else a
    stochastic Lanczos quadrature of Hessian-vector
    products (:class:`_QuadratureEvidence`).  The context is left at the
    final alpha, its mode to be found there."""
    if ctx.dim <= MAX_DENSE_LAPLACE:
        evidence, kind = _DenseEvidence(ctx), "dense"
    elif _rows_side_pays(ctx):
        evidence, kind = _DualEvidence(ctx), "dense"
    else:
        evidence, kind = _QuadratureEvidence(ctx), "quadrature"
    _maximise_evidence(evidence, kind)
    return ctx.alpha


def _maximise_evidence(evidence, kind):
    """The search of :func:`_laplace_evidence_alpha` on ``evidence`` (its
    ``fixed_point``, ``settle``, ``log_evidence``, ``leave_at`` and
    ``log_evidence_limit``), with the tolerance of its ``kind`` ("dense" or
    "quadrature"): MacKay's fixed point, then Brent on the evidence within
    ``EVIDENCE_BRACKET`` of it; warns where the answer is an end of that
    bracket, or a point of the plateau toward strong priors (within
    ``EVIDENCE_PLATEAU`` of the evidence's limit there).  Returns alpha,
    where ``evidence`` is left."""
    from scipy.optimize import minimize_scalar

    log_alpha, slope = _log_fixed_point(evidence.fixed_point)
    evidence.settle(slope)
    bounds = (log_alpha - EVIDENCE_BRACKET, log_alpha + EVIDENCE_BRACKET)
    best = minimize_scalar(lambda x: -evidence.log_evidence(np.exp(x)), method="bounded",
                           bounds=bounds, options={"xatol": EVIDENCE_XATOL[kind]})
    alpha = float(np.exp(best.x))
    evidence.leave_at(alpha)
    if min(best.x - bounds[0], bounds[1] - best.x) <= EVIDENCE_EDGE * EVIDENCE_XATOL[kind]:
        _warn_evidence_at_edge(alpha, best.x < log_alpha)
        return alpha
    gap = -best.fun - evidence.log_evidence_limit()
    if gap < EVIDENCE_PLATEAU:
        _warn_evidence_on_its_plateau(alpha, gap)
    return alpha


#: the search's answer within this many of its tolerances of an end of its
#: bracket is that end, not a maximum
EVIDENCE_EDGE = 10
#: the cluster's evidence limit (:meth:`_PopulationEvidence.log_evidence_limit`)
#: is taken at this alpha: its terms in ``1 / alpha`` are under 1e-6 nats
EVIDENCE_LIMIT_ALPHA = 1e12


def _warn_evidence_at_edge(alpha, low):
    """The Laplace evidence rose to an end of its search: it has no maximum
    near MacKay's fixed point.  Toward small alpha that is (nearly) separable
    classes, where the mode runs off as the prior weakens (text rows with
    labels a threshold of a linear predictor: the evidence rose 200 nats as
    alpha fell from 0.21 to 0.077)."""
    why = ("toward a weaker prior: the mode grows without bound as alpha falls "
           "(classes that are (nearly) separable, or counts of 0 that a feature alone "
           "fits)" if low else
           "toward a stronger prior: the data say little about the coefficients")
    warnings.warn(
        f"alpha='auto': the Laplace evidence kept rising to the end of its search, "
        f"{why}. alpha_={alpha:.3g} is that end, not a maximum. Pass a number for alpha "
        "(alpha=1.0 with standardised features is the default).", UserWarning,
        stacklevel=user_stacklevel())


#: a maximum less than this many nats above the evidence's limit as alpha
#: grows (every coefficient at 0) is not told from that limit: the
#: quadrature's evidence carries ~0.1 nats of the mode searches' tolerance.
#: Labels shuffled at random: 100 rows x 50 features 0.005 nats above it
#: (alpha_ 1,510), 300 x 4,500 0.0001 (alpha_ 4e7, a point of the plateau);
#: 300 x 200 0.56 (alpha_ 656, a maximum the noise made)
EVIDENCE_PLATEAU = 0.1


def _warn_evidence_on_its_plateau(alpha, gap):
    """The Laplace evidence at ``alpha`` is within ``EVIDENCE_PLATEAU`` of
    its limit as alpha grows without bound: the search's answer is a point
    of that plateau, not a maximum (a fixed point clipped at 1e8 left Brent
    on it, and ``alpha_`` was an arbitrary large number, silently)."""
    warnings.warn(
        f"alpha='auto': the Laplace evidence at alpha_={alpha:.3g} is {max(gap, 0.0):.2g} "
        "nats above its limit as alpha grows without bound (every coefficient, the "
        "intercept too, at 0): no prior is preferred to that limit, so the data say little "
        "about the coefficients and alpha_ is a point of a plateau, not a maximum. Check "
        "that y is the target meant, or pass a number for alpha (alpha=1.0 with "
        "standardised features is the default).", UserWarning, stacklevel=user_stacklevel())


def _log_evidence_limit(ctx):
    """The Laplace evidence's limit as alpha grows without bound, ``-U(0)``:
    the mode goes to 0, where the prior's term vanishes, and ``(dim / 2) log
    alpha - (1/2) log det H`` goes to 0.  One counted pass."""
    ctx.n_grad_evals += ctx.n
    return -float(ctx.potential_and_grad(np.zeros(ctx.dim))[0])


def _log_fixed_point(update):
    """``(log alpha, slope)``: ``update(alpha) = alpha`` to
    ``EVIDENCE_RTOL``, from alpha = 1, by the plain iteration's first step,
    then secant steps on ``f = log update(alpha) - log alpha`` (at most 2 in
    ``log alpha``; a plain step where the secant's slope is not negative),
    and the last secant slope of ``f`` (-1 if none: the plain iteration's).
    An error ``e`` in ``log update`` moves the root by ``e / |slope|``."""
    x, f = 0.0, np.log(update(1.0))
    x_prev, f_prev, slope = None, None, -1.0
    for _ in range(EVIDENCE_MAX_ITER):
        step = f
        if x_prev is not None and x != x_prev:
            secant = (f - f_prev) / (x - x_prev)
            if secant < 0.0:
                slope = secant
                step = float(np.clip(-f / slope, -2.0, 2.0))
        if abs(step) <= EVIDENCE_RTOL:
            return x + step, slope
        x_prev, f_prev = x, f
        x = float(np.clip(x + step, np.log(1e-8), np.log(1e8)))
        f = np.log(update(np.exp(x))) - x
    return x, slope


def _mackay_update(gamma, theta):
    """MacKay's ``alpha <- gamma / |theta_hat|^2`` (kept within 1e-8..1e8)."""
    return float(np.clip(gamma / max(float(theta @ theta), 1e-300), 1e-8, 1e8))


def _dense_gamma(hessian, alpha):
    """MacKay's ``gamma = sum_j lambda_j / (lambda_j + alpha)`` over the
    likelihood's eigenvalues (``hessian``'s, prior included, less alpha)."""
    lam = np.clip(np.linalg.eigvalsh(hessian) - alpha, 0.0, None)
    return float(np.sum(lam / (lam + alpha)))


#: the rows' side's eigenvalues of ``m = n K`` rows cost about this many
#: units of ``ROW_COST_*`` times ``m^3`` an alpha (LAPACK's BLAS-3
#: tridiagonalisation runs many times a sparse pass's speed a flop): 3,000
#: rows took 1.3 s an alpha, 18,700 passes of 3,000 text rows (15 non-zeros)
#: 4.5 s, 0.3 ns a unit
ROWS_SIDE_COST = 0.16


def _rows_side_pays(ctx):
    """Whether the rows' side (:class:`_DualEvidence`) is cheaper an alpha
    than the quadrature's ``EVIDENCE_PROBES x EVIDENCE_PROBE_STEPS``
    Hessian-vector products (passes at ``ROW_COST_*``), and has at most
    ``MAX_DENSE_LAPLACE`` rows times outputs.  500 dense rows of 5,000
    features: 2e7 against 1.2e10 units (1,129 set-up passes against
    17,001); 3,000 text rows of 10^4 features: 4.3e9 against 8.2e8 (there
    the quadrature took 4.5 s, the rows' side 26 s)."""
    size = ctx.n * ctx.glm.n_outputs
    if size > MAX_DENSE_LAPLACE:
        return False
    passes = EVIDENCE_PROBES * EVIDENCE_PROBE_STEPS
    row = ROW_COST_FIXED + ROW_COST_PER_NONZERO * row_nonzeros(ctx)
    return ROWS_SIDE_COST * float(size) ** 3 < passes * ctx.n * row * ctx.glm.n_outputs


def _few_rows(ctx, dext=None):
    """``(rows, coefficients per class, prior sd of a row's logit)``
    (the median row's ``sqrt(|x_ext|^2 / alpha)``, from the context's cached
    :meth:`row_norms_sq`) where rows are fewer than a class's coefficients,
    else None.  ``dext``: the coefficients of the data the context's rows
    span (a fit in the rows' span, whose ``r`` columns keep each row's norm)."""
    dext = ctx.dext if dext is None else dext
    if ctx.n >= dext:
        return None
    median = float(np.median(ctx.row_norms_sq()))
    return ctx.n, dext, float(np.sqrt(median / ctx.alpha))


class _DenseEvidence:
    """The evidence's spectrum from the dense Hessian at the mode (up to
    ``MAX_DENSE_LAPLACE`` parameters)."""

    def __init__(self, ctx):
        self.ctx = ctx

    def fixed_point(self, alpha):
        """MacKay's update ``gamma / |theta_hat|^2`` at ``alpha``."""
        self.ctx.set_alpha(alpha)
        theta = self.ctx.mode()
        return _mackay_update(_dense_gamma(self.ctx.hessian_at(theta), alpha), theta)

    def settle(self, slope):
        """Nothing to settle: the spectrum is exact."""

    def log_evidence(self, alpha):
        self.ctx.set_alpha(alpha)
        return self.ctx.laplace_log_evidence()

    def leave_at(self, alpha):
        self.ctx.set_alpha(alpha)

    def log_evidence_limit(self):
        return _log_evidence_limit(self.ctx)


class _PopulationEvidence:
    """The evidence from the whole data's modes and dense Hessians found
    elsewhere: ``mode_at(alpha, start)`` returns one with ``mode``,
    ``hessian`` (prior included) and ``potential`` (Newton passes on a
    dask cluster, :func:`~.._dask_fit.population_mode`), each search
    started at the last mode.  Only the modes are kept (a Hessian is up to
    ``MAX_DENSE_LAPLACE^2`` doubles); ``mode``: the one at the alpha left at."""

    def __init__(self, mode_at, start):
        self.mode_at, self.start = mode_at, start
        self.modes, self.mode = {}, None

    def _at(self, alpha):
        found = self.mode_at(alpha, self.modes.get(alpha, self.start))
        self.modes[alpha] = self.start = found.mode
        return found

    def fixed_point(self, alpha):
        found = self._at(alpha)
        return _mackay_update(_dense_gamma(found.hessian, alpha), found.mode)

    def settle(self, slope):
        """Nothing to settle: the spectrum is exact."""

    def log_evidence(self, alpha):
        found = self._at(alpha)
        return laplace_log_evidence(found.potential, alpha, found.hessian)

    def leave_at(self, alpha):
        """The mode at ``alpha``: Brent's answer is a point it evaluated."""
        self.mode = self.modes[alpha]

    def log_evidence_limit(self):
        """The evidence at ``EVIDENCE_LIMIT_ALPHA`` (its mode searched from 0,
        kept apart from the search's): within 1e-6 nats of the limit."""
        found = self.mode_at(EVIDENCE_LIMIT_ALPHA, np.zeros_like(self.start))
        return laplace_log_evidence(found.potential, EVIDENCE_LIMIT_ALPHA, found.hessian)


class _QuadratureEvidence:
    """The evidence's spectrum above ``MAX_DENSE_LAPLACE`` parameters: a
    stochastic Lanczos quadrature (:class:`~.._sampling._spectrum.StochasticTrace`)
    of the likelihood's Hessian ``H - alpha I`` at each alpha's mode, from
    Hessian-vector products (a counted pass each), never the dense matrix.
    ``log det H`` and ``gamma`` are sums over its nodes.  Every alpha's
    quadrature uses the same Rademacher probes, so the search sees a smooth
    function of alpha; after the fixed point (:meth:`settle`) probes are
    added, up to ``EVIDENCE_MAX_PROBES``, until the delete-a-group jackknife
    se of the fixed point's ``log alpha`` is under ``EVIDENCE_ALPHA_LOG_SE``.
    Each mode search starts at the last one."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.n_probes = EVIDENCE_PROBES
        self.theta = self.trace = None

    def _mode_at(self, alpha):
        """The mode at ``alpha``, its search started at the last one."""
        self.ctx.set_alpha(alpha)
        if self.theta is not None:
            self.ctx.search_mode_from(self.theta)
        self.theta = self.ctx.mode()
        return self.theta

    def _spectrum_at(self, alpha):
        """``(mode, (nodes, masses))``: the likelihood's spectrum there."""
        ctx = self.ctx
        theta = self._mode_at(alpha)
        weights = ctx.hessian_row_weights(theta, full=True)
        self.trace = StochasticTrace(lambda v: ctx.hessian_vector(weights, v) - alpha * v, ctx.dim)
        self._add_probes(self.n_probes)
        return theta, self.trace.sums()

    def _add_probes(self, count):
        made = self.trace.products
        self.trace.add_probes(count)
        self.ctx.n_grad_evals += self.ctx.n * (self.trace.products - made)

    def fixed_point(self, alpha):
        theta, (nodes, masses) = self._spectrum_at(alpha)
        self.alpha = alpha
        return _mackay_update(float(masses @ (nodes / (nodes + alpha))), theta)

    def settle(self, slope):
        """Probes until the se of the fixed point's ``log alpha`` (that of
        ``log gamma`` over the fixed point's ``|slope|``) is under
        ``EVIDENCE_ALPHA_LOG_SE``."""
        trace, alpha = self.trace, self.alpha
        while True:
            logs = [np.log(masses @ (nodes / (nodes + alpha)))
                    for nodes, masses in (trace.sums(without=g) for g in range(trace.groups))]
            more = trace.more_probes(float(jackknife_se(logs)) / abs(slope),
                                     EVIDENCE_ALPHA_LOG_SE)
            if not more:
                self.n_probes = trace.n_probes
                return
            self._add_probes(more)

    def log_evidence(self, alpha):
        theta, (nodes, masses) = self._spectrum_at(alpha)
        u, _ = self.ctx.potential_and_grad(theta)
        self.ctx.n_grad_evals += self.ctx.n
        # log det H = dim log alpha + sum log(1 + lambda_j / alpha): the
        # prior's term cancels, and the quadrature's nodes at 0 add nothing
        return -u - 0.5 * float(masses @ np.log1p(nodes / alpha))

    def leave_at(self, alpha):
        self.ctx.set_alpha(alpha)
        self.ctx.search_mode_from(self.theta)

    def log_evidence_limit(self):
        return _log_evidence_limit(self.ctx)


class _DualEvidence(_QuadratureEvidence):
    """The evidence's spectrum from the rows' side: with fewer rows than
    coefficients, the likelihood's Hessian ``sum_i W_i (x) x_i x_i^T`` has
    the nonzero eigenvalues of the ``n K x n K`` matrix with blocks ``G_ij
    S_i S_j`` (``G`` the rows' Gram, :meth:`row_gram`, made once; ``S_i =
    W_i^(1/2)``), and ``dim - n K`` at zero: exact, as :class:`_DenseEvidence`,
    at ``O((n K)^3)`` an alpha where the quadrature of 500 rows of 5,000
    dense features spent about 16,000 passes.  The quadrature's sums, each
    node of mass 1."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.gram = self.theta = None

    def _spectrum_at(self, alpha):
        ctx = self.ctx
        theta = self._mode_at(alpha)
        if self.gram is None:
            self.gram = ctx.row_gram()
        hw = ctx.hessian_row_weights(theta, full=True)
        if hw.ndim == 1:
            root = np.sqrt(np.clip(hw, 0.0, None))
            rows = root[:, None] * self.gram * root[None, :]
        else:   # each row's K x K block: its symmetric square root S_i
            values, vectors = np.linalg.eigh(hw)
            root = np.einsum("nkm,nm,nlm->nkl", vectors,
                             np.sqrt(np.clip(values, 0.0, None)), vectors)
            size = hw.shape[0] * hw.shape[1]
            rows = np.einsum("ij,imk,jkl->imjl", self.gram, root, root).reshape(size, size)
        nodes = np.clip(np.linalg.eigvalsh(rows), 0.0, None)
        return theta, (nodes, np.ones_like(nodes))

    def settle(self, slope):
        """Nothing to settle: the spectrum is exact."""
