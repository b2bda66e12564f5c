"""Snapshot (aggregated-gradient) estimators: SVRG-LD, SAGA-LD and TMU.

``subsampling`` in {"svrg" (PTU), "saga" (PPU), "tmu"} times ``access`` in
{"random" (RA), "reshuffle" (RR), "cyclic" (CA)}; the formula sheet,
doc/algorithms.rst, "Snapshot / aggregated gradients (AGLD)".  What is checked:

* Unbiasedness (random access) by exact finite sums: the estimate
  ``A + (n/b) sum_{j in S} (grad U_j(theta) - alpha_j)`` is evaluated for every
  one of the ``n^b`` ordered index tuples, at an arbitrary snapshot point or
  an arbitrary (not self-consistent) table, and averaged.
* The index streams of the three access patterns (read off the table: the
  entries a step rewrites are the indices it visited).
* The running sum ``A`` stays the exact sum of the table: after 10^5 chain
  steps, and for minibatches with repeated indices.
* The refresh schedule of TMU and SVRG (``n_refreshes``, what a refresh
  writes and when) and the ``n_evals`` / ``n_grad_evals_`` accounting.
* Bayesian ridge, sharp: for RA and CA the (theta, table) chain is a linear
  Gaussian system (random-coefficient for RA, periodic for CA) whose *exact*
  stationary moments at the step size used are computed here; the engine's
  draws must match them within Monte Carlo error.
* Bayesian ridge, all nine {svrg, saga, tmu} x {random, reshuffle, cyclic}
  through the public estimator against the exact conjugate posterior.
* A memory-mapped ``X`` gives bit-identical draws to the in-memory array.
* (slow) SAGA with cyclic access: the variance inflation seen at the
  automatic step size is the method's, reproduced by the exact theory.

Monte Carlo tolerances follow tests/test_posterior.py: ``Z = 4.5`` standard
errors, each ``sd / sqrt(ESS)`` with the conservative ESS of
``_reference.ess``; a covariance entry's ESS and sd are those of its product
series.  All seeds are fixed.
"""
import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_array_equal
from scipy.linalg import solve_discrete_lyapunov
from scipy.stats import chisquare

from skbayes_sg import SGMCMCLogisticRegression, SGMCMCRidge
from skbayes_sg._sampling._chain import ChainOracle, run_segment
from skbayes_sg._sampling._dataset import RowData
from skbayes_sg._sampling._dynamics import SGLD
from skbayes_sg._sampling._estimators import GLMEstimator, Problem

try:  # tests/ as a package or as a plain directory on sys.path
    from . import _reference as ref
except ImportError:
    import _reference as ref

Z = 4.5
METHODS = ["svrg", "saga", "tmu"]
ACCESSES = ["random", "reshuffle", "cyclic"]
# subsampling -> engine control and whether it refreshes periodically
CONTROL = {"svrg": ("snapshot", True), "saga": ("table", False), "tmu": ("table", True)}


# ------------------------------------------------------------------ numpy
def _ext(X, fit_intercept=True):
    X = X.toarray() if sp.issparse(X) else np.asarray(X)
    X = np.asarray(X, dtype=np.float64)
    return np.hstack([X, np.ones((len(X), 1))]) if fit_intercept else X


def _residuals(model, Xe, y, theta, K=1, noise_var=1.0):
    """phi'(z_i, y_i) for every datum, shape (n, K) (independent numpy)."""
    Z_ = Xe @ theta.reshape(K, -1).T
    if model == "gaussian":
        return (Z_ - y[:, None]) / noise_var
    if model == "logistic":
        return 1.0 / (1.0 + np.exp(-Z_)) - y[:, None]
    P = np.exp(Z_ - Z_.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    P[np.arange(len(y)), y.astype(int)] -= 1.0
    return P


def _grad_sum(R, Xe):
    """sum_i r_i (x) x_i as the flat (K * dext) parameter layout."""
    return (R.T @ Xe).ravel()


def _tiny(model, layout="dense", n=5, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[rng.random((n, d)) < 0.3] = 0.0
    K = 3 if model == "softmax" else 1
    if model == "gaussian":
        y = rng.normal(size=n)
    else:
        y = rng.integers(0, 2 if model == "logistic" else K, n).astype(np.float64)
    Xin = sp.csr_matrix(X) if layout == "csr" else X
    prob = Problem(RowData(Xin, True), y, model, K, (0.7,) if model == "gaussian" else ())
    return X, y, K, prob, rng


# ================================================== unbiasedness (finite sums)
@pytest.mark.parametrize("b", [1, 2])
@pytest.mark.parametrize("layout", ["dense", "csr"])
@pytest.mark.parametrize("model", ["gaussian", "logistic", "softmax"])
@pytest.mark.parametrize("control", ["snapshot", "table"])
def test_estimate_exact_finite_sum(control, model, layout, b):
    """Every single estimate equals A + (n/b) sum_S (r_j(theta) - a_j) x_j, and
    their average over all n^b ordered tuples (random access with
    replacement: each has probability n^-b) is the exact data gradient, for
    an arbitrary snapshot theta_tilde (SVRG) or an arbitrary table (SAGA/TMU:
    entries overwritten at random with unrelated values, so the table is not
    the residuals of any single point)."""
    X, y, K, prob, rng = _tiny(model, layout)
    Xe, n = _ext(X), len(y)
    theta_tilde = rng.normal(size=prob.dim)
    est = GLMEstimator(prob, b, access="random", control=control, period=3,
                       control_point=theta_tilde)
    a = _residuals(model, Xe, y, theta_tilde, K, 0.7)            # (n, K)
    if control == "table":
        # arbitrary table through the commit path, duplicates included
        idx = np.array([0, 3, 3, 1, 4, 0])
        res = rng.normal(size=(len(idx), K))
        est.py_commit(theta_tilde, idx, res)
        for i, r in zip(idx, res):
            a[i] = r
        A, table = est.control_state()
        np.testing.assert_allclose(table.reshape(n, K), a, rtol=1e-13, atol=1e-15)
        assert_array_equal(table.reshape(n, K)[idx], a[idx])   # committed: exact
        np.testing.assert_allclose(A, _grad_sum(a, Xe), rtol=1e-12, atol=1e-12)
    A = _grad_sum(a, Xe)

    theta = rng.normal(size=prob.dim)
    r = _residuals(model, Xe, y, theta, K, 0.7)
    full = _grad_sum(r, Xe)
    tuples = list(itertools.product(range(n), repeat=b))
    n_evals0 = est.n_evals
    total = np.zeros(prob.dim)
    for S in tuples:
        g = est.py_evaluate(theta, S)
        expected = A + (n / b) * sum(_grad_sum((r[j] - a[j])[None], Xe[j:j + 1]) for j in S)
        np.testing.assert_allclose(g, expected, rtol=1e-11, atol=1e-11)
        total += g
    np.testing.assert_allclose(total / len(tuples), full, rtol=1e-11, atol=1e-11)
    # SVRG recomputes grad U_j(theta_tilde): two evaluations per datum
    per = 2 if control == "snapshot" else 1
    assert est.n_evals - n_evals0 == per * b * len(tuples)


@pytest.mark.parametrize("method", METHODS)
def test_oracle_draws_are_unbiased_random_access(method):
    """Through the chain oracle (random draws, then commit/refresh), at a fixed
    theta: the mean of many gradient draws is alpha theta + the exact
    gradient within Z standard errors (the table changes between draws, the
    expectation does not)."""
    X, y, K, prob, rng = _tiny("logistic", n=6)
    Xe = _ext(X)
    control, periodic = CONTROL[method]
    est = GLMEstimator(prob, 2, access="random", control=control, period=5 if periodic else 0,
                       control_point=rng.normal(size=prob.dim))
    oracle = ChainOracle(est, 0.5)
    bitgen = np.random.PCG64(7)
    thetas = rng.normal(size=(3, prob.dim))
    N = 3000
    for theta in thetas:
        exact = 0.5 * theta + _grad_sum(_residuals("logistic", Xe, y, theta), Xe)
        # alternate theta between draws so that the table keeps moving
        G = []
        for _ in range(N):
            G.append(oracle.py_gradient(theta, bitgen))
            oracle.py_gradient(rng.normal(size=prob.dim), bitgen)
        G = np.array(G)
        zs = (G.mean(axis=0) - exact) / (G.std(axis=0, ddof=1) / np.sqrt(N))
        assert np.all(np.abs(zs) < Z), f"{method}: z {np.round(zs, 2)}"


# ========================================================== access patterns
def _visited_sets(access, n, b, n_steps, seed=0):
    """Index sets of successive SAGA steps, read off the table (each step at a
    fresh random theta, so every visited entry changes)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2)) + 3.0    # rows far from 0: every residual moves
    y = rng.normal(size=n)
    prob = Problem(RowData(X, True), y, "gaussian", 1, (1.0,))
    est = GLMEstimator(prob, b, access=access, control="table", control_point=np.zeros(3))
    oracle = ChainOracle(est, 1.0)
    bitgen = np.random.PCG64(seed)
    sets, before = [], est.control_state()[1]
    for _ in range(n_steps):
        oracle.py_gradient(rng.normal(size=3), bitgen)
        after = est.control_state()[1]
        sets.append(frozenset(np.flatnonzero(after != before).tolist()))
        before = after
    return sets


def test_access_cyclic_blocks_wrap_around():
    n, b = 7, 3
    sets = _visited_sets("cyclic", n, b, 30)
    stream = np.arange(30 * b) % n
    expected = [frozenset(stream[k * b:(k + 1) * b].tolist()) for k in range(30)]
    assert sets == expected


def test_access_reshuffle_is_a_fresh_permutation_per_pass():
    """Each pass of floor(n/b) steps visits disjoint blocks (a permutation
    read in consecutive blocks; the n mod b leftovers are dropped), and the
    permutation is fresh and uniform: the pair in a pass's first block is
    uniform over the C(n, 2) pairs, and consecutive passes repeat their
    arrangement with the chance 1/630 of a uniform draw."""
    n, b = 7, 2
    m = n // b
    passes = 1500
    sets = _visited_sets("reshuffle", n, b, passes * m, seed=1)
    pairs = {pair: k for k, pair in enumerate(itertools.combinations(range(n), 2))}
    first = np.zeros(len(pairs), dtype=int)
    arrangements = []
    for p in range(passes):
        blocks = sets[p * m:(p + 1) * m]
        assert all(len(s) == b for s in blocks)
        assert len(frozenset().union(*blocks)) == m * b, "blocks of one pass overlap"
        first[pairs[tuple(sorted(blocks[0]))]] += 1
        arrangements.append(tuple(tuple(sorted(s)) for s in blocks))
    assert chisquare(first).pvalue > 1e-4, first
    repeats = sum(a == b_ for a, b_ in zip(arrangements, arrangements[1:]))
    assert repeats < 10, f"{repeats} passes repeat the previous permutation"


def test_access_random_is_uniform_with_replacement():
    """b indices uniform with replacement: a datum is in S with probability
    1 - (1 - 1/n)^b, and S has fewer than b distinct indices with the
    birthday probability."""
    n, b, N = 6, 3, 12000
    sets = _visited_sets("random", n, b, N, seed=2)
    counts = np.zeros(n, dtype=int)
    for s in sets:
        for i in s:
            counts[i] += 1
    assert chisquare(counts).pvalue > 1e-4, counts
    p_in = 1 - (1 - 1 / n) ** b
    z = (counts.sum() / (n * N) - p_in) / np.sqrt(p_in * (1 - p_in) / (n * N))
    assert abs(z) < Z
    p_dup = 1 - (n - 1) * (n - 2) / n ** 2
    dup = np.mean([len(s) < b for s in sets])
    assert abs(dup - p_dup) < Z * np.sqrt(p_dup * (1 - p_dup) / N), (dup, p_dup)


# ============================================================ the running sum
def _run_engine(prob, est, h, n_steps, seed, theta0, thin=1, keep=False, alpha=1.0):
    dyn = SGLD(prob.dim, h, 1.0)
    oracle = ChainOracle(est, alpha)
    theta = np.array(theta0, dtype=np.float64)
    out = np.empty((n_steps // thin, prob.dim)) if keep else None
    run_segment(oracle, dyn, theta, n_steps, thin, out, np.random.PCG64(seed))
    return theta, out


@pytest.mark.parametrize("access", ACCESSES)
@pytest.mark.parametrize("method", ["saga", "tmu"])
def test_running_sum_exact_after_1e5_steps(method, access):
    """After 10^5 steps (each adding the differences of the visited entries to
    A), A equals sum_j a_j x_j recomputed from the table to 1e-10 relative
    (relative to sum_j |a_j| |x_j|, the size of the terms); random access
    with b = n makes repeated indices in a minibatch the rule, not the
    exception (about n/e duplicates per step)."""
    rng = np.random.default_rng(3)
    n, b = (40, 40) if access == "random" else (50, 7)
    X = 10.0 * rng.normal(size=(n, 4)) + 5.0
    y = X @ rng.normal(size=4) + rng.normal(size=n)
    prob = Problem(RowData(X, True), y, "gaussian", 1, (1.0,))
    Xe = _ext(X)
    mean, _, P = ref.ridge_posterior(X, y, 1.0, 1.0)
    h = 0.05 / np.linalg.eigvalsh(P).max()
    est = GLMEstimator(prob, b, access=access, control="table",
                       period=11 if method == "tmu" else 0, control_point=mean + 1.0)
    _run_engine(prob, est, h, 100_000, 11, mean)
    A, table = est.control_state()
    scale = np.abs(table) @ np.abs(Xe)
    err = np.abs(A - table @ Xe) / scale
    assert err.max() < 1e-10, err
    # the table holds residuals at visited points, not stale zeros
    assert np.all(table != 0.0)


def test_duplicates_in_a_minibatch_are_committed_in_order():
    """A minibatch with repeated indices: the entry ends at its last value and
    A moves by the total difference, so A stays the exact table sum."""
    X, y, K, prob, rng = _tiny("gaussian", n=6)
    Xe = _ext(X)
    th0 = rng.normal(size=prob.dim)
    est = GLMEstimator(prob, 4, access="random", control="table", control_point=th0)
    a = _residuals("gaussian", Xe, y, th0, noise_var=0.7)[:, 0]
    idx = [2, 2, 5, 2, 0, 0]
    res = [1.5, -2.0, 3.0, 0.25, 7.0, 7.0]
    est.py_commit(th0, idx, res)
    for i, r in zip(idx, res):
        a[i] = r
    A, table = est.control_state()
    assert_array_equal(table[idx], a[idx])   # the last value of each index, exactly
    np.testing.assert_allclose(table, a, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(A, a @ Xe, rtol=1e-13, atol=1e-13)


# ========================================================== refresh schedule
@pytest.mark.parametrize("given", ["point", "point+table", "none"])
@pytest.mark.parametrize("method", METHODS)
def test_refresh_schedule_and_eval_counts(method, given):
    """With period m: refreshes happen at the start of steps m, 2m, ... (plus
    the initial one, made by the constructor from the control point, taken
    from precomputed residuals, or at step 0 when no point is given).
    ``n_evals``: b per step (2b for SVRG, which recomputes grad U_j at the
    snapshot) plus n per refresh it computed itself."""
    rng = np.random.default_rng(4)
    n, b, m = 30, 4, 7
    X = rng.normal(size=(n, 3))
    y = rng.normal(size=n)
    prob = Problem(RowData(X, True), y, "gaussian", 1, (1.0,))
    Xe = _ext(X)
    control, periodic = CONTROL[method]
    th0 = rng.normal(size=4)
    kw = {}
    if given != "none":
        kw["control_point"] = th0
    if given == "point+table":
        R = _residuals("gaussian", Xe, y, th0)
        kw.update(control_residuals=R.ravel(), control_sum=_grad_sum(R, Xe))
    est = GLMEstimator(prob, b, access="cyclic", control=control,
                       period=m if periodic else 0, **kw)
    setup_evals = n if given == "point" else 0
    assert est.n_evals == setup_evals
    assert est.n_refreshes == (0 if given == "none" else 1)

    oracle = ChainOracle(est, 1.0)
    bitgen = np.random.PCG64(5)
    per_step = 2 * b if method == "svrg" else b
    cyc = np.arange(200 * b) % n
    for k in range(1, 60):   # k = steps done after this call
        theta = rng.normal(size=4)
        A_before = est.control_state()[0]
        oracle.py_gradient(theta, bitgen)
        s = k - 1          # the step just taken
        refreshed = periodic and (s % m == 0) and (s > 0 or given == "none")
        initial = 0 if given == "none" else 1
        expected = initial + (((k - 1) // m + (1 if given == "none" else 0)) if periodic else 0)
        assert est.n_refreshes == expected, (k, est.n_refreshes, expected)
        # the initial refresh is in setup_evals (or free: residuals given)
        assert est.n_evals == setup_evals + k * per_step + n * (expected - initial)
        A, table = est.control_state()
        R = _residuals("gaussian", Xe, y, theta)[:, 0]
        if method == "svrg":
            # A is the full gradient at the current snapshot: new at a refresh only
            if refreshed:
                np.testing.assert_allclose(A, R @ Xe, rtol=1e-12, atol=1e-12)
            else:
                assert_array_equal(A, A_before)
        else:
            visited = np.zeros(n, bool)
            visited[cyc[s * b:(s + 1) * b]] = True
            # the visited entries are the residuals at this step's theta
            np.testing.assert_allclose(table[visited], R[visited], rtol=1e-12, atol=1e-12)
            if refreshed:   # everything else too: a full refresh at this theta
                np.testing.assert_allclose(table, R, rtol=1e-12, atol=1e-12)
            elif method == "saga" or s % m:
                assert not np.allclose(table[~visited], R[~visited])
            np.testing.assert_allclose(A, table @ Xe, rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("method", METHODS)
def test_public_grad_eval_accounting(method):
    """n_grad_evals_ of the public estimator: one set-up pass (the shared table
    at the start point), then per chain b (2b for SVRG) per step and n per
    periodic refresh; snapshot_period="auto" is ceil(n/b) steps."""
    rng = np.random.default_rng(6)
    n, b, chains, warm, samples = 103, 10, 2, 25, 40
    X = rng.normal(size=(n, 3))
    y = rng.normal(size=n)
    for period in ["auto", 4]:
        if method == "saga" and period != "auto":   # SAGA has no period: refused
            with pytest.raises(ValueError, match="snapshot_period=4 has no effect"):
                SGMCMCRidge(subsampling=method, snapshot_period=period, noise_var=1.0,
                            n_samples=5).fit(X, y)
            continue
        est = SGMCMCRidge(subsampling=method, batch_size=b, snapshot_period=period,
                          metric="identity",
                          step_size=1e-3, noise_var=1.0, alpha=1.0, init="zeros",
                          n_chains=chains,
                          n_warmup=warm, n_samples=samples, random_state=0).fit(X, y)
        m = int(np.ceil(n / b)) if period == "auto" else period
        steps = warm + samples
        refreshes = (steps - 1) // m if method != "saga" else 0
        per_step = 2 * b if method == "svrg" else b
        assert est.n_grad_evals_ == n + chains * (steps * per_step + refreshes * n), period


# ====================================== exact stationary moments (linear ridge)
def _step_map(Xe, R, ry, alpha, h, S, method, refresh):
    """One SGLD step with minibatch S as an affine map s' = M s + c (+ noise).

    The state is s = (theta, a): a the table residuals (SAGA, TMU) or the
    snapshot theta_tilde (SVRG).  ``refresh``: a full refresh at theta
    before the estimate (what ``begin_step`` does at multiples of the
    period).  r(theta) = R theta - ry; the estimate of the formula sheet
    (doc/algorithms.rst); the visited entries are set to r_j(theta) after the
    step's estimate (commit).
    """
    n, p = Xe.shape
    w = n / len(S)
    if method == "svrg":
        q = 2 * p
        Tt = np.zeros((p, q))          # theta_tilde after the (optional) refresh
        Tt[:, (0 if refresh else p):(p if refresh else q)] = np.eye(p)
        G = Xe.T @ R @ Tt
        G[:, :p] += alpha * np.eye(p)
        g0 = -Xe.T @ ry
        for j in S:
            G[:, :p] += w * np.outer(Xe[j], R[j])
            G -= w * np.outer(Xe[j], R[j] @ Tt)
        M = np.vstack([np.hstack([np.eye(p), np.zeros((p, p))]) - h * G, Tt])
        return M, np.concatenate([-h * g0, np.zeros(p)])
    q = p + n
    Ta = np.zeros((n, q))              # the table after the (optional) refresh
    ta = np.zeros(n)
    if refresh:
        Ta[:, :p], ta[:] = R, -ry
    else:
        Ta[:, p:] = np.eye(n)
    G = Xe.T @ Ta
    G[:, :p] += alpha * np.eye(p)
    g0 = Xe.T @ ta
    for j in S:
        G[:, :p] += w * np.outer(Xe[j], R[j])
        G -= w * np.outer(Xe[j], Ta[j])
        g0 -= w * Xe[j] * (ry[j] + ta[j])
    M = np.zeros((q, q))
    c = np.zeros(q)
    M[:p] = -h * G
    M[:p, :p] += np.eye(p)
    c[:p] = -h * g0
    M[p:], c[p:] = Ta, ta
    for j in set(S):                   # commit: a_j = r_j(theta_k)
        M[p + j] = 0.0
        M[p + j, :p] = R[j]
        c[p + j] = -ry[j]
    return M, c


def _schedule(n, b, method, period):
    m = int(np.ceil(n / b))
    per = 0 if method == "saga" else (m if period is None else period)
    return m, per


def exact_cyclic_moments(X, y, alpha, noise_var, h, b, method, period=None):
    """Stationary mean and covariance of theta for cyclic access (b divides n).

    The chain is periodic (period lcm(m, refresh period)): the one-period
    map is affine, its fixed point and discrete Lyapunov equation give the
    law at phase 0, propagated through the phases.  Draws taken at
    uniformly spread phases follow the equal mixture of the phase laws.
    """
    Xe = _ext(X)
    n, p = Xe.shape
    assert n % b == 0
    m, per = _schedule(n, b, method, period)
    L = m if per == 0 else int(np.lcm(m, per))
    R, ry = Xe / noise_var, np.asarray(y, float) / noise_var
    maps = [_step_map(Xe, R, ry, alpha, h, list(range((k % m) * b, (k % m + 1) * b)),
                      method, per > 0 and k % per == 0) for k in range(L)]
    q = maps[0][0].shape[0]
    Q = np.zeros((q, q))
    Q[:p, :p] = 2 * h * np.eye(p)
    Mt, ct, Qt = np.eye(q), np.zeros(q), np.zeros((q, q))
    for M, c in maps:
        Mt, ct, Qt = M @ Mt, M @ ct + c, M @ Qt @ M.T + Q
    mu = np.linalg.solve(np.eye(q) - Mt, ct)
    S = solve_discrete_lyapunov(Mt, Qt)
    mus, covs = [], []
    for M, c in maps:
        mu, S = M @ mu + c, M @ S @ M.T + Q
        mus.append(mu[:p])
        covs.append(S[:p, :p])
    return _pool(mus, covs)


def exact_random_moments(X, y, alpha, noise_var, h, b, method, period=None):
    """Stationary mean and covariance of theta for random access with
    replacement: E over all n^b ordered tuples of the second-moment map of
    the augmented state (s, 1), composed over the refresh period."""
    Xe = _ext(X)
    n, p = Xe.shape
    m, per = _schedule(n, b, method, period)
    R, ry = Xe / noise_var, np.asarray(y, float) / noise_var
    tuples = list(itertools.product(range(n), repeat=b))

    def second_moment_op(refresh):
        T = 0.0
        for S in tuples:
            M, c = _step_map(Xe, R, ry, alpha, h, list(S), method, refresh)
            q = len(c)
            Ma = np.zeros((q + 1, q + 1))
            Ma[:q, :q], Ma[:q, q], Ma[q, q] = M, c, 1.0
            T = T + np.kron(Ma, Ma)
        Qa = np.zeros((q + 1, q + 1))
        Qa[:p, :p] = 2 * h * np.eye(p)
        return T / len(tuples), Qa.ravel(), q

    ops = [second_moment_op(False)] if per == 0 else (
        [second_moment_op(True)] + [second_moment_op(False)] * (per - 1))
    q = ops[0][2]
    qa = q + 1
    Tt, tt = np.eye(qa * qa), np.zeros(qa * qa)
    for T, t, _ in ops:
        Tt, tt = T @ Tt, T @ tt + t
    fix = qa * qa - 1                  # E[1 * 1] = 1
    o = np.arange(qa * qa) != fix
    z = np.zeros(qa * qa)
    z[fix] = 1.0
    z[o] = np.linalg.solve(np.eye(o.sum()) - Tt[np.ix_(o, o)], Tt[o, fix] + tt[o])
    mus, covs = [], []
    for T, t, _ in ops:
        z = T @ z + t
        Zm = z.reshape(qa, qa)
        mus.append(Zm[:p, q])
        covs.append(Zm[:p, :p] - np.outer(Zm[:p, q], Zm[:p, q]))
    return _pool(mus, covs)


def _pool(mus, covs):
    mus = np.array(mus)
    mbar = mus.mean(axis=0)
    d = mus - mbar
    return mbar, np.mean(covs, axis=0) + d.T @ d / len(mus)


def _tiny_ridge(n=12, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2)) @ np.array([[1.0, 0.6], [0.0, 0.8]]) + [0.5, -0.3]
    y = X @ [1.0, -2.0] + 0.5 + rng.normal(size=n)
    return X, y


def _engine_draws(X, y, method, access, h, b, n_steps, n_warm, thin, n_chains=4, seed=0,
                  period=None):
    n = len(y)
    mean, _, _ = ref.ridge_posterior(X, y, 1.0, 1.0)
    control, periodic = CONTROL[method]
    per = (int(np.ceil(n / b)) if period is None else period) if periodic else 0
    draws = []
    for c in range(n_chains):
        prob = Problem(RowData(X, True), y, "gaussian", 1, (1.0,))
        est = GLMEstimator(prob, b, access=access, control=control, period=per,
                           control_point=mean)
        dyn = SGLD(prob.dim, h, 1.0)
        oracle = ChainOracle(est, 1.0)
        theta = mean.copy()
        run_segment(oracle, dyn, theta, n_warm, 1, None, np.random.PCG64([seed, c, 0]))
        out = np.empty((n_steps // thin, prob.dim))
        run_segment(oracle, dyn, theta, n_steps, thin, out, np.random.PCG64([seed, c, 1]))
        draws.append(out)
    return np.array(draws)


def _assert_mean(draws, target, what):
    m, sd, se, n_eff = ref.mean_and_se(draws)
    zs = (m - target) / se
    print(f"{what}: mean max|z| {np.max(np.abs(zs)):.2f} (min ESS {n_eff.min():.0f})")
    assert np.all(np.abs(zs) < Z), f"{what}: mean z {np.round(zs, 2)} (ESS {np.round(n_eff)})"
    return zs


def _assert_cov(draws, target, what, rel_allow=0.0):
    """|C_jk - target_jk| < Z se_jk + rel_allow sqrt(target_jj target_kk)."""
    cov, se = ref.cov_and_se(draws)
    scale = np.sqrt(np.outer(np.diag(target), np.diag(target)))
    err = np.abs(cov - target)
    tol = Z * se + rel_allow * scale
    print(f"{what}: var ratio {np.round(np.diag(cov) / np.diag(target), 3)}, "
          f"max|z| {np.max(err / se):.2f}, max err/tol {np.max(err / tol):.2f}")
    assert np.all(err < tol), (
        f"{what}: sampled/target var {np.round(np.diag(cov) / np.diag(target), 4)}, "
        f"z {np.round((cov - target) / se, 1)}, rel_allow {rel_allow}")
    return cov


# step h = 0.3 / lambda_max: large enough that the exact laws differ visibly
# from the posterior and from each other (SAGA-RA inflates the variances by
# ~14%, PTU/TMU by ~6-7%, the cyclic variants by 3-5%), so matching them
# within ~1% Monte Carlo error is a sharp check of the engine against the spec
SHARP_H = 0.3


@pytest.mark.parametrize("access", ["random", "cyclic"])
@pytest.mark.parametrize("method", METHODS)
def test_ridge_matches_exact_stationary_moments(method, access):
    """n = 12 rows, b = 2 (m = 6 steps per pass; random access repeats an
    index in 1 step out of 12): the engine's mean and covariance equal the
    exact stationary moments of the algorithm as specified (the formula
    sheet, doc/algorithms.rst) within Z Monte Carlo standard errors, with no
    allowance."""
    X, y = _tiny_ridge()
    b = 2
    post_mean, post_cov, P = ref.ridge_posterior(X, y, 1.0, 1.0)
    h = SHARP_H / np.linalg.eigvalsh(P).max()
    exact = exact_cyclic_moments if access == "cyclic" else exact_random_moments
    m_h, C_h = exact(X, y, 1.0, 1.0, h, b, method)
    # for a linear model the stationary mean is the posterior mean exactly
    np.testing.assert_allclose(m_h, post_mean, rtol=1e-8, atol=1e-8)
    # thin = 7 is coprime with m = 6: the draws visit every phase equally
    draws = _engine_draws(X, y, method, access, h, b, n_steps=350_000, n_warm=5_000, thin=7)
    _assert_mean(draws, post_mean, f"{method}-{access}")
    cov = _assert_cov(draws, C_h, f"{method}-{access} vs exact finite-h")
    if method == "saga" and access == "random":
        # sharpness: the test resolves the ~14% SAGA-RA inflation
        cov_se = ref.cov_and_se(draws)[1]
        assert np.any(np.abs(np.diag(cov) - np.diag(post_cov)) > Z * np.diag(cov_se))


# ================================ nine combinations vs the exact posterior
NINE_N, NINE_B = 200, 20
# h = 0.02 / lambda_max.  The exact stationary variances at this step differ
# from the posterior's by O(h lambda) = ~1% (ULA's 1 / (1 - h lambda / 2);
# SVRG and TMU with either access, SAGA-RA: the RA variants' bias on the
# tiny problem above is ULA's order) and, for SAGA-CA, by O(m h lambda):
# -2.5..-2.7% here (m h lambda_max = 0.2; computed in the test).  The 5%
# allowance covers these; the Monte Carlo part is Z standard errors (ESS of
# the means ~2,000-2,400 per coordinate in these runs).
NINE_H = 0.02
NINE_ALLOW = 0.05


@pytest.fixture(scope="module")
def ridge200():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(NINE_N, 2)) @ np.array([[1.0, 0.6], [0.0, 0.8]]) + [0.5, -0.3]
    y = X @ [1.0, -2.0] + 0.5 + rng.normal(size=NINE_N)
    mean, cov, P = ref.ridge_posterior(X, y, 1.0, 1.0)
    return dict(X=X, y=y, mean=mean, cov=cov, h=NINE_H / np.linalg.eigvalsh(P).max())


def _public_draws(est):
    full = np.concatenate([est.coef_samples_, est.intercept_samples_[..., None]], axis=-1)
    return full.reshape(full.shape[0], full.shape[1], -1)


@pytest.mark.parametrize("access", ACCESSES)
@pytest.mark.parametrize("method", METHODS)
def test_ridge_posterior_nine_combinations(ridge200, method, access):
    """SGMCMCRidge(subsampling=method, access=access): posterior mean within Z
    MC standard errors of the exact one; covariance entries within Z MC
    standard errors plus 5% of sqrt(C_jj C_kk) (the O(h) allowance)."""
    X, y = ridge200["X"], ridge200["y"]
    est = SGMCMCRidge(subsampling=method, access=access, batch_size=NINE_B, metric="identity",
                      init="mode", step_size=ridge200["h"], noise_var=1.0, alpha=1.0, n_chains=4,
                      n_warmup=5000, n_samples=3000, thin=100, random_state=0).fit(X, y)
    draws = _public_draws(est)
    _assert_mean(draws, ridge200["mean"], f"{method}-{access}")
    _assert_cov(draws, ridge200["cov"], f"{method}-{access}", rel_allow=NINE_ALLOW)
    if access == "cyclic":   # the allowance covers the exact bias at this step
        _, C_h = exact_cyclic_moments(X, y, 1.0, 1.0, ridge200["h"], NINE_B, method)
        infl = np.diag(C_h) / np.diag(ridge200["cov"])
        assert np.all(np.abs(infl - 1) < NINE_ALLOW), infl


# ======================================================== memory-mapped data
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("method,access", [("tmu", "cyclic"), ("saga", "random"),
                                           ("svrg", "reshuffle")])
def test_memmap_gives_identical_draws(tmp_path, method, access, dtype):
    rng = np.random.default_rng(8)
    X = rng.normal(size=(500, 4)).astype(dtype)
    y = X @ [1.0, 0.5, -1.0, 2.0] + rng.normal(size=500)
    path = tmp_path / "X.dat"
    mm = np.memmap(path, dtype=dtype, mode="w+", shape=X.shape)
    mm[:] = X
    mm.flush()
    del mm
    Xm = np.memmap(path, dtype=dtype, mode="r", shape=X.shape)
    params = dict(subsampling=method, access=access, batch_size=25, noise_var=1.0,
                  n_chains=2, n_warmup=200, n_samples=300, random_state=3)
    a = SGMCMCRidge(**params).fit(X, y)
    b = SGMCMCRidge(**params).fit(Xm, y)
    assert_array_equal(_public_draws(a), _public_draws(b))
    assert a.n_grad_evals_ == b.n_grad_evals_
    # the engine reads the mapping in place: same draws from a RowData on it
    prob_mm = Problem(RowData(Xm, True), y, "gaussian", 1, (1.0,))
    prob = Problem(RowData(X, True), y, "gaussian", 1, (1.0,))
    control, periodic = CONTROL[method]
    th = np.zeros(5)
    outs = []
    for pr in (prob, prob_mm):
        est = GLMEstimator(pr, 25, access=access, control=control,
                           period=20 if periodic else 0, control_point=th)
        outs.append(_run_engine(pr, est, 1e-4, 500, 9, th, keep=True)[1])
    assert_array_equal(outs[0], outs[1])


def test_logistic_snapshot_dense_and_csr_agree():
    """The classifier takes the snapshot options; CSR and dense input give the
    same draws (same rows; the sums differ only by the skipped zeros)."""
    rng = np.random.default_rng(9)
    X = rng.normal(size=(300, 5))
    X[rng.random(X.shape) < 0.5] = 0.0
    y = (rng.random(300) < 0.5).astype(int)
    params = dict(subsampling="tmu", access="cyclic", batch_size=30, n_chains=2,
                  n_warmup=50, n_samples=100, random_state=0)
    dense = SGMCMCLogisticRegression(**params).fit(X, y)
    csr = SGMCMCLogisticRegression(**params).fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(_public_draws(csr), _public_draws(dense), rtol=1e-9, atol=1e-9)
    assert np.all(np.isfinite(_public_draws(dense)))


# ====================================================== SAGA with cyclic access
@pytest.mark.slow
def test_saga_cyclic_bias_is_the_method():
    """The variance inflation of SAGA-CA at the automatic step size is a
    property of PPU with a deterministic block order, not an engine bug.

    With cyclic blocks the table entries of the current block are exactly
    one pass (m = n/b steps, time tau = m h) old, and A lags by up to a
    pass: the drift becomes a delayed feedback whose bias is a function of
    m h lambda (not of h alone); it vanishes only when a pass is short
    against the stiffest relaxation time 1/lambda_max.  Here n = 400,
    b = 4 (m = 100) at h lambda_max = 0.08, the automatic step's regime:
    m h lambda_max = 8, the exact stationary variances of the coefficients
    are 1.3-1.5x the posterior's (3.4x along the stiffest direction), and
    the engine's draws reproduce the exact values; TMU-CA
    (refresh once per pass) and SVRG-CA stay within ULA's O(h).  At
    h lambda_max = 1e-3 (m h lambda = 0.1) SAGA-CA's bias is below 2%.
    """
    rng = np.random.default_rng(0)
    n, b = 400, 4
    X = rng.normal(size=(n, 2)) @ np.array([[1.0, 0.6], [0.0, 0.8]]) + [0.5, -0.3]
    y = X @ [1.0, -2.0] + 0.5 + rng.normal(size=n)
    _, post_cov, P = ref.ridge_posterior(X, y, 1.0, 1.0)
    lmax = np.linalg.eigvalsh(P).max()
    h = 0.08 / lmax
    infl = {}
    for method in METHODS:
        _, C_h = exact_cyclic_moments(X, y, 1.0, 1.0, h, b, method)
        infl[method] = np.diag(C_h) / np.diag(post_cov)
    assert infl["saga"].max() > 1.4
    assert np.all(np.abs(infl["tmu"] - 1) < 0.05) and np.all(np.abs(infl["svrg"] - 1) < 0.05)
    # thin = 101 is coprime with m = 100
    draws = _engine_draws(X, y, "saga", "cyclic", h, b, n_steps=3_030_000, n_warm=100_000,
                          thin=101, n_chains=4)
    _, C_h = exact_cyclic_moments(X, y, 1.0, 1.0, h, b, "saga")
    _assert_cov(draws, C_h, "saga-cyclic vs exact finite-h")
    _, C_small = exact_cyclic_moments(X, y, 1.0, 1.0, 1e-3 / lmax, b, "saga")
    assert np.all(np.abs(np.diag(C_small) / np.diag(post_cov) - 1) < 0.02)
