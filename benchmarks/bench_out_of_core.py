"""Data larger than memory: TMU with cyclic vs random access on a memory-mapped file.

AGLD §6.3 (Zhang et al., AAAI 2020): when the data do not fit in memory,
cyclic access (CA) beats random access (RA) on wall time, because CA reads
the file sequentially (kernel readahead) while RA faults pages in at random.
This benchmark writes a dense float64 file of ``--size-gb`` (default 2.2 GB;
covertype-shaped synthetic logistic data, 54 columns), maps it read-only
with ``numpy.memmap`` (the engine reads it in place, no copy) and times TMU
(``subsampling="tmu"``, refresh every pass) with ``access="cyclic"`` and
``"random"``.

One TMU pass = one full refresh (a sequential scan, the same for both) +
ceil(n/b) minibatch steps (sequential blocks for CA, random rows for RA).
Both parts are timed separately (wall time, ``perf_counter``: I/O waits are
the point), in three regimes:

- ``resident``: the file is in the page cache (read once before);
- ``cold``: the page cache of the file is dropped (``os.sync()`` then
  ``posix_fadvise(POSIX_FADV_DONTNEED)`` on the file, after unmapping our
  own page-table entries with ``madvise(MADV_DONTNEED)``) before the refresh
  and again before the minibatch steps: the data are not resident when the
  pass starts;
- ``limited``: as ``cold``, and the cache is also dropped ``--chunks``
  times during the minibatch steps, emulating a page cache ~1/chunks of the
  file (the paper restricts the machine's memory; this machine has more
  memory than the file, so eviction stands in for the limit).

Residency is checked with ``mincore`` (fraction of the file's pages in
memory right after a drop).  Finally the public estimator is fitted on the
memmap from a cold cache (``SGMCMCLogisticRegression(subsampling="tmu",
access="cyclic")``, one pass), and its anonymous memory (``RssAnon``: the
process's own allocations, not the mapped file) is reported.

The file is deleted at the end (``--keep`` to keep it).  Check free space
first (``df -h``); the script refuses to write the file without 10% spare.

Usage: python benchmarks/bench_out_of_core.py [--dir DIR] [--size-gb 2.2]
       [--batch-size 50] [--repeats 2] [--chunks 8] [--keep]
"""
import argparse
import ctypes
import mmap
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from skbayes_sg import SGMCMCLogisticRegression
from skbayes_sg._sampling._chain import ChainOracle, run_segment
from skbayes_sg._sampling._dataset import RowData
from skbayes_sg._sampling._dynamics import SGLD
from skbayes_sg._sampling._estimators import GLMEstimator, Problem

D = 54
ROWS_PER_CHUNK = 200_000


# ------------------------------------------------------------- page cache
def drop_cache(path, mapped=None):
    """Evict ``path`` from the page cache.

    Pages still mapped in this process are skipped by the kernel, so our own
    mapping's page-table entries are dropped first (``MADV_DONTNEED`` on a
    read-only shared file mapping only unmaps: the data stay on disk).
    """
    if mapped is not None:
        mapped._mmap.madvise(mmap.MADV_DONTNEED)
    os.sync()
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


_libc = ctypes.CDLL(None, use_errno=True)


def resident_fraction(path):
    """Fraction of the file's pages in the page cache (``mincore`` on a fresh map)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ)
    try:
        view = np.frombuffer(mm, dtype=np.uint8)
        npages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vec = (ctypes.c_ubyte * npages)()
        if _libc.mincore(ctypes.c_void_p(view.ctypes.data), ctypes.c_size_t(size), vec) != 0:
            return float("nan")
        frac = float((np.frombuffer(bytes(vec), dtype=np.uint8) & 1).mean())
        del view
    finally:
        mm.close()
    return frac


def rss_anon_mb():
    """Anonymous resident memory of this process (excludes mapped files), MB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


# ------------------------------------------------------------------- data
def write_data(path, n, seed=0):
    """Covertype-shaped logistic data written in row chunks; returns y, w."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(D) / np.sqrt(D)
    y = np.empty(n)
    mm = np.memmap(path, dtype=np.float64, mode="w+", shape=(n, D))
    for s in range(0, n, ROWS_PER_CHUNK):
        e = min(n, s + ROWS_PER_CHUNK)
        block = np.empty((e - s, D))
        block[:, :10] = rng.standard_normal((e - s, 10))
        block[:, 10:] = rng.random((e - s, D - 10)) < 0.1
        mm[s:e] = block
        y[s:e] = rng.random(e - s) < 1.0 / (1.0 + np.exp(-(block @ w)))
    mm.flush()
    del mm
    return y, w


# ------------------------------------------------------------------ timing
def tmu_pass(path, n, y, access, b, regime, chunks, h, seed):
    """Wall seconds of (refresh, minibatch steps) of one TMU pass."""
    X = np.memmap(path, dtype=np.float64, mode="r", shape=(n, D))
    if regime == "resident":
        float(np.asarray(X).sum())           # read it all once
    else:
        drop_cache(path, X)
    prob = Problem(RowData(X, True), y, "logistic", 1)
    m = int(np.ceil(n / b))
    # no control point: the estimator refreshes at its first step (timed)
    est = GLMEstimator(prob, b, access=access, control="table", period=m)
    oracle = ChainOracle(est, 1.0)
    dyn = SGLD(prob.dim, h, 1.0)
    theta = np.zeros(prob.dim)
    bitgen = np.random.PCG64(seed)
    t0 = time.perf_counter()
    run_segment(oracle, dyn, theta, 1, 1, None, bitgen)    # refresh + 1 step
    t_refresh = time.perf_counter() - t0
    n_pieces = 1 if regime != "limited" else chunks
    steps = m - 1
    t_steps = 0.0
    resident_after_drop = []
    for k in range(n_pieces):
        if regime != "resident":
            drop_cache(path, X)
            if k == 0:
                resident_after_drop.append(resident_fraction(path))
        piece = steps // n_pieces + (1 if k < steps % n_pieces else 0)
        t0 = time.perf_counter()
        run_segment(oracle, dyn, theta, piece, 1, None, bitgen)
        t_steps += time.perf_counter() - t0
    assert est.n_refreshes == 1 and np.all(np.isfinite(theta))
    del oracle, est, prob
    del X
    return t_refresh, t_steps, (resident_after_drop[0] if resident_after_drop else 1.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="where to write the file (default: a "
                        "fresh temporary directory)")
    parser.add_argument("--size-gb", type=float, default=2.2)
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--chunks", type=int, default=8,
                        help="cache drops per pass in the 'limited' regime")
    parser.add_argument("--keep", action="store_true", help="keep the data file")
    parser.add_argument("--skip-public", action="store_true",
                        help="skip the public-estimator fit")
    args = parser.parse_args()

    n = int(args.size_gb * 1e9 / (D * 8))
    size = n * D * 8
    owns_dir = args.dir is None
    base = Path(tempfile.mkdtemp(prefix="skbayes_sg_ooc_")) if owns_dir else Path(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(base).free
    print(f"file: {n:,} x {D} float64 = {size / 1e9:.2f} GB in {base} "
          f"(free {free / 1e9:.0f} GB)")
    if free < 1.1 * size + 1e9:
        raise SystemExit(f"not enough free space in {base}: need {1.1 * size / 1e9:.1f} GB")
    path = str(base / "X_f64.dat")
    try:
        t0 = time.perf_counter()
        y, w_true = write_data(path, n)
        print(f"written in {time.perf_counter() - t0:.1f} s")
        b = args.batch_size
        m = int(np.ceil(n / b))
        h = 1e-8
        print(f"TMU, batch {b}: one pass = refresh (sequential scan of {size / 1e9:.2f} GB) + "
              f"{m:,} minibatch steps; wall times (perf_counter), medians of {args.repeats}\n")

        results = {}
        for regime in ("resident", "cold", "limited"):
            for access in ("cyclic", "random"):
                runs = [tmu_pass(path, n, y, access, b, regime, args.chunks, h, seed=r)
                        for r in range(args.repeats)]
                results[regime, access] = np.median(np.array(runs), axis=0)
                r_, s_, res = results[regime, access]
                print(f"  {regime:8s} {access:7s}: refresh {r_:6.2f} s, minibatch steps "
                      f"{s_:7.2f} s (resident after drop: {res:.3f})", flush=True)

        label = {"resident": "resident (in page cache)",
                 "cold": "cold (dropped before the pass)",
                 "limited": f"limited (dropped {args.chunks}x per pass)"}
        print(f"\n{'regime':36s} {'access':7s} {'refresh s':>9s} {'steps s':>8s} "
              f"{'TMU pass s':>10s} {'GB/s (2 reads)':>14s} {'RA/CA pass':>10s} "
              f"{'RA/CA steps':>11s}")
        for regime in ("resident", "cold", "limited"):
            for access in ("cyclic", "random"):
                r_, s_, _ = results[regime, access]
                total = r_ + s_
                ca_r, ca_s, _ = results[regime, "cyclic"]
                ratios = ("" if access == "cyclic" else
                          f"{total / (ca_r + ca_s):10.2f} {s_ / ca_s:11.2f}")
                print(f"{label[regime]:36s} {access:7s} {r_:9.2f} {s_:8.2f} {total:10.2f} "
                      f"{2 * size / 1e9 / total:14.2f} {ratios}")
        print("(RA/CA pass: TMU pass time, random over cyclic access; RA/CA steps: the "
              "minibatch steps alone. The refresh is the same sequential scan for both: its "
              "spread across rows is the machine's and the disk's variability)")

        if not args.skip_public:
            public_fit(path, n, y, w_true, b)
    finally:
        if not args.keep:
            try:
                os.remove(path)
            except OSError:
                pass
            if owns_dir:
                shutil.rmtree(base, ignore_errors=True)
            print(f"\n(removed {path})")
        else:
            print(f"\n(kept {path})")


def public_fit(path, n, y, w_true, b):
    """The user-facing route, from a cold cache: memmap + tmu + cyclic."""
    X = np.memmap(path, dtype=np.float64, mode="r", shape=(n, D))
    # a step size from a 100k-row sample: h = 0.05 / (n * lambda_max(E[x x^T]) / 4)
    sample = np.asarray(X[:100_000])
    lam = np.linalg.eigvalsh(np.cov(np.hstack([sample, np.ones((len(sample), 1))]).T,
                                    bias=True) + 1.0)[-1]
    h = 0.05 / (0.25 * n * lam)
    m = int(np.ceil(n / b))
    drop_cache(path, X)
    anon0 = rss_anon_mb()
    clf = SGMCMCLogisticRegression(metric="identity", metropolis=False,
                                   subsampling="tmu", access="cyclic", batch_size=b,
                                   step_size=h, init="zeros", n_chains=1, n_warmup=0,
                                   n_samples=m // 100, thin=100, random_state=0)
    t0 = time.perf_counter()
    clf.fit(X, y)
    wall = time.perf_counter() - t0
    anon1 = rss_anon_mb()
    corr = np.corrcoef(clf.coef_, w_true)[0, 1]
    print(f"\nPublic estimator, cold cache: SGMCMCLogisticRegression(metric='identity', subsampling='tmu', "
          f"access='cyclic', batch_size={b}, step_size={h:.2g}, init='zeros', n_chains=1), "
          f"one pass of steps ({m // 100 * 100:,} steps)")
    print(f"  fit wall {wall:.1f} s (validation scan + start-point table pass + sampling), "
          f"sampling_time_ {clf.sampling_time_:.1f} s, n_grad_evals_ / n = "
          f"{clf.n_grad_evals_ / n:.2f}")
    print(f"  anonymous memory (RssAnon) {anon0:.0f} -> {anon1:.0f} MB while X is "
          f"{n * D * 8 / 1e9:.2f} GB: X is read in place; the TMU table is n floats "
          f"({n * 8 / 1e6:.0f} MB)")
    print(f"  corr(posterior mean, true w) = {corr:.3f}")
    del X


if __name__ == "__main__":
    main()
