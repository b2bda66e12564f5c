"""Run one chain: a picklable task, so any joblib backend (threads, loky,
dask) can execute it.  The nogil loop releases the GIL, so the default
thread backend runs chains truly in parallel without copying ``X``."""
import time
from dataclasses import dataclass

import numpy as np

from ._chain import ChainOracle, run_segment
from ._dataset import RowData
from ._estimators import Problem
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
    """Everything a chain needs besides the data (all picklable)."""

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
    n_warmup: int
    n_samples: int
    thin: int
    verbose: int = 0


@dataclass
class ChainResult:
    samples: np.ndarray       # (n_samples, dim), all finite
    state: dict               # theta, dynamics state, bit generator state
    n_grad_evals: int
    n_steps_done: int
    diverged: bool
    seconds: float
    batch_sizes: object = None  # adaptive estimators: sizes drawn while sampling


class _Progress:
    """Progress of one chain: a tqdm bar (optional dependency) or text lines.

    ``verbose=1`` shows a bar per chain when tqdm is installed (steps/s and
    ETA; ``position=chain_id`` stacks the bars of parallel chains), else one
    line per ``SEGMENT_STEPS`` steps with the rate and ETA; ``verbose>=2``
    always prints the lines (logs, dask workers).
    """

    def __init__(self, chain_id, total, verbose):
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
                self.bar = tqdm(total=total, desc=f"chain {chain_id}", unit="step",
                                unit_scale=True, position=chain_id, leave=True,
                                mininterval=PROGRESS_SECONDS, dynamic_ncols=True)

    def update(self, phase, n_steps, phase_done, phase_total):
        self.done += n_steps
        if self.bar is not None:
            self.bar.set_postfix_str(phase, refresh=False)
            self.bar.update(n_steps)
            return
        if self.done < self.next_line and phase_done < phase_total:
            return
        self.next_line = self.done + SEGMENT_STEPS
        elapsed = max(time.perf_counter() - self.t0, 1e-9)
        rate = self.done / elapsed
        eta = (self.total - self.done) / max(rate, 1e-9)
        print(f"[chain {self.chain_id}] {phase}: {phase_done}/{phase_total} steps "
              f"({rate:,.0f} steps/s, ETA {eta:,.0f} s)", flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def run_chain(X, y, spec, seed_or_state, theta0, chain_id=0):
    """Run warm-up then sampling for one chain.

    Parameters
    ----------
    X, y : data (see :class:`FitContext`).
    spec : ChainSpec
    seed_or_state : numpy.random.SeedSequence or dict
        A fresh seed, or the state saved by a previous run (warm start).
    theta0 : ndarray of shape (dim,)
        Start point (ignored when continuing from a saved state).
    chain_id : int
        Used in progress messages.

    Returns
    -------
    ChainResult
    """
    t0 = time.perf_counter()
    bitgen = np.random.PCG64()
    dyn_state = est_state = None
    if isinstance(seed_or_state, dict):
        bitgen.state = seed_or_state["bit_generator"]
        theta = np.array(seed_or_state["theta"], dtype=np.float64)
        dyn_state = seed_or_state["dynamics"]
        est_state = seed_or_state.get("estimator")
    else:
        bitgen = np.random.PCG64(seed_or_state)
        theta = np.array(theta0, dtype=np.float64)
    generator = np.random.Generator(bitgen)

    problem = Problem(RowData(X, spec.fit_intercept), y, spec.model, spec.n_outputs,
                      spec.noise_var)
    estimator = SUBSAMPLINGS[spec.subsampling].build(problem, spec.subsampling_config)
    if est_state is not None and hasattr(estimator, "set_state"):
        estimator.set_state(est_state)  # tables, snapshot, schedule, cursor
    dynamics = SAMPLERS[spec.sampler].build(problem.dim, spec.sampler_config, dyn_state,
                                            generator)
    oracle = ChainOracle(estimator, spec.alpha, spec.ewsg_chain_length, dynamics, spec.ewsg_x)

    samples = np.empty((spec.n_samples, problem.dim))
    adaptive = getattr(estimator, "is_adaptive", False)
    n_done_total, diverged = 0, False
    phases = [("warm-up", spec.n_warmup, None), ("sampling", spec.n_samples * spec.thin, samples)]
    progress = (_Progress(chain_id, spec.n_warmup + spec.n_samples * spec.thin, spec.verbose)
                if spec.verbose else None)
    segment = SEGMENT_STEPS if progress is None else min(SEGMENT_STEPS, 1000)
    for phase, n_steps, out in phases:
        done, kept = 0, 0
        if adaptive and out is not None:
            estimator.start_size_log(n_steps * (spec.ewsg_chain_length + 1))
        while done < n_steps and not diverged:
            chunk = min(segment * spec.thin, n_steps - done)
            view = out[kept:] if out is not None else None
            t_seg = time.perf_counter()
            n_done, n_kept = run_segment(oracle, dynamics, theta, chunk, spec.thin, view, bitgen)
            seconds = time.perf_counter() - t_seg
            done += n_done
            kept += n_kept
            n_done_total += n_done
            diverged = n_done < chunk
            if progress is not None:
                progress.update(phase, n_done, done, n_steps)
                if seconds > 0 and n_done:
                    # next segment lasts about PROGRESS_SECONDS
                    steps = n_done * PROGRESS_SECONDS / seconds / spec.thin
                    segment = int(min(SEGMENT_STEPS, max(1, steps)))
        if diverged:
            samples = samples[:kept] if out is not None else samples[:0]
            break
    if progress is not None:
        progress.close()
    state = {"theta": theta.copy(), "dynamics": dynamics.get_state(),
             "estimator": estimator.get_state() if hasattr(estimator, "get_state") else None,
             "bit_generator": bitgen.state}
    return ChainResult(samples, state, oracle.n_evals, n_done_total, diverged,
                       time.perf_counter() - t0,
                       estimator.size_log_values() if adaptive else None)
