"""Bayesian multi-layer perceptron classifier sampled with SG-MCMC (torch).

torch is imported lazily, inside :meth:`SGMCMCMLPClassifier.fit`,
:meth:`~SGMCMCMLPClassifier.partial_fit` and the prediction methods, so this
module imports without torch installed.
"""

import importlib
import math
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.class_weight import compute_sample_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from ._schedules import schedule_plan
from .._sampling._runner import FitProgress, interrupt_note, progress_guard
from .._sampling._specs import (
    DYNAMICS,
    ESTIMATORS,
    NETWORK,
    dynamics_for,
    estimators_for,
    hyperparameter_constraints,
    hyperparameter_doc,
    ineffective_settings,
    sampler_doc,
    sampler_owners,
)

__all__ = ["SGMCMCMLPClassifier"]

# friction="auto": the momentum decay h * gamma per step of the underdamped
# dynamics (the momentum-SGD analogue of momentum 0.9; for SGNHT, h A).
# step_size="auto" is each spec's ``network_learning_rate``.
_AUTO_MOMENTUM_DECAY = 0.1


# n_warmup="auto" / thin="auto": at least MIN_WARMUP_STEPS warm-up steps and a
# thinning of MIN_THIN, and on data big enough that those are few passes,
# AUTO_PASSES passes of warm-up and as many again spread over the draws
# (MNIST 784-400-400-10: 2,000 steps are ~7 passes a chain, test error 2.58%
# and log-loss 0.092; 40 passes a chain 1.75% and 0.066; see doc/mlp.rst)
MIN_WARMUP_STEPS = 1000
MIN_THIN = 10
AUTO_PASSES = 20


def _auto_length(value, minimum, n_rows, rows_per_unit):
    """``value``, or for "auto" the larger of ``minimum`` and the count of
    ``rows_per_unit``-row units in ``AUTO_PASSES`` passes over ``n_rows``."""
    if value != "auto":
        return int(value)
    return max(minimum, int(math.ceil(AUTO_PASSES * n_rows / max(rows_per_unit, 1))))


# training rows (evenly spaced, fixed at fit) whose log-likelihood per draw is
# a convergence trace: without the weights' permutation symmetry, and cheap
# next to the fit (a forward pass of every draw on these rows)
DIAGNOSTIC_ROWS = 1000


_TORCH_HINT = (
    "SGMCMCMLPClassifier needs PyTorch; install it with "
    "'pip install \"skbayes_sg[torch]\"'."
)


def _same(a, b):
    """Whether a parameter value equals a default (numbers, sequences, None)."""
    if a is None or b is None:
        return a is b
    try:
        return bool(np.array_equal(np.asarray(a, dtype=np.float64),
                                   np.asarray(b, dtype=np.float64)))
    except (TypeError, ValueError):
        return a == b


def _import_torch_backend():
    """Import torch and the private torch kernels, with a helpful error."""
    try:
        importlib.import_module("torch")
    except ImportError as exc:  # pragma: no cover - exercised without torch
        raise ImportError(_TORCH_HINT) from exc
    return importlib.import_module("._torch_sampler", __package__)


class SGMCMCMLPClassifier(ClassifierMixin, BaseEstimator):
    """Bayesian multi-layer perceptron classifier sampled by SG-MCMC.

    The weights of layer ``l`` of a fully connected network get the prior
    ``N(0, prior_scale^2 / fan_in_l)`` and its biases ``N(0,
    prior_bias_scale^2)`` (``prior="fan_in"``; ``prior="isotropic"``: every
    weight and bias ``N(0, 1 / alpha)``); the likelihood is the softmax (for
    two classes: logistic) cross-entropy *summed* over the training rows, so
    the potential is ``U(theta) = -log p(theta) + sum_i w_i CE(y_i, f_theta(x_i))``
    and the target is ``exp(-U / temperature)``. The row weights ``w_i`` are
    1 unless ``fit`` gets ``sample_weight`` or the estimator a
    ``class_weight``: they are *frequency* weights, so integer weights give
    the posterior of the data with each row repeated ``w_i`` times.
    Posterior draws are produced by a stochastic-gradient MCMC ``sampler``
    fed by a minibatch gradient estimator (``subsampling``), and predictions
    average the class probabilities over all draws (Bayesian model
    averaging).

    The network runs on PyTorch (CPU or CUDA), an optional dependency:
    ``pip install "skbayes_sg[torch]"``.

    Parameters
    ----------
    hidden_layer_sizes : array-like of shape (n_layers - 2,), default=(100,)
        Number of units in each hidden layer, as in
        :class:`sklearn.neural_network.MLPClassifier`. ``()`` gives no hidden
        layer, i.e. Bayesian multinomial (two classes: binary) logistic
        regression.

    activation : {"relu", "tanh", "logistic", "identity"}, default="relu"
        Hidden-layer activation.

{sampler_doc}
        With ``h = step_size``, ``T = temperature``, ``g`` the gradient
        estimate (prior term exact) and ``xi`` standard normal, e.g.
        ``"sgld"``: ``theta <- theta - h g + sqrt(2 h T) xi``. On this
        estimator (no whitened metric) every dynamics runs in the
        parameters' own coordinates: pSGLD's ``V`` starts at ``(g/n)^2`` of
        the first minibatch; the momentum (ULD: velocity, variance ``u T``)
        starts at ``N(0, T I)``; BAOAB spends one estimate per step (the
        closing half-kick of a step and the opening one of the next share
        it); SG-HMC leapfrog spends ``n_leapfrog + 1`` estimates per kept
        step and has no Metropolis test.

    subsampling : {"uniform", "ewsg", "svrg", "cv"}, default="uniform"
        Estimator ``g`` of ``grad U(theta)``; the prior term ``alpha theta`` is
        always exact. ``"uniform"``: ``(n/b) sum_{j in S} grad U_j``.
        ``"ewsg"``: exponentially weighted stochastic gradients, a Metropolis
        chain of length ``ewsg_chain_length`` over uniformly drawn candidate
        minibatches with weights ``exp(||x + w_J||^2 / 2)``, ``w_J`` the
        candidate's gradient whitened by the dynamics' own Gaussian transition
        (for pSGLD, with the preconditioner of the previous step).
        ``"svrg"``: SVRG-LD, a snapshot ``theta~`` with its full-data
        gradient every ``snapshot_period`` steps.
        ``"cv"``: control variates at a mode found first by Adam
        (``map_epochs``, ``map_learning_rate``); the chain starts at the mode.
        ``"saga"`` and the preferential schemes are refused: for a network
        they need ``n x n_params`` memory or ``n`` backward passes.

    step_size : float or "auto", default="auto"
        Step size ``h``. The potential sums over the data, so ``h`` must
        shrink like ``1 / n_rows``: ``h * n_rows`` is the learning rate of the
        equivalent SGD on the mean loss (SGLD; for pSGLD the RMSprop learning
        rate; for the dynamics with a momentum -- SGHMC, ULD, BAOAB, SGNHT,
        SG-HMC leapfrog -- ``h**2 * n_rows`` is that of momentum SGD).
        ``"auto"`` sets it from the number of rows of the data being fitted:
        ``0.2 / n_rows`` (SGLD), ``1e-3 / n_rows`` (pSGLD) and
        ``sqrt(0.01 / n_rows)`` (the momentum dynamics): learning rates that
        worked for SGLD, pSGLD and SGHMC from 400 to 60,000 rows (breast
        cancer, digits, MNIST, synthetic data), where a fixed value such as
        ``1e-4`` diverges or stalls beyond ~20,000 rows; the newer momentum
        dynamics reuse SGHMC's (tested on small problems only).
        With row weights (``sample_weight``, ``class_weight``) ``n_rows`` is
        the total weight ``sum_i w_i``, the amount of data in the potential
        (integer weights then get the step of the repeated rows; pSGLD's
        ``g / n`` and the CV mode search's ``U / n`` use it too).
        The value used is ``step_size_``. Too large a value makes the chain
        diverge, which raises ``SamplingDivergedError`` (a ``FloatingPointError``).

    batch_size : int or "auto", default="auto"
        Minibatch size ``b``; ``"auto"`` is ``min(200, n_rows)`` and a value
        larger than the data is clipped. Minibatches are consecutive blocks
        of a random permutation of the rows (a new permutation when fewer
        than ``b`` rows are left), so each is a uniformly random subset.

    n_samples : int, default=100
        Posterior draws kept per chain.

    n_warmup : int or "auto", default="auto"
        Steps discarded at the start of each chain (one step = one
        minibatch update). ``"auto"``: 1,000 steps, or 20 data passes
        (``ceil(20 * n_rows / b)`` steps) where that is more (from ~10,000
        rows at ``b = 200``; on MNIST 6,000 steps). The value used is
        ``n_warmup_``.

    thin : int or "auto", default="auto"
        Keep every ``thin``-th step after the warm-up. A chain runs
        ``n_warmup + n_samples * thin`` steps. ``"auto"``: 10, or so many
        that the draws span 20 data passes (``ceil(20 * n_rows / (b *
        n_samples))``) where that is more. On 60,000 MNIST rows (784-400-400-10)
        the fixed 2,000 steps of the old defaults were ~7 passes a chain:
        test error 2.58%, log-loss 0.092; the automatic 40 passes give 1.75%
        and 0.066 (torch SGD with momentum: 1.47% and 0.069). The value
        used is ``thin_``.

    n_chains : int, default=4
        Independent chains, run one after the other, each with its own
        seed and initialisation. The model average pools them: chains in
        different modes improve it more than more draws from one chain
        (digits: log-loss 0.16 with one chain, 0.13 with four; see the user
        guide).

    alpha : float, default=1.0
        Prior precision of ``prior="isotropic"``: every weight and bias is
        ``N(0, 1 / alpha)``. Set away from 1.0 with the fan-in prior it is
        refused (``ValueError``): pass ``prior="isotropic"`` as well.

    prior : {"fan_in", "isotropic"}, default="fan_in"
        ``"fan_in"``: the weights of layer ``l`` (``fan_in`` inputs) are
        ``N(0, s_l^2 / fan_in)`` with ``s_l`` from ``prior_scale``, the
        biases ``N(0, prior_bias_scale^2)``, so every layer's pre-activations
        have prior variance about ``s^2`` whatever its width (the scaling of
        the usual initialisations). ``"isotropic"``: the prior of releases
        before issue 26, ``N(0, 1 / alpha)`` for every weight and bias.

    prior_scale : float or array-like of shape (n_layers - 1,), default=4.0
        ``s``: one scale for every layer, or one per layer
        (``len(hidden_layer_sizes) + 1`` numbers). 4.0 was chosen by
        measurement at ``temperature=1`` (``benchmarks/bench_mlp_defaults.py``,
        the user guide): 1-2 under-fit (the logits stay small, the model
        average is under-confident), 7 and more spread the posterior so that
        the model average gets less accurate and varies from seed to seed.
        Only with ``prior="fan_in"``.

    prior_bias_scale : float, default=1.0
        Standard deviation of every bias under ``prior="fan_in"``.

    hyperprior : (float, float) or None, default=None
        ``(a, b)``: a ``Gamma(a, b)`` prior (shape, rate) on a precision
        multiplier ``lambda_l`` of each layer's weights, which are then
        ``N(0, s_l^2 / (lambda_l fan_in))``; ``lambda_l`` is redrawn from its
        conditional (a Gibbs step, as the Bayesian networks of Chen et al.,
        2014, and Li et al., 2016) once per data pass:
        ``Gamma((a - 1 + n_l / 2) / T + 1, (b + fan_in ||W_l||^2 / (2 s_l^2)) / T)``
        with ``n_l`` the layer's number of weights. None: ``lambda_l = 1``.
        Only with ``prior="fan_in"``.

    schedule : {"constant", "cyclical", "polynomial"}, default="constant"
        Step-size schedule of each ``fit`` (or ``partial_fit`` call), for
        every ``sampler``. ``"constant"``: ``step_size`` throughout.
        ``"polynomial"``: ``step_size * (1 + k / t0) ** -power_t`` at step
        ``k``, ``t0 = max(n_warmup, 1)``. ``"cyclical"`` (Zhang et al., ICLR
        2020): ``n_warmup`` steps at ``step_size``, then ``n_cycles`` cosine
        cycles ``step_size * (cos(pi j / L) + 1) / 2`` (step ``j`` of a cycle
        of ``L`` steps); the first ``exploration_fraction`` of each cycle keeps
        nothing, its sampling stage keeps every ``thin``-th state; the
        ``n_samples`` draws are split evenly over the cycles, so a chain runs
        ``n_warmup + n_samples * thin / (1 - exploration_fraction)`` steps
        (rounded up per cycle). The value the friction ``"auto"`` resolves
        to is that of ``step_size`` and stays fixed.

    n_cycles : int, default=4
        Cycles of ``schedule="cyclical"`` (at most ``n_samples``).

    exploration_fraction : float in [0, 1), default=0.5
        Share of each cycle that keeps no draws (``schedule="cyclical"``).

    power_t : float, default=0.55
        Exponent of ``schedule="polynomial"`` (Welling & Teh's ``gamma``).

    temperature : float, default=1.0
        Posterior temperature ``T``; the target is ``exp(-U / T)``.

    class_weight : dict, "balanced" or None, default=None
        Weights of the classes, as in
        :class:`sklearn.linear_model.LogisticRegression`: row ``i`` gets the
        weight ``class_weight[y_i]`` (classes not in the dict: 1), or with
        ``"balanced"`` ``n_rows / (n_classes * count(y_i))``
        (:func:`sklearn.utils.class_weight.compute_sample_weight`), times
        its ``sample_weight``. :meth:`partial_fit` computes ``"balanced"``
        on each call's rows (each call targets the posterior given them).

{friction_doc}
        Here ``"auto"`` is ``0.1 / h``, a momentum decay ``h * gamma`` (for
        ``"sgnht"``, ``h * A``) of 0.1 per step (the momentum-SGD analogue of
        momentum 0.9, as recommended by Chen et al.). The value used is
        ``friction_``. Refused (``ValueError``) when set with a sampler that
        does not use it.

{inv_mass_doc}
        Refused when set with another sampler.

{n_leapfrog_doc}
        Here ``"auto"`` is 10. Refused when set with another sampler.

    ewsg_chain_length : int, default=1
        Length ``M`` of the EWSG index chain; a step costs ``M + 1``
        minibatch gradients.

    snapshot_period : int or "auto", default="auto"
        Steps between SVRG snapshots; ``"auto"`` means one data pass
        (``ceil(n_rows / b)`` steps), as on the linear estimators.

    map_epochs : int, default=10
        Passes of Adam over the data to find the mode used by
        ``subsampling="cv"``; 0 uses the initial parameters as the anchor.

    map_learning_rate : float, default=1e-3
        Adam learning rate for that search (on the mean loss ``U / n_rows``).

    max_draws_in_memory : int, default=64
        Prediction moves at most this many draws to the device at once (and
        as many rows as keep one block of activations near 32 MB in float32),
        so memory stays bounded for any number of draws and rows.

    device : {"cpu", "cuda", "auto"} or str, default="cpu"
        Torch device. ``"auto"`` is ``"cuda"`` when
        ``torch.cuda.is_available()``, else ``"cpu"``; ``"cuda:k"`` picks a
        GPU. Draws are always stored on the CPU.

    dtype : {"float32", "float64"}, default="float32"
        Floating point type of the computation. Draws are stored as float32.

    random_state : int, RandomState instance or None, default=None
        Seeds the chains: one child of a ``numpy.random.SeedSequence`` per
        chain seeds that chain's ``torch.Generator`` (on the device), which
        draws the initialisation, the minibatches and the noise (on the CPU,
        it seeds the chain's vectorised noise generator instead; see the
        user guide). Results are reproducible on the CPU for a fixed
        integer.

    verbose : int or bool, default=0
        Show progress as the linear estimators do: one line for the chains
        (steps, rate, ETA and the mean minibatch cross-entropy of the last
        data pass), redrawn in place in a terminal (a tqdm bar when tqdm is
        installed), at most one line every few seconds in a log, and a final
        line with the smallest bulk ESS and largest R-hat of the quantities
        of :meth:`summary`.

    warm_start : bool, default=False
        When True, ``fit`` continues every chain from its last state
        (parameters, momentum, SGNHT thermostat, pSGLD accumulator, minibatch
        permutation and generator state) without a new warm-up, and *replaces*
        ``coef_samples_`` with the ``n_samples`` new draws per chain.
        (:meth:`partial_fit` instead *appends* its draws.) The classes, the
        number of features and the architecture must not change.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
        Class labels.

    n_features_in_ : int
        Number of features seen during fit.

    feature_names_in_ : ndarray of shape (n_features_in_,)
        Feature names, when ``X`` has string column names.

    coef_samples_ : ndarray of shape (n_chains, n_kept, n_params), float32
        Posterior draws as flat parameter vectors: for each layer in order,
        the weight matrix of shape ``(fan_in, fan_out)`` in C order then the
        bias (see :meth:`unpack_params`). ``n_kept`` is ``n_samples`` after
        ``fit`` and grows with :meth:`partial_fit`. Predictions average over
        exactly these draws.

    layer_sizes_ : tuple of int
        ``(n_features, *hidden_layer_sizes, n_outputs_)``.

    n_layers_ : int
        Number of layers, input and output included.

    n_outputs_ : int
        1 for two classes (logistic output), else the number of classes.

    out_activation_ : str
        ``"logistic"`` or ``"softmax"``.

    n_params_ : int
        Length of a flat parameter vector.

    n_steps_ : int
        Steps per chain since the chain started (warm starts and
        ``partial_fit`` calls included).

    n_grad_evals_ : int
        Per-datum gradient evaluations spent by all chains since they
        started: ``b`` per minibatch gradient, ``(M + 1) b`` per EWSG step,
        ``2 b`` per SVRG/CV step plus ``n_rows`` per full-data pass
        (snapshots, anchors) and the Adam steps of the CV mode search.

    ewsg_acceptance_rate_ : float or None
        Fraction of accepted EWSG index proposals (None for other
        subsampling).

    map_coef_ : ndarray of shape (n_chains, n_params) or None
        The modes used as control-variate anchors (``subsampling="cv"``).

    device_ : str
        Device used by the last fit.

    step_size_ : float
        Step size used by the last fit (``step_size`` with "auto" resolved).

    batch_size_ : int
        Minibatch size used by the last fit (``batch_size`` with "auto"
        resolved, clipped to the rows).

    n_warmup_, thin_ : int
        Warm-up steps and thinning of the last fit (``"auto"`` resolved; the
        warm-up of a continued chain is 0).

    friction_ : float or None
        Friction (``"sgnht"``: diffusion A) used by the last fit, for the
        samplers that own ``friction`` (None for the others).

    See Also
    --------
    sklearn.neural_network.MLPClassifier : The point-estimate network.

    Notes
    -----
    Binary problems use one output unit (logit of ``classes_[1]``);
    multiclass problems use one unit per class.

    References
    ----------
    Welling & Teh (2011), SGLD; Li et al. (2016), pSGLD; Chen et al. (2014),
    SGHMC; Cheng et al. (2018), ULD; Leimkuhler & Matthews (2013), BAOAB;
    Ding et al. (2014), SGNHT; Li et al. (EWSG, ICLR 2021); Dubey et al. (2016), SVRG-LD;
    Baker et al. (2019), control variates.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from skbayes_sg.neural_network import SGMCMCMLPClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = SGMCMCMLPClassifier(hidden_layer_sizes=(16,), n_samples=20,
    ...                           random_state=0).fit(X, y)
    >>> clf.step_size_ == 0.2 / len(X)  # step_size="auto" for SGLD
    True
    >>> clf.coef_samples_.shape  # 4 chains of 20 draws
    (4, 20, 131)
    >>> clf.predict_proba(X[:2]).shape
    (2, 3)
    """

    _parameter_constraints: dict = {
        "hidden_layer_sizes": ["array-like", Interval(Integral, 1, None, closed="left")],
        "activation": [StrOptions({"identity", "logistic", "tanh", "relu"})],
        "sampler": [StrOptions(set(dynamics_for(NETWORK)))],
        "subsampling": [StrOptions(set(estimators_for(NETWORK)))],
        "step_size": [StrOptions({"auto"}), Interval(Real, 0, None, closed="neither")],
        "batch_size": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
        "n_samples": [Interval(Integral, 1, None, closed="left")],
        "n_warmup": [Interval(Integral, 0, None, closed="left"), StrOptions({"auto"})],
        "thin": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "n_chains": [Interval(Integral, 1, None, closed="left")],
        "alpha": [Interval(Real, 0, None, closed="neither")],
        "prior": [StrOptions({"fan_in", "isotropic"})],
        "prior_scale": [Interval(Real, 0, None, closed="neither"), "array-like"],
        "prior_bias_scale": [Interval(Real, 0, None, closed="neither")],
        "hyperprior": [None, tuple, list],
        "schedule": [StrOptions({"constant", "cyclical", "polynomial"})],
        "n_cycles": [Interval(Integral, 1, None, closed="left")],
        "exploration_fraction": [Interval(Real, 0, 1, closed="left")],
        "power_t": [Interval(Real, 0, None, closed="left")],
        "temperature": [Interval(Real, 0, None, closed="neither")],
        "class_weight": [StrOptions({"balanced"}), dict, None],
        **hyperparameter_constraints(),  # friction, inv_mass, n_leapfrog
        "ewsg_chain_length": [Interval(Integral, 1, None, closed="left")],
        "snapshot_period": [Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})],
        "map_epochs": [Interval(Integral, 0, None, closed="left")],
        "map_learning_rate": [Interval(Real, 0, None, closed="neither")],
        "max_draws_in_memory": [Interval(Integral, 1, None, closed="left")],
        "device": [str],
        "dtype": [StrOptions({"float32", "float64"})],
        "random_state": ["random_state"],
        "verbose": ["verbose"],
        "warm_start": ["boolean"],
    }

    def __init__(
        self,
        hidden_layer_sizes=(100,),
        activation="relu",
        *,
        sampler="sgld",
        subsampling="uniform",
        step_size="auto",
        batch_size="auto",
        n_samples=100,
        n_warmup="auto",
        thin="auto",
        n_chains=4,
        alpha=1.0,
        prior="fan_in",
        prior_scale=4.0,
        prior_bias_scale=1.0,
        hyperprior=None,
        schedule="constant",
        n_cycles=4,
        exploration_fraction=0.5,
        power_t=0.55,
        temperature=1.0,
        class_weight=None,
        friction="auto",
        inv_mass=1.0,
        n_leapfrog="auto",
        ewsg_chain_length=1,
        snapshot_period="auto",
        map_epochs=10,
        map_learning_rate=1e-3,
        max_draws_in_memory=64,
        device="cpu",
        dtype="float32",
        random_state=None,
        verbose=0,
        warm_start=False,
    ):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.sampler = sampler
        self.subsampling = subsampling
        self.step_size = step_size
        self.batch_size = batch_size
        self.n_samples = n_samples
        self.n_warmup = n_warmup
        self.thin = thin
        self.n_chains = n_chains
        self.alpha = alpha
        self.prior = prior
        self.prior_scale = prior_scale
        self.prior_bias_scale = prior_bias_scale
        self.hyperprior = hyperprior
        self.schedule = schedule
        self.n_cycles = n_cycles
        self.exploration_fraction = exploration_fraction
        self.power_t = power_t
        self.temperature = temperature
        self.class_weight = class_weight
        self.friction = friction
        self.inv_mass = inv_mass
        self.n_leapfrog = n_leapfrog
        self.ewsg_chain_length = ewsg_chain_length
        self.snapshot_period = snapshot_period
        self.map_epochs = map_epochs
        self.map_learning_rate = map_learning_rate
        self.max_draws_in_memory = max_draws_in_memory
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose
        self.warm_start = warm_start

    # ------------------------------------------------------------------
    # validation helpers
    # ------------------------------------------------------------------
    def _check_params(self):
        """Validate the parameters (constraints plus the explained refusals)."""
        sub = self.subsampling
        refusal = ESTIMATORS[sub].network_refusal if isinstance(sub, str) \
            and sub in ESTIMATORS else None
        if refusal:
            raise ValueError(
                f"subsampling={sub!r} is not available for SGMCMCMLPClassifier: "
                f"{refusal}. "
                f"Use one of {', '.join(repr(n) for n in estimators_for(NETWORK))}."
            )
        self._validate_params()
        self._check_parameters_act()
        self._check_prior_and_schedule()
        hidden = self.hidden_layer_sizes
        if isinstance(hidden, Integral):
            hidden = [hidden]
        hidden = list(hidden)
        if not all(isinstance(h, Integral) and not isinstance(h, bool) and h > 0
                   for h in hidden):
            raise ValueError(
                "hidden_layer_sizes must contain only positive integers, got "
                f"{self.hidden_layer_sizes!r}."
            )
        return tuple(int(h) for h in hidden)

    def _check_prior_and_schedule(self):
        """The prior and schedule settings must act: refuse those that the
        chosen ``prior`` / ``schedule`` would ignore, naming the fix."""
        defaults = type(self)().get_params(deep=False)
        if self.prior == "isotropic":
            for name in ("prior_scale", "prior_bias_scale", "hyperprior"):
                if not _same(getattr(self, name), defaults[name]):
                    raise ValueError(
                        f"{name}={getattr(self, name)!r} applies to prior='fan_in'; with "
                        f"prior='isotropic' every weight and bias is N(0, 1/alpha). Set "
                        f"prior='fan_in', or leave {name} at its default "
                        f"({defaults[name]!r}).")
        elif not _same(self.alpha, defaults["alpha"]):
            raise ValueError(
                f"alpha={self.alpha!r} sets the isotropic prior N(0, 1/alpha), which is "
                f"not the prior in use (prior={self.prior!r}, weights N(0, "
                "prior_scale**2 / fan_in)). Pass prior='isotropic' to use alpha, or set "
                "prior_scale instead.")
        if self.hyperprior is not None:
            hp = self.hyperprior
            ok = (isinstance(hp, (tuple, list)) and len(hp) == 2
                  and all(isinstance(v, Real) and not isinstance(v, bool)
                          and np.isfinite(v) and v > 0 for v in hp))
            if not ok:
                raise ValueError(
                    "hyperprior must be None or a pair (shape, rate) of positive finite "
                    f"numbers (a Gamma prior on each layer's precision), got {hp!r}; e.g. "
                    "hyperprior=(1.0, 1.0).")
        if self.schedule != "cyclical":
            for name in ("n_cycles", "exploration_fraction"):
                if not _same(getattr(self, name), defaults[name]):
                    raise ValueError(
                        f"{name}={getattr(self, name)!r} applies to schedule='cyclical', "
                        f"not schedule={self.schedule!r}; set schedule='cyclical' or leave "
                        f"{name} at its default ({defaults[name]!r}).")
        elif self.n_cycles > self.n_samples:
            raise ValueError(
                f"schedule='cyclical' keeps at least one draw per cycle, so n_cycles "
                f"({self.n_cycles}) must not exceed n_samples ({self.n_samples}); lower "
                "n_cycles or raise n_samples.")
        if self.schedule != "polynomial" and not _same(self.power_t, defaults["power_t"]):
            raise ValueError(
                f"power_t={self.power_t!r} applies to schedule='polynomial', not "
                f"schedule={self.schedule!r}; set schedule='polynomial' or leave power_t "
                f"at its default ({defaults['power_t']!r}).")

    def _prior_layers(self, layer_sizes):
        """``[(weight scale s, bias scale s_b)]`` per layer for the fan-in
        prior (weights ``N(0, s^2 / fan_in)``, biases ``N(0, s_b^2)``), or None
        for the isotropic prior."""
        if self.prior == "isotropic":
            return None
        return [(s, float(self.prior_bias_scale))
                for s in self._layer_scales(len(layer_sizes) - 1)]

    def _layer_scales(self, n_layers):
        """``prior_scale`` as one weight scale per layer (checked)."""
        scales = np.atleast_1d(np.asarray(self.prior_scale, dtype=np.float64)).ravel()
        if scales.size == 1:
            scales = np.repeat(scales, n_layers)
        if (scales.size != n_layers or not np.all(np.isfinite(scales))
                or not np.all(scales > 0)):
            raise ValueError(
                f"prior_scale must be a positive number or one positive number per layer "
                f"({n_layers} here: len(hidden_layer_sizes) + 1), got {self.prior_scale!r}.")
        return [float(v) for v in scales]

    def _log_prior(self, theta):
        """Log prior density of draws ``theta`` (shape (..., n_params_)), up
        to a constant; with a hyperprior, the marginal over the layers'
        precisions (a multivariate Student t per layer)."""
        theta = np.asarray(theta, dtype=np.float64)
        if self.prior == "isotropic":
            return -0.5 * float(self.alpha) * np.einsum("...k,...k->...", theta, theta)
        sb = float(self.prior_bias_scale)
        out = np.zeros(theta.shape[:-1])
        pos = 0
        for s, fi, fo in zip(self._layer_scales(self.n_layers_ - 1), self.layer_sizes_[:-1],
                             self.layer_sizes_[1:]):
            W = theta[..., pos:pos + fi * fo]
            b = theta[..., pos + fi * fo:pos + fi * fo + fo]
            ssw = np.einsum("...k,...k->...", W, W) * fi / (s * s)
            if self.hyperprior is None:
                out -= 0.5 * ssw
            else:
                a, rate = self.hyperprior
                out -= (a + 0.5 * fi * fo) * np.log(rate + 0.5 * ssw)
            out -= 0.5 * np.einsum("...k,...k->...", b, b) / (sb * sb)
            pos += fi * fo + fo
        return out

    def _check_parameters_act(self):
        """A sampler hyperparameter set away from its default must act on the
        fit, or the fit is refused (a setting silently ignored is a wrong
        answer given quietly); the owners are the specs'."""
        problems = ineffective_settings(sampler_owners(), self, "sampler", self.sampler)
        if problems:
            raise ValueError(
                "; ".join(problems) + ". Leave the parameter at its default, or choose "
                "a sampler it applies to.")

    def _resolve_device(self, torch):
        """Map the ``device`` parameter to a torch device string."""
        dev = self.device
        if dev == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        if dev == "cpu":
            return "cpu"
        if dev == "cuda" or dev.startswith("cuda:"):
            if not torch.cuda.is_available():
                raise ValueError(
                    f"device={dev!r} was requested but torch.cuda.is_available() is "
                    "False (no GPU or a CPU-only torch build); use device='cpu' or "
                    "device='auto'."
                )
            return dev
        raise ValueError(
            f"device must be 'cpu', 'cuda', 'cuda:<index>' or 'auto', got {dev!r}."
        )

    def _resolved_step(self, n_data):
        """``(step_size, friction)`` for data of ``n_data`` rows, or total
        weight ``n_data`` with row weights ("auto" resolved)."""
        if self.step_size == "auto":
            lr = DYNAMICS[self.sampler].network_learning_rate
            # a second-order dynamics moves theta by ~h^2 g: lr is its h^2 n
            h = (math.sqrt(lr / n_data) if DYNAMICS[self.sampler].second_order
                 else lr / n_data)
        else:
            h = float(self.step_size)
        gamma = _AUTO_MOMENTUM_DECAY / h if self.friction == "auto" else float(self.friction)
        return h, gamma

    def _sampler_params(self, batch_size, n_data):
        h, gamma = self._resolved_step(n_data)
        return {
            "sampler": self.sampler,
            "subsampling": self.subsampling,
            "step_size": h,
            "batch_size": int(batch_size),
            # the fan-in prior's precisions are a vector the runner adds to
            # every estimate; the dynamics' exact scalar term is then 0
            "alpha": float(self.alpha) if self.prior == "isotropic" else 0.0,
            "hyperprior": (None if self.hyperprior is None
                           else tuple(float(v) for v in self.hyperprior)),
            "temperature": float(self.temperature),
            "friction": gamma,
            "inv_mass": float(self.inv_mass),
            "n_leapfrog": self.n_leapfrog,  # "auto" resolved by the runner
            "ewsg_chain_length": int(self.ewsg_chain_length),
            "snapshot_period": self.snapshot_period,
            "map_epochs": int(self.map_epochs),
            "map_learning_rate": float(self.map_learning_rate),
            "verbose": int(bool(self.verbose)),
        }

    def _chain_seeds(self):
        """One 63-bit torch seed per chain from ``random_state``."""
        rng = check_random_state(self.random_state)
        entropy = rng.randint(0, 2**32, size=4, dtype=np.uint64).tolist()
        children = np.random.SeedSequence(entropy).spawn(int(self.n_chains))
        return [int(c.generate_state(1, dtype=np.uint64)[0]) & ((1 << 63) - 1)
                for c in children]

    # ------------------------------------------------------------------
    # fitting
    # ------------------------------------------------------------------
    def fit(self, X, y, sample_weight=None):
        """Sample the posterior of the network weights.

        Runs ``n_chains`` chains of ``n_warmup + n_samples * thin`` steps
        (with ``warm_start=True`` and a previous fit: continues the chains for
        ``n_samples * thin`` steps, no warm-up) and stores the kept draws in
        ``coef_samples_``.

        Parameters
        ----------
        X : array-like of shape (n_rows, n_features)
            Training data.
        y : array-like of shape (n_rows,)
            Class labels (at least two classes).
        sample_weight : array-like of shape (n_rows,), default=None
            Nonnegative frequency weights ``w_i`` of the rows (times the
            ``class_weight`` of their class): the potential is
            ``alpha ||theta||^2 / 2 + sum_i w_i U_i``, so an integer weight
            ``k`` gives the posterior of the row repeated ``k`` times and a
            zero weight that of the row left out. Minibatches stay uniform
            over the rows, each row's gradient weighted, so every
            ``subsampling`` stays unbiased; ``step_size="auto"`` uses the total
            weight in place of ``n_rows``. None, or every weight equal to 1,
            is the unweighted fit (the same draws for the same
            ``random_state``).

        Returns
        -------
        self : object
            The fitted estimator.

        Raises
        ------
        ValueError
            If ``sample_weight`` has the wrong length, a negative or
            non-finite value, or is zero for every row.
        SamplingDivergedError
            If a chain diverges (non-finite parameters); the message names
            ``step_size`` and a smaller value to try.

        Warns
        -----
        MCMCConvergenceWarning
            When the permutation-invariant quantities of :meth:`summary` have
            a split R-hat above 1.01, or a bulk or tail effective sample size
            below 100 per chain; the message (that of :meth:`check_convergence`)
            names the ``n_samples``, ``thin`` and ``n_warmup`` to use.
        """
        hidden = self._check_params()
        X, y = validate_data(self, X, y, reset=True, dtype=[np.float64, np.float32])
        check_classification_targets(y)
        weights = self._row_weights(X, y, sample_weight)
        classes = np.unique(y)
        continuing = self.warm_start and hasattr(self, "_chain_states")
        if continuing:
            self._check_continuation(classes, hidden)
        self._fit(X, y, classes, hidden, continuing=continuing, append=False,
                  weights=weights)
        self._warn_if_unreliable()
        return self

    def _row_weights(self, X, y, sample_weight):
        """The rows' frequency weights, ``sample_weight`` times the
        ``class_weight`` of each row's class, as float64; None when every
        weight is 1 (the unweighted fit, bit for bit)."""
        if sample_weight is None and self.class_weight is None:
            return None
        try:
            w = _check_sample_weight(sample_weight, X, dtype=X.dtype,
                                     ensure_non_negative=True)
        except ValueError as exc:
            if "sample_weight" in str(exc):
                raise
            # e.g. "Sample weights must be 1D array or scalar": name the parameter
            raise ValueError(f"Invalid sample_weight: {exc}") from exc
        w = np.asarray(w, dtype=np.float64)
        if self.class_weight is not None:
            w = w * compute_sample_weight(self.class_weight, y)
        if not np.all(np.isfinite(w)):
            raise ValueError("sample_weight times class_weight is not finite for every "
                             "row; pass finite nonnegative weights.")
        if w.size and not np.any(w > 0):
            raise ValueError(
                "sample_weight is zero for every row"
                + (" (after multiplying by class_weight)" if self.class_weight is not None
                   else "")
                + ", which leaves no data to fit; give at least one row a positive weight.")
        if np.all(w == 1.0):
            return None
        return w

    def partial_fit(self, X, y, classes=None, sample_weight=None):
        """Continue the chains on ``(X, y)`` and append their draws.

        The first call (``classes`` required) starts the chains with the
        warm-up; every call then runs ``n_samples * thin`` steps per chain on
        the given data and *appends* ``n_samples`` draws per chain to
        ``coef_samples_``. Each call targets the posterior given the rows it
        receives (the gradient is scaled by that call's ``n_rows``). The
        chain state (parameters, momentum, pSGLD accumulator, generator)
        carries over; SVRG/CV anchors keep their parameters and get their
        full-data gradient recomputed on the new rows.

        Parameters
        ----------
        X : array-like of shape (n_rows, n_features)
            Training data.
        y : array-like of shape (n_rows,)
            Class labels, a subset of ``classes``.
        classes : array-like of shape (n_classes,), default=None
            All classes; required on the first call, ignored afterwards
            (it must then agree with ``classes_``).
        sample_weight : array-like of shape (n_rows,), default=None
            Frequency weights of this call's rows, as in :meth:`fit`: the
            call targets ``alpha ||theta||^2 / 2 + sum_i w_i U_i`` over its
            rows, and ``step_size="auto"`` follows its total weight.

        Returns
        -------
        self : object
            The fitted estimator.
        """
        first = not hasattr(self, "_chain_states")
        hidden = self._check_params()
        X, y = validate_data(self, X, y, reset=first, dtype=[np.float64, np.float32])
        check_classification_targets(y)
        if first:
            if classes is None:
                raise ValueError("classes must be passed on the first call to partial_fit.")
            classes = np.unique(np.asarray(classes))
        else:
            if classes is not None and not np.array_equal(np.unique(classes), self.classes_):
                raise ValueError(
                    f"`classes={classes!r}` is not the same as on the first call "
                    f"to partial_fit, which was {self.classes_!r}."
                )
            classes = self.classes_
            self._check_continuation(classes, hidden, where="partial_fit")
        unknown = np.setdiff1d(np.unique(y), classes)
        if unknown.size:
            raise ValueError(f"y contains labels not in classes: {unknown!r}.")
        weights = self._row_weights(X, y, sample_weight)
        return self._fit(X, y, classes, hidden, continuing=not first, append=True,
                         weights=weights)

    def _check_continuation(self, classes, hidden, where="warm_start"):
        if not np.array_equal(classes, self.classes_):
            raise ValueError(
                f"{where} can only be used where `y` has the same classes as in the "
                f"previous call to fit. Previously got {self.classes_!r}, `y` has "
                f"{classes!r}."
            )
        n_out = 1 if len(classes) == 2 else len(classes)
        sizes = (self.n_features_in_, *hidden, n_out)
        if sizes != tuple(self.layer_sizes_) or len(self._chain_states) != self.n_chains:
            raise ValueError(
                f"{where} needs the same architecture and n_chains as the previous fit: "
                f"layer sizes {tuple(self.layer_sizes_)} and {len(self._chain_states)} "
                f"chains before, now {sizes} and {self.n_chains}."
            )

    def _fit(self, X, y, classes, hidden, *, continuing, append, weights=None):
        backend = _import_torch_backend()
        import torch

        if len(classes) < 2:
            raise ValueError(
                "This solver needs samples of at least 2 classes in the data, but "
                f"the data contains only one class: {classes[0]!r}."
            )
        device = self._resolve_device(torch)
        dtype = backend.torch_dtype(self.dtype)
        n_rows = X.shape[0]
        binary = len(classes) == 2
        n_out = 1 if binary else len(classes)
        net = backend.MLPNet((X.shape[1], *hidden, n_out), self.activation, binary)

        batch_size = min(200, n_rows) if self.batch_size == "auto" else self.batch_size
        batch_size = min(int(batch_size), n_rows)
        # the amount of data in the potential: rows, or their total weight
        n_data = n_rows if weights is None else float(np.sum(weights))
        params = self._sampler_params(batch_size, n_data)
        params["prior_layers"] = self._prior_layers(net.layer_sizes)

        y_idx = np.searchsorted(classes, y)
        X = np.asarray(X)
        if (device == "cpu" and X.dtype == np.dtype(self.dtype)
                and X.flags.c_contiguous and X.flags.writeable):
            Xt = torch.from_numpy(X)  # no copy; the chains never write to it
        else:
            Xt = torch.tensor(X, dtype=dtype, device=device)
        if binary:
            yt = torch.tensor(y_idx, dtype=dtype, device=device)
        else:
            yt = torch.tensor(y_idx, dtype=torch.int64, device=device)
        wt = None if weights is None else torch.tensor(weights, dtype=dtype, device=device)

        if continuing:
            states = self._chain_states
            seeds = [0] * len(states)
            n_warmup = 0
        else:
            states = [None] * int(self.n_chains)
            seeds = self._chain_seeds()
            n_warmup = _auto_length(self.n_warmup, MIN_WARMUP_STEPS, n_rows, batch_size)
        n_keep = int(self.n_samples)
        thin = _auto_length(self.thin, MIN_THIN, n_rows, batch_size * n_keep)
        self.n_warmup_, self.thin_ = n_warmup, thin
        n_steps, step_factors, keep = schedule_plan(
            self.schedule, n_warmup=n_warmup, n_samples=n_keep, thin=thin,
            n_cycles=self.n_cycles, exploration_fraction=self.exploration_fraction,
            power_t=self.power_t)

        draws = np.empty((len(states), n_keep, net.n_params), dtype=np.float32)
        new_states, modes = [], []
        accepted = proposals = n_grad_evals = 0
        # one progress line for the chains (run one after the other) and a
        # final one with ESS and R-hat, as the linear estimators
        progress = FitProgress(len(states), self.verbose) if self.verbose else None
        if progress is not None:
            progress.expect("warm-up and sampling" if n_warmup else "sampling", n_steps,
                            exact=True)
        # an interrupted fit changes nothing (a warm start continues as before)
        with torch.no_grad(), progress_guard(progress), \
                interrupt_note(type(self).__name__, continuing):
            for c, (saved, seed) in enumerate(zip(states, seeds)):
                gen = torch.Generator(device=device)
                gen.manual_seed(seed)
                runner = backend.ChainRunner(net, Xt, yt, params, gen, weights=wt)
                if saved is None:
                    runner.init_state()
                else:
                    runner.load_state(saved)
                if self.subsampling == "cv":
                    modes.append(runner.state["anchor"].float().cpu().numpy())
                out = torch.empty((n_keep, net.n_params), dtype=dtype)
                runner.run(n_steps, n_warmup=n_warmup, thin=thin, samples=out,
                           step_factors=step_factors, keep=keep,
                           progress=progress)
                draws[c] = out.float().numpy()
                new_states.append(runner.dump_state())
                n_grad_evals += runner.n_grad_evals
                accepted += new_states[-1]["ewsg_accept"]
                proposals += new_states[-1]["ewsg_proposals"]

        if append and continuing:
            self.coef_samples_ = np.concatenate([self.coef_samples_, draws], axis=1)
        else:
            self.coef_samples_ = draws
        if not (append and continuing):
            # the rows of the convergence trace; partial_fit keeps its first ones
            m = min(n_rows, DIAGNOSTIC_ROWS)
            rows = (np.arange(m) * n_rows) // m
            self._diagnostic_rows = (np.array(X[rows]), y_idx[rows])
        self._chain_states = new_states
        self.classes_ = classes
        self.layer_sizes_ = net.layer_sizes
        self.n_layers_ = len(net.layer_sizes)
        self.n_outputs_ = n_out
        self.out_activation_ = "logistic" if binary else "softmax"
        self.n_params_ = net.n_params
        if not continuing:
            self.n_grad_evals_ = self.n_steps_ = 0
        self.n_grad_evals_ += n_grad_evals
        self.n_steps_ += n_steps
        self.ewsg_acceptance_rate_ = (
            accepted / proposals if self.subsampling == "ewsg" and proposals else None
        )
        if self.subsampling == "cv":
            self.map_coef_ = np.stack(modes)
        elif not continuing:
            self.map_coef_ = None
        self.device_ = device
        self.step_size_ = params["step_size"]
        self.batch_size_ = int(batch_size)
        self.friction_ = (params["friction"]
                          if "friction" in DYNAMICS[self.sampler].hyperparameters else None)
        if progress is not None:
            from ..diagnostics._convergence import bulk_ess_and_rhat
            ess, rhat = bulk_ess_and_rhat(self._convergence_draws()[0])
            progress.finish(ess, rhat, note="on the log-likelihood and weight norms")
        return self

    # ------------------------------------------------------------------
    # prediction
    # ------------------------------------------------------------------
    def predict_log_proba(self, X):
        """Log of the Bayesian-model-average class probabilities.

        ``log((1/D) sum_d p(y | x, theta_d))`` over the ``D`` draws in
        ``coef_samples_`` (all chains), computed stably with log-sum-exp.

        Parameters
        ----------
        X : array-like of shape (n_rows, n_features)
            Input data.

        Returns
        -------
        ndarray of shape (n_rows, n_classes)
            Log-probabilities, columns in the order of ``classes_``.
        """
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        backend = _import_torch_backend()
        import torch

        net = backend.MLPNet(self.layer_sizes_, self.activation, self.n_outputs_ == 1)
        draws = np.ascontiguousarray(self.coef_samples_.reshape(-1, self.n_params_))
        return backend.bma_log_proba(
            net, draws, X, device=self._resolve_device(torch),
            dtype=backend.torch_dtype(self.dtype),
            max_draws=self.max_draws_in_memory,
        )

    def _draw_log_likelihood(self, X, y):
        """``sum_i log p(y_i | x_i, theta)`` of the rows ``(X, y)`` under each
        draw, shape ``(n_chains, n_kept)``: a scalar trace that, unlike the
        weights, has no permutation symmetry (the command line's convergence
        check). The labels must be in ``classes_``."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
        y = np.asarray(y)
        if not np.all(np.isin(y, self.classes_)):
            raise ValueError("y contains labels not in classes_.")
        return self._rows_log_likelihood(X, np.searchsorted(self.classes_, y))

    def _rows_log_likelihood(self, X, y_idx):
        """:meth:`_draw_log_likelihood` of validated rows and class indices."""
        backend = _import_torch_backend()
        import torch

        net = backend.MLPNet(self.layer_sizes_, self.activation, self.n_outputs_ == 1)
        draws = np.ascontiguousarray(self.coef_samples_.reshape(-1, self.n_params_))
        ll = backend.draws_log_likelihood(
            net, draws, X, y_idx, device=self._resolve_device(torch),
            dtype=backend.torch_dtype(self.dtype), max_draws=self.max_draws_in_memory)
        return ll.reshape(self.coef_samples_.shape[:2])

    def _pointwise_log_proba(self, X):
        """Yield ``(draws slice, rows slice, log_proba)`` with ``log_proba``
        of shape (draws, rows, n_classes), float64: every draw's class
        log-probabilities, in the memory-bounded blocks of the prediction."""
        backend = _import_torch_backend()
        import torch

        net = backend.MLPNet(self.layer_sizes_, self.activation, self.n_outputs_ == 1)
        draws = np.ascontiguousarray(self.coef_samples_.reshape(-1, self.n_params_))
        device, dtype = self._resolve_device(torch), backend.torch_dtype(self.dtype)
        d_block, rows = backend._prediction_blocks(net, draws.shape[0],
                                                   self.max_draws_in_memory)
        with torch.no_grad():
            for r0 in range(0, X.shape[0], rows):
                Xt = torch.as_tensor(X[r0:r0 + rows]).to(device=device, dtype=dtype)
                for d0 in range(0, draws.shape[0], d_block):
                    chunk = torch.as_tensor(draws[d0:d0 + d_block]).to(device=device,
                                                                       dtype=dtype)
                    lp = net.draws_log_proba(chunk, Xt).double().cpu().numpy()
                    yield (slice(d0, d0 + lp.shape[0]), slice(r0, r0 + lp.shape[1]), lp)

    # ------------------------------------------------------------------
    # diagnostics
    # ------------------------------------------------------------------
    def _convergence_draws(self):
        """Permutation-invariant quantities per draw, shape (n_chains,
        n_kept, n_layers_): the log-likelihood of the fixed diagnostic rows
        (up to ``DIAGNOSTIC_ROWS`` training rows), then the Frobenius norm of
        each layer's weight matrix; and their labels.

        The weights themselves are identified only up to permutations (and,
        for odd activations, sign flips) of the hidden units, so chains in
        different but equivalent modes disagree on them while predicting
        alike; these quantities are the same in every such mode, so R-hat
        and ESS on them are meaningful. Cached until the draws change.
        """
        check_is_fitted(self)
        cache = getattr(self, "_convergence_cache", None)
        if cache is not None and cache[0] is self.coef_samples_:
            return cache[1], cache[2]
        X, y_idx = self._diagnostic_rows
        coef = self.coef_samples_
        quantities = [self._rows_log_likelihood(X, y_idx)]
        labels = ["log_likelihood"]
        pos = 0
        for layer, (fi, fo) in enumerate(zip(self.layer_sizes_[:-1], self.layer_sizes_[1:])):
            W = coef[:, :, pos:pos + fi * fo].astype(np.float64)
            quantities.append(np.sqrt(np.einsum("cdk,cdk->cd", W, W)))
            labels.append(f"weight_norm[{layer + 1}]")
            pos += fi * fo + fo
        draws = np.stack(quantities, axis=-1)
        self._convergence_cache = (self.coef_samples_, draws, labels)
        return draws, labels

    def _warn_if_unreliable(self):
        """The linear estimators' convergence warning, on the quantities of
        :meth:`_convergence_draws` (one writer of the advice)."""
        from ..diagnostics._advice import assess, convergence_messages
        from ..diagnostics._convergence import MCMCConvergenceWarning

        messages = convergence_messages(self, assess(self))
        if messages:
            warnings.warn(" ".join(messages), MCMCConvergenceWarning, stacklevel=3)

    def _mixing_hint(self):
        hints = []
        if self.sampler == "sgld":
            hints.append("sampler='sghmc' often explores faster at the same cost per step.")
        if self.coef_samples_.shape[0] == 1:
            hints.append("More chains (n_chains=4) give R-hat independent runs to compare.")
        return " ".join(hints)

    def summary(self, quantiles=(0.05, 0.5, 0.95), names=None):
        """Posterior summary of the network's permutation-invariant quantities.

        One row per quantity: ``log_likelihood``, the log-likelihood of up
        to ``DIAGNOSTIC_ROWS`` training rows (evenly spaced, fixed at
        ``fit``) under each draw, and ``weight_norm[l]``, the Frobenius norm
        of layer ``l``'s weight matrix. A table of the weights themselves
        would mislead: they are identified only up to permutations of the
        hidden units, so their R-hat is large whenever chains settle in
        equivalent modes. See :func:`skbayes_sg.diagnostics.summary`.

        Parameters
        ----------
        quantiles : sequence of float in [0, 1], default=(0.05, 0.5, 0.95)
            Posterior quantiles to report.
        names : sequence of str or None, default=None
            Row labels in place of the default ones (``n_layers_`` of them).

        Returns
        -------
        table : pandas.DataFrame or SummaryTable
            Columns ``mean``, ``sd``, the quantiles, ``ess_bulk``,
            ``ess_tail`` and ``r_hat``.
        """
        from ..diagnostics import summary
        return summary(self, quantiles=quantiles, names=names)

    def check_convergence(self, *, rhat_threshold=1.01, min_ess_per_chain=None):
        """Warn when the chains have not converged (R-hat) or mixed (ESS).

        The check of the warning at the end of :meth:`fit`, on the quantities
        of :meth:`summary`. See
        :func:`skbayes_sg.diagnostics.check_convergence`.

        Parameters
        ----------
        rhat_threshold : float, default=1.01
            Largest acceptable rank-normalised split R-hat.
        min_ess_per_chain : float or None, default=None
            Smallest acceptable bulk and tail ESS per chain (None: 100).

        Returns
        -------
        converged : bool
            True when every quantity passes both checks; otherwise an
            ``MCMCConvergenceWarning`` names what to change.
        """
        from ..diagnostics import check_convergence
        return check_convergence(self, rhat_threshold=rhat_threshold,
                                 min_ess_per_chain=min_ess_per_chain)

    def to_inference_data(self, X=None, y=None, *, posterior_predictive=None,
                          random_state=None):
        """The draws as an ``arviz.InferenceData`` (needs the ``arviz`` extra).

        Parameters
        ----------
        X, y : array-like or None, default=None
            Observations: with them the export holds ``log_likelihood`` (``y``,
            dims ``(chain, draw, obs)``, for ``az.loo`` and ``az.compare``),
            ``observed_data`` and the log posterior ``lp`` in
            ``sample_stats``.
        posterior_predictive : bool or None, default=None
            Draw a class at every row of ``X`` once per posterior draw
            (``posterior_predictive`` group, dims ``(chain, draw, obs)``;
            needs ``X``). None: True when ``X`` comes without ``y``.
        random_state : int, RandomState instance or None, default=None
            Seeds the posterior predictive draws.

        Returns
        -------
        idata : arviz.InferenceData (ArviZ 0.x) or xarray.DataTree (ArviZ 1.x)
            ``posterior`` holds, per layer ``l``, the weights ``W{l}`` (dims
            ``(chain, draw, layer{l}_in, layer{l}_out)``) and biases ``b{l}``
            (``(chain, draw, layer{l}_out)``), and the permutation-invariant
            quantities of :meth:`summary`: ``log_likelihood_rows`` and
            ``weight_norm`` (dims ``(chain, draw, layer)``). Check
            convergence on the latter (``az.summary(idata, var_names=
            ["log_likelihood_rows", "weight_norm"])``): the weights' R-hat
            is inflated by the hidden units' permutation symmetry.
        """
        from ..diagnostics._arviz import _arviz_major, _import_arviz, _predictive_request
        from .._version import __version__

        az = _import_arviz()
        check_is_fitted(self)
        posterior_predictive = _predictive_request(X, y, posterior_predictive)
        chains, n_draws = self.coef_samples_.shape[:2]
        posterior, dims, coords = {}, {}, {}
        pos = 0
        for layer, (fi, fo) in enumerate(zip(self.layer_sizes_[:-1], self.layer_sizes_[1:]),
                                         start=1):
            posterior[f"W{layer}"] = self.coef_samples_[:, :, pos:pos + fi * fo].reshape(
                chains, n_draws, fi, fo)
            posterior[f"b{layer}"] = self.coef_samples_[:, :, pos + fi * fo:pos + fi * fo + fo]
            dims[f"W{layer}"] = [f"layer{layer}_in", f"layer{layer}_out"]
            dims[f"b{layer}"] = [f"layer{layer}_out"]
            pos += fi * fo + fo
        names = getattr(self, "feature_names_in_", None)
        if names is not None:
            coords["layer1_in"] = [str(v) for v in names]
        invariant, _ = self._convergence_draws()
        posterior["log_likelihood_rows"] = invariant[:, :, 0]
        posterior["weight_norm"] = invariant[:, :, 1:]
        dims["weight_norm"] = ["layer"]
        coords["layer"] = np.arange(1, self.n_layers_)
        attrs = {"inference_library": "skbayes_sg", "inference_library_version": __version__,
                 "estimator": type(self).__name__, "sampler": self.sampler,
                 "subsampling": self.subsampling, "step_size": self.step_size_,
                 "n_grad_evals": self.n_grad_evals_,
                 "diagnostic_rows": int(self._diagnostic_rows[0].shape[0])}
        sample_stats = {"diverging": np.zeros((chains, n_draws), dtype=bool),
                        "step_size": np.full((chains, n_draws), float(self.step_size_))}
        groups = {}
        if X is not None:
            X = validate_data(self, X, reset=False, dtype=[np.float64, np.float32])
            if y is not None:
                y = np.asarray(y).ravel()
                if not np.all(np.isin(y, self.classes_)):
                    raise ValueError("y contains labels not in classes_.")
                y_idx = np.searchsorted(self.classes_, y)
                loglik = np.empty((chains * n_draws, X.shape[0]))
            pred = np.empty((chains * n_draws, X.shape[0]), dtype=np.int64) \
                if posterior_predictive else None
            rng = check_random_state(random_state)
            for d, r, lp in self._pointwise_log_proba(X):
                if y is not None:
                    loglik[d, r] = np.take_along_axis(
                        lp, np.broadcast_to(y_idx[r][None, :, None], lp.shape[:2] + (1,)),
                        axis=2)[..., 0]
                if pred is not None:   # inverse-CDF draw of one class per draw and row
                    cdf = np.cumsum(np.exp(lp), axis=2)
                    u = rng.uniform(size=lp.shape[:2] + (1,)) * cdf[..., -1:]
                    pred[d, r] = np.minimum((cdf < u).sum(axis=2), lp.shape[2] - 1)
            dims["y"] = ["obs"]
            coords["obs"] = np.arange(X.shape[0])
            if y is not None:
                loglik = loglik.reshape(chains, n_draws, -1)
                groups["log_likelihood"] = {"y": loglik}
                groups["observed_data"] = {"y": y}
                theta = self.coef_samples_.astype(np.float64)
                sample_stats["lp"] = loglik.sum(axis=2) + self._log_prior(theta)
            if pred is not None:
                groups["posterior_predictive"] = {
                    "y": self.classes_[pred].reshape(chains, n_draws, -1)}
        if _arviz_major(az) >= 1:   # ArviZ 1.x (arviz-base): a DataTree
            return az.from_dict({"posterior": posterior, "sample_stats": sample_stats,
                                 **groups}, coords=coords, dims=dims,
                                attrs={"posterior": attrs})
        return az.from_dict(posterior=posterior, sample_stats=sample_stats, coords=coords,
                            dims=dims, posterior_attrs=attrs, **groups)

    def predict_proba(self, X):
        """Bayesian-model-average class probabilities.

        The mean over all draws of ``softmax(f_theta(X))`` (logistic for two
        classes), evaluated in blocks of rows and draws.

        Parameters
        ----------
        X : array-like of shape (n_rows, n_features)
            Input data.

        Returns
        -------
        ndarray of shape (n_rows, n_classes)
            Probabilities, columns in the order of ``classes_``; rows sum
            to one.
        """
        return np.exp(self.predict_log_proba(X))

    def predict(self, X):
        """Most probable class under the Bayesian model average.

        Parameters
        ----------
        X : array-like of shape (n_rows, n_features)
            Input data.

        Returns
        -------
        ndarray of shape (n_rows,)
            Predicted labels from ``classes_``.
        """
        log_proba = self.predict_log_proba(X)
        return self.classes_[np.argmax(log_proba, axis=1)]

    def unpack_params(self, theta):
        """Split a flat parameter vector into per-layer weights and biases.

        Parameters
        ----------
        theta : array-like of shape (n_params_,)
            For example ``coef_samples_[chain, draw]``.

        Returns
        -------
        coefs : list of ndarray
            Weight matrices, ``coefs[l]`` of shape
            ``(layer_sizes_[l], layer_sizes_[l + 1])`` (as
            ``MLPClassifier.coefs_``).
        intercepts : list of ndarray
            Biases, ``intercepts[l]`` of shape ``(layer_sizes_[l + 1],)``.
        """
        check_is_fitted(self)
        theta = np.asarray(theta)
        if theta.shape != (self.n_params_,):
            raise ValueError(
                f"theta must have shape ({self.n_params_},), got {theta.shape}."
            )
        coefs, intercepts, pos = [], [], 0
        for fi, fo in zip(self.layer_sizes_[:-1], self.layer_sizes_[1:]):
            coefs.append(theta[pos:pos + fi * fo].reshape(fi, fo))
            pos += fi * fo
            intercepts.append(theta[pos:pos + fo])
            pos += fo
        return coefs, intercepts

    def __sklearn_tags__(self):
        """Estimator tags: dense input only, no missing values, multiclass."""
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        tags.input_tags.allow_nan = False
        tags.classifier_tags.multi_class = True
        tags.classifier_tags.multi_label = False
        return tags


def _from_specs(doc):
    """Fill the ``{sampler_doc}``-style placeholders of the class docstring
    with the entries written from the specs (``str.format`` would trip on
    the docstring's own braces)."""
    for key, text in (("{sampler_doc}", sampler_doc(NETWORK, "sgld")),
                      ("{friction_doc}", hyperparameter_doc(NETWORK, ["friction"])),
                      ("{inv_mass_doc}", hyperparameter_doc(NETWORK, ["inv_mass"])),
                      ("{n_leapfrog_doc}", hyperparameter_doc(NETWORK, ["n_leapfrog"]))):
        doc = doc.replace(key, text)
    return doc


SGMCMCMLPClassifier.__doc__ = _from_specs(SGMCMCMLPClassifier.__doc__)
