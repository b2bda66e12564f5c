"""Bayesian multi-layer perceptron classifier sampled with SG-MCMC (torch).

torch is imported lazily, inside :meth:`SGMCMCMLPClassifier.fit`,
:meth:`~SGMCMCMLPClassifier.partial_fit` and the prediction methods, so this
module imports without torch installed.
"""

from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.class_weight import compute_sample_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_sample_weight, validate_data

from .._base import BASE_CONSTRAINTS
from .._parameters import restored_on_interrupt
from ._backend import _import_torch_backend
from ._network_posterior import NetworkPosteriorMixin
from ._network_run import NetworkRunMixin
from ._network_settings import NetworkSettingsMixin
from ._network_temperature import NetworkTemperatureMixin, fitting_a_candidate
from ._network_validation import held_out_rows
from .._sampling._specs import (NETWORK, dynamics_for, estimators_for,
                                hyperparameter_constraints, hyperparameter_doc, sampler_doc)

__all__ = ["SGMCMCMLPClassifier"]

# training rows (evenly spaced, fixed at fit) whose log-likelihood per draw is
# a convergence trace: without the weights' permutation symmetry, and cheap
# next to the fit (a forward pass of every draw on these rows)
DIAGNOSTIC_ROWS = 1000


#: the network's parameters that the linear estimators have too but with
#: other values allowed, and why (every other shared parameter takes the
#: linear estimators' constraint itself, ``BASE_CONSTRAINTS``: one source)
NETWORK_OWN_CONSTRAINTS = {
    "sampler": "the dynamics with a network kernel (_specs), and no 'auto' to resolve",
    "subsampling": "the estimators with a network kernel (_specs), and no 'auto'",
    "n_samples": "no 'auto': the network's run has a fixed length, not an ESS-driven budget",
    "init": "the starts a network has: its Glorot initialisation or the Adam mode",
    "temperature": "also 'auto': the posterior or a cold model, chosen on held-out rows",
}

#: the network estimator's parameter constraints (scikit-learn's validation)
_CONSTRAINTS = {
    "hidden_layer_sizes": ["array-like", Interval(Integral, 1, None, closed="left")],
    "activation": [StrOptions({"identity", "logistic", "tanh", "relu"})],
    "sampler": [StrOptions(set(dynamics_for(NETWORK)))],
    "subsampling": [StrOptions(set(estimators_for(NETWORK)))],
    "step_size": BASE_CONSTRAINTS["step_size"],
    "batch_size": BASE_CONSTRAINTS["batch_size"],
    "metropolis": BASE_CONSTRAINTS["metropolis"],
    "n_samples": [Interval(Integral, 1, None, closed="left")],
    "n_warmup": BASE_CONSTRAINTS["n_warmup"],
    "thin": BASE_CONSTRAINTS["thin"],
    "n_chains": BASE_CONSTRAINTS["n_chains"],
    "alpha": BASE_CONSTRAINTS["alpha"],
    "prior": [StrOptions({"fan_in", "isotropic"})],
    "prior_scale": [Interval(Real, 0, None, closed="neither"), "array-like"],
    "prior_bias_scale": [Interval(Real, 0, None, closed="neither")],
    "hyperprior": [None, tuple, list],
    "schedule": [StrOptions({"constant", "cyclical", "polynomial"})],
    "n_cycles": [Interval(Integral, 1, None, closed="left")],
    "exploration_fraction": [Interval(Real, 0, 1, closed="left")],
    "power_t": [Interval(Real, 0, None, closed="left")],
    "temperature": [*BASE_CONSTRAINTS["temperature"], StrOptions({"auto"})],
    "class_weight": [StrOptions({"balanced"}), dict, None],
    "init": [StrOptions({"auto", "mode"})],
    "validation_fraction": [None, Interval(Real, 0, 1, closed="neither")],
    # friction, inv_mass, n_leapfrog
    **{name: BASE_CONSTRAINTS[name] for name in hyperparameter_constraints()},
    "ewsg_chain_length": BASE_CONSTRAINTS["ewsg_chain_length"],
    "snapshot_period": BASE_CONSTRAINTS["snapshot_period"],
    "map_epochs": [Interval(Integral, 0, None, closed="left")],
    "map_learning_rate": [Interval(Real, 0, None, closed="neither")],
    "max_draws_in_memory": [Interval(Integral, 1, None, closed="left")],
    "draws_memory_limit": BASE_CONSTRAINTS["draws_memory_limit"],
    "device": [str],
    "dtype": [StrOptions({"float32", "float64"})],
    "random_state": BASE_CONSTRAINTS["random_state"],
    "verbose": BASE_CONSTRAINTS["verbose"],
    "warm_start": BASE_CONSTRAINTS["warm_start"],
}


#: the estimator's docstring ({sampler_doc}-style places filled from the specs)
_DOC = """Bayesian multi-layer perceptron classifier sampled by SG-MCMC.

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

    metropolis : bool or "auto", default="auto"
        Accept or reject each proposal with the Metropolis-Hastings ratio, so
        that the draws are exact: MALA, the SGLD step from the exact gradient
        as its proposal (``sampler="sgld"`` only); needs exact gradients, i.e.
        a minibatch of every row (``batch_size >= n_rows``, uniform
        subsampling; ``"auto"`` batches do so up to 200 rows).
        ``"auto"``: on whenever the gradients are exact and the sampler is
        SGLD (``metropolis_``). With ``step_size="auto"`` and the constant
        schedule each chain then adapts its step during warm-up by dual
        averaging toward an acceptance rate of 0.6 (``acceptance_rate_``,
        ``step_size_``). Without it, on a 60-row problem the draws' training
        log-likelihood lay 0.12-0.25 posterior sds below an exact
        Hamiltonian Monte Carlo reference at the automatic step (see the
        user guide).

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
        Independent chains, each with its own seed and initialisation
        (their gradients computed together, in one batched pass, where they
        are those of uniform subsampling: doc/mlp.rst). The model average pools them: chains in
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
        Only with ``prior="fan_in"``. The scale is that of inputs of unit
        variance: standardise the features (``StandardScaler`` in a
        pipeline, as for ``MLPClassifier``). On digits scaled to [0, 1]
        (``X / 16``, as scikit-learn's examples do) the default fit's test
        log-loss is 0.086, against 0.069 with ``StandardScaler`` fitted on
        the training rows (seeds 0-2; ``MLPClassifier`` 0.066 on ``X /
        16``): inputs of sd ~0.27 make the first layer's prior narrow.

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

    temperature : float or "auto", default="auto"
        Posterior temperature ``T``; the target is ``exp(-U / T)``, and
        ``temperature=1.0`` is the posterior itself.
        ``"auto"``: the model is chosen from the data. Two candidates run on
        the rows not held out (``validation_fraction``, 0.2 when None): the
        posterior (``T = 1``) and a cold model (``T = 0.02`` under
        ``prior_scale`` doubled), every other setting as given, except that
        where ``init`` and ``n_warmup`` are left at "auto" each chain starts
        at its own mode (``init="mode"``, ``map_epochs=50`` at
        ``map_learning_rate=1e-2``) with 200 warm-up steps. The cold model is
        kept when its model average's log-loss on the held-out rows is lower
        by more than twice the standard error of the paired per-row
        difference, else the posterior (a tie goes to the exact Bayesian
        model); the chosen one's chains continue on every row, as with
        ``validation_fraction``, and the fit warns on its held-out check.
        Below 20 held-out rows (100 rows) the fit does not choose: it is
        then the ``temperature=1`` fit. Measured (doc/mlp.rst): digits
        chooses the cold model (test log-loss 0.065 against the posterior's
        0.123 and ``MLPClassifier``'s 0.067), a 5,000-row problem the
        posterior. The choice and the comparison are ``temperature_``,
        ``prior_scale_`` and ``temperature_selection_``; a ``warm_start``
        continuation keeps the choice.

    class_weight : dict, "balanced" or None, default=None
        Weights of the classes, as in
        :class:`sklearn.linear_model.LogisticRegression`: row ``i`` gets the
        weight ``class_weight[y_i]`` (classes not in the dict: 1), or with
        ``"balanced"`` ``n_rows / (n_classes * count(y_i))``
        (:func:`sklearn.utils.class_weight.compute_sample_weight`), times
        its ``sample_weight``. :meth:`partial_fit` computes ``"balanced"``
        on each call's rows (each call targets the posterior given them).

    init : {"auto", "mode"}, default="auto"
        Where each chain starts. ``"auto"``: Glorot-initialised weights
        (each chain its own draw). ``"mode"``: from there, the mode Adam
        finds (``map_epochs`` passes at ``map_learning_rate``, the search
        ``subsampling="cv"`` makes), so every chain starts in the basin of
        its own point estimate, as the members of a deep ensemble do, and
        the warm-up only has to equilibrate within it. The mode is that of
        ``exp(-U / temperature)`` at every temperature. A ``warm_start``
        continuation keeps its chains where they are.

    validation_fraction : float in (0, 1) or None, default=None
        Share of the rows on which :meth:`fit` checks its run (stratified by
        class, drawn from ``random_state``). The chains first run on the
        other rows; :func:`~skbayes_sg.diagnostics.model_average_error` of
        that run on the held-out rows is ``validation_error_``; then the
        chains continue on every row for the same span (``n_samples *
        thin`` steps, no new warm-up), and those draws are kept: the
        posterior of all the data, at the cost of a second span (the logic
        of early stopping on a validation split, then a refit on all rows).
        The fit's convergence warning reads the check in place of R-hat and
        ESS on :meth:`summary`'s quantities: it warns when the held-out
        log-loss's estimated finite-run bias or Monte Carlo se is above 0.01
        nats a row, and names the ``thin`` that gives a longer span; chains
        that sit in different basins, or weights that drift where the data
        do not constrain them, do not make it warn. On a few hundred
        held-out rows the check is noisy (``doc/mlp.rst``). None: no check
        run, the warning reads R-hat and ESS, except with
        ``temperature="auto"``, which holds out 0.2 (it chooses the model on
        those rows, then checks the chosen run there). :meth:`partial_fit`
        refuses it (it does not warn).

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
        ``subsampling="cv"`` and ``init="mode"``; 0 uses the initial
        parameters as the anchor (and start).

    map_learning_rate : float, default=1e-3
        Adam learning rate for that search (on the mean loss ``U / n_rows``).

    max_draws_in_memory : int, default=64
        Prediction moves at most this many draws to the device at once (and
        as many rows as keep one block of activations near 32 MB in float32),
        so memory stays bounded for any number of draws and rows.

    draws_memory_limit : float or "auto", default="auto"
        Budget of the stored draws (``coef_samples_``, float32), in GiB, as
        the linear estimators'. Draws that would outgrow it are thinned
        before the chains run: every ``k``-th is kept (``thin_`` times
        ``k``, ``n_samples_`` the draws kept per chain, at least 16), for a
        run of the same length, with a warning that says so. ``"auto"``: a
        quarter of the physical memory, at most 4 GiB.

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
        Step size used by the last fit (``step_size`` with "auto" resolved;
        steps adapted per chain by the Metropolis warm-up: their geometric
        mean).

    metropolis_ : bool
        Whether the last fit's steps were Metropolis-adjusted (``metropolis``
        with "auto" resolved).

    acceptance_rate_ : float
        Mean Metropolis acceptance probability over the last fit's steps
        after warm-up, all chains (only when ``metropolis_``).

    batch_size_ : int
        Minibatch size used by the last fit (``batch_size`` with "auto"
        resolved, clipped to the rows).

    n_warmup_, thin_ : int
        Warm-up steps and thinning of the last fit (``"auto"`` resolved,
        ``thin_`` including the thinning ``draws_memory_limit`` imposed; the
        warm-up of a continued chain is 0).

    n_samples_ : int
        Draws per chain the last fit stored (``n_samples``, fewer where
        ``draws_memory_limit`` thinned them).

    friction_ : float or None
        Friction (``"sgnht"``: diffusion A) used by the last fit, for the
        samplers that own ``friction`` (None for the others).

    temperature_ : float
        Temperature of the draws (``temperature``, or the one
        ``temperature="auto"`` chose).

    prior_scale_ : float or list of float
        ``prior_scale`` of the draws (doubled where ``temperature="auto"``
        chose the cold model).

    temperature_selection_ : dict or None
        Only with ``temperature="auto"`` (None where the rows were too few
        to choose): the candidates' ``temperature`` and
        ``prior_scale``, their model averages' ``held_out_log_loss``, the
        paired ``difference`` (cold minus posterior, nats a row) and its
        ``se``, ``n_rows`` held out and the index ``chosen``.
        ``n_grad_evals_`` counts both candidates' work.

    validation_error_ : ModelAverageError
        Only with ``validation_fraction`` or ``temperature="auto"``: the
        checked run's model-average log-loss on the held-out rows, its
        jackknife finite-run bias and Monte Carlo se
        (:func:`~skbayes_sg.diagnostics.model_average_error`; the draws
        kept are those of the continuation on every row).

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


class SGMCMCMLPClassifier(NetworkSettingsMixin, NetworkRunMixin, NetworkPosteriorMixin,
                          NetworkTemperatureMixin,
                          ClassifierMixin, BaseEstimator):

    _parameter_constraints: dict = _CONSTRAINTS

    def __init__(
        self,
        hidden_layer_sizes=(100,),
        activation="relu",
        *,
        sampler="sgld",
        subsampling="uniform",
        step_size="auto",
        batch_size="auto",
        metropolis="auto",
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
        temperature="auto",
        class_weight=None,
        init="auto",
        validation_fraction=None,
        friction="auto",
        inv_mass=1.0,
        n_leapfrog="auto",
        ewsg_chain_length=1,
        snapshot_period="auto",
        map_epochs=10,
        map_learning_rate=1e-3,
        max_draws_in_memory=64,
        draws_memory_limit="auto",
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
        self.metropolis = metropolis
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
        self.init = init
        self.validation_fraction = validation_fraction
        self.friction = friction
        self.inv_mass = inv_mass
        self.n_leapfrog = n_leapfrog
        self.ewsg_chain_length = ewsg_chain_length
        self.snapshot_period = snapshot_period
        self.map_epochs = map_epochs
        self.map_learning_rate = map_learning_rate
        self.max_draws_in_memory = max_draws_in_memory
        self.draws_memory_limit = draws_memory_limit
        self.device = device
        self.dtype = dtype
        self.random_state = random_state
        self.verbose = verbose
        self.warm_start = warm_start

    # ------------------------------------------------------------------
    # fitting
    # ------------------------------------------------------------------
    def fit(self, X, y, sample_weight=None):
        """Sample the posterior of the network weights.

        Runs ``n_chains`` chains of ``n_warmup + n_samples * thin`` steps
        (with ``warm_start=True`` and a previous fit: continues the chains for
        ``n_samples * thin`` steps, no warm-up) and stores the kept draws in
        ``coef_samples_``. With ``temperature="auto"`` (the default) it first
        chooses the model on held-out rows (two candidate runs, see the
        parameter); the draws are then those of the chosen model.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_rows, n_features)
            Training data (sparse rows are made dense a minibatch at a time).
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
            names the ``n_samples``, ``thin`` and ``n_warmup`` to use. With
            ``validation_fraction`` or ``temperature="auto"`` (the default,
            from 100 rows): when the checked run's model average has
            an estimated finite-run bias or Monte Carlo se above 0.01 nats a
            row on the held-out rows, naming the ``thin`` to use.
        """
        with restored_on_interrupt(self):     # Ctrl-C: the estimator as before
            return self._fit_validated(X, y, sample_weight)

    def _fit_validated(self, X, y, sample_weight):
        """:meth:`fit`, from its data's validation on."""
        hidden = self._check_params()
        X, y = validate_data(self, X, y, reset=True, accept_sparse="csr",
                             dtype=[np.float64, np.float32])
        check_classification_targets(y)
        weights = self._row_weights(X, y, sample_weight)
        classes = np.unique(y)
        continuing = self.warm_start and hasattr(self, "_chain_states")
        if continuing:
            self._check_continuation(classes, hidden)
        if self.temperature == "auto":
            return self._fit_auto(X, y, sample_weight, continuing)
        for name in ("validation_error_", "_validation_mask", "validation_fraction_",
                     "temperature_selection_", "_auto_settings"):
            self.__dict__.pop(name, None)
        held = held_out_rows(self, X, y)
        if held is None:
            self._fit(X, y, classes, hidden, continuing=continuing, append=False,
                      weights=weights)
        else:
            self._fit_checked(X, y, classes, hidden, held, continuing, weights)
        if not fitting_a_candidate():       # temperature="auto" warns once, for its choice
            self._warn_if_unreliable()
        return self

    def _fit_checked(self, X, y, classes, hidden, held, continuing, weights):
        """``validation_fraction``: the run on the rows not ``held``, its
        model average checked on the ``held`` ones (``validation_error_``),
        then the chains continued on every row for the same span, whose
        draws are kept."""
        kept = ~held
        self._fit(X[kept], y[kept], classes, hidden, continuing=continuing, append=False,
                  weights=None if weights is None else weights[kept])
        self._check_then_continue(X, y, held, self.validation_fraction, weights)

    def _check_then_continue(self, X, y, held, fraction, weights):
        """After a run on the rows not ``held``: its model average checked
        on the ``held`` ones (``validation_error_``), then the chains
        continued on every row for the same span, whose draws are kept
        (``n_warmup_`` stays the run's own; the continuation's is 0). Also
        the end of ``temperature="auto"``, for the model it chose."""
        from ..diagnostics import model_average_error
        # the rows are fit's validated array: read without validate_data,
        # which would warn that a DataFrame's column names are missing
        log_lik = self._validated_log_likelihood(X[held], y[held])
        error = model_average_error(log_lik.reshape(*self.coef_samples_.shape[:2], -1))
        n_warmup = self.n_warmup_
        self._fit(X, y, self.classes_, self._check_params(), continuing=True, append=False,
                  weights=weights)
        self.n_warmup_ = n_warmup
        self.validation_error_, self._validation_mask = error, held
        self.validation_fraction_ = fraction

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
        X : {array-like, sparse matrix} of shape (n_rows, n_features)
            Training data (sparse rows are made dense a minibatch at a time).
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
        with restored_on_interrupt(self, "partial_fit"):    # Ctrl-C: as before the call
            return self._partial_fit_validated(X, y, classes, sample_weight)

    def _partial_fit_validated(self, X, y, classes, sample_weight):
        """:meth:`partial_fit` from its checks on."""
        first = not hasattr(self, "_chain_states")
        hidden = self._check_params()
        if self.validation_fraction is not None:
            raise ValueError(
                "partial_fit runs each call's rows once and does not warn, so it has no run "
                "to check on held-out rows: set validation_fraction=None (fit checks a run "
                "with it).")
        X, y = validate_data(self, X, y, reset=first, accept_sparse="csr",
                             dtype=[np.float64, np.float32])
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
        params = self._sampler_params(batch_size, n_data, n_rows)
        params["prior_layers"] = self._prior_layers(net.layer_sizes)
        y_idx = np.searchsorted(classes, y)
        tensors = self._tensors(torch, X, y_idx, weights, binary, device, dtype)
        stored = self.coef_samples_.shape[1] if append and continuing else 0
        run = self._run_length(continuing, n_rows, batch_size, net.n_params, stored)
        draws, states, modes, counts, progress = self._run_chains(
            backend, torch, net, tensors, params, run, device, dtype)
        if append and continuing:
            self.coef_samples_ = np.concatenate([self.coef_samples_, draws], axis=1)
        else:
            self.coef_samples_ = draws
            # the rows of the convergence trace; partial_fit keeps its first ones
            m = min(n_rows, DIAGNOSTIC_ROWS)
            rows = (np.arange(m) * n_rows) // m
            self._diagnostic_rows = (X[rows], y_idx[rows])   # a copy (rows indexed)
        self._store_fit(net, classes, states, modes, counts, run, params, device, batch_size,
                        continuing)
        if progress is not None:
            from ..diagnostics._convergence import bulk_ess_and_rhat
            ess, rhat = bulk_ess_and_rhat(self.convergence_quantities()[0])
            progress.finish(ess, rhat, note="on the log-likelihood and weight norms")
        return self

    def __sklearn_tags__(self):
        """Estimator tags: dense or sparse (CSR) input, no missing values, multiclass."""
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
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


SGMCMCMLPClassifier.__doc__ = _from_specs(_DOC)
