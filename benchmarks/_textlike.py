"""Text-like sparse regression data (numpy only; nothing here imports the library).

``text_like(n, d, nnz, topics, seed)``: each row draws its ``nnz`` words from
one of ``topics`` topics, each topic a Zipf distribution over its own random
permutation of the vocabulary, so that features co-occur within a topic and
most are rare; values are ``log(1 + tf)``.  The target is a sparse linear
signal plus unit Gaussian noise (ridge), or that signal above its median
(logistic).  This is the data of issue 25: 100,000 rows, 10,000 features,
about 15 non-zeros a row.
"""
import numpy as np
import scipy.sparse as sp


def text_like(n=100_000, d=10_000, nnz=15, topics=40, zipf=1.1, seed=0):
    """CSR ``X`` (n, d) float64, the linear predictor ``X @ beta``, and ``beta``."""
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, d + 1, dtype=np.float64)
    p = ranks ** -zipf
    p /= p.sum()
    cdf = np.cumsum(p)
    perms = np.stack([rng.permutation(d) for _ in range(topics)])
    topic = rng.integers(topics, size=n)
    words = np.searchsorted(cdf, rng.random((n, nnz)), side="right").clip(max=d - 1)
    cols = perms[topic[:, None], words]
    rows = np.repeat(np.arange(n), nnz)
    X = sp.csr_matrix((np.ones(n * nnz), (rows, cols.ravel())), shape=(n, d))
    X.sum_duplicates()
    X.data = np.log1p(X.data)
    X.sort_indices()
    beta = rng.standard_normal(d) * (rng.random(d) < 0.1)
    return X, np.asarray(X @ beta), beta


def ridge_posterior(X, y, alpha=1.0, noise_var=1.0, fit_intercept=False):
    """Exact posterior mean and sds of ``N(0, I / alpha)`` prior, Gaussian
    likelihood with ``noise_var`` (dense Cholesky: O(d^3)); with
    ``fit_intercept`` the intercept is the last coefficient, under the same
    prior (as ``SGMCMCRidge``'s)."""
    from scipy.linalg import cho_factor, cho_solve
    if fit_intercept:
        X = sp.hstack([X, np.ones((X.shape[0], 1))], format="csr")
    A = np.asarray((X.T @ X).todense()) / noise_var + alpha * np.eye(X.shape[1])
    c = cho_factor(A)
    mean = cho_solve(c, np.asarray(X.T @ y).ravel() / noise_var)
    cov = cho_solve(c, np.eye(X.shape[1]))
    return mean, np.sqrt(np.diag(cov))
