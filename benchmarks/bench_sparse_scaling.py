"""Sparse high-dimensional logistic regression: the cost of a data pass as d grows.

CSR data, 100,000 rows, 20 non-zeros a row (uniform columns, values N(0, 1)),
labels from a sparse true coefficient vector; minibatches of 50.  For each d
from 10^3 to 10^6 it times, in the same run:

* one epoch of ``sklearn.linear_model.SGDClassifier(loss="log_loss")`` (the
  reference: O(nnz) a step, lazy L2 shrinkage by a scalar);
* one data pass (n / b steps) of our SGLD and SGHMC (Euler) chains, eager (every coordinate
  moves every step: O(d) a step) and lazy (only the minibatch's columns, the
  others caught up exactly when touched: O(nnz) a step, the default on sparse
  data where a step touches under a quarter of the coordinates; SGHMC's
  untouched (z, r) follow a 2 x 2 recursion caught up in O(log k)), with uniform
  minibatches and, for SGLD, with a control variate (``cv``: a fixed residual table and
  its constant drift), in the identity metric, including the catch-up of
  every coordinate at the end of the pass.

and prints ms a pass and the ratio to the SGD epoch.  Set-up (the problem,
the estimator's tables) is excluded from the pass time and printed apart.

Usage: ``python benchmarks/bench_sparse_scaling.py [--rows 100000] [--dims 1e3 1e4 1e5 1e6]``
"""
import argparse
import time

import numpy as np
import scipy.sparse as sp
from sklearn.linear_model import SGDClassifier

from skbayes_sg._sampling._chain import ChainOracle, run_segment
from skbayes_sg._sampling._dataset import RowData
from skbayes_sg._sampling._dynamics import SGHMC, SGLD
from skbayes_sg._sampling._estimators import GLMEstimator, Problem, UniformSubsampling
from skbayes_sg._sampling._lazy import LazyChain
from skbayes_sg._sampling._metric import Metric

BATCH = 50
NNZ = 20


def make_problem(n, d, seed=0):
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, d, size=n * NNZ)
    rows = np.repeat(np.arange(n), NNZ)
    X = sp.csr_matrix((rng.standard_normal(n * NNZ), (rows, cols)), shape=(n, d))
    X.sum_duplicates()
    w = np.zeros(d)
    support = rng.choice(d, size=min(d, 200), replace=False)
    w[support] = rng.normal(size=support.size)
    y = (X @ w + rng.logistic(size=n) > 0).astype(np.float64)
    return X, y


def time_sgd(X, y, repeats=3):
    best = np.inf
    for _ in range(repeats):
        clf = SGDClassifier(loss="log_loss", max_iter=1, tol=None, alpha=1e-4,
                            random_state=0)
        t = time.perf_counter()
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clf.fit(X, y.astype(int))
        best = min(best, time.perf_counter() - t)
    return best


def time_pass(X, y, lazy, control, repeats=2, sampler="sgld"):
    """Best of ``repeats`` data passes of SGLD (identity metric, step 1e-5),
    and the set-up a chain pays once per round (the estimator's tables; the
    lazy kernel's per-coordinate recursions and the final catch-up of every
    coordinate)."""
    n = X.shape[0]
    prob = Problem(RowData(X, True), y, "logistic", 1, 1.0)
    t0 = time.perf_counter()
    if control:
        # a control-variate table at theta = 0 (the cost does not depend on where)
        est = GLMEstimator(prob, BATCH, access="random", control="fixed",
                           control_point=np.zeros(prob.dim),
                           control_residuals=(0.5 - y), control_sum=None)
    else:
        est = UniformSubsampling(prob, BATCH)
    setup = time.perf_counter() - t0
    dyn = SGLD(prob.dim, 1e-5, 1.0) if sampler == "sgld" else SGHMC(prob.dim, 1e-3, 1.0, 1.0)
    metric = Metric(prob.dim)
    oracle = ChainOracle(est, 1.0, 0, dyn, 0, metric)
    steps = n // BATCH
    theta = np.zeros(prob.dim)
    bitgen = np.random.PCG64(0)
    if lazy:
        t0 = time.perf_counter()
        kernel = LazyChain(est, 1.0, metric, dyn, theta)
        setup += time.perf_counter() - t0
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        if lazy:
            kernel.run(steps, 1, None, bitgen)
        else:
            run_segment(oracle, dyn, theta, steps, 1, None, bitgen)
        best = min(best, time.perf_counter() - t)
    if lazy:
        t0 = time.perf_counter()
        kernel.finish(theta)
        setup += time.perf_counter() - t0
    return best, setup


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dims", type=float, nargs="+", default=[1e3, 1e4, 1e5, 1e6])
    parser.add_argument("--eager-max-dim", type=float, default=1e5,
                        help="skip the eager loop above this d (it is O(d) a step)")
    args = parser.parse_args()
    print(f"CSR logistic, {args.rows:,} rows, {NNZ} non-zeros a row, batch {BATCH}; "
          "ms per data pass (ratio to the SGDClassifier epoch of the same run)")
    header = (f"{'d':>9} | {'SGD epoch':>9} | {'SGLD eager':>16} | {'SGHMC eager':>16} | "
              f"{'SGLD lazy':>16} | {'SGHMC lazy':>16} | "
              f"{'SGLD-CV lazy':>16} | {'lazy us/step':>12} | {'set-up':>11}")
    print(header)
    print("-" * len(header))
    for d in [int(v) for v in args.dims]:
        X, y = make_problem(args.rows, d)
        sgd = time_sgd(X, y)
        cells = []
        for sampler in ("sgld", "sghmc"):
            if d <= args.eager_max_dim:
                eager, _ = time_pass(X, y, lazy=False, control=False, sampler=sampler)
                cells.append(f"{1e3 * eager:8.1f} ({eager / sgd:4.1f}x)")
            else:
                cells.append(f"{'skipped':>16}")
        lazy, setup = time_pass(X, y, lazy=True, control=False)
        cells.append(f"{1e3 * lazy:8.1f} ({lazy / sgd:4.1f}x)")
        lazy_hmc, _ = time_pass(X, y, lazy=True, control=False, sampler="sghmc")
        cells.append(f"{1e3 * lazy_hmc:8.1f} ({lazy_hmc / sgd:4.1f}x)")
        lazy_cv, setup_cv = time_pass(X, y, lazy=True, control=True)
        cells.append(f"{1e3 * lazy_cv:8.1f} ({lazy_cv / sgd:4.1f}x)")
        per_step = 1e6 * lazy / (args.rows // BATCH)
        print(f"{d:>9,} | {1e3 * sgd:7.1f}ms | " + " | ".join(cells)
              + f" | {per_step:12.1f} | {1e3 * setup:9.1f}ms")
    print("set-up: once per chain and round (the lazy kernel's per-coordinate recursions and "
          "its final catch-up); not in the pass times")


if __name__ == "__main__":
    main()
