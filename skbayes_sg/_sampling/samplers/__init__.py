"""The dynamics (``sampler=``), one file each.

A dynamics' file holds everything that is its own:

``DEFINITION``
    its :class:`~.._definitions.DynamicsSpec` (name, one-line doc, the
    hyperparameters it owns, momentum, Metropolis-adjustable, whitened,
    engines);
``prepare(ctx, theta0, step_size, friction, noise, temperature)``
    its automatic settings (the identity metric's rules; in a whitened
    metric the error model has chosen them);
``build(dim, config, state, generator)``
    its Cython kernel for one chain of the linear engine;
``linear_step(h, friction)``
    its error model: one step on N(0, 1) as a linear recursion
    (:class:`._common.Linear`), or None (pSGLD, never whitened);
``MAX_STEP``, ``FRICTION_GRID``
    the largest whitened step the error model may choose, and the
    frictions it searches (None: the default friction);
``METROPOLIS``
    its start, largest step, target acceptance and iterations per draw
    when Metropolis-adjusted (:class:`._common.MetropolisRule`), or None;
``IDENTITY_STEP_CHECK``, ``identity_preconditioner``
    whether a hand-set step in the identity metric has its variance error
    predicted after the fit, with which preconditioner;
``momentum_variance_scale(config)``, ``MIXING_HINT``
    the momentum's stationary variance per unit temperature; advice for a
    chain that mixed slowly.

Its Cython class is in ``_dynamics.pyx`` (and its lazy O(nnz) step, where
it has one, in ``_lazy.pyx``); its network class in
``neural_network/_net_dynamics.py``.  The registries (``_specs.DYNAMICS``,
``_registry.SAMPLERS``, the error model's and the schedule's tables) are
built from :data:`MODULES`, every public module of this folder (found, not
listed): adding a dynamics is a file here and its Cython class.
"""
import importlib
import pkgutil

#: what every dynamics' file defines (``LISTED``: its place in the docs' lists)
REQUIRED = ("LISTED", "DEFINITION", "prepare", "build", "linear_step", "MAX_STEP",
            "FRICTION_GRID", "METROPOLIS", "IDENTITY_STEP_CHECK", "MIXING_HINT",
            "momentum_variance_scale")


def _check(module):
    missing = [name for name in REQUIRED if not hasattr(module, name)]
    if missing:
        raise ImportError(f"{module.__name__} does not define {missing}")
    if (module.linear_step is None) != (module.MAX_STEP is None):
        raise ImportError(f"{module.__name__}: an error model needs both linear_step "
                          "and MAX_STEP")
    return module


def _discover():
    """Every module of this folder not starting with ``_``, checked, in the
    order of their ``LISTED``."""
    found = [_check(importlib.import_module(f"{__name__}.{info.name}"))
             for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_")]
    places = [m.LISTED for m in found]
    if len(set(places)) != len(places):
        raise ImportError(f"two dynamics files share a LISTED place: {sorted(places)}")
    return tuple(sorted(found, key=lambda m: m.LISTED))


#: the dynamics' modules, in the order the docs list them
MODULES = _discover()

#: sampler name -> its module
BY_NAME = {m.DEFINITION.name: m for m in MODULES}
