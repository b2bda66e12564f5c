"""Data on a dask cluster: the default fit against dask-ml's point estimate
(issue 42, item 7).

Dense logistic regression, ``--features`` standard-normal float32 features,
labels from a coefficient vector of norm 2, ``--rows`` rows written by the
workers to zarr on disk in blocks of ``--block`` rows (never on the
client).  On one ``LocalCluster`` of ``--workers`` single-threaded worker
processes, in the same run:

* ``dask_ml.linear_model.LogisticRegression(solver="lbfgs", C=1)`` on the
  zarr arrays: the point estimate a dask user has (prior precision 1 is
  ``C = 1``);
* ``SGMCMCLogisticRegression(random_state=0).fit(X, y)`` on the same arrays,
  at its defaults: everything a user waits for (passes on the cluster, the
  pool, the chains, the diagnostics).

Printed: seconds of each and their ratio; the fit's passes on the cluster
(``n_cluster_passes_``), the rows its chains read (``n_sampling_rows_``,
warm-up included) as a share of n, the pool it held on the client; the
client's peak resident memory added by the fit against the size of ``X``;
whether it warned.  With ``--compare`` (n small enough to hold in memory),
``X`` is then brought to the client and fitted in memory: a long run
(``target_ess=20000``) as the reference, and a default fit; the dask fit's
and the default in-memory fit's posteriors are each compared with the
reference (largest mean error in posterior sds, sd ratios).

Usage: ``python benchmarks/bench_dask.py [--rows 1e6] [--features 20]
[--workers 2] [--compare] [--dir /tmp/bench_dask]``
"""
import argparse
import os
import shutil
import time
import warnings

import numpy as np

import dask
import dask.array as da
import distributed

from skbayes_sg import SGMCMCLogisticRegression


def _block(seed, rows, d, beta):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((rows, d), dtype=np.float32)
    y = (rng.random(rows) < 1.0 / (1.0 + np.exp(-(X @ beta)))).astype(np.int8)
    return np.column_stack([X, y]).astype(np.float32)


def write_problem(path, n, d, block, seed=0):
    """X (n, d) float32 and y (n,) int8 in zarr under ``path``, written by the
    workers block by block; returns the arrays read back lazily."""
    rng = np.random.default_rng(seed)
    beta = rng.standard_normal(d)
    beta *= 2.0 / np.linalg.norm(beta)
    sizes = [min(block, n - s) for s in range(0, n, block)]
    parts = [da.from_delayed(dask.delayed(_block)(seed + 1 + k, rows, d, beta),
                             shape=(rows, d + 1), dtype=np.float32)
             for k, rows in enumerate(sizes)]
    Z = da.concatenate(parts).rechunk((block, d + 1))
    da.store([Z[:, :d], Z[:, d].astype(np.int8)],
             [_zarr(path, "X", (n, d), (block, d), np.float32),
              _zarr(path, "y", (n,), (block,), np.int8)])
    return da.from_zarr(os.path.join(path, "X")), da.from_zarr(os.path.join(path, "y"))


def _zarr(path, name, shape, chunks, dtype):
    import zarr
    return zarr.open_array(os.path.join(path, name), mode="w", shape=shape, chunks=chunks,
                           dtype=dtype)


def _status_mib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak():
    """Start the resident peak (VmHWM) afresh at the current resident size
    (Linux: ``clear_refs`` 5), so the fit's peak is not an earlier one."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return _status_mib("VmRSS")


def _compare(est, ref):
    a = est.coef_samples_.reshape(-1, est.coef_samples_.shape[-1])
    b = ref.coef_samples_.reshape(-1, ref.coef_samples_.shape[-1])
    sd = b.std(axis=0)
    return np.max(np.abs(a.mean(0) - b.mean(0)) / sd), a.std(0) / sd


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=float, default=1e6)
    p.add_argument("--features", type=int, default=20)
    p.add_argument("--block", type=int, default=250_000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--compare", action="store_true")
    p.add_argument("--dir", default="/tmp/bench_dask")
    args = p.parse_args()
    n, d = int(args.rows), args.features
    cluster = distributed.LocalCluster(n_workers=args.workers, threads_per_worker=1,
                                       processes=True, dashboard_address=None)
    client = distributed.Client(cluster)
    shutil.rmtree(args.dir, ignore_errors=True)
    t = time.perf_counter()
    X, y = write_problem(args.dir, n, d, args.block)
    print(f"n = {n:.3g}, d = {d}, X {n * d * 4 / 2 ** 20:.0f} MiB float32 in zarr "
          f"({X.numblocks[0]} blocks), written by {args.workers} workers in "
          f"{time.perf_counter() - t:.1f} s")

    from dask_ml.linear_model import LogisticRegression as DaskLogisticRegression
    t = time.perf_counter()
    point = DaskLogisticRegression(solver="lbfgs", C=1.0).fit(X, y)
    t_point = time.perf_counter() - t

    before = _reset_peak()
    t = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = SGMCMCLogisticRegression(random_state=0).fit(X, y)
    t_fit = time.perf_counter() - t
    added = _status_mib("VmHWM") - before
    warned = [str(w.message).split("\n")[0][:90] for w in caught]
    print(f"dask-ml LogisticRegression(lbfgs)  {t_point:8.1f} s")
    print(f"SGMCMCLogisticRegression defaults  {t_fit:8.1f} s   ratio {t_fit / t_point:.2f}x")
    print(f"  passes on the cluster {est.n_cluster_passes_}, chains read "
          f"{est.n_sampling_rows_:.3g} rows = {est.n_sampling_rows_ / n:.3f} of n "
          f"(pool {est.pool_size_:.3g} rows), n_passes_ {est.n_passes_:.2f}")
    print(f"  client peak memory added {added:.0f} MiB (X: {n * d * 4 / 2 ** 20:.0f} MiB); "
          f"warned: {warned or 'no'}")
    gap = np.abs(est.coef_.ravel() - point.coef_.ravel()) / est.coef_samples_.reshape(
        -1, d).std(axis=0)
    print(f"  posterior mean vs dask-ml's point estimate: largest gap {gap.max():.3f} sd")
    if args.compare:
        # a long in-memory run is the reference: each default fit's means are
        # within 0.1 sd of their Monte Carlo limit with 95% probability, so
        # two default fits compared with each other differ by more
        Xm, ym = X.compute(), y.compute()
        ref = SGMCMCLogisticRegression(random_state=2, target_ess=20_000).fit(Xm, ym)
        t = time.perf_counter()
        mem = SGMCMCLogisticRegression(random_state=1).fit(Xm, ym)
        t_mem = time.perf_counter() - t
        for name, fit in (("dask fit", est), (f"in-memory fit ({t_mem:.1f} s)", mem)):
            worst, ratio = _compare(fit, ref)
            print(f"{name} against a long in-memory run (bulk ESS 20,000): largest mean "
                  f"error {worst:.3f} sd, sd ratios {ratio.min():.3f}-{ratio.max():.3f}")
    client.close()
    cluster.close()
    shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
