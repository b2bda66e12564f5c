"""A step's cost besides its rows, measured through ``est.fit``, against the
set-up's model of it (``SetupPolicy._step_overhead``).

The automatic settings trade rows against steps with this model: the error
model's batch and step (``_error_model.choose(overhead_rows=...)``), exact
gradients against subsampling, and the first- against the second-order
control variate.  Each fit here is the default dynamics at a fixed small step,
no warm-up, one chain, ``thin=20`` (the recording of a draw amortised as in a
default fit), ``n_samples`` 25 and 225: the difference is 4,000 steps, timed
at three batch sizes (best of three).  Per-step time ``t(b) = a + c b``:
``c`` is a row's cost, ``a / c`` the overhead in rows.

Run:  cd benchmarks && OMP_NUM_THREADS=1 python bench_step_cost.py
(``a9a`` needs ``../shared/data``; skipped without it.)
"""
import argparse
import time
from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp

from skbayes_sg import SGMCMCLogisticRegression
from skbayes_sg._setup import MAX_DENSE_METRIC, SetupPolicy

BATCHES = (16, 128, 1024)
STEPS = (500, 4500)
THIN = 20


def problem(name):
    """``(X, y, estimator kwargs)`` of a named problem."""
    if name == "a9a":
        from _posteriors import POSTERIORS
        post = POSTERIORS["a9a"]()
        return post.X, post.y, dict(alpha=post.alpha, fit_intercept=False)
    kind, d = name.split("-")
    d = int(d)
    rng = np.random.default_rng(0)
    n = 20000 if d < MAX_DENSE_METRIC else 5000
    if kind == "dense":
        X = rng.standard_normal((n, d)) * (2 / np.sqrt(d))
    else:
        X = sp.random(n, d, density=20 / d, format="csr", random_state=0) * 2
    y = (np.asarray(X @ rng.standard_normal(d)).ravel() + rng.logistic(size=n) > 0).astype(int)
    return X, y, {}


def step_time(X, y, kwargs, subsampling, batch):
    """Seconds a step at ``batch`` rows (4,000 steps' difference, best of 3)."""
    times = []
    for steps in STEPS:
        best = np.inf
        for _ in range(3):
            est = SGMCMCLogisticRegression(
                subsampling=subsampling, batch_size=batch, step_size=0.01, sampler="baoab",
                n_warmup=0, n_samples=steps // THIN, thin=THIN, n_chains=1, random_state=0,
                **kwargs)
            t = time.perf_counter()
            est.fit(X, y)
            best = min(best, time.perf_counter() - t)
        times.append(best)
    return (times[1] - times[0]) / (STEPS[1] - STEPS[0])


def modelled_overhead(X, subsampling):
    """The set-up's per-step overhead, in rows, for this ``X``."""
    dim = X.shape[1] + 1
    kind = "dense" if dim <= MAX_DENSE_METRIC else "diagonal"
    ctx = SimpleNamespace(X=X, dim=dim, glm=SimpleNamespace(n_outputs=1))
    control = "taylor" if subsampling.startswith("cv2") else None
    return SetupPolicy._step_overhead(None, ctx, kind, control)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*",
                        default=["a9a", "dense-200", "dense-600", "sparse-1000", "dense-2500"])
    args = parser.parse_args()
    print(f"{'problem':<12} {'d':>5} {'nnz':>6} {'subsampling':<17} "
          + " ".join(f"{'us b=' + str(b):>10}" for b in BATCHES)
          + f" {'row us':>7} {'overhead rows':>14} {'model':>7} {'model/measured':>15}")
    for name in args.problems:
        try:
            X, y, kwargs = problem(name)
        except FileNotFoundError as exc:
            print(f"{name}: skipped ({exc})")
            continue
        nnz = X.nnz / X.shape[0] if sp.issparse(X) else X.shape[1]
        subs = ["cv-preferential"]
        if X.shape[1] + 1 <= MAX_DENSE_METRIC:
            subs.append("cv2-preferential")
        for sub in subs:
            per = {b: step_time(X, y, kwargs, sub, b) for b in BATCHES}
            row = (per[BATCHES[-1]] - per[BATCHES[0]]) / (BATCHES[-1] - BATCHES[0])
            measured = (per[BATCHES[0]] - BATCHES[0] * row) / row
            model = modelled_overhead(X, sub)
            print(f"{name:<12} {X.shape[1]:>5} {nnz:>6.1f} {sub:<17} "
                  + " ".join(f"{per[b] * 1e6:>10.1f}" for b in BATCHES)
                  + f" {row * 1e6:>7.3f} {measured:>14.0f} {model:>7.0f} "
                  f"{model / measured:>15.2f}", flush=True)


if __name__ == "__main__":
    main()
