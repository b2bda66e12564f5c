"""The set-up policy (``skbayes_sg/_setup.py``) and the starts (``_starts.py``)
on their own, without a fit.

``SetupPolicy`` is made from a snapshot of the estimator's parameters and
resolves every ``"auto"`` setting of one fit into a ``FitSetup``: it reads
the estimator through nothing else, so a change to the estimator after the
policy was made does not reach it, and resolving writes nothing into the
estimator.  What it resolves is checked here on small contexts against
what the user guide says the defaults do; the statistical consequences are
tested through fits elsewhere (``test_metric.py``, ``test_high_dim.py``).
"""
import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

import skbayes_sg._setup as policy_rules
from skbayes_sg import SGMCMCLogisticRegression
from skbayes_sg._sampling._glm import GLM, LOGISTIC, SOFTMAX
from skbayes_sg._setup import (AUTO_BUDGET_PASSES, FitSetup, SetupPolicy, plan_rounds,
                               row_flops, target_ess_for)
from skbayes_sg._starts import divergence_bounds, start_points


def _logistic(n=300, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ rng.normal(size=d)))).astype(float)
    return X, y


def _context(est, X, y):
    return est._fit_context(X, y, GLM(LOGISTIC, 1), None)


def test_the_policy_is_a_snapshot_of_the_parameters():
    X, y = _logistic()
    est = SGMCMCLogisticRegression(sampler="sghmc", random_state=0)
    policy = est._setup_policy()
    ctx = _context(est, X, y)
    before = dict(vars(est))
    est.set_params(sampler="sgld")                  # after the snapshot
    setup = policy.resolve(ctx)
    assert isinstance(setup, FitSetup) and setup.sampler == "sghmc"
    est.set_params(sampler="sghmc")
    assert vars(est) == before                      # resolving wrote nothing into it


def test_the_defaults_resolve_as_the_user_guide_says():
    X, y = _logistic()
    est = SGMCMCLogisticRegression(random_state=0)
    setup = est._setup_policy().resolve(_context(est, X, y))
    # a small problem: exact gradients, HMC in the dense Laplace metric, Metropolis
    assert (setup.sampler, setup.subsampling, setup.metric["kind"], setup.metropolis) == (
        "sghmc-leapfrog", "full", "dense", True)
    # the identity metric: SGLD with uniform minibatches, no correction
    est = SGMCMCLogisticRegression(metric="identity", random_state=0)
    setup = est._setup_policy().resolve(_context(est, X, y))
    assert (setup.sampler, setup.subsampling, setup.metropolis) == ("sgld", "uniform", False)
    assert setup.sampler_config["step_size"] > 0


def test_auto_weighs_the_second_order_control(monkeypatch):
    """``subsampling="auto"`` takes the second-order control where the error
    model's cost per effective draw with it is at most ``TAYLOR_PREFERENCE``
    times the first-order one's and the sampling would read at least
    ``TAYLOR_WORTH_PASSES`` passes; not at large ``n`` (the sampling reads a
    fraction of a pass), not where its remainder is noisy (nearly separable
    breast cancer), never for more than one output."""
    def resolved(X, y, glm=GLM(LOGISTIC, 1), **params):
        est = SGMCMCLogisticRegression(random_state=0, **params)
        setup = est._setup_policy().resolve(est._fit_context(X, y, glm, None))
        return setup.subsampling

    X, y = _logistic(n=20000, d=20)
    assert resolved(X, y) == "cv2-preferential"
    X_big, y_big = _logistic(n=200000, d=20)
    assert resolved(X_big, y_big) == "cv-preferential"
    y3 = np.digitize(X @ np.linspace(-1, 1, 20), [-0.5, 0.5]).astype(float)
    assert resolved(X, y3, glm=GLM(SOFTMAX, 3)) == "cv-preferential"
    # the cost comparison decides (and not a rule about the data's size)
    monkeypatch.setattr(policy_rules, "TAYLOR_PREFERENCE", 0.0)
    assert resolved(X, y) == "cv-preferential"
    monkeypatch.undo()
    monkeypatch.setattr(policy_rules, "CHEAP_FIT_FLOPS", 0.0)        # no exact gradients
    monkeypatch.setattr(policy_rules, "FULL_GRADIENT_PREFERENCE", 0.0)
    Xb, yb = load_breast_cancer(return_X_y=True)
    Xb = StandardScaler().fit_transform(Xb)
    assert resolved(Xb, yb.astype(float), alpha=0.01) == "cv-preferential"
    assert resolved(*_logistic(n=2000, d=10)) == "cv2-preferential"


def test_a_setting_that_cannot_act_is_refused_before_any_work():
    X, y = _logistic()
    est = SGMCMCLogisticRegression(sampler="sgld", friction=2.0)
    ctx = _context(est, X, y)
    with pytest.raises(ValueError, match="friction=2.0 has no effect with sampler='sgld'"):
        est._setup_policy().resolve(ctx)
    assert ctx.n_grad_evals == 0 and not ctx.has_mode()


def test_starts_are_overdispersed_laplace_draws_within_the_bounds():
    X, y = _logistic()
    est = SGMCMCLogisticRegression(random_state=0)
    ctx = _context(est, X, y)
    policy = est._setup_policy()
    setup = policy.resolve(ctx)
    seeds = np.random.SeedSequence(0).spawn(5)
    starts = start_points(policy, ctx, setup, seeds)
    assert len(starts) == 4
    z = np.array(starts)
    # whitened coordinates: twice N(0, I), truncated at 3 sds
    assert np.all(np.abs(z) <= 6.0) and 1.3 < z.std() < 2.7
    bounds = divergence_bounds(policy, ctx, setup, starts)
    assert bounds["max_abs_z"] >= 2.0 * np.abs(z).max()


def test_the_automatic_budget_is_flops_and_their_seconds():
    X, y = _logistic(n=2000, d=30)
    est = SGMCMCLogisticRegression(random_state=0)
    ctx = _context(est, X, y)
    policy = est._setup_policy()
    setup = policy.resolve(ctx)
    plan = plan_rounds(policy.p, ctx, setup, continuing=False)
    assert AUTO_BUDGET_PASSES[0] <= plan.max_passes <= AUTO_BUDGET_PASSES[1]
    assert plan.auto_seconds >= 10.0 * 0.99
    assert plan.target_ess == target_ess_for("auto", ctx.dim)
    assert row_flops(ctx) == pytest.approx(2.0 * 30)
    given = plan_rounds(est.set_params(max_passes=500)._setup_policy().p, ctx, setup, False)
    assert given.max_passes == 500 and given.auto_seconds is None


def test_sparse_rows_take_the_lazy_path_in_the_identity_metric():
    rng = np.random.default_rng(1)
    X = sp.random(2000, 3000, density=2 / 3000, format="csr", random_state=2,
                  data_rvs=lambda k: rng.normal(size=k))
    y = (rng.random(2000) < 0.5).astype(float)
    est = SGMCMCLogisticRegression(metric="identity", batch_size=10, random_state=0)
    setup = est._setup_policy().resolve(_context(est, X, y))
    assert setup.lazy and setup.sampler == "sgld"


def test_the_mode_search_of_many_rows_starts_at_a_subsample_mode(monkeypatch):
    """From SUBSAMPLE_MODE_MIN_ROWS rows the dense Newton search starts at the
    mode of every 32nd row: the same mode (each search stops within
    MODE_TOL_SD posterior sds of it) for fewer passes over all rows."""
    from skbayes_sg._sampling import _context, _mode_search
    from skbayes_sg._sampling._glm import GLM, LOGISTIC
    from skbayes_sg._sampling._row_algebra import MODE_TOL_SD

    rng = np.random.default_rng(0)
    n, d = _mode_search.SUBSAMPLE_MODE_MIN_ROWS, 5
    X = rng.standard_normal((n, d))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-X @ rng.standard_normal(d)))).astype(float)

    def search():
        ctx = _context.FitContext(X, y, GLM(LOGISTIC, 1), 1.0, True, 10)
        return ctx.mode(), ctx.n_grad_evals / n, ctx

    started, passes, ctx = search()
    sd = np.sqrt(np.diag(np.linalg.inv(ctx._cache["hessian_mode"])))
    monkeypatch.setattr(_mode_search, "SUBSAMPLE_MODE_MIN_ROWS", n + 1)
    from_zero, passes_from_zero, _ = search()
    assert np.max(np.abs(started - from_zero) / sd) < 2 * MODE_TOL_SD
    assert passes < passes_from_zero - 1
    # the residuals at the mode are the last Newton pass's: no pass more
    before = ctx.n_grad_evals
    R, _ = ctx.residuals(started)
    assert ctx.n_grad_evals == before
    assert np.allclose(R[:, 0], 1.0 / (1.0 + np.exp(-(X @ started[:d] + started[d]))) - y)
    # the curvature kept is the exact Hessian at that mode (not the chord's)
    assert np.allclose(ctx._cache["hessian_mode"], ctx.hessian(started), rtol=1e-12, atol=0)


def _large_logistic(seed=0, d=5):
    from skbayes_sg._sampling import _mode_search
    rng = np.random.default_rng(seed)
    n = _mode_search.SUBSAMPLE_MODE_MIN_ROWS
    X = rng.standard_normal((n, d))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-X @ rng.standard_normal(d)))).astype(float)
    return X, y


def test_the_chord_steps_of_many_rows_take_one_gram(monkeypatch):
    """From the subsample's mode the search steps in the subsample's Hessian
    (passes without a Gram) and takes one Gram of all rows, at its end; a
    start Hessian that does not contract the steps (five times too large)
    hands over to exact Newton steps, which reach the same mode."""
    from skbayes_sg._sampling import _context
    from skbayes_sg._sampling._glm import GLM, LOGISTIC
    from skbayes_sg._sampling._row_algebra import MODE_TOL_SD

    X, y = _large_logistic(1)
    n = X.shape[0]
    from skbayes_sg._sampling import _row_algebra
    grams = []
    real_gram = _row_algebra.dense_gram

    def counted_gram(Xc, w, fit_intercept):     # every Gram's chunks go through it
        grams.append(Xc.shape[0])
        return real_gram(Xc, w, fit_intercept)

    monkeypatch.setattr(_row_algebra, "dense_gram", counted_gram)

    def search():
        grams.clear()
        ctx = _context.FitContext(X, y, GLM(LOGISTIC, 1), 1.0, True, 10)
        return ctx.mode(), ctx

    mode, ctx = search()
    # Grams over all rows (the Newton passes' chunks add up; the subsample's
    # Grams are a 32nd): one, the Hessian at the mode
    assert sum(grams) // n == 1
    H = ctx._cache["hessian_mode"]
    sd = np.sqrt(np.diag(np.linalg.inv(H)))

    real_start = _context.FitContext._subsample_mode

    def poor_start(self):
        theta, H_start = real_start(self)
        return theta, 5.0 * H_start
    monkeypatch.setattr(_context.FitContext, "_subsample_mode", poor_start)
    handed_over, ctx2 = search()
    assert sum(grams) // n >= 2                      # exact steps: a Gram each
    assert np.max(np.abs(handed_over - mode) / sd) < 2 * MODE_TOL_SD
    assert np.allclose(ctx2._cache["hessian_mode"], ctx2.hessian(handed_over), rtol=1e-12)


@pytest.mark.parametrize("model", ["softmax", "poisson"])
def test_the_chord_search_finds_the_mode_of_other_models(monkeypatch, model):
    """Three classes (K x K curvature blocks) and the Poisson model, with
    integer row weights: the chord search from the subsample's mode stops
    within its tolerance of the exact Newton search's mode, and keeps the
    exact Hessian there."""
    from skbayes_sg._sampling import _context, _mode_search
    from skbayes_sg._sampling._glm import POISSON, SOFTMAX
    from skbayes_sg._sampling._row_algebra import MODE_TOL_SD

    rng = np.random.default_rng(2)
    n, d = _mode_search.SUBSAMPLE_MODE_MIN_ROWS, 5
    X = rng.standard_normal((n, d))
    if model == "softmax":
        Z = X @ rng.standard_normal((d, 3))
        P = np.exp(Z - Z.max(axis=1, keepdims=True))
        P /= P.sum(axis=1, keepdims=True)
        glm, y = GLM(SOFTMAX, 3), (P.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
    else:
        glm, y = GLM(POISSON, 1), rng.poisson(np.exp(0.3 * X @ rng.standard_normal(d)))
    weights = rng.integers(1, 4, n).astype(float)

    def search():
        ctx = _context.FitContext(X, y.astype(float), glm, 1.0, True, 10, weights)
        return ctx.mode(), ctx

    chord, ctx = search()
    assert "mode_start" in ctx._cache                  # the subsample start was taken
    H = ctx._cache["hessian_mode"]
    assert np.allclose(H, ctx.hessian(chord), rtol=1e-10, atol=0)
    monkeypatch.setattr(_mode_search, "SUBSAMPLE_MODE_MIN_ROWS", n + 1)
    newton, _ = search()
    sd = np.sqrt(np.diag(np.linalg.inv(H)))
    assert np.max(np.abs(chord - newton) / sd) < 2 * MODE_TOL_SD


def test_dense_gram_is_the_gram_of_the_rows_with_the_constant():
    from skbayes_sg._sampling._row_algebra import dense_gram, dense_times

    rng = np.random.default_rng(3)
    X, w = rng.standard_normal((40, 6)), rng.random(40)
    A = rng.standard_normal((7, 3))
    Xe = np.hstack([X, np.ones((40, 1))])
    assert np.allclose(dense_gram(X, w, True), Xe.T @ (Xe * w[:, None]), rtol=1e-13)
    assert np.allclose(dense_gram(X, w, False), X.T @ (X * w[:, None]), rtol=1e-13)
    assert np.allclose(dense_gram(sp.csr_matrix(X), w, True), Xe.T @ (Xe * w[:, None]))
    assert np.allclose(dense_times(X, A, True), Xe @ A, rtol=1e-13)
    assert np.allclose(dense_times(X, A[:6], False), X @ A[:6], rtol=1e-13)


def test_a_quadratic_model_skips_the_subsample_start():
    """Ridge's potential is quadratic: Newton's first step from 0 lands on
    the mode, so the subsample's mode would cost passes and save none (3.09
    passes against 3.00 on 250,000 rows)."""
    from skbayes_sg._sampling import _context, _mode_search
    from skbayes_sg._sampling._glm import GAUSSIAN

    rng = np.random.default_rng(1)
    n, d = _mode_search.SUBSAMPLE_MODE_MIN_ROWS, 5
    X = rng.standard_normal((n, d))
    y = X @ rng.standard_normal(d) + rng.standard_normal(n)
    ctx = _context.FitContext(X, y, GLM(GAUSSIAN, 1), 1.0, True, 10)
    ctx.mode()
    assert ctx.n_grad_evals % n == 0    # whole passes only: no subsample
    assert "mode_start" not in ctx._cache



def test_the_passes_over_many_rows_use_every_core_and_keep_their_bits(monkeypatch):
    """From PARALLEL_MIN_ROWS rows the set-up's dense passes run their chunks
    on threads (over_row_chunks): the same bits as one thread (the results
    are summed in the chunks' order), and more than one thread at work."""
    import threading

    from skbayes_sg._sampling import _row_algebra
    from skbayes_sg._sampling._context import FitContext

    # a dask LocalCluster started by an earlier test leaves OMP_NUM_THREADS=1
    # in this process (distributed's pre-spawn environment)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    if _row_algebra.pass_threads() < 2:
        pytest.skip("one core: the passes run on one thread")
    rng = np.random.default_rng(4)
    n, d = _row_algebra.PARALLEL_MIN_ROWS, 6
    X = rng.standard_normal((n, d))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-X @ rng.standard_normal(d)))).astype(float)
    theta = 0.1 * rng.standard_normal(d + 1)
    L = np.triu(rng.standard_normal((d + 1, d + 1)))

    def passes():
        ctx = FitContext(X, y, GLM(LOGISTIC, 1), 1.0, True, 10)
        u, g, H = ctx._value_grad_hessian(theta)
        Q = ctx.metric_row_covariances("dense", L)
        return [np.array(u), g, H, ctx.weighted_gram(Q), Q,
                ctx._residual_moments(theta, Q, "fixed")]

    threads = set()
    real = _row_algebra.dense_gram

    def seen(*args):
        threads.add(threading.get_ident())
        return real(*args)
    monkeypatch.setattr(_row_algebra, "dense_gram", seen)
    parallel = passes()
    assert len(threads) >= 2
    monkeypatch.setattr(_row_algebra, "PARALLEL_MIN_ROWS", n + 1)
    threads.clear()
    sequential = passes()
    assert threads == {threading.get_ident()}
    for a, b in zip(parallel, sequential):
        assert np.array_equal(a, b)


def test_over_row_chunks_stops_at_an_error_and_reads_the_thread_limit(monkeypatch):
    from skbayes_sg._sampling import _row_algebra

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert _row_algebra.pass_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert _row_algebra.pass_threads() <= 2
    n = _row_algebra.PARALLEL_MIN_ROWS
    started = []

    def chunk(start, stop):
        started.append(start)
        if start == 0:
            raise KeyboardInterrupt
        import time
        time.sleep(0.001)
        return stop - start

    with pytest.raises(KeyboardInterrupt):
        list(_row_algebra.over_row_chunks(chunk, n, chunk=100))
    assert len(started) < n // 100          # the chunks not started were dropped
    assert sum(_row_algebra.over_row_chunks(lambda a, b: b - a, n, chunk=1000)) == n


def test_the_lowrank_metric_takes_the_directions_that_pay():
    """``_cheapest_lowrank`` on a spectrum given directly (converged Ritz
    pairs at both ends; three unconverged Ritz values standing for the
    bulk): it takes the prefix of candidates, farthest from 1 first, that
    minimises ``(gradient + LOWRANK_DIRECTION_COST dim k) sqrt(kappa_k)``.
    Rows dear against the metric's products: every candidate; cheaper rows:
    the far ones (like the text posteriors' 40 topic directions); cheap
    rows: never fewer than the earlier cap, ``2 nnz / (4 dim)`` and at
    least 8."""
    from types import SimpleNamespace

    from skbayes_sg._setup import (LOWRANK_DIRECTION_COST, _cheapest_lowrank,
                                   _lowrank_directions, _remaining_spectrum)
    dim = 10_000
    high = np.linspace(12.0, 2.0, 40)
    low = np.linspace(0.40, 0.62, 60)
    bulk = np.array([0.65, 1.0, 1.55])
    values = np.sort(np.concatenate([low, high, bulk]))
    in_bulk = np.isin(values, bulk)
    residuals = np.where(in_bulk, 1.0, 0.0)
    weights = np.where(in_bulk, (1.0 - 100.0 / dim) / 3, 1.0 / dim)

    def context(n):         # 13 non-zeros a row (only the count is read)
        X = SimpleNamespace(nnz=13 * n, shape=(n, dim))
        return SimpleNamespace(n=n, dim=dim, X=X, glm=SimpleNamespace(n_outputs=1))

    def cost(ctx, chosen):
        lo, hi = _remaining_spectrum(values, weights, chosen, dim)
        gradient = ctx.n * (policy_rules.ROW_COST_FIXED + policy_rules.ROW_COST_PER_NONZERO * 13)
        return (gradient + LOWRANK_DIRECTION_COST * dim * len(chosen)) * np.sqrt(hi / lo)

    every = _cheapest_lowrank(context(100_000), values, residuals, weights)
    assert len(every) == 100 and not np.any(in_bulk[every])
    top = _cheapest_lowrank(context(5_000), values, residuals, weights)
    assert 0 < len(top) <= 40 and np.all(values[top] >= 2.0)
    order = _lowrank_directions(values, residuals)
    cheap = _cheapest_lowrank(context(1_000), values, residuals, weights)
    np.testing.assert_array_equal(cheap, np.sort(order[:8]))
    for n in (1_000, 5_000, 10_000, 100_000):     # no other prefix from 8 on is cheaper
        ctx = context(n)
        taken = _cheapest_lowrank(ctx, values, residuals, weights)
        best = min(cost(ctx, np.sort(order[:k])) for k in range(8, len(order) + 1))
        assert cost(ctx, taken) == pytest.approx(best)
