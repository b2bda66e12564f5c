"""Chains on every core: 4 chains at the default ``n_jobs=None`` (one thread
per core the process may use, at most ``OMP_NUM_THREADS``) against
``n_jobs=1``.

The chains run in threads (the loop releases the GIL; no process start-up,
no copy of the data), each from its own seed, so the draws must be
bit-identical for any ``n_jobs``.  For each fit this prints, with one and
with two workers, the wall time of the chain rounds (``ChainPool.advance``,
what ``n_jobs`` parallelises) and of the whole ``fit`` (what a user waits
for: set-up, chains, diagnostics), the speed-ups, and whether the draws are
identical:

* SGLD on dense data (50,000 x 50 logistic, batch 50), 4 chains x 20,000
  draws (thin 10);
* lazy SGLD on sparse data (the problem of ``bench_sparse_scaling.py`` at
  d = 10^4: 100,000 rows, 20 non-zeros a row), 4 chains x (1,000 warm-up
  steps + 1,000 draws): its automatic warm-up would be the budget's (SGLD
  at batch 50 predicts an autocorrelation of 10^5+ steps), which times
  the budget, not the threads;
* the default estimator (only the draws fixed: 200 warm-up steps, 200
  draws a chain) on the text-like d = 10^4 rows of ``bench_high_dim.py``
  (``_textlike.text_like``, y above its median).

Run it on idle cores: the speed-up is that of the machine's free cores
(the set-up's passes over CSR rows run on one).

Usage: ``python benchmarks/bench_threads.py``
"""
import os
import time
import warnings

import numpy as np

from _textlike import text_like
from bench_sparse_scaling import make_problem
from skbayes_sg import SGMCMCLogisticRegression
from skbayes_sg._sampling import _runner


def dense_problem(n=50_000, d=50, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    w = rng.normal(size=d) / np.sqrt(d)
    y = (X @ w + rng.logistic(size=n) > 0).astype(int)
    return X, y


#: wall time spent advancing the chains (ChainPool.advance), this fit
CHAIN_WALL = [0.0]
_advance = _runner.ChainPool.advance


def _timed_advance(self, *args, **kwargs):
    t = time.perf_counter()
    try:
        return _advance(self, *args, **kwargs)
    finally:
        CHAIN_WALL[0] += time.perf_counter() - t


_runner.ChainPool.advance = _timed_advance


def timed_fit(X, y, n_jobs, **params):
    """(wall time of fit, of its chain rounds, the estimator)."""
    est = SGMCMCLogisticRegression(random_state=0, n_chains=4, n_jobs=n_jobs, **params)
    CHAIN_WALL[0] = 0.0
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, y)
    return time.perf_counter() - t, CHAIN_WALL[0], est


def main():
    print(f"{os.cpu_count()} cores, 4 chains; wall time (s) of the chain rounds and of the "
          "whole fit (set-up and diagnostics run once, in the calling thread)")
    print(f"{'fit':<42}{'chains 1':>9}{'default':>9}{'speed-up':>9}"
          f"{'fit 1':>8}{'default':>8}{'speed-up':>9}  same draws")
    X_text, z_text, _ = text_like()
    cases = [("dense 50,000 x 50, SGLD, 4 x 20,000 draws", dense_problem(),
              {"sampler": "sgld", "subsampling": "uniform", "batch_size": 50,
               "n_samples": 20_000, "thin": 10}),
             ("sparse d=10^4, lazy SGLD, 4 x 2,000 steps", make_problem(100_000, 10_000),
              {"sampler": "sgld", "subsampling": "uniform", "batch_size": 50,
               "n_warmup": 1000, "n_samples": 1000}),
             ("text-like d=10^4, defaults, 4 x 200 draws",
              (X_text, (z_text > np.median(z_text)).astype(int)),
              {"n_warmup": 200, "n_samples": 200})]
    for label, (X, y), params in cases:
        t1, c1, one = timed_fit(X, y, 1, **params)
        t2, c2, two = timed_fit(X, y, None, **params)
        same = np.array_equal(one.coef_samples_, two.coef_samples_)
        lazy = " (lazy)" if two.lazy_ else ""
        print(f"{label:<42}{c1:9.1f}{c2:9.1f}{c1 / c2:8.2f}x{t1:8.1f}{t2:8.1f}{t1 / t2:8.2f}x"
              f"  {same}{lazy}")


if __name__ == "__main__":
    main()
