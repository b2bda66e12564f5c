"""Run chains: picklable per-chain tasks and the pool that advances them together.

A task advances one chain by a number of steps from its saved state and
returns the new state, so any joblib backend (threads, loky, dask) can run
it; the nogil loop releases the GIL, so the default thread backend runs the
chains truly in parallel without copying ``X``.  The fit advances all chains
together in rounds (:class:`ChainPool`): between rounds it adapts the metric,
checks the effective sample size and decides whether to go on.  A chain's
draws depend only on its own seed and on the rounds' lengths, which are
decided from all chains' draws, so the result is the same for any ``n_jobs``.
"""
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
from joblib import Parallel, delayed

from ._chain import ChainOracle, run_segment
from ._dataset import RowData
from ._estimators import Problem
from ._metric import Metric
from ._registry import SAMPLERS, SUBSAMPLINGS

# Steps per call into the nogil loop: large enough that the Python round trip
# is invisible, small enough for progress reports and Ctrl-C to be prompt.
SEGMENT_STEPS = 20000
# With progress reports (verbose > 0), segments are shortened to last about
# this long (never longer than SEGMENT_STEPS steps): one Python round trip
# per PROGRESS_SECONDS costs nothing, and slow steps (large batches, many
# features) still report often.  The draws do not depend on the segmentation.
PROGRESS_SECONDS = 0.5


@dataclass
class ChainSpec:
    """Everything a chain needs besides the data and its state (all picklable)."""

    model: str
    n_outputs: int
    noise_var: float
    fit_intercept: bool
    alpha: float
    sampler: str
    sampler_config: dict
    subsampling: str
    subsampling_config: dict
    ewsg_chain_length: int
    ewsg_x: int
    metric: dict                      # Metric.get_config()
    metropolis: bool = False
    max_sq_norm: float = np.inf       # ||z||^2 beyond which a chain counts as diverged
    verbose: int = 0


@dataclass
class ChainResult:
    samples: np.ndarray       # (n_kept, dim) parameters, all finite
    state: dict               # z, dynamics state, estimator state, bit generator state
    n_grad_evals: int
    n_steps_done: int
    diverged: bool
    seconds: float
    reason: str = ""          # "non-finite" or "far" when diverged
    batch_sizes: object = None  # adaptive estimators: sizes drawn while sampling
    accept_rate: float = float("nan")
    step_size: float = float("nan")


def initial_state(seed, z0):
    """The state of a chain that has not run yet."""
    return {"theta": np.array(z0, dtype=np.float64), "dynamics": None, "estimator": None,
            "bit_generator": np.random.PCG64(seed).state}


class _Progress:
    """Progress of one chain: a tqdm bar (optional dependency) or text lines.

    ``verbose=1`` shows a bar per chain when tqdm is installed (steps/s and
    ETA; ``position=chain_id`` stacks the bars of parallel chains), else one
    line per ``SEGMENT_STEPS`` steps with the rate and ETA; ``verbose>=2``
    always prints the lines (logs, dask workers).
    """

    def __init__(self, chain_id, total, verbose, phase):
        self.chain_id, self.total, self.verbose = chain_id, total, verbose
        self.t0 = time.perf_counter()
        self.done = 0
        self.next_line = SEGMENT_STEPS
        self.bar = None
        if verbose == 1:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(total=total, desc=f"chain {chain_id} {phase}", unit="step",
                                unit_scale=True, position=chain_id, leave=False,
                                mininterval=PROGRESS_SECONDS, dynamic_ncols=True)

    def update(self, phase, n_steps):
        self.done += n_steps
        if self.bar is not None:
            self.bar.update(n_steps)
            return
        if self.done < self.next_line and self.done < self.total:
            return
        self.next_line = self.done + SEGMENT_STEPS
        elapsed = max(time.perf_counter() - self.t0, 1e-9)
        rate = self.done / elapsed
        eta = (self.total - self.done) / max(rate, 1e-9)
        print(f"[chain {self.chain_id}] {phase}: {self.done}/{self.total} steps "
              f"({rate:,.0f} steps/s, ETA {eta:,.0f} s)", flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def run_chain(X, y, spec, state, n_steps, thin=1, keep=True, adapt=None, chain_id=0,
              phase="sampling", log_sizes=False):
    """Advance one chain by ``n_steps`` steps from ``state``.

    Parameters
    ----------
    X, y : data (see :class:`FitContext`).
    spec : ChainSpec
    state : dict
        From :func:`initial_state` or a previous call.
    n_steps : int
    thin : int
        Keep every ``thin``-th state (when ``keep``).
    keep : bool
        Return the kept states (False: warm-up).
    adapt : dict or None
        Step adaptation of a Metropolis dynamics: ``{"start": target_accept,
        "max_step": h_max}`` starts dual averaging before the steps,
        ``{"finish": True}`` ends it after them (both may be given).
    chain_id : int
        Used in progress messages.
    phase : str
        Used in progress messages.
    log_sizes : bool
        Adaptive estimators: record the minibatch sizes drawn.

    Returns
    -------
    ChainResult
    """
    t0 = time.perf_counter()
    bitgen = np.random.PCG64()
    bitgen.state = state["bit_generator"]
    generator = np.random.Generator(bitgen)
    theta = np.array(state["theta"], dtype=np.float64)

    problem = Problem(RowData(X, spec.fit_intercept), y, spec.model, spec.n_outputs,
                      spec.noise_var)
    estimator = SUBSAMPLINGS[spec.subsampling].build(problem, spec.subsampling_config)
    if state.get("estimator") is not None and hasattr(estimator, "set_state"):
        estimator.set_state(state["estimator"])  # tables, snapshot, schedule, cursor
    dynamics = SAMPLERS[spec.sampler].build(problem.dim, spec.sampler_config,
                                            state.get("dynamics"), generator)
    metric = Metric.from_config(spec.metric)
    oracle = ChainOracle(estimator, spec.alpha, spec.ewsg_chain_length, dynamics, spec.ewsg_x,
                         metric, spec.metropolis)
    adapt = adapt or {}
    if "start" in adapt:
        dynamics.start_adaptation(adapt["start"], adapt.get("max_step"))
    dynamics.reset_acceptance()

    n_keep = n_steps // thin if keep else 0
    samples = np.empty((n_keep, problem.dim))
    adaptive = getattr(estimator, "is_adaptive", False)
    if adaptive and log_sizes:
        estimator.start_size_log(n_steps * (spec.ewsg_chain_length + 1))
    progress = (_Progress(chain_id, n_steps, spec.verbose, phase) if spec.verbose else None)
    segment = SEGMENT_STEPS if progress is None else min(SEGMENT_STEPS, 1000)
    done = kept = 0
    diverged = False
    while done < n_steps and not diverged:
        chunk = min(segment * thin, n_steps - done)
        view = samples[kept:] if keep else None
        t_seg = time.perf_counter()
        n_done, n_kept = run_segment(oracle, dynamics, theta, chunk, thin, view, bitgen,
                                     max_sq_norm=spec.max_sq_norm)
        seconds = time.perf_counter() - t_seg
        done += n_done
        kept += n_kept
        diverged = n_done < chunk
        if progress is not None:
            progress.update(phase, n_done)
            if seconds > 0 and n_done:
                steps = n_done * PROGRESS_SECONDS / seconds / thin
                segment = int(min(SEGMENT_STEPS, max(1, steps)))
    if progress is not None:
        progress.close()
    reason = ""
    if diverged:
        reason = "non-finite" if not np.all(np.isfinite(theta)) else "far"
        samples = samples[:kept]
    if adapt.get("finish"):
        dynamics.finish_adaptation()
    new_state = {"theta": theta.copy(), "dynamics": dynamics.get_state(),
                 "estimator": estimator.get_state() if hasattr(estimator, "get_state") else None,
                 "bit_generator": bitgen.state}
    return ChainResult(samples, new_state, oracle.n_evals, done, diverged,
                       time.perf_counter() - t0, reason,
                       estimator.size_log_values() if (adaptive and log_sizes) else None,
                       dynamics.acceptance_rate, dynamics.step_size)


@dataclass
class ChainPool:
    """The chains of one fit, advanced together (see the module docstring).

    Attributes
    ----------
    states : list of dict
        Every chain's state after the last round.
    n_grad_evals : int
        Per-datum gradient evaluations spent by the chains so far.
    seconds : float
        Wall time of the slowest chain, summed over rounds.
    """

    X: object
    y: np.ndarray
    spec: ChainSpec
    states: list
    n_jobs: object = None
    n_grad_evals: int = 0
    seconds: float = 0.0
    n_steps: int = 0
    results: list = field(default_factory=list)
    _parallel: object = None

    @property
    def n_chains(self):
        return len(self.states)

    @contextmanager
    def session(self):
        """One joblib ``Parallel`` for every round: its workers (and, on a
        dask cluster, the data scattered to it) are set up once per fit."""
        scattered = _scatter_once(self.X)
        try:
            with Parallel(n_jobs=self.n_jobs, prefer="threads") as parallel:
                self._parallel = parallel
                try:
                    yield self
                finally:
                    self._parallel = None
        finally:
            scattered()


    def advance(self, n_steps, thin=1, keep=True, adapt=None, phase="sampling",
                log_sizes=False):
        """Run every chain ``n_steps`` steps; return their results (states are
        updated; a diverged chain's result has ``diverged`` set)."""
        if n_steps <= 0:
            return [ChainResult(np.empty((0, len(s["theta"]))), s, 0, 0, False, 0.0)
                    for s in self.states]
        parallel = self._parallel or Parallel(n_jobs=self.n_jobs, prefer="threads")
        results = parallel(
            delayed(run_chain)(self.X, self.y, self.spec, state, n_steps, thin, keep, adapt,
                               chain_id=c, phase=phase, log_sizes=log_sizes)
            for c, state in enumerate(self.states))
        self.states = [r.state for r in results]
        self.n_grad_evals += int(sum(r.n_grad_evals for r in results))
        self.seconds += max(r.seconds for r in results)
        self.n_steps += n_steps
        self.results = results
        return results

    def set_step(self, step_size, momentum_scale=1.0):
        """Every chain continues with ``step_size`` from where it is (a
        diverged chain from its last good state), its momentum redrawn."""
        self.spec.sampler_config = dict(self.spec.sampler_config, step_size=float(step_size))
        for state in self.states:
            if state.get("dynamics") is not None:
                state["dynamics"]["step_size"] = np.array([float(step_size)])
        self.rebase(self.spec.metric, momentum_scale)

    def rebase(self, new_metric, momentum_scale=1.0):
        """Move every chain to the coordinates of ``new_metric`` (same
        parameters): ``z' = L'^-1 (center + L z - center')``.  Momenta are
        redrawn from their stationary law (a valid Gibbs step for any
        target) with each chain's own random stream, cached gradients dropped."""
        old = Metric.from_config(self.spec.metric)
        new = Metric.from_config(new_metric)
        for state in self.states:
            theta = old.py_to_theta(state["theta"])
            state["theta"] = new.py_to_z(theta)
            dyn = state.get("dynamics")
            if dyn is None:
                continue
            bitgen = np.random.PCG64()
            bitgen.state = state["bit_generator"]
            gen = np.random.Generator(bitgen)
            for key in ("momentum", "velocity"):
                if key in dyn:
                    dyn[key] = momentum_scale * gen.standard_normal(len(dyn[key]))
            state["bit_generator"] = bitgen.state
            if "cache_scalars" in dyn:
                dyn["cache_scalars"] = np.array([0.0, 0.0])
        self.spec.metric = new_metric


def _scatter_once(X):
    """On joblib's dask backend, send ``X`` to the cluster once for the whole
    fit: the backend scatters large arguments once per ``Parallel`` call
    (one per round), except those it was given with
    ``parallel_config(scatter=...)``, which it keeps in ``data_futures``.
    Returns the clean-up.  Any other backend: nothing to do."""
    from joblib.parallel import get_active_backend

    backend, _ = get_active_backend()
    futures = getattr(backend, "data_futures", None)
    client = getattr(backend, "client", None)
    if not isinstance(futures, dict) or client is None or id(X) in futures:
        return lambda: None
    futures[id(X)] = client.scatter(X, broadcast=True, hash=False)
    return lambda: futures.pop(id(X), None)
