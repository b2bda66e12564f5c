"""AGLD §6.2 on CASP: Bayesian ridge regression, test MSE per data pass.

Reproduces the protocol of the aggregated-gradient Langevin paper (Zhang et
al., AAAI 2020, §6.2 and Fig. 5) on the UCI CASP data (45,730 x 9; the
paper's SliceLocation and YearPredictionMSD are not in ``shared/data``):

- random 80/20 train/test split; features and target standardised with the
  training mean and sd; prior N(0, I) (``alpha=1``); noise variance fixed to
  the OLS residual variance of the training set (so no set-up pass is spent
  estimating it);
- every chain starts at theta = 0 (``init="zeros"``, no warm-up), draws are
  kept along the way, and the prediction at a checkpoint is the posterior
  mean prediction ``X_test @ mean(draws so far)`` (the running mean of all
  draws taken by then, burn-in included, as in the paper's curves);
- x-axis: data passes = per-datum gradient evaluations / n (refresh passes
  and the initial table pass of SVRG/SAGA/TMU included), checked against
  the estimators' ``n_grad_evals_``;
- methods: LMC (``subsampling="full"``), SGLD (``"uniform"``), SVRG-LD
  (``"svrg"``, PTU-RA), SAGA-LD (``"saga"``, PPU-RA), TMU-RA, TMU-RR,
  TMU-CA; ``--all`` adds the other AGLD variants (PTU-RR/CA, PPU-RR/CA).
- step sizes h = c / lambda_max(posterior precision) for c in a grid; each
  method is reported at its own best c (smallest mean excess test MSE at the
  last pass among the runs that stayed stable), the usual "tuned step size"
  protocol, and the full grid is printed.

The metric is the *excess* test MSE: test MSE minus that of the exact
posterior mean (the floor every method converges to).  Each configuration
runs ``--chains`` independent chains; tables give the mean over chains and
its standard error.

Checks (the paper's claims): TMU <= PPU (SAGA-LD) and TMU <= PTU (SVRG-LD)
with random access; the AGLD methods beat SGLD and LMC; TMU-RA beats
TMU-RR and TMU-CA with the data in memory.

Usage: python benchmarks/bench_agld_ridge.py [--passes 50] [--batch-size 100]
       [--chains 5] [--fractions 0.05,0.1,0.2,0.3,0.5,0.7,1,1.4] [--init zeros|mode]
       [--all] [--quick]
Outputs: tables on stdout, benchmarks/results/agld_ridge_casp_b<batch>.{png,json}.
"""
import argparse
import gzip
import json
import os
import time
from pathlib import Path

import numpy as np

from skbayes_sg import SGMCMCRidge
from skbayes_sg.exceptions import SamplingDivergedError

RESULTS = Path(__file__).resolve().parent / "results"

# name -> (subsampling, access)
METHODS = {
    "LMC": ("full", "random"),
    "SGLD": ("uniform", "random"),
    "SVRG-LD (PTU-RA)": ("svrg", "random"),
    "SAGA-LD (PPU-RA)": ("saga", "random"),
    "TMU-RA": ("tmu", "random"),
    "TMU-RR": ("tmu", "reshuffle"),
    "TMU-CA": ("tmu", "cyclic"),
}
EXTRA = {
    "PTU-RR": ("svrg", "reshuffle"),
    "PTU-CA": ("svrg", "cyclic"),
    "PPU-RR": ("saga", "reshuffle"),
    "PPU-CA": ("saga", "cyclic"),
}
# a run whose excess test MSE exceeds this (predicting 0 gives ~1 on the
# standardised target) at any checkpoint is reported as unstable
UNSTABLE = 1.0


def data_dir():
    env = os.environ.get("SKBAYES_SG_DATA")
    if env:
        return Path(env).expanduser().resolve()
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


def load_casp(seed=0):
    """CASP (target RMSD, features F1..F9): 80/20 split, standardised."""
    path = data_dir() / "CASP.csv.gz"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: set SKBAYES_SG_DATA to the directory "
                                "holding CASP.csv.gz")
    with gzip.open(path, "rt", newline="") as f:
        header = f.readline().strip().split(",")
        D = np.loadtxt(f, delimiter=",")
    assert header[0] == "RMSD" and D.shape == (45730, 10), (header, D.shape)
    y, X = D[:, 0], D[:, 1:]
    perm = np.random.default_rng(seed).permutation(len(y))
    n_train = int(0.8 * len(y))
    tr, te = perm[:n_train], perm[n_train:]
    mu, sd = X[tr].mean(axis=0), X[tr].std(axis=0)
    y_mu, y_sd = y[tr].mean(), y[tr].std()
    Xs, ys = (X - mu) / sd, (y - y_mu) / y_sd
    return (np.ascontiguousarray(Xs[tr]), ys[tr], np.ascontiguousarray(Xs[te]), ys[te])


def chain_costs(subsampling, n, b, period, n_steps):
    """Per-datum gradient evaluations of one chain after 1..n_steps steps
    (plus its initial table/snapshot pass for the AGLD methods)."""
    k = np.arange(1, n_steps + 1, dtype=np.int64)
    if subsampling == "full":
        return n * k
    if subsampling == "uniform":
        return b * k
    per_step = 2 * b if subsampling == "svrg" else b
    refreshes = (k - 1) // period if subsampling in ("svrg", "tmu") else 0
    return n + per_step * k + n * refreshes


def run(name, subsampling, access, c, data, args, lam_max, noise_var):
    Xtr, ytr, Xte, yte, floor, post_mean = data
    n, b = len(ytr), args.batch_size
    period = int(np.ceil(n / b))
    per_pass = {"full": n, "uniform": b, "svrg": 2 * b + b, "saga": b, "tmu": 2 * b}
    n_steps = int(np.ceil(args.passes * n / per_pass[subsampling])) + 2
    thin = max(1, n_steps // (args.passes * args.draws_per_pass))
    n_samples = n_steps // thin
    n_steps = n_samples * thin
    est = SGMCMCRidge(metric="identity", metropolis=False,
                      subsampling=subsampling, access=access, batch_size=b,
                      step_size=c / lam_max, noise_var=noise_var, alpha=1.0,
                      init=post_mean if args.init == "mode" else "zeros",
                      n_warmup=0, n_samples=n_samples, thin=thin, n_chains=args.chains,
                      random_state=args.seed)
    t0 = time.perf_counter()
    try:
        est.fit(Xtr, ytr)
    except SamplingDivergedError:
        return None
    seconds = time.perf_counter() - t0
    cost = chain_costs(subsampling, n, b, period, n_steps)
    setup = n if subsampling in ("svrg", "saga", "tmu") else 0
    assert est.n_grad_evals_ == setup + args.chains * (cost[-1] - setup), (
        name, est.n_grad_evals_, cost[-1])
    draw_cost = cost[thin - 1::thin]                       # after each kept draw
    W = np.concatenate([est.coef_samples_, est.intercept_samples_[..., None]], axis=-1)
    running = np.cumsum(W, axis=1) / np.arange(1, n_samples + 1)[None, :, None]
    checkpoints = np.arange(1, args.passes + 1)
    excess = np.full((args.chains, len(checkpoints)), np.nan)
    Xte_e = np.hstack([Xte, np.ones((len(yte), 1))])
    for j, p in enumerate(checkpoints):
        k = np.searchsorted(draw_cost, p * n, side="right")   # draws paid for by p passes
        if k == 0:
            continue
        pred = Xte_e @ running[:, k - 1].T                     # (n_test, chains)
        with np.errstate(over="ignore", invalid="ignore"):
            excess[:, j] = np.mean((yte[:, None] - pred) ** 2, axis=0) - floor
    bad = ~np.isfinite(excess[:, -1]) | np.any(np.nan_to_num(excess, nan=0.0) > UNSTABLE,
                                                   axis=1)
    if np.any(bad):
        return None
    return dict(name=name, c=c, h=c / lam_max, excess=excess, seconds=seconds,
                n_grad_evals=int(est.n_grad_evals_), thin=thin, n_steps=n_steps)


def fmt(x):
    return "   n/a  " if not np.isfinite(x) else f"{x:8.2e}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--chains", type=int, default=5)
    parser.add_argument("--fractions", default="0.05,0.1,0.2,0.3,0.5,0.7,1,1.4",
                        help="step sizes c / lambda_max to try")
    parser.add_argument("--draws-per-pass", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--init", choices=["zeros", "mode"], default="zeros",
                        help="start at 0 (the paper's curves, burn-in included) or at the "
                             "exact posterior mean (no burn-in: Monte Carlo error only)")
    parser.add_argument("--all", action="store_true", help="also PTU-RR/CA and PPU-RR/CA")
    parser.add_argument("--quick", action="store_true", help="10 passes, 3 chains, 3 steps")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.passes, args.chains, args.fractions = 10, 3, "0.1,0.3,0.5"
    fractions = [float(v) for v in args.fractions.split(",")]

    Xtr, ytr, Xte, yte = load_casp(args.seed)
    n, d = Xtr.shape
    Xe = np.hstack([Xtr, np.ones((n, 1))])
    coef_ols, *_ = np.linalg.lstsq(Xe, ytr, rcond=None)
    noise_var = float(np.sum((ytr - Xe @ coef_ols) ** 2) / (n - d - 1))
    P = np.eye(d + 1) + Xe.T @ Xe / noise_var
    eig = np.linalg.eigvalsh(P)
    post_mean = np.linalg.solve(P, Xe.T @ ytr / noise_var)
    Xte_e = np.hstack([Xte, np.ones((len(yte), 1))])
    floor = float(np.mean((yte - Xte_e @ post_mean) ** 2))
    L_i = np.einsum("ij,ij->i", Xe, Xe) / noise_var
    b = args.batch_size
    print(f"CASP: n_train={n}, n_test={len(yte)}, d={d}; noise_var={noise_var:.4f}; "
          f"batch {b} ({int(np.ceil(n / b))} steps per pass)")
    print(f"posterior precision: lambda_max={eig[-1]:.4g}, lambda_min={eig[0]:.4g} "
          f"(condition {eig[-1] / eig[0]:.0f})")
    print(f"per-datum curvature L_i = |x_i|^2/sigma^2: mean {L_i.mean():.1f}, max {L_i.max():.0f}; "
          f"h (n/b) max L_i = {n / b * L_i.max() / eig[-1]:.1f} c")
    print(f"test MSE of the exact posterior mean (the floor): {floor:.5f}\n")

    methods = dict(METHODS, **(EXTRA if args.all else {}))
    data = (Xtr, ytr, Xte, yte, floor, post_mean)
    grid = {}
    t_start = time.perf_counter()
    for name, (sub, acc) in methods.items():
        for c in fractions:
            grid[name, c] = run(name, sub, acc, c, data, args, eig[-1], noise_var)
    print(f"(grid of {len(grid)} runs in {time.perf_counter() - t_start:.0f} s)\n")

    # ---- the grid: final excess MSE per method and step fraction
    print(f"Excess test MSE after {args.passes} passes, mean over {args.chains} chains "
          "(unstable: excess > 1 at some checkpoint or diverged)")
    print(f"{'method':18s} " + " ".join(f"c={c:<7g}" for c in fractions))
    for name in methods:
        cells = []
        for c in fractions:
            r = grid[name, c]
            cells.append("unstable " if r is None else f"{np.mean(r['excess'][:, -1]):9.2e}")
        print(f"{name:18s} " + " ".join(cells))

    # ---- tuned: each method at its best step
    best = {}
    for name in methods:
        runs = [r for c in fractions if (r := grid[name, c]) is not None]
        if runs:
            best[name] = min(runs, key=lambda r: np.mean(r["excess"][:, -1]))
    cps = [p for p in (1, 2, 3, 5, 10, 20, 30, 50, 100, 200) if p <= args.passes]
    if args.passes not in cps:
        cps.append(args.passes)
    print("\nTuned step sizes: excess test MSE (mean ± se over chains) at data passes")
    print(f"{'method':18s} {'c':>6s} " + " ".join(f"{p:>18d}" for p in cps))
    for name, r in best.items():
        E = r["excess"]
        cells = []
        for p in cps:
            col = E[:, p - 1]
            if np.all(np.isfinite(col)):
                cells.append(f"{col.mean():8.2e} ± {col.std(ddof=1) / np.sqrt(len(col)):7.1e}")
            else:
                cells.append(f"{'(no draw yet)':>18s}")
        print(f"{name:18s} {r['c']:6g} " + " ".join(cells))

    # ---- the paper's ordering claims, checkpoint by checkpoint (means; a
    # difference within 2 standard errors counts as a tie, which satisfies <=)
    def holds(a, b_):
        if a not in best or b_ not in best:
            return None
        Ea, Eb = best[a]["excess"], best[b_]["excess"]
        ok = {}
        for p in cps:
            ca, cb = Ea[:, p - 1], Eb[:, p - 1]
            if not (np.all(np.isfinite(ca)) and np.all(np.isfinite(cb))):
                continue   # one of them has no draw yet (its first pass fills the table)
            se = np.hypot(ca.std(ddof=1), cb.std(ddof=1)) / np.sqrt(len(ca))
            ok[p] = bool(ca.mean() <= cb.mean() + 2 * se)
        return ok

    claims = [("TMU-RA", "SAGA-LD (PPU-RA)"), ("TMU-RA", "SVRG-LD (PTU-RA)"),
              ("SAGA-LD (PPU-RA)", "SVRG-LD (PTU-RA)"), ("SAGA-LD (PPU-RA)", "SGLD"),
              ("SVRG-LD (PTU-RA)", "SGLD"), ("TMU-RA", "SGLD"), ("SGLD", "LMC"),
              ("TMU-RA", "TMU-RR"), ("TMU-RA", "TMU-CA")]
    print("\nOrdering claims (tuned curves; <= up to 2 se), checkpoints where it holds:")
    summary = {}
    for a, b_ in claims:
        ok = holds(a, b_)
        if ok is None:
            print(f"  {a} <= {b_}: one of them unstable at every step size")
            continue
        summary[f"{a} <= {b_}"] = {str(p): v for p, v in ok.items()}
        fails = [p for p, v in ok.items() if not v]
        print(f"  {a:18s} <= {b_:18s}: {len(ok) - len(fails)}/{len(ok)} "
              f"({'holds' if not fails else 'fails at passes ' + str(fails)})")

    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "args": vars(args), "n_train": n, "noise_var": noise_var, "floor_mse": floor,
        "lambda_max": float(eig[-1]), "lambda_min": float(eig[0]),
        "grid_final_excess": {f"{k[0]}|c={k[1]}": (None if v is None else
                                                   float(np.mean(v["excess"][:, -1])))
                              for k, v in grid.items()},
        "tuned": {k: {"c": v["c"], "seconds": v["seconds"],
                      "excess_mean": [None if not np.all(np.isfinite(col)) else float(col.mean())
                                      for col in v["excess"].T]}
                  for k, v in best.items()},
        "claims": summary,
    }
    stem = f"agld_ridge_casp_b{b}" + ("_mode" if args.init == "mode" else "")
    (RESULTS / f"{stem}.json").write_text(json.dumps(out, indent=1))
    if not args.no_plot:
        plot(best, args, RESULTS / f"{stem}.png")
        print(f"\nplot: {RESULTS / (stem + '.png')}")
    print(f"numbers: {RESULTS / (stem + '.json')}")


def plot(best, args, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    passes = np.arange(1, args.passes + 1)
    panels = [("Snapshot updates (random access)",
               ["LMC", "SGLD", "SVRG-LD (PTU-RA)", "SAGA-LD (PPU-RA)", "TMU-RA"]),
              ("TMU: data access", ["TMU-RA", "TMU-RR", "TMU-CA"])]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, (title, names) in zip(axes, panels):
        for name in names:
            if name not in best:
                continue
            E = best[name]["excess"]
            ok = np.all(np.isfinite(E), axis=0)          # passes with draws in every chain
            ax.plot(passes[ok], E[:, ok].mean(axis=0), label=f"{name} (c={best[name]['c']:g})")
        ax.set_yscale("log")
        ax.set_xlabel("data passes (gradient evaluations / n)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("excess test MSE (vs exact posterior mean)")
    fig.suptitle(f"Bayesian ridge on CASP (AGLD §6.2 protocol), batch {args.batch_size}, "
                 f"{args.chains} chains, tuned h = c / lambda_max")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
