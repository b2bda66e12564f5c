"""a9a with every pairwise interaction of its binary features (issue 25).

The 123 one-hot features of LIBSVM a9a (adult census, 32,561 rows, 14 ones a
row) and their products ``x_j x_k`` (j < k) that are non-zero in at least
``min_count`` rows: one-hot interactions, the design a user builds with
``PolynomialFeatures(interaction_only=True)`` and feeds to a logistic
regression.  The rows stay sparse (14 + 91 = 105 non-zeros each); most
interactions are rare, so the posterior is far from its prior in a few
thousand directions and near it in the rest, and the main effects are
strongly correlated with their interactions.

:func:`pairwise` returns (X, y) with X CSR float64 (no intercept column: the
estimators fit one).  Data from ``../shared/data/a9a.gz``
(``_posteriors.data_dir``).
"""
import numpy as np
import scipy.sparse as sp

from _posteriors import _load_svm


def pairwise(min_count=1):
    """(X, y): a9a's 123 features and their non-empty pairwise products."""
    X, y = _load_svm("a9a.gz", 123)
    X = (X > 0).astype(np.float64).tocsr()
    X.sort_indices()
    n = X.shape[0]
    rows, cols = [], []
    indptr, indices = X.indptr, X.indices
    for i in range(n):
        f = indices[indptr[i]:indptr[i + 1]]
        a, b = np.triu_indices(len(f), k=1)
        rows.append(np.full(len(a), i))
        cols.append(f[a] * 123 + f[b])
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    used, inverse, counts = np.unique(cols, return_inverse=True, return_counts=True)
    keep = counts >= min_count
    remap = np.full(len(used), -1)
    remap[keep] = np.arange(keep.sum())
    new = remap[inverse]
    ok = new >= 0
    P = sp.csr_matrix((np.ones(ok.sum()), (rows[ok], new[ok])), shape=(n, int(keep.sum())))
    Xp = sp.hstack([X, P], format="csr")
    Xp.sort_indices()
    return Xp, y.astype(int)


def reference(X, y, alpha=1.0, n_iter=1500, n_warmup=300, n_chains=4, n_leapfrog=10,
              seed=0, path=None):
    """An exact reference posterior: Metropolis-adjusted HMC in the dense
    Laplace metric, written for this benchmark (numpy, independent of the
    library's engine), cached in ``path``.

    The mode by Newton's method on the sparse rows, the Hessian there made
    dense (``d + 1`` about 5,400: 240 MB), ``theta = mode + L w`` with
    ``L L^T`` its inverse, ``n_chains`` chains advanced together (one sparse
    product for all of them), ``n_leapfrog`` leapfrog steps of a size tuned
    in warm-up to an acceptance near 0.8, jittered by +-20%.  Returns the
    posterior means and sds (coefficients, then the intercept), their Monte
    Carlo standard errors from batch means, and the acceptance rate.
    """
    import os
    from scipy.linalg import cho_factor, cho_solve, solve_triangular
    from scipy.special import expit, log_expit
    if path is not None and os.path.exists(path):
        with np.load(path) as f:
            return {k: f[k] for k in f.files}
    n, d = X.shape
    Xe = sp.hstack([X, np.ones((n, 1))], format="csr")
    s = 2.0 * y - 1.0

    def potential(T):                       # T: (d + 1, m)
        Z = Xe @ T
        return 0.5 * alpha * np.einsum("ij,ij->j", T, T) - log_expit(s[:, None] * Z).sum(0)

    def gradient(T):
        Z = Xe @ T
        return alpha * T - Xe.T @ (s[:, None] * expit(-s[:, None] * Z))

    theta = np.zeros((d + 1, 1))
    for _ in range(50):                     # Newton on the sparse rows
        p = expit(Xe @ theta[:, 0])
        H = (Xe.T @ sp.diags(p * (1 - p)) @ Xe).toarray() + alpha * np.eye(d + 1)
        g = gradient(theta)[:, 0]
        step = cho_solve(cho_factor(H), g)
        theta[:, 0] -= step
        if np.abs(step).max() < 1e-10:
            break
    mode = theta[:, 0]
    p = expit(Xe @ mode)
    H = (Xe.T @ sp.diags(p * (1 - p)) @ Xe).toarray() + alpha * np.eye(d + 1)
    R = np.linalg.cholesky(H)               # H = R R^T, theta = mode + R^-T w
    del H

    def to_theta(W):
        return mode[:, None] + solve_triangular(R, W, lower=True, trans="T")

    def whitened_grad(W):
        return solve_triangular(R, gradient(to_theta(W)), lower=True)

    rng = np.random.default_rng(seed)
    W = rng.standard_normal((d + 1, n_chains))   # starts from the Laplace law
    U = potential(to_theta(W))
    G = whitened_grad(W)
    eps, accepted, draws = 0.15, [], []
    for it in range(n_warmup + n_iter):
        P0 = rng.standard_normal(W.shape)
        h = eps * rng.uniform(0.8, 1.2)
        Wn, Gn, P = W.copy(), G.copy(), P0 - 0.5 * h * G
        for k in range(n_leapfrog):
            Wn += h * P
            Gn = whitened_grad(Wn)
            P -= (h if k < n_leapfrog - 1 else 0.5 * h) * Gn
        Un = potential(to_theta(Wn))
        log_ratio = U - Un + 0.5 * (np.einsum("ij,ij->j", P0, P0) - np.einsum("ij,ij->j", P, P))
        accept = np.log(rng.random(n_chains)) < log_ratio
        W[:, accept], G[:, accept], U[accept] = Wn[:, accept], Gn[:, accept], Un[accept]
        rate = np.mean(np.minimum(1.0, np.exp(np.minimum(log_ratio, 0.0))))
        if it < n_warmup:
            eps *= np.exp(0.5 * (rate - 0.8))
        else:
            accepted.append(rate)
            draws.append(to_theta(W).T.copy())
    D = np.array(draws)                     # (iterations, chains, d + 1)
    flat = D.reshape(-1, d + 1)
    mean, sd = flat.mean(0), flat.std(0)
    batches = D.reshape(20, -1, n_chains, d + 1).mean(axis=1)   # 20 batches x chains
    se_mean = batches.reshape(-1, d + 1).std(0, ddof=1) / np.sqrt(20 * n_chains)
    sq = (D - mean) ** 2
    sq_batches = sq.reshape(20, -1, n_chains, d + 1).mean(axis=1).reshape(-1, d + 1)
    se_var = sq_batches.std(0, ddof=1) / np.sqrt(20 * n_chains)
    out = {"mean": mean, "sd": sd, "se_mean": se_mean, "se_sd": se_var / (2.0 * sd),
           "accept": np.array(np.mean(accepted)), "step": np.array(eps)}
    if path is not None:
        np.savez(path, **out)
    return out
