"""Speed of one SGLD data pass, as ratios against references timed in the same run.

Problems:
- dense 581,012 x 54 logistic regression (covertype-shaped, synthetic, float64);
- CSR a9a (32,561 x 123, ../shared/data/a9a.gz), if present.

For each: one data pass of SGLD with uniform minibatches of 50 (n/50 steps),
timed (a) inside the engine (``sampling_time_``: the nogil loop) and (b) as a
whole ``fit`` call (validation included; init="zeros" and a fixed step size,
so no mode search or power iteration).  References, same run, same data:
``SGDClassifier(loss="log_loss", max_iter=1)`` (one epoch) and a numpy scan
``X.sum()`` (for CSR: ``X.data.sum()``).  Medians over repeats.

Targets (issue 2): SGLD pass <= 1/3 of the SGDClassifier epoch and <= 4x the scan.

Every measurement runs single-threaded in the calling thread (the chain too:
n_jobs=None runs it in place), and is taken as the thread's CPU time
(``time.thread_time``), so other processes on a shared machine do not
distort the ratios; ``--wall`` uses wall-clock time instead.

Usage: python benchmarks/bench_speed.py [--repeats 5] [--n-rows 581012]
"""
import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.datasets import load_svmlight_file
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import SGDClassifier

import scipy.sparse as sp

from skbayes_sg import SGMCMCLogisticRegression
from skbayes_sg._sampling._chain import ChainOracle, run_segment
from skbayes_sg._sampling._dataset import RowData
from skbayes_sg._sampling._dynamics import SGLD
from skbayes_sg._sampling._estimators import Problem, UniformSubsampling

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import covertype_like  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


CLOCK = time.thread_time


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = CLOCK()
        fn()
        times.append(CLOCK() - t0)
    return float(np.median(times))


def bench(name, X, y, repeats, batch=50, scan=None):
    n = X.shape[0]
    steps = n // batch

    def sgld_fit():
        est = SGMCMCLogisticRegression(
            metric="identity", metropolis=False,
            sampler="sgld", subsampling="uniform", batch_size=batch, step_size=1e-6,
            n_samples=steps, n_warmup=0, n_chains=1, init="zeros", random_state=0)
        est.fit(X, y)
        return est

    def sgld_engine_pass():
        # the nogil loop alone: one pass of SGLD through the engine's own API
        Xe = X if sp.issparse(X) else np.ascontiguousarray(X)
        problem = Problem(RowData(Xe, True), y.astype(np.float64), "logistic", 1)
        oracle = ChainOracle(UniformSubsampling(problem, batch), 1.0)
        dynamics = SGLD(problem.dim, 1e-6, 1.0)
        theta = np.zeros(problem.dim)
        run_segment(oracle, dynamics, theta, steps, 1, None, np.random.PCG64(0))

    def sgd_epoch():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            SGDClassifier(loss="log_loss", max_iter=1, tol=None, random_state=0).fit(X, y)

    scan = scan or (lambda: X.sum())
    # the hardware floor of random row access: gather the rows one SGLD pass
    # visits (same count, uniform with replacement) and sum them
    rows = np.random.default_rng(1).integers(0, n, steps * batch)
    gather = lambda: X[rows].sum()  # noqa: E731
    sgld_fit()  # warm-up (imports, page faults)
    t_fit = median_time(sgld_fit, repeats)
    t_engine = median_time(sgld_engine_pass, repeats)
    t_sgd = median_time(sgd_epoch, repeats)
    t_scan = median_time(scan, repeats)
    t_gather = median_time(gather, repeats)
    print(f"\n== {name}: n={n}, d={X.shape[1]}, one SGLD pass = {steps} steps of b={batch}")
    print(f"  numpy scan            {t_scan * 1e3:9.1f} ms")
    print(f"  numpy random gather   {t_gather * 1e3:9.1f} ms   (X[rows].sum(), rows of one pass:"
          " the floor of random row access)")
    print(f"  SGDClassifier epoch   {t_sgd * 1e3:9.1f} ms")
    print(f"  SGLD pass (engine)    {t_engine * 1e3:9.1f} ms   "
          f"ratio to SGD epoch {t_engine / t_sgd:5.2f} (target <= 0.33), "
          f"to scan {t_engine / t_scan:5.2f} (target <= 4), "
          f"to gather {t_engine / t_gather:5.2f}")
    print(f"  SGLD pass (whole fit) {t_fit * 1e3:9.1f} ms   "
          f"ratio to SGD epoch {t_fit / t_sgd:5.2f}, to scan {t_fit / t_scan:5.2f}")
    return {"engine": t_engine, "fit": t_fit, "sgd": t_sgd, "scan": t_scan, "gather": t_gather}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--n-rows", type=int, default=581012)
    parser.add_argument("--wall", action="store_true", help="time with the wall clock")
    args = parser.parse_args()
    global CLOCK
    if args.wall:
        CLOCK = time.perf_counter
    print(f"clock: {'wall' if args.wall else 'thread CPU time'}; medians of {args.repeats}")

    X, y = covertype_like(args.n_rows)
    bench("dense covertype-shaped (float64)", X, y, args.repeats)
    bench("dense covertype-shaped (float32)", X.astype(np.float32), y, args.repeats)

    path = DATA / "a9a.gz"
    if path.exists():
        Xs, ys = load_svmlight_file(str(path), n_features=123)
        Xs = Xs.tocsr()
        Xs.indices = Xs.indices.astype(np.int32)
        Xs.indptr = Xs.indptr.astype(np.int32)
        bench("CSR a9a", Xs, ys, args.repeats, scan=lambda: Xs.data.sum())
    else:
        print(f"\n(a9a not found at {path}; CSR benchmark skipped)")


if __name__ == "__main__":
    main()
