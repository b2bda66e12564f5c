"""Bayesian multi-layer perceptron classifier sampled with SG-MCMC (torch).

torch is imported lazily, inside :meth:`SGMCMCMLPClassifier.fit`,
:meth:`~SGMCMCMLPClassifier.partial_fit` and the prediction methods, so this
module imports without torch installed.
"""

import importlib
import math
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.class_weight import compute_sample_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from .._sampling._specs import (
    DYNAMICS,
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

# Gradient estimators that the linear estimators offer but a network cannot
# afford, with the reason given to the user.
_UNSUPPORTED_SUBSAMPLING = {
    "saga": (
        "it keeps a table of one gradient per datum; for a linear model that is "
        "n scalars, but a network's per-datum gradients do not factor, so the "
        "table needs n x n_params numbers"
    ),
    "agld": "its gradient table needs n x n_params numbers for a network (see 'saga')",
    "tmu": "its gradient table needs n x n_params numbers for a network (see 'saga')",
    "ppu": "its gradient table needs n x n_params numbers for a network (see 'saga')",
    "preferential": (
        "its weights p_i ~ ||grad U_i|| need per-datum gradient norms, i.e. n "
        "separate backward passes through the network"
    ),
    "ps": "preferential weights need n per-datum backward passes (see 'preferential')",
    "cv-ps": "preferential weights need n per-datum backward passes (see 'preferential')",
    "cvps": "preferential weights need n per-datum backward passes (see 'preferential')",
}

# friction="auto": the momentum decay h * gamma per step of the underdamped
# dynamics (the momentum-SGD analogue of momentum 0.9; for SGNHT, h A).
# step_size="auto" is each spec's ``network_learning_rate``.
_AUTO_MOMENTUM_DECAY = 0.1


_TORCH_HINT = (
    "SGMCMCMLPClassifier needs PyTorch; install it with "
    "'pip install \"skbayes_sg[torch]\"'."
)


def _import_torch_backend():
    """Import torch and the private torch kernels, with a helpful error."""
    try:
        importlib.import_module("torch")
    except ImportError as exc:  # pragma: no cover - exercised without torch
        raise ImportError(_TORCH_HINT) from exc
    return importlib.import_module("._torch_sampler", __package__)


class SGMCMCMLPClassifier(ClassifierMixin, BaseEstimator):
    """Bayesian multi-layer perceptron classifier sampled by SG-MCMC.

    The weights and biases ``theta`` of a fully connected network get the
    prior ``N(0, alpha^-1 I)``; the likelihood is the softmax (for two
    classes: logistic) cross-entropy *summed* over the training rows, so the
    potential is ``U(theta) = alpha ||theta||^2 / 2 + sum_i w_i CE(y_i, f_theta(x_i))``
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
        diverge, which raises ``FloatingPointError``.

    batch_size : int or "auto", default="auto"
        Minibatch size ``b``; ``"auto"`` is ``min(200, n_rows)`` and a value
        larger than the data is clipped. Minibatches are consecutive blocks
        of a random permutation of the rows (a new permutation when fewer
        than ``b`` rows are left), so each is a uniformly random subset.

    n_samples : int, default=100
        Posterior draws kept per chain.

    n_warmup : int, default=1000
        Steps discarded at the start of each chain (one step = one
        minibatch update).

    thin : int, default=10
        Keep every ``thin``-th step after the warm-up. A chain runs
        ``n_warmup + n_samples * thin`` steps.

    n_chains : int, default=1
        Independent chains, run one after the other, each with its own
        seed and initialisation.

    alpha : float, default=1.0
        Prior precision: every weight and bias is ``N(0, 1 / alpha)``.

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

    snapshot_period : int or None, default=None
        Steps between SVRG snapshots; None means one data pass
        (``ceil(n_rows / b)`` steps).

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
        Print progress once per data pass: step, steps per second and the
        mean minibatch cross-entropy.

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
    >>> clf.coef_samples_.shape
    (1, 20, 131)
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
        "n_warmup": [Interval(Integral, 0, None, closed="left")],
        "thin": [Interval(Integral, 1, None, closed="left")],
        "n_chains": [Interval(Integral, 1, None, closed="left")],
        "alpha": [Interval(Real, 0, None, closed="left")],
        "temperature": [Interval(Real, 0, None, closed="neither")],
        "class_weight": [StrOptions({"balanced"}), dict, None],
        **hyperparameter_constraints(),  # friction, inv_mass, n_leapfrog
        "ewsg_chain_length": [Interval(Integral, 1, None, closed="left")],
        "snapshot_period": [None, Interval(Integral, 1, None, closed="left")],
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
        n_warmup=1000,
        thin=10,
        n_chains=1,
        alpha=1.0,
        temperature=1.0,
        class_weight=None,
        friction="auto",
        inv_mass=1.0,
        n_leapfrog="auto",
        ewsg_chain_length=1,
        snapshot_period=None,
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
        if isinstance(sub, str) and sub.lower() in _UNSUPPORTED_SUBSAMPLING:
            raise ValueError(
                f"subsampling={sub!r} is not available for SGMCMCMLPClassifier: "
                f"{_UNSUPPORTED_SUBSAMPLING[sub.lower()]}. "
                f"Use one of {', '.join(repr(n) for n in estimators_for(NETWORK))}."
            )
        self._validate_params()
        self._check_parameters_act()
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
            "alpha": float(self.alpha),
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
        FloatingPointError
            If a chain diverges (non-finite parameters); the message names
            ``step_size`` and a smaller value to try.
        """
        hidden = self._check_params()
        X, y = validate_data(self, X, y, reset=True, dtype=[np.float64, np.float32])
        check_classification_targets(y)
        weights = self._row_weights(X, y, sample_weight)
        classes = np.unique(y)
        continuing = self.warm_start and hasattr(self, "_chain_states")
        if continuing:
            self._check_continuation(classes, hidden)
        return self._fit(X, y, classes, hidden, continuing=continuing, append=False,
                         weights=weights)

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
            n_warmup = int(self.n_warmup)
            self.n_grad_evals_ = 0
            self.n_steps_ = 0
        n_keep, thin = int(self.n_samples), int(self.thin)
        n_steps = n_warmup + n_keep * thin

        draws = np.empty((len(states), n_keep, net.n_params), dtype=np.float32)
        new_states, modes = [], []
        accepted = proposals = 0
        with torch.no_grad():
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
                label = f"[chain {c + 1}/{len(states)}] " if self.verbose else ""
                runner.run(n_steps, n_warmup=n_warmup, thin=thin, samples=out,
                           chain_label=label)
                draws[c] = out.float().numpy()
                new_states.append(runner.dump_state())
                self.n_grad_evals_ += runner.n_grad_evals
                accepted += new_states[-1]["ewsg_accept"]
                proposals += new_states[-1]["ewsg_proposals"]

        if append and continuing:
            self.coef_samples_ = np.concatenate([self.coef_samples_, draws], axis=1)
        else:
            self.coef_samples_ = draws
        self._chain_states = new_states
        self.classes_ = classes
        self.layer_sizes_ = net.layer_sizes
        self.n_layers_ = len(net.layer_sizes)
        self.n_outputs_ = n_out
        self.out_activation_ = "logistic" if binary else "softmax"
        self.n_params_ = net.n_params
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
        y_idx = np.searchsorted(self.classes_, y)
        backend = _import_torch_backend()
        import torch

        net = backend.MLPNet(self.layer_sizes_, self.activation, self.n_outputs_ == 1)
        draws = np.ascontiguousarray(self.coef_samples_.reshape(-1, self.n_params_))
        ll = backend.draws_log_likelihood(
            net, draws, X, y_idx, device=self._resolve_device(torch),
            dtype=backend.torch_dtype(self.dtype), max_draws=self.max_draws_in_memory)
        return ll.reshape(self.coef_samples_.shape[:2])

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
