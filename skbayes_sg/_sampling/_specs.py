"""One definition per algorithm: the specs every engine, the docs and the CLI read.

A :class:`DynamicsSpec` (the ``sampler=`` axis) and an :class:`EstimatorSpec`
(the ``subsampling=`` axis) say what an algorithm *is*: its name, the
hyperparameters it owns (with their constraints and documentation), its
properties (momentum, Metropolis-adjustable, whitened), and which engines
carry a kernel for it.  The kernels stay where speed needs them -- the
linear engine's Cython classes (built by :mod:`._registry`) and the network
estimator's torch / C kernels -- and look their definition up here; so do
the estimators' ``_parameter_constraints``, the "a parameter that does not
act is refused" rule, the numpydoc of ``sampler`` and the CLI.

Pure Python: importing it needs neither the Cython extensions nor torch.
"""
import textwrap
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
    """

    name: str
    doc: str
    hyperparameters: tuple = ()
    has_momentum: bool = False
    metropolis: bool = False
    whitened: bool = True
    engines: frozenset = BOTH
    network_learning_rate: float = 0.2
    second_order: bool = False

    def __post_init__(self):
        if self.has_momentum:   # a persistent momentum moves theta by ~h^2 g
            object.__setattr__(self, "second_order", True)


DYNAMICS = {
    "sgld": DynamicsSpec(
        "sgld", "stochastic gradient Langevin dynamics (an exponential integrator in a "
        "whitened metric, MALA with exact gradients)", metropolis=True),
    "psgld": DynamicsSpec(
        "psgld", "its RMSprop-preconditioned variant (its own metric, the Gamma "
        "correction dropped)", whitened=False, network_learning_rate=1e-3),
    "sghmc": DynamicsSpec(
        "sghmc", "SG Hamiltonian Monte Carlo as underdamped Langevin integrated by "
        "Euler-Maruyama (``friction``)", ("friction",), has_momentum=True,
        network_learning_rate=0.01),
    "sghmc-leapfrog": DynamicsSpec(
        "sghmc-leapfrog", "SG-HMC with leapfrog (momentum redrawn every step, "
        "``n_leapfrog`` steps; in a whitened metric the Gaussian part is rotated "
        "exactly)", ("n_leapfrog",), metropolis=True, network_learning_rate=0.01,
        second_order=True),
    "uld": DynamicsSpec(
        "uld", "SG underdamped Langevin with the exact Ornstein-Uhlenbeck step of "
        "Cheng et al. (``friction``, ``inv_mass``)", ("friction", "inv_mass"),
        has_momentum=True, network_learning_rate=0.01),
    "baoab": DynamicsSpec(
        "baoab", "underdamped Langevin by the BAOAB splitting of Leimkuhler and "
        "Matthews (second order, one gradient per step; ``friction``)", ("friction",),
        has_momentum=True, network_learning_rate=0.01),
    "sgnht": DynamicsSpec(
        "sgnht", "the stochastic gradient Nose-Hoover thermostat of Ding et al. (2014): "
        "underdamped Langevin whose friction is a thermostat variable that adapts "
        "until the kinetic temperature is T, absorbing unknown gradient noise "
        "(``friction`` is its diffusion A)", ("friction",), has_momentum=True,
        network_learning_rate=0.01),
}


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
        "snapshot": at a point about one draw old, "none": nothing; None: no
        noise at all).
    weighting : str or None
        How rows are drawn (None uniform, "ps" / "cvps" preferential weights).
    network_refusal : str or None
        Why the network estimator does not offer it (its error message names
        this reason); None for the estimators the network carries.
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


_EWSG = ("ewsg_chain_length", "ewsg_x")
_ADAPTIVE = ("pv_threshold", "pilot_steps")

#: the network's reasons for the linear-only estimators (each a clause)
_TABLE = ("it keeps a table of one gradient per datum; for a linear model that is n "
          "scalars, but a network's per-datum gradients do not factor, so the table "
          "needs n x n_params numbers")
_PER_DATUM = ("its weights p_i ~ ||grad U_i|| need per-datum gradient norms, i.e. n "
              "separate backward passes through the network")
_EWSG_CONTROL = ("the network's EWSG weights are those of plain per-datum gradients; it "
                 "has no EWSG with control variates (use 'ewsg', or 'cv' / 'svrg')")

ESTIMATORS = {
    "full": EstimatorSpec("full", stochastic=False, access=False, control=None,
                          network_refusal="the network has no exact-gradient "
                          "(Metropolis-adjusted) path; a minibatch gradient is its only "
                          "kind"),
    "uniform": EstimatorSpec("uniform", engines=BOTH),
    "ewsg": EstimatorSpec("ewsg", _EWSG, engines=BOTH, index_chain=True),
    "cv": EstimatorSpec("cv", engines=BOTH, control="fixed"),
    "preferential": EstimatorSpec("preferential", access=False, weighting="ps",
                                  network_refusal=_PER_DATUM),
    "cv-preferential": EstimatorSpec("cv-preferential", access=False, control="fixed",
                                     weighting="cvps", network_refusal=_PER_DATUM),
    "adaptive-cv": EstimatorSpec("adaptive-cv", _ADAPTIVE, control="fixed",
                                 network_refusal="its batch size follows a bound on the "
                                 "per-datum gradients' Lipschitz constants, which a "
                                 "network does not have"),
    "adaptive-cv-preferential": EstimatorSpec(
        "adaptive-cv-preferential", _ADAPTIVE, access=False, control="fixed",
        weighting="cvps", network_refusal=_PER_DATUM),
    "svrg": EstimatorSpec("svrg", ("snapshot_period",), engines=BOTH, control="snapshot"),
    "saga": EstimatorSpec("saga", control="snapshot", network_refusal=_TABLE),
    "tmu": EstimatorSpec("tmu", ("snapshot_period",), control="snapshot",
                         network_refusal=_TABLE),
    "ewsg-cv": EstimatorSpec("ewsg-cv", _EWSG, index_chain=True, control="fixed",
                             network_refusal=_EWSG_CONTROL),
    "ewsg-svrg": EstimatorSpec("ewsg-svrg", _EWSG + ("snapshot_period",), index_chain=True,
                               control="snapshot", network_refusal=_EWSG_CONTROL),
}


def dynamics_for(engine):
    """Names of the samplers ``engine`` carries, in the registry's order."""
    return [name for name, spec in DYNAMICS.items() if engine in spec.engines]


def estimators_for(engine):
    """Names of the subsamplings ``engine`` carries, in the registry's order."""
    return [name for name, spec in ESTIMATORS.items() if engine in spec.engines]


def sampler_owners():
    """``{hyperparameter: (default, {samplers that own it})}``: a value away from
    the default with any other sampler does not act and is refused."""
    return {hp.name: (hp.default, {s for s, spec in DYNAMICS.items()
                                   if hp.name in spec.hyperparameters})
            for hp in HYPERPARAMETERS.values()}


def estimator_owners(defaults):
    """``{parameter: (default, {subsamplings that own it})}`` for every
    estimator hyperparameter among ``defaults`` (``{name: default}``: an
    engine's parameter defaults; the names no estimator owns are left out)."""
    owned = {name for spec in ESTIMATORS.values() for name in spec.hyperparameters}
    return {name: (default, {s for s, spec in ESTIMATORS.items()
                             if name in spec.hyperparameters})
            for name, default in defaults.items() if name in owned}


def ineffective_settings(owners, estimator, axis, choice):
    """The settings of ``estimator`` set away from their default that
    ``choice`` (the resolved ``sampler`` or ``subsampling`` name, ``axis``)
    does not own, as messages; none while ``choice`` is "auto".

    ``owners`` is :func:`sampler_owners` or :func:`estimator_owners` output.
    """
    if choice == "auto":
        return []
    return [f"{name}={getattr(estimator, name)!r} has no effect with {axis}={choice!r} "
            f"(it acts with {sorted(acting)})"
            for name, (default, acting) in owners.items()
            if getattr(estimator, name) != default and choice not in acting]


def hyperparameter_constraints():
    """``_parameter_constraints`` entries of the samplers' hyperparameters."""
    return {hp.name: list(hp.constraints) for hp in HYPERPARAMETERS.values()}


def _fill(text):
    # hyphenated names ("sghmc-leapfrog") are never split across lines
    return textwrap.fill(text, 78, initial_indent=" " * 8, subsequent_indent=" " * 8,
                         break_on_hyphens=False)


def sampler_doc(engine, default, auto=None):
    """The numpydoc entry of ``sampler`` for ``engine`` (indented by 4)."""
    names = dynamics_for(engine)
    options = ([] if auto is None else ["\"auto\""]) + [f"\"{n}\"" for n in names]
    head = f"sampler : {{{', '.join(options)}}}, default=\"{default}\""
    body = [] if auto is None else [auto]
    body += [f"``\"{n}\"``: {DYNAMICS[n].doc}." for n in names]
    body.append("Formulas in the user guide.")
    text = " ".join(body)
    return ("    " + head + "\n"
            + _fill(text))


def hyperparameter_doc(engine, names=None):
    """numpydoc entries of the sampler hyperparameters ``engine``'s samplers own."""
    owned = {hp for s in dynamics_for(engine) for hp in DYNAMICS[s].hyperparameters}
    out = []
    for name, hp in HYPERPARAMETERS.items():
        if name in owned and (names is None or name in names):
            default = f'"{hp.default}"' if isinstance(hp.default, str) else repr(hp.default)
            out.append(f"    {name} : {hp.type_doc}, default={default}\n" + _fill(hp.doc))
    return "\n".join(out)
