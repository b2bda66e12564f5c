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
    reorthogonalisation (:class:`Lanczos`, run once).

    Returns
    -------
    values, vectors, residuals, weights : see :meth:`Lanczos.pairs`
    """
    return Lanczos(matvec, dim, n_steps, seed, max_bytes).pairs(n_steps)


class Lanczos:
    """Lanczos with full reorthogonalisation from a random start (the basis
    is kept: the Ritz vectors are wanted), taken as far as it is asked.

    ``pairs(k)`` are the Ritz pairs of the first ``k`` steps; a later call
    with more steps continues the same sequence, so the set-up's dense
    metric check (128 steps) and its low-rank metric (384) share their first
    128 data passes, and each gives the bits a run of its own length would.

    Parameters
    ----------
    matvec : callable
        ``v -> A v`` for ``v`` of shape (dim,); one data pass a product.
    dim : int
    max_steps : int
        The most steps any call will ask (the basis is allocated for them,
        ``min(max_steps, dim, max_bytes / (8 dim))``).
    seed : int
        Of the random start (a standard normal vector).
    max_bytes : int
    start : ndarray of shape (dim,) or None
        A given start in place of the random one (nonzero): the first
        components of the tridiagonal's eigenvectors are then the Gauss
        quadrature weights of ``start``'s spectral measure, so ``||start||^2
        sum_j weights_j f(values_j)`` approximates ``start^T f(A) start``.
    """

    def __init__(self, matvec, dim, max_steps, seed=0, max_bytes=LANCZOS_BYTES, start=None):
        self.matvec = matvec
        self.max_steps = int(max(1, min(max_steps, dim, max_bytes // (8 * max(dim, 1)))))
        self.basis = np.empty((self.max_steps + 1, dim))
        v = (np.random.default_rng(seed).standard_normal(dim) if start is None
             else np.asarray(start, dtype=np.float64))
        self.basis[0] = v / np.linalg.norm(v)
        self.alphas, self.betas = [], []
        self.exact = False            # an invariant subspace was reached

    def _extend(self, n_steps):
        V = self.basis
        while len(self.alphas) < n_steps and not self.exact:
            j = len(self.alphas)
            w = np.asarray(self.matvec(V[j]), dtype=np.float64)
            a = float(w @ V[j])
            # twice is enough (Kahan): the basis stays orthonormal to rounding
            for _ in range(2):
                w -= V[:j + 1].T @ (V[:j + 1] @ w)
            b = float(np.linalg.norm(w))
            self.alphas.append(a)
            if b <= 1e-10 * max(abs(a), 1.0):   # an invariant subspace: exact pairs
                self.betas.append(0.0)
                self.exact = True
                break
            self.betas.append(b)
            V[j + 1] = w / b

    def pairs(self, n_steps, vectors=True):
        """The Ritz pairs of the first ``min(n_steps, max_steps)`` steps
        (fewer at an invariant subspace), taking the steps not yet taken;
        without ``vectors`` (a quadrature's nodes and weights alone) the
        Ritz vectors, ``k^2 dim`` flops, are not formed (None).

        Returns
        -------
        values : ndarray of shape (k,)
            Ritz values, ascending.
        vectors : ndarray of shape (k, dim) or None
            Their Ritz vectors (orthonormal rows).
        residuals : ndarray of shape (k,)
            ``||A y - value y||`` of each (``beta_k |last component|``): a
            pair whose residual is small against its distance to the rest of
            the spectrum is an eigenpair to that accuracy.
        weights : ndarray of shape (k,)
            The Gauss quadrature weights of the Ritz values (squared first
            components of the tridiagonal's eigenvectors, summing to 1): the
            random start's spectral measure, so ``dim * weights[j]``
            estimates how many eigenvalues lie near ``values[j]``
            (stochastic Lanczos quadrature with one probe).
        """
        n_steps = int(max(1, min(n_steps, self.max_steps)))
        self._extend(n_steps)
        k = min(n_steps, len(self.alphas))
        alphas, betas = self.alphas[:k], self.betas[:k]
        off = np.array(betas[:k - 1])
        T = np.diag(alphas) + np.diag(off, 1) + np.diag(off, -1)
        values, S = np.linalg.eigh(T)
        ritz = S.T @ self.basis[:k] if vectors else None
        residuals = np.abs(betas[k - 1] * S[-1])
        return values, ritz, residuals, S[0] ** 2


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
