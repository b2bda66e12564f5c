"""The extreme eigenvalues of a symmetric operator known only by its
products (the whitened posterior Hessian: one data pass a product).

A diagonal metric whitens each coordinate, not the correlations between
them: the whitened precision ``A = D H D / T`` keeps eigenvalues on both
sides of 1.  Its largest sets how small a leapfrog step must be (the
stiffest direction), its smallest how long a trajectory must run (the
slowest direction turns by ``sqrt(lambda_min) t``).  Lanczos finds both
ends from one Krylov sequence, at O(nnz) a product and no d x d matrix.
The largest alone (the step checks and the noise model's ``v1``) stops as
soon as it has converged (:func:`largest_eigenvalue`).
"""
import numpy as np
from scipy.linalg import eigvalsh_tridiagonal

#: Lanczos steps: the extreme Ritz values of a spectrum like a text
#: posterior's (eigenvalues 0.1 to 15 at 10^4 parameters) are then within a
#: few per cent of the extreme eigenvalues (Ritz values lie inside the
#: spectrum: lambda_min is over-, lambda_max under-estimated)
LANCZOS_STEPS = 40


def extreme_eigenvalues(matvec, dim, n_steps=LANCZOS_STEPS, seed=0):
    """``(lambda_min, lambda_max)`` of the symmetric operator ``matvec``
    (positive definite) by ``min(n_steps, dim)`` Lanczos steps from a random
    start, without reorthogonalisation (lost orthogonality repeats Ritz
    values of converged extremes; it does not move them).

    Parameters
    ----------
    matvec : callable
        ``v -> A v`` for ``v`` of shape (dim,).
    dim : int
    n_steps : int
    seed : int

    Returns
    -------
    lam_min, lam_max : float
    """
    v = np.random.default_rng(seed).standard_normal(dim)
    v /= np.linalg.norm(v)
    v_prev = np.zeros(dim)
    alphas, betas = [], []
    beta = 0.0
    for _ in range(max(1, min(int(n_steps), dim))):
        w = np.asarray(matvec(v), dtype=np.float64) - beta * v_prev
        a = float(w @ v)
        w -= a * v
        alphas.append(a)
        beta = float(np.linalg.norm(w))
        if beta <= 1e-12 * max(abs(a), 1.0):   # an invariant subspace: exact
            break
        betas.append(beta)
        v_prev, v = v, w / beta
    k = len(alphas)
    off = np.array(betas[:k - 1])
    # the k x k tridiagonal (k <= LANCZOS_STEPS): a dense eigvalsh is instant
    T = np.diag(alphas) + np.diag(off, 1) + np.diag(off, -1)
    ritz = np.linalg.eigvalsh(T)
    return float(ritz[0]), float(ritz[-1])


#: Lanczos steps of the low-rank metric's set-up (one data pass each).  At
#: 10^4 text features 128 steps (and a cap of 65 directions) gave a metric
#: of 59-61 directions; 384 give the cost rule (``_setup._cheapest_lowrank``)
#: the 107-122 converged pairs it takes there, for 256 passes more where the
#: fits then saved 17,600 (ridge) and 43,000 (logistic) passes of sampling
LOWRANK_STEPS = 384
#: memory of the Lanczos basis (steps x dim float64): fewer steps beyond it
LANCZOS_BYTES = 256 << 20


def extreme_eigenpairs(matvec, dim, n_steps=LOWRANK_STEPS, seed=0, max_bytes=LANCZOS_BYTES):
    """Ritz pairs of the symmetric operator ``matvec`` from
    ``min(n_steps, dim, max_bytes / (8 dim))`` Lanczos steps with full
    reorthogonalisation (the basis is kept: the vectors are wanted).

    Returns
    -------
    values : ndarray of shape (k,)
        Ritz values, ascending.
    vectors : ndarray of shape (k, dim)
        Their Ritz vectors (orthonormal rows).
    residuals : ndarray of shape (k,)
        ``||A y - value y||`` of each (``beta_k |last component|``): a pair
        whose residual is small against its distance to the rest of the
        spectrum is an eigenpair to that accuracy.
    weights : ndarray of shape (k,)
        The Gauss quadrature weights of the Ritz values (squared first
        components of the tridiagonal's eigenvectors, summing to 1): the
        random start's spectral measure, so ``dim * weights[j]`` estimates
        how many eigenvalues lie near ``values[j]`` (stochastic Lanczos
        quadrature with one probe).
    """
    m = int(max(1, min(n_steps, dim, max_bytes // (8 * max(dim, 1)))))
    V = np.empty((m + 1, dim))
    v = np.random.default_rng(seed).standard_normal(dim)
    V[0] = v / np.linalg.norm(v)
    alphas, betas = [], []
    k = 0
    for j in range(m):
        w = np.asarray(matvec(V[j]), dtype=np.float64)
        a = float(w @ V[j])
        # twice is enough (Kahan): the basis stays orthonormal to rounding
        for _ in range(2):
            w -= V[:j + 1].T @ (V[:j + 1] @ w)
        b = float(np.linalg.norm(w))
        alphas.append(a)
        k = j + 1
        if b <= 1e-10 * max(abs(a), 1.0):   # an invariant subspace: exact pairs
            betas.append(0.0)
            break
        betas.append(b)
        V[j + 1] = w / b
    off = np.array(betas[:k - 1])
    T = np.diag(alphas) + np.diag(off, 1) + np.diag(off, -1)
    values, S = np.linalg.eigh(T)
    vectors = S.T @ V[:k]
    residuals = np.abs(betas[k - 1] * S[-1])
    return values, vectors, residuals, S[0] ** 2


#: the largest eigenvalue's Lanczos takes every step up to this many
#: dimensions (exact there)
LANCZOS_FULL_DIM = 32


def largest_eigenvalue(matvec, dim, tol=1e-3, max_iter=60, seed=0):
    """Largest eigenvalue of a symmetric positive semi-definite operator by
    Lanczos from a random start (no re-orthogonalisation: its loss only
    repeats converged Ritz values, the largest converges first).

    Stops when the largest Ritz value moved by at most ``tol`` (relative) in
    each of the last two steps: on a spectrum whose top is a cluster (random
    sparse rows) that is 10-20 products where a power iteration takes
    hundreds.  One small step is not enough: a start nearly orthogonal to
    the top eigenvector stalls at the next eigenvalue for a step or two
    before the top's component grows.  Up to ``LANCZOS_FULL_DIM``
    dimensions every step is taken (the exact eigenvalue).

    Returns
    -------
    lam : float
        The largest Ritz value (a lower estimate, within about ``tol``).
    n_products : int
    """
    if dim == 0:
        return 0.0, 0
    q = np.random.default_rng(seed).standard_normal(dim)
    q /= np.linalg.norm(q)
    q_prev = np.zeros(dim)
    alphas, betas, ritz = [], [], []
    beta = 0.0
    min_iter = dim if dim <= LANCZOS_FULL_DIM else 3
    for it in range(1, max_iter + 1):
        w = np.asarray(matvec(q), dtype=np.float64)
        a = float(q @ w)
        w -= a * q + beta * q_prev
        alphas.append(a)
        ritz.append(float(eigvalsh_tridiagonal(np.array(alphas), np.array(betas), select="i",
                                               select_range=(it - 1, it - 1))[0])
                    if it > 1 else a)
        beta = float(np.linalg.norm(w))
        if beta <= 1e-12 * max(abs(ritz[-1]), 1e-300):   # an invariant subspace: exact
            break
        if it >= min_iter and it > 2 and all(
                abs(ritz[-1] - ritz[-j]) <= tol * abs(ritz[-1]) for j in (2, 3)):
            break
        betas.append(beta)
        q_prev, q = q, w / beta
    return ritz[-1], it
