"""Kernel Stein discrepancy (KSD) of a sample against a target known up to a constant.

The KSD compares the empirical distribution of draws :math:`x_1, \\dots, x_N`
with a target :math:`\\pi` through the score :math:`s(x) = \\nabla \\log \\pi(x)`
only, so the normalising constant is never needed (Liu et al., 2016; Gorham
and Mackey, 2017).  With a base kernel :math:`k` the *Stein kernel* of the
Langevin Stein operator is

.. math::

   k_0(x, y) = s(x)^\\top s(y)\\, k(x, y) + s(x)^\\top \\nabla_y k(x, y)
             + s(y)^\\top \\nabla_x k(x, y)
             + \\operatorname{tr} \\nabla_x \\nabla_y^\\top k(x, y),

and :math:`\\mathrm{KSD}^2 = \\frac{1}{N^2} \\sum_{i,j} k_0(x_i, x_j)` (the
V-statistic, the form of the preferential-subsampling paper's eq. 20; it is
never negative).  For the inverse multiquadric (IMQ) kernel
:math:`k(x, y) = (1 + \\lVert x - y\\rVert^2 / c^2)^\\beta`, with
:math:`r = x - y`, :math:`u = 1 + \\lVert r\\rVert^2 / c^2` and :math:`d` the
dimension,

.. math::

   k_0(x, y) = s(x)^\\top s(y)\\, u^\\beta
      + \\frac{2\\beta}{c^2} u^{\\beta - 1} \\bigl(s(y) - s(x)\\bigr)^\\top r
      - \\frac{2\\beta d}{c^2} u^{\\beta - 1}
      - \\frac{4\\beta(\\beta - 1)}{c^4} \\lVert r\\rVert^2 u^{\\beta - 2}.

Gorham and Mackey recommend :math:`\\beta = -1/2`, :math:`c = 1`: the IMQ KSD
then detects non-convergence (it goes to zero only if the sample converges to
the target).  **The score is** :math:`\\nabla \\log \\pi = -\\nabla U`, not the
gradient of the potential: with the wrong sign the discrepancy is large even
for exact samples.
"""
import numbers

import numpy as np
import scipy.sparse as sp

# elements of a (rows x n) block of pairwise quantities held at once
_BLOCK_ELEMENTS = 2 ** 22


def _imq_stein_block(Xi, Si, X, S, sq_i, sq, xs_i, xs, c, beta, d):
    """The IMQ Stein kernel k0(x_i, x_j) for the block rows i and all rows j
    of ``X`` (an array of shape (len(Xi), len(X))).

    With w = 1/u: k0 = u^beta [s_i.s_j + w ((2 beta / c^2)((s_j - s_i).r - d)
    - (4 beta (beta - 1) / c^4) ||r||^2 w)], evaluated in place.
    """
    c2 = c * c
    r2 = Xi @ X.T                                   # ||x_i - x_j||^2, in place
    r2 *= -2.0
    r2 += sq_i[:, None]
    r2 += sq[None, :]
    np.maximum(r2, 0.0, out=r2)
    w = r2 / c2
    w += 1.0
    np.reciprocal(w, out=w)                         # 1 / u
    if beta == -0.5:
        ub = np.sqrt(w)                             # u^(-1/2), the common case
    else:
        ub = np.power(w, -beta)
    # (s_j - s_i).(x_i - x_j) = s_j.x_i - s_j.x_j - s_i.x_i + s_i.x_j
    inner = Xi @ S.T
    inner += Si @ X.T
    inner -= xs[None, :]
    inner -= xs_i[:, None] + d
    inner *= 2.0 * beta / c2
    r2 *= w
    r2 *= 4.0 * beta * (beta - 1.0) / (c2 * c2)
    inner -= r2
    inner *= w
    inner += Si @ S.T
    inner *= ub
    return inner


def ksd(samples, grad_log_density, kernel="imq", c=1.0, beta=-0.5, *, statistic="v",
        squared=False, block_size=None):
    """Kernel Stein discrepancy of ``samples`` against a target given by its score.

    Parameters
    ----------
    samples : array-like of shape (n_draws, n_dims)
        The draws (e.g. posterior draws of all chains, flattened).
    grad_log_density : array-like of shape (n_draws, n_dims) or callable
        The score ``grad log pi`` at each draw, or a function mapping the
        ``(n_draws, n_dims)`` array of draws to that array (called once).
        For a posterior ``pi ∝ exp(-U)`` this is ``-grad U``: mind the sign.
    kernel : {"imq"}, default="imq"
        The base kernel: the inverse multiquadric ``(1 + ||a - b||^2 / c^2)^beta``.
    c : float, default=1.0
        Kernel length scale (the preferential-subsampling paper uses 1).
    beta : float, default=-0.5
        Kernel exponent, in (-1, 0) for the convergence-detecting IMQ KSD of
        Gorham and Mackey (2017); any negative value gives a valid kernel.
    statistic : {"v", "u"}, default="v"
        ``"v"``: the V-statistic ``(1/N^2) sum_{i,j} k0(x_i, x_j)`` (never
        negative); ``"u"``: the unbiased U-statistic over pairs ``i != j``
        (can be negative for good samples).
    squared : bool, default=False
        Return KSD^2 instead of KSD.  The square root of a negative
        U-statistic is reported as 0.
    block_size : int or None, default=None
        Rows of the pairwise block computed at once; None keeps each block
        near 4M entries (about 32 MB per temporary).  Cost: O(N^2 d) time,
        O(block_size N) memory.

    Returns
    -------
    ksd : float
        The discrepancy (or its square with ``squared=True``).

    Notes
    -----
    The Stein kernel of the IMQ base kernel is in closed form (module
    docstring), evaluated blockwise with matrix products, on draws centred
    at their mean (the kernel depends on differences only).  For i.i.d.
    draws from the target, ``E[KSD^2_V] = E[k0(x, x)] / N``: the KSD decays
    like ``N^(-1/2)``.  For a standard normal target in ``d`` dimensions with
    ``c = 1, beta = -1/2`` that is ``2 d / N``.

    References
    ----------
    Liu, Lee and Jordan (2016), A kernelized Stein discrepancy for
    goodness-of-fit tests.  Gorham and Mackey (2017), Measuring sample
    quality with kernels.

    Examples
    --------
    >>> import numpy as np
    >>> from skbayes_sg.diagnostics import ksd
    >>> x = np.random.default_rng(0).standard_normal((2000, 2))
    >>> round(ksd(x, -x), 2)       # standard normal target: score -x
    0.04
    >>> ksd(x + 1.0, -(x + 1.0)) > 10 * ksd(x, -x)
    True
    """
    _check_ksd_options(kernel, c, beta, statistic)
    X, S = _draws_and_scores(samples, grad_log_density)
    n, d = X.shape
    if statistic == "u" and n < 2:
        raise ValueError("the U-statistic needs at least 2 draws.")
    c, beta = float(c), float(beta)
    X = X - X.mean(axis=0)                       # differences only: better rounding
    total = _stein_kernel_sum(X, S, c, beta, block_size)
    if statistic == "v":
        value = total / (n * n)
    else:
        # k0(x, x) = ||s(x)||^2 - 2 beta d / c^2 (u = 1, r = 0)
        diag = float(np.einsum("ij,ij->", S, S)) - n * 2.0 * beta * d / (c * c)
        value = (total - diag) / (n * (n - 1))
    if squared:
        return float(value)
    return float(np.sqrt(max(value, 0.0)))


def _check_ksd_options(kernel, c, beta, statistic):
    """Returns None; raises a ValueError naming the first invalid option of :func:`ksd`."""
    if kernel != "imq":
        raise ValueError(f"kernel={kernel!r} is not supported; use kernel='imq'.")
    if not (isinstance(c, numbers.Real) and c > 0):
        raise ValueError(f"c must be a positive number, got {c!r}.")
    if not (isinstance(beta, numbers.Real) and beta < 0):
        raise ValueError(f"beta must be negative (the IMQ kernel), got {beta!r}.")
    if statistic not in ("v", "u"):
        raise ValueError(f"statistic must be 'v' or 'u', got {statistic!r}.")


def _draws_and_scores(samples, grad_log_density):
    """``(X, S)``: the draws and their scores as validated float64 arrays of
    the same shape (n_draws, n_dims); the score function, if one is given,
    called once on ``X``."""
    X = np.asarray(samples, dtype=np.float64)
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"samples must be a non-empty 2-D array, got shape {X.shape}.")
    S = grad_log_density(X) if callable(grad_log_density) else grad_log_density
    S = np.asarray(S, dtype=np.float64)
    if S.ndim == 1 and X.shape[1] == 1:
        S = S[:, None]
    if S.shape != X.shape:
        raise ValueError(f"grad_log_density has shape {S.shape}; the samples have {X.shape}.")
    if not (np.all(np.isfinite(X)) and np.all(np.isfinite(S))):
        raise ValueError("samples and grad_log_density must be finite.")
    return X, S


def _stein_kernel_sum(X, S, c, beta, block_size):
    """``sum_{i,j} k0(x_i, x_j)`` of the IMQ Stein kernel over all pairs of
    rows of the centred draws ``X`` (scores ``S``), as a float, computed in
    blocks of ``block_size`` rows (None: about ``_BLOCK_ELEMENTS`` entries)."""
    n, d = X.shape
    sq = np.einsum("ij,ij->i", X, X)
    xs = np.einsum("ij,ij->i", X, S)
    rows = block_size or max(1, _BLOCK_ELEMENTS // n)
    total = 0.0
    # k0 is symmetric: each block of rows against itself and the rows after it
    for start in range(0, n, rows):
        sl, rest = slice(start, start + rows), slice(start, n)
        k0 = _imq_stein_block(X[sl], S[sl], X[rest], S[rest], sq[sl], sq[rest], xs[sl],
                            xs[rest], c, beta, d)
        m = k0.shape[0]
        total += float(k0[:, :m].sum()) + 2.0 * float(k0[:, m:].sum())
    return total


# ----------------------------------------------------------------- estimators
def _check_estimator(est):
    """A fitted estimator that gives the score of its posterior (the linear
    SG-MCMC estimators' ``grad_log_posterior``; duck typing: the
    diagnostics never import the estimator classes)."""
    if not callable(getattr(est, "grad_log_posterior", None)):
        raise TypeError(
            f"ksd_from_estimator needs a fitted linear SG-MCMC estimator "
            f"(SGMCMCLogisticRegression, SGMCMCRidge, SGMCMCPoissonRegressor); got "
            f"{type(est).__name__}.")
    if not hasattr(est, "coef_samples_"):
        raise ValueError(f"this {type(est).__name__} is not fitted yet; call fit first.")


def grad_log_posterior(thetas, X, y, glm, alpha, fit_intercept, temperature=1.0,
                       sample_weight=None):
    """Exact score ``-grad U(theta) / T`` of a GLM posterior at many draws at once.

    Parameters
    ----------
    thetas : ndarray of shape (n_draws, K * dext)
        Flat parameters (per output: coefficients, then the intercept).
    X : ndarray or CSR matrix of shape (n, d)
    y : ndarray of shape (n,)
        Encoded targets (0/1, class index, or real).
    glm : GLM
    alpha : float
        Prior precision.
    fit_intercept : bool
    temperature : float, default=1.0
    sample_weight : ndarray of shape (n,) or None, default=None
        Datum weights ``w_i`` (the potential ``sum_i w_i U_i``).

    Returns
    -------
    score : ndarray of shape (n_draws, K * dext)
        The same as ``-potential_and_grad(theta, ...)[1] / T`` draw by draw,
        computed with one matrix product per row chunk for all draws.
    """
    thetas = np.asarray(thetas, dtype=np.float64)
    S_, dim = thetas.shape
    K = glm.n_outputs
    n, d = X.shape
    dext = d + int(fit_intercept)
    if dim != K * dext:
        raise ValueError(f"thetas have {dim} columns; the model has {K * dext} parameters.")
    Th = thetas.reshape(S_, K, dext)
    W = Th[:, :, :d].reshape(S_ * K, d)
    b = Th[:, :, d] if fit_intercept else np.zeros((S_, K))
    G = np.zeros((S_, K, dext))
    rows = max(1, _BLOCK_ELEMENTS // max(S_ * K, 1))
    for start in range(0, n, rows):
        Xc = X[start:start + rows]
        m = Xc.shape[0]
        Z = np.asarray(Xc @ W.T, dtype=np.float64).reshape(m, S_, K) + b[None]
        yc = np.repeat(np.asarray(y[start:start + rows], dtype=np.float64), S_)
        R = glm.residual(Z.reshape(m * S_, K), yc).reshape(m, S_ * K)
        if sample_weight is not None:
            R = R * np.asarray(sample_weight[start:start + rows], dtype=np.float64)[:, None]
        XtR = Xc.T @ R
        G[:, :, :d] += np.asarray(XtR.toarray() if sp.issparse(XtR) else XtR).T.reshape(S_, K, d)
        if fit_intercept:
            G[:, :, d] += R.sum(axis=0).reshape(S_, K)
    grad_U = G.reshape(S_, dim) + alpha * thetas
    return -grad_U / temperature


def ksd_from_estimator(est, X, y, *, c=1.0, beta=-0.5, statistic="v", per_chain=False,
                       max_draws=None, sample_weight=None):
    """IMQ kernel Stein discrepancy of a fitted linear estimator's posterior draws.

    The score is the exact ``grad log pi = -grad U / T`` of the estimator's
    posterior on ``(X, y)``, with its ``alpha``, ``temperature``,
    ``fit_intercept`` and model (logistic, multinomial, Gaussian with
    ``noise_var_``, Poisson, negative binomial), evaluated with full data
    passes by the estimator's ``grad_log_posterior``.

    Parameters
    ----------
    est : SGMCMCLogisticRegression, SGMCMCRidge or SGMCMCPoissonRegressor
        Fitted.
    X : {array-like, sparse matrix} of shape (n_samples, n_features)
        The training data the estimator was fitted on.
    y : array-like of shape (n_samples,)
        Its targets (original labels for classifiers).
    c, beta : float
        IMQ kernel parameters, see :func:`ksd`.
    statistic : {"v", "u"}, default="v"
        See :func:`ksd`.
    per_chain : bool, default=False
        False: one KSD of the draws of all chains pooled.  True: the KSD of
        each chain's draws, an array of shape (n_chains,).
    max_draws : int or None, default=None
        Use at most this many draws per chain (evenly thinned): the KSD costs
        O(N^2) in the number N of draws.
    sample_weight : array-like of shape (n_samples,), default=None
        The weights the estimator was fitted with (its ``class_weight`` is
        applied as in ``fit``): the score is that of the weighted posterior.

    Returns
    -------
    ksd : float or ndarray of shape (n_chains,)

    Examples
    --------
    >>> import numpy as np
    >>> from skbayes_sg import SGMCMCRidge
    >>> from skbayes_sg.diagnostics import ksd_from_estimator
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(200, 2))
    >>> y = X @ [1.0, -1.0] + rng.normal(size=200)
    >>> reg = SGMCMCRidge(noise_var=1.0, random_state=0).fit(X, y)
    >>> pooled = ksd_from_estimator(reg, X, y)                 # a float
    >>> ksd_from_estimator(reg, X, y, per_chain=True).shape    # one per chain
    (4,)
    """
    _check_estimator(est)
    keep = None
    n_kept = est.coef_samples_.shape[1]
    if max_draws is not None and n_kept > max_draws:
        keep = np.unique(np.linspace(0, n_kept - 1, int(max_draws)).round().astype(int))
    draws, score = est.grad_log_posterior(X, y, sample_weight, draws=keep)
    C, N, dim = draws.shape
    flat = draws.reshape(C * N, dim)
    if per_chain:
        return np.array([ksd(draws[k], score[k], c=c, beta=beta, statistic=statistic)
                         for k in range(C)])
    return ksd(flat, score.reshape(C * N, dim), c=c, beta=beta, statistic=statistic)
