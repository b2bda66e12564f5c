"""Fewer rows than coefficients: logistic regression's prior, and its cost.

Dense rows of ``--features`` correlated features (20 shared factors plus
independent noise, each of variance about 1) and labels from a sparse
coefficient vector (1 % non-zero, standard normal) plus logistic noise:
``--rows`` rows, fewer than the features, as in genomics.  In the same run
and on the same data:

* ``LogisticRegression()`` (lbfgs, its defaults): the point estimate;
* ``SGMCMCLogisticRegression(random_state=0)`` at its defaults
  (``alpha=1.0``);
* the same with ``alpha="auto"``: the Laplace evidence from the rows' side
  of the Hessian's spectrum (exact, :class:`_DualEvidence`);
* ``alpha="auto"`` with the evidence by stochastic Lanczos quadrature
  instead (the route before the rows' side; forced here by lowering the
  module's ``MAX_DENSE_LAPLACE`` below the rows), for the set-up's cost.

Printed: seconds of each whole ``fit``, the ratio to ``LogisticRegression``,
data passes and the set-up's part, ``alpha_``, the smallest bulk ESS,
passes per effective draw, and whether the fit warned (the warning's
first words).

Usage: ``python benchmarks/bench_few_rows.py [--rows 500] [--features 5000]``
"""
import argparse
import time
import warnings

import numpy as np
from sklearn.linear_model import LogisticRegression

from skbayes_sg import SGMCMCLogisticRegression
from skbayes_sg.linear_model import _logistic


def make_problem(n, d, seed=0):
    rng = np.random.default_rng(seed)
    factors = rng.standard_normal((n, 20))
    X = (0.7 * factors @ rng.standard_normal((20, d)) / np.sqrt(20)
         + 0.7 * rng.standard_normal((n, d)))
    beta = rng.standard_normal(d) * (rng.random(d) < 0.01)
    y = (X @ beta + rng.logistic(size=n) > 0).astype(np.int64)
    return X, y


def timed_fit(est, X, y):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        est.fit(X, y)
        seconds = time.perf_counter() - start
    return seconds, [str(w.message) for w in caught]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--features", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    X, y = make_problem(args.rows, args.features, args.seed)
    start = time.perf_counter()
    LogisticRegression().fit(X, y)
    point = time.perf_counter() - start
    print(f"{args.rows} rows, {args.features} features; LogisticRegression {point:.2f} s")
    print(f"{'fit':32s} {'s':>7s} {'ratio':>6s} {'passes':>8s} {'set-up':>7s} {'alpha_':>8s} "
          f"{'min ESS':>8s} {'passes/ESS':>10s}  warned")
    limit = _logistic.MAX_DENSE_LAPLACE
    if X.shape[1] + 1 <= limit or X.shape[0] > limit:
        print(f"(the rows' side needs more than {limit} coefficients and at most {limit} rows)")
    for label, alpha, rows_side in [("alpha=1.0 (the default)", 1.0, True),
                                    ("alpha='auto', rows' side", "auto", True),
                                    ("alpha='auto', quadrature", "auto", False)]:
        _logistic.MAX_DENSE_LAPLACE = limit if rows_side else X.shape[0] - 1
        try:
            est = SGMCMCLogisticRegression(alpha=alpha, random_state=0)
            seconds, messages = timed_fit(est, X, y)
        finally:
            _logistic.MAX_DENSE_LAPLACE = limit
        ess = float(np.min(est.ess_))
        warned = messages[0][:60] if messages else "-"
        print(f"{label:32s} {seconds:7.1f} {seconds / point:6.0f} {est.n_passes_:8,.0f} "
              f"{est.n_setup_passes_:7,.0f} {est.alpha_:8.4g} {ess:8.0f} "
              f"{est.n_passes_ / ess:10.1f}  {warned}")


if __name__ == "__main__":
    main()
