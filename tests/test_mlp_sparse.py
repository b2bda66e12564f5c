"""Sparse (CSR) rows in the torch network, as ``MLPClassifier`` takes them.

The chains gather each minibatch (and each chunk of a full-data gradient)
from the CSR matrix and make it dense on the device
(:class:`~skbayes_sg.neural_network._torch_sampler.SparseRows`), so a fit on
sparse rows is the fit on the same rows given dense, draw for draw, for
every gradient estimator, with minibatches and with one full batch
(Metropolis-adjusted), through ``partial_fit`` and ``warm_start``, and at
the defaults (``temperature="auto"``); predictions, log-likelihoods and the
ArviZ export read sparse rows as the dense ones. A pipeline whose
``OneHotEncoder`` hands the network sparse columns fits and predicts.

The whole module is skipped without torch.
"""

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")

from sklearn.compose import make_column_transformer  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import OneHotEncoder, StandardScaler  # noqa: E402

from skbayes_sg.neural_network import SGMCMCMLPClassifier  # noqa: E402
from skbayes_sg.neural_network._torch_sampler import SparseRows  # noqa: E402

_SMALL = dict(hidden_layer_sizes=(6,), step_size=1e-3, batch_size=16,
              n_samples=5, n_warmup=10, thin=3, n_chains=2, temperature=1.0)


def _sparse_data(n=80, d=12, seed=0):
    """Rows with about 70 % zeros whose first columns carry the class."""
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 3
    X = rng.standard_normal((n, d)) * (rng.random((n, d)) < 0.3)
    X[:, 0] += y
    X[np.arange(n), 1 + y] += 1.0
    return X, y


def _same_fit(dense, sparse):
    np.testing.assert_array_equal(sparse.coef_samples_, dense.coef_samples_)
    assert sparse.n_grad_evals_ == dense.n_grad_evals_


def test_sparse_rows_select_and_slice_as_the_dense_tensor():
    X, _ = _sparse_data()
    dense = torch.as_tensor(X, dtype=torch.float32)
    rows = SparseRows(sp.csr_matrix(X), "cpu", torch.float32)
    idx = torch.tensor([5, 0, 79, 5, 33])
    assert rows.shape == X.shape and rows.dtype == torch.float32
    assert torch.equal(rows.index_select(0, idx), dense.index_select(0, idx))
    assert torch.equal(rows[10:20], dense[10:20])
    with pytest.raises(ValueError, match="dim 0"):
        rows.index_select(1, idx)
    # a matrix with a repeated column in a row (not canonical) reads as
    # scipy's dense form, and the user's matrix is left as it was
    dup = sp.csr_matrix((np.array([1.0, 2.0, 3.0]), np.array([1, 1, 0]), np.array([0, 2, 3])),
                        shape=(2, 3))
    assert not dup.has_canonical_format
    dense = torch.as_tensor(dup.toarray())
    rows = SparseRows(dup, "cpu", torch.float64)
    assert torch.equal(rows[0:2], dense)
    assert torch.equal(rows.index_select(0, torch.tensor([1, 0])), dense[[1, 0]])
    assert not dup.has_canonical_format


@pytest.mark.parametrize("sampler, subsampling", [
    ("sgld", "uniform"), ("sghmc", "uniform"), ("psgld", "ewsg"), ("sgld", "svrg"),
    ("sgld", "cv")])
def test_sparse_fit_is_the_dense_fit_draw_for_draw(sampler, subsampling):
    X, y = _sparse_data()
    kw = dict(_SMALL, sampler=sampler, subsampling=subsampling, map_epochs=2,
              random_state=3)
    dense = SGMCMCMLPClassifier(**kw).fit(X, y)
    sparse = SGMCMCMLPClassifier(**kw).fit(sp.csr_matrix(X), y)
    _same_fit(dense, sparse)
    Xs = sp.csr_matrix(X[:7])
    np.testing.assert_array_equal(sparse.predict_proba(Xs), dense.predict_proba(X[:7]))
    np.testing.assert_array_equal(sparse.predict(sp.csc_matrix(X[:7])), dense.predict(X[:7]))


def test_sparse_full_batch_metropolis_fit_and_float64():
    """One minibatch of every row (Metropolis-adjusted, the step adapted):
    the dense block is made once; float64 chains too."""
    X, y = _sparse_data(n=40)
    kw = dict(hidden_layer_sizes=(5,), n_samples=10, n_warmup=40, thin=1, n_chains=2,
              temperature=1.0, dtype="float64", random_state=1)
    dense = SGMCMCMLPClassifier(**kw).fit(X, y)
    assert dense.metropolis_
    sparse = SGMCMCMLPClassifier(**kw).fit(sp.csr_matrix(X), y)
    _same_fit(dense, sparse)
    assert sparse.step_size_ == dense.step_size_


def test_sparse_partial_fit_warm_start_and_exports():
    X, y = _sparse_data()
    Xs = sp.csr_matrix(X)
    kw = dict(_SMALL, random_state=0)
    dense = SGMCMCMLPClassifier(**kw).partial_fit(X, y, classes=[0, 1, 2])
    dense.partial_fit(X, y)
    sparse = SGMCMCMLPClassifier(**kw).partial_fit(Xs, y, classes=[0, 1, 2])
    sparse.partial_fit(Xs, y)
    _same_fit(dense, sparse)
    warm_dense = SGMCMCMLPClassifier(**dict(kw, warm_start=True)).fit(X, y).fit(X, y)
    warm_sparse = SGMCMCMLPClassifier(**dict(kw, warm_start=True)).fit(Xs, y).fit(Xs, y)
    _same_fit(warm_dense, warm_sparse)
    np.testing.assert_array_equal(warm_sparse.log_likelihood(Xs, y),
                                  warm_dense.log_likelihood(X, y))
    assert warm_sparse.score(Xs, y) == warm_dense.score(X, y)
    pytest.importorskip("arviz")
    idata_s = warm_sparse.to_inference_data(Xs, y)
    idata_d = warm_dense.to_inference_data(X, y)
    np.testing.assert_array_equal(idata_s.log_likelihood["y"].values,
                                  idata_d.log_likelihood["y"].values)


def test_sparse_default_fit_is_the_dense_default_fit():
    """At the defaults (``temperature="auto"`` on 300 rows: two candidates
    on four fifths, checked on the held-out fifth, then every row)."""
    X, y = _sparse_data(n=300, seed=1)
    kw = dict(hidden_layer_sizes=(8,), random_state=0, n_samples=20, thin=2, n_warmup=100,
              map_epochs=5)
    dense = SGMCMCMLPClassifier(**kw).fit(X, y)
    sparse = SGMCMCMLPClassifier(**kw).fit(sp.csr_matrix(X), y)
    _same_fit(dense, sparse)
    assert sparse.temperature_ == dense.temperature_


def test_pipeline_with_sparse_one_hot_columns():
    """A ``ColumnTransformer`` whose ``OneHotEncoder`` output is sparse (as
    it is by default on mostly categorical data) feeds the network."""
    rng = np.random.default_rng(0)
    n = 150
    cat = rng.integers(0, 8, size=(n, 3))
    num = rng.standard_normal((n, 1))
    y = (cat[:, 0] % 2) + (num[:, 0] > 0)
    data = np.hstack([cat, num])
    encode = make_column_transformer((OneHotEncoder(), [0, 1, 2]),
                                     (StandardScaler(), [3]), sparse_threshold=0.9)
    assert sp.issparse(encode.fit_transform(data))
    clf = make_pipeline(encode, SGMCMCMLPClassifier(**dict(_SMALL, random_state=0)))
    clf.fit(data, y)
    proba = clf.predict_proba(data[:10])
    assert proba.shape == (10, 3)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-6)
