"""Chains in lockstep (issue 41): what a shared full pass saves, and what a
whole fit gains, against the chains run alone, in the same run.

Text-like CSR rows (``_textlike.text_like``: 100,000 rows, 10,000 features,
~13 non-zeros a row):

* ``kernel``: a full-data gradient by ``FullGradient`` alone, and by a
  ``ChainGroup`` pass for 1, 2 and 4 chains (ms per chain, best of 5;
  ratios against alone), for the Gaussian and the logistic model; the group's
  gradients are checked equal to the ones alone, bit for bit;
* ``--fit ridge|logistic|both``: the default fit of ``bench_high_dim.py``
  (``n_jobs=2``: 4 chains, 2 a thread) with the groups off
  (``_runner.LOCKSTEP = False``) and on: wall time, in SGD epochs of the same
  data (``SGDRegressor`` / ``SGDClassifier``, one epoch, the best of 5 taken
  before and 5 after the fits: the epoch's time varies by up to 1.5x
  between runs on this machine), passes, passes per effective draw, and
  whether the two fits' draws are identical.

Usage: ``python benchmarks/bench_lockstep.py [--fit both] [--seed 0]``
"""
import argparse
import time
import warnings

import numpy as np

from _textlike import text_like
from bench_high_dim import sgd_epoch
from skbayes_sg import SGMCMCLogisticRegression, SGMCMCRidge
from skbayes_sg._sampling import _runner
from skbayes_sg._sampling._dataset import RowData
from skbayes_sg._sampling._estimators import FullGradient, Problem
from skbayes_sg._sampling._group import ChainGroup, GroupedFullGradient


def best_ms(f, repeats=5, calls=10):
    f()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(calls):
            f()
        times.append((time.perf_counter() - t) / calls)
    return 1e3 * min(times)


def kernel(X, eta):
    rng = np.random.default_rng(0)
    for model, y in (("gaussian", eta), ("logistic", (eta > np.median(eta)).astype(float))):
        problem = Problem(RowData(X, False), y, model, 1, (1.0,) if model == "gaussian" else ())
        alone = FullGradient(problem)
        group = ChainGroup(GroupedFullGradient(problem), 4)
        thetas = 0.1 * rng.standard_normal((4, X.shape[1]))
        grads, _ = group.py_gradients(thetas)
        same = all(np.array_equal(grads[c], alone.py_evaluate(thetas[c])) for c in range(4))
        one = best_ms(lambda: alone.py_evaluate(thetas[0]))
        line = f"{model:9s} alone {one:.2f} ms"
        for m in (1, 2, 4):
            per_chain = best_ms(lambda: group.py_gradients(thetas[:m])) / m
            line += f"; {m} in a pass {per_chain:.2f} ms a chain ({one / per_chain:.2f}x)"
        print(line + f"; bit-identical: {same}", flush=True)


def fit(kind, X, eta):
    if kind == "ridge":
        y = eta + np.random.default_rng(1).standard_normal(X.shape[0])
        make = lambda: SGMCMCRidge(alpha=1.0, noise_var=1.0, fit_intercept=False, n_jobs=2,
                                   random_state=0)
    else:
        y = (eta > np.median(eta)).astype(int)
        make = lambda: SGMCMCLogisticRegression(n_jobs=2, random_state=0)
    epochs = [sgd_epoch(X, y, kind == "logistic", repeats=5)]
    fits = {}
    for lockstep in (False, True):
        _runner.LOCKSTEP = lockstep
        est = make()
        t = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est.fit(X, y)
        fits[lockstep] = (est, time.perf_counter() - t, [str(w.message)[:200] for w in caught])
    _runner.LOCKSTEP = True
    epochs.append(sgd_epoch(X, y, kind == "logistic", repeats=5))
    epoch = min(epochs)
    print(f"{kind}: SGD epoch {1e3 * epoch:.1f} ms (best before {1e3 * epochs[0]:.1f}, "
          f"after {1e3 * epochs[1]:.1f})", flush=True)
    for lockstep, (est, seconds, warned) in fits.items():
        ess = np.nanmin(est.ess_)
        print(f"  {'lockstep' if lockstep else 'alone   '}: {seconds:.1f} s = "
              f"{seconds / epoch:,.0f} SGD epochs ({seconds / epochs[0]:,.0f}-"
              f"{seconds / epochs[1]:,.0f} against either), {est.n_passes_:,.0f} passes, "
              f"{est.n_passes_ / ess:.1f} a min effective draw, "
              f"{1e3 * seconds / est.n_passes_:.2f} ms a pass, R-hat {np.nanmax(est.rhat_):.3f}, "
              f"{est.sampler_}/{est.subsampling_}/{est.metric_}, warnings {warned}", flush=True)
    same = np.array_equal(fits[False][0].coef_samples_, fits[True][0].coef_samples_)
    print(f"  draws identical: {same}; lockstep {fits[False][1] / fits[True][1]:.2f}x faster",
          flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fit", choices=("none", "ridge", "logistic", "both"), default="none")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    X, eta, _ = text_like(seed=args.seed)
    kernel(X, eta)
    for kind in ("ridge", "logistic"):
        if args.fit in (kind, "both"):
            fit(kind, X, eta)


if __name__ == "__main__":
    main()
