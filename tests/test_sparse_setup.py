"""The set-up on CSR rows at O(nnz) (issue 25, item 0b).

Every piece of :class:`FitContext` computed from the rows gives on CSR input
what it gives on the same rows dense (to rounding: the sparse products sum
in another order), for every model, with and without the intercept and
datum weights; the paths taken on long CSR rows (a Newton-CG mode search and
one Gram, Lanczos for the noise) agree with the dense ones to their
tolerances; a CSR fit densifies no row; the identity-step check runs at any
dim, in a bounded number of passes.
"""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_allclose

from skbayes_sg import SGMCMCLogisticRegression, SGMCMCPoissonRegressor, SGMCMCRidge
from skbayes_sg import _setup, _starts
from skbayes_sg._sampling import _context, _curvature, _mode_search, _row_algebra, _row_noise
from skbayes_sg._sampling._context import FitContext
from skbayes_sg._sampling._row_algebra import _sparse_row_forms
from skbayes_sg._sampling._spectrum import largest_eigenvalue
from skbayes_sg._sampling._glm import GAUSSIAN, GLM, LOGISTIC, POISSON, SOFTMAX

MODELS = {"logistic": (LOGISTIC, 1), "softmax": (SOFTMAX, 3), "poisson": (POISSON, 1),
          "gaussian": (GAUSSIAN, 1)}
TIGHT = dict(rtol=1e-9, atol=1e-10)


def _targets(model, n, rng):
    if model == "logistic":
        return rng.integers(0, 2, n).astype(np.float64)
    if model == "softmax":
        return rng.integers(0, 3, n).astype(np.float64)
    if model == "poisson":
        return rng.poisson(1.0, n).astype(np.float64)
    return rng.normal(size=n)


def _contexts(model, fit_intercept, weighted, n=120, d=6, seed=0):
    """The same problem as dense rows and as CSR rows, and a point."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X[rng.random((n, d)) < 0.5] = 0.0
    y = _targets(model, n, rng)
    weights = rng.uniform(0.5, 2.0, n) if weighted else None
    kind, K = MODELS[model]
    glm = GLM(kind, K, (0.6,) if kind == GAUSSIAN else ())
    dense = FitContext(X, y, glm, 0.9, fit_intercept, 10, weights)
    csr = FitContext(sp.csr_matrix(X), y, glm, 0.9, fit_intercept, 10, weights)
    return dense, csr, 0.3 * rng.normal(size=dense.dim)


def _exact_noise(ctx, E, kind, factor):
    """lambda_max of the whitened one-row noise of uniform rows, densely."""
    B = ctx.weighted_gram(E * ctx.n)
    F = factor if kind == "dense" else np.diag(factor)
    return np.linalg.eigvalsh(F.T @ B @ F)[-1]


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("model", list(MODELS))
def test_csr_pieces_equal_dense(model, fit_intercept, weighted):
    dense, csr, theta = _contexts(model, fit_intercept, weighted)
    assert not csr.gram_is_dear()        # short rows: the dense algebra's paths
    for a, b in zip(dense._value_grad_hessian(theta), csr._value_grad_hessian(theta)):
        assert_allclose(b, a, **TIGHT)
    assert_allclose(csr.hessian(theta), dense.hessian(theta), **TIGHT)
    assert_allclose(csr.hessian_diag(theta), dense.hessian_diag(theta), **TIGHT)
    W = dense.hessian_row_weights(theta, full=True)
    assert_allclose(csr.weighted_gram(W), dense.weighted_gram(W), **TIGHT)
    assert_allclose(csr.weighted_gram(np.ones(dense.n)), dense.weighted_gram(np.ones(dense.n)),
                    **TIGHT)
    # the mode: the same Newton iterates, the same Hessian there
    mode, csr_mode = dense.mode(), csr.mode()
    assert_allclose(csr_mode, mode, **TIGHT)
    assert_allclose(csr.hessian_at(csr_mode), dense.hessian_at(mode), **TIGHT)
    _, L = dense.laplace_metric("dense")
    _, D = dense.laplace_metric("diagonal")
    Q = dense.metric_row_covariances("dense", L)
    assert_allclose(csr.metric_row_covariances("dense", L), Q, **TIGHT)
    assert_allclose(csr.metric_row_covariances("diagonal", D),
                    dense.metric_row_covariances("diagonal", D), **TIGHT)
    assert_allclose(csr.hessian_trace_weights(csr_mode), dense.hessian_trace_weights(mode),
                    **TIGHT)
    assert_allclose(csr.leverages(csr_mode), dense.leverages(mode), **TIGHT)
    for control in ("none", "fixed", "snapshot"):
        E = dense.row_noise_moments(control, Q)
        assert_allclose(csr.row_noise_moments(control, Q), E, **TIGHT)
    E = dense.row_noise_moments("none", Q)
    assert csr.noise_per_row(E, None, "dense", L, 1.0) == pytest.approx(
        dense.noise_per_row(E, None, "dense", L, 1.0), rel=1e-9)
    assert csr.noise_per_row(E, None, "diagonal", D, 1.0) == pytest.approx(
        dense.noise_per_row(E, None, "diagonal", D, 1.0), rel=1e-9)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("model", list(MODELS))
def test_long_row_paths_agree_with_dense(model, fit_intercept, weighted, monkeypatch):
    """Rows long enough for a Gram to be dear (forced here): the mode by
    Newton-CG and one Gram is the optimum within its tolerance and the Hessian
    there is exact; the noise by Lanczos is the dense eigenvalue, within the
    1% it adds."""
    monkeypatch.setattr(_context, "GRAM_DEAR_RATIO", 0.0)
    dense, csr, _ = _contexts(model, fit_intercept, weighted, n=300, d=8)
    assert csr.gram_is_dear() and not dense.gram_is_dear()
    theta = csr.mode()
    H = dense.hessian(theta)
    _, g = dense.potential_and_grad(theta)
    assert np.sqrt(g @ np.linalg.solve(H, g)) <= _row_algebra.MODE_TOL_SD
    assert_allclose(csr.hessian_at(theta), H, **TIGHT)
    assert np.max(np.abs(theta - dense.mode()) / np.sqrt(np.diag(np.linalg.inv(H)))) < 0.01
    _, L = dense.laplace_metric("dense")
    _, D = dense.laplace_metric("diagonal")
    E = dense.row_noise_moments("none", dense.metric_row_covariances("dense", L))
    for kind, factor in (("dense", L), ("diagonal", D)):
        exact = _exact_noise(dense, E, kind, factor)
        assert csr.noise_per_row(E, None, kind, factor, 1.0) == pytest.approx(
            1.01 * exact, rel=5e-3)
    assert csr.hessian_max_eigenvalue(theta, tol=1e-6) == pytest.approx(
        np.linalg.eigvalsh(H)[-1], rel=1e-6)


@pytest.mark.parametrize("K", [1, 2])
def test_row_forms_short_and_long_rows(K):
    """x_i^T S_km x_i of CSR rows: pairs of non-zeros for short rows, a
    product for long ones (and empty rows), against the dense forms."""
    rng = np.random.default_rng(3)
    n, d = 60, 100
    X = sp.random(n, d, density=0.05, random_state=4, format="csr")
    X = sp.vstack([X, sp.random(5, d, density=0.6, random_state=5),
                   sp.csr_matrix((1, d))]).tocsr()          # long rows, an empty one
    A = rng.normal(size=(K * (d + 1), K * (d + 1)))
    S = A @ A.T
    Xe = np.hstack([X.toarray(), np.ones((X.shape[0], 1))])
    Sb = S.reshape(K, d + 1, K, d + 1)
    expected = np.einsum("ia,kamb,ib->ikm", Xe, Sb, Xe)
    assert_allclose(_sparse_row_forms(X, True, S, K), expected, rtol=1e-10, atol=1e-8)
    s = rng.uniform(0.5, 2.0, K * (d + 1))
    expected = np.einsum("ia,ka,ia->ik", Xe, s.reshape(K, d + 1), Xe)
    assert_allclose(np.einsum("ikk->ik", _sparse_row_forms(X, True, s, K)), expected,
                    rtol=1e-12)
    assert_allclose(_sparse_row_forms(X, False, S[:d, :d], 1)[:, 0, 0],
                    np.einsum("ia,ab,ib->i", Xe[:, :d], S[:d, :d], Xe[:, :d]), rtol=1e-10,
                    atol=1e-8)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_compiled_forms_take_any_csr_layout(index_dtype):
    """The compiled Gram and row forms on CSR rows as users build them:
    unsorted column indices, a column repeated within a row (the sparse
    product sums them), float32 values and 64-bit indices, against the
    dense rows; the Gram symmetric."""
    rng = np.random.default_rng(7)
    n, d = 40, 30
    lens = rng.integers(0, 8, n)
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(index_dtype)
    indices = rng.integers(0, d, indptr[-1]).astype(index_dtype)   # unsorted, repeats
    data = rng.normal(size=indptr[-1]).astype(np.float32)
    X = sp.csr_matrix((data, indices, indptr), shape=(n, d))
    assert not X.has_canonical_format
    dense = X.astype(np.float64).toarray()       # repeats summed (in float64)
    w = rng.uniform(0.5, 2.0, n)
    for fit_intercept in (False, True):
        G = _row_algebra._sparse_gram(X, w, fit_intercept)
        Xe = np.hstack([dense, np.ones((n, 1))]) if fit_intercept else dense
        assert_allclose(G, Xe.T @ (w[:, None] * Xe), rtol=1e-12, atol=1e-12)
        assert_allclose(G, G.T, rtol=0, atol=0)
        dext = Xe.shape[1]
        A = rng.normal(size=(2 * dext, 2 * dext))
        S = A @ A.T
        expected = np.einsum("ia,kamb,ib->ikm", Xe, S.reshape(2, dext, 2, dext), Xe)
        assert_allclose(_sparse_row_forms(X, fit_intercept, S, 2), expected,
                        rtol=1e-10, atol=1e-10)


def test_lanczos_finds_a_clustered_top():
    """A spectrum whose top is a cluster (random sparse rows): the Ritz value
    is within the tolerance's order in tens of products."""
    X = sp.random(2000, 150, density=0.05, random_state=0, format="csr")
    G = (X.T @ X).toarray()
    exact = np.linalg.eigvalsh(G)[-1]
    lam, n_products = largest_eigenvalue(lambda v: G @ v, 150, tol=1e-3)
    assert lam <= exact * (1 + 1e-12) and lam == pytest.approx(exact, rel=1e-2)
    assert n_products < 60


def _text_like(n=1500, d=60, nnz=20, seed=0, classes=2):
    rng = np.random.default_rng(seed)
    cols = rng.integers(0, d, size=n * nnz)
    X = sp.csr_matrix((rng.normal(size=n * nnz), (np.repeat(np.arange(n), nnz), cols)),
                      shape=(n, d))
    X.sum_duplicates()
    w = rng.normal(size=(d, classes))
    y = np.argmax(X @ w + rng.gumbel(size=(n, classes)), axis=1)
    return X, y


def test_csr_fit_densifies_no_row(monkeypatch):
    """Fits on long CSR rows (every set-up path for them: the mode, the dense
    and diagonal metrics, the noise, the identity-step check) never make a
    dense copy of rows: ``_dense_ext``, ``dense_gram_blocks`` and ``dense_times`` of
    CSR blocks and ``toarray`` of anything with the data's rows fail."""
    X, y = _text_like(d=300)               # rows of 20: the pairs of non-zeros
    X3, y3 = _text_like(classes=3, seed=1)  # of 60 columns: the products
    n = X.shape[0]
    def no_sparse(real):
        def dense_only(Xc, *args):
            assert not sp.issparse(Xc), "a CSR row block was densified"
            return real(Xc, *args)
        return dense_only

    def guarded(name):
        real = getattr(sp.csr_matrix, name)

        def method(self, *args, **kwargs):
            assert self.shape[0] != n, f"{name} of the data's rows"
            return real(self, *args, **kwargs)
        return method

    # every reader of the helpers that densify a row block
    densifiers = ("_dense_ext", "dense_gram_blocks", "dense_times")
    readers = [(module, name) for module in (_context, _mode_search, _curvature, _row_noise)
               for name in densifiers if hasattr(module, name)]
    assert {name for _, name in readers} == set(densifiers)
    for module, name in readers:
        monkeypatch.setattr(module, name, no_sparse(getattr(_row_algebra, name)))
    for name in ("toarray", "todense"):
        monkeypatch.setattr(sp.csr_matrix, name, guarded(name))
    with pytest.raises(AssertionError):
        X.toarray()                                  # the guard is live
    glm = GLM(LOGISTIC, 1)
    assert FitContext(X, y.astype(float), glm, 1.0, True, 50).gram_is_dear()
    short = dict(n_chains=1, n_warmup=20, n_samples=20, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = SGMCMCLogisticRegression(batch_size=50, **short).fit(X, y)
        assert est.metric_ == "dense" and est.subsampling_ == "cv-preferential"
        SGMCMCLogisticRegression(metric="diagonal", batch_size=50, **short).fit(X, y)
        SGMCMCLogisticRegression(batch_size=50, **short).fit(X3, y3)
        SGMCMCLogisticRegression(metric="identity", sampler="sgld", step_size=1e-3,
                                 init="zeros", batch_size=50, **short).fit(X, y)
        SGMCMCLogisticRegression(metric="identity", sampler="psgld", step_size=1e-5,
                                 init="mode", batch_size=50, **short).fit(X, y)
        counts = np.abs(np.round(X.sum(axis=1).A.ravel())).astype(int) % 4
        SGMCMCPoissonRegressor(batch_size=50, **short).fit(X, counts)
        SGMCMCRidge(alpha=1.0, noise_var=1.0, batch_size=50, **short).fit(
            X, np.asarray(X.sum(axis=1)).ravel())


def test_identity_step_check_runs_at_any_dim(monkeypatch):
    """A hand-set SGLD step in the identity metric is checked above the old
    limit of 2,000 parameters (no dense Hessian), in a few dozen passes."""
    X, y = _text_like(n=600, d=3000, nnz=10)
    products = []
    real = FitContext.hessian_vector

    def counted(self, hw, v):
        products.append(1)
        return real(self, hw, v)
    monkeypatch.setattr(FitContext, "hessian_vector", counted)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = SGMCMCLogisticRegression(metric="identity", sampler="sgld", step_size=5e-3,
                                       init="zeros", batch_size=20, n_chains=1, n_warmup=0,
                                       n_samples=10, random_state=0).fit(X, y)
    setup = est._fit_setup
    assert est.n_features_in_ + 1 > 2000
    assert setup.predicted_variance_error > _setup.STEP_ERROR_WARN
    advice = setup.advised_step
    assert 0 < advice < 5e-3
    assert len(products) <= 40


def test_identity_step_check_routes_agree(monkeypatch):
    """Where the dense route ran (the mode's Hessian at hand, few
    parameters), the iterative route predicts about the same error: the same
    mu (the mode's Hessian), the noise whitened by the diagonal Laplace
    metric instead of the dense one (the curvatures x_i^T beta make the
    features correlated in H: 13% apart here, 0.4-5% with weaker effects)."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(2000, 5))
    y = (X @ np.linspace(1.0, -1.0, 5) + rng.logistic(size=2000) > 0).astype(int)
    params = dict(metric="identity", sampler="sgld", subsampling="uniform", init="mode",
                  step_size=1e-4, batch_size=200, n_chains=1, n_warmup=0, n_samples=10,
                  random_state=0)

    def predict():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            setup = SGMCMCLogisticRegression(**params).fit(X, y)._fit_setup
        return setup.predicted_variance_error, setup.advised_step
    dense = predict()
    monkeypatch.setattr(_starts, "STEP_CHECK_DENSE_PASSES", 0)
    monkeypatch.setattr(_starts, "STEP_CHECK_DENSE_FLOPS", 0)
    iterative = predict()
    assert iterative[0] == pytest.approx(dense[0], rel=0.2)
    assert iterative[1] == pytest.approx(dense[1], rel=0.2)


@pytest.mark.parametrize("fit_intercept", [True, False])
def test_the_sparse_hessian_vector_product_is_scipys_and_ignores_the_cores(monkeypatch,
                                                                           fit_intercept):
    """The one-read CSR product (_sparse_forms.weighted_normal_product) gives
    the bits of scipy's two products on one part of the rows, and from
    PARALLEL_MIN_ROWS rows the same bits on one thread as on several (fixed
    parts, summed in order), close to scipy's."""
    rng = np.random.default_rng(5)

    def scipy_product(ctx, w, v):
        d = ctx.X.shape[1]
        r = w * (ctx.X @ v[:d] + (v[d] if fit_intercept else 0.0))
        out = np.zeros(ctx.dext)
        out[:d] = ctx.X.T @ r
        if fit_intercept:
            out[d] = r.sum()
        return ctx.alpha * v + out

    for n in (500, 2000):
        X = sp.random(n, 40, density=0.1, format="csr", random_state=n, dtype=np.float32)
        ctx = FitContext(X, (rng.random(n) < 0.5).astype(float), GLM(LOGISTIC, 1), 0.9,
                         fit_intercept, 10)
        w, v = rng.random(n), rng.standard_normal(ctx.dim)
        if n == 500:
            assert np.array_equal(ctx.hessian_vector(w, v), scipy_product(ctx, w, v))
            continue
        monkeypatch.setattr(_curvature, "PARALLEL_MIN_ROWS", 1000)    # four parts
        products = []
        for threads in (1, 2, 3):
            monkeypatch.setattr(_curvature, "pass_threads", lambda t=threads: t)
            products.append(ctx.hessian_vector(w, v))
        assert np.array_equal(products[0], products[1])
        assert np.array_equal(products[0], products[2])
        assert_allclose(products[0], scipy_product(ctx, w, v), rtol=1e-12, atol=1e-12)
