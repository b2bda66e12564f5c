"""``fit`` on dask arrays (``skbayes_sg/_dask_fit.py``), on a local cluster of
two worker processes.

The set-up runs as passes on the workers (a pool of rows drawn ahead, the
classes, Newton's method); the chains sample on the pool, each reading it
from its own starting row, each row at most once, with the control
variate's sum taken from the whole data.
The draws are checked against an in-memory fit of the same rows with a
tolerance from both fits' effective sample sizes.
"""
import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
da = pytest.importorskip("dask.array")

from skbayes_sg import (SGMCMCLogisticRegression, SGMCMCNegativeBinomialRegressor,  # noqa: E402
                        SGMCMCPoissonRegressor, SGMCMCRidge)
from _dask_watch import killer, local_client, when_a_task_runs  # noqa: E402
from skbayes_sg.diagnostics import ess  # noqa: E402

# the tests' arrays come from numpy on the client (a real one reads its blocks from disk)
pytestmark = pytest.mark.filterwarnings("ignore:Sending large graph")


@pytest.fixture(scope="module")
def client():
    yield from local_client()


def _logistic_rows(n=40_000, d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[:, 1] *= 3.0                           # unequal scales: a non-trivial metric
    w = np.array([0.8, -0.3, 0.5, 0.0])[:d]
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(X @ w + 0.3)))).astype(int)
    return X, y


def _agree(ref, est, n_sds=4.0):
    """Means within ``n_sds`` Monte Carlo errors (from both fits' bulk ESS)
    and sds within the same multiple of their relative error."""
    def flat(e):
        return np.concatenate([e.coef_samples_.reshape(e.coef_samples_.shape[0],
                                                       e.coef_samples_.shape[1], -1),
                               e.intercept_samples_.reshape(
                                   e.intercept_samples_.shape[0],
                                   e.intercept_samples_.shape[1], -1)], axis=2)
    A, B = flat(ref), flat(est)
    ess_a = np.array([ess(A[:, :, j]) for j in range(A.shape[2])])
    ess_b = np.array([ess(B[:, :, j]) for j in range(B.shape[2])])
    a, b = A.reshape(-1, A.shape[2]), B.reshape(-1, B.shape[2])
    sd = a.std(axis=0)
    mean_err = np.abs(a.mean(axis=0) - b.mean(axis=0)) / sd
    mean_tol = n_sds * np.sqrt(1.0 / ess_a + 1.0 / ess_b)
    sd_err = np.abs(b.std(axis=0) / sd - 1.0)
    sd_tol = n_sds * np.sqrt(0.5 / ess_a + 0.5 / ess_b)
    assert np.all(mean_err < mean_tol), (mean_err, mean_tol)
    assert np.all(sd_err < sd_tol), (sd_err, sd_tol)


def test_logistic_on_dask_samples_the_whole_data_posterior(client):
    X, y = _logistic_rows()
    ref = SGMCMCLogisticRegression(random_state=0).fit(X, y)
    Xd = da.from_array(X, chunks=(5_000, 4))
    yd = da.from_array(y, chunks=5_000)
    est = SGMCMCLogisticRegression(random_state=1).fit(Xd, yd)
    _agree(ref, est)
    # both searches stop within 0.01 posterior sd of the mode
    sd = np.sqrt(np.diag(ref.laplace_cov_))
    assert np.all(np.abs(est.mode_ - ref.mode_).ravel() <= 0.02 * sd)
    # no chain read a row of the pool twice
    assert est.n_sampling_rows_ / est.n_chains <= est.pool_size_
    assert est.n_cluster_passes_ >= 3                    # classes, pool, Newton
    assert est.subsampling == "auto"                     # the user's settings are kept
    proba = est.predict_proba(Xd)                        # lazy, as before
    np.testing.assert_allclose(proba.compute(), est.predict_proba(X))


def test_a_pool_too_small_for_the_chains_is_drawn_again_larger(client, monkeypatch):
    from skbayes_sg import _dask_fit

    X, y = _logistic_rows(n=40_000)
    Xd, yd = da.from_array(X, chunks=(5_000, 4)), da.from_array(y, chunks=5_000)
    monkeypatch.setattr(_dask_fit, "POOL_ROWS", 20_000)       # chains read ~2e5 each
    est = SGMCMCLogisticRegression(random_state=1).fit(Xd, yd)
    # the first pool was given up: the kept one holds every chain's rows
    assert est.pool_size_ > 20_000
    assert est.n_sampling_rows_ / est.n_chains <= est.pool_size_
    ref = SGMCMCLogisticRegression(random_state=0).fit(X, y)
    _agree(ref, est)


def test_sparse_blocks_are_fitted_in_csr(client):
    import dask
    import scipy.sparse as sp

    rng = np.random.default_rng(2)
    n, d = 30_000, 12
    X = sp.random(n, d, density=0.25, format="csr", random_state=2)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(X @ rng.normal(size=d))))).astype(int)
    blocks = [da.from_delayed(dask.delayed(X.__getitem__)(slice(s, s + 6_000)),
                              shape=(6_000, d), dtype=np.float64, meta=sp.csr_matrix((0, d)))
              for s in range(0, n, 6_000)]
    ref = SGMCMCLogisticRegression(random_state=0).fit(X, y)
    est = SGMCMCLogisticRegression(random_state=1).fit(da.concatenate(blocks),
                                                       da.from_array(y, chunks=6_000))
    _agree(ref, est)


def test_fit_on_dask_never_brings_X_to_the_client(client, monkeypatch):
    X, y = _logistic_rows(n=20_000)
    Xd = da.from_array(X, chunks=(4_000, 4))
    # three string classes (softmax), encoded on the workers
    labels = np.array(["no", "yes", "maybe"])[y + (X[:, 0] > 1.0)]

    def refuse(*args, **kwargs):
        raise AssertionError("X was converted to numpy on the client")
    monkeypatch.setattr(da.Array, "__array__", refuse)
    est = SGMCMCLogisticRegression(random_state=0).fit(Xd, da.from_array(labels, chunks=4_000))
    assert list(est.classes_) == ["maybe", "no", "yes"]
    assert est.coef_.shape == (3, 4) and np.isfinite(est.coef_).all()


def test_a_dask_dataframe_is_fitted_and_predicted_with_its_column_names(client):
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    X, y = _logistic_rows(n=20_000)
    frame = pd.DataFrame(X, columns=["a", "b", "c", "d"])
    X_dd = dd.from_pandas(frame, npartitions=4)
    y_dd = dd.from_pandas(pd.Series(y, name="label"), npartitions=4)
    est = SGMCMCLogisticRegression(random_state=0).fit(X_dd, y_dd)
    assert list(est.feature_names_in_) == ["a", "b", "c", "d"]
    proba = est.predict_proba(X_dd)
    np.testing.assert_allclose(proba.compute(), est.predict_proba(frame))


def test_sample_weight_on_dask_equals_repeated_rows(client):
    rng = np.random.default_rng(3)
    n = 20_000
    X = rng.normal(size=(n, 3))
    y = rng.poisson(np.exp(0.4 * X[:, 0] - 0.2 * X[:, 2]))
    w = rng.integers(1, 3, size=n).astype(float)
    ref = SGMCMCPoissonRegressor(random_state=0).fit(np.repeat(X, w.astype(int), axis=0),
                                                     np.repeat(y, w.astype(int)))
    est = SGMCMCPoissonRegressor(random_state=0).fit(
        da.from_array(X, chunks=(5_000, 3)), da.from_array(y, chunks=5_000),
        sample_weight=da.from_array(w, chunks=5_000))
    _agree(ref, est)


def test_ridge_on_dask_at_its_defaults_is_the_exact_posterior(client):
    rng = np.random.default_rng(5)
    n, d = 30_000, 3
    X = rng.normal(size=(n, d)) * np.array([1.0, 0.1, 5.0])     # ill-conditioned
    y = X @ np.array([0.5, 2.0, -0.1]) + 1.0 + rng.normal(scale=2.0, size=n)
    memory = SGMCMCRidge(random_state=0).fit(X, y)
    est = SGMCMCRidge(random_state=0).fit(da.from_array(X, chunks=(6_000, d)),
                                          da.from_array(y, chunks=6_000))
    # the evidence from sums on the cluster is the in-memory evidence, alpha to
    # the precision of its maximum in float64: minus twice the log evidence is
    # ~1.3e5 here, rounded at ~1e-11, on a curvature of a few units in
    # log(alpha), a flat top ~3e-6 wide (the blocks' sums, in another order,
    # moved it 2.6e-6 with numpy 2.4); noise_var, fixed by n rows, to 1e-6
    np.testing.assert_allclose(est.alpha_, memory.alpha_, rtol=1e-5)
    np.testing.assert_allclose(est.noise_var_, memory.noise_var_, rtol=1e-6)
    # found for the fit, not written into the user's parameters
    assert est.get_params() == SGMCMCRidge(random_state=0).get_params()
    # the exact conjugate posterior at those settings
    Xa = np.hstack([X, np.ones((n, 1))])
    precision = Xa.T @ Xa / est.noise_var_ + est.alpha_ * np.eye(d + 1)
    cov = np.linalg.inv(precision)
    mean = cov @ (Xa.T @ y) / est.noise_var_
    draws = np.concatenate([est.coef_samples_, est.intercept_samples_[..., None]], axis=2)
    n_eff = np.array([ess(draws[:, :, j]) for j in range(d + 1)])
    sd = np.sqrt(np.diag(cov))
    flat = draws.reshape(-1, d + 1)
    assert np.all(np.abs(flat.mean(axis=0) - mean) / sd < 4.0 / np.sqrt(n_eff))
    assert np.all(np.abs(flat.std(axis=0) / sd - 1.0) < 4.0 * np.sqrt(0.5 / n_eff))


def test_negative_binomial_on_dask_finds_the_in_memory_shape(client):
    rng = np.random.default_rng(4)
    n = 30_000
    X = rng.normal(size=(n, 3))
    mu = np.exp(0.5 + X @ np.array([0.4, -0.3, 0.2]))
    y = rng.negative_binomial(2.5, 2.5 / (2.5 + mu))
    ref = SGMCMCNegativeBinomialRegressor(random_state=0).fit(X, y)
    est = SGMCMCNegativeBinomialRegressor(random_state=1).fit(
        da.from_array(X, chunks=(6_000, 3)), da.from_array(y, chunks=6_000))
    # both searches stop when the shape moves less than SHAPE_RTOL = 1e-3
    np.testing.assert_allclose(est.shape_, ref.shape_, rtol=2e-3)
    _agree(ref, est)


@pytest.mark.parametrize("classes", [2, 3])
def test_logistic_alpha_auto_on_dask_is_the_in_memory_evidence(client, classes):
    X, y = _logistic_rows(n=30_000)
    if classes == 3:
        y = y + (X[:, 2] > 0.5)                           # softmax: 10 parameters
    memory = SGMCMCLogisticRegression(alpha="auto", random_state=0).fit(X, y)
    est = SGMCMCLogisticRegression(alpha="auto", random_state=1).fit(
        da.from_array(X, chunks=(6_000, 4)), da.from_array(y, chunks=6_000))
    # the same Laplace evidence of every row, each alpha's mode by Newton passes
    # on the cluster; the two searches' modes stop 0.01 sd apart (MODE_TOL_SD),
    # which moves the maximum of this flat evidence (its own sd of log(alpha):
    # 0.63 and 0.45) by a little: 0.05 % and 0.2 % measured
    assert abs(np.log(est.alpha_ / memory.alpha_)) < 0.01
    # found for the fit, not written into the user's parameters
    assert est.get_params()["alpha"] == "auto"
    if classes == 2:
        _agree(memory, est)


def test_poisson_alpha_auto_on_dask_is_the_in_memory_evidence(client):
    """SGMCMCPoissonRegressor(alpha="auto") on a dask array: the logistic
    route's search (each alpha's mode by Newton passes on the cluster) finds
    the in-memory alpha_ (the modes' tolerance moves this flat maximum a
    little, as for the logistic)."""
    from skbayes_sg import SGMCMCPoissonRegressor
    rng = np.random.default_rng(5)
    X = rng.normal(size=(30_000, 4))
    y = rng.poisson(np.exp(0.2 + X @ np.array([0.3, -0.2, 0.0, 0.1]))).astype(float)
    memory = SGMCMCPoissonRegressor(alpha="auto", random_state=0).fit(X, y)
    est = SGMCMCPoissonRegressor(alpha="auto", random_state=1).fit(
        da.from_array(X, chunks=(6_000, 4)), da.from_array(y, chunks=6_000))
    assert abs(np.log(est.alpha_ / memory.alpha_)) < 0.01, (est.alpha_, memory.alpha_)
    assert est.get_params()["alpha"] == "auto"


def test_negative_binomial_alpha_auto_on_dask_at_a_given_shape(client):
    """The negative binomial's alpha="auto" at a given shape on a dask array
    is the Poisson route's search (its modes on the cluster) and finds the
    in-memory alpha_; with shape="auto" too (the searches alternate in
    memory) it is refused by name before any pass."""
    from skbayes_sg import SGMCMCNegativeBinomialRegressor
    rng = np.random.default_rng(5)
    X = rng.normal(size=(30_000, 4))
    mu = np.exp(0.2 + X @ np.array([0.3, -0.2, 0.0, 0.1]))
    y = rng.negative_binomial(2.0, 2.0 / (2.0 + mu)).astype(float)
    dX, dy = da.from_array(X, chunks=(6_000, 4)), da.from_array(y, chunks=6_000)
    memory = SGMCMCNegativeBinomialRegressor(alpha="auto", shape=2.0, random_state=0).fit(X, y)
    est = SGMCMCNegativeBinomialRegressor(alpha="auto", shape=2.0, random_state=1).fit(dX, dy)
    assert abs(np.log(est.alpha_ / memory.alpha_)) < 0.01, (est.alpha_, memory.alpha_)
    with pytest.raises(ValueError, match="alpha='auto' with shape='auto'"):
        SGMCMCNegativeBinomialRegressor(alpha="auto").fit(dX, dy)


def test_sample_y_on_dask_is_lazy_reproducible_and_centred(client):
    rng = np.random.default_rng(7)
    X = rng.normal(size=(3_000, 2))
    y = X @ np.array([1.0, -0.5]) + rng.normal(size=3_000)
    est = SGMCMCRidge(alpha=1.0, noise_var=1.0, random_state=0).fit(X, y)
    Xd = da.from_array(X, chunks=(1_000, 2))
    draws = est.sample_y(Xd, n_draws=400, random_state=3)
    assert isinstance(draws, da.Array) and draws.chunks[0] == Xd.chunks[0]
    values = draws.compute()
    np.testing.assert_array_equal(values, est.sample_y(Xd, n_draws=400,
                                                       random_state=3).compute())
    # each row's draws average to the predictive mean within their Monte
    # Carlo error (the noise, sd sqrt(noise_var), dominates the posterior's)
    sd = np.sqrt(est.noise_var_)
    assert np.all(np.abs(values.mean(axis=1) - est.predict(X)) < 5.0 * sd / np.sqrt(400))
    labels = SGMCMCLogisticRegression(random_state=0).fit(X, y > 0).sample_y(Xd)
    assert set(np.unique(labels.compute())) <= {False, True}


def test_fit_on_dask_refuses_what_it_cannot_keep_exact(client):
    X, y = _logistic_rows(n=2_000)
    Xd, yd = da.from_array(X, chunks=(500, 4)), da.from_array(y, chunks=500)
    with pytest.raises(ValueError, match="subsampling='full' is not available on a dask"):
        SGMCMCLogisticRegression(subsampling="full").fit(Xd, yd)
    with pytest.raises(ValueError, match="sample_weight contains NaN"):
        SGMCMCLogisticRegression().fit(Xd, yd, sample_weight=da.full(2_000, np.nan,
                                                                      chunks=500))
    X_nan = X.copy()
    X_nan[7, 1] = np.nan                  # drawn into the pool (2,000 rows, pool 300,000)
    with pytest.raises(ValueError, match="NaN or infinity"):
        SGMCMCLogisticRegression().fit(da.from_array(X_nan, chunks=(500, 4)), yd)
    with pytest.raises(ValueError, match="y must"):
        SGMCMCPoissonRegressor().fit(Xd, da.from_array(-np.ones(2_000), chunks=500))
    with pytest.raises(ValueError, match="unknown size"):
        SGMCMCLogisticRegression().fit(Xd[Xd[:, 0] > 0], yd[Xd[:, 0] > 0])


def _when_a_pass_runs(client, action):
    """As soon as a task of a Newton pass (``_block_terms``) is on a worker,
    ``action(address)`` once (in a thread)."""
    return when_a_task_runs(client, "_block_terms", action)


def test_a_worker_killed_in_a_pass_is_replaced_and_the_draws_are_unchanged(client):
    X, y = _logistic_rows(n=200_000)
    Xd, yd = da.from_array(X, chunks=(10_000, 4)), da.from_array(y, chunks=10_000)
    params = dict(n_samples=200, n_warmup=200, random_state=0)
    undisturbed = SGMCMCLogisticRegression(**params).fit(Xd, yd)
    watcher, hits = _when_a_pass_runs(client, killer(client))
    est = SGMCMCLogisticRegression(**params).fit(Xd, yd)
    watcher.join(1.0)
    client.wait_for_workers(2, timeout=60)      # the nanny restarts the worker
    assert hits, "no pass task was seen running: nothing was killed"
    # dask ran the lost blocks' tasks again and the fit went on: the same
    # pool, the same sums (in block order) up to the rounding of a block's
    # BLAS products on another worker process (1e-16), carried by the chains
    np.testing.assert_allclose(est.coef_samples_, undisturbed.coef_samples_,
                               rtol=1e-9, atol=1e-12)


def test_a_pass_dask_gives_up_on_raises_a_clear_error(client):
    from skbayes_sg.exceptions import ClusterError

    def set_allowed_failures(value, dask_scheduler=None):
        old, dask_scheduler.allowed_failures = dask_scheduler.allowed_failures, value
        return old

    X, y = _logistic_rows(n=200_000)
    Xd, yd = da.from_array(X, chunks=(10_000, 4)), da.from_array(y, chunks=10_000)
    old = client.run_on_scheduler(set_allowed_failures, 0)   # give up at the first death
    try:
        watcher, hits = _when_a_pass_runs(client, killer(client))
        with pytest.raises(ClusterError, match="ran on workers that died.*allowed-failures"):
            SGMCMCLogisticRegression(n_samples=200, n_warmup=200, random_state=0).fit(Xd, yd)
        watcher.join(1.0)
    finally:
        client.run_on_scheduler(set_allowed_failures, old)
        client.wait_for_workers(2, timeout=60)
    assert hits, "no pass task was seen running: nothing was killed"


def test_ctrl_c_in_a_pass_stops_the_fit_and_its_tasks(client, python_sigint):
    import os
    import signal
    import time

    X, y = _logistic_rows(n=200_000)
    Xd, yd = da.from_array(X, chunks=(10_000, 4)), da.from_array(y, chunks=10_000)
    watcher, hits = _when_a_pass_runs(client, lambda a: os.kill(os.getpid(), signal.SIGINT))
    est = SGMCMCLogisticRegression(random_state=0)
    with pytest.raises(KeyboardInterrupt):
        est.fit(Xd, yd)
    watcher.join(1.0)
    assert hits
    assert not hasattr(est, "coef_samples_")
    # the pool's settings, in force during the fit, are undone
    assert est.get_params() == SGMCMCLogisticRegression(random_state=0).get_params()
    end = time.monotonic() + 5.0          # the pass's tasks were cancelled
    while time.monotonic() < end and any(client.processing().values()):
        time.sleep(0.05)
    assert not any(client.processing().values())
