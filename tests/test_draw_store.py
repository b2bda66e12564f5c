"""Draws that fit: one store, a memory budget that thins and says so, running moments.

* The store (engine level): whatever the budget, it holds exactly the draws
  whose index (per chain) is a multiple of its stride, in order, and its
  moments are the mean and variance of *every* draw sent, to rounding.
* Through the estimator: a fit under a small ``draws_memory_limit`` stores
  every ``stride``-th draw of the same fit without a budget (the chains do
  not depend on what is stored: the same seed gives the same trajectory),
  warns, and reports ``thin_``; its ``coef_`` / ``coef_std_`` are those of
  every draw.  ``draws_dtype="float32"`` stores the float64 fit's draws
  rounded, with the same float64 moments.
"""
import pickle
import warnings

import numpy as np
import pytest

from skbayes_sg import SGMCMCLogisticRegression, SGMCMCRidge
from skbayes_sg._sampling._draws import (
    FLOAT32_FROM_DIM, DrawStore, resolve_budget, resolve_dtype)


def _feed(store, rows_per_chain, splits):
    """Send each chain's rows in rounds of the given sizes."""
    start = 0
    for size in splits:
        store.reserve(size)
        for c, rows in enumerate(rows_per_chain):
            store.sink(c).write(rows[start:start + size])
        start += size


@pytest.mark.parametrize("capacity_rows", [1000, 40, 17, 16])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_store_keeps_every_stride_th_draw_and_exact_moments(capacity_rows, dtype):
    rng = np.random.default_rng(0)
    n_chains, dim = 3, 5
    rows = [rng.normal(loc=100.0 * (c + 1), scale=0.01, size=(203, dim))
            for c in range(n_chains)]
    itemsize = np.dtype(dtype).itemsize
    store = DrawStore(n_chains, dim, dtype, capacity_rows * n_chains * dim * itemsize)
    _feed(store, rows, [7, 50, 1, 100, 45])
    stride = store.stride
    held = store.draws()
    assert held.dtype == dtype and held.shape[1] <= store.capacity
    for c in range(n_chains):
        np.testing.assert_array_equal(held[c], rows[c][::stride].astype(dtype))
    if capacity_rows >= 203:
        assert stride == 1
    else:
        assert stride > 1 and held.shape[1] > store.capacity // 2 - 1
    everything = np.concatenate(rows)
    mean, var = store.moments()
    # means near 100-300 with sds of 0.01: the shifted sums keep the variance exact
    np.testing.assert_allclose(mean, everything.mean(axis=0), rtol=1e-13)
    np.testing.assert_allclose(var, everything.var(axis=0), rtol=1e-8)


def test_a_sink_sent_to_another_process_carries_no_store():
    store = DrawStore(2, 3, np.float64, 1 << 20)
    remote = pickle.loads(pickle.dumps(store.sink(1)))
    assert remote.store is None and not remote.local and remote.chain == 1
    assert len(pickle.dumps(store.sink(1))) < 200


def test_auto_settings():
    assert resolve_dtype("auto", FLOAT32_FROM_DIM - 1) == np.float64
    assert resolve_dtype("auto", FLOAT32_FROM_DIM) == np.float32
    assert resolve_dtype("float32", 3) == np.float32
    assert 0 < resolve_budget("auto") <= 4 << 30
    assert resolve_budget(0.5) == 1 << 29


def _ridge_data(n=200, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    return X, X @ rng.normal(size=d) + rng.normal(size=n)


FIT = dict(n_samples=300, n_warmup=100, n_chains=2, random_state=0, noise_var=1.0,
           subsampling="uniform", batch_size=20)


def test_memory_budget_thins_says_so_and_keeps_exact_moments():
    X, y = _ridge_data()
    full = SGMCMCRidge(**FIT).fit(X, y)
    budget = 40 * 2 * 4 * 8 / (1 << 30)          # 40 draws x 2 chains x 4 parameters
    with pytest.warns(UserWarning, match=r"every 8-th was stored .*draws_memory_limit"):
        small = SGMCMCRidge(draws_memory_limit=budget, **FIT).fit(X, y)
    assert small.thin_ == 8 * full.thin_ and small.n_samples_ == 300 // 8 + 1
    np.testing.assert_array_equal(small.coef_samples_, full.coef_samples_[:, ::8])
    np.testing.assert_array_equal(small.intercept_samples_, full.intercept_samples_[:, ::8])
    # the moments are over every draw, as the unbudgeted fit's
    np.testing.assert_allclose(small.coef_, full.coef_, rtol=1e-12)
    np.testing.assert_allclose(small.coef_std_, full.coef_std_, rtol=1e-10)
    np.testing.assert_allclose(full.coef_, full.coef_samples_.mean(axis=(0, 1)), rtol=1e-12)
    np.testing.assert_allclose(full.coef_std_, full.coef_samples_.std(axis=(0, 1)), rtol=1e-10)
    np.testing.assert_allclose(full.intercept_std_, full.intercept_samples_.std(), rtol=1e-10)


def test_no_warning_without_thinning():
    X, y = _ridge_data()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        SGMCMCRidge(**FIT).fit(X, y)
    assert not [w for w in caught if "draws_memory_limit" in str(w.message)]


def test_float32_storage_rounds_the_same_draws():
    X, y = _ridge_data()
    rng = np.random.default_rng(1)
    yc = (X[:, 0] + rng.logistic(size=len(y)) > 0).astype(int)
    kw = dict(n_samples=200, n_warmup=100, n_chains=2, random_state=0)
    for Est, target in ((SGMCMCRidge, y), (SGMCMCLogisticRegression, yc)):
        wide = Est(draws_dtype="float64", **kw).fit(X, target)
        narrow = Est(draws_dtype="float32", **kw).fit(X, target)
        assert narrow.coef_samples_.dtype == np.float32
        assert narrow.intercept_samples_.dtype == np.float32
        np.testing.assert_array_equal(narrow.coef_samples_,
                                      wide.coef_samples_.astype(np.float32))
        np.testing.assert_array_equal(narrow.coef_, wide.coef_)
        np.testing.assert_allclose(narrow.predict(X[:5]), wide.predict(X[:5]), rtol=1e-5)


def test_auto_n_samples_rounds_fill_one_store():
    """n_samples="auto" samples in rounds: the stored draws are every round's,
    in order (the rounds' draws equal a fixed-length run of the same total)."""
    X, y = _ridge_data()
    auto = SGMCMCRidge(random_state=0, noise_var=1.0, n_chains=2, target_ess=1500).fit(X, y)
    n = auto.n_samples_
    fixed = SGMCMCRidge(random_state=0, noise_var=1.0, n_chains=2, n_samples=n,
                        n_warmup=auto.n_warmup_, thin=auto.thin_).fit(X, y)
    assert [e[0] for e in auto._warmup_log].count("sampling") >= 1
    np.testing.assert_allclose(auto.coef_, auto.coef_samples_.mean(axis=(0, 1)), rtol=1e-12)
    assert auto.coef_samples_.shape == fixed.coef_samples_.shape


def test_metric_windows_keep_their_draws_within_the_budget():
    """A metric window of 263,193 steps on 10^5 parameters (what lazy SGLD's
    warm-up asks for on the sparse benchmark) would keep 210 GB of draws at
    every step; thinned, it keeps WINDOW_BYTES (or the budget, if smaller),
    or MIN_WINDOW_DRAWS per chain when even those are larger."""
    from types import SimpleNamespace

    from skbayes_sg._sampling._schedule import MIN_WINDOW_DRAWS, WINDOW_BYTES, _window_thin

    pool = SimpleNamespace(n_chains=4)
    for budget, dim, window in ((1 << 32, 100_000, 263_193), (1 << 32, 10, 5_000),
                                (1 << 20, 1_000, 50_000), (1 << 32, 10 ** 6, 10_000)):
        plan = SimpleNamespace(dim=dim, max_draws_bytes=budget)
        thin = _window_thin(pool, plan, window)
        rows = window // thin
        nbytes = pool.n_chains * rows * dim * 8
        assert rows >= min(window, MIN_WINDOW_DRAWS) - 1
        if rows > MIN_WINDOW_DRAWS:
            assert nbytes <= min(budget, WINDOW_BYTES)
        if pool.n_chains * window * dim * 8 <= min(budget, WINDOW_BYTES):
            assert thin == 1
