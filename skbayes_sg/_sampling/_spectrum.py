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


#: The stochastic Lanczos quadrature of the evidence searches
#: (:class:`StochasticTrace`; the ridge's alpha and noise variance above
#: ``MAX_EVIDENCE_DIM`` rows and coefficients, the logistic regression's alpha
#: above ``MAX_DENSE_LAPLACE`` parameters): Rademacher probes and Lanczos
#: steps each, at first.  Measured on the ridge's evidence against the exact
#: spectrum on text-like rows (three probe seeds each, 16 probes): alpha
#: within 0.1 % with more rows than coefficients (20,000 x 2,500, 8,000 x
#: 2,900; 100,000 x 10^4 at 8 probes: 0.01 %), within 2.8 % with fewer
#: (4,000 x 6,000, 3,500 x 12,000), hence the jackknife's rule below; 64 and
#: 96 steps gave the same values (the probes' noise is what is left)
EVIDENCE_PROBES = 16
EVIDENCE_PROBE_STEPS = 64
#: more probes are drawn (up to EVIDENCE_MAX_PROBES) until the Monte Carlo
#: se of log alpha and of log sigma2 (a delete-a-group jackknife over
#: EVIDENCE_PROBE_GROUPS groups of probes) is under this.  On 4,000 x 6,000
#: text rows alpha 2.8 % off the exact maximum moved the exact posterior's
#: means by up to 0.08 sd, 0.9 % off by 0.03 sd
EVIDENCE_LOG_SE = 0.004
EVIDENCE_PROBE_GROUPS = 8
EVIDENCE_MAX_PROBES = 256
#: the probes' nodes are merged into this many bins of equal width in log
#: node for a search over them (:func:`binned_nodes`)
EVIDENCE_NODE_BINS = 1024


def gauss_quadrature(matvec, dim, start, steps):
    """``(nodes, masses)``: Gauss quadrature of ``start``'s spectral measure
    under the symmetric positive semi-definite operator ``matvec``
    (``start^T f(A) start ~ sum masses f(nodes)``) from ``steps`` Lanczos
    steps started there."""
    start_sq = float(start @ start)
    if start_sq == 0.0:
        return np.zeros(1), np.zeros(1)
    values, _, _, weights = Lanczos(matvec, dim, steps, start=start).pairs(steps, vectors=False)
    return np.clip(values, 0.0, None), start_sq * weights


def binned_nodes(nodes, masses, bins):
    """A quadrature's positive nodes merged into ``bins`` bins of equal
    width in ``log`` node, each at its mass-weighted mean: the same ``sum
    masses nodes``, and smooth functions such as ``log(1 + node / c)`` and
    ``1 / (c + node)`` vary little across a bin, so a search over ``c``
    costs the same whatever the number of probes.  Nodes at 0 are dropped
    (they add nothing to such sums)."""
    positive = nodes > 0
    nodes, masses = nodes[positive], masses[positive]
    if nodes.size <= bins:
        return nodes, masses
    logs = np.log(nodes)
    edges = np.linspace(logs.min(), logs.max(), bins + 1)
    index = np.clip(np.searchsorted(edges, logs, side="right") - 1, 0, bins - 1)
    mass = np.bincount(index, masses, bins)
    moment = np.bincount(index, masses * nodes, bins)
    kept = mass > 0
    return moment[kept] / mass[kept], mass[kept]


class StochasticTrace:
    """Stochastic Lanczos quadrature of ``tr f(A)`` (Ubaru, Chen and Saad
    2017), ``A`` a symmetric positive semi-definite operator known by its
    products: one Gauss quadrature of ``steps`` Lanczos steps per Rademacher
    probe, the probes drawn from a fixed seed as asked (two traces of
    different operators of one dimension use the same probes: their
    differences are free of most of the probes' noise).  Every product is
    counted in ``products``.

    Parameters
    ----------
    matvec : callable
        ``v -> A v`` for ``v`` of shape (dim,).
    dim : int
    steps : int
        Lanczos steps per probe.
    groups : int
        Probe ``k`` is in group ``k % groups`` (:meth:`sums`' ``without``,
        for a delete-a-group jackknife of what is computed from the sums).
    bins : int
        The nodes :meth:`sums` returns are merged into at most this many
        (:func:`binned_nodes`).
    """

    def __init__(self, matvec, dim, steps=EVIDENCE_PROBE_STEPS, groups=EVIDENCE_PROBE_GROUPS,
                 bins=EVIDENCE_NODE_BINS, seed=0):
        self._product = matvec
        self.dim, self.steps, self.groups, self.bins = dim, steps, groups, bins
        self.rng = np.random.default_rng(seed)
        self.per_probe = []               # (nodes, masses summing to 1) each
        self.products = 0

    def matvec(self, v):
        self.products += 1
        return self._product(v)

    @property
    def n_probes(self):
        return len(self.per_probe)

    def add_probes(self, count):
        for _ in range(max(count, 0)):
            probe = self.rng.choice([-1.0, 1.0], size=self.dim)
            nodes, masses = gauss_quadrature(self.matvec, self.dim, probe, self.steps)
            self.per_probe.append((nodes, masses / self.dim))

    def more_probes(self, log_se, target, max_probes=EVIDENCE_MAX_PROBES):
        """How many probes to add so that a Monte Carlo se of ``log_se`` now
        (it falls as one over the square root of the probes) reaches
        ``target``, at most ``max_probes`` in all; 0: done."""
        if log_se <= target:
            return 0
        want = min(max_probes, int(np.ceil(self.n_probes * (log_se / target) ** 2)))
        return max(want - self.n_probes, 0)

    def sums(self, without=None):
        """``(nodes, masses)`` with ``tr f(A) ~ sum masses f(nodes)``, from
        every probe, or without group ``without``."""
        chosen = [probe for k, probe in enumerate(self.per_probe)
                  if without is None or k % self.groups != without]
        nodes = np.concatenate([nodes for nodes, _ in chosen])
        masses = np.concatenate([masses for _, masses in chosen])
        return binned_nodes(nodes, masses * (self.dim / len(chosen)), self.bins)


def jackknife_se(estimates):
    """The delete-a-group jackknife standard error of each column of
    ``estimates`` (one row per group left out): ``sqrt((g - 1) mean((e -
    mean e)^2))``."""
    estimates = np.asarray(estimates, dtype=np.float64)
    g = len(estimates)
    return np.sqrt((g - 1) * np.mean((estimates - estimates.mean(axis=0)) ** 2, axis=0))
