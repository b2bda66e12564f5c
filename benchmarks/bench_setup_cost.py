"""The whole cost of a one-pass sparse fit against an SGD epoch (issue 25, 0b).

CSR logistic regression, 100,000 rows, 20 non-zeros a row (uniform columns,
values N(0, 1)), labels from a sparse true coefficient vector (the problem of
``bench_sparse_scaling.py``).  For each d from 10^3 to 10^6 it times, in the
same run and interleaved (the best of ``--repeats`` rounds each):

* one epoch of ``sklearn.linear_model.SGDClassifier(loss="log_loss")`` (the
  reference);
* the whole ``est.fit(X, y)`` of a hand-set one-pass SGLD fit,
  ``SGMCMCLogisticRegression(sampler="sgld", step_size=1e-4, batch_size=50,
  init="zeros", n_chains=1, n_warmup=0, n_samples=20, thin=100)``: 2,000
  steps of 50 rows, one pass, 20 draws kept.  Twice:

  - ``metric="identity"``: no set-up pass; after the draws, the check of the
    hand-set step (``_identity_step_error``: Lanczos on Hessian-vector
    products at the start, the minibatch noise in the diagonal Laplace
    metric there);
  - ``metric="auto"`` (everything else the same): the Laplace metric, dense
    up to 2,000 parameters and diagonal above, around the mode (Newton-CG
    and one sparse Gram at d = 10^3, Newton-CG above), the subsampling
    ``"cv-preferential"`` (a batch size is given) and its noise model.  The
    step 1e-4 is then in whitened units (posterior sds): the chain barely
    moves, but a step costs what it costs at any size, and the set-up does
    not depend on it.

and prints the seconds and the ratio to the SGD epoch of each fit, the part of
it spent in the set-up (``_set_up``) and in the step check, and
``n_setup_passes_`` (data passes the set-up counted).  The rest of a fit is
the chain's pass, the convergence diagnostics over every parameter and the
storage of the draws.

Usage: ``python benchmarks/bench_setup_cost.py [--rows 100000] [--dims 1e3 1e4 1e5 1e6]``
"""
import argparse
import time
import warnings

import numpy as np

from bench_sparse_scaling import make_problem, sgd_epoch
from skbayes_sg import SGMCMCLogisticRegression
from skbayes_sg._base import BaseSGMCMC

BATCH = 50
N_SAMPLES = 20
STEP = 1e-4


class _Stopwatch:
    """Seconds spent in some methods of the estimator class during one fit."""

    def __init__(self, names):
        self.names, self.seconds, self._real = names, {}, {}

    def __enter__(self):
        for name in self.names:
            real = self._real[name] = getattr(BaseSGMCMC, name)

            def timed(est, *args, _real=real, _name=name, **kwargs):
                t = time.perf_counter()
                try:
                    return _real(est, *args, **kwargs)
                finally:
                    self.seconds[_name] = (self.seconds.get(_name, 0.0)
                                           + time.perf_counter() - t)
            setattr(BaseSGMCMC, name, timed)
        return self

    def __exit__(self, *exc):
        for name, real in self._real.items():
            setattr(BaseSGMCMC, name, real)


def one_pass_fit(X, y, metric):
    """(seconds of the whole fit, seconds of set-up, seconds of the step
    check, n_setup_passes_, metric_) of the hand-set one-pass SGLD fit."""
    est = SGMCMCLogisticRegression(
        sampler="sgld", metric=metric, step_size=STEP, batch_size=BATCH, init="zeros",
        n_chains=1, n_warmup=0, n_samples=N_SAMPLES, thin=X.shape[0] // BATCH // N_SAMPLES,
        random_state=0)
    with _Stopwatch(["_set_up", "_identity_step_error"]) as watch, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")     # 20 draws are not converged: expected
        t = time.perf_counter()
        est.fit(X, y)
        seconds = time.perf_counter() - t
    return (seconds, watch.seconds.get("_set_up", 0.0),
            watch.seconds.get("_identity_step_error", 0.0), est.n_setup_passes_, est.metric_)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--dims", type=float, nargs="+", default=[1e3, 1e4, 1e5, 1e6])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"CSR logistic, {args.rows:,} rows, 20 non-zeros a row; one-pass SGLD fits "
          f"(batch {BATCH}, step {STEP:g}); best of {args.repeats} interleaved rounds")
    header = (f"{'d':>9} | {'fit':<16} | {'seconds':>8} | {'/ SGD':>6} | {'set-up':>7} | "
              f"{'check':>7} | {'set-up passes':>13}")
    print(header)
    print("-" * len(header))
    for d in [int(v) for v in args.dims]:
        X, y = make_problem(args.rows, d)
        sgd = np.inf
        best = {}
        for _ in range(args.repeats):
            sgd = min(sgd, sgd_epoch(X, y))
            for metric in ("identity", "auto"):
                run = one_pass_fit(X, y, metric)
                if metric not in best or run[0] < best[metric][0]:
                    best[metric] = run
        print(f"{d:>9,} | {'SGDClassifier':<16} | {sgd:8.3f} | {1.0:6.1f} | {'':>7} | "
              f"{'':>7} | {'':>13}")
        for metric, (seconds, setup, check, passes, kind) in best.items():
            label = f"{metric} ({kind})" if metric == "auto" else metric
            print(f"{'':>9} | {label:<16} | {seconds:8.3f} | {seconds / sgd:6.1f} | "
                  f"{setup / sgd:7.1f} | {check / sgd:7.1f} | {passes:13.0f}")
    print("\nset-up and check: seconds in units of the SGD epoch")


if __name__ == "__main__":
    main()
