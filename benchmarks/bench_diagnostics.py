"""Time and memory of ``summary()`` on many parameters (issue 16).

4 chains x 1,000 draws of d = 10,000 parameters (AR(1) draws, so that ESS
and R-hat have something to estimate), the shape of a sparse text model's
posterior.  ``summary()`` computes means, sds, three quantiles, bulk and tail
ESS and split R-hat per parameter, in blocks of parameters (threads).

Reported: wall time, the peak of memory allocated during the call
(``tracemalloc``, which sees numpy's buffers) as a multiple of the draws'
own size, and, as a reference measured in the same run on the same draws,
ArviZ's ``az.summary`` (when installed) as a time ratio.

Targets (issue 16): under 5 s; peak memory at most 2x the draws.

Usage: python benchmarks/bench_diagnostics.py [--dim 10000] [--draws 1000]
"""
import argparse
import time
import tracemalloc
from types import SimpleNamespace

import numpy as np

from skbayes_sg.diagnostics import summary


def ar1_draws(n_chains, n_draws, dim, rho=0.9, seed=0):
    rng = np.random.default_rng(seed)
    out = np.empty((n_chains, n_draws, dim))
    out[:, 0] = rng.standard_normal((n_chains, dim))
    scale = np.sqrt(1.0 - rho * rho)
    for t in range(1, n_draws):
        out[:, t] = rho * out[:, t - 1] + scale * rng.standard_normal((n_chains, dim))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dim", type=int, default=10_000)
    parser.add_argument("--draws", type=int, default=1_000)
    parser.add_argument("--chains", type=int, default=4)
    args = parser.parse_args()
    draws = ar1_draws(args.chains, args.draws, args.dim)
    fitted = SimpleNamespace(coef_samples_=draws[:, :, :-1], intercept_samples_=draws[:, :, -1],
                             fit_intercept=True)
    summary(SimpleNamespace(coef_samples_=draws[:, :20, :10],
                            intercept_samples_=draws[:, :20, 0], fit_intercept=True))  # warm
    tracemalloc.start()
    t0 = time.perf_counter()
    table = summary(fitted)
    seconds = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"summary() of {args.chains} x {args.draws} draws of d = {args.dim:,}: "
          f"{seconds:.2f} s, peak allocation {peak / draws.nbytes:.2f}x the draws "
          f"({draws.nbytes / 2**20:.0f} MiB); {len(table.index):,} rows")
    try:
        import arviz as az
    except ImportError:
        print("ArviZ not installed: no reference")
        return
    t0 = time.perf_counter()
    az.summary(az.from_dict(posterior={"theta": draws}))
    reference = time.perf_counter() - t0
    print(f"az.summary on the same draws: {reference:.2f} s; ours / ArviZ = "
          f"{seconds / reference:.2f}")


if __name__ == "__main__":
    main()
