"""EWSG paper §5.1 (Fig. 1a, 1c, 1d-h): a 2-D Gaussian target, KL vs data passes.

Target: U(theta) = sum_i ½||theta - c_i||², c_i ~ N(0, I_2) (fixed seed), so
pi = N(mean(c), I/n) exactly (no prior: the engine's ChainOracle with alpha=0).
In the engine this is the multi-output Gaussian GLM with no features, an
intercept only, K = 2 outputs and noise variance 1.

Protocol (paper §5.1): n = 20, minibatch b = 1 (uniform, with replacement),
30 data passes, 10,000 independent chains; SGHMC and EWSG h = 5e-2, gamma = 10,
EWSG M = 1, x = "auto" (sqrt(h) gamma r_k / sigma); SGLD and pSGLD h = 5e-3
(pSGLD a = 0.99, lambda = 1e-5).  Equal gradient budget: a data pass is n
per-datum gradient evaluations, so EWSG (M + 1 candidates per step) takes
ceil(p n / (M + 1)) steps for p passes, the others p n steps.

Start: the paper does not say where chains start (Alg. 1: "Initialize
theta_0, r_0 arbitrarily").  We draw theta_0 ~ N(0, I) independently per chain
(the law the c_i come from; the same draws for every method) and, for the
momentum methods, r_0 ~ N(0, I) (its stationary law, as the library does).
pSGLD's accumulator starts at E[gbar²] at theta_0 (the library's choice;
Li et al. start at 0): V0 = (theta_0 - mean c)² + 1/n + Var_i(c_i).

KL estimator: at each checkpoint, fit a Gaussian to the 10,000 chains' states
(sample mean, unbiased sample covariance) and take the closed-form
KL(N(m̂, Ŝ) || N(mean c, I/n)).  Its Monte Carlo noise level is printed: the
same estimator applied to 10,000 exact draws (mean and sd over replicates).
A bootstrap over chains gives the standard error of each final KL.  For the
uniform-minibatch and full-gradient SGHMC and SGLD the stationary first two
moments are exact solutions of a discrete Lyapunov equation (linear dynamics
plus independent noise); their KL is printed as a check of the engine and as
the floor EWSG aims at (the full-gradient Euler-Maruyama kernel).

Usage: python benchmarks/bench_ewsg_gaussian.py [--chains 10000] [--quick]
Outputs: benchmarks/results/ewsg_gaussian_kl_vs_passes.png, ewsg_gaussian_kl_vs_M.png and
the printed tables in ewsg_gaussian.txt (with --quick: *_quick.*).
Exits non-zero if EWSG does not beat SGHMC on the final KL (n = 20, M = 1).
"""
import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from scipy.linalg import solve_discrete_lyapunov

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import fitted_gaussian_kl, gaussian_kl, results_dir, tee_stdout  # noqa: E402

from skbayes_sg._sampling._chain import EWSG_X_MODES, ChainOracle, run_segment  # noqa: E402
from skbayes_sg._sampling._dataset import RowData  # noqa: E402
from skbayes_sg._sampling._dynamics import PSGLD, SGHMC, SGLD  # noqa: E402
from skbayes_sg._sampling._estimators import Problem, UniformSubsampling  # noqa: E402

METHODS = ("ewsg", "sghmc", "sgld", "psgld")
LABELS = {"ewsg": "EWSG", "sghmc": "SGHMC", "sgld": "SGLD", "psgld": "pSGLD"}
STEP = {"ewsg": 5e-2, "sghmc": 5e-2, "sgld": 5e-3, "psgld": 5e-3}
GAMMA = 10.0
TABLE_PASSES = (1, 2, 5, 10, 20, 30)


def make_centers(n, seed):
    return np.random.default_rng(seed).standard_normal((n, 2))


def target(C):
    n, d = C.shape
    return C.mean(axis=0), np.eye(d) / n


def simulate(C, method, n_chains, passes, seed, *, M=1, ewsg_x="auto", h=None,
             gamma=GAMMA, batch=1):
    """Run ``n_chains`` independent chains, snapshot their states at each data pass count.

    Returns
    -------
    states : ndarray (len(passes), n_chains, d)
    evals : ndarray (len(passes),) per-datum gradient evaluations per chain
    info : dict (diverged chains, EWSG acceptance rate, seconds)
    """
    n, d = C.shape
    h = STEP[method] if h is None else h
    M = M if method == "ewsg" else 0
    problem = Problem(RowData(np.zeros((n, 0)), True), C, "gaussian", d, (1.0,))
    per_step = batch * (M + 1)
    # cumulative steps at each checkpoint: the first step count reaching p n evaluations
    steps = [math.ceil(p * n / per_step) for p in passes]
    init = np.random.default_rng([seed, 0])      # same starts for every method
    theta0 = init.standard_normal((n_chains, d))
    r0 = init.standard_normal((n_chains, d))
    cbar = C.mean(axis=0)
    var_c = C.var(axis=0)
    states = np.empty((len(passes), n_chains, d))
    x_mode = EWSG_X_MODES[ewsg_x]
    diverged, acc, prop = 0, 0, 0
    t0 = time.perf_counter()
    for c in range(n_chains):
        est = UniformSubsampling(problem, batch)
        if method in ("sghmc", "ewsg"):
            dyn = SGHMC(d, h, 1.0, friction=gamma, r0=r0[c])
        elif method == "sgld":
            dyn = SGLD(d, h, 1.0)
        elif method == "psgld":
            V0 = (theta0[c] - cbar) ** 2 + 1.0 / n + var_c
            dyn = PSGLD(d, h, 1.0, n_data=float(n), V0=V0)
        else:
            raise ValueError(method)
        oracle = ChainOracle(est, 0.0, ewsg_chain_length=M, dynamics=dyn, ewsg_x=x_mode)
        theta = theta0[c].copy()
        bg = np.random.PCG64([seed, 1, c])
        done = 0
        for k, s in enumerate(steps):
            if s > done:
                n_done, _ = run_segment(oracle, dyn, theta, s - done, 1, None, bg)
                if n_done < s - done:
                    diverged += 1
                    states[k:, c] = np.nan
                    break
                done = s
            states[k, c] = theta
        acc += oracle.ewsg_accepted
        prop += oracle.ewsg_proposed
    info = {"diverged": diverged, "acceptance": acc / prop if prop else float("nan"),
            "seconds": time.perf_counter() - t0}
    evals = np.array(steps) * per_step
    return states, evals, info


def kl_curve(states, C):
    m1, S1 = target(C)
    ok = np.all(np.isfinite(states), axis=(0, 2))
    return fitted_gaussian_kl(states[:, ok], m1, S1)


def bootstrap_se(final_states, C, n_boot=200, seed=0):
    m1, S1 = target(C)
    rng = np.random.default_rng(seed)
    N = final_states.shape[0]
    kls = [fitted_gaussian_kl(final_states[rng.integers(0, N, N)], m1, S1)
           for _ in range(n_boot)]
    return float(np.std(kls, ddof=1))


def exact_noise_level(C, n_draws, n_rep=200, seed=0):
    """The KL estimator applied to n_draws exact draws from the target, over replicates."""
    m1, S1 = target(C)
    rng = np.random.default_rng(seed)
    draws = rng.multivariate_normal(m1, S1, size=(n_rep, n_draws))
    kls = fitted_gaussian_kl(draws, m1, S1)
    return float(kls.mean()), float(kls.std(ddof=1)), float(np.quantile(kls, 0.95))


def stationary_kl(C, method, h, gamma=GAMMA, batch=1, full=False):
    """Exact KL of the stationary law of uniform-SG (or full-gradient) SGHMC / SGLD.

    With g = n(theta - cbar) + n(cbar - c_I) the chains are linear with additive
    noise independent of the state: the stationary mean is cbar and the
    covariance solves S = A S A^T + Q (the law is not Gaussian for the
    subsampled chains; this is the KL of its moment-matched Gaussian, which is
    what the fitted-Gaussian estimator converges to).
    """
    n, d = C.shape
    Sc = np.cov(C.T, bias=True) / batch * (0.0 if full else 1.0)
    I = np.eye(d)
    if method == "sgld":
        A = (1 - h * n) * I
        Q = h * h * n * n * Sc + 2 * h * I
        S = solve_discrete_lyapunov(A, Q)
    elif method == "sghmc":
        A = np.block([[I, h * I], [-h * n * I, (1 - h * gamma) * I]])
        Q = np.zeros((2 * d, 2 * d))
        Q[d:, d:] = h * h * n * n * Sc + 2 * gamma * h * I
        S = solve_discrete_lyapunov(A, Q)[:d, :d]
    else:
        raise ValueError(method)
    m1, S1 = target(C)
    return float(gaussian_kl(m1, S, m1, S1))


def print_table(title, header, rows, fmt="{:>10.4f}"):
    print(f"\n{title}")
    print("  " + "".join(f"{h:>10s}" if i else f"{h:<22s}" for i, h in enumerate(header)))
    for name, vals in rows:
        print("  " + f"{name:<22s}" + "".join(
            fmt.format(v) if isinstance(v, float) else f"{v!s:>10s}" for v in vals))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=10000)
    parser.add_argument("--quick", action="store_true",
                        help="2,000 chains, fewer M values, no long runs (< 20 s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the c_i")
    parser.add_argument("--long-passes", type=int, default=100,
                        help="also report KL after this many passes in the M sweep "
                             "(separates bias from slow convergence; 0 = off)")
    args = parser.parse_args()
    n_chains = 2000 if args.quick and args.chains == 10000 else args.chains
    long_passes = 0 if args.quick else args.long_passes
    t_start = time.perf_counter()
    out_dir = results_dir()

    # ------------------------------------------------------------- Fig. 1a
    n = 20
    C = make_centers(n, args.seed)
    m1, S1 = target(C)
    passes = list(range(0, 31))
    print(f"EWSG §5.1: 2-D Gaussian, n={n}, b=1, {n_chains} chains, 30 data passes; "
          f"target N(mean c = [{m1[0]:.3f}, {m1[1]:.3f}], I/{n})")
    print("start: theta_0 ~ N(0, I) per chain (same draws for all methods), r_0 ~ N(0, I)")
    print(f"steps: SGHMC/EWSG h=5e-2, gamma={GAMMA:g}, EWSG M=1 x=auto; SGLD/pSGLD h=5e-3")
    curves, finals, infos = {}, {}, {}
    for method in METHODS:
        states, evals, info = simulate(C, method, n_chains, passes, seed=1)
        curves[method] = kl_curve(states, C)
        finals[method] = states[-1][np.all(np.isfinite(states[-1]), axis=1)]
        infos[method] = info
        assert np.array_equal(evals, np.ceil(np.array(passes) * n / (2 if method == "ewsg" else 1))
                              * (2 if method == "ewsg" else 1))
    idx = [passes.index(p) for p in TABLE_PASSES]
    rows = [(LABELS[m], [float(curves[m][i]) for i in idx]) for m in METHODS]
    print_table("KL(samples || target) vs data passes (Fig. 1a)",
                ["method"] + [str(p) for p in TABLE_PASSES], rows)
    se = {m: bootstrap_se(finals[m], C) for m in METHODS}
    noise_mean, noise_sd, noise_q95 = exact_noise_level(C, n_chains)
    print(f"\n  final KL ± bootstrap se:  " + ",  ".join(
        f"{LABELS[m]} {curves[m][-1]:.4f} ± {se[m]:.4f}" for m in METHODS))
    print(f"  estimator noise: KL of {n_chains} exact draws = {noise_mean:.5f} ± {noise_sd:.5f} "
          f"(mean ± sd over 200 replicates; 95% quantile {noise_q95:.5f})")
    print(f"  start KL (pass 0, theta_0 ~ N(0, I)): {curves['sghmc'][0]:.3f}")
    for m in METHODS:
        extra = f", EWSG index-chain acceptance {infos[m]['acceptance']:.3f}" if m == "ewsg" else ""
        print(f"  {LABELS[m]:<6s} {infos[m]['seconds']:5.1f} s, diverged chains "
              f"{infos[m]['diverged']}{extra}")
    print("\n  exact stationary KL (Lyapunov; the moment-matched law of the chain):")
    for m in ("sghmc", "sgld"):
        print(f"    {LABELS[m]:<6s} uniform b=1: {stationary_kl(C, m, STEP[m]):.4f}   "
              f"full gradient (the kernel EWSG mimics): "
              f"{stationary_kl(C, m, STEP[m], full=True):.4f}")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    for m in METHODS:
        ax.semilogy(passes, curves[m], marker="o", ms=3, label=LABELS[m])
    ax.axhline(noise_mean, color="gray", ls=":", label=f"estimator noise ({n_chains} exact draws)")
    ax.axhline(stationary_kl(C, "sghmc", STEP["sghmc"], full=True), color="k", ls="--", lw=0.8,
               label="full-gradient SGHMC (stationary)")
    ax.set_xlabel("data passes (per-datum gradient evaluations / n)")
    ax.set_ylabel("KL(samples || target)")
    ax.set_title(f"EWSG §5.1 Fig. 1a: 2-D Gaussian, n={n}, b=1, {n_chains} chains")
    ax.legend(fontsize=8)
    fig.tight_layout()
    suffix = "_quick" if args.quick else ""
    path_a = out_dir / f"ewsg_gaussian_kl_vs_passes{suffix}.png"
    fig.savefig(path_a, dpi=120)
    plt.close(fig)

    # ------------------------------------------------------------- Fig. 1c
    x_rows = []
    for mode in ("auto", "zero", "one", "momentum-stop"):
        states, _, info = simulate(C, "ewsg", n_chains, list(TABLE_PASSES), seed=1, ewsg_x=mode)
        kl = kl_curve(states, C)
        x_rows.append((f"x={mode}", [float(v) for v in kl] + [f"{info['acceptance']:.3f}"]))
    x_rows.append(("(SGHMC, uniform)", [float(curves["sghmc"][i]) for i in idx] + ["-"]))
    print_table("EWSG M=1, choice of x (Fig. 1c): KL vs data passes",
                ["x"] + [str(p) for p in TABLE_PASSES] + ["accept"], x_rows)

    # ---------------------------------------------------------- Fig. 1d-h
    Ms = (0, 1, 4, 19) if args.quick else (0, 1, 2, 4, 9, 19)
    ns = (20, 50, 100)
    ckpts = [30] + ([long_passes] if long_passes > 30 else [])
    kl_M = {}
    for nn in ns:
        Cn = make_centers(nn, args.seed)
        for M in Ms:
            method = "sghmc" if M == 0 else "ewsg"
            states, _, info = simulate(Cn, method, n_chains, ckpts, seed=2, M=M)
            kl_M[nn, M] = (kl_curve(states, Cn), info)
    header = ["M"] + [f"n={nn}" for nn in ns]
    rows = [(f"{M}" + (" (SGHMC)" if M == 0 else ""), [float(kl_M[nn, M][0][0]) for nn in ns])
            for M in Ms]
    rows.append(("SGHMC stationary", [stationary_kl(make_centers(nn, args.seed), "sghmc", 5e-2)
                                      for nn in ns]))
    rows.append(("full-grad stationary", [stationary_kl(make_centers(nn, args.seed), "sghmc", 5e-2,
                                                        full=True) for nn in ns]))
    print_table("Final KL after 30 passes vs index-chain length M (Fig. 1d-h; h=5e-2, "
                "gamma=10, b=1; c_1..c_20 shared across n)", header, rows)
    for nn in ns:
        best = min(Ms, key=lambda M: kl_M[nn, M][0][0])
        print(f"  n={nn}: best M = {best}")
    if long_passes > 30:
        rows = [(f"{M}" + (" (SGHMC)" if M == 0 else ""), [float(kl_M[nn, M][0][1]) for nn in ns])
                for M in Ms]
        print_table(f"Same, after {long_passes} passes (near-stationary: bias only)", header, rows)
        for nn in ns:
            best = min(Ms, key=lambda M: kl_M[nn, M][0][1])
            print(f"  n={nn}: best M = {best}")
    rows = [(f"{M}", [f"{kl_M[nn, M][1]['acceptance']:.3f}" if M else "-" for nn in ns])
            for M in Ms]
    print_table("EWSG index-chain acceptance rate", header, rows)

    fig, axes = plt.subplots(1, len(ns), figsize=(4 * len(ns), 3.6), sharey=False)
    for ax, nn in zip(axes, ns):
        Cn = make_centers(nn, args.seed)
        x = np.array(Ms) + 1
        ax.loglog(x, [kl_M[nn, M][0][0] for M in Ms], "o-", label="30 passes")
        if long_passes > 30:
            ax.loglog(x, [kl_M[nn, M][0][1] for M in Ms], "s--", label=f"{long_passes} passes")
        ax.axhline(stationary_kl(Cn, "sghmc", 5e-2, full=True), color="k", ls=":", lw=0.8,
                   label="full-gradient SGHMC")
        ax.set_xticks(x)
        ax.set_xticklabels([str(M) for M in Ms])
        ax.set_xlabel("M (0 = SGHMC)")
        ax.set_title(f"n = {nn}")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("KL(samples || target)")
    fig.suptitle("EWSG §5.1 Fig. 1d-h: KL vs index-chain length M (b=1, h=5e-2, gamma=10)")
    fig.tight_layout()
    path_m = out_dir / f"ewsg_gaussian_kl_vs_M{suffix}.png"
    fig.savefig(path_m, dpi=120)
    plt.close(fig)

    print(f"\nplots: {path_a}\n       {path_m}")
    print(f"total {time.perf_counter() - t_start:.1f} s")

    # ---------------------------------------------------------------- claim
    e, s = curves["ewsg"][-1], curves["sghmc"][-1]
    z = (s - e) / math.hypot(se["ewsg"], se["sghmc"])
    if not e < s:
        print(f"\nFAIL: EWSG final KL {e:.4f} does not beat SGHMC {s:.4f} (paper §5.1, Fig. 1a)",
              file=sys.stderr)
        sys.exit(1)
    print(f"\nOK: EWSG beats SGHMC on final KL ({e:.4f} vs {s:.4f}, {z:.1f} bootstrap se apart)")
    for m in ("sgld", "psgld"):
        verdict = "beats" if e < curves[m][-1] else "does NOT beat"
        print(f"    EWSG {verdict} {LABELS[m]} ({e:.4f} vs {curves[m][-1]:.4f})")


if __name__ == "__main__":
    quick = "--quick" in sys.argv[1:]
    with tee_stdout(results_dir() / ("ewsg_gaussian_quick.txt" if quick else "ewsg_gaussian.txt")):
        main()
