"""Predictions on dask arrays (issue 42, item 4): a dask array in, a lazy
dask array out, one task per block of rows, equal to the in-memory
prediction; errors that need no data (not fitted, wrong width) at once."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import NotFittedError

da = pytest.importorskip("dask.array")

from skbayes_sg import SGMCMCLogisticRegression, SGMCMCPoissonRegressor, SGMCMCRidge  # noqa: E402

SHORT = dict(n_chains=2, n_warmup=50, n_samples=30, random_state=0)


def _fit(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, y)


def _data(n=500, d=4, classes=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, d))
    y = (X @ rng.standard_normal((d, classes))).argmax(axis=1)
    return X, y


def _exploding(X, chunks):
    """A dask array of X's values whose blocks raise when computed."""
    def boom(block):
        raise RuntimeError("computed")
    return da.from_array(X, chunks=chunks).map_blocks(boom, dtype=float)


@pytest.mark.parametrize("classes", [2, 3])
def test_classifier_predictions_are_lazy_and_equal(classes):
    X, y = _data(classes=classes)
    est = _fit(SGMCMCLogisticRegression(**SHORT), X, y)
    Xd = da.from_array(X, chunks=(200, 2))          # column chunks are joined
    for name in ("predict_proba", "predict_log_proba", "decision_function", "predict"):
        out = getattr(est, name)(Xd)
        assert isinstance(out, da.Array), name
        assert out.chunks[0] == (200, 200, 100)
        assert np.allclose(out.compute(), getattr(est, name)(X), rtol=1e-12, atol=0), name
    lazy = est.predict_proba(_exploding(X, (200, 4)))   # builds the graph, runs nothing
    with pytest.raises(RuntimeError, match="computed"):
        lazy.compute()


def test_sparse_blocks_and_regressors():
    X, y = _data(d=5)
    Xs = da.from_array(X, chunks=(128, 5)).map_blocks(sp.csr_matrix, dtype=float)
    est = _fit(SGMCMCLogisticRegression(**SHORT), X, y)
    assert np.allclose(est.predict_proba(Xs).compute(), est.predict_proba(X), rtol=1e-12)
    t = X @ np.arange(5.0) + 0.3 * np.random.default_rng(1).standard_normal(len(X))
    ridge = _fit(SGMCMCRidge(**SHORT), X, t)
    mean, std = ridge.predict(da.from_array(X, chunks=128), return_std=True)
    assert isinstance(mean, da.Array) and isinstance(std, da.Array)
    ref_mean, ref_std = ridge.predict(X, return_std=True)
    assert np.allclose(mean.compute(), ref_mean) and np.allclose(std.compute(), ref_std)
    counts = np.random.default_rng(2).poisson(np.exp(0.2 * X[:, 0]))
    pois = _fit(SGMCMCPoissonRegressor(**SHORT), X, counts)
    assert np.allclose(pois.predict(da.from_array(X, chunks=100)).compute(), pois.predict(X))


def test_errors_that_need_no_data_are_raised_at_the_call():
    X, y = _data()
    with pytest.raises(NotFittedError):
        SGMCMCLogisticRegression().predict_proba(_exploding(X, (100, 4)))
    est = _fit(SGMCMCLogisticRegression(**SHORT), X, y)
    with pytest.raises(ValueError, match="features"):
        est.predict(da.zeros((10, 3), chunks=5))
    with pytest.raises(ValueError, match="2-d"):
        est.predict(da.zeros(10, chunks=5))


def test_the_network_predicts_on_dask_arrays():
    pytest.importorskip("torch")
    from skbayes_sg.neural_network import SGMCMCMLPClassifier

    X, y = _data(n=300, classes=3)
    clf = _fit(SGMCMCMLPClassifier(hidden_layer_sizes=(8,), n_samples=10, n_warmup=50,
                                   n_chains=2, random_state=0), X, y)
    Xd = da.from_array(X, chunks=100)
    out = clf.predict_proba(Xd)
    assert isinstance(out, da.Array)
    assert np.allclose(out.compute(), clf.predict_proba(X), rtol=1e-6)
    assert (clf.predict(Xd).compute() == clf.predict(X)).all()
