"""The types every algorithm's definition is made of, and the shared
hyperparameters of the samplers.

A :class:`DynamicsSpec` (the ``sampler=`` axis) and an :class:`EstimatorSpec`
(the ``subsampling=`` axis) say what an algorithm *is*.  Each dynamics'
definition lives in its own file (``samplers/<name>.py``); the registries
that read them are in :mod:`._specs`.

Pure Python: importing it needs neither the Cython extensions nor torch.
"""
from dataclasses import dataclass
from numbers import Integral, Real

from sklearn.utils._param_validation import Interval, StrOptions

#: the two engines: the Cython engine of the linear models, the torch-backed network
LINEAR, NETWORK = "linear", "network"
BOTH = frozenset({LINEAR, NETWORK})


@dataclass(frozen=True)
class Hyperparameter:
    """A hyperparameter owned by one or more algorithms.

    Attributes
    ----------
    name : str
        The estimator parameter.
    default : object
        Its default; a value away from it must act on the fit (or be refused).
    constraints : tuple
        scikit-learn parameter-validation constraints.
    doc : str
        numpydoc body (the type line is ``type_doc``).
    type_doc : str
    """

    name: str
    default: object
    constraints: tuple
    doc: str
    type_doc: str = "float or \"auto\""


HYPERPARAMETERS = {
    "friction": Hyperparameter(
        "friction", "auto",
        (Interval(Real, 0, None, closed="neither"), StrOptions({"auto"})),
        "Friction gamma of the underdamped dynamics (``\"sghmc\"``, ``\"uld\"``, "
        "``\"baoab\"``) and the diffusion A of ``\"sgnht\"`` (its thermostat "
        "starts there)."),
    "inv_mass": Hyperparameter(
        "inv_mass", 1.0, (Interval(Real, 0, None, closed="neither"),),
        "Inverse mass u of ``\"uld\"`` (its velocity has variance u T).",
        type_doc="float"),
    "n_leapfrog": Hyperparameter(
        "n_leapfrog", "auto",
        (Interval(Integral, 1, None, closed="left"), StrOptions({"auto"})),
        "Leapfrog steps per trajectory of ``\"sghmc-leapfrog\"``. ``\"auto\"``: a "
        "jittered quarter period of the reference Gaussian in a whitened metric, "
        "10 otherwise.", type_doc="int or \"auto\""),
}


@dataclass(frozen=True)
class DynamicsSpec:
    """One ``sampler=`` value.

    Attributes
    ----------
    name : str
    doc : str
        One sentence for the numpydoc of ``sampler`` and the CLI.
    hyperparameters : tuple of str
        Keys of :data:`HYPERPARAMETERS` it owns (besides ``step_size``).
    has_momentum : bool
        It carries a momentum / velocity (stationary law N(0, T I) at start).
    momentum_key : str
        The key of that momentum in its kernel's saved state: the chains'
        momenta are redrawn from their stationary law under this key after a
        metric change (``tests/test_runner.py`` checks every momentum
        dynamics' state has it).
    metropolis : bool
        Its proposal is reversible: Metropolis-adjustable with exact gradients.
    whitened : bool
        It runs in the Laplace metric of the linear engine (pSGLD has its own
        preconditioner).
    engines : frozenset
        Engines with a kernel for it.
    network_learning_rate : float
        ``step_size="auto"`` of the network estimator: the learning rate of the
        equivalent optimiser on the mean loss (``h = lr / n``; ``h = sqrt(lr / n)``
        for a ``second_order`` dynamics, whose ``h**2 n`` it is).
    second_order : bool
        ``theta`` moves through a momentum within a step, by ``~h**2 g`` (every
        momentum dynamics, and SG-HMC leapfrog, which redraws its momentum
        every step and so has no persistent one).
    lazy : bool
        The linear engine has an O(nnz) lazy kernel for it on sparse rows
        (:mod:`._lazy`, which checks the built objects: ``tests/test_lazy.py``
        checks that the two agree).
    network_metropolis : bool
        The network engine Metropolis-adjusts it (with exact gradients).
    """

    name: str
    doc: str
    hyperparameters: tuple = ()
    has_momentum: bool = False
    momentum_key: str = "momentum"
    metropolis: bool = False
    whitened: bool = True
    engines: frozenset = BOTH
    network_learning_rate: float = 0.2
    second_order: bool = False
    lazy: bool = False
    network_metropolis: bool = False

    def __post_init__(self):
        if self.has_momentum:   # a persistent momentum moves theta by ~h^2 g
            object.__setattr__(self, "second_order", True)
        if self.lazy and LINEAR not in self.engines:
            raise ValueError(f"{self.name}: a lazy kernel is the linear engine's")
        if self.network_metropolis and not (self.metropolis and NETWORK in self.engines):
            raise ValueError(f"{self.name}: network_metropolis needs metropolis and the "
                             "network engine")


@dataclass(frozen=True)
class EstimatorSpec:
    """One ``subsampling=`` value.

    Attributes
    ----------
    name : str
    hyperparameters : tuple of str
        Estimator parameters it owns (the others are refused when set).
    engines : frozenset
    stochastic : bool
        False for the exact gradient.
    index_chain : bool
        Chosen among candidates by EWSG's index chain.
    access : bool
        Accepts ``access=`` (the others draw from their own weights).
    control : str or None
        What each row's term subtracts ("fixed": its value at the mode,
        "taylor": its second-order expansion at the mode,
        "snapshot": at a point about one draw old, "none": nothing; None: no
        noise at all).
    weighting : str or None
        How rows are drawn (None uniform, "ps" / "cvps" preferential weights).
    network_refusal : str or None
        Why the network estimator does not offer it (its error message names
        this reason); None for the estimators the network carries.
    lazy : bool
        The linear engine's lazy O(nnz) kernel (:mod:`._lazy`) draws its
        minibatches (a fixed batch size, a fixed control variate or none,
        with replacement).
    """

    name: str
    hyperparameters: tuple = ()
    engines: frozenset = frozenset({LINEAR})
    stochastic: bool = True
    index_chain: bool = False
    access: bool = True
    control: object = "none"
    weighting: object = None
    network_refusal: object = None
    lazy: bool = False
