"""Adaptive subsample sizes: ASGLD-CV and ASGLD-CV-PS against fixed-size
SGLD-CV and SGLD-CV-PS (Fig. 3 and Fig. 5 of the preferential-subsampling paper).

The adaptive estimators pick ``b_k = clip(ceil(||theta_k - mode||^2
sum_i (L_i^2 / p_i) / V*), 1, n)`` at every step, keeping the bound on the
pseudo-variance under ``V*``.  ``V*`` is set by the paper's rule (section
5.3.3): run the fixed-size sampler (``b`` = 0.1% of n, ten chains); per chain
take q95, the 95% quantile of ``||theta_k - mode||^2`` over its draws, and the
proposal ``q95 sum_i (L_i^2/p_i) / b``; ``V*`` is the largest proposal.  The
adaptive chains then run as many iterations as the fixed ones; the table
compares their KSD and the data they processed.

The library's own pilot rule (``pv_threshold="auto"``: a 500-step pilot at the
*automatic* step size) is run as well and reported in a second table.

Scenarios: (i) logistic regression on balanced synthetic data
(``make_classification``, 4 features, n = 20,000), (ii) linear regression on
CASP (as ``bench_preferential.py``).  KSD: IMQ kernel on the exact
``grad log pi``, window [T/2, T] of the iterations, ten chains pooled.

Run: ``PYTHONPATH=. python benchmarks/bench_adaptive.py`` (a few minutes).
Plot: ``benchmarks/results/adaptive.png``.
"""
import argparse
import time
from pathlib import Path

import numpy as np
from sklearn.datasets import make_classification

from bench_preferential import glm_of, load_casp, spread
from skbayes_sg import SGMCMCLogisticRegression, SGMCMCRidge
from skbayes_sg._sampling._context import FitContext
from skbayes_sg.diagnostics import ksd
from skbayes_sg.diagnostics._ksd import grad_log_posterior

RESULTS = Path(__file__).resolve().parent / "results"


def load_synthetic(n=20000, seed=0):
    X, y = make_classification(n_samples=n, n_features=4, n_informative=4, n_redundant=0,
                               random_state=seed)
    return dict(name="synthetic logistic", X=np.ascontiguousarray(X, dtype=np.float64),
                y=y.astype(np.float64), model="logistic")


def lipschitz(data):
    X = data["X"]
    sq = np.einsum("ij,ij->i", X, X) + 1.0
    return sq / data["noise_var"] if data["model"] == "linear" else 0.25 * sq


def make(data, **kw):
    if data["model"] == "linear":
        return SGMCMCRidge(noise_var=data["noise_var"], **kw)
    return SGMCMCLogisticRegression(**kw)


def draws_of(est):
    return np.concatenate([est.coef_samples_, est.intercept_samples_[..., None]], axis=-1)


def window_stats(data, est):
    """KSD of the second half of every chain's draws, pooled, and their sd
    ratios (median, min, max) and KL against the reference Gaussian."""
    d = draws_of(est)
    C, S, dim = d.shape
    th = d[:, S // 2:].reshape(-1, dim)
    score = grad_log_posterior(th, data["X"], data["y"], glm_of(data), float(est.alpha), True)
    return (ksd(th, score),) + spread(th, data["ref_mean"], data["ref_cov"])


def set_reference(data, alpha=1.0):
    """Exact posterior (linear) or Laplace approximation (logistic), and tr H."""
    n = data["X"].shape[0]
    ctx = FitContext(data["X"], data["y"], glm_of(data), alpha, True, 1)
    mode = ctx.mode()
    H = ctx.hessian(mode)
    data["ref_cov"] = np.linalg.inv(H)
    if data["model"] == "linear":
        Xe = np.hstack([data["X"], np.ones((n, 1))])
        data["ref_mean"] = data["ref_cov"] @ (Xe.T @ data["y"]) / data["noise_var"]
        data["ref_name"] = "exact posterior"
    else:
        data["ref_mean"] = mode
        data["ref_name"] = "Laplace approximation"
    data["tr_h"] = float(np.trace(H))


def fmt_stats(st):
    k, med, lo, hi, kl = st
    return f"{k:9.4g} {med:9.3f} [{lo:5.3f}, {hi:5.3f}] {kl:8.3g}"


def max_d2(est):
    return float(np.max(np.sum((draws_of(est) - est.mode_.ravel()) ** 2, axis=2)))


def paper_v_star(data, fixed):
    """V* = max over chains of q95_c sum_i (L_i^2 / p_i) / b."""
    n = data["X"].shape[0]
    w = fixed._subsampling_config.get("weights")
    p = np.full(n, 1.0 / n) if w is None else w / w.sum()
    d2 = np.sum((draws_of(fixed) - fixed.mode_.ravel()) ** 2, axis=2)     # (C, S)
    q95 = np.quantile(d2, 0.95, axis=1)
    return float(q95.max() * np.sum(lipschitz(data) ** 2 / p) / fixed.batch_size_), q95


def run(data, passes, n_chains, keep, step_size, seed):
    n = data["X"].shape[0]
    b = max(1, int(np.ceil(0.001 * n)))
    steps = int(passes * n / b)
    thin = max(1, steps // keep)
    common = dict(metric="identity", metropolis=False,
                  batch_size=b, step_size=step_size, init="mode", n_warmup=0,
                  n_samples=steps // thin, thin=thin, n_chains=n_chains, n_jobs=2,
                  random_state=seed)
    out = {}
    for base in ("cv", "cv-preferential"):
        t0 = time.perf_counter()
        fixed = make(data, subsampling=base, **common).fit(data["X"], data["y"])
        t_fixed = time.perf_counter() - t0
        V, q95 = paper_v_star(data, fixed)
        t0 = time.perf_counter()
        adaptive = make(data, subsampling="adaptive-" + base, pv_threshold=V,
                        **common).fit(data["X"], data["y"])
        t_adapt = time.perf_counter() - t0
        auto = make(data, subsampling="adaptive-" + base, **common).fit(data["X"], data["y"])
        out[base] = dict(fixed=fixed, adaptive=adaptive, auto=auto, V=V, q95=q95,
                         t_fixed=t_fixed, t_adapt=t_adapt, b=b, steps=steps)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passes", type=float, default=10.0,
                        help="iterations = passes * n / b (the fixed runs' data passes)")
    parser.add_argument("--chains", type=int, default=10)
    parser.add_argument("--keep", type=int, default=500, help="draws kept per chain")
    parser.add_argument("--step-synthetic", type=float, default=1e-5)
    parser.add_argument("--step-casp", type=float, default=1e-6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)

    scenarios = [(load_synthetic(), args.step_synthetic), (load_casp(), args.step_casp)]
    all_res = {}
    for data, h in scenarios:
        n = data["X"].shape[0]
        set_reference(data)
        res = run(data, args.passes, args.chains, args.keep, h, args.seed)
        all_res[data["name"]] = res
        b, steps = res["cv"]["b"], res["cv"]["steps"]
        print(f"\n=== {data['name']}: n = {n}, b = {b} (0.1%), {steps} iterations per chain, "
              f"step size {h:g}, {args.chains} chains")
        print(f"{'method':<13} {'V*':>10} {'mean b':>8} {'max b':>6} {'passes/chain':>13} "
              f"{'KSD':>9} {'sd ratio med [min, max]':>24} {'KL':>8} {'max d2':>8} "
              f"{'fit s':>6}")
        for base, lab in (("cv", "CV"), ("cv-preferential", "CV-PS")):
            r = res[base]
            f, a = r["fixed"], r["adaptive"]
            pf = steps * b / n
            pa = a.batch_sizes_.sum() / (args.chains * n)
            print(f"{'SGLD-' + lab:<13} {'-':>10} {b:8d} {b:6d} {pf:13.3f} "
                  f"{fmt_stats(window_stats(data, f))} {max_d2(f):8.3g} {r['t_fixed']:6.1f}")
            print(f"{'ASGLD-' + lab:<13} {r['V']:10.4g} {a.mean_batch_size_:8.2f} "
                  f"{a.batch_sizes_.max():6d} {pa:13.3f} {fmt_stats(window_stats(data, a))} "
                  f"{max_d2(a):8.3g} {r['t_adapt']:6.1f}")
        f = res["cv"]["fixed"]
        n_draws = f.n_chains * (f.n_samples - f.n_samples // 2)
        print(f"  KSD of as many ({n_draws}) exact i.i.d. draws: about "
              f"{np.sqrt((data['tr_h'] + f.mode_.size) / n_draws):.3g} "
              f"(sqrt((tr H + d) / N)); all draws at the mode: sqrt(d) = "
              f"{np.sqrt(f.mode_.size):.3g}; sd ratio, KL against the {data['ref_name']}")
        print("  (passes/chain: sampling only; max d2: largest ||theta - mode||^2 over the "
              "draws; V* from the fixed chains' q95 "
              + ", ".join(f"{res[k]['q95'].min():.3g}..{res[k]['q95'].max():.3g}"
                          for k in ("cv", "cv-preferential")) + ")")
        print("  library pilot (pv_threshold='auto'):")
        for base, lab in (("cv", "CV"), ("cv-preferential", "CV-PS")):
            u = res[base]["auto"]
            pa = u.batch_sizes_.sum() / (args.chains * n)
            st = window_stats(data, u)
            print(f"  {'ASGLD-' + lab:<13} pilot q95 {u.pv_threshold_:.3g} (fixed chains' q95 "
                  f"max {res[base]['q95'].max():.3g}), mean b {u.mean_batch_size_:.2f}, "
                  f"passes/chain {pa:.3f}, KSD {st[0]:.4g}, sd ratio {st[1]:.3f}, set-up "
                  f"{(u.n_grad_evals_ - u.batch_sizes_.sum()) / n:.0f} passes incl. the mode "
                  "search")

    if args.no_plot:
        return all_res
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    RESULTS.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(2, len(all_res), figsize=(6 * len(all_res), 8), squeeze=False)
    for j, (name, res) in enumerate(all_res.items()):
        for base, lab, col in (("cv", "CV", "C0"), ("cv-preferential", "CV-PS", "C1")):
            r = res[base]
            a = r["adaptive"]
            it = np.arange(1, a.batch_sizes_.shape[1] + 1)
            axes[0, j].plot(it, a.batch_sizes_[0], color=col, lw=0.5, alpha=0.7,
                            label=f"ASGLD-{lab}, chain 0")
            cum_a = np.cumsum(a.batch_sizes_, axis=1).mean(axis=0)
            axes[1, j].plot(it, cum_a, color=col, label=f"ASGLD-{lab}")
            axes[1, j].plot(it, r["b"] * it, color=col, ls="--", label=f"SGLD-{lab} (fixed b)")
        axes[0, j].axhline(res["cv"]["b"], color="k", ls=":", label="fixed b")
        axes[0, j].set_yscale("log")
        axes[0, j].set_title(f"{name}: adaptive subsample sizes")
        axes[1, j].set_title(f"{name}: data processed per chain")
        axes[1, j].set_ylabel("per-datum gradients")
        for ax in axes[:, j]:
            ax.set_xlabel("iteration")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
    fig.tight_layout()
    path = RESULTS / "adaptive.png"
    fig.savefig(path, dpi=120)
    print(f"\nplot: {path}")
    return all_res


if __name__ == "__main__":
    main()
