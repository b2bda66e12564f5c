"""Speed of the snapshot estimators: time per data pass against uniform SGLD.

For each problem, one "pass" is ceil(n/b) SGLD steps with minibatches of b;
SAGA-LD (``subsampling="saga"``) and TMU (``"tmu"``) make the same steps
and additionally (TMU) one full refresh pass per pass, SVRG-LD (``"svrg"``)
recomputes each minibatch gradient at the snapshot (2b evaluations a step)
and refreshes once per pass.  The engine is timed directly (the objects
``fit`` builds: ``Problem``, the estimator, ``SGLD``, ``ChainOracle``,
``run_segment``) with ``time.thread_time()``, the CPU time of the calling
thread, which is where the nogil loop runs: other processes on a shared
machine do not inflate it.  Wall time (``perf_counter``) of the same calls
is printed beside it.  Each timed pass starts where a refresh is due, so a
TMU/SVRG pass always contains exactly one refresh; a first untimed pass
warms caches and page tables.  Medians over ``--repeats`` passes, the variants
timed round-robin so that a slow spell of a shared machine hits them alike.

Problems:
- dense 581,012 x 54 logistic regression (covertype-shaped, synthetic),
  float64 and float32;
- CSR a9a (32,561 x 123, ``shared/data/a9a.gz``), if present.

Target (issue 5): SAGA and TMU time per pass <= 1.5x uniform SGLD's.
Also printed: time per n gradient evaluations (TMU evaluates 2n per pass,
SVRG 3n), the unit of the AGLD paper's x-axis.  Small problems (a9a) are
timed over as many passes as fill ~0.5 s.

Usage: python benchmarks/bench_snapshot_speed.py [--repeats 5] [--batch-size 50]
       [--n-rows 581012]
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import covertype_like, data_dir, load_a9a  # noqa: E402

from skbayes_sg._sampling._chain import ChainOracle, run_segment
from skbayes_sg._sampling._dataset import RowData
from skbayes_sg._sampling._dynamics import SGLD
from skbayes_sg._sampling._estimators import GLMEstimator, Problem, UniformSubsampling

TARGET = 1.5


# name -> (estimator factory args): None = the lean uniform kernel of SGLD
VARIANTS = {
    "SGLD (uniform, RA)": None,
    "SAGA-LD (PPU-RA)": ("table", "random", False),
    "SAGA (PPU-CA)": ("table", "cyclic", False),
    "TMU-RA": ("table", "random", True),
    "TMU-CA": ("table", "cyclic", True),
    "SVRG-LD (PTU-RA)": ("snapshot", "random", True),
}


class PassTimer:
    """One chain of one variant, advanced a pass (m = ceil(n/b) steps) at a time."""

    def __init__(self, X, y, variant, b, h=1e-6):
        n = X.shape[0]
        self.m = int(np.ceil(n / b))
        self.n = n
        prob = Problem(RowData(X, True), y, "logistic", 1)
        self.theta = np.zeros(prob.dim)
        if variant is None:
            self.est = UniformSubsampling(prob, b)
        else:
            control, access, periodic = variant
            self.est = GLMEstimator(prob, b, access=access, control=control,
                                    period=self.m if periodic else 0, control_point=self.theta)
        self.oracle = ChainOracle(self.est, 1.0)
        self.dyn = SGLD(prob.dim, h, 1.0)
        self.bitgen = np.random.PCG64(0)
        self.cpu, self.wall, self.evals = [], [], []
        t0 = time.thread_time()
        self._pass()                       # warm-up pass (no refresh: it starts at step 0)
        self.first = time.thread_time() - t0

    def _pass(self):
        run_segment(self.oracle, self.dyn, self.theta, self.m, 1, None, self.bitgen)

    def timed_pass(self):
        """Each timed pass starts at a multiple of m: TMU/SVRG refresh exactly once in it."""
        e0 = self.est.n_evals
        t0, w0 = time.thread_time(), time.perf_counter()
        self._pass()
        self.cpu.append(time.thread_time() - t0)
        self.wall.append(time.perf_counter() - w0)
        self.evals.append((self.est.n_evals - e0) / self.n)

    def result(self):
        assert np.all(np.isfinite(self.theta))
        return float(np.median(self.cpu)), float(np.median(self.wall)), float(np.median(self.evals))


def bench(name, X, y, b, repeats):
    n = X.shape[0]
    m = int(np.ceil(n / b))
    print(f"\n== {name}: n={n}, d={X.shape[1]}, batch {b}: one pass = {m} steps")
    timers = {vname: PassTimer(X, y, variant, b) for vname, variant in VARIANTS.items()}
    # small problems: enough passes for ~0.5 s of timing per variant
    repeats = max(repeats, int(0.5 / max(timers["SGLD (uniform, RA)"].first, 1e-4)))
    # round-robin: a slow spell of the shared machine hits every variant alike
    for _ in range(repeats):
        for t in timers.values():
            t.timed_pass()
    rows = {vname: t.result() for vname, t in timers.items()}
    print(f"  ({repeats} passes per variant, interleaved; medians)")
    print(f"  {'variant':20s} {'CPU ms/pass':>11s} {'wall ms/pass':>12s} {'evals/n':>8s} "
          f"{'ratio (CPU)':>11s} {'ms per n evals':>14s} {'ratio':>6s}  target")
    base_cpu, _, base_ev = rows["SGLD (uniform, RA)"]
    for vname, (cpu, wall, ev) in rows.items():
        ratio = cpu / base_cpu
        per_n = cpu / ev
        flag = ""
        if vname.startswith(("SAGA", "TMU")):
            flag = "ok" if ratio <= TARGET else f"> {TARGET}x per pass of steps"
        print(f"  {vname:20s} {cpu * 1e3:11.1f} {wall * 1e3:12.1f} {ev:8.2f} {ratio:11.2f} "
              f"{per_n * 1e3:14.1f} {per_n / (base_cpu / base_ev):6.2f}  {flag}")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=50)
    parser.add_argument("--n-rows", type=int, default=581012)
    args = parser.parse_args()
    print("Timing: time.thread_time() around run_segment (CPU time of the thread that runs "
          "the nogil loop); wall = perf_counter of the same call. Ratios are against "
          "SGLD's time per pass; 'ratio' after 'ms per n evals' compares cost per "
          "gradient evaluation.")
    X, y = covertype_like(args.n_rows)
    bench("dense covertype-shaped logistic (float64)", X, y, args.batch_size, args.repeats)
    bench("dense covertype-shaped logistic (float32)", X.astype(np.float32), y,
          args.batch_size, args.repeats)
    del X
    try:
        Xs, ys = load_a9a()
    except FileNotFoundError:
        print(f"\n(a9a not found in {data_dir()}; CSR benchmark skipped)")
    else:
        bench("CSR a9a logistic", Xs, ys, args.batch_size, args.repeats)


if __name__ == "__main__":
    main()
