"""The benchmark posteriors and their references (numpy only; nothing here
imports the library).

Every posterior is a GLM with an explicit column of ones (``fit_intercept=False``
in the estimators) and a Gaussian prior N(0, I / alpha) on every coefficient:

============================  ==========================================================
``diabetes-ridge``            sklearn's diabetes (442 x 10 + 1), target standardised,
                              noise variance 0.5, alpha 1: exact Gaussian posterior
                              (condition number ~900)
``australian``                LIBSVM australian_scale (690 x 14 + 1), alpha 1 (cond. ~300)
``breast-cancer``             sklearn's breast cancer standardised (569 x 30 + 1), alpha 1
``breast-cancer-separable``   the same with alpha 0.01: nearly separable, sds up to 30%
                              wider than the Laplace approximation's
``wine-multinomial``          sklearn's wine standardised (178 x 13 + 1), 3 classes, alpha 1
``digits-image``              sklearn's digits / 16 (1797 x 64 + 1), digit >= 5, alpha 1:
                              three pixels are 0 in every image (their posterior is the
                              prior) next to stiff ones (cond. ~2000)
``a9a``                       LIBSVM a9a (32,561 x 123 + 1, sparse), alpha 1 (cond. ~3e4)
``a9a-alpha0.1``              the same at the pSGLD paper's prior (alpha 0.1, variance 10):
                              rare features weakly identified (issue 41); its reference has
                              4 x 5,000 draws (ESS ~12,000)
============================  ==========================================================

References: the ridge posterior in closed form; the others by a long run of
Hamiltonian Monte Carlo with a Metropolis correction (plain leapfrog, mass
matrix the inverse Laplace covariance, step adapted by dual averaging to an
acceptance of 0.85 over a jittered trajectory), written here independently
of the library, cached in ``benchmarks/results/``.
"""
import gzip
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy.special import expit, log_expit, logsumexp, softmax

from _common import data_dir

RESULTS = Path(__file__).resolve().parent / "results"


def _ones(X):
    if sp.issparse(X):
        return sp.hstack([X, np.ones((X.shape[0], 1))]).tocsr()
    return np.hstack([X, np.ones((X.shape[0], 1))])


class Posterior:
    """exp(-U): U = sum_i loss_i(X theta) + alpha |theta|^2 / 2."""

    def __init__(self, name, X, y, model, alpha=1.0, noise_var=1.0, K=1, note=""):
        self.name, self.X, self.y, self.model = name, X, y, model
        self.alpha, self.noise_var, self.K, self.note = alpha, noise_var, K, note
        self.n, self.p = X.shape
        self.dim = self.p * K

    def _Z(self, theta):
        return np.asarray(self.X @ theta.reshape(self.K, self.p).T)

    def U_grad(self, theta):
        Z = self._Z(theta)
        if self.model == "logistic":
            z = Z[:, 0]
            loss = -(self.y * log_expit(z) + (1 - self.y) * log_expit(-z)).sum()
            R = (expit(z) - self.y)[:, None]
        elif self.model == "gaussian":
            r = Z[:, 0] - self.y
            loss = 0.5 * r @ r / self.noise_var
            R = (r / self.noise_var)[:, None]
        elif self.model == "poisson":   # the log link; U drops the log(y!) constant
            rate = np.exp(Z[:, 0])
            loss = (rate - self.y * Z[:, 0]).sum()
            R = (rate - self.y)[:, None]
        else:
            yi = self.y.astype(int)
            loss = (logsumexp(Z, axis=1) - Z[np.arange(self.n), yi]).sum()
            R = softmax(Z, axis=1)
            R[np.arange(self.n), yi] -= 1.0
        g = np.asarray(self.X.T @ R).T.ravel()
        return loss + 0.5 * self.alpha * theta @ theta, g + self.alpha * theta

    def hessian(self, theta):
        Z = self._Z(theta)
        Xd = self.X.toarray() if sp.issparse(self.X) else self.X
        K, p = self.K, self.p
        if self.model == "gaussian":
            W = np.full(self.n, 1.0 / self.noise_var)
        elif self.model == "logistic":
            s = expit(Z[:, 0])
            W = s * (1 - s)
        elif self.model == "poisson":
            W = np.exp(Z[:, 0])
        else:
            P = softmax(Z, axis=1)
            H = np.zeros((K, p, K, p))
            for k in range(K):
                for m in range(K):
                    w = P[:, k] * ((k == m) - P[:, m])
                    H[k, :, m, :] = Xd.T @ (Xd * w[:, None])
            return H.reshape(self.dim, self.dim) + self.alpha * np.eye(self.dim)
        return Xd.T @ (Xd * W[:, None]) + self.alpha * np.eye(self.dim)

    def mode(self):
        theta = np.zeros(self.dim)
        for _ in range(100):
            u, g = self.U_grad(theta)
            step = np.linalg.solve(self.hessian(theta), g)
            t = 1.0
            while self.U_grad(theta - t * step)[0] > u - 1e-4 * t * (g @ step) and t > 1e-12:
                t *= 0.5
            theta = theta - t * step
            if g @ step < 1e-20:
                break
        return theta

    def estimator_kwargs(self):
        kw = dict(alpha=self.alpha, fit_intercept=False)
        if self.model == "gaussian":
            kw["noise_var"] = self.noise_var
        return kw

    def target(self):
        return self.y if self.model != "softmax" else self.y.astype(int)


def _load_svm(name, n_features):
    from sklearn.datasets import load_svmlight_file
    path = data_dir() / name
    handle = gzip.open(path) if str(path).endswith(".gz") else open(path, "rb")
    with handle:
        X, y = load_svmlight_file(handle, n_features=n_features)
    return X.tocsr(), (y > 0).astype(float)


def diabetes_ridge():
    from sklearn.datasets import load_diabetes
    X, y = load_diabetes(return_X_y=True)
    return Posterior("diabetes-ridge", _ones(X), (y - y.mean()) / y.std(), "gaussian",
                     alpha=1.0, noise_var=0.5, note="exact")


def australian():
    X, y = _load_svm("australian_scale", 14)
    return Posterior("australian", _ones(X.toarray()), y, "logistic")


def breast_cancer(alpha=1.0):
    from sklearn.datasets import load_breast_cancer
    from sklearn.preprocessing import StandardScaler
    X, y = load_breast_cancer(return_X_y=True)
    name = "breast-cancer" if alpha == 1.0 else "breast-cancer-separable"
    return Posterior(name, _ones(StandardScaler().fit_transform(X)), y.astype(float),
                     "logistic", alpha=alpha)


def wine():
    from sklearn.datasets import load_wine
    from sklearn.preprocessing import StandardScaler
    X, y = load_wine(return_X_y=True)
    return Posterior("wine-multinomial", _ones(StandardScaler().fit_transform(X)),
                     y.astype(float), "softmax", K=3)


def digits():
    from sklearn.datasets import load_digits
    X, y = load_digits(return_X_y=True)
    return Posterior("digits-image", _ones(X / 16.0), (y >= 5).astype(float), "logistic")


def a9a(alpha=1.0):
    X, y = _load_svm("a9a.gz", 123)
    name = "a9a" if alpha == 1.0 else f"a9a-alpha{alpha:g}"
    post = Posterior(name, _ones(X), y, "logistic", alpha=alpha)
    if alpha != 1.0:
        post.reference_draws = 5000
    return post


POSTERIORS = {
    "diabetes-ridge": diabetes_ridge,
    "australian": australian,
    "breast-cancer": breast_cancer,
    "breast-cancer-separable": lambda: breast_cancer(0.01),
    "wine-multinomial": wine,
    "digits-image": digits,
    "a9a": a9a,
    "a9a-alpha0.1": lambda: a9a(0.1),
}
SMALL = ["diabetes-ridge", "australian", "breast-cancer", "breast-cancer-separable",
         "wine-multinomial", "digits-image"]


# --------------------------------------------------------------------- reference
def _hmc(post, mode, F, n_draws, n_warmup, seed, traj=1.5):
    """Leapfrog HMC on theta = mode + F z (F F^T = the Laplace covariance)."""
    rng = np.random.default_rng(seed)
    d = post.dim

    def ug(z):
        u, g = post.U_grad(mode + F @ z)
        return u, F.T @ g

    z = rng.standard_normal(d)
    u, g = ug(z)
    eps, log_eps, mu, hbar, lbar = 0.5, np.log(0.5), np.log(5.0), 0.0, 0.0
    out = np.empty((n_draws, d))
    for it in range(n_warmup + n_draws):
        n_steps = max(1, int(np.ceil(traj * rng.uniform(0.5, 1.5) / eps)))
        p = rng.standard_normal(d)
        z1, p1 = z.copy(), p - 0.5 * eps * g
        for s in range(n_steps):
            z1 = z1 + eps * p1
            u1, g1 = ug(z1)
            if s < n_steps - 1:
                p1 = p1 - eps * g1
        p1 = p1 - 0.5 * eps * g1
        log_r = u - u1 + 0.5 * (p @ p - p1 @ p1)
        a = 1.0 if log_r >= 0 else (np.exp(log_r) if np.isfinite(log_r) else 0.0)
        if rng.uniform() < a:
            z, u, g = z1, u1, g1
        if it < n_warmup:
            t = it + 1
            hbar = (1 - 1 / (t + 10)) * hbar + (0.85 - a) / (t + 10)
            log_eps = mu - np.sqrt(t) / 0.05 * hbar
            w = t ** -0.75
            lbar = w * log_eps + (1 - w) * lbar
            eps = np.exp(lbar if it == n_warmup - 1 else log_eps)
        else:
            out[it - n_warmup] = mode + F @ z
    return out


def reference(post, n_chains=4, n_draws=None, n_warmup=None, verbose=True):
    """Posterior mean, sd and covariance (exact for ridge; else a cached long
    HMC run, with the ESS of its slowest coordinate): ``n_draws`` a chain
    (default the posterior's ``reference_draws``, 20,000), after
    ``n_warmup`` (default a tenth of them, at most 1,000)."""
    n_draws = getattr(post, "reference_draws", 20000) if n_draws is None else n_draws
    n_warmup = min(1000, n_draws // 10) if n_warmup is None else n_warmup
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"reference-{post.name}-{n_draws}.npz"
    if path.exists():
        ref = dict(np.load(path))
        return {k: (v if v.shape else v.item()) for k, v in ref.items()}
    mode = post.mode()
    S = np.linalg.inv(post.hessian(mode))
    if post.note == "exact":
        ref = dict(mean=mode, sd=np.sqrt(np.diag(S)), cov=S, ess=np.inf, seconds=0.0)
    else:
        if verbose:
            print(f"  computing the reference of {post.name} ({n_chains} x {n_draws} HMC "
                  "draws; cached afterwards) ...", flush=True)
        t0 = time.perf_counter()
        F = np.linalg.cholesky(S)
        draws = np.stack([_hmc(post, mode, F, n_draws, n_warmup, seed=c)
                          for c in range(n_chains)])
        ref = dict(mean=draws.mean(axis=(0, 1)), sd=draws.reshape(-1, post.dim).std(0, ddof=1),
                   cov=np.cov(draws.reshape(-1, post.dim), rowvar=False),
                   ess=_min_ess(draws), seconds=time.perf_counter() - t0)
    ref["laplace_sd"] = np.sqrt(np.diag(S))
    np.savez(path, **ref)
    return ref


def _min_ess(draws):
    """Smallest bulk ESS (ArviZ, when installed)."""
    try:
        import arviz as az
    except ImportError:
        return float("nan")
    ds = az.convert_to_dataset({"theta": draws})
    return float(np.min(az.ess(ds, method="bulk")["theta"].values))


def errors(draws, ref):
    """Largest |mean error| in posterior sds, and the sd ratios (draws / reference)."""
    flat = draws.reshape(-1, draws.shape[-1])
    err = np.abs(flat.mean(axis=0) - ref["mean"]) / ref["sd"]
    ratio = flat.std(axis=0, ddof=1) / ref["sd"]
    return float(err.max()), ratio

