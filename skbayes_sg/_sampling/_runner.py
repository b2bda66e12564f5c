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
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np
import scipy.sparse as sp
from joblib import Parallel, delayed, effective_n_jobs
from joblib.parallel import BACKENDS, DEFAULT_BACKEND, get_active_backend

from ._chain import ChainOracle, run_group_segment, run_segment
from ._cluster import ClusterRounds, active_dask_backend, task_cancelled
from ._dataset import RowData
from ._dynamics import state_step, with_step, without_cached_gradient
from ._estimators import Problem
from ._group import COROUTINES, ChainGroup, GroupedFullGradient
from ._interrupt import StopPoll
from ._lazy import LazyChain, lazy_supported
from ._metric import Metric
from ._registry import SAMPLERS, SUBSAMPLINGS
from ._specs import DYNAMICS
from ._row_algebra import pass_threads

# Calls into the nogil loop last about SEGMENT_SECONDS (the first one
# FIRST_SEGMENT_STEPS steps, then at most double the last, sized from the
# measured rate, never above SEGMENT_STEPS kept draws): the Python round trip
# between them (~10 us) is invisible, and between them the fit's progress is
# reported, whatever a step costs (a Metropolis trajectory on a large data set
# costs seconds a step: the first call must be one step).  Segments are counted
# in steps, not kept draws, so a large thin does not lengthen them.  Ctrl-C and
# stop requests do not wait for a segment's end: the loop checks them at every
# gradient (:class:`._interrupt.StopPoll`).  The draws do not depend on the
# segmentation.
SEGMENT_SECONDS = 0.1
# a group's (chains in lockstep): its chains end a segment together only in
# whole steps, and the gradients one makes past the others' run unshared;
# ten times the steps make that a smaller share (a chain alone in 29% of
# the passes with 0.1 s, 14% with 1 s: 11% faster on 30,000 text rows)
GROUP_SEGMENT_SECONDS = 1.0
FIRST_SEGMENT_STEPS = 1
SEGMENT_STEPS = 20000
# a chain's float64 scratch for kept draws on their way to the fit's store
SCRATCH_BYTES = 8 << 20
# How long an interrupted fit waits for its chain threads to stop (each stops
# within a gradient; only a thread stuck outside the loop would take longer)
STOP_TIMEOUT = 10.0
# Progress (verbose > 0): a terminal's line is redrawn at most every
# PROGRESS_SECONDS; a log (not a terminal, or verbose >= 2) gets at most one
# line every LOG_SECONDS, and the final one.
PROGRESS_SECONDS = 0.2
LOG_SECONDS = 5.0
# Steps between checks that a chain is finite and within its bounds (a cheap
# O(dim) test; a blown-up chain is caught within this many steps)
CHECK_EVERY = 16
# During warm-up (nothing kept) the bounds are this much wider: an untuned
# step from an overdispersed start may make a long excursion in a skewed
# posterior and come back, while a blow-up passes any bound within steps
WARMUP_SLACK = 2.0
# Chains that share a thread run in lockstep where they can (full passes over
# sparse rows: :func:`lockstep_groups`); False: each alone (the same draws)
LOCKSTEP = True


class ChainControl:
    """What one :meth:`ChainPool.advance` call shares with its chains.

    A stop flag (an ``int32`` the chains' nogil loops read at every gradient:
    :class:`._interrupt.StopPoll`), the number of chains running (the pool
    waits for it to reach zero after setting the flag) and the fit's
    :class:`FitProgress` (or None).  The pool stops its chains on
    KeyboardInterrupt, or any error, in the thread that runs the fit.  Sent to
    another process (loky, dask) it carries a new flag and no progress (the
    pool reports a remote chain's steps when its result comes back), and its
    ``stop_when``: a picklable function of nothing, asked after every segment
    of a chain, that sets the flag when it returns True (on a dask worker:
    :func:`._cluster.task_cancelled`, so a cancelled round stops within a
    segment instead of running to its end).
    """

    def __init__(self, progress=None, stop_when=None):
        self.flag = np.zeros(1, dtype=np.int32)
        self.progress = progress
        self.stop_when = stop_when
        self._lock = threading.Condition()
        self._running = 0

    def __reduce__(self):
        return (ChainControl, (None, self.stop_when))

    def stopped(self):
        return bool(self.flag[0])

    def enter(self):
        with self._lock:
            self._running += 1

    def leave(self):
        with self._lock:
            self._running -= 1
            self._lock.notify_all()

    def stop_and_wait(self, timeout):
        """Stop every chain of this call; wait until none runs (or timeout)."""
        self.flag[0] = 1
        with self._lock:
            return self._lock.wait_for(lambda: self._running == 0, timeout)

    def report(self, chain_id, n_steps):
        if self.progress is not None:
            self.progress.add(chain_id, n_steps)
        if self.stop_when is not None and self.stop_when():
            self.flag[0] = 1


class ChainStopped(Exception):
    """A chain returned early on a stop request (the fit was interrupted)."""


@dataclass(frozen=True)
class ChainSpec:
    """Everything a chain needs besides the data and its state (all picklable).

    Frozen: a change between rounds (the adapted metric and bounds, the
    measured batch) is a new spec the pool runs from then on
    (``dataclasses.replace``), never a write into the one the chains hold."""

    model: str
    n_outputs: int
    model_params: tuple               # the model's own parameters (GLM.params)
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
    chain_rows: int = 0               # > 0: chain c starts its cyclic reads at row c * chain_rows


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


@dataclass(frozen=True, eq=False)
class ChainState:
    """A chain's saved state between rounds: plain arrays and dicts, no
    Cython object (picklable; a fitted estimator keeps its chains' states
    for ``warm_start``).  A change between rounds (a step, a metric) makes a
    new one (:func:`dataclasses.replace`), never an edit of the old.

    Attributes
    ----------
    theta : ndarray of shape (dim,)
        The chain's position in the metric's coordinates ``z``.
    dynamics : dict or None
        Its dynamics' auxiliary state (``Dynamics.get_state``: the step,
        the cached gradient, the adaptation, and what the law carries, such
        as a momentum under its definition's ``momentum_key``); None before
        the chain first ran.
    estimator : dict or None
        Its gradient estimator's state (tables, snapshot, cursor), if any.
    bit_generator : dict
        Its random stream (``PCG64.state``).
    """
    theta: np.ndarray
    dynamics: dict
    estimator: dict
    bit_generator: dict


def initial_state(seed, z0):
    """The state of a chain that has not run yet."""
    return ChainState(np.array(z0, dtype=np.float64), None, None,
                      np.random.PCG64(seed).state)


def _fmt_seconds(t):
    if not np.isfinite(t):
        return "?"
    if t < 9.95:
        return f"{t:.1f} s"
    t = int(round(t))
    if t < 60:
        return f"{t} s"
    if t < 3600:
        return f"{t // 60}:{t % 60:02d}"
    return f"{t // 3600}:{t // 60 % 60:02d}:{t % 60:02d}"


def _in_notebook(stream):
    """Whether ``stream`` is a Jupyter kernel's output (tqdm draws a widget there)."""
    return type(stream).__module__.startswith("ipykernel")


class FitProgress:
    """The progress of one fit: one line per phase (warm-up, sampling) and a
    final line with the effective sample size and R-hat.

    How it is shown depends on where it goes (``verbose=1``):

    * a terminal with tqdm installed (or a Jupyter kernel): one tqdm bar per
      phase, redrawn in place, left on screen when the phase ends;
    * a terminal without tqdm: the same line, redrawn in place with ``\\r``;
    * anything else (a log file, a pipe) or ``verbose >= 2``: at most one line
      every ``LOG_SECONDS`` (none for a short fit), the end of a phase that
      printed one, and the final line.

    A phase's total is its planned steps per chain (:meth:`expect`: the
    schedule's plan, extended when a window or round is added), so the ETA
    is that of the whole phase, from the rate measured over the phase.

    Parameters
    ----------
    n_chains : int
    verbose : int
    stream : file-like or None
        Where to write (None: ``sys.stdout`` when the fit starts).
    t_start : float or None
        ``time.perf_counter()`` when the fit began: the time before now is
        its set-up (None: now).
    """

    def __init__(self, n_chains, verbose, stream=None, t_start=None):
        self.n_chains, self.verbose = int(n_chains), int(verbose)
        self.stream = sys.stdout if stream is None else stream
        now = time.perf_counter()
        self.t_fit = now if t_start is None else t_start
        self.setup_seconds = now - self.t_fit if t_start is not None else None
        self._lock = threading.RLock()
        self.phase = None
        self.total = 0              # planned steps per chain in the phase
        self.done = 0               # steps done, all chains together
        self.t0 = self.t_last = time.perf_counter()
        self.printed = False        # a log line of this phase was written
        self.bar = None
        self.width = 0              # length of the line drawn in place
        self.steps = {}             # steps per chain of every phase so far
        self.note = ""              # shown after the ETA (e.g. a network's loss)
        isatty = getattr(self.stream, "isatty", lambda: False)
        try:
            terminal = bool(isatty())
        except ValueError:          # a closed stream
            terminal = False
        notebook = _in_notebook(self.stream)
        self.mode = "log"
        if self.verbose == 1 and (terminal or notebook):
            self.mode = "line" if terminal else "log"
            try:
                if notebook:
                    from tqdm.auto import tqdm
                else:
                    from tqdm import tqdm
                self._tqdm = tqdm
                self.mode = "tqdm"
            except ImportError:
                pass
        self.t_log = time.perf_counter()    # when the last log line was written

    # -------------------------------------------------------------- phases
    def expect(self, phase, steps, exact=False):
        """The phase ``phase`` has ``steps`` steps per chain left to run
        (``exact``: its plan; otherwise at least that many: one pool call).
        Starts the phase (ending the one before) when it is not the current
        one."""
        with self._lock:
            if phase != self.phase:
                self._end_phase()
                self.phase, self.total, self.done = phase, 0, 0
                self.t0 = self.t_last = time.perf_counter()
                self.printed = False
            total = -(-self.done // self.n_chains) + int(steps)
            if not exact:
                total = max(self.total, total)
            if self.mode == "tqdm" and self.bar is None:
                # steps per chain (the chains' steps / n_chains), as the text lines
                chains = f" ({self.n_chains} chains)" if self.n_chains > 1 else ""
                self.bar = self._tqdm(
                    total=total, desc=phase + chains, unit="step", leave=True,
                    file=self.stream, mininterval=PROGRESS_SECONDS, dynamic_ncols=True,
                    bar_format="{l_bar}{bar}| {n:,.0f}/{total:,.0f} "
                               "[{elapsed}<{remaining}, {rate_fmt}]")
            elif total != self.total and self.bar is not None:
                self.bar.total = total
                self.bar.refresh()
            self.total = total

    def add(self, chain_id, n_steps):
        """``n_steps`` more steps of chain ``chain_id`` (any thread)."""
        if n_steps <= 0:
            return
        with self._lock:
            self.done += int(n_steps)
            if self.bar is not None:
                if self.note and self.note != self.bar.postfix:
                    self.bar.set_postfix_str(self.note, refresh=False)
                self.bar.update(n_steps / self.n_chains)
                return
            now = time.perf_counter()
            if self.mode == "line":
                if now - self.t_last >= PROGRESS_SECONDS:
                    self.t_last = now
                    self._draw(self._status(now))
            elif now - self.t_log >= LOG_SECONDS:
                self._log(self._status(now))
                self.printed = True

    def finish(self, ess=None, rhat=None, target_ess=None, note=""):
        """End the last phase; write the final line (min ESS, max R-hat)."""
        with self._lock:
            self._end_phase()
            self.phase = None
            steps = " + ".join(f"{k} {v:,}" for k, v in self.steps.items())
            chains = f" x {self.n_chains} chains" if self.n_chains > 1 else ""
            setup = ("" if self.setup_seconds is None else
                     f"set-up {_fmt_seconds(self.setup_seconds)}, ")
            parts = [f"{_fmt_seconds(time.perf_counter() - self.t_fit)} "
                     f"({setup}{steps} steps{chains})"]
            if ess is not None and np.size(ess):
                ess = np.asarray(ess, dtype=np.float64)
                rhat = np.asarray(rhat, dtype=np.float64)
                min_ess = float(np.nanmin(ess)) if np.any(np.isfinite(ess)) else np.nan
                max_rhat = float(np.nanmax(rhat)) if np.any(np.isfinite(rhat)) else np.nan
                target = "" if target_ess is None else f" (target {target_ess:,.0f})"
                parts.append(f"min bulk ESS {min_ess:,.0f}{target}")
                parts.append(f"max R-hat {max_rhat:.3f}")
            if note:
                parts.append(note)
            self._log("fit: " + ", ".join(parts))

    def close(self, note):
        """End the current phase without a final line (the fit stopped:
        ``note`` says why)."""
        with self._lock:
            self._end_phase(note)
            self.phase = None

    # ------------------------------------------------------------- drawing
    def _status(self, now):
        """``phase: done/total steps (per chain), rate, elapsed, ETA``: the
        ETA is the phase's steps left at the rate measured over the phase."""
        per_chain = self.done / self.n_chains
        elapsed = max(now - self.t0, 1e-9)
        rate = per_chain / elapsed
        eta = max(self.total - per_chain, 0) / rate if rate > 0 else np.inf
        chains = f" ({self.n_chains} chains)" if self.n_chains > 1 else ""
        return (f"{self.phase}{chains}: {per_chain:,.0f}/{self.total:,} steps, "
                f"{rate:,.0f} steps/s, {_fmt_seconds(elapsed)} elapsed, "
                f"ETA {_fmt_seconds(eta)}" + (f", {self.note}" if self.note else ""))

    def _end_phase(self, note=""):
        if self.phase is None:
            return
        self.steps[self.phase] = (self.steps.get(self.phase, 0)
                                  + round(self.done / self.n_chains))
        if self.bar is not None:
            if note:
                self.bar.set_postfix_str(note, refresh=False)
            self.bar.close()
            self.bar = None
            return
        now = time.perf_counter()
        per_chain = self.done / self.n_chains
        chains = f" ({self.n_chains} chains)" if self.n_chains > 1 else ""
        line = (f"{self.phase}{chains}: {per_chain:,.0f} steps in "
                f"{_fmt_seconds(now - self.t0)}" + (f", {note}" if note else ""))
        if self.mode == "line":
            self._draw(line)
            self._write("\n")
            self.width = 0
        elif self.printed or note:
            self._log(line)

    def _draw(self, line):
        pad = max(self.width - len(line), 0)
        self.width = len(line)
        self._write("\r" + line + " " * pad)

    def _log(self, line):
        if self.mode == "line" and self.width:
            self._write("\n")
            self.width = 0
        self._write(line + "\n")
        self.t_log = time.perf_counter()

    def _write(self, text):
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):   # a closed or broken stream never stops a fit
            pass


@contextmanager
def progress_guard(progress):
    """Ends ``progress``'s current line when the block raises (Ctrl-C: the
    line says "interrupted")."""
    try:
        yield progress
    except BaseException as exc:
        if progress is not None:
            progress.close("interrupted" if isinstance(exc, KeyboardInterrupt)
                           else "stopped: " + type(exc).__name__)
        raise


def run_chain(X, y, spec, state, n_steps, thin=1, keep=True, adapt=None, chain_id=0,
              phase="sampling", log_sizes=False, control=None, sink=None):
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
        Used in progress reports.
    phase : str
        Used in error messages.
    log_sizes : bool
        Adaptive estimators: record the minibatch sizes drawn.
    control : ChainControl or None
        Its stop flag ends the chain within a gradient by raising
        :class:`ChainStopped`; its progress receives the steps done after
        every segment.
    sink : ChainSink or None
        Where the kept draws go (None: returned in the result).

    Returns
    -------
    ChainResult
    """
    return _controlled(control, [chain_id], X, y, spec, [state], n_steps, thin, keep, adapt,
                       [chain_id], phase, log_sizes, control, [sink], False)[0]


def run_chain_group(X, y, spec, states, n_steps, thin=1, keep=True, adapt=None,
                    chain_ids=None, phase="sampling", log_sizes=False, control=None,
                    sinks=None):
    """:func:`run_chain` for several chains in lockstep in this thread: each
    full-data pass serves all of them (:mod:`._group`; see
    :func:`lockstep_groups`), and each chain's draws are those it makes
    alone.  ``states``, ``chain_ids`` and ``sinks`` hold one entry per chain;
    returns their :class:`ChainResult` in that order."""
    chain_ids = list(range(len(states))) if chain_ids is None else list(chain_ids)
    sinks = [None] * len(states) if sinks is None else sinks
    return _controlled(control, chain_ids, X, y, spec, states, n_steps, thin, keep, adapt,
                       chain_ids, phase, log_sizes, control, sinks, True)


def _controlled(control, chain_ids, *args):
    if control is None:
        return _run_chains(*args)
    control.enter()
    try:
        if control.stopped():       # a task that starts after the stop
            raise ChainStopped(chain_ids[0])
        return _run_chains(*args)
    finally:
        control.leave()


def lockstep_groups(X, spec, n_chains, workers):
    """The chains each thread runs in lockstep (lists of chain indices), or
    None where every chain runs alone.

    Chains group where a thread runs several of them (more chains than
    threads: ``workers``, joblib's ``n_jobs``), each gradient is a full pass
    over sparse rows of a one-output model and glibc's coroutines are there
    (:data:`._group.COROUTINES`).  The draws do not depend on it."""
    if (not LOCKSTEP or not COROUTINES or spec.subsampling != "full" or spec.n_outputs != 1
            or spec.ewsg_chain_length or not sp.issparse(X) or X.format != "csr"):
        return None
    n_groups = min(max(effective_n_jobs(workers), 1), n_chains)
    if n_groups >= n_chains:
        return None
    return [list(map(int, ids)) for ids in np.array_split(np.arange(n_chains), n_groups)]


def _build_chain(X, y, spec, state, chain_id=0, grouped=False):
    """A chain's kernels from its spec and saved state: its random stream,
    parameters, problem, gradient estimator (its tables restored; on a pool
    of rows drawn ahead, ``spec.chain_rows``, its first read at row
    ``chain_id * chain_rows``; ``grouped``: a full pass shared with the
    chains of its group), dynamics
    (its auxiliary state restored, or drawn), oracle and, for sparse rows
    with a lazy kernel, the lazy chain (one for all segments: its
    coordinates are brought up to date at kept draws and once at the end)."""
    bitgen = np.random.PCG64()
    bitgen.state = state.bit_generator
    generator = np.random.Generator(bitgen)
    theta = np.array(state.theta, dtype=np.float64)
    problem = Problem(RowData(X, spec.fit_intercept), y, spec.model, spec.n_outputs,
                      spec.model_params, spec.sample_weight)
    estimator = (GroupedFullGradient(problem) if grouped else
                 SUBSAMPLINGS[spec.subsampling].build(problem, spec.subsampling_config))
    if state.estimator is not None and hasattr(estimator, "set_state"):
        estimator.set_state(state.estimator)     # tables, snapshot, schedule, cursor
    elif spec.chain_rows:
        # a pool of rows drawn ahead, shared: each chain starts at its own row
        estimator.start_at(chain_id * spec.chain_rows)
    dynamics = SAMPLERS[spec.sampler].build(problem.dim, spec.sampler_config,
                                            state.dynamics, generator)
    metric = Metric.from_config(spec.metric)
    oracle = ChainOracle(estimator, spec.alpha, spec.ewsg_chain_length, dynamics, spec.ewsg_x,
                         metric, spec.metropolis)
    # sparse rows and a linear recursion off the minibatch: O(nnz) lazy steps
    lazy = spec.lazy and lazy_supported(estimator, dynamics, metric, spec.ewsg_chain_length)
    kernel = (LazyChain(estimator, spec.alpha, metric, dynamics, theta,
                       generator.integers(2 ** 63)) if lazy else None)
    return bitgen, theta, problem, estimator, dynamics, oracle, kernel


class _Running:
    """A chain of a task while it runs: its kernels (:func:`_build_chain`),
    where its kept draws go and what it has done."""

    def __init__(self, X, y, spec, state, chain_id, n_steps, thin, keep, adapt, log_sizes,
                 sink, grouped):
        (self.bitgen, self.theta, self.problem, self.estimator, self.dynamics, self.oracle,
         self.kernel) = _build_chain(X, y, spec, state, chain_id, grouped)
        self.chain_id = chain_id
        if "start" in adapt:
            self.dynamics.start_adaptation(adapt["start"], adapt.get("max_step"))
        self.dynamics.reset_acceptance()
        n_keep = n_steps // thin if keep else 0
        # with a sink in this process the draws go through a bounded float64
        # scratch into the fit's one store (no per-chain array of every draw)
        self.sink = sink
        self.direct = keep and sink is not None and sink.local
        self.scratch_rows = max(1, SCRATCH_BYTES // (8 * self.problem.dim))
        self.samples = np.empty((min(n_keep, self.scratch_rows) if self.direct else n_keep,
                                 self.problem.dim))
        self.adaptive = getattr(self.estimator, "is_adaptive", False)
        if self.adaptive and log_sizes:
            self.estimator.start_size_log(n_steps * (spec.ewsg_chain_length + 1))
        self.done = self.kept = 0
        self.diverged = False
        self.report = {}

    def view(self, keep):
        """Where the next segment writes its kept draws (None: nothing kept)."""
        return (self.samples if self.direct else self.samples[self.kept:]) if keep else None

    def record(self, n_done, n_kept, chunk, control):
        """A segment's outcome: its draws to the sink, its steps counted."""
        if self.direct:
            self.sink.write(self.samples[:n_kept])
        self.done += n_done
        self.kept += n_kept
        self.diverged = n_done < chunk
        if control is not None:
            control.report(self.chain_id, n_done)

    def result(self, seconds, adapt, log_sizes):
        """The chain's :class:`ChainResult` (its lazy coordinates brought up to date)."""
        if self.kernel is not None and not self.diverged:
            self.kernel.finish(self.theta)
        samples = None if self.direct else self.samples     # direct: in the store
        reason = ""
        if self.diverged:
            reason = self.report.get("reason", "far")
            if samples is not None:
                samples = samples[:self.kept]
        if adapt.get("finish"):
            self.dynamics.finish_adaptation()
        estimator = self.estimator
        new_state = ChainState(self.theta.copy(), self.dynamics.get_state(),
                               estimator.get_state() if hasattr(estimator, "get_state") else None,
                               self.bitgen.state)
        return ChainResult(samples, new_state, estimator.n_evals, self.done, self.diverged,
                           seconds, reason,
                           estimator.size_log_values() if (self.adaptive and log_sizes) else None,
                           self.dynamics.acceptance_rate, self.dynamics.step_size)


def _run_chains(X, y, spec, states, n_steps, thin, keep, adapt, chain_ids, phase, log_sizes,
                control, sinks, grouped):
    t0 = time.perf_counter()
    # the main thread (n_jobs=1) runs Ctrl-C's handler from within the loop
    stop = StopPoll(None if control is None else control.flag)
    adapt = adapt or {}
    chains = [_Running(X, y, spec, state, c, n_steps, thin, keep, adapt, log_sizes, sink,
                       grouped) for state, c, sink in zip(states, chain_ids, sinks)]
    group = ChainGroup(chains[0].estimator, len(chains)) if grouped else None
    segment = FIRST_SEGMENT_STEPS
    slack = 1.0 if keep else WARMUP_SLACK
    limits = (spec.max_abs_z * slack,
              None if spec.bounds is None else
              (spec.bounds[0], spec.bounds[1], spec.bounds[2] * slack))
    done = 0
    active = chains
    while done < n_steps and active:
        chunk = min(segment, n_steps - done)
        if active[0].direct:
            # the kept draws of (done % thin + chunk) steps fit the scratch
            chunk = min(chunk, active[0].scratch_rows * thin - done % thin)
        t_seg = time.perf_counter()
        outcomes = _segments(active, group, chunk, thin, keep, limits, done, stop)
        seconds = time.perf_counter() - t_seg
        if stop.stopped:
            raise ChainStopped(active[0].chain_id)
        for chain, (n_done, n_kept) in zip(active, outcomes):
            chain.record(n_done, n_kept, chunk, control)
        done += chunk
        active = [chain for chain in active if not chain.diverged]
        # the next call lasts about SEGMENT_SECONDS (at most double the last)
        steps = chunk * (GROUP_SEGMENT_SECONDS if grouped else SEGMENT_SECONDS) / max(seconds,
                                                                                     1e-9)
        segment = int(min(SEGMENT_STEPS * thin, 2 * segment, max(1, steps)))
    seconds = time.perf_counter() - t0
    return [chain.result(seconds, adapt, log_sizes) for chain in chains]


def _segments(chains, group, chunk, thin, keep, limits, offset, stop):
    """One segment of every chain: ``(n_done, n_kept)`` each."""
    max_abs_z, bounds = limits
    if group is not None:
        return run_group_segment(group, [c.oracle for c in chains], [c.dynamics for c in chains],
                                 [c.theta for c in chains], chunk, thin,
                                 [c.view(keep) for c in chains], [c.bitgen for c in chains],
                                 CHECK_EVERY, max_abs_z, bounds, [c.report for c in chains],
                                 offset, stop)
    chain, = chains
    if chain.kernel is not None:
        return [chain.kernel.run(chunk, thin, chain.view(keep), chain.bitgen,
                                 max_abs_z=max_abs_z, bounds=bounds, report=chain.report,
                                 offset=offset, stop=stop)]
    return [run_segment(chain.oracle, chain.dynamics, chain.theta, chunk, thin,
                        chain.view(keep), chain.bitgen, CHECK_EVERY, max_abs_z=max_abs_z,
                        bounds=bounds, report=chain.report, offset=offset, stop=stop)]


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
    progress: object = None          # FitProgress (verbose > 0) or None
    t_start: float = None            # perf_counter() when the fit began (its set-up)
    _parallel: object = None         # joblib Parallel, or ClusterRounds on a dask cluster

    @property
    def n_chains(self):
        return len(self.states)

    @property
    def workers(self):
        """The chain rounds' joblib ``n_jobs`` (:func:`chain_workers`)."""
        return chain_workers(self.n_jobs, self.n_chains)

    @contextmanager
    def session(self):
        """The rounds' executor, set up once per fit: one joblib ``Parallel``
        (its workers started once), or on joblib's dask backend the fit's own
        dask tasks (:mod:`._cluster`: a lost worker is retried or raises, never
        hangs; ``X`` is scattered to the workers once)."""
        if self.spec.verbose and self.progress is None:
            self.progress = FitProgress(self.n_chains, self.spec.verbose,
                                        t_start=self.t_start)
        with progress_guard(self.progress), self._executor() as executor:
            self._parallel = executor
            try:
                yield self
            finally:
                self._parallel = None

    @contextmanager
    def _executor(self):
        backend = active_dask_backend()
        if backend is None:
            with Parallel(n_jobs=self.workers, prefer="threads") as parallel:
                yield parallel
            return
        rounds = ClusterRounds(backend, self.X, self.y)
        try:
            yield rounds
        finally:
            rounds.close()

    def plan_phase(self, phase, steps):
        """Progress: the phase ``phase`` plans ``steps`` more steps per chain
        (its ETA covers them)."""
        if self.progress is not None:
            self.progress.expect(phase, steps, exact=True)

    def finish_progress(self, ess, rhat, target_ess):
        """Progress: the final line (min bulk ESS, max R-hat)."""
        if self.progress is not None:
            self.progress.finish(ess, rhat, target_ess)


    def advance(self, n_steps, thin=1, keep=True, adapt=None, phase="sampling",
                log_sizes=False, store=None):
        """Run every chain ``n_steps`` steps; return their results (states are
        updated; a diverged chain's result has ``diverged`` set).  With a
        :class:`~._draws.DrawStore` the kept draws go into it (the results'
        ``samples`` are then None)."""
        if n_steps <= 0:
            return [ChainResult(np.empty((0, len(s.theta))), s, 0, 0, False, 0.0)
                    for s in self.states]
        if store is not None and keep:
            store.reserve(n_steps // thin)   # room for every chain's draws of this call
        if self._parallel is None:       # a call outside session(): its own executor
            with self._executor() as self._parallel:
                try:
                    return self.advance(n_steps, thin, keep, adapt, phase, log_sizes, store)
                finally:
                    self._parallel = None
        progress = self.progress
        if progress is not None:
            # warm-up windows are one phase; the plan may already hold this call
            progress.expect(phase.split(" (")[0], n_steps)
            done0 = progress.done
        control = ChainControl(progress)
        try:
            if isinstance(self._parallel, ClusterRounds):
                # in other processes: the draws come back; a cancelled task stops
                results = self._parallel.run(run_chain, self.states, phase, spec=self.spec,
                                             n_steps=n_steps, thin=thin, keep=keep,
                                             adapt=adapt, log_sizes=log_sizes,
                                             control=ChainControl(stop_when=task_cancelled))
            else:
                results = self._run_threads(n_steps, thin, keep, adapt, phase, log_sizes,
                                            control, store)
        except BaseException:
            # KeyboardInterrupt (or any error) here: the chain threads still
            # running stop within a gradient; wait for them, so that nothing
            # keeps sampling after fit has returned
            control.stop_and_wait(timeout=STOP_TIMEOUT)
            raise
        if progress is not None:
            # chains in another process reported nothing: count their steps now
            progress.add(0, sum(r.n_steps_done for r in results) - (progress.done - done0))
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

    def _run_threads(self, n_steps, thin, keep, adapt, phase, log_sizes, control, store):
        """A round in this process's threads: a task a chain, or a task a
        group of chains in lockstep (:func:`lockstep_groups`)."""
        def sink(c):
            return None if store is None else store.sink(c)
        groups = lockstep_groups(self.X, self.spec, self.n_chains, self.workers)
        if groups is None:
            return self._parallel(
                delayed(run_chain)(self.X, self.y, self.spec, state, n_steps, thin, keep,
                                   adapt, chain_id=c, phase=phase, log_sizes=log_sizes,
                                   control=control, sink=sink(c))
                for c, state in enumerate(self.states))
        grouped = self._parallel(
            delayed(run_chain_group)(self.X, self.y, self.spec, [self.states[c] for c in ids],
                                     n_steps, thin, keep, adapt, chain_ids=ids, phase=phase,
                                     log_sizes=log_sizes, control=control,
                                     sinks=[sink(c) for c in ids])
            for ids in groups)
        return [result for results in grouped for result in results]

    def set_step(self, step_size, momentum_scale=1.0):
        """Every chain continues with ``step_size`` from where it is (a
        diverged chain from its last good state), its momentum redrawn.

        A chain's step lives in its state (its dynamics' ``step_size``, which
        dual averaging adapts per chain); the config's is only where the
        chains started, so it is not written here."""
        if any(state.dynamics is None for state in self.states):
            raise RuntimeError("set_step before the chains ran: set the config's step")
        self.states = [replace(state, dynamics=with_step(state.dynamics, step_size))
                       for state in self.states]
        self.rebase(self.spec.metric, momentum_scale)

    def step_sizes(self):
        """Every chain's current step (from its state: the chains have run)."""
        return np.array([state_step(s.dynamics) for s in self.states])

    def rebase(self, new_metric, momentum_scale=1.0):
        """Move every chain to the coordinates of ``new_metric`` (same
        parameters): ``z' = L'^-1 (center + L z - center')``.  Momenta are
        redrawn from their stationary law (a valid Gibbs step for any
        target) with each chain's own random stream, cached gradients dropped."""
        old = Metric.from_config(self.spec.metric)
        new = Metric.from_config(new_metric)
        definition = DYNAMICS[self.spec.sampler]
        momentum = definition.momentum_key if definition.has_momentum else None
        self.states = [_rebased(state, old, new, momentum, momentum_scale)
                       for state in self.states]
        bounds = self.spec.bounds
        if bounds is not None and new_metric["kind"] == "dense":
            # the adapted metric estimates the posterior's own sds: where
            # they exceed the Laplace ones (skewed, heavy-tailed posteriors)
            # the bounds follow them
            center, sd, max_sds = bounds
            F = np.asarray(new_metric["factor"])
            bounds = (center, np.maximum(sd, np.sqrt(np.einsum("ij,ij->i", F, F))), max_sds)
        self.spec = replace(self.spec, metric=new_metric, bounds=bounds)


def _rebased(state, old, new, momentum, momentum_scale):
    """:meth:`ChainPool.rebase` of one chain: a new state at the same
    parameters in ``new``'s coordinates, its cached gradient dropped and its
    momentum (the dynamics' entry ``momentum``; None: none) redrawn from its
    own random stream."""
    theta = new.py_to_z(old.py_to_theta(state.theta))
    if state.dynamics is None:
        return replace(state, theta=theta)
    dyn = without_cached_gradient(state.dynamics)
    bitgen = np.random.PCG64()
    bitgen.state = state.bit_generator
    gen = np.random.Generator(bitgen)
    if momentum is not None:     # a KeyError here: the definition names another key
        dyn[momentum] = momentum_scale * gen.standard_normal(len(dyn[momentum]))
    return replace(state, theta=theta, dynamics=dyn, bit_generator=bitgen.state)


def chain_workers(n_jobs, n_chains):
    """joblib's ``n_jobs`` for the chain rounds.

    The user's ``n_jobs`` where set, and joblib's where a
    ``parallel_config`` sets a backend or ``n_jobs`` (a dask cluster, an
    outer loop's threads).  Otherwise (``None`` and no configuration) one
    thread per core this process may run on, at most ``OMP_NUM_THREADS``
    (:func:`~._row_algebra.pass_threads`) and one per chain: every default
    fit uses the machine's cores the way scikit-learn's OpenMP estimators
    do, and in the workers of an outer joblib loop (whose
    ``OMP_NUM_THREADS`` joblib lowers) it keeps to its share.  The draws do
    not depend on it, unless the fit's time budget cuts a phase short (where
    it cuts depends on the measured speed)."""
    if n_jobs is not None:
        return n_jobs
    backend, configured = get_active_backend()
    if configured is not None or type(backend) is not BACKENDS[DEFAULT_BACKEND]:
        return None
    return min(pass_threads(), max(int(n_chains), 1))
