"""The defaults at 10^4-10^5 parameters, against exact answers where they exist
(issue 25).

Text-like CSR data (``_textlike.text_like``: 100,000 rows, 10,000 features,
~13 non-zeros a row, each row's words from one of 40 Zipf topics, values
log(1 + tf)):

* ``ridge-10k``: ``SGMCMCRidge(alpha=1, noise_var=1, fit_intercept=False)`` at
  its defaults against the exact posterior (dense Cholesky, timed too): the
  largest mean error in posterior sds, the range of sd ratios, min ESS, max
  R-hat, passes, wall time, and wall time over an ``SGDRegressor`` epoch of
  the same data;
* ``ridge-10k-defaults``: ``SGMCMCRidge()`` at every default (``alpha`` and
  ``noise_var`` by the evidence, the intercept fitted) on the same rows,
  against the exact posterior at the ``alpha_`` and ``noise_var_`` it found;
* ``logistic-10k``: ``SGMCMCLogisticRegression()`` at its defaults on the same
  rows with y above its median: convergence, passes, wall time over an
  ``SGDClassifier`` epoch (no exact answer; ``--reference`` compares it with
  a second default fit of another seed, the two fits' means in units of their
  Monte Carlo standard errors);
* ``logistic-alpha-auto``: ``SGMCMCLogisticRegression(alpha="auto")`` on
  the same rows with labels drawn from the predictor's probabilities (not
  separable: the evidence has a maximum), where the evidence's spectrum is a
  stochastic Lanczos quadrature (above 4,000 parameters): the whole fit, its
  set-up passes and ``alpha_``; and on 20,000 of the rows and 2,000 features
  the quadrature's ``alpha_`` against the dense Hessian's (the quadrature
  forced there by lowering the module's threshold);
* ``a9a-pairwise``: real data, LIBSVM a9a with every pairwise interaction of
  its one-hot features (``_a9a_pairwise.pairwise``: 32,561 rows, 5,438
  features, 103 non-zeros a row), ``SGMCMCLogisticRegression()`` at its
  defaults against an exact reference of this benchmark's own
  (``_a9a_pairwise.reference``: Metropolis-adjusted HMC in the dense Laplace
  metric, numpy, 4 chains x 4,000 iterations after 200 of warm-up, cached in
  ``benchmarks/results/``; 73 minutes on one core the first time. The
  earlier 400 iterations had Monte Carlo errors up to 0.039 sd in the means,
  as large as the differences to judge; these have 0.011): the largest mean
  error in posterior sds, the range of sd ratios (with the reference's own
  Monte Carlo standard errors), min ESS, max R-hat, passes and wall time over
  an ``SGDClassifier`` epoch;
* ``logistic-100k`` (``--large``): 100,000 rows, 100,000 features, 20
  non-zeros a row, uniform columns: cost only.

Every fit runs with ``n_jobs=2`` (the machine's cores); the SGD epoch is the
best of three in the same run.  Each fit prints its warning, if any.

Usage: ``python benchmarks/bench_high_dim.py [--only ridge-10k] [--large] [--reference]``
"""
import argparse
import time
import warnings

import numpy as np
from scipy.special import ndtri
from sklearn.linear_model import SGDClassifier, SGDRegressor

from _textlike import ridge_posterior, text_like
from skbayes_sg import SGMCMCLogisticRegression, SGMCMCRidge


def sgd_epoch(X, y, classifier, repeats=3):
    """The best of ``repeats`` one-epoch SGD fits (seconds)."""
    best = np.inf
    for _ in range(repeats):
        model = (SGDClassifier(loss="log_loss", max_iter=1, tol=None, random_state=0)
                 if classifier else SGDRegressor(max_iter=1, tol=None, random_state=0))
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model.fit(X, y)
        best = min(best, time.perf_counter() - t)
    return best


def timed_fit(est, X, y):
    t = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y)
    seconds = time.perf_counter() - t
    return seconds, [str(w.message) for w in caught]


def report(name, est, seconds, epoch, messages, extra=""):
    print(f"{name}: {seconds:.1f} s = {seconds / epoch:,.0f} SGD epochs ({epoch * 1e3:.0f} ms), "
          f"{est.n_passes_:,.0f} passes ({est.n_setup_passes_:,.0f} set-up), "
          f"sampler={est.sampler_}, subsampling={est.subsampling_}, metric={est.metric_}, "
          f"step {est.step_size_:.3g}, acceptance {getattr(est, 'acceptance_rate_', np.nan):.2f}, "
          f"min ESS {np.nanmin(est.ess_):.0f} (target {est.target_ess_:.0f}), "
          f"max R-hat {np.nanmax(est.rhat_):.3f}{extra}", flush=True)
    for m in messages:
        print("  warning:", m[:400], flush=True)


def ridge_10k(X, eta):
    y = eta + np.random.default_rng(1).standard_normal(X.shape[0])
    t = time.perf_counter()
    mean, sd = ridge_posterior(X, y)
    exact = time.perf_counter() - t
    epoch = sgd_epoch(X, y, classifier=False)
    est = SGMCMCRidge(alpha=1.0, noise_var=1.0, fit_intercept=False, n_jobs=2, random_state=0)
    seconds, messages = timed_fit(est, X, y)
    z = (est.coef_ - mean) / sd
    ratio = est.coef_std_ / sd
    report("ridge-10k", est, seconds, epoch, messages,
           f"; worst mean {np.abs(z).max():.3f} sd, sd ratios {ratio.min():.3f}-{ratio.max():.3f}"
           f"; exact Cholesky {exact:.1f} s")


def ridge_10k_defaults(X, eta):
    """``SGMCMCRidge()`` as a user calls it: ``alpha`` and ``noise_var`` by
    the evidence (above 3,000 rows and coefficients, its Lanczos quadrature),
    the intercept fitted; checked against the exact posterior at the values
    it found."""
    y = eta + np.random.default_rng(1).standard_normal(X.shape[0])
    epoch = sgd_epoch(X, y, classifier=False)
    est = SGMCMCRidge(n_jobs=2, random_state=0)
    seconds, messages = timed_fit(est, X, y)
    mean, sd = ridge_posterior(X, y, est.alpha_, est.noise_var_, fit_intercept=True)
    z = (np.append(est.coef_, est.intercept_) - mean) / sd
    ratio = np.append(est.coef_std_, est.intercept_std_) / sd
    report("ridge-10k-defaults", est, seconds, epoch, messages,
           f"; alpha_ {est.alpha_:.4g}, noise_var_ {est.noise_var_:.4g}; worst mean "
           f"{np.abs(z).max():.3f} sd, sd ratios {ratio.min():.3f}-{ratio.max():.3f}")


def logistic_10k(X, eta, reference):
    y = (eta > np.median(eta)).astype(int)
    epoch = sgd_epoch(X, y, classifier=True)
    fits = []
    for seed in (0, 1) if reference else (0,):
        est = SGMCMCLogisticRegression(n_jobs=2, random_state=seed)
        seconds, messages = timed_fit(est, X, y)
        report(f"logistic-10k (seed {seed})", est, seconds, epoch, messages)
        fits.append(est)
    if reference:
        a, b = fits
        se = np.sqrt(a.coef_std_.ravel() ** 2 / a.ess_[:-1] + b.coef_std_.ravel() ** 2
                     / b.ess_[:-1])
        z = (a.coef_.ravel() - b.coef_.ravel()) / se
        print(f"  two seeds' means: max |z| {np.abs(z).max():.2f} over {z.size} "
              f"(4.6 expected by chance), sd ratio "
              f"{(a.coef_std_ / b.coef_std_).min():.3f}-{(a.coef_std_ / b.coef_std_).max():.3f}")


def logistic_alpha_auto(X, eta):
    from skbayes_sg.linear_model import _logistic
    rng = np.random.default_rng(5)
    centred = eta - np.median(eta)
    y = (rng.random(eta.size) < 1 / (1 + np.exp(-centred))).astype(int)
    epoch = sgd_epoch(X, y, classifier=True)
    est = SGMCMCLogisticRegression(alpha="auto", n_jobs=2, random_state=0)
    seconds, messages = timed_fit(est, X, y)
    report("logistic-alpha-auto", est, seconds, epoch, messages, f"; alpha_ {est.alpha_:.4g}")
    Xs, ys = X[:20_000, :2_000], y[:20_000]
    short = dict(alpha="auto", n_samples=20, n_warmup=20, n_chains=2, random_state=0)
    threshold = _logistic.MAX_DENSE_LAPLACE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # 20 draws: their convergence warnings
        dense = SGMCMCLogisticRegression(**short).fit(Xs, ys)
        _logistic.MAX_DENSE_LAPLACE = 100
        try:
            quadrature = SGMCMCLogisticRegression(**short).fit(Xs, ys)
        finally:
            _logistic.MAX_DENSE_LAPLACE = threshold
    print(f"  20,000 x 2,000: alpha_ dense {dense.alpha_:.5g} ({dense.n_setup_passes_:,.0f} "
          f"set-up passes), quadrature {quadrature.alpha_:.5g} "
          f"({quadrature.n_setup_passes_:,.0f}): {quadrature.alpha_ / dense.alpha_ - 1:+.2%}",
          flush=True)


def a9a_pairwise():
    from _a9a_pairwise import pairwise, reference
    from _common import results_dir
    X, y = pairwise()
    ref = reference(X, y, n_iter=4000, n_warmup=200, seed=1,
                    path=str(results_dir() / "a9a-pairwise-reference-4000.npz"))
    epoch = sgd_epoch(X, y, classifier=True)
    est = SGMCMCLogisticRegression(n_jobs=2, random_state=0)
    seconds, messages = timed_fit(est, X, y)
    mean = np.append(est.coef_.ravel(), est.intercept_)
    sd = np.append(est.coef_std_.ravel(), est.intercept_std_)
    z = np.abs(mean - ref["mean"]) / ref["sd"]
    ratio = sd / ref["sd"]
    # the difference in units of both Monte Carlo errors (the fit's from its
    # ESS, the reference's own): about 4.3 at most by chance over 5,439
    se = np.sqrt(sd ** 2 / est.ess_ + ref["se_mean"] ** 2)
    z_mc = np.abs(mean - ref["mean"]) / se
    chance = float(ndtri(1 - 0.025 / z.size))
    report("a9a-pairwise", est, seconds, epoch, messages,
           f"; worst mean {z.max():.3f} sd (largest difference over both Monte Carlo errors "
           f"{z_mc.max():.2f}; {chance:.2f} by chance with 95% probability), "
           f"sd ratios {ratio.min():.3f}-{ratio.max():.3f} "
           f"(reference: acceptance {float(ref['accept']):.2f}, Monte Carlo se up to "
           f"{np.max(ref['se_mean'] / ref['sd']):.3f} sd in the means, "
           f"{np.max(ref['se_sd'] / ref['sd']):.3f} in the sds)")


def logistic_100k():
    import scipy.sparse as sp
    rng = np.random.default_rng(0)
    n, d, nnz = 100_000, 100_000, 20
    X = sp.csr_matrix((rng.standard_normal(n * nnz),
                       (np.repeat(np.arange(n), nnz), rng.integers(0, d, n * nnz))), shape=(n, d))
    X.sum_duplicates()
    w = np.zeros(d)
    w[rng.choice(d, 200, replace=False)] = rng.standard_normal(200)
    y = (X @ w + rng.logistic(size=n) > 0).astype(int)
    epoch = sgd_epoch(X, y, classifier=True)
    est = SGMCMCLogisticRegression(n_jobs=2, random_state=0)
    seconds, messages = timed_fit(est, X, y)
    report("logistic-100k", est, seconds, epoch, messages)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=("ridge-10k", "ridge-10k-defaults", "logistic-10k",
                                           "logistic-alpha-auto", "a9a-pairwise",
                                           "logistic-100k"))
    parser.add_argument("--large", action="store_true", help="also the 10^5-feature logistic")
    parser.add_argument("--reference", action="store_true",
                        help="logistic-10k: a second seed to compare with")
    args = parser.parse_args()
    if args.only in (None, "ridge-10k", "ridge-10k-defaults", "logistic-10k",
                     "logistic-alpha-auto"):
        X, eta, _ = text_like()
    if args.only in (None, "ridge-10k"):
        ridge_10k(X, eta)
    if args.only in (None, "ridge-10k-defaults"):
        ridge_10k_defaults(X, eta)
    if args.only in (None, "logistic-10k"):
        logistic_10k(X, eta, args.reference)
    if args.only in (None, "logistic-alpha-auto"):
        logistic_alpha_auto(X, eta)
    if args.only in (None, "a9a-pairwise"):
        a9a_pairwise()
    if args.only == "logistic-100k" or (args.only is None and args.large):
        logistic_100k()


if __name__ == "__main__":
    main()
