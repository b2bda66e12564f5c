"""Fewer rows than coefficients: logistic (or Poisson) regression's prior, and its cost.

Dense rows of ``--features`` correlated features (20 shared factors plus
independent noise, each of variance about 1) and labels from a sparse
coefficient vector (1 % non-zero, standard normal) plus logistic noise:
``--rows`` rows, fewer than the features, as in genomics.  With ``--model
poisson``: counts ``y ~ Poisson(exp(0.5 + x^T beta / 10))`` from the same
rows and coefficients instead.  In the same run and on the same data:

* ``LogisticRegression()`` (``PoissonRegressor()``; lbfgs, its defaults):
  the point estimate;
* ``SGMCMCLogisticRegression(random_state=0)`` (``SGMCMCPoissonRegressor``)
  at its defaults (``alpha=1.0``), which sample the rows' span
  (:mod:`skbayes_sg._rows_span`: the model on the ``r`` columns ``X_ext V``,
  the prior's part orthogonal to the rows drawn exactly);
* the same with ``alpha="auto"``;
* ``alpha="auto"`` on the coefficients themselves (the route before the
  rows' span, forced by ``ROWS_SPAN_RATIO = inf``), its evidence from the
  rows' side of the Hessian's spectrum (exact, :class:`_DualEvidence`);
* the same with the evidence by stochastic Lanczos quadrature (the route
  before the rows' side; forced by lowering ``MAX_DENSE_LAPLACE``), for
  the set-up's cost.

Printed: seconds of each whole ``fit``, the ratio to ``LogisticRegression``,
data passes and the set-up's part, ``alpha_``, the smallest bulk ESS,
passes per effective draw, and whether the fit warned (the warning's
first words).

``--reference``: each ``alpha="auto"`` fit's draws against an independent
reference at its ``alpha_`` (:func:`row_space_reference`): the largest
error of a posterior mean in posterior sds, the root mean square of the
errors in their Monte Carlo standard errors, and the range of the sd ratios.

Usage: ``python benchmarks/bench_few_rows.py [--model poisson] [--rows 500] [--features 5000]
[--reference]``
"""
import argparse
import time
import warnings

import numpy as np
from sklearn.linear_model import LogisticRegression, PoissonRegressor

from skbayes_sg import SGMCMCLogisticRegression, SGMCMCPoissonRegressor, _rows_span
from skbayes_sg.linear_model import _logistic

from _posteriors import Posterior, reference


#: per model (the reference's name for it): the point estimate and the estimator
MODELS = {"logistic": (LogisticRegression, SGMCMCLogisticRegression),
          "poisson": (PoissonRegressor, SGMCMCPoissonRegressor)}


def make_problem(n, d, seed=0, model="logistic"):
    rng = np.random.default_rng(seed)
    factors = rng.standard_normal((n, 20))
    X = (0.7 * factors @ rng.standard_normal((20, d)) / np.sqrt(20)
         + 0.7 * rng.standard_normal((n, d)))
    beta = rng.standard_normal(d) * (rng.random(d) < 0.01)
    if model == "poisson":
        return X, rng.poisson(np.exp(0.5 + X @ beta / 10)).astype(np.int64)
    y = (X @ beta + rng.logistic(size=n) > 0).astype(np.int64)
    return X, y


def row_space_reference(X, y, alpha, name, n_draws=5000, model="logistic"):
    """Mean and sd of the logistic (or Poisson) posterior (coefficients,
    then the intercept) with fewer rows than coefficients, written independently of
    the library: the likelihood reads ``theta`` only through ``X_ext theta``,
    so with ``V`` an orthonormal basis of the rows' span (an SVD) the prior
    ``N(0, I / alpha)`` splits exactly into ``V u`` and its part orthogonal
    to the rows, which the data do not touch.  ``u`` has the posterior of an
    r-coefficient regression of the same model on ``X_ext V`` (no intercept), sampled
    by :mod:`_posteriors`' HMC (cached); the orthogonal part is the prior's,
    exactly: ``var theta_j = (V C_u V^T)_jj + (1 - |V_j|^2) / alpha``.
    Returns ``(mean, sd, the reference's smallest ESS)``."""
    Xe = np.hstack([X, np.ones((X.shape[0], 1))])
    _, s, Vt = np.linalg.svd(Xe, full_matrices=False)
    V = Vt[s > 1e-10 * s[0]].T
    post = Posterior(name, Xe @ V, y.astype(np.float64), model, alpha=alpha)
    ref = reference(post, n_draws=n_draws)
    mean = V @ ref["mean"]
    var = np.einsum("ij,jk,ik->i", V, ref["cov"], V) + (1.0 - np.sum(V * V, axis=1)) / alpha
    return mean, np.sqrt(var), ref["ess"]


def compare(flat, ess, alpha, X, y, args):
    """Draws ``flat`` (draws x (coefficients, intercept)) and their ESS
    against :func:`row_space_reference` at ``alpha``."""
    prefix = "few-rows" if args.model == "logistic" else f"few-rows-{args.model}"
    name = f"{prefix}-{args.rows}x{args.features}-seed{args.seed}-alpha{alpha:.6g}"
    mean, sd, ref_ess = row_space_reference(X, y, alpha, name, model=args.model)
    err = (flat.mean(axis=0) - mean) / sd
    z = err / np.sqrt(1.0 / np.asarray(ess) + 1.0 / ref_ess)
    ratio = flat.std(axis=0, ddof=1) / sd
    print(f"  against the row-space reference at alpha_ {alpha:.4g} (its smallest ESS "
          f"{ref_ess:.0f}): max |mean error| {np.abs(err).max():.3f} sd, rms z "
          f"{np.sqrt(np.mean(z * z)):.2f}, sd ratios [{ratio.min():.3f}, {ratio.max():.3f}] "
          f"over {err.size} coefficients")


def fit_draws(est):
    """A one-output fit's draws, (draws, coefficients then the intercept)."""
    draws = np.concatenate([est.coef_samples_, est.intercept_samples_[..., None]], axis=-1)
    return draws.reshape(-1, draws.shape[-1])


def timed_fit(est, X, y):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        est.fit(X, y)
        seconds = time.perf_counter() - start
    return seconds, [str(w.message) for w in caught]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500)
    parser.add_argument("--features", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--reference", action="store_true")
    parser.add_argument("--model", choices=sorted(MODELS), default="logistic")
    args = parser.parse_args()
    Point, Estimator = MODELS[args.model]
    X, y = make_problem(args.rows, args.features, args.seed, args.model)
    start = time.perf_counter()
    Point().fit(X, y)
    point = time.perf_counter() - start
    print(f"{args.model}: {args.rows} rows, {args.features} features; {Point.__name__} "
          f"{point:.2f} s")
    print(f"{'fit':32s} {'s':>7s} {'ratio':>6s} {'passes':>8s} {'set-up':>7s} {'alpha_':>8s} "
          f"{'min ESS':>8s} {'passes/ESS':>10s}  warned")
    limit = _logistic.MAX_DENSE_LAPLACE
    if X.shape[1] + 1 <= limit or X.shape[0] > limit:
        print(f"(the rows' side needs more than {limit} coefficients and at most {limit} rows)")
    ratio = _rows_span.ROWS_SPAN_RATIO
    for label, alpha, span, rows_side in [
            ("alpha=1.0 (the default)", 1.0, True, True),
            ("alpha='auto', rows' span", "auto", True, True),
            ("'auto' on the coefficients", "auto", False, True),
            ("... its evidence by quadrature", "auto", False, False)]:
        _logistic.MAX_DENSE_LAPLACE = limit if rows_side else X.shape[0] - 1
        _rows_span.ROWS_SPAN_RATIO = ratio if span else np.inf
        try:
            est = Estimator(alpha=alpha, random_state=0)
            seconds, messages = timed_fit(est, X, y)
        finally:
            _logistic.MAX_DENSE_LAPLACE, _rows_span.ROWS_SPAN_RATIO = limit, ratio
        ess = float(np.min(est.ess_))
        warned = messages[0][:60] if messages else "-"
        print(f"{label:32s} {seconds:7.1f} {seconds / point:6.0f} {est.n_passes_:8,.0f} "
              f"{est.n_setup_passes_:7,.0f} {est.alpha_:8.4g} {ess:8.0f} "
              f"{est.n_passes_ / ess:10.1f}  {warned}", flush=True)
        if args.reference and alpha == "auto" and rows_side:
            compare(fit_draws(est), est.ess_, est.alpha_, X, y, args)

if __name__ == "__main__":
    main()
