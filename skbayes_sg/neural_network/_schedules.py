"""Step-size schedules of the network estimator (``schedule=``).

A schedule turns ``(n_warmup, n_samples, thin)`` into the steps of one
``fit`` (or ``partial_fit`` call): a factor multiplying ``step_size`` at every
step, and which steps' states are kept as draws.

- ``"constant"``: factor 1; ``n_warmup`` steps discarded, then every
  ``thin``-th of ``n_samples * thin`` steps kept.
- ``"polynomial"``: ``(1 + k / t0) ** -power_t`` at step ``k`` of the call,
  ``t0 = max(n_warmup, 1)`` (the decay of Welling & Teh's SGLD, ``a (b +
  k)^-gamma``, with ``power_t`` their ``gamma``); draws as ``"constant"``.
- ``"cyclical"``: ``n_warmup`` steps at factor 1, then ``n_cycles`` cosine
  cycles (Zhang et al., ICLR 2020): in a cycle of ``L`` steps, step ``j``
  has the factor ``(cos(pi j / L) + 1) / 2``; the first
  ``exploration_fraction`` of the cycle explores (nothing kept), its
  sampling stage keeps every ``thin``-th state. The ``n_samples`` draws are
  split evenly over the cycles, ``q_c`` in cycle ``c``, so its sampling stage
  has ``q_c * thin`` steps and its exploration stage
  ``ceil(exploration_fraction / (1 - exploration_fraction) * q_c * thin)``.
"""

import math

import numpy as np

SCHEDULES = ("constant", "cyclical", "polynomial")


def schedule_plan(schedule, *, n_warmup, n_samples, thin, n_cycles=4,
                  exploration_fraction=0.5, power_t=0.55):
    """The steps of one run under a schedule.

    Parameters
    ----------
    schedule : {"constant", "cyclical", "polynomial"}
    n_warmup, n_samples, thin : int
        As the estimator's parameters (``n_warmup`` is 0 when a chain is
        continued).
    n_cycles : int
        Cycles of the cyclical schedule (at most ``n_samples``).
    exploration_fraction : float in [0, 1)
        Share of each cycle spent exploring (cyclical).
    power_t : float
        Exponent of the polynomial decay.

    Returns
    -------
    n_steps : int
        Steps of the run.
    factors : ndarray of shape (n_steps,) or None
        Step-size factor of every step (None for ``"constant"``).
    keep : ndarray of bool, shape (n_steps,), or None
        Steps whose state is kept (None: the ``n_warmup`` / ``thin`` rule);
        exactly ``n_samples`` are True.
    """
    n_warmup, n_samples, thin = int(n_warmup), int(n_samples), int(thin)
    if schedule == "constant":
        return n_warmup + n_samples * thin, None, None
    if schedule == "polynomial":
        n_steps = n_warmup + n_samples * thin
        t0 = max(n_warmup, 1)
        factors = (1.0 + np.arange(n_steps) / t0) ** (-float(power_t))
        return n_steps, factors, None
    if schedule != "cyclical":
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}.")
    n_cycles = int(n_cycles)
    if n_cycles > n_samples:
        raise ValueError(
            f"schedule='cyclical' keeps at least one draw per cycle, so n_cycles "
            f"({n_cycles}) must not exceed n_samples ({n_samples}); lower n_cycles or "
            "raise n_samples.")
    beta = float(exploration_fraction)
    factors = [np.ones(n_warmup)]
    keep = [np.zeros(n_warmup, dtype=bool)]
    for q in np.array_split(np.arange(n_samples), n_cycles):
        sampling = len(q) * thin
        explore = int(math.ceil(beta / (1.0 - beta) * sampling - 1e-9))
        length = explore + sampling
        j = np.arange(length)
        factors.append(0.5 * (np.cos(np.pi * j / length) + 1.0))
        k = np.zeros(length, dtype=bool)
        k[explore + thin - 1::thin] = True
        keep.append(k)
    factors = np.concatenate(factors)
    keep = np.concatenate(keep)
    assert keep.sum() == n_samples
    return len(factors), factors, keep
