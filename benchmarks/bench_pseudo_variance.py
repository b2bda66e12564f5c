"""Pseudo-variance of the gradient estimators against the subsample fraction
(Fig. 1 of the preferential-subsampling paper).

The pseudo-variance (the paper's eq. 6) of an estimate ``g_hat`` of
``grad U(theta)`` is ``E ||g_hat - grad U(theta)||^2``, the trace of its
covariance.  For ``b`` indices drawn with replacement from weights ``p`` and
the estimate ``A + (1/b) sum_t v_{j_t} / p_{j_t}`` (``v_i = grad U_i(theta)``,
minus ``grad U_i(mode)`` with control variates) it is exactly

    PV = (1/b) [ sum_i ||v_i||^2 / p_i - ||sum_i v_i||^2 ],

and for uniform minibatches without replacement ``(n^2/b) s^2 (n-b)/(n-1)``
(``s^2`` the population variance of the ``v_i``).  No Monte Carlo is needed;
the script checks the formula once against the engine's own draws.

Scenarios (n = 1000 each, ten parameter draws, PV averaged over them):

(a) a bivariate Gaussian location model ``y_i ~ N(theta, I_2)`` (the engine's
    multi-output Gaussian GLM on a constant feature), draws from the exact
    posterior.  CV estimators are exact here (``v_i`` is the same for every
    datum), so only the plain estimators are plotted;
(b) balanced and (c) 95%-imbalanced logistic regression on
    ``make_classification`` data (2 features + intercept), draws from the
    Laplace approximation (the paper's protocol for these two).

Methods: SGLD with (WR) and without (WOR) replacement, SGLD-PS with the
library's weights ``p_i ∝ ||grad U_i(mode)||`` and with the state-dependent
optimum ``p_i ∝ ||grad U_i(theta)||`` (Lemma 3.1, "exact"), SGLD-CV, SGLD-CV-PS
with the library's weights ``p_i ∝ sqrt(tr(H_i S H_i))`` and with the optimum
``p_i ∝ ||grad U_i(theta) - grad U_i(mode)||`` (Lemma 3.2).

Run: ``PYTHONPATH=. python benchmarks/bench_pseudo_variance.py`` (about 10 s);
the plot goes to ``benchmarks/results/pseudo_variance.png``.
"""
import argparse
from pathlib import Path

import numpy as np
from sklearn.datasets import make_classification

from skbayes_sg._sampling._chain import ChainOracle
from skbayes_sg._sampling._context import FitContext
from skbayes_sg._sampling._dataset import RowData
from skbayes_sg._sampling._estimators import Problem
from skbayes_sg._sampling._glm import GAUSSIAN, GLM, LOGISTIC, MODEL_NAMES, linear_predictor
from skbayes_sg._sampling._registry import SUBSAMPLINGS

RESULTS = Path(__file__).resolve().parent / "results"
N = 1000
SIZES = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000]
METHODS = ["SGLD (WR)", "SGLD (WOR)", "SGLD-PS", "SGLD-PS exact", "SGLD-CV", "SGLD-CV-PS",
           "SGLD-CV-PS exact"]


# ------------------------------------------------------------ exact formulas
def pseudo_variance(V, p, b):
    """Trace of the covariance of ``(1/b) sum_t V[j_t] / p[j_t]``, j_t i.i.d. ~ p."""
    s = V.sum(axis=0)
    return max((np.sum(np.einsum("ij,ij->i", V, V) / p) - s @ s) / b, 0.0)


def pseudo_variance_wor(V, b):
    """Uniform minibatch of b distinct indices, estimate ``(n/b) sum_{j in S} V[j]``."""
    n = len(V)
    s2 = np.sum((V - V.mean(axis=0)) ** 2) / n
    return n * n / b * s2 * (n - b) / (n - 1) if n > 1 else 0.0


def _norm_weights(w):
    w = np.maximum(w, 1e-12 * max(w.max(), 1e-300))    # as the library floors them
    return w / w.sum()


# ------------------------------------------------------------------ scenarios
def make_scenario(name, seed=0):
    """Data, FitContext and ten parameter draws for one scenario."""
    rng = np.random.default_rng(seed)
    alpha = 1.0
    if name == "gaussian":
        theta_true = np.array([1.0, -1.0])
        Y = theta_true + rng.standard_normal((N, 2))
        X = np.ones((N, 1))
        glm = GLM(GAUSSIAN, 2, (1.0,))
        ctx = FitContext(X, Y, glm, alpha, False, 10)
        prec = N / glm.noise_var + alpha
        mean = Y.sum(axis=0) / glm.noise_var / prec
        draws = mean + rng.standard_normal((10, 2)) / np.sqrt(prec)
        y_engine = Y
    else:
        X, y = make_classification(n_samples=N, n_features=2, n_informative=2, n_redundant=0,
                                   n_clusters_per_class=1,
                                   weights=None if name == "balanced" else [0.95],
                                   random_state=seed)
        X = np.ascontiguousarray(X, dtype=np.float64)
        y = y.astype(np.float64)
        glm = GLM(LOGISTIC, 1)
        ctx = FitContext(X, y, glm, alpha, True, 10)
        mode = ctx.mode()
        draws = rng.multivariate_normal(mode, ctx.laplace_cov(mode), size=10)
        y_engine = y
    ctx.settings.access = "random"
    return dict(name=name, X=X, y=y_engine, glm=glm, ctx=ctx, draws=draws)


def per_datum_grads(sc, theta):
    """(n, dim) matrix of grad U_i(theta), engine layout (output-major)."""
    ctx = sc["ctx"]
    K = sc["glm"].n_outputs
    Z = linear_predictor(sc["X"], theta.reshape(K, ctx.dext), ctx.fit_intercept)
    R = sc["glm"].residual(Z, sc["y"])                       # (n, K)
    Xe = np.hstack([sc["X"], np.ones((N, 1))]) if ctx.fit_intercept else sc["X"]
    return np.einsum("nk,nj->nkj", R, Xe).reshape(N, -1)


def pseudo_variances(sc):
    """Mean PV over the draws, {method: array over SIZES}."""
    ctx = sc["ctx"]
    mode = ctx.mode()
    p_ps = _norm_weights(SUBSAMPLINGS["preferential"].prepare(ctx)["weights"])
    p_cvps = _norm_weights(SUBSAMPLINGS["cv-preferential"].prepare(ctx)["weights"])
    uni = np.full(N, 1.0 / N)
    G_hat = per_datum_grads(sc, mode)
    out = {m: np.zeros(len(SIZES)) for m in METHODS}
    for th in sc["draws"]:
        G = per_datum_grads(sc, th)
        V = G - G_hat
        p_ps_exact = _norm_weights(np.linalg.norm(G, axis=1))
        p_cv_exact = _norm_weights(np.linalg.norm(V, axis=1))
        for k, b in enumerate(SIZES):
            out["SGLD (WR)"][k] += pseudo_variance(G, uni, b)
            out["SGLD (WOR)"][k] += pseudo_variance_wor(G, b)
            out["SGLD-PS"][k] += pseudo_variance(G, p_ps, b)
            out["SGLD-PS exact"][k] += pseudo_variance(G, p_ps_exact, b)
            out["SGLD-CV"][k] += pseudo_variance(V, uni, b)
            out["SGLD-CV-PS"][k] += pseudo_variance(V, p_cvps, b)
            out["SGLD-CV-PS exact"][k] += pseudo_variance(V, p_cv_exact, b)
    out = {m: v / len(sc["draws"]) for m, v in out.items()}
    for m in METHODS:   # rounding residue of an exact zero (CV on the Gaussian model)
        out[m][out[m] < 1e-12 * out["SGLD (WR)"]] = 0.0
    return out, p_ps, p_cvps


def engine_check(sc, n_draws=20000, b=10, seed=0):
    """Empirical trace of the covariance of the engine's estimates at the
    first draw (PS and CV-PS, b = 10) against the exact formula."""
    ctx = sc["ctx"]
    ctx.batch_size = b
    problem = Problem(RowData(sc["X"], ctx.fit_intercept), sc["y"], MODEL_NAMES[sc["glm"].kind],
                      sc["glm"].n_outputs, sc["glm"].params)
    th = sc["draws"][0]
    G = per_datum_grads(sc, th)
    rows = []
    bitgen = np.random.PCG64(seed)
    cases = [("preferential", G)]
    if sc["name"] != "gaussian":            # CV estimates are exact there
        cases.append(("cv-preferential", G - per_datum_grads(sc, ctx.mode())))
    for name, V in cases:
        cfg = SUBSAMPLINGS[name].prepare(ctx)
        oracle = ChainOracle(SUBSAMPLINGS[name].build(problem, cfg), 0.0)
        est = np.array([oracle.py_gradient(th, bitgen) for _ in range(n_draws)])
        emp = np.sum(est.var(axis=0, ddof=1))
        exact = pseudo_variance(V, _norm_weights(cfg["weights"]), b)
        rows.append((name, emp, exact))
    return rows


# ----------------------------------------------------------------------- main
def print_table(title, pv):
    methods = [m for m in METHODS]
    print(f"\n{title}: mean pseudo-variance over 10 draws")
    head = f"{'b/n':>7} " + " ".join(f"{m:>16}" for m in methods)
    print(head)
    print("-" * len(head))
    for k, b in enumerate(SIZES):
        print(f"{b / N:7.3f} " + " ".join(f"{pv[m][k]:16.4g}" for m in methods))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    titles = {"gaussian": "(a) bivariate Gaussian", "balanced": "(b) balanced logistic",
              "imbalanced": "(c) 95%-imbalanced logistic"}
    results = {}
    for name in titles:
        sc = make_scenario(name)
        pv, p_ps, p_cvps = pseudo_variances(sc)
        results[name] = pv
        print_table(titles[name], pv)
        k = SIZES.index(10)
        print(f"  at b/n = 0.01: PS / WR = {pv['SGLD-PS'][k] / pv['SGLD (WR)'][k]:.3f}, "
              f"PS-exact / WR = {pv['SGLD-PS exact'][k] / pv['SGLD (WR)'][k]:.3f}, "
              f"WOR / WR = {pv['SGLD (WOR)'][k] / pv['SGLD (WR)'][k]:.3f}"
              + ("" if name == "gaussian" else
                 f", CV / WR = {pv['SGLD-CV'][k] / pv['SGLD (WR)'][k]:.4f}, "
                 f"CV-PS / CV = {pv['SGLD-CV-PS'][k] / pv['SGLD-CV'][k]:.3f}, "
                 f"CV-PS-exact / CV = {pv['SGLD-CV-PS exact'][k] / pv['SGLD-CV'][k]:.3f}"))
        print(f"  weights: PS max/min n*p = {N * p_ps.max():.3g} / {N * p_ps.min():.3g}, "
              f"CV-PS max/min n*p = {N * p_cvps.max():.3g} / {N * p_cvps.min():.3g}")
        for method, emp, exact in engine_check(sc):
            print(f"  engine check ({method}, b=10, 20000 estimates): empirical trace "
                  f"{emp:.4g} vs exact {exact:.4g} (ratio {emp / exact:.3f})")

    if args.no_plot:
        return results
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    RESULTS.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    styles = {"SGLD (WR)": ("C0", "-"), "SGLD (WOR)": ("C0", "--"), "SGLD-PS": ("C1", "-"),
              "SGLD-PS exact": ("C1", ":"), "SGLD-CV": ("C2", "-"), "SGLD-CV-PS": ("C3", "-"),
              "SGLD-CV-PS exact": ("C3", ":")}
    frac = np.array(SIZES) / N
    for ax, name in zip(axes, titles):
        for m in METHODS:
            if name == "gaussian" and "CV" in m:
                continue                       # exactly zero: CV is optimal here
            v = results[name][m]
            keep = v > 0
            color, ls = styles[m]
            ax.loglog(frac[keep], v[keep], color=color, ls=ls, marker="o", ms=3, label=m)
        ax.set_title(titles[name])
        ax.set_xlabel("subsample fraction b/n")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("pseudo-variance (trace of Cov)")
    axes[2].legend(fontsize=8)
    fig.tight_layout()
    path = RESULTS / "pseudo_variance.png"
    fig.savefig(path, dpi=120)
    print(f"\nplot: {path}")
    return results


if __name__ == "__main__":
    main()
