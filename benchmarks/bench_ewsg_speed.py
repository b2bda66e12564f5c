"""Cost of EWSG per evaluated datum-gradient, against uniform SGHMC.

EWSG (sampler "sghmc" + subsampling "ewsg", M = 1) draws 2 candidate
minibatches per step and runs one Metropolis index-chain step on their
whitened gradients; uniform SGHMC draws one.  At the same number of per-datum
gradient evaluations (EWSG takes half the steps), the time per evaluated
datum-gradient should be about the same: target ratio EWSG / SGHMC <= 1.2.

Problems: CSR a9a (32,561 x 123, ../shared/data/a9a.gz) and a dense
covertype-shaped synthetic logistic problem (581,012 x 54 float64, as in
bench_speed.py); batch 50, friction 50, a small step (timing only).

Timing: the engine loop (``run_segment``: one nogil loop in the calling
thread) is timed with ``time.thread_time()`` (CPU time of this thread), so
other processes competing for the cores do not inflate it; each repeat runs
EWSG and SGHMC back to back (order alternating) on fresh chains; medians over
repeats, plus the median of the per-repeat ratios.  For reference the public
API's ``sampling_time_`` (wall clock of the chain) / ``n_grad_evals_`` is
shown too.

Usage: python benchmarks/bench_ewsg_speed.py [--repeats 15] [--n-rows 581012]
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import covertype_like, load_a9a, results_dir, tee_stdout  # noqa: E402

from skbayes_sg import SGMCMCLogisticRegression  # noqa: E402
from skbayes_sg._sampling._chain import EWSG_X_MODES, ChainOracle, run_segment  # noqa: E402
from skbayes_sg._sampling._dataset import RowData  # noqa: E402
from skbayes_sg._sampling._dynamics import SGHMC  # noqa: E402
from skbayes_sg._sampling._estimators import Problem, UniformSubsampling  # noqa: E402

BATCH = 50
GAMMA = 50.0
ALPHA = 0.1
TARGET = 1.2


def engine_run(problem, M, n_evals, h, seed):
    """Thread CPU seconds of run_segment for ``n_evals`` datum-gradients (M = 0: SGHMC)."""
    steps = n_evals // (BATCH * (M + 1))
    est = UniformSubsampling(problem, BATCH)
    dyn = SGHMC(problem.dim, h, 1.0, friction=GAMMA,
                r0=np.random.default_rng(seed).standard_normal(problem.dim))
    oracle = ChainOracle(est, ALPHA, M, dyn, EWSG_X_MODES["auto"])
    theta = np.zeros(problem.dim)
    bg = np.random.PCG64(seed)
    t0 = time.thread_time()
    n_done, _ = run_segment(oracle, dyn, theta, steps, 1, None, bg)
    dt = time.thread_time() - t0
    if n_done != steps:
        raise RuntimeError(f"chain diverged after {n_done} of {steps} steps: lower h")
    assert oracle.n_evals == steps * BATCH * (M + 1)
    return dt, oracle.n_evals


def api_run(X, y, M, n_evals, h, seed):
    steps = n_evals // (BATCH * (M + 1))
    est = SGMCMCLogisticRegression(
        metric="identity", metropolis=False,
        sampler="sghmc", subsampling="ewsg" if M else "uniform", ewsg_chain_length=max(M, 1),
        step_size=h, friction=GAMMA, batch_size=BATCH, alpha=ALPHA, n_samples=1,
        n_warmup=steps - 1, n_chains=1, init="zeros", random_state=seed).fit(X, y)
    return est.sampling_time_, est.n_grad_evals_


def bench(name, X, y, passes, repeats, h):
    n = X.shape[0]
    problem = Problem(RowData(X, True), y.astype(np.float64), "logistic", 1)
    n_evals = (passes * n) // (2 * BATCH) * 2 * BATCH   # divisible by both step sizes
    per = {0: [], 1: []}
    engine_run(problem, 1, n_evals // 10, h, 999)  # warm-up
    engine_run(problem, 0, n_evals // 10, h, 999)
    for r in range(repeats):
        for M in ((0, 1) if r % 2 == 0 else (1, 0)):
            dt, ev = engine_run(problem, M, n_evals, h, r)
            per[M].append(dt / ev)
    s, e = np.array(per[0]), np.array(per[1])
    ratio_med = np.median(e) / np.median(s)
    ratio_pair = np.median(e / s)
    api = {M: [] for M in (0, 1)}
    for r in range(max(3, repeats // 3)):
        for M in (0, 1):
            t, ev = api_run(X, y, M, n_evals, h, r)
            api[M].append(t / ev)
    api_ratio = np.median(api[1]) / np.median(api[0])
    print(f"\n== {name}: n={n}, d={X.shape[1]}, batch {BATCH}, {n_evals:,} datum-gradients per "
          f"repeat ({n_evals / n:.2f} passes; SGHMC {n_evals // BATCH} steps, "
          f"EWSG M=1 {n_evals // (2 * BATCH)} steps), {repeats} repeats")
    print(f"  engine, thread CPU time per datum-gradient:  SGHMC {np.median(s) * 1e9:7.2f} ns "
          f"(IQR {np.percentile(s, 25) * 1e9:.2f}-{np.percentile(s, 75) * 1e9:.2f}),  "
          f"EWSG {np.median(e) * 1e9:7.2f} ns "
          f"(IQR {np.percentile(e, 25) * 1e9:.2f}-{np.percentile(e, 75) * 1e9:.2f})")
    print(f"  ratio EWSG / SGHMC: {ratio_med:.3f} (ratio of medians), {ratio_pair:.3f} "
          f"(median of paired ratios)   target <= {TARGET}: "
          f"{'OK' if ratio_med <= TARGET else 'MISSED'}")
    print(f"  public API, sampling_time_ (wall) / n_grad_evals_:  SGHMC "
          f"{np.median(api[0]) * 1e9:7.2f} ns,  EWSG {np.median(api[1]) * 1e9:7.2f} ns,  "
          f"ratio {api_ratio:.3f}  (wall clock, {len(api[0])} repeats: sensitive to machine load, "
          f"informational)")
    return ratio_med


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--n-rows", type=int, default=581012)
    args = parser.parse_args()
    t0 = time.perf_counter()
    print("EWSG (sghmc + ewsg, M=1) vs uniform SGHMC: time per evaluated datum-gradient "
          "(engine loop timed with time.thread_time(): CPU time of the calling thread)")
    ratios = {}
    try:
        Xs, ys = load_a9a("train")
        ratios["a9a"] = bench("CSR a9a", Xs, ys, passes=20, repeats=args.repeats, h=1e-4)
    except FileNotFoundError as exc:
        print(f"\n(a9a skipped: {exc})")
    X, y = covertype_like(args.n_rows)
    ratios["covertype-like"] = bench("dense covertype-shaped (float64)", X, y, passes=2,
                                     repeats=args.repeats, h=1e-5)
    print("\nsummary: " + ", ".join(f"{k} {v:.3f}" for k, v in ratios.items())
          + f"  (target <= {TARGET});  total {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    with tee_stdout(results_dir() / "ewsg_speed.txt"):
        main()
