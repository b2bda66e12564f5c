"""Large n: the whole default fit against the point estimate (issue 41, item 1).

Dense logistic regression, d = 50 standard-normal features, labels from a
coefficient vector of norm 2, n rows for each ``--rows``.  In the same run
and on the same data, interleaved (the best of ``--repeats`` rounds each):

* ``sklearn.linear_model.LogisticRegression()`` (lbfgs, its defaults): the
  point estimate a user has;
* ``SGMCMCLogisticRegression(random_state=0).fit(X, y)`` at its defaults,
  everything a user waits for (set-up, chains, diagnostics).

Printed: seconds of each, the ratio, the fit's data passes
(``n_passes_``) and the part the set-up counted (``n_setup_passes_``), and
whether the fit warned.  BLAS threads are the machine's (both fits use
them as they do by default); run it on an idle machine.

Usage: ``python benchmarks/bench_large_n.py [--rows 1e5 1e6 4e6] [--repeats 2]``
"""
import argparse
import time
import warnings

import numpy as np
from sklearn.linear_model import LogisticRegression

from skbayes_sg import SGMCMCLogisticRegression

D = 50


def make_problem(n, seed=0):
    rng = np.random.default_rng(seed)
    beta = rng.standard_normal(D)
    beta *= 2.0 / np.linalg.norm(beta)
    X = rng.standard_normal((n, D))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(X @ beta)))).astype(np.int64)
    return X, y


def time_point_estimate(X, y):
    t0 = time.perf_counter()
    LogisticRegression().fit(X, y)
    return time.perf_counter() - t0


def time_fit(X, y):
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = SGMCMCLogisticRegression(random_state=0).fit(X, y)
    return time.perf_counter() - t0, est, bool(caught)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", type=float, default=[1e5, 1e6, 4e6])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    print(f"dense logistic, d = {D}; best of {args.repeats} interleaved rounds")
    print(f"{'n':>10} | {'LogReg s':>9} | {'fit s':>8} | {'ratio':>6} | {'passes':>7} | "
          f"{'set-up':>7} | warned")
    for n in map(int, args.rows):
        X, y = make_problem(n)
        point, fits = [], []
        for _ in range(args.repeats):
            point.append(time_point_estimate(X, y))
            fits.append(time_fit(X, y))
        seconds, est, warned = min(fits, key=lambda f: f[0])
        print(f"{n:>10,} | {min(point):9.2f} | {seconds:8.2f} | {seconds / min(point):6.2f} | "
              f"{est.n_passes_:7.2f} | {est.n_setup_passes_:7.2f} | {warned}", flush=True)


if __name__ == "__main__":
    main()
