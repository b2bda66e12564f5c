"""SGLD, SGLD-CV, SGLD-PS and SGLD-CV-PS at a fixed gradient budget
(Fig. 2 of the preferential-subsampling paper).

Protocol (the paper's section 5.3.2):

- minibatch size 0.1% of the training rows, ten chains per method, all
  started at the posterior mode (``init="mode"``, found once by Newton's method),
  one common fixed step size for every method (the paper's Table 1 is lost in
  the extracted text; the value used is printed);
- a budget of 10 data passes per chain, counted in per-datum gradient
  evaluations (``n_grad_evals_``): the mode search is common to the four
  methods (every chain starts there) and is reported separately; the other
  set-up passes (residuals at the mode: CV and PS; Hessian and trace weights:
  CV-PS) are charged to the budget, spread over the chains;
- the first half of each window is burn-in: the metrics at ``p`` passes use
  the draws between ``p/2`` and ``p`` passes, pooled over the chains;
- kernel Stein discrepancy with the IMQ kernel ``(1 + ||a - b||^2)^(-1/2)``
  on the exact ``grad log pi = -grad U`` (``skbayes_sg.diagnostics``), and
  the test error of the posterior predictive: mean squared error
  (standardised target) for CASP, log-loss for a9a.

Data: CASP (45,730 x 9, linear regression, ``SGMCMCRidge``; features and target
standardised on the training part, 80/20 split, noise variance fixed at the
least-squares residual variance) and a9a (32,561 x 123 sparse, logistic
regression, a9a.t as the test set).  ``SKBAYES_SG_DATA`` overrides the data
directory.

Run: ``PYTHONPATH=. python benchmarks/bench_preferential.py`` (a few minutes;
``--quick`` for a smoke run).  Plot: ``benchmarks/results/preferential_ksd.png``.
"""
import argparse
import os
import time
from pathlib import Path

import numpy as np
from scipy.special import expit, log_expit

from skbayes_sg import SGMCMCLogisticRegression, SGMCMCRidge
from skbayes_sg._sampling._context import FitContext
from skbayes_sg._sampling._glm import GAUSSIAN, GLM, LOGISTIC
from skbayes_sg.diagnostics import ksd
from skbayes_sg.diagnostics._ksd import grad_log_posterior

RESULTS = Path(__file__).resolve().parent / "results"
METHODS = {"SGLD": "uniform", "SGLD-CV": "cv", "SGLD-PS": "preferential",
           "SGLD-CV-PS": "cv-preferential"}
# passes over the data spent before sampling beyond the mode search
EXTRA_SETUP_PASSES = {"uniform": 0, "cv": 1, "preferential": 1, "cv-preferential": 3}


def data_dir():
    env = os.environ.get("SKBAYES_SG_DATA")
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


# ----------------------------------------------------------------------- data
def load_casp(seed=0):
    """CASP: standardised features and target, 80/20 split."""
    D = np.loadtxt(data_dir() / "CASP.csv.gz", delimiter=",", skiprows=1)
    y, X = D[:, 0], D[:, 1:]
    perm = np.random.default_rng(seed).permutation(len(y))
    n_tr = int(0.8 * len(y))
    tr, te = perm[:n_tr], perm[n_tr:]
    mu, sd = X[tr].mean(axis=0), X[tr].std(axis=0)
    ym, ys = y[tr].mean(), y[tr].std()
    X_tr, X_te = (X[tr] - mu) / sd, (X[te] - mu) / sd
    y_tr, y_te = (y[tr] - ym) / ys, (y[te] - ym) / ys
    Xe = np.hstack([X_tr, np.ones((n_tr, 1))])
    w = np.linalg.lstsq(Xe, y_tr, rcond=None)[0]
    noise_var = float(np.mean((y_tr - Xe @ w) ** 2))
    return dict(name="CASP", X=np.ascontiguousarray(X_tr), y=y_tr, X_test=X_te, y_test=y_te,
                noise_var=noise_var, model="linear")


def load_a9a():
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(str(data_dir() / "a9a.gz"), n_features=123)
    Xt, yt = load_svmlight_file(str(data_dir() / "a9a.t.gz"), n_features=123)
    return dict(name="a9a", X=X.tocsr(), y=(y > 0).astype(np.float64), X_test=Xt.tocsr(),
                y_test=(yt > 0).astype(np.float64), model="logistic")


# -------------------------------------------------------------------- metrics
def glm_of(data):
    if data["model"] == "linear":
        return GLM(GAUSSIAN, 1, (data["noise_var"],))
    return GLM(LOGISTIC, 1)


def test_error(data, thetas):
    """Posterior-predictive test error of the draws (BMA): MSE or log-loss."""
    X, y = data["X_test"], data["y_test"]
    d = X.shape[1]
    if data["model"] == "linear":
        pred = np.zeros(X.shape[0])
        for chunk in np.array_split(thetas, max(1, len(thetas) // 500)):
            pred += np.asarray(X @ chunk[:, :d].T).sum(axis=1) + chunk[:, d].sum()
        return float(np.mean((pred / len(thetas) - y) ** 2))
    prob = np.zeros(X.shape[0])
    for chunk in np.array_split(thetas, max(1, len(thetas) // 500)):
        prob += expit(np.asarray(X @ chunk[:, :d].T) + chunk[:, d]).sum(axis=1)
    prob = np.clip(prob / len(thetas), 1e-15, 1 - 1e-15)
    return float(-np.mean(y * np.log(prob) + (1 - y) * np.log1p(-prob)))


def mode_metrics(data, mode):
    """Test error at the mode (plug-in) for reference."""
    d = data["X_test"].shape[1]
    z = np.asarray(data["X_test"] @ mode[:d]) + mode[d]
    if data["model"] == "linear":
        return float(np.mean((z - data["y_test"]) ** 2))
    y = data["y_test"]
    return float(-np.mean(y * log_expit(z) + (1 - y) * log_expit(-z)))


# ----------------------------------------------------------------------- runs
def run_method(data, subsampling, step_size, passes, n_chains, keep_per_pass, seed):
    X, y = data["X"], data["y"]
    n = X.shape[0]
    b = max(1, int(np.ceil(0.001 * n)))
    extra = EXTRA_SETUP_PASSES[subsampling] * n / n_chains      # shared set-up, per chain
    steps = int((passes * n - extra) // b)
    steps_per_pass = n / b
    thin = max(1, int(round(steps_per_pass / keep_per_pass)))
    n_samples = steps // thin
    common = dict(metric="identity", metropolis=False,
                  subsampling=subsampling, batch_size=b, step_size=step_size, init="mode",
                  n_warmup=0, n_samples=n_samples, thin=thin, n_chains=n_chains, n_jobs=2,
                  alpha=1.0, random_state=seed)
    if data["model"] == "linear":
        est = SGMCMCRidge(noise_var=data["noise_var"], **common)
    else:
        est = SGMCMCLogisticRegression(**common)
    t0 = time.perf_counter()
    est.fit(X, y)
    seconds = time.perf_counter() - t0
    coef, icpt = est.coef_samples_, est.intercept_samples_
    draws = np.concatenate([coef, icpt[..., None]], axis=-1)          # (C, S, d+1)
    # pass count at each kept draw (per chain; set-up share included)
    kept_pass = ((np.arange(1, n_samples + 1) * thin) * b + extra) / n
    return dict(est=est, draws=draws, kept_pass=kept_pass, b=b, steps=n_samples * thin,
                seconds=seconds)


def spread(th, ref_mean, ref_cov):
    """Posterior sds of the draws against a reference Gaussian: (median, min, max)
    of the sd ratios, and KL(fitted Gaussian || reference)."""
    ratio = th.std(axis=0, ddof=1) / np.sqrt(np.diag(ref_cov))
    m0, S0 = th.mean(axis=0), np.cov(th, rowvar=False)
    P1 = np.linalg.inv(ref_cov)
    diff = ref_mean - m0
    kl = 0.5 * (np.trace(P1 @ S0) + diff @ P1 @ diff - len(m0)
                + np.linalg.slogdet(ref_cov)[1] - np.linalg.slogdet(S0)[1])
    return float(np.median(ratio)), float(ratio.min()), float(ratio.max()), float(kl)


def evaluate(data, run, checkpoints, mode_cost):
    """KSD and test error on the window [p/2, p] passes for each checkpoint p;
    sd ratios and KL against the reference Gaussian on the last window."""
    draws, kp = run["draws"], run["kept_pass"]
    C, S, dim = draws.shape
    glm = glm_of(data)
    score = grad_log_posterior(draws.reshape(C * S, dim), data["X"], data["y"], glm, 1.0,
                               True).reshape(C, S, dim)
    rows = []
    for p in checkpoints:
        sel = (kp > p / 2) & (kp <= p + 1e-9)
        if not np.any(sel):
            rows.append((p, np.nan, np.nan, 0))
            continue
        th = draws[:, sel].reshape(-1, dim)
        sc = score[:, sel].reshape(-1, dim)
        rows.append((p, ksd(th, sc), test_error(data, th), len(th)))
    est = run["est"]
    n = data["X"].shape[0]
    used = (est.n_grad_evals_ - mode_cost) / (est.n_chains * n)
    return rows, used, spread(th, data["ref_mean"], data["ref_cov"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["CASP", "a9a"])
    parser.add_argument("--passes", type=float, default=10.0)
    parser.add_argument("--chains", type=int, default=10)
    parser.add_argument("--keep-per-pass", type=int, default=50,
                        help="draws kept per chain and data pass (thinning)")
    parser.add_argument("--step-casp", type=float, default=1e-6)
    parser.add_argument("--step-a9a", type=float, default=3e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="2 passes, 4 chains")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.passes, args.chains = 2.0, 4
    loaders = {"CASP": load_casp, "a9a": load_a9a}
    steps = {"CASP": args.step_casp, "a9a": args.step_a9a}
    checkpoints = [p for p in (0.5, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10) if p <= args.passes]
    results = {}
    for name in args.datasets:
        data = loaders[name]()
        n = data["X"].shape[0]
        ctx = FitContext(data["X"], data["y"], glm_of(data), 1.0, True, 1)
        mode = ctx.mode()
        mode_cost = ctx.n_grad_evals
        # KSD of N exact i.i.d. draws: E[KSD^2] = E||grad log pi||^2 / N + d / N, and
        # E||grad log pi||^2 = E tr(grad^2 U) ~ tr H(mode) (exact for the Gaussian CASP)
        H = ctx.hessian(mode)
        tr_h = float(np.trace(H))
        dim = len(mode)
        if data["model"] == "linear":      # the exact Gaussian posterior
            Xe = np.hstack([data["X"], np.ones((n, 1))])
            data["ref_cov"] = np.linalg.inv(H)
            data["ref_mean"] = data["ref_cov"] @ (Xe.T @ data["y"]) / data["noise_var"]
            ref_name = "exact posterior"
        else:                              # its Laplace approximation
            data["ref_cov"], data["ref_mean"] = np.linalg.inv(H), mode
            ref_name = "Laplace approximation"
        metric = "test MSE" if data["model"] == "linear" else "test log-loss"
        print(f"\n=== {name}: n = {n}, d = {data['X'].shape[1]}, batch = "
              f"{max(1, int(np.ceil(0.001 * n)))} (0.1%), step size {steps[name]:g}, "
              f"{args.chains} chains, {args.passes:g} passes/chain"
              + (f", noise_var {data['noise_var']:.4f}" if "noise_var" in data else ""))
        print(f"    mode search (common to all): {mode_cost / n:.0f} passes; "
              f"{metric} at the mode {mode_metrics(data, mode):.4f}")
        results[name] = {}
        for label, sub in METHODS.items():
            run = run_method(data, sub, steps[name], args.passes, args.chains,
                             args.keep_per_pass, args.seed)
            rows, used, spr = evaluate(data, run, checkpoints, mode_cost)
            results[name][label] = dict(rows=rows, used=used, seconds=run["seconds"],
                                        spread=spr)
        print(f"\n{'method':<11} {'passes/chain':>12} {'KSD@' + format(args.passes, 'g'):>10} "
              f"{metric + '@' + format(args.passes, 'g'):>18} {'KSD@1':>9} {'KSD@5':>9} "
              f"{'sd ratio med [min, max]':>24} {'KL':>8} {'fit s':>6}")
        for label, r in results[name].items():
            if label.startswith("_"):
                continue
            by_p = {p: (k, e) for p, k, e, _ in r["rows"]}
            last = by_p[checkpoints[-1]]
            k1 = by_p.get(1, (np.nan,))[0]
            k5 = by_p.get(5, (np.nan,))[0]
            med, lo, hi, kl = r["spread"]
            print(f"{label:<11} {r['used']:12.2f} {last[0]:10.4g} {last[1]:18.5f} {k1:9.4g} "
                  f"{k5:9.4g} {med:9.3f} [{lo:5.3f}, {hi:5.3f}] {kl:8.3g} "
                  f"{r['seconds']:6.1f}")
        print(f"  (sd ratio, KL: the draws of the last window against the {ref_name}; "
              f"draws all at the mode would have KSD sqrt(d) = {np.sqrt(dim):.3g})")
        print(f"\nKSD by passes ({name}); last column: KSD of as many exact i.i.d. draws "
              "(expected value)")
        print(f"{'passes':>7} " + " ".join(f"{m:>11}" for m in METHODS) + f" {'iid floor':>10}")
        for i, p in enumerate(checkpoints):
            n_draws = results[name]["SGLD-CV"]["rows"][i][3]
            floor = np.sqrt((tr_h + dim) / n_draws) if n_draws else np.nan
            print(f"{p:7g} " + " ".join(f"{results[name][m]['rows'][i][1]:11.4g}"
                                       for m in METHODS) + f" {floor:10.4g}")
        results[name]["_floor"] = [np.sqrt((tr_h + dim) / r[3]) if r[3] else np.nan
                                   for r in results[name]["SGLD-CV"]["rows"]]
        print(f"{metric} by passes ({name}):")
        for i, p in enumerate(checkpoints):
            print(f"{p:7g} " + " ".join(f"{results[name][m]['rows'][i][2]:11.5f}"
                                       for m in METHODS))

    if args.no_plot:
        return results
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    RESULTS.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(2, len(results), figsize=(6 * len(results), 8), squeeze=False)
    for j, (name, res) in enumerate(results.items()):
        for label, r in res.items():
            if label.startswith("_"):
                continue
            ps = [row[0] for row in r["rows"]]
            axes[0, j].semilogy(ps, [row[1] for row in r["rows"]], marker="o", ms=3, label=label)
            axes[1, j].plot(ps, [row[2] for row in r["rows"]], marker="o", ms=3, label=label)
        axes[0, j].semilogy(ps, res["_floor"], color="k", ls=":", label="exact i.i.d. draws")
        axes[0, j].set_title(f"{name}: KSD (IMQ, window [p/2, p])")
        axes[1, j].set_title(f"{name}: " + ("test MSE" if name == "CASP" else "test log-loss"))
        for ax in axes[:, j]:
            ax.set_xlabel("data passes per chain")
            ax.grid(True, alpha=0.3)
        axes[0, j].legend()
    fig.tight_layout()
    path = RESULTS / "preferential_ksd.png"
    fig.savefig(path, dpi=120)
    print(f"\nplot: {path}")
    return results


if __name__ == "__main__":
    main()
