"""The registries every engine, the docs and the CLI read: one definition per algorithm.

A :class:`DynamicsSpec` (the ``sampler=`` axis) and an :class:`EstimatorSpec`
(the ``subsampling=`` axis) say what an algorithm *is*: its name, the
hyperparameters it owns (with their constraints and documentation), its
properties (momentum, Metropolis-adjustable, whitened), and which engines
carry a kernel for it.  Each dynamics is defined in its own file
(``samplers/<name>.py``, which also holds its automatic rules, its error
model and its kernel's builder); :data:`DYNAMICS` is read from them.  The
kernels stay where speed needs them -- the linear engine's Cython classes
and the network estimator's torch / C kernels -- and look their definition
up here; so do the estimators' ``_parameter_constraints``, the "a parameter
that does not act is refused" rule, the numpydoc of ``sampler`` and the CLI.

Importing it needs neither the Cython extensions nor torch (the dynamics'
files import their kernels only when a chain is built).
"""
import textwrap

from ._definitions import (BOTH, HYPERPARAMETERS, LINEAR, NETWORK, DynamicsSpec,
                           EstimatorSpec, Hyperparameter)
from .samplers import MODULES as _SAMPLER_MODULES

#: sampler name -> its definition, from the dynamics' own files
DYNAMICS = {module.DEFINITION.name: module.DEFINITION for module in _SAMPLER_MODULES}


_EWSG = ("ewsg_chain_length", "ewsg_x")
_ADAPTIVE = ("pv_threshold", "pilot_steps")

#: the network's reasons for the linear-only estimators (each a clause)
_TABLE = ("it keeps a table of one gradient per datum; for a linear model that is n "
          "scalars, but a network's per-datum gradients do not factor, so the table "
          "needs n x n_params numbers")
_PER_DATUM = ("its weights p_i ~ ||grad U_i|| need per-datum gradient norms, i.e. n "
              "separate backward passes through the network")
_TAYLOR = ("its control variate is each datum's second-order expansion at the mode, "
           "whose sum needs the data Hessian there: n_params x n_params numbers for a "
           "network")
_EWSG_CONTROL = ("the network's EWSG weights are those of plain per-datum gradients; it "
                 "has no EWSG with control variates (use 'ewsg', or 'cv' / 'svrg')")

ESTIMATORS = {
    "full": EstimatorSpec("full", stochastic=False, access=False, control=None,
                          network_refusal="the network has no exact-gradient "
                          "(Metropolis-adjusted) path; a minibatch gradient is its only "
                          "kind"),
    "uniform": EstimatorSpec("uniform", engines=BOTH, lazy=True),
    "ewsg": EstimatorSpec("ewsg", _EWSG, engines=BOTH, index_chain=True),
    "cv": EstimatorSpec("cv", engines=BOTH, control="fixed", lazy=True),
    "preferential": EstimatorSpec("preferential", access=False, weighting="ps",
                                  network_refusal=_PER_DATUM, lazy=True),
    "cv-preferential": EstimatorSpec("cv-preferential", access=False, control="fixed",
                                     weighting="cvps", network_refusal=_PER_DATUM, lazy=True),
    "cv2": EstimatorSpec("cv2", control="taylor", network_refusal=_TAYLOR),
    "cv2-preferential": EstimatorSpec("cv2-preferential", access=False, control="taylor",
                                      weighting="cvps", network_refusal=_TAYLOR),
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

#: the samplers and subsamplings with a lazy O(nnz) kernel on sparse rows
LAZY_SAMPLERS = tuple(name for name, spec in DYNAMICS.items() if spec.lazy)
LAZY_SUBSAMPLINGS = tuple(name for name, spec in ESTIMATORS.items() if spec.lazy)
#: the samplers the network engine Metropolis-adjusts
NETWORK_METROPOLIS = tuple(name for name, spec in DYNAMICS.items() if spec.network_metropolis)


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


__all__ = ["BOTH", "DYNAMICS", "ESTIMATORS", "HYPERPARAMETERS", "LINEAR", "NETWORK",
           "DynamicsSpec", "EstimatorSpec", "Hyperparameter", "dynamics_for", "estimators_for",
           "estimator_owners", "hyperparameter_constraints", "hyperparameter_doc",
           "ineffective_settings", "sampler_doc", "sampler_owners"]
