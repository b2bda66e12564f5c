"""Sparse high-dimensional logistic regression: the cost of a data pass as d grows.

CSR data, 100,000 rows, 20 non-zeros a row (uniform columns, values N(0, 1)),
labels from a sparse true coefficient vector; minibatches of 50.  For each d
from 10^3 to 10^6 it times, in the same run and interleaved (the best of
``--repeats`` rounds each, so that a busy moment hits every entry alike):

* one epoch of ``sklearn.linear_model.SGDClassifier(loss="log_loss")`` (the
  reference: O(nnz) a step, lazy L2 shrinkage by a scalar);
* one data pass (n / b steps) of our chains, eager (every coordinate moves
  every step: O(d) a step) up to ``--eager-max-dim``, and lazy (only the
  minibatch's columns, the others caught up exactly when touched: O(nnz) a
  step, what a fit runs on sparse data where a step touches under a quarter
  of the coordinates): SGLD, SGHMC (Euler), ULD and BAOAB with uniform
  minibatches, SGLD and BAOAB with a control variate (``cv``: a fixed residual
  table and its constant drift); in the identity metric (the momentum
  dynamics' k-step laws are shared and tabulated: O(1) a catch-up) and in a
  diagonal metric with scales spread over [0.5, 2], on the grid ``2^(i/8)`` a
  lazy fit puts them on (a table per scale class: O(1)) and off it (one law
  per coordinate, composed in O(log k)), each including the catch-up of
  every coordinate at the end of the pass.

and prints ms a pass, the ratio to the SGD epoch and the µs a step.  Set-up
(the problem, the estimator's tables, the lazy kernel's per-coordinate
recursions and its final catch-up) is excluded from the pass time and
printed apart: a fit pays it once per chain and round.

Usage: ``python benchmarks/bench_sparse_scaling.py [--rows 100000] [--dims 1e3 1e4 1e5 1e6]``
"""
import argparse
import time
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.linear_model import SGDClassifier

from skbayes_sg._sampling._chain import ChainOracle, run_segment
from skbayes_sg._sampling._dataset import RowData
from skbayes_sg._sampling._dynamics import BAOAB, SGHMC, SGLD, ULD
from skbayes_sg._sampling._estimators import GLMEstimator, Problem, UniformSubsampling
from skbayes_sg._sampling._kernel_rules import on_lazy_grid
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


def sgd_epoch(X, y):
    clf = SGDClassifier(loss="log_loss", max_iter=1, tol=None, alpha=1e-4, random_state=0)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.fit(X, y.astype(int))
    return time.perf_counter() - t


DYNAMICS = {
    "sgld": lambda dim: SGLD(dim, 1e-5, 1.0),
    "sghmc": lambda dim: SGHMC(dim, 1e-3, 1.0, 1.0),
    "uld": lambda dim: ULD(dim, 1e-3, 1.0, 1.0, 1.0),
    "baoab": lambda dim: BAOAB(dim, 1e-3, 1.0, 1.0),
}


def chain_pass(X, y, sampler, lazy, control, metric_kind):
    """One data pass of a chain (step 1e-5 SGLD, 1e-3 for the momentum
    dynamics; the cost does not depend on it): returns (seconds of the pass,
    seconds of set-up: the estimator's tables, the lazy kernel's records and
    its final catch-up)."""
    n = X.shape[0]
    prob = Problem(RowData(X, True), y, "logistic", 1)
    t0 = time.perf_counter()
    if control:
        # a control-variate table at theta = 0 (the cost does not depend on where)
        est = GLMEstimator(prob, BATCH, access="random", control="fixed",
                           control_point=np.zeros(prob.dim),
                           control_residuals=(0.5 - y), control_sum=None)
    else:
        est = UniformSubsampling(prob, BATCH)
    setup = time.perf_counter() - t0
    dyn = DYNAMICS[sampler](prob.dim)
    if metric_kind.startswith("diagonal"):
        scales = np.exp(np.random.default_rng(1).uniform(np.log(0.5), np.log(2.0), prob.dim))
        metric = Metric(prob.dim, "diagonal", np.zeros(prob.dim), scales, 1.0, 1.0)
        if metric_kind == "diagonal":    # as a lazy fit makes it: scales on the grid
            metric = Metric.from_config(on_lazy_grid(metric.get_config()))
    else:
        metric = Metric(prob.dim)
    steps = n // BATCH
    theta = np.zeros(prob.dim)
    bitgen = np.random.PCG64(0)
    if not lazy:
        oracle = ChainOracle(est, 1.0, 0, dyn, 0, metric)
        t = time.perf_counter()
        run_segment(oracle, dyn, theta, steps, 1, None, bitgen)
        return time.perf_counter() - t, setup
    t0 = time.perf_counter()
    kernel = LazyChain(est, 1.0, metric, dyn, theta)
    setup += time.perf_counter() - t0
    t = time.perf_counter()
    kernel.run(steps, 1, None, bitgen)
    seconds = time.perf_counter() - t
    t0 = time.perf_counter()
    kernel.finish(theta)
    return seconds, setup + time.perf_counter() - t0


def configurations(d, eager_max_dim):
    """(label, sampler, lazy, control, metric) of every timed chain."""
    rows = []
    if d <= eager_max_dim:
        rows += [("SGLD eager", "sgld", False, False, "identity"),
                 ("SGHMC eager", "sghmc", False, False, "identity")]
    rows += [(f"{name} lazy", sampler, True, False, "identity")
             for name, sampler in (("SGLD", "sgld"), ("SGHMC", "sghmc"), ("ULD", "uld"),
                                   ("BAOAB", "baoab"))]
    rows += [("SGLD-CV lazy", "sgld", True, True, "identity"),
             ("BAOAB-CV lazy", "baoab", True, True, "identity"),
             ("SGLD lazy, diagonal", "sgld", True, False, "diagonal"),
             ("SGHMC lazy, diagonal", "sghmc", True, False, "diagonal"),
             ("BAOAB lazy, diagonal", "baoab", True, False, "diagonal"),
             ("BAOAB-CV lazy, diagonal", "baoab", True, True, "diagonal"),
             ("BAOAB lazy, off grid", "baoab", True, False, "diagonal, off grid")]
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dims", type=float, nargs="+", default=[1e3, 1e4, 1e5, 1e6])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--eager-max-dim", type=float, default=1e5,
                        help="skip the eager loop above this d (it is O(d) a step)")
    args = parser.parse_args()
    steps = args.rows // BATCH
    print(f"CSR logistic, {args.rows:,} rows, {NNZ} non-zeros a row, batch {BATCH} "
          f"({steps:,} steps a pass); best of {args.repeats} interleaved rounds")
    header = f"{'d':>9} | {'chain':<24} | {'ms/pass':>8} | {'/ SGD':>6} | {'us/step':>7} | {'set-up':>9}"
    print(header)
    print("-" * len(header))
    per_pass = {}
    for d in [int(v) for v in args.dims]:
        X, y = make_problem(args.rows, d)
        configs = configurations(d, args.eager_max_dim)
        sgd = np.inf
        best = {c[0]: (np.inf, np.inf) for c in configs}
        for _ in range(args.repeats):
            sgd = min(sgd, sgd_epoch(X, y))
            for label, sampler, lazy, control, metric_kind in configs:
                seconds, setup = chain_pass(X, y, sampler, lazy, control, metric_kind)
                best[label] = (min(best[label][0], seconds), min(best[label][1], setup))
        print(f"{d:>9,} | {'SGDClassifier epoch':<24} | {1e3 * sgd:8.1f} | {1.0:6.2f} | "
              f"{1e6 * sgd / steps:7.1f} | {'':>9}")
        for label, (seconds, setup) in best.items():
            per_pass.setdefault(label, {})[d] = seconds
            print(f"{'':>9} | {label:<24} | {1e3 * seconds:8.1f} | {seconds / sgd:6.2f} | "
                  f"{1e6 * seconds / steps:7.1f} | {1e3 * setup:7.1f}ms")
    dims = [int(v) for v in args.dims]
    if len(dims) > 1:
        print(f"\ntime a pass at d = {dims[-1]:,} over d = {dims[0]:,} (lazy chains):")
        for label, by_d in per_pass.items():
            if dims[0] in by_d and dims[-1] in by_d:
                print(f"  {label:<24} {by_d[dims[-1]] / by_d[dims[0]]:5.2f}")


if __name__ == "__main__":
    main()
