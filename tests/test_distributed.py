"""Chains on a dask cluster under joblib's ``dask`` backend.

Under ``joblib.parallel_config(backend="dask")`` ``fit`` submits its chains
as dask tasks on the backend's client (``skbayes_sg/_sampling/_cluster.py``),
one per chain and round, calling the module-level, picklable ``run_chain``;
here on a local cluster of two worker *processes* (every argument and result
crosses a process boundary, as on a real cluster).  Each chain is seeded
from its own ``SeedSequence`` child, so the draws equal those of
``n_jobs=1`` bit for bit.
"""
import numpy as np
import pytest
import scipy.sparse as sp

distributed = pytest.importorskip("distributed")
from joblib import parallel_config  # noqa: E402

from _dask_watch import killer, local_client, when_a_task_runs  # noqa: E402
from skbayes_sg import SGMCMCLogisticRegression, SGMCMCRidge  # noqa: E402


@pytest.fixture(scope="module")
def client():
    yield from local_client()


def _data(sparse=False, n=400, d=5, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    if sparse:
        X[rng.random(X.shape) < 0.6] = 0.0
        X = sp.csr_matrix(X)
    w = rng.normal(size=d)
    return X, w, rng


def _on_dask(client, est, X, y):
    """Fit under the dask backend; return the estimator and the chain tasks run."""
    with distributed.get_task_stream(client) as stream, parallel_config(backend="dask"):
        est.fit(X, y)
    return est, [t for t in stream.data if "run_chain" in str(t["key"])]


def _calls(tasks):
    """Chain steps run: one task per chain and round."""
    return len(tasks)


def test_logistic_draws_on_dask_equal_serial_draws(client):
    X, w, rng = _data()
    y = (X @ w + rng.logistic(size=X.shape[0]) > 0).astype(int)
    params = dict(n_samples=150, n_warmup=150, n_chains=3, random_state=0)
    serial = SGMCMCLogisticRegression(n_jobs=1, **params).fit(X, y)
    # n_jobs=1 inside the dask context: the dask backend still runs one
    # task per chain (it ignores n_jobs and uses every worker)
    est, tasks = _on_dask(client, SGMCMCLogisticRegression(n_jobs=1, **params), X, y)
    # every chain ran as a dask task in every round (warm-up windows, sampling)
    assert _calls(tasks) >= 3 and _calls(tasks) % 3 == 0
    np.testing.assert_array_equal(est.coef_samples_, serial.coef_samples_)
    np.testing.assert_array_equal(est.intercept_samples_, serial.intercept_samples_)
    assert est.n_grad_evals_ == serial.n_grad_evals_
    assert est.step_size_ == serial.step_size_


def test_sparse_ridge_sghmc_and_warm_start_on_dask(client):
    X, w, rng = _data(sparse=True, seed=1)
    y = X @ w + rng.normal(size=X.shape[0])
    params = dict(sampler="sghmc", subsampling="cv", n_samples=100, n_warmup=100,
                  n_chains=2, random_state=3, warm_start=True)
    serial = SGMCMCRidge(**params).fit(X, y)
    serial.fit(X, y)                            # continue the chains
    est, _ = _on_dask(client, SGMCMCRidge(n_jobs=-1, **params), X, y)
    est, tasks = _on_dask(client, est, X, y)    # chain states went to the workers and back
    assert _calls(tasks) >= 2 and _calls(tasks) % 2 == 0
    np.testing.assert_array_equal(est.coef_samples_, serial.coef_samples_)
    np.testing.assert_array_equal(est.intercept_samples_, serial.intercept_samples_)


def test_X_is_sent_to_the_cluster_once_per_fit(client, monkeypatch):
    # the fit scatters X once (not once per chain, nor per round): all chains
    # receive the same X
    X, w, rng = _data(n=2000, d=20, seed=2)
    y = (X @ w > 0).astype(int)
    sent = []
    scatter = client.scatter

    def counting_scatter(data, *args, **kwargs):
        sent.append(data)
        return scatter(data, *args, **kwargs)

    monkeypatch.setattr(client, "scatter", counting_scatter)
    est = SGMCMCLogisticRegression(n_samples=50, n_warmup=50, n_chains=4, random_state=0)
    _, tasks = _on_dask(client, est, X, y)
    assert _calls(tasks) >= 4 and _calls(tasks) % 4 == 0
    big = [a for a in sent if getattr(a, "nbytes", 0) >= X.nbytes]
    assert len(big) == 1 and big[0] is X        # validate_data did not copy X either


def test_data_scattered_by_parallel_config_is_not_sent_again(client, monkeypatch):
    X, w, rng = _data(n=2000, d=20, seed=2)
    y = (X @ w > 0).astype(int)
    params = dict(n_samples=50, n_warmup=50, n_chains=2, random_state=0)
    serial = SGMCMCLogisticRegression(n_jobs=1, **params).fit(X, y)
    with parallel_config(backend="dask", scatter=[X, y]):
        sent = []
        scatter = client.scatter
        monkeypatch.setattr(client, "scatter",
                            lambda data, *a, **k: sent.append(data) or scatter(data, *a, **k))
        est = SGMCMCLogisticRegression(**params).fit(X, y)
    # the backend's future of X was used (y, re-encoded as floats by the
    # fit, is a new object: it is sent, a fraction 1 / n_features of X)
    assert not any(getattr(a, "nbytes", 0) >= X.nbytes for a in sent)
    np.testing.assert_array_equal(est.coef_samples_, serial.coef_samples_)


# --- the faults a cluster has -------------------------------------------------
# The chains run as the fit's own dask tasks (skbayes_sg/_sampling/_cluster.py):
# under joblib.Parallel a task dask gave up on (KilledWorker) made joblib 1.6
# wait forever. A fit that hangs must fail the test, not the suite, so fits
# that may hang run in a thread with a deadline.

def _long_fit_data():
    X, w, rng = _data(n=5000, d=10, seed=4)
    y = (X @ w + rng.logistic(size=X.shape[0]) > 0).astype(int)
    # a sampling round of about 1.5 s per chain: long enough to be hit mid-task
    return X, y, dict(n_samples=3000, n_warmup=100, n_chains=2, random_state=0)


def _when_a_chain_runs(client, action):
    """As soon as a chain's sampling task is processing on a worker (its key
    names the phase), ``action(address)`` once (in a thread)."""
    return when_a_task_runs(client, "run_chain-sampling", action)


def _fit_with_deadline(est, X, y, timeout=60.0):
    """Fit under the dask backend in a thread; return ``(finished, error)``."""
    import threading

    outcome = {}

    def fit():
        try:
            with parallel_config(backend="dask"):
                est.fit(X, y)
        except BaseException as exc:
            outcome["error"] = exc
        outcome["finished"] = True

    thread = threading.Thread(target=fit, daemon=True)
    thread.start()
    thread.join(timeout)
    return outcome.get("finished", False), outcome.get("error")


def test_a_worker_killed_mid_fit_is_retried_and_the_draws_are_unchanged(client):
    X, y, params = _long_fit_data()
    serial = SGMCMCLogisticRegression(n_jobs=1, **params).fit(X, y)
    watcher, hits = _when_a_chain_runs(client, killer(client))
    est = SGMCMCLogisticRegression(**params)
    finished, error = _fit_with_deadline(est, X, y)
    watcher.join(1.0)
    client.wait_for_workers(2, timeout=60)      # the nanny restarts the worker
    assert hits, "no chain task was seen running: nothing was killed"
    assert finished and error is None, error
    # the lost chain task ran again elsewhere from the same saved state
    np.testing.assert_array_equal(est.coef_samples_, serial.coef_samples_)
    np.testing.assert_array_equal(est.intercept_samples_, serial.intercept_samples_)


def test_a_chain_dask_gives_up_on_raises_a_clear_error(client):
    from skbayes_sg.exceptions import ClusterError

    def set_allowed_failures(value, dask_scheduler=None):
        old, dask_scheduler.allowed_failures = dask_scheduler.allowed_failures, value
        return old

    X, y, params = _long_fit_data()
    # dask gives up on a task at its first lost worker (KilledWorker)
    old = client.run_on_scheduler(set_allowed_failures, 0)
    try:
        watcher, hits = _when_a_chain_runs(client, killer(client))
        finished, error = _fit_with_deadline(SGMCMCLogisticRegression(**params), X, y)
        watcher.join(1.0)
    finally:
        client.run_on_scheduler(set_allowed_failures, old)
        client.wait_for_workers(2, timeout=60)
    assert hits, "no chain task was seen running: nothing was killed"
    assert finished, "the fit hung after its worker died"
    assert isinstance(error, ClusterError), repr(error)
    message = str(error)
    assert "workers that died" in message and "allowed-failures" in message
    assert "out of memory" in message and "fit again" in message


def test_ctrl_c_stops_the_fit_and_its_chains_on_the_cluster(client, python_sigint):
    import os
    import signal
    import time

    def executing(dask_worker):
        return len(dask_worker.state.executing)

    X, y, params = _long_fit_data()
    params["n_samples"] = 20000       # a sampling task of about 10 s a chain
    # a real SIGINT, as Ctrl-C sends (interrupt_main would not wake a wait)
    watcher, hits = _when_a_chain_runs(client, lambda address: os.kill(os.getpid(),
                                                                       signal.SIGINT))
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt), parallel_config(backend="dask"):
        SGMCMCLogisticRegression(**params).fit(X, y)
    assert time.monotonic() - start < 8.0      # not after the tasks ended
    watcher.join(1.0)
    assert hits
    # the round's tasks were cancelled, and the chains running on the
    # workers saw it within a segment (~0.1 s) and stopped
    end = time.monotonic() + 2.0
    while time.monotonic() < end and (any(client.processing().values())
                                        or any(client.run(executing).values())):
        time.sleep(0.05)
    assert not any(client.processing().values())
    assert not any(client.run(executing).values())
