"""Independent references for the statistical tests (numpy/scipy only).

Nothing here imports the library: these are the yardsticks the sampled
posteriors are compared against.

* Monte Carlo error: effective sample size (Geyer's initial monotone
  sequence on multi-chain draws, and batch means) and standard errors of
  means and of covariance entries.
* Bayesian ridge: the exact conjugate posterior, and the *exact* stationary
  mean and covariance of the discretised samplers (SGLD, preconditioned
  SGLD with a frozen preconditioner, SGHMC/Euler-Maruyama), with full or
  uniform-with-replacement minibatch gradients.  For a Gaussian model the
  gradient is affine in theta with i.i.d. random coefficients, so the chain
  is a random-coefficient affine recursion whose first two stationary
  moments solve linear equations.
* Logistic regression: the Laplace approximation (Newton), an
  independence Metropolis-Hastings sampler with a multivariate-t proposal
  built from it, and a Laplace-preconditioned random-walk Metropolis.
* Multinomial logistic regression: its Laplace approximation.
* Poisson regression (log link): the log posterior and its Laplace
  approximation (for the same independence / random-walk samplers).
* Negative binomial regression (log link, shape r): the same two pieces,
  written from the probability mass function.
"""
import numpy as np
from scipy.special import log_expit, logsumexp, softmax

# ---------------------------------------------------------------- MC error


def _as_chains(x):
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2:
        raise ValueError("expected (n_chains, n_draws) or (n_draws,)")
    return x


def _autocov(x):
    """Biased autocovariance of each row of x (FFT), lags 0..N-1."""
    m, N = x.shape
    xc = x - x.mean(axis=1, keepdims=True)
    nfft = 1 << int(np.ceil(np.log2(2 * N)))
    f = np.fft.rfft(xc, n=nfft, axis=1)
    acov = np.fft.irfft(f * np.conj(f), n=nfft, axis=1)[:, :N]
    return acov / N


def ess_autocorr(x):
    """Effective sample size of a scalar series (Geyer's initial monotone
    sequence, combining chains as in Stan/BDA3).

    Parameters
    ----------
    x : ndarray of shape (n_chains, n_draws) or (n_draws,)

    Returns
    -------
    ess : float
        Between 1 and ``n_chains * n_draws`` (capped; antithetic series are
        not rewarded).
    """
    x = _as_chains(x)
    m, N = x.shape
    if N < 4:
        return float(m * N)
    acov = _autocov(x)
    W = acov[:, 0].mean() * N / (N - 1)          # mean within-chain variance
    chain_means = x.mean(axis=1)
    B = N * chain_means.var(ddof=1) if m > 1 else 0.0
    var_plus = (N - 1) / N * W + B / N
    if var_plus <= 0:
        return float(m * N)
    rho = 1.0 - (W - acov.mean(axis=0)) / var_plus
    rho[0] = 1.0
    # sums of adjacent pairs, truncated at the first non-positive one, made
    # monotone non-increasing
    n_pairs = N // 2
    P = rho[: 2 * n_pairs].reshape(n_pairs, 2).sum(axis=1)
    k = 0
    while k < n_pairs and P[k] > 0:
        k += 1
    P = np.minimum.accumulate(P[:k]) if k else np.array([1.0])
    tau = -1.0 + 2.0 * P.sum()
    tau = max(tau, 1.0)
    return float(m * N / tau)


def ess_batch_means(x, n_batches=25):
    """Effective sample size by non-overlapping batch means.

    Each chain is cut into ``n_batches`` consecutive batches; the variance of
    the batch means, compared with the draws' variance, gives the
    integrated autocorrelation time.
    """
    x = _as_chains(x)
    m, N = x.shape
    size = N // n_batches
    if size < 2:
        return float(m * N)
    bm = x[:, : size * n_batches].reshape(m, n_batches, size).mean(axis=2)
    bm = bm - bm.mean(axis=1, keepdims=True)          # per-chain centring
    var_bm = (bm ** 2).sum() / (m * (n_batches - 1))
    var_x = x.var(axis=1, ddof=1).mean()
    if var_bm <= 0:
        return float(m * N)
    tau = size * var_bm / var_x
    return float(min(m * N, m * N / max(tau, 1e-12)))


def ess(x):
    """Conservative ESS: the smaller of the autocorrelation and batch-means
    estimates (each can over-estimate on short runs)."""
    return min(ess_autocorr(x), ess_batch_means(x))


def mean_and_se(draws):
    """Per-coordinate mean, sd and Monte Carlo standard error of the mean.

    Parameters
    ----------
    draws : ndarray of shape (n_chains, n_draws, p)

    Returns
    -------
    mean, sd, se, n_eff : ndarrays of shape (p,)
    """
    draws = np.asarray(draws, dtype=np.float64)
    p = draws.shape[-1]
    mean = draws.mean(axis=(0, 1))
    sd = draws.reshape(-1, p).std(axis=0, ddof=1)
    n_eff = np.array([ess(draws[:, :, j]) for j in range(p)])
    return mean, sd, sd / np.sqrt(n_eff), n_eff


def cov_and_se(draws, center=None):
    """Covariance matrix and the MC standard error of each entry.

    The entry ``C_jk`` is the mean of the product series
    ``(t_j - c_j)(t_k - c_k)``; its standard error is that series' sd over
    the square root of its own ESS.  ``center`` defaults to the sample
    mean (then the entries are the usual biased covariances; the O(1/N)
    difference is negligible against the MC error).

    Returns
    -------
    cov, se : ndarrays of shape (p, p)
    """
    draws = np.asarray(draws, dtype=np.float64)
    p = draws.shape[-1]
    c = draws.mean(axis=(0, 1)) if center is None else np.asarray(center)
    xc = draws - c
    cov = np.empty((p, p))
    se = np.empty((p, p))
    for j in range(p):
        for k in range(j, p):
            prod = xc[:, :, j] * xc[:, :, k]
            cov[j, k] = cov[k, j] = prod.mean()
            se[j, k] = se[k, j] = prod.std(ddof=1) / np.sqrt(ess(prod))
    return cov, se


def sd_and_se(draws):
    """Per-coordinate posterior sd and the MC standard error of the sd
    (delta method on the variance: se(sd) = se(var) / (2 sd))."""
    draws = np.asarray(draws, dtype=np.float64)
    p = draws.shape[-1]
    xc = draws - draws.mean(axis=(0, 1))
    sd = np.empty(p)
    se = np.empty(p)
    for j in range(p):
        sq = xc[:, :, j] ** 2
        var = sq.mean()
        sd[j] = np.sqrt(var)
        se[j] = sq.std(ddof=1) / np.sqrt(ess(sq)) / (2.0 * sd[j])
    return sd, se


# ------------------------------------------------------------ Bayesian ridge


def add_ones(X, fit_intercept=True):
    """Dense ``(X, 1)`` in float64."""
    X = X.toarray() if hasattr(X, "toarray") else np.asarray(X)
    X = np.asarray(X, dtype=np.float64)
    if fit_intercept:
        X = np.hstack([X, np.ones((X.shape[0], 1))])
    return X


def ridge_posterior(X, y, alpha, noise_var, fit_intercept=True):
    """Exact conjugate posterior of ``(w, b)``.

    ``P = alpha I + X_ext^T X_ext / sigma^2``,
    ``mean = P^-1 X_ext^T y / sigma^2``.

    Returns
    -------
    mean : ndarray of shape (p,)
    cov : ndarray of shape (p, p)
    precision : ndarray of shape (p, p)
    """
    Xe = add_ones(X, fit_intercept)
    P = alpha * np.eye(Xe.shape[1]) + Xe.T @ Xe / noise_var
    mean = np.linalg.solve(P, Xe.T @ np.asarray(y, dtype=np.float64) / noise_var)
    cov = np.linalg.inv(P)
    return mean, 0.5 * (cov + cov.T), P


def affine_recursion_moments(B0, u0, E, f, Q, batch_size=None):
    """Stationary mean and covariance of ``z' = B z + u + w``.

    ``B = B0 + S``, ``u = u0 + F`` with, for minibatch gradients,
    ``S = (n/b) sum_{t=1..b} E_{j_t}``, ``F = (n/b) sum_t f_{j_t}``,
    ``j_t`` i.i.d. uniform on ``0..n-1`` (with replacement), drawn afresh
    each step independently of ``z``; for the full gradient
    (``batch_size=None``) ``S = sum_j E_j``, ``F = sum_j f_j``.
    ``w ~ N(0, Q)`` independent.  Moments: ``m = E[B] m + E[u]``,
    ``M = E[B M B^T] + E[B m u^T] + E[u m^T B^T] + E[u u^T] + Q``, solved
    with Kronecker products (``vec`` row-major, so
    ``vec(B M B^T) = (B (x) B) vec(M)``).

    Parameters
    ----------
    B0 : (q, q); u0 : (q,); E : (n, q, q); f : (n, q); Q : (q, q)
    batch_size : int or None

    Returns
    -------
    mean : (q,), cov : (q, q)
    """
    n, q = f.shape
    if batch_size is None:
        B = B0 + E.sum(axis=0)
        u = u0 + f.sum(axis=0)
        m = np.linalg.solve(np.eye(q) - B, u)
        # deterministic B: C = B C B^T + Q
        A = np.eye(q * q) - np.kron(B, B)
        C = np.linalg.solve(A, Q.ravel()).reshape(q, q)
        return m, 0.5 * (C + C.T)
    b = int(batch_size)
    s = n / b
    Es = s * E                      # per-draw contributions
    fs = s * f
    Ebar = Es.mean(axis=0)
    fbar = fs.mean(axis=0)
    ES = b * Ebar
    EF = b * fbar
    EB = B0 + ES
    Eu = u0 + EF
    m = np.linalg.solve(np.eye(q) - EB, Eu)
    # E[S (x) S] = b mean_j(E_j (x) E_j) + b(b-1) Ebar (x) Ebar
    kron_mean = np.einsum("nij,nkl->ikjl", Es, Es).reshape(q * q, q * q) / n
    ESS = b * kron_mean + b * (b - 1) * np.kron(Ebar, Ebar)
    EBB = np.kron(B0, B0) + np.kron(B0, ES) + np.kron(ES, B0) + ESS
    # E[S m F^T] = b mean_j(E_j m f_j^T) + b(b-1) Ebar m fbar^T
    Em = Es @ m                                         # (n, q)
    ESmF = b * np.einsum("ni,nj->ij", Em, fs) / n + b * (b - 1) * np.outer(Ebar @ m, fbar)
    EBmu = (np.outer(B0 @ m, u0) + np.outer(B0 @ m, EF) + np.outer(ES @ m, u0) + ESmF)
    EFF = b * np.einsum("ni,nj->ij", fs, fs) / n + b * (b - 1) * np.outer(fbar, fbar)
    Euu = np.outer(u0, u0) + np.outer(u0, EF) + np.outer(EF, u0) + EFF
    rhs = EBmu + EBmu.T + Euu + Q
    M = np.linalg.solve(np.eye(q * q) - EBB, rhs.ravel()).reshape(q, q)
    C = M - np.outer(m, m)
    return m, 0.5 * (C + C.T)


def _ridge_pieces(X, y, noise_var, fit_intercept):
    Xe = add_ones(X, fit_intercept)
    y = np.asarray(y, dtype=np.float64)
    a = np.einsum("ni,nj->nij", Xe, Xe) / noise_var      # per-datum Hessians
    c = Xe * (y / noise_var)[:, None]                    # grad U_i = a_i theta - c_i
    return Xe.shape[1], a, c


def sgld_ridge_stationary(X, y, alpha, noise_var, step_size, temperature=1.0,
                          batch_size=None, fit_intercept=True, precond=None):
    """Exact stationary mean/cov of (preconditioned) SGLD on Bayesian ridge.

    ``theta' = theta - h G g(theta) + sqrt(2 h T G) xi`` with
    ``g = alpha theta + sum-estimate of grad U_i`` and a fixed diagonal
    preconditioner ``G`` (``precond``, default identity = plain SGLD).  With
    the full gradient and G = I the answer is ``T (P - h P^2 / 2)^-1``.
    """
    p, a, c = _ridge_pieces(X, y, noise_var, fit_intercept)
    h = step_size
    G = np.ones(p) if precond is None else np.asarray(precond, dtype=np.float64)
    Gm = np.diag(G)
    B0 = np.eye(p) - h * alpha * Gm
    E = -h * np.einsum("ij,njk->nik", Gm, a)
    f = h * c * G
    Q = 2.0 * h * temperature * Gm
    return affine_recursion_moments(B0, np.zeros(p), E, f, Q, batch_size)


def sghmc_ridge_stationary(X, y, alpha, noise_var, step_size, friction, temperature=1.0,
                           batch_size=None, fit_intercept=True):
    """Exact stationary mean/cov of theta under SGHMC (Euler-Maruyama):
    ``theta' = theta + h r``, ``r' = r - h (g(theta) + gamma r) + sqrt(2 gamma T h) xi``.
    """
    p, a, c = _ridge_pieces(X, y, noise_var, fit_intercept)
    h, g = step_size, friction
    I = np.eye(p)
    B0 = np.block([[I, h * I], [-h * alpha * I, (1.0 - h * g) * I]])
    n = a.shape[0]
    E = np.zeros((n, 2 * p, 2 * p))
    E[:, p:, :p] = -h * a
    f = np.zeros((n, 2 * p))
    f[:, p:] = h * c
    Q = np.zeros((2 * p, 2 * p))
    Q[p:, p:] = 2.0 * g * temperature * h * I
    m, C = affine_recursion_moments(B0, np.zeros(2 * p), E, f, Q, batch_size)
    return m[:p], C[:p, :p]


def uld_ridge_stationary(X, y, alpha, noise_var, coefficients, batch_size=None,
                         fit_intercept=True):
    """Exact stationary mean/cov of theta under SG-ULD (the exact OU step
    with the gradient frozen, kappa = 0):
    ``x' = e_xx x + e_xv v - f_x g + xi_x``, ``v' = e_vx x + e_vv v - f_v g + xi_v``
    with ``(e_xx, e_xv, e_vx, e_vv, f_x, f_v, l_vv, l_xv, l_xx)`` the step's
    coefficients (noise ``xi_v = l_vv e1``, ``xi_x = l_xv e1 + l_xx e2``).
    """
    e_xx, e_xv, e_vx, e_vv, f_x, f_v, l_vv, l_xv, l_xx = coefficients
    p, a, c = _ridge_pieces(X, y, noise_var, fit_intercept)
    I = np.eye(p)
    B0 = np.block([[(e_xx - f_x * alpha) * I, e_xv * I], [(e_vx - f_v * alpha) * I, e_vv * I]])
    n = a.shape[0]
    E = np.zeros((n, 2 * p, 2 * p))
    E[:, :p, :p] = -f_x * a
    E[:, p:, :p] = -f_v * a
    f = np.concatenate([f_x * c, f_v * c], axis=1)
    Q = np.block([[(l_xv ** 2 + l_xx ** 2) * I, l_xv * l_vv * I], [l_xv * l_vv * I, l_vv ** 2 * I]])
    m, C = affine_recursion_moments(B0, np.zeros(2 * p), E, f, Q, batch_size)
    return m[:p], C[:p, :p]


def baoab_ridge_stationary(X, y, alpha, noise_var, step_size, friction, temperature=1.0,
                           batch_size=None, fit_intercept=True):
    """Exact stationary mean/cov of theta under SG-BAOAB (kappa = 0), one
    minibatch gradient a step shared by its closing and the next opening
    half-kick.  From the state after O a step is A, the full kick
    ``p -= h g_S(z)``, A, O: an affine recursion with a fresh minibatch ``S``;
    the kept state (after the closing kick) has the z of the first A.
    """
    p, a, c = _ridge_pieces(X, y, noise_var, fit_intercept)
    h, g, T = step_size, friction, temperature
    I, Z = np.eye(p), np.zeros((p, p))
    A = np.block([[I, 0.5 * h * I], [Z, I]])
    O = np.block([[I, Z], [Z, np.exp(-g * h) * I]])
    kick0 = np.block([[I, Z], [-h * alpha * I, I]])
    OA = O @ A
    B0 = OA @ kick0 @ A
    n = a.shape[0]
    E = np.zeros((n, 2 * p, 2 * p))
    E[:, p:, :p] = -h * a
    E = np.einsum("ij,njk,kl->nil", OA, E, A)
    f = np.concatenate([np.zeros_like(c), h * c], axis=1) @ OA.T
    Q = np.zeros((2 * p, 2 * p))
    Q[p:, p:] = T * (1.0 - np.exp(-2.0 * g * h)) * I
    m, C = affine_recursion_moments(B0, np.zeros(2 * p), E, f, Q, batch_size)
    m, C = A @ m, A @ C @ A.T
    return m[:p], C[:p, :p]


def simulate_affine_sgld(X, y, alpha, noise_var, step_size, n_steps, n_chains, batch_size,
                         theta0, seed, temperature=1.0, fit_intercept=True):
    """Vectorised numpy SGLD on ridge (a check of the moment formulas)."""
    Xe = add_ones(X, fit_intercept)
    y = np.asarray(y, dtype=np.float64)
    n, p = Xe.shape
    rng = np.random.default_rng(seed)
    th = np.tile(theta0, (n_chains, 1))
    out = np.empty((n_chains, n_steps, p))
    s = np.sqrt(2 * step_size * temperature)
    for t in range(n_steps):
        idx = rng.integers(n, size=(n_chains, batch_size))
        Xb = Xe[idx]                                     # (c, b, p)
        r = (np.einsum("cbp,cp->cb", Xb, th) - y[idx]) / noise_var
        g = alpha * th + (n / batch_size) * np.einsum("cb,cbp->cp", r, Xb)
        th = th - step_size * g + s * rng.standard_normal((n_chains, p))
        out[:, t] = th
    return out


# ------------------------------------------------------- logistic regression


def logistic_log_post(Theta, Xe, y, alpha):
    """Unnormalised log posterior for a batch of parameter vectors.

    Parameters
    ----------
    Theta : ndarray of shape (m, p)
    Xe : ndarray of shape (n, p) (intercept column included)
    y : ndarray of shape (n,) in {0, 1}
    """
    Z = Xe @ Theta.T                                       # (n, m)
    # log p(y | z) = y z - log(1 + e^z) = y z + log_expit(-z)
    ll = y @ Z + log_expit(-Z).sum(axis=0)
    return ll - 0.5 * alpha * np.einsum("mp,mp->m", Theta, Theta)


def logistic_laplace(Xe, y, alpha, n_iter=100, tol=1e-12):
    """Posterior mode (Newton) and inverse Hessian of the logistic posterior."""
    p = Xe.shape[1]
    theta = np.zeros(p)
    for _ in range(n_iter):
        s = 1.0 / (1.0 + np.exp(-(Xe @ theta)))
        g = Xe.T @ (s - y) + alpha * theta
        H = (Xe * (s * (1 - s))[:, None]).T @ Xe + alpha * np.eye(p)
        step = np.linalg.solve(H, g)
        theta = theta - step
        if np.max(np.abs(step)) < tol:
            break
    s = 1.0 / (1.0 + np.exp(-(Xe @ theta)))
    H = (Xe * (s * (1 - s))[:, None]).T @ Xe + alpha * np.eye(p)
    cov = np.linalg.inv(H)
    return theta, 0.5 * (cov + cov.T)


def _mvt_logpdf_unnorm(Z, df):
    """log density (up to a constant) of standardised multivariate t at rows
    of Z (already whitened)."""
    p = Z.shape[1]
    return -0.5 * (df + p) * np.log1p(np.einsum("mp,mp->m", Z, Z) / df)


def independence_mh(log_post, mode, cov, n_draws, n_chains, seed, df=7.0, scale=1.2):
    """Independence Metropolis-Hastings with a multivariate-t proposal.

    Proposal ``mode + scale * chol(cov) t_df`` (heavier tails than the
    Gaussian target approximation, so the importance ratio is bounded in
    the tails).  All proposals and their log weights are computed in one
    vectorised pass; the accept/reject sweep is sequential per chain.

    Returns
    -------
    draws : ndarray of shape (n_chains, n_draws, p)
    accept_rate : float
    """
    rng = np.random.default_rng(seed)
    p = mode.size
    Lc = np.linalg.cholesky(cov) * scale
    total = n_chains * (n_draws + 1)
    Zn = rng.standard_normal((total, p))
    chi = rng.chisquare(df, size=total)
    Z = Zn / np.sqrt(chi / df)[:, None]
    props = mode + Z @ Lc.T
    logw = np.empty(total)
    for start in range(0, total, 20000):
        sl = slice(start, start + 20000)
        logw[sl] = log_post(props[sl]) - _mvt_logpdf_unnorm(Z[sl], df)
    props = props.reshape(n_chains, n_draws + 1, p)
    logw = logw.reshape(n_chains, n_draws + 1)
    logu = np.log(rng.random((n_chains, n_draws)))
    draws = np.empty((n_chains, n_draws, p))
    n_acc = 0
    for c in range(n_chains):
        cur = 0
        lw = logw[c]
        # index of the current state for each step (vectorising the sweep is
        # awkward; a Python loop over ~1e5 scalars is fast enough)
        idx = np.empty(n_draws, dtype=np.intp)
        lu = logu[c]
        for t in range(n_draws):
            prop = t + 1
            if lu[t] < lw[prop] - lw[cur]:
                cur = prop
                n_acc += 1
            idx[t] = cur
        draws[c] = props[c, idx]
    return draws, n_acc / (n_chains * n_draws)


def rwm_preconditioned(log_post, start, cov, n_steps, n_chains, seed, scale=None):
    """Random-walk Metropolis with proposal ``N(0, scale^2 cov)``, vectorised
    over chains; ``scale`` defaults to the optimal 2.38 / sqrt(p).

    Returns
    -------
    draws : ndarray of shape (n_chains, n_steps, p)
    accept_rate : float
    """
    rng = np.random.default_rng(seed)
    p = start.size
    scale = 2.38 / np.sqrt(p) if scale is None else scale
    Lc = np.linalg.cholesky(cov) * scale
    th = np.tile(start, (n_chains, 1)) + rng.standard_normal((n_chains, p)) @ Lc.T
    lp = log_post(th)
    draws = np.empty((n_chains, n_steps, p))
    n_acc = 0
    for t in range(n_steps):
        prop = th + rng.standard_normal((n_chains, p)) @ Lc.T
        lpp = log_post(prop)
        acc = np.log(rng.random(n_chains)) < lpp - lp
        th[acc] = prop[acc]
        lp[acc] = lpp[acc]
        n_acc += acc.sum()
        draws[:, t] = th
    return draws, n_acc / (n_chains * n_steps)


# ------------------------------------------------------------------ Poisson


def poisson_log_post(Theta, Xe, y, alpha):
    """Unnormalised log posterior of Poisson regression (log link) for a
    batch of parameter vectors: ``sum_i (y_i z_i - e^{z_i}) - alpha/2 |theta|^2``.

    Parameters
    ----------
    Theta : ndarray of shape (m, p)
    Xe : ndarray of shape (n, p) (intercept column included)
    y : ndarray of shape (n,), counts
    """
    Z = Xe @ Theta.T                                       # (n, m)
    ll = y @ Z - np.exp(Z).sum(axis=0)
    return ll - 0.5 * alpha * np.einsum("mp,mp->m", Theta, Theta)


def poisson_laplace(Xe, y, alpha, n_iter=100, tol=1e-12):
    """Posterior mode (damped Newton) and inverse Hessian of the Poisson posterior."""
    p = Xe.shape[1]
    theta = np.zeros(p)

    def objective(t):
        return float(poisson_log_post(t[None], Xe, y, alpha)[0])

    for _ in range(n_iter):
        mu = np.exp(Xe @ theta)
        g = Xe.T @ (mu - y) + alpha * theta
        H = (Xe * mu[:, None]).T @ Xe + alpha * np.eye(p)
        step = np.linalg.solve(H, g)
        t = 1.0
        while objective(theta - t * step) < objective(theta) - 1e-12 and t > 1e-8:
            t *= 0.5
        theta = theta - t * step
        if np.max(np.abs(t * step)) < tol:
            break
    mu = np.exp(Xe @ theta)
    cov = np.linalg.inv((Xe * mu[:, None]).T @ Xe + alpha * np.eye(p))
    return theta, 0.5 * (cov + cov.T)


# -------------------------------------------------------- negative binomial


def negative_binomial_log_post(Theta, Xe, y, alpha, shape):
    """Unnormalised log posterior of negative binomial regression (log link)
    for a batch of parameter vectors, from the mass function
    ``Gamma(y + r) / (Gamma(r) y!) (r / (r + mu))^r (mu / (r + mu))^y``
    with ``mu = exp(z)`` (its terms free of theta dropped):
    ``sum_i [y_i z_i - (y_i + r) log(r + e^{z_i})] - alpha/2 |theta|^2``.
    """
    Z = Xe @ Theta.T                                       # (n, m)
    ll = y @ Z - ((y + shape)[:, None] * np.logaddexp(np.log(shape), Z)).sum(axis=0)
    return ll - 0.5 * alpha * np.einsum("mp,mp->m", Theta, Theta)


def negative_binomial_laplace(Xe, y, alpha, shape, n_iter=100, tol=1e-12):
    """Posterior mode (damped Newton) and inverse Hessian of the negative
    binomial posterior at a fixed shape."""
    p = Xe.shape[1]
    theta = np.zeros(p)

    def objective(t):
        return float(negative_binomial_log_post(t[None], Xe, y, alpha, shape)[0])

    def pieces(t):
        mu = np.exp(Xe @ t)
        g = Xe.T @ ((y + shape) * mu / (shape + mu) - y) + alpha * t
        w = (y + shape) * shape * mu / (shape + mu) ** 2
        return g, (Xe * w[:, None]).T @ Xe + alpha * np.eye(p)

    for _ in range(n_iter):
        g, H = pieces(theta)
        step = np.linalg.solve(H, g)
        t = 1.0
        while objective(theta - t * step) < objective(theta) - 1e-12 and t > 1e-8:
            t *= 0.5
        theta = theta - t * step
        if np.max(np.abs(t * step)) < tol:
            break
    cov = np.linalg.inv(pieces(theta)[1])
    return theta, 0.5 * (cov + cov.T)


# ------------------------------------------------------------------ softmax


def softmax_laplace(Xe, y, K, alpha, n_iter=100, tol=1e-10):
    """Mode and Laplace covariance of the multinomial posterior with K full
    coefficient vectors (flat theta, class-major: theta[k * p + j])."""
    n, p = Xe.shape
    y = np.asarray(y, dtype=np.intp)
    Y = np.eye(K)[y]
    theta = np.zeros(K * p)
    for _ in range(n_iter):
        Pr = softmax(Xe @ theta.reshape(K, p).T, axis=1)         # (n, K)
        g = ((Pr - Y).T @ Xe).ravel() + alpha * theta
        H = _softmax_hessian(Xe, Pr, K) + alpha * np.eye(K * p)
        step = np.linalg.solve(H, g)
        theta -= step
        if np.max(np.abs(step)) < tol:
            break
    Pr = softmax(Xe @ theta.reshape(K, p).T, axis=1)
    H = _softmax_hessian(Xe, Pr, K) + alpha * np.eye(K * p)
    cov = np.linalg.inv(H)
    return theta, 0.5 * (cov + cov.T)


def _softmax_hessian(Xe, Pr, K):
    n, p = Xe.shape
    H = np.zeros((K * p, K * p))
    for k in range(K):
        for l in range(K):
            w = Pr[:, k] * ((k == l) - Pr[:, l])
            H[k * p:(k + 1) * p, l * p:(l + 1) * p] = (Xe * w[:, None]).T @ Xe
    return H


def softmax_log_lik(Theta, Xe, y):
    """Log likelihood of the multinomial model at one (K, p) parameter."""
    Z = Xe @ Theta.T
    return float((Z[np.arange(len(y)), np.asarray(y, dtype=np.intp)] - logsumexp(Z, axis=1)).sum())


def small_classification(n_classes=3, n=60, d=4, seed=0):
    """A small classification set whose first feature carries the class (the
    network tests' quick fits)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = np.arange(n) % n_classes
    X[:, 0] += y
    return X, y


# ------------------------------------------------- a network's exact posterior
class BinaryReluNet:
    """The posterior of a one-hidden-layer ReLU network with one logistic
    output, written from its formulas (not the library's backward pass):
    ``f(x) = relu(x W1 + b1) . w2 + b2``, the fan-in prior ``W1 ~ N(0, s^2 /
    d)``, ``w2 ~ N(0, s^2 / h)``, biases ``N(0, s_b^2)``, and the potential
    ``U = sum_i [softplus(f_i) - y_i f_i] + prior energy``.  Parameters are
    flat in the library's layout (``W1`` row-major, ``b1``, ``w2``, ``b2``)."""

    def __init__(self, X, y, hidden, prior_scale=4.0, bias_scale=1.0):
        self.X, self.y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
        self.d, self.h = self.X.shape[1], int(hidden)
        d, h = self.d, self.h
        self.n_params = d * h + 2 * h + 1
        prec = np.empty(self.n_params)
        prec[:d * h] = d / prior_scale ** 2
        prec[d * h:d * h + h] = 1.0 / bias_scale ** 2
        prec[d * h + h:d * h + 2 * h] = h / prior_scale ** 2
        prec[-1] = 1.0 / bias_scale ** 2
        self.prior_precision = prec

    def _unpack(self, theta):
        d, h = self.d, self.h
        return (theta[:d * h].reshape(d, h), theta[d * h:d * h + h],
                theta[d * h + h:d * h + 2 * h], theta[-1])

    def logits(self, theta, X):
        W1, b1, w2, b2 = self._unpack(theta)
        return np.maximum(X @ W1 + b1, 0.0) @ w2 + b2

    def log_likelihood(self, theta, X, y):
        """``sum_i log p(y_i | x_i, theta)``."""
        z = self.logits(theta, X)
        return float(np.sum(y * z - np.logaddexp(0.0, z)))

    def potential_and_gradient(self, theta):
        W1, b1, w2, b2 = self._unpack(theta)
        a = np.maximum(self.X @ W1 + b1, 0.0)
        z = a @ w2 + b2
        u = np.sum(np.logaddexp(0.0, z) - self.y * z) + 0.5 * np.dot(self.prior_precision * theta,
                                                                       theta)
        dz = 0.5 * (1.0 + np.tanh(0.5 * z)) - self.y          # sigmoid(z) - y
        da = np.outer(dz, w2) * (a > 0)
        grad = np.concatenate([(self.X.T @ da).ravel(), da.sum(axis=0), a.T @ dz, [dz.sum()]])
        return u, grad + self.prior_precision * theta


def adaptation_windows(n_warmup):
    """Stan's windows: 75 iterations, then metric windows of 25, 50, ...,
    the last stretched to ``n_warmup - 50``, then 50 for the step alone."""
    windows, start, width, end_all = [], 75, 25, n_warmup - 50
    while start < end_all:
        end = start + width if start + 3 * width <= end_all else end_all
        windows.append((start, end))
        start, width = end, 2 * width
    return windows


def hmc(potential_and_gradient, theta0, n_warmup, n_draws, seed, trajectory=2.0,
        target_accept=0.85, max_leapfrog=1000):
    """Metropolis-adjusted Hamiltonian Monte Carlo with a diagonal metric and
    a step adapted as Stan adapts them (windowed variances, dual averaging
    toward ``target_accept``); trajectories of ``trajectory`` time units
    (jittered by +-20%) in the metric's units.

    Returns
    -------
    draws : ndarray of shape (n_draws, n_params)
    acceptance : float
        Mean acceptance probability after warm-up.
    """
    rng = np.random.default_rng(seed)
    theta = np.array(theta0, dtype=np.float64)
    inv_metric = np.ones_like(theta)
    u, g = potential_and_gradient(theta)
    step, windows, kept = 0.01, adaptation_windows(n_warmup), []

    def averaging(h):
        return {"mu": np.log(10 * h), "hbar": 0.0, "log_h_bar": 0.0, "t": 0}
    da = averaging(step)
    draws, acceptance = [], []
    for it in range(n_warmup + n_draws):
        n_leap = int(min(max_leapfrog, max(1, round(trajectory / step * rng.uniform(0.8, 1.2)))))
        r = rng.standard_normal(theta.size) / np.sqrt(inv_metric)
        h0 = u + 0.5 * np.dot(inv_metric * r, r)
        new, r = theta.copy(), r - 0.5 * step * g
        for i in range(n_leap):
            new += step * inv_metric * r
            u_new, g_new = potential_and_gradient(new)
            if i < n_leap - 1:
                r -= step * g_new
        r -= 0.5 * step * g_new
        h1 = u_new + 0.5 * np.dot(inv_metric * r, r)
        accept = float(np.exp(min(0.0, h0 - h1))) if np.isfinite(h1) else 0.0
        if rng.uniform() < accept:
            theta, u, g = new, u_new, g_new
        if it >= n_warmup:
            draws.append(theta.copy())
            acceptance.append(accept)
            continue
        da["t"] += 1
        t = da["t"]
        da["hbar"] += (target_accept - accept - da["hbar"]) / (t + 10)
        log_h = da["mu"] - np.sqrt(t) / 0.05 * da["hbar"]
        da["log_h_bar"] += t ** -0.75 * (log_h - da["log_h_bar"])
        step = float(np.exp(log_h))
        for start, end in windows:
            if start <= it < end:
                kept.append(theta.copy())
            if it == end - 1:
                n = len(kept)
                inv_metric = (n / (n + 5.0)) * np.var(kept, axis=0) + 1e-3 * 5.0 / (n + 5.0)
                kept, da = [], averaging(step)
        if it == n_warmup - 1:
            step = float(np.exp(da["log_h_bar"]))
    return np.array(draws), float(np.mean(acceptance))
