"""Chains on a dask cluster through joblib's ``dask`` backend.

``fit`` runs its chains with ``joblib.Parallel(n_jobs=self.n_jobs,
prefer="threads")`` on the module-level, picklable ``run_chain``.  Under
``joblib.parallel_config(backend="dask")`` the explicit backend wins over the
``prefer`` hint, so the chains run as dask tasks, here on a local cluster of
two worker *processes* (every argument and result crosses a process
boundary, as on a real cluster).  Each chain is seeded from its own
``SeedSequence`` child, so the draws equal those of ``n_jobs=1`` bit for bit.
"""
import numpy as np
import pytest
import scipy.sparse as sp

distributed = pytest.importorskip("distributed")
from joblib import parallel_config  # noqa: E402

from skbayes_sg import SGMCMCLogisticRegression, SGMCMCRidge  # noqa: E402


@pytest.fixture(scope="module")
def client():
    # two single-threaded worker processes: a cluster in miniature on 2 cores
    # (start-up takes a few seconds: the workers are spawned interpreters)
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None)
    client = distributed.Client(cluster)
    yield client
    client.close()
    cluster.close()


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
    """Chain steps run: joblib may batch several calls into one dask task
    (keys ``batch_of_run_chain_<k>_calls-...``)."""
    import re
    return sum(int(m.group(1)) if (m := re.search(r"run_chain_(\d+)_calls", str(t["key"])))
               else 1 for t in tasks)


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
    # joblib's dask backend scatters every large argument once per Parallel
    # object (not once per chain, nor per round): all chains receive the same X
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
