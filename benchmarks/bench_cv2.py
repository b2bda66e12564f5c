"""The second-order control variate (``subsampling="cv2-preferential"``)
against the first-order one (``"cv-preferential"``, the default's), every
other setting at its default, on the posteriors of ``bench_defaults.py``.

For each posterior and seed the same run fits both and prints the data
passes (set-up included, ``n_passes_``), the wall time, the batch the error
model chose, and the accuracy against the posterior's reference (the
closed form for ridge, else the cached long HMC run of ``_posteriors.py``):
the largest error of a mean in posterior sds, and the range of the sd
ratios.  The last column is the passes' ratio (cv2 / cv).

Run: ``PYTHONPATH=. python benchmarks/bench_cv2.py [--posteriors a,b] [--seeds 0 1]``
(a9a needs ``../shared/data`` or ``SKBAYES_SG_DATA``; a reference not yet
cached is computed first, up to 15 minutes for a9a).
"""
import argparse
import time
import warnings

import numpy as np

from _posteriors import POSTERIORS, reference
from skbayes_sg import SGMCMCLogisticRegression, SGMCMCRidge
from skbayes_sg.diagnostics import MCMCConvergenceWarning

DEFAULT = ("diabetes-ridge,australian,breast-cancer,breast-cancer-separable,digits-image,"
           "a9a,a9a-alpha0.1")
ESTIMATORS = ("cv-preferential", "cv2-preferential")


def fit(post, subsampling, seed):
    """One default fit but for ``subsampling``: (estimator, seconds, warned)."""
    Est = SGMCMCRidge if post.model == "gaussian" else SGMCMCLogisticRegression
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = Est(subsampling=subsampling, random_state=seed,
                  **post.estimator_kwargs()).fit(post.X, post.y)
    warned = any(issubclass(w.category, MCMCConvergenceWarning) for w in caught)
    return est, time.perf_counter() - t0, warned


def accuracy(est, post, ref):
    draws = est.coef_samples_.reshape(-1, post.dim)
    err = np.max(np.abs(draws.mean(axis=0) - ref["mean"]) / ref["sd"])
    ratio = draws.std(axis=0, ddof=1) / ref["sd"]
    return err, ratio.min(), ratio.max()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posteriors", default=DEFAULT)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    args = parser.parse_args()
    print(f"{'posterior':24s} {'seed':>4s} {'subsampling':18s} {'passes':>8s} {'time s':>7s} "
          f"{'batch':>6s} {'err sd':>7s} {'sd ratio range':>16s} {'warns':>5s} {'ratio':>6s}")
    for name in args.posteriors.split(","):
        post = POSTERIORS[name]()
        ref = reference(post)
        for seed in args.seeds:
            passes = {}
            for subsampling in ESTIMATORS:
                est, seconds, warned = fit(post, subsampling, seed)
                err, lo, hi = accuracy(est, post, ref)
                passes[subsampling] = est.n_passes_
                ratio = (f"{passes[subsampling] / passes[ESTIMATORS[0]]:6.2f}"
                         if subsampling != ESTIMATORS[0] else "")
                print(f"{name:24s} {seed:4d} {subsampling:18s} {est.n_passes_:8.1f} "
                      f"{seconds:7.2f} {est.batch_size_:6d} {err:7.3f} "
                      f"[{lo:.3f}, {hi:.3f}]  {'yes' if warned else 'no':>5s} {ratio}",
                      flush=True)


if __name__ == "__main__":
    main()
