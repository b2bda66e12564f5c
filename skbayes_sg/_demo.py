"""``python -m skbayes_sg demo``: the estimators on scikit-learn's bundled datasets.

Every dataset ships with scikit-learn (no network).  Each is split once, at a
fixed seed, into 75% training and 25% held-out rows, and the features are
standardised on the training rows.  For every sampler the demo prints
held-out metrics, the step size used, the gradient evaluations spent and the
fit time, next to the corresponding scikit-learn point estimate; then a short
posterior summary of a few coefficients, with the standard deviations of a
reference Gaussian (the Laplace approximation at the mode; the exact
posterior for ridge), so one can see whether the chains have spread over the
posterior.

Every estimator runs at its defaults but for the sampler: ``"auto"`` (what a
user gets), then ``"sgld"``, ``"sghmc"`` and ``"psgld"`` for comparison.
The budget is automatic (sampling until the effective sample size reaches
its target); ``--quick`` caps it at a few thousand data passes, so the
slower samplers stop short (the ESS column says by how much).

The entry point for the command line is :func:`run`; :func:`run_demo` is the
same for Python callers and tests, and returns the numbers it prints.
"""
import sys
import time
import warnings

import numpy as np
from scipy.special import expit, logsumexp, softmax
from scipy.stats import norm
from sklearn.datasets import load_breast_cancer, load_diabetes, load_wine
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import accuracy_score, log_loss
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from . import __version__
from .linear_model import SGMCMCLogisticRegression, SGMCMCRidge

SAMPLERS = ("auto", "sgld", "sghmc", "psgld")
SPLIT_SEED = 0          # the train/test split never changes with --seed
TEST_SIZE = 0.25
N_CHAINS = 4
ALPHA = 1.0             # prior precision of every estimator
N_SUMMARY = 4           # coefficients in each posterior summary
INTERVAL = 0.90         # ridge predictive interval

# The budget of every fit: the automatic one (until the effective sample size
# reaches its target, at most max_passes data passes); --quick caps it lower,
# a smoke test in which the slower samplers stop short of the target.
SETTINGS = {
    False: dict(),
    True: dict(max_passes=10000),
}


# ----------------------------------------------------------------- command line
def add_arguments(parser):
    """Add the options of the ``demo`` subcommand to an argparse parser."""
    parser.add_argument(
        "--quick", action="store_true",
        help="a budget of 10,000 data passes per fit (a smoke test: the slower samplers "
             "stop short of their effective sample size)")
    parser.add_argument(
        "--seed", type=int, default=0,
        help="random_state of the samplers (the train/test split is fixed); default: 0")
    parser.add_argument(
        "--n-jobs", type=int, default=-1, dest="n_jobs",
        help="chains run in parallel (joblib threads); the draws do not depend "
             "on it; default: -1 (all cores)")


def run(args):
    """Run the demo from parsed command-line arguments; return the exit status."""
    run_demo(quick=args.quick, seed=args.seed, n_jobs=args.n_jobs, out=sys.stdout)
    return 0


# ------------------------------------------------------------------------ demo
def run_demo(quick=False, seed=0, n_jobs=-1, out=None):
    """Fit the estimators on three bundled datasets and print a report.

    Parameters
    ----------
    quick : bool, default=False
        Use much shorter chains.
    seed : int, default=0
        ``random_state`` of every estimator.
    n_jobs : int, default=-1
        Chains run in parallel.
    out : file-like or None, default=None
        Where the report goes (None: ``sys.stdout``).

    Returns
    -------
    results : dict
        ``results[dataset][model]`` is a dict of the printed numbers, with
        datasets ``"breast_cancer"``, ``"wine"``, ``"diabetes"`` and models
        the sampler names plus ``"sklearn"``.
    """
    out = sys.stdout if out is None else out
    settings = SETTINGS[bool(quick)]
    common = dict(n_chains=N_CHAINS, n_jobs=n_jobs, random_state=seed, alpha=ALPHA, **settings)

    def say(line=""):
        print(line, file=out, flush=True)

    t_start = time.perf_counter()
    say(f"skbayes_sg {__version__} demo: SG-MCMC on datasets bundled with scikit-learn")
    budget = (f"at most {settings['max_passes']:,} data passes per fit" if settings
              else "the automatic budget")
    say(f"{N_CHAINS} chains per fit, sampled until the effective sample size reaches its "
        f"target ({budget}); prior precision alpha={ALPHA:g}; seed={seed}; n_jobs={n_jobs}")
    say(f"fixed {1 - TEST_SIZE:.0%}/{TEST_SIZE:.0%} train/test split, features standardised "
        "on the training rows")

    results = {
        "breast_cancer": _classification(
            say, "Breast cancer", load_breast_cancer(), common, stratify=True),
        "wine": _classification(say, "Wine", load_wine(), common, stratify=True),
        "diabetes": _regression(say, "Diabetes", load_diabetes(), common),
    }
    say()
    say(f"Total time: {time.perf_counter() - t_start:.1f} s")
    return results


def _split(data, stratify):
    X, y = np.asarray(data.data, dtype=np.float64), np.asarray(data.target)
    X_tr, X_te, y_tr, y_te = train_test_split(
        X, y, test_size=TEST_SIZE, random_state=SPLIT_SEED, stratify=y if stratify else None)
    scaler = StandardScaler().fit(X_tr)
    return scaler.transform(X_tr), scaler.transform(X_te), y_tr, y_te


def _fit_timed(est, X, y):
    t = time.perf_counter()
    with warnings.catch_warnings():
        # the ESS column reports a fit that stopped short of its target
        warnings.simplefilter("ignore", category=UserWarning)
        est.fit(X, y)
    return time.perf_counter() - t


def _label(est):
    """The sampler as asked, with what "auto" resolved to."""
    if est.sampler == "auto":
        return f"auto ({est.sampler_}, {est.subsampling_})"
    return f"{est.sampler} ({est.subsampling_})"


def _fit_numbers(est, seconds):
    return dict(step_size=est.step_size_, n_grad_evals=est.n_grad_evals_,
                passes=est.n_passes_, ess=float(np.nanmin(est.ess_)),
                target_ess=est.target_ess_, rhat=float(np.nanmax(est.rhat_)),
                fit_time=seconds, label=_label(est))


def _fit_columns(r):
    return (f"{r['step_size']:>10.3g}{r['passes']:>9,.0f}"
            f"{r['ess']:>7.0f}/{r['target_ess']:<5.0f}{r['rhat']:>7.3f}{r['fit_time']:>8.2f} s")


FIT_HEADER = f"{'step':>10}{'passes':>9}{'ESS/target':>13}{'R-hat':>7}{'time':>10}"


# -------------------------------------------------------------- classification
def _classification(say, title, data, common, stratify):
    X_tr, X_te, y_tr, y_te = _split(data, stratify)
    names = list(data.feature_names)
    n_classes = len(np.unique(y_tr))
    kind = "binary" if n_classes == 2 else f"multinomial, {n_classes} classes"
    say()
    say(f"== {title}: SGMCMCLogisticRegression ({kind}; n_train={len(y_tr)}, "
        f"n_test={len(y_te)}, n_features={X_tr.shape[1]}) ==")
    header = f"{'sampler':<40}{'accuracy':>9}{'log-loss':>10}" + FIT_HEADER
    say(header)
    say("-" * len(header))

    res, fitted = {}, {}
    for sampler in SAMPLERS:
        est = SGMCMCLogisticRegression(sampler=sampler, **common)
        seconds = _fit_timed(est, X_tr, y_tr)
        proba = est.predict_proba(X_te)
        res[sampler] = dict(
            accuracy=accuracy_score(y_te, est.classes_[proba.argmax(axis=1)]),
            log_loss=log_loss(y_te, proba, labels=est.classes_), **_fit_numbers(est, seconds))
        fitted[sampler] = est
        r = res[sampler]
        say(f"{r['label']:<40}{r['accuracy']:>9.3f}{r['log_loss']:>10.4f}" + _fit_columns(r))

    # the MAP of the same model; sklearn leaves the intercept unpenalised
    ref = LogisticRegression(C=1.0 / ALPHA, max_iter=10_000)
    seconds = _fit_timed(ref, X_tr, y_tr)
    proba = ref.predict_proba(X_te)
    res["sklearn"] = dict(accuracy=accuracy_score(y_te, ref.predict(X_te)),
                          log_loss=log_loss(y_te, proba, labels=ref.classes_), fit_time=seconds)
    r = res["sklearn"]
    say(f"{'sklearn LogisticRegression(C=1/alpha)':<40}{r['accuracy']:>9.3f}"
        f"{r['log_loss']:>10.4f}{'-':>10}{'-':>9}{'-':>13}{'-':>7}{r['fit_time']:>8.2f} s")

    for sampler, est in fitted.items():
        coef = est.coef_samples_
        if coef.ndim == 3:  # binary: one output
            coef = coef[:, :, None, :]
        labels = ([f"{n}" for n in names] if coef.shape[2] == 1 else
                  [f"class {c}: {n}" for c in est.classes_ for n in names])
        mode = est.mode_ if hasattr(est, "mode_") else fitted["auto"].mode_
        ref_sd = _laplace_sd_logistic(X_tr, mode, ALPHA)
        res[sampler]["sd_ratio"] = _summary(
            say, f"sampler={sampler}", coef, est.intercept_samples_, mode, ref_sd, labels,
            "Laplace sd")
    return res


def _laplace_sd_logistic(X, mode, alpha):
    """Standard deviations of the Laplace approximation at the mode, (K, dext)."""
    Xa = np.hstack([X, np.ones((X.shape[0], 1))])
    K, dext = mode.shape
    if K == 1:
        p = expit(Xa @ mode[0])
        H = Xa.T @ (Xa * (p * (1 - p))[:, None]) + alpha * np.eye(dext)
        return np.sqrt(np.diag(np.linalg.inv(H))).reshape(1, dext)
    P = softmax(Xa @ mode.T, axis=1)                              # (n, K)
    H = np.empty((K, dext, K, dext))
    for k in range(K):
        for m in range(K):
            w = P[:, k] * ((k == m) - P[:, m])                     # d^2 phi / dz_k dz_m
            H[k, :, m, :] = Xa.T @ (Xa * w[:, None])
    H = H.reshape(K * dext, K * dext) + alpha * np.eye(K * dext)
    return np.sqrt(np.diag(np.linalg.inv(H))).reshape(K, dext)


# ------------------------------------------------------------------ regression
def _regression(say, title, data, common):
    X_tr, X_te, y_tr, y_te = _split(data, stratify=False)
    names = list(data.feature_names)
    # The prior N(0, 1/alpha) covers the intercept too: on the raw target
    # (mean ~150) it would shrink the intercept towards 0.  Sample in
    # standardised target units and report in the original ones.
    y_mean, y_scale = float(y_tr.mean()), float(y_tr.std())
    t_tr = (y_tr - y_mean) / y_scale
    t_te = (y_te - y_mean) / y_scale
    say()
    say(f"== {title}: SGMCMCRidge (n_train={len(y_tr)}, n_test={len(y_te)}, "
        f"n_features={X_tr.shape[1]}; target standardised for sampling, metrics in "
        "its original units) ==")
    cover = f"{INTERVAL:.0%} PI cover"
    header = (f"{'sampler':<40}{'RMSE':>8}{'mean log pred':>15}{cover:>14}{'PI width':>10}"
              + FIT_HEADER)
    say(header)
    say("-" * len(header))
    lo_q, hi_q = (1 - INTERVAL) / 2, (1 + INTERVAL) / 2

    res, fitted = {}, {}
    for sampler in SAMPLERS:
        est = SGMCMCRidge(sampler=sampler, **common)
        seconds = _fit_timed(est, X_tr, t_tr)
        mean = est.predict(X_te)
        # posterior predictive density: a mixture over the draws
        W = est.coef_samples_.reshape(-1, X_tr.shape[1])
        b = est.intercept_samples_.reshape(-1)
        Z = X_te @ W.T + b                                       # (n_test, n_draws)
        s2 = est.noise_var_
        logpdf = -0.5 * ((t_te[:, None] - Z) ** 2 / s2 + np.log(2 * np.pi * s2))
        lpd = logsumexp(logpdf, axis=1) - np.log(Z.shape[1]) - np.log(y_scale)
        draws = est.sample_y(X_te, n_draws=4000, random_state=common["random_state"])
        lo, hi = np.quantile(draws, [lo_q, hi_q], axis=1)
        res[sampler] = dict(
            rmse=y_scale * float(np.sqrt(np.mean((mean - t_te) ** 2))),
            mean_log_pred=float(lpd.mean()),
            coverage=float(np.mean((t_te >= lo) & (t_te <= hi))),
            interval_width=y_scale * float(np.mean(hi - lo)), **_fit_numbers(est, seconds))
        fitted[sampler] = est
        r = res[sampler]
        say(f"{r['label']:<40}{r['rmse']:>8.2f}{r['mean_log_pred']:>15.3f}"
            f"{r['coverage']:>14.3f}{r['interval_width']:>10.1f}" + _fit_columns(r))

    # the MAP of the same model (sklearn's objective ||y - Xw||^2 + a ||w||^2
    # is ours times 2 sigma^2), with a plug-in Gaussian predictive
    sigma2 = fitted[SAMPLERS[0]].noise_var_
    ref = Ridge(alpha=ALPHA * sigma2)
    seconds = _fit_timed(ref, X_tr, t_tr)
    mean = ref.predict(X_te)
    p = X_tr.shape[1] + 1
    s2 = float(np.sum((t_tr - ref.predict(X_tr)) ** 2) / max(len(t_tr) - p, 1))
    z = float(norm.ppf(hi_q))
    lpd = -0.5 * ((t_te - mean) ** 2 / s2 + np.log(2 * np.pi * s2)) - np.log(y_scale)
    res["sklearn"] = dict(
        rmse=y_scale * float(np.sqrt(np.mean((mean - t_te) ** 2))),
        mean_log_pred=float(lpd.mean()),
        coverage=float(np.mean(np.abs(t_te - mean) <= z * np.sqrt(s2))),
        interval_width=y_scale * 2 * z * float(np.sqrt(s2)), fit_time=seconds)
    r = res["sklearn"]
    say(f"{'sklearn Ridge (plug-in noise)':<40}{r['rmse']:>8.2f}{r['mean_log_pred']:>15.3f}"
        f"{r['coverage']:>14.3f}{r['interval_width']:>10.1f}{'-':>10}{'-':>9}{'-':>13}"
        f"{'-':>7}{r['fit_time']:>8.2f} s")

    Xa = np.hstack([X_tr, np.ones((X_tr.shape[0], 1))])
    for sampler, est in fitted.items():
        H = Xa.T @ Xa / est.noise_var_ + ALPHA * np.eye(Xa.shape[1])
        exact_sd = np.sqrt(np.diag(np.linalg.inv(H)))[None, :]
        mode = est.mode_ if hasattr(est, "mode_") else fitted["auto"].mode_
        res[sampler]["sd_ratio"] = _summary(
            say, f"sampler={sampler}, standardised units", est.coef_samples_[:, :, None, :],
            est.intercept_samples_, mode, exact_sd, names, "exact sd")
    return res


# --------------------------------------------------------------------- summary
def _summary(say, what, coef, intercept, mode, ref_sd, labels, ref_name):
    """Print mean, sd and quantiles of the largest coefficients; return the
    median over all parameters of sd / reference sd.

    coef : (n_chains, n_samples, K, d); intercept : (n_chains, n_samples[, K]);
    mode, ref_sd : (K, d + 1) with the intercept last.
    """
    n_chains, n_samples, K, d = coef.shape
    draws = np.concatenate(
        [coef, np.asarray(intercept).reshape(n_chains, n_samples, K, 1)], axis=3
    ).reshape(n_chains * n_samples, K * (d + 1))
    sd = draws.std(axis=0)
    ref = np.asarray(ref_sd).reshape(-1)
    ratio = float(np.median(sd / ref))

    flat_mode = np.asarray(mode).reshape(K, d + 1)[:, :d].reshape(-1)   # coefficients only
    top = np.argsort(-np.abs(flat_mode), kind="stable")[:N_SUMMARY]
    say()
    say(f"Posterior summary, {what} ({N_SUMMARY} largest coefficients at the mode)")
    width = max(24, max(len(labels[j]) for j in top) + 2)
    say(f"  {'coefficient':<{width}}{'mean':>9}{'sd':>9}{'5%':>9}{'95%':>9}{ref_name:>12}")
    for j in top:
        col = (j // d) * (d + 1) + j % d       # position among the (K, d + 1) parameters
        q5, q95 = np.quantile(draws[:, col], [0.05, 0.95])
        say(f"  {labels[j]:<{width}}{draws[:, col].mean():>9.3f}{sd[col]:>9.3f}{q5:>9.3f}"
            f"{q95:>9.3f}{ref[col]:>12.3f}")
    say(f"  median of sd / {ref_name} over all {draws.shape[1]} parameters: {ratio:.2f}")
    return ratio
