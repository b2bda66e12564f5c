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
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
from joblib import Parallel, delayed

from ._chain import ChainOracle, run_segment
from ._dataset import RowData
from ._estimators import Problem
from ._lazy import LazyChain, lazy_supported
from ._metric import Metric
from ._registry import SAMPLERS, SUBSAMPLINGS

# Calls into the nogil loop last about SEGMENT_SECONDS (the first one
# FIRST_SEGMENT_STEPS steps, then sized from the measured rate, never above
# SEGMENT_STEPS): the Python round trip between them (~10 us) is invisible,
# and between them Ctrl-C and a stop request are seen, whatever a step costs.
SEGMENT_SECONDS = 0.1
FIRST_SEGMENT_STEPS = 16
SEGMENT_STEPS = 20000
# a chain's float64 scratch for kept draws on their way to the fit's store
SCRATCH_BYTES = 8 << 20
# How long an interrupted fit waits for its chain threads to stop (each
# stops within a segment)
STOP_TIMEOUT = 10.0
# With progress reports (verbose > 0), segments are shortened to last about
# this long (never longer than SEGMENT_STEPS steps): one Python round trip
# per PROGRESS_SECONDS costs nothing, and slow steps (large batches, many
# features) still report often.  The draws do not depend on the segmentation.
PROGRESS_SECONDS = 0.5
# Steps between checks that a chain is finite and within its bounds (a cheap
# O(dim) test; a blown-up chain is caught within this many steps)
CHECK_EVERY = 16
# During warm-up (nothing kept) the bounds are this much wider: an untuned
# step from an overdispersed start may make a long excursion in a skewed
# posterior and come back, while a blow-up passes any bound within steps
WARMUP_SLACK = 2.0


class _StopRequests:
    """Stop flags of the fits under way, shared by their chain threads.

    A pool registers a token per round; its chains count themselves in and
    out and return at the end of their current segment once the token is
    stopped (on KeyboardInterrupt, or any error, in the thread that runs the
    fit, which then waits for them).  Chains
    in other processes (loky, dask) never see a stop: those backends end
    their workers themselves.
    """

    def __init__(self):
        self._lock = threading.Condition()
        self._stopped = set()
        self._running = {}

    def enter(self, token):
        with self._lock:
            self._running[token] = self._running.get(token, 0) + 1

    def leave(self, token):
        with self._lock:
            self._running[token] -= 1
            if not self._running[token]:
                del self._running[token]
            self._lock.notify_all()

    def stopped(self, token):
        return token in self._stopped

    def stop_and_wait(self, token, timeout):
        """Stop every chain of ``token``; wait until none runs (or timeout)."""
        with self._lock:
            self._stopped.add(token)
            self._lock.wait_for(lambda: token not in self._running, timeout)

    def forget(self, token):
        with self._lock:
            self._stopped.discard(token)



STOP_REQUESTS = _StopRequests()


class ChainStopped(Exception):
    """A chain returned early on a stop request (the fit was interrupted)."""


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
    max_abs_z: float = np.inf         # |z_j| beyond which a chain counts as diverged
    bounds: object = None             # (center, scale, max_sds) the parameters must stay in
    verbose: int = 0
    sample_weight: object = None      # (n,) datum weights w_i, or None (all 1)
    lazy: bool = False                # lazy O(nnz) steps where the chain allows them


@dataclass
class ChainResult:
    samples: object           # (n_kept, dim) parameters, all finite; None: in the store
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
              phase="sampling", log_sizes=False, stop_token=None, sink=None):
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
    stop_token : str or None
        A stop request for it (:data:`STOP_REQUESTS`) ends the chain at the
        end of its current segment by raising :class:`ChainStopped`.

    Returns
    -------
    ChainResult
    """
    if stop_token is None:
        return _run_chain(X, y, spec, state, n_steps, thin, keep, adapt, chain_id, phase,
                          log_sizes, None)
    STOP_REQUESTS.enter(stop_token)
    try:
        return _run_chain(X, y, spec, state, n_steps, thin, keep, adapt, chain_id, phase,
                          log_sizes, stop_token, sink)
    finally:
        STOP_REQUESTS.leave(stop_token)


def _run_chain(X, y, spec, state, n_steps, thin, keep, adapt, chain_id, phase, log_sizes,
               stop_token, sink=None):
    t0 = time.perf_counter()
    bitgen = np.random.PCG64()
    bitgen.state = state["bit_generator"]
    generator = np.random.Generator(bitgen)
    theta = np.array(state["theta"], dtype=np.float64)

    problem = Problem(RowData(X, spec.fit_intercept), y, spec.model, spec.n_outputs,
                      spec.noise_var, spec.sample_weight)
    estimator = SUBSAMPLINGS[spec.subsampling].build(problem, spec.subsampling_config)
    if state.get("estimator") is not None and hasattr(estimator, "set_state"):
        estimator.set_state(state["estimator"])  # tables, snapshot, schedule, cursor
    dynamics = SAMPLERS[spec.sampler].build(problem.dim, spec.sampler_config,
                                            state.get("dynamics"), generator)
    metric = Metric.from_config(spec.metric)
    oracle = ChainOracle(estimator, spec.alpha, spec.ewsg_chain_length, dynamics, spec.ewsg_x,
                         metric, spec.metropolis)
    # sparse rows and a linear recursion off the minibatch: O(nnz) lazy steps
    lazy = spec.lazy and lazy_supported(estimator, dynamics, metric, spec.ewsg_chain_length)
    # one kernel for all segments: its coordinates are brought up to date at
    # kept draws and once at the end, not between segments
    kernel = (LazyChain(estimator, spec.alpha, metric, dynamics, theta,
                       generator.integers(2 ** 63)) if lazy else None)
    adapt = adapt or {}
    if "start" in adapt:
        dynamics.start_adaptation(adapt["start"], adapt.get("max_step"))
    dynamics.reset_acceptance()

    n_keep = n_steps // thin if keep else 0
    # with a sink in this process the draws go through a bounded float64
    # scratch into the fit's one store (no per-chain array of every draw)
    direct = keep and sink is not None and sink.local
    scratch_rows = max(1, SCRATCH_BYTES // (8 * problem.dim))
    samples = np.empty((min(n_keep, scratch_rows) if direct else n_keep, problem.dim))
    adaptive = getattr(estimator, "is_adaptive", False)
    if adaptive and log_sizes:
        estimator.start_size_log(n_steps * (spec.ewsg_chain_length + 1))
    progress = (_Progress(chain_id, n_steps, spec.verbose, phase) if spec.verbose else None)
    segment = FIRST_SEGMENT_STEPS
    done = kept = 0
    diverged = False
    report = {}
    slack = 1.0 if keep else WARMUP_SLACK
    max_abs_z = spec.max_abs_z * slack
    bounds = (None if spec.bounds is None else
              (spec.bounds[0], spec.bounds[1], spec.bounds[2] * slack))
    while done < n_steps and not diverged:
        chunk = min(segment * thin, n_steps - done)
        if direct:
            chunk = min(chunk, scratch_rows * thin)
        view = (samples if direct else samples[kept:]) if keep else None
        t_seg = time.perf_counter()
        if lazy:
            n_done, n_kept = kernel.run(chunk, thin, view, bitgen, max_abs_z=max_abs_z,
                                        bounds=bounds, report=report)
        else:
            n_done, n_kept = run_segment(oracle, dynamics, theta, chunk, thin, view, bitgen,
                                         CHECK_EVERY, max_abs_z=max_abs_z, bounds=bounds,
                                         report=report)
        seconds = time.perf_counter() - t_seg
        if direct:
            sink.write(samples[:n_kept])
        done += n_done
        kept += n_kept
        diverged = n_done < chunk
        if progress is not None:
            progress.update(phase, n_done)
        if n_done:
            # the next call lasts about SEGMENT_SECONDS (at most double the last)
            steps = n_done * SEGMENT_SECONDS / max(seconds, 1e-9) / thin
            segment = int(min(SEGMENT_STEPS, 2 * segment, max(1, steps)))
        if stop_token is not None and STOP_REQUESTS.stopped(stop_token):
            if progress is not None:
                progress.close()
            raise ChainStopped(chain_id)
    if progress is not None:
        progress.close()
    if lazy and not diverged:
        kernel.finish(theta)
    reason = ""
    if direct:
        samples = None                  # in the store
    if diverged:
        reason = report.get("reason", "far")
        if samples is not None:
            samples = samples[:kept]
    if adapt.get("finish"):
        dynamics.finish_adaptation()
    new_state = {"theta": theta.copy(), "dynamics": dynamics.get_state(),
                 "estimator": estimator.get_state() if hasattr(estimator, "get_state") else None,
                 "bit_generator": bitgen.state}
    return ChainResult(samples, new_state, estimator.n_evals, done, diverged,
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
                log_sizes=False, store=None):
        """Run every chain ``n_steps`` steps; return their results (states are
        updated; a diverged chain's result has ``diverged`` set).  With a
        :class:`~._draws.DrawStore` the kept draws go into it (the results'
        ``samples`` are then None)."""
        if n_steps <= 0:
            return [ChainResult(np.empty((0, len(s["theta"]))), s, 0, 0, False, 0.0)
                    for s in self.states]
        if store is not None and keep:
            store.reserve(n_steps // thin)   # room for every chain's draws of this call
        parallel = self._parallel or Parallel(n_jobs=self.n_jobs, prefer="threads")
        token = uuid.uuid4().hex
        try:
            results = parallel(
                delayed(run_chain)(self.X, self.y, self.spec, state, n_steps, thin, keep,
                                   adapt, chain_id=c, phase=phase, log_sizes=log_sizes,
                                   stop_token=token,
                                   sink=None if store is None else store.sink(c))
                for c, state in enumerate(self.states))
        except BaseException:
            # KeyboardInterrupt (or any error) here: the chain threads still
            # running stop at the end of their segment; wait for them, so that
            # nothing keeps sampling after fit has returned
            STOP_REQUESTS.stop_and_wait(token, timeout=STOP_TIMEOUT)
            raise
        finally:
            STOP_REQUESTS.forget(token)
        if store is not None:
            # chains run in another process (a process backend) return their draws
            for c, r in enumerate(results):
                if r.samples is not None:
                    store.sink(c).write(r.samples)
                    r.samples = None
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
        if self.spec.bounds is not None and new_metric["kind"] == "dense":
            # the adapted metric estimates the posterior's own sds: where
            # they exceed the Laplace ones (skewed, heavy-tailed posteriors)
            # the bounds follow them
            center, sd, max_sds = self.spec.bounds
            F = np.asarray(new_metric["factor"])
            self.spec.bounds = (center, np.maximum(sd, np.sqrt(np.einsum("ij,ij->i", F, F))),
                                max_sds)


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
