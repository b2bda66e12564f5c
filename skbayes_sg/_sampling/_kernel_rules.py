"""Rules and messages the compiled kernels enforce, written in Python.

The policy (``_setup``, ``_base``, ``_schedule``) reads them here, and the
kernels (``_chain.pyx``, ``_lazy.pyx``) import them from here, so a rule is
written once and the policy can be read without a kernel's source.
"""
import numpy as np

#: why EWSG cannot run over cyclic minibatches
EWSG_CYCLIC_MESSAGE = (
    "EWSG's index chain is a Metropolis chain whose proposals must be random "
    "minibatches; with access='cyclic' the candidates are the next blocks in a "
    "fixed order, so the chain keeps comparing the same neighbours and never "
    "targets its weights (with M = 1 half the blocks are never used). Use "
    "access='random' or 'reshuffle' with EWSG.")

#: ``ewsg_x`` names -> the kernels' codes (EWSG paper Fig. 1c); ``_chain.pyx``
#: checks at import that they are its ``EWSG_X_*`` enum values
EWSG_X_MODES = {"auto": 0, "zero": 1, "one": 2, "momentum-stop": 3}

#: a lazy fit's diagonal metric has its scales on the grid 2^(i / LAZY_SCALE_GRID)
#: (within 4.4% of the adapted ones): its coordinates then fall into a few
#: classes that share their k-step laws (see :func:`on_lazy_grid`)
LAZY_SCALE_GRID = 8


def on_lazy_grid(metric_config):
    """A diagonal metric's config with its scales rounded to the grid
    ``2^(i / 8)`` (any other metric unchanged).

    A metric is a preconditioner: any scales leave the posterior the chains
    sample unchanged, and 4.4% off the adapted ones costs nothing in
    efficiency.  On the grid, coordinates with equal scales (and so equal
    prior curvature) share the k-step laws of their untouched steps, which
    the lazy kernel tabulates once instead of composing them at each touch.
    """
    if metric_config["kind"] != "diagonal":
        return metric_config
    cfg = dict(metric_config)
    D = np.asarray(cfg["factor"], dtype=np.float64)
    cfg["factor"] = np.exp2(np.round(LAZY_SCALE_GRID * np.log2(D)) / LAZY_SCALE_GRID)
    return cfg
