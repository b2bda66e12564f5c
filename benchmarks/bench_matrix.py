"""Every ``sampler`` x ``subsampling`` at a fixed budget of data passes.

Data sets
---------
* **a9a** logistic regression (LIBSVM a9a, 32,561 x 123 sparse binary
  features, labels +-1 -> 0/1; test set a9a.t, 16,281 rows), prior
  ``alpha = 1``.  Metrics: KSD, test log-likelihood per datum of the
  posterior predictive (BMA) and test accuracy.
* **CASP** ridge regression (UCI protein structure, 45,730 x 9; random
  80/20 split; features and target standardised with the training
  statistics), prior ``alpha = 1``, ``noise_var`` estimated by the library.
  Metrics: KSD and the test MSE of the posterior-mean prediction, in RMSD
  units (x the training sd^2).

Protocol
--------
One chain per combination, started at the posterior mode (``init="mode"``),
library defaults otherwise (``step_size="auto"``, ``friction="auto"``,
``batch_size=100``, ``n_leapfrog=10``, ``ewsg_chain_length=1``,
``access="random"``).  The chain (warm-up + sampling) gets a budget of
``--passes`` data passes (default 10) of per-datum gradient evaluations:
``steps = budget / cost_per_step`` with the cost per step of each estimator
(full: n; uniform, cv, preferential, cv-preferential, saga: b; tmu: 2b;
svrg: 3b (snapshot residuals + a refresh every n/b calls); ewsg, ewsg-cv: 2b
(M + 1 candidates); ewsg-svrg: 5b; sghmc-leapfrog: x (K + 1)).  The adaptive
estimators' cost grows as the chain leaves the mode, so their length is
searched (same seed, so the cost is increasing in the length) until the
measured passes are within 15% of the budget.  20% of the steps are warm-up;
the rest are thinned to at most ``--max-draws`` draws.  ``passes`` is the
measured ``(n_grad_evals_ - set-up evaluations) / n``.

Set-up (curvature, Laplace weights, pilot chain) is reported separately
(``setup_passes``, ``setup_s``); it is not part of the budget.  The mode is
the same for every combination, so it is found once per data set and shared
(the library would redo its L-BFGS search in every fit: ~550 passes on a9a).
This bookkeeping subclasses the library's internal ``FitContext`` in this
script only (``_InstrumentedContext``).  ``time_s`` is the chain's wall time
(``sampling_time_``, warm-up + sampling).

KSD
---
IMQ kernel, c = 1, beta = -1/2, V-statistic, against the exact score
``grad log pi = -grad U`` (computed here in numpy; checked against
``skbayes_sg.diagnostics.ksd_from_estimator`` at start-up).  ``ksd`` is taken
in Laplace-whitened coordinates ``z = L^T (theta - mode)`` (``H = L L^T`` the
Hessian at the mode; exact for ridge), where the posterior is ~N(0, I) and
c = 1 is its scale; ``ksd_raw`` is the same on the raw parameters (the
preferential-subsampling paper's choice).  With posterior sds << 1 the raw
one hardly separates draws collapsed at the mode (KSD = sqrt(d)) from exact
draws (printed yardsticks).  ``ksd_floor = sqrt(2 D / N)`` is the expected
whitened KSD of N exact draws; the ``reference`` row is N i.i.d. draws of
the Laplace approximation.

Usage::

    python benchmarks/bench_matrix.py            # both data sets (3-4 min on 2 cores)
    python benchmarks/bench_matrix.py --quick    # 3,000 training rows, ~20 s
    python benchmarks/bench_matrix.py --data casp --passes 20

Outputs: printed tables, ``benchmarks/results/matrix_<data>[_quick][_seed<k>].csv``
and ``.png`` (heat maps of log10 KSD, the test metric and the wall time).
"""
import argparse
import csv
import gzip
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from skbayes_sg import SGMCMCLogisticRegression, SGMCMCRidge  # noqa: E402
from skbayes_sg import _base  # noqa: E402
from skbayes_sg._sampling._context import FitContext  # noqa: E402
from skbayes_sg._sampling._registry import SAMPLERS, SUBSAMPLINGS  # noqa: E402
from skbayes_sg.diagnostics import ksd, ksd_from_estimator  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
BATCH = 100
N_LEAPFROG = 10
EWSG_M = 1
ALPHA = 1.0
Y_SD = 1.0  # CASP: standard deviation of the training target (set by load_casp)


def data_dir():
    env = os.environ.get("SKBAYES_SG_DATA")
    if env:
        return Path(env).expanduser().resolve()
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


# --------------------------------------------------------------------- data
def load_a9a(quick):
    from sklearn.datasets import load_svmlight_file

    out = []
    for name in ("a9a.gz", "a9a.t.gz"):
        path = data_dir() / name
        if not path.exists():
            raise FileNotFoundError(f"{path} not found: set SKBAYES_SG_DATA")
        X, y = load_svmlight_file(str(path), n_features=123)
        out += [X.tocsr(), (y > 0).astype(np.int64)]
    X, y, Xt, yt = out
    if quick:
        X, y, Xt, yt = X[:3000], y[:3000], Xt[:2000], yt[:2000]
    return X, y, Xt, yt


def load_casp(quick, seed=0):
    path = data_dir() / "CASP.csv.gz"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: set SKBAYES_SG_DATA")
    with gzip.open(path, "rt", newline="") as f:
        header = f.readline().strip().split(",")
        A = np.loadtxt(f, delimiter=",")
    assert header[0] == "RMSD" and A.shape[1] == 10, header
    y, X = A[:, 0], A[:, 1:]
    perm = np.random.default_rng(seed).permutation(len(y))
    cut = int(0.8 * len(y))
    tr, te = perm[:cut], perm[cut:]
    mu, sd = X[tr].mean(axis=0), X[tr].std(axis=0)
    X = (X - mu) / sd
    # the target too (the N(0, 1/alpha) prior covers the intercept); the test
    # MSE is reported back in RMSD units (x Y_SD^2)
    global Y_SD
    Y_SD = float(y[tr].std())
    y = (y - y[tr].mean()) / Y_SD
    if quick:
        tr, te = tr[:3000], te[:2000]
    return np.ascontiguousarray(X[tr]), y[tr], np.ascontiguousarray(X[te]), y[te]


# ------------------------------------------------------- instrumentation
class _InstrumentedContext(FitContext):
    """The library's FitContext with a shared, precomputed mode and a record
    of the set-up evaluations of the last fit (benchmark bookkeeping only)."""

    shared_mode = None
    last = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        cls = type(self)
        cls.last = self
        if cls.shared_mode is not None and cls.shared_mode.shape == (self.dim,):
            self._cache["mode"] = cls.shared_mode.copy()


def _install_context():
    _base.FitContext = _InstrumentedContext


# ------------------------------------------------------------- the matrix
def call_cost(sub, n, b, M=EWSG_M):
    """Per-datum gradient evaluations of one gradient call (not adaptive)."""
    per_refresh = n / math.ceil(n / b)  # a full refresh every ceil(n/b) calls
    return {"full": n, "uniform": b, "cv": b, "preferential": b, "cv-preferential": b,
            "saga": b, "tmu": b + per_refresh, "svrg": 2 * b + per_refresh,
            "ewsg": (M + 1) * b, "ewsg-cv": (M + 1) * b,
            "ewsg-svrg": (M + 1) * 2 * b + per_refresh}[sub]


def calls_per_step(sampler):
    return N_LEAPFROG + 1 if sampler == "sghmc-leapfrog" else 1


def make_estimator(kind, sampler, sub, seed, **kw):
    common = dict(metric="identity", metropolis=False,
                  sampler=sampler, subsampling=sub, batch_size=BATCH, n_chains=1, n_jobs=1,
                  alpha=ALPHA, random_state=seed, init="mode", n_leapfrog=N_LEAPFROG,
                  ewsg_chain_length=EWSG_M)
    common.update(kw)
    if kind == "logistic":
        return SGMCMCLogisticRegression(**common)
    return SGMCMCRidge(**common)


def _schedule(steps, max_draws):
    """(n_warmup, n_samples, thin) for a chain of about ``steps`` steps:
    20% warm-up, the rest thinned to at most ``max_draws`` draws."""
    steps = max(1, int(steps))
    keep = max(1, steps - steps // 5)
    thin = max(1, math.ceil(keep / max_draws))
    n_samples = max(1, keep // thin)
    return max(0, steps - n_samples * thin), n_samples, thin


def _fit_budget(kind, X, y, sampler, sub, steps, max_draws, seed):
    warm, n_samples, thin = _schedule(steps, max_draws)
    est = make_estimator(kind, sampler, sub, seed, n_samples=n_samples, n_warmup=warm, thin=thin)
    t0 = time.perf_counter()
    est.fit(X, y)
    wall = time.perf_counter() - t0
    setup_evals = _InstrumentedContext.last.n_grad_evals
    return est, wall, setup_evals, (est.n_grad_evals_ - setup_evals) / X.shape[0]


def run_combination(kind, X, y, Xt, yt, sampler, sub, passes, max_draws, seed, target):
    n = X.shape[0]
    b = min(BATCH, n)
    k = calls_per_step(sampler)
    steps = max(1, round(passes * n / (call_cost(sub, n, b) * k))) if not sub.startswith(
        "adaptive") else max(1, round(passes * n / (b * k)))
    fit = _fit_budget(kind, X, y, sampler, sub, steps, max_draws, seed)
    if sub.startswith("adaptive"):
        # b_k = ceil(coef ||theta - mode||^2) is small at the mode and grows as
        # the chain spreads, so the cost of a chain is not proportional to its
        # length; but it is increasing in the length (same seed, same path):
        # bracket the length whose measured passes are within 15% of the budget
        lo, hi, tried = None, None, {steps: fit}
        for _ in range(8):
            used = fit[3]
            if abs(used / passes - 1) < 0.15:
                break
            if used < passes:
                lo = steps
            else:
                hi = steps
            if lo is not None and hi is not None:
                nxt = int(round(math.sqrt(lo * hi)))
            else:
                nxt = int(round(steps * min(max(passes / max(used, 1e-12), 0.05), 20.0)))
            nxt = max(1, nxt)
            if nxt in tried:
                break
            steps = nxt
            fit = tried[steps] = _fit_budget(kind, X, y, sampler, sub, steps, max_draws, seed)
        fit = min(tried.values(), key=lambda f: abs(math.log(max(f[3], 1e-12) / passes)))
    est, wall, setup_evals, used = fit
    row = dict(sampler=sampler, subsampling=sub, step_size=est.step_size_,
               steps=est.n_warmup + est.n_samples * est.thin, draws=est.n_samples, passes=used,
               setup_passes=setup_evals / n, time_s=est.sampling_time_,
               setup_s=max(wall - est.sampling_time_, 0.0))
    if hasattr(est, "mean_batch_size_"):
        row["mean_batch"] = est.mean_batch_size_
    row["ksd"], row["ksd_raw"] = target.ksd(_theta_draws(est))
    row["ksd_floor"] = target.floor(est.n_samples)
    if kind == "logistic":
        proba = est.predict_proba(Xt)
        p = np.clip(proba[np.arange(len(yt)), yt], 1e-300, None)
        row["test_loglik"] = float(np.mean(np.log(p)))
        row["test_acc"] = float(np.mean(est.classes_[proba.argmax(axis=1)] == yt))
    else:
        row["test_mse"] = float(np.mean((est.predict(Xt) - yt) ** 2)) * Y_SD ** 2
    return row


class Target:
    """The exact posterior score and a Laplace whitening, for the KSDs.

    ``score(Theta) = -grad U(theta)`` row by row (numpy, independent of the
    library).  Whitening ``z = L^T (theta - mode)`` with ``H = L L^T`` the
    Hessian of U at the mode turns the posterior into ~N(0, I) (exactly for
    ridge), and the score into ``L^-1 score``: a KSD of the same draws
    against the same target, on the scale where the IMQ kernel's c = 1 is
    meaningful.  On the raw scale (posterior sds << 1) the c = 1 KSD barely
    separates draws collapsed at the mode (KSD^2 = d) from exact ones
    (E KSD^2 = (tr H + d)/N).
    """

    def __init__(self, kind, X, y, mode, noise_var):
        import scipy.sparse as sp

        self.kind, self.y, self.mode = kind, np.asarray(y, dtype=np.float64), mode
        self.noise_var = noise_var
        self.Xe = sp.hstack([sp.csr_matrix(X), np.ones((X.shape[0], 1))]).tocsr()
        w = self._curv(self.Xe @ mode)
        D = self.Xe.shape[1]
        H = (self.Xe.multiply(w[:, None])).T @ self.Xe
        H = np.asarray(H.toarray() if sp.issparse(H) else H) + ALPHA * np.eye(D)
        self.H = 0.5 * (H + H.T)
        self.L = np.linalg.cholesky(self.H)
        self.dim = D

    def _curv(self, z):
        if self.kind == "logistic":
            p = 1.0 / (1.0 + np.exp(-z))
            return p * (1.0 - p)
        return np.full(z.shape, 1.0 / self.noise_var)

    def score(self, Theta, chunk=64):
        out = np.empty_like(Theta)
        for i in range(0, len(Theta), chunk):
            T = Theta[i:i + chunk]
            Zl = np.asarray(self.Xe @ T.T)                          # (n, m)
            if self.kind == "logistic":
                R = 1.0 / (1.0 + np.exp(-Zl)) - self.y[:, None]
            else:
                R = (Zl - self.y[:, None]) / self.noise_var
            out[i:i + chunk] = -(np.asarray(self.Xe.T @ R).T + ALPHA * T)
        return out

    def ksd(self, Theta):
        """(whitened KSD, raw KSD), IMQ c = 1, beta = -1/2 (V-statistic)."""
        S = self.score(Theta)
        Zw = (Theta - self.mode) @ self.L                         # rows z^T = (theta - m)^T L
        Sw = np.linalg.solve(self.L, S.T).T                       # L^-1 s
        return ksd(Zw, Sw), ksd(Theta, S)

    def floor(self, n_draws):
        """Expected whitened KSD of N exact draws: sqrt(E k0(z, z) / N), with
        E||s_z||^2 = tr(L^-1 E[H] L^-T) ~ D: sqrt(2 D / N)."""
        return math.sqrt(2.0 * self.dim / n_draws)

    def laplace_draws(self, n_draws, seed):
        g = np.random.default_rng(seed)
        return self.mode + np.linalg.solve(self.L.T, g.standard_normal((self.dim, n_draws))).T


def _theta_draws(est):
    coef = est.coef_samples_.reshape(-1, est.coef_samples_.shape[-1])
    return np.hstack([coef, est.intercept_samples_.reshape(-1, 1)])


def run_dataset(name, args):
    kind = "logistic" if name == "a9a" else "ridge"
    # the CASP split is fixed (seed 0); --seed only changes the chains
    X, y, Xt, yt = load_a9a(args.quick) if name == "a9a" else load_casp(args.quick)
    n = X.shape[0]
    # the mode, once (the library's own L-BFGS, through one throw-away set-up)
    _InstrumentedContext.shared_mode = None
    t0 = time.perf_counter()
    base = make_estimator(kind, "sgld", "uniform", args.seed, n_samples=1, n_warmup=0)
    base.fit(X, y)
    mode = base.mode_.ravel().copy()
    mode_passes = _InstrumentedContext.last.n_grad_evals / n
    mode_s = time.perf_counter() - t0
    _InstrumentedContext.shared_mode = mode
    noise_var = getattr(base, "noise_var_", 1.0)
    target = Target(kind, X, y, mode, noise_var)
    # the library's own KSD (raw scale) must agree with this script's
    k_lib = ksd_from_estimator(base, X, y)
    k_raw = target.ksd(_theta_draws(base))[1]
    assert abs(k_lib - k_raw) <= 1e-6 * max(1.0, k_raw), (k_lib, k_raw)
    print(f"\n=== {name}: n={n}, d={X.shape[1]}, test {Xt.shape[0]}; {args.passes} passes per "
          f"chain, batch {min(BATCH, n)}; mode + set-up of one fit: {mode_passes:.0f} passes, "
          f"{mode_s:.1f} s (shared)", flush=True)

    samplers = args.samplers or list(SAMPLERS)
    subs = args.subsamplings or list(SUBSAMPLINGS)
    rows = []
    # yardstick: i.i.d. draws of the Laplace approximation (exact for ridge)
    lap = target.laplace_draws(args.max_draws, args.seed)
    k_w, k_r = target.ksd(lap)
    reference = dict(sampler="reference", subsampling="laplace-iid", draws=len(lap), ksd=k_w,
                     ksd_raw=k_r, ksd_floor=target.floor(len(lap)))
    if kind == "ridge":
        reference["test_mse"] = float(np.mean((np.column_stack([Xt, np.ones(len(Xt))]) @ mode
                                               - yt) ** 2)) * Y_SD ** 2
    else:
        import scipy.sparse as sp
        Xte = sp.hstack([sp.csr_matrix(Xt), np.ones((Xt.shape[0], 1))]).tocsr()
        P = 1.0 / (1.0 + np.exp(-np.asarray(Xte @ lap.T)))
        p1 = P.mean(axis=1)
        reference["test_loglik"] = float(np.mean(np.log(np.where(yt == 1, p1, 1 - p1))))
        reference["test_acc"] = float(np.mean((p1 > 0.5) == (yt == 1)))
    collapsed = np.tile(mode, (args.max_draws, 1))
    k_cw, k_cr = target.ksd(collapsed)
    print(f"yardsticks (N = {args.max_draws}): whitened KSD of Laplace i.i.d. draws {k_w:.3g} "
          f"(floor {target.floor(len(lap)):.3g}), of draws all at the mode {k_cw:.3g}; "
          f"raw-scale KSD {k_r:.3g} vs {k_cr:.3g}", flush=True)
    t_all = time.perf_counter()
    for sampler in samplers:
        for sub in subs:
            try:
                row = run_combination(kind, X, y, Xt, yt, sampler, sub, args.passes,
                                      args.max_draws, args.seed, target)
            except Exception as exc:  # report, keep going
                row = dict(sampler=sampler, subsampling=sub, error=f"{type(exc).__name__}: {exc}")
            rows.append(row)
            print(_format_row(kind, row), flush=True)
    print(f"[{name}: {time.perf_counter() - t_all:.0f} s for {len(rows)} combinations]")
    return kind, rows, reference


COLUMNS = {
    "logistic": ["sampler", "subsampling", "step_size", "steps", "draws", "passes", "setup_passes",
                 "mean_batch", "ksd", "ksd_floor", "ksd_raw", "test_loglik", "test_acc", "time_s",
                 "setup_s"],
    "ridge": ["sampler", "subsampling", "step_size", "steps", "draws", "passes", "setup_passes",
              "mean_batch", "ksd", "ksd_floor", "ksd_raw", "test_mse", "time_s", "setup_s"],
}
FMT = {"step_size": "{:.2e}", "steps": "{:d}", "draws": "{:d}", "passes": "{:.2f}",
       "setup_passes": "{:.1f}", "mean_batch": "{:.0f}", "ksd": "{:.3g}", "ksd_floor": "{:.3g}",
       "ksd_raw": "{:.3g}",
       "test_loglik": "{:.4f}", "test_acc": "{:.4f}", "test_mse": "{:.4f}", "time_s": "{:.3f}",
       "setup_s": "{:.2f}"}


def _cells(kind, row):
    if "error" in row:
        return [row["sampler"], row["subsampling"], "ERROR " + row["error"]]
    out = []
    for c in COLUMNS[kind]:
        v = row.get(c)
        out.append(v if c in ("sampler", "subsampling") else "-" if v is None else FMT[c].format(v))
    return out


def _format_row(kind, row):
    return " ".join(_cells(kind, row))


def print_table(name, kind, rows, reference):
    print(f"\n--- {name}: every sampler x subsampling, sorted by (whitened) KSD ---")
    table = [COLUMNS[kind]] + [_cells(kind, r) for r in
                               sorted(rows, key=lambda r: r.get("ksd", np.inf))]
    table.append(_cells(kind, reference))
    widths = [max(len(t[i]) for t in table if i < len(t)) for i in range(len(COLUMNS[kind]))]
    for t in table:
        print("  ".join(x.ljust(w) if i < 2 else x.rjust(w)
                        for i, (x, w) in enumerate(zip(t, widths))).rstrip())


def save(name, kind, rows, quick, seed=0):
    RESULTS.mkdir(parents=True, exist_ok=True)
    suffix = ("_quick" if quick else "") + (f"_seed{seed}" if seed else "")
    path = RESULTS / f"matrix_{name}{suffix}.csv"
    cols = COLUMNS[kind] + ["error"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)
    png = RESULTS / f"matrix_{name}{suffix}.png"
    try:
        _plot(name, kind, rows, png)
    except ImportError:
        png = None
    return path, png


def _plot(name, kind, rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ref = [r for r in rows if r["sampler"] == "reference"]
    rows = [r for r in rows if r["sampler"] != "reference"]
    samplers = list(dict.fromkeys(r["sampler"] for r in rows))
    subs = list(dict.fromkeys(r["subsampling"] for r in rows))
    metric = "test_loglik" if kind == "logistic" else "test_mse"
    fig, axes = plt.subplots(1, 3, figsize=(19, 0.45 * len(subs) + 2.5))
    panels = [("ksd", "KSD, colour log10 (lower is better)", True),
              (metric, metric.replace("_", " ") + (" (higher is better)" if kind == "logistic"
                                                   else " (lower is better)"), False),
              ("time_s", "chain wall time [s]", False)]
    cell_fmt = {"ksd": "{:.2f}", "test_loglik": "{:.4f}", "test_mse": "{:.3f}", "time_s": "{:.3f}"}
    for ax, (key, title, log) in zip(axes, panels):
        M = np.full((len(subs), len(samplers)), np.nan)
        V = np.full_like(M, np.nan)
        for r in rows:
            if key in r and r[key] is not None:
                i, j = subs.index(r["subsampling"]), samplers.index(r["sampler"])
                V[i, j] = r[key]
                M[i, j] = np.log10(r[key]) if log else r[key]
        cmap = "viridis_r" if (key != "test_loglik") else "viridis"
        im = ax.imshow(M, aspect="auto", cmap=cmap)
        ax.set_xticks(range(len(samplers)), samplers, rotation=30, ha="right")
        ax.set_yticks(range(len(subs)), subs)
        ax.set_title(title)
        lo, hi = np.nanmin(M), np.nanmax(M)
        for i in range(len(subs)):
            for j in range(len(samplers)):
                if np.isfinite(M[i, j]):
                    t = (M[i, j] - lo) / (hi - lo) if hi > lo else 0.5
                    light = t < 0.5 if cmap == "viridis_r" else t > 0.5
                    ax.text(j, i, cell_fmt[key].format(V[i, j]), ha="center", va="center",
                            fontsize=7, color="k" if light else "w")
        fig.colorbar(im, ax=ax, shrink=0.8)
    note = (f"; Laplace i.i.d. draws: KSD {ref[0]['ksd']:.3g}" if ref else "")
    fig.suptitle(f"{name}: every sampler x subsampling at a budget of data passes "
                 f"(chains at the mode, auto steps; KSD in Laplace-whitened coordinates{note})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def replot(name, quick=False, seed=0):
    suffix = ("_quick" if quick else "") + (f"_seed{seed}" if seed else "")
    path = RESULTS / f"matrix_{name}{suffix}.csv"
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            rows.append({k: (v if k in ("sampler", "subsampling", "error") else
                             (float(v) if v not in ("", None) else None)) for k, v in r.items()})
    kind = "logistic" if name == "a9a" else "ridge"
    _plot(name, kind, rows, path.with_suffix(".png"))
    print(f"redrew {path.with_suffix('.png')}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="3,000 training rows, 150 draws")
    p.add_argument("--data", default="a9a,casp", help="comma list of a9a, casp")
    p.add_argument("--passes", type=float, default=10.0)
    p.add_argument("--max-draws", type=int, default=None)
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the chains (outputs get a _seed<k> suffix when k != 0)")
    p.add_argument("--samplers", default=None, help="comma list (default: all)")
    p.add_argument("--subsamplings", default=None, help="comma list (default: all)")
    p.add_argument("--replot", action="store_true",
                   help="only redraw the .png files from the saved .csv files")
    args = p.parse_args(argv)
    if args.max_draws is None:
        args.max_draws = 150 if args.quick else 1000
    args.samplers = args.samplers.split(",") if args.samplers else None
    args.subsamplings = args.subsamplings.split(",") if args.subsamplings else None
    if args.replot:
        for name in args.data.split(","):
            replot(name, args.quick, args.seed)
        return
    _install_context()
    t0 = time.perf_counter()
    for name in args.data.split(","):
        kind, rows, reference = run_dataset(name, args)
        print_table(name, kind, rows, reference)
        path, png = save(name, kind, rows + [reference], args.quick, args.seed)
        print(f"saved {path}" + (f" and {png}" if png else ""))
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
