"""The network's diagnostics: summary, check_convergence, to_inference_data
and the convergence warning at the end of fit, on permutation-invariant
quantities (the log-likelihood of fixed training rows, the layers' weight
norms), with the linear estimators' warning class and advice writer."""
import re
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_iris
from sklearn.preprocessing import scale

from skbayes_sg.diagnostics import MCMCConvergenceWarning, summary, to_inference_data
from skbayes_sg.diagnostics._advice import assess, recommend

pytest.importorskip("torch")
from skbayes_sg.neural_network import SGMCMCMLPClassifier  # noqa: E402

COLUMNS = ["mean", "sd", "5%", "50%", "95%", "ess_bulk", "ess_tail", "r_hat"]


@pytest.fixture(scope="module")
def iris():
    X, y = load_iris(return_X_y=True)
    return scale(X), y


@pytest.fixture(scope="module")
def short_fit(iris):
    """A 20-draw fit and the warnings its fit gave: the warning on the
    permutation-invariant quantities, that of a fit without held-out rows
    (``temperature=1.0``; at "auto" iris's 30 held-out rows check the
    prediction instead, tests/test_mlp_validation.py)."""
    X, y = iris
    est = SGMCMCMLPClassifier(hidden_layer_sizes=(8,), n_samples=20, n_warmup=200,
                              n_chains=2, temperature=1.0, random_state=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(X, y)
    return est, [w for w in caught if issubclass(w.category, MCMCConvergenceWarning)]


def test_a_20_draw_fit_warns_like_the_linear_estimators(short_fit):
    est, caught = short_fit
    assert len(caught) == 1
    text = str(caught[0].message)
    assert re.search(r"The draws are worth \d+ independent ones for '[^']+' \(the smallest "
                     r"(bulk|tail) effective sample size", text), text
    assert "short of the target 200 (100 per chain x 2 chains) with n_samples=20." in text
    advice = recommend(est, assess(est))
    assert advice["n_samples"] > 20
    assert f"Use n_samples={advice['n_samples']} or more, or thin={advice['thin']}" in text
    # no n_samples='auto' for the network: it has none
    assert "'auto'" not in text
    # nor the linear models' caveat of chains sharing a start (init='prior'):
    # each network chain starts from its own initialisation
    assert "init=" not in text


def test_check_convergence_says_what_the_fit_said(short_fit):
    est, caught = short_fit
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert est.check_convergence() is False
    texts = [str(w.message) for w in record]
    assert all(issubclass(w.category, MCMCConvergenceWarning) for w in record)
    assert " ".join(texts) == str(caught[0].message)


def test_summary_rows_are_permutation_invariant_quantities(short_fit):
    est, _ = short_fit
    table = est.summary()
    assert list(table.index) == ["log_likelihood", "weight_norm[1]", "weight_norm[2]"]
    assert list(table.columns) == COLUMNS
    draws, labels = est.convergence_quantities()
    assert draws.shape == (2, 20, 3)
    # the log-likelihood row is the (validated) per-draw log-likelihood of the rows
    X_rows, y_rows = est._diagnostic_rows
    assert X_rows.shape[0] == 150                     # all of iris: fewer than 1000 rows
    ll = est._draw_log_likelihood(X_rows, est.classes_[y_rows])
    np.testing.assert_allclose(draws[:, :, 0], ll)
    np.testing.assert_allclose(np.asarray(table["mean"])[0], ll.mean(), rtol=1e-10)
    W1, W2 = est.unpack_params(est.coef_samples_[1, 7])[0]
    np.testing.assert_allclose(draws[1, 7, 1:], [np.linalg.norm(W1), np.linalg.norm(W2)],
                               rtol=1e-5)
    # the module function gives the same table
    np.testing.assert_array_equal(np.asarray(summary(est).values), np.asarray(table.values))


def test_permuting_hidden_units_leaves_the_summary_unchanged(short_fit):
    """Relabelling the hidden units of every draw (a different but equivalent
    mode for each chain) changes the weights, not the quantities checked."""
    est, _ = short_fit
    before = np.asarray(est.summary().values)
    saved = est.coef_samples_
    rng = np.random.default_rng(0)
    permuted = saved.copy()
    for c in range(saved.shape[0]):
        perm = rng.permutation(8)              # one relabelling per chain
        for d in range(saved.shape[1]):
            (W1, W2), (b1, b2) = est.unpack_params(saved[c, d])
            permuted[c, d] = np.concatenate([W1[:, perm].ravel(), b1[perm],
                                             W2[perm].ravel(), b2])
    assert not np.allclose(permuted, saved)
    quantities = est.convergence_quantities()[0]
    try:
        est.coef_samples_ = permuted            # a new array: the cache is refreshed
        after = np.asarray(est.summary().values)
        quantities_after = est.convergence_quantities()[0]
    finally:
        est.coef_samples_ = saved
    # the quantities themselves: equal but for the order of float32 sums
    np.testing.assert_allclose(quantities_after, quantities, rtol=1e-6)
    exact = [COLUMNS.index(c) for c in ("mean", "sd", "5%", "50%", "95%", "ess_bulk")]
    np.testing.assert_allclose(after[:, exact], before[:, exact], rtol=1e-5, atol=1e-5)
    # the tail statistics fold the draws about their median, from which the
    # two middle draws (always an even count) are equidistant: whether they
    # tie is the last bit of that sum, which moves R-hat by ~0.2% here
    tail = [COLUMNS.index(c) for c in ("ess_tail", "r_hat")]
    np.testing.assert_allclose(after[:, tail], before[:, tail], rtol=1e-2)


def test_mixed_draws_pass_silently(short_fit):
    """Independent draws around one network pass the check: the warning is
    not raised by every fit."""
    est, _ = short_fit
    saved = est.coef_samples_
    rng = np.random.default_rng(1)
    centre = saved[0, -1]
    iid = centre + 0.05 * rng.standard_normal((2, 400, saved.shape[2]))
    try:
        est.coef_samples_ = iid.astype(np.float32)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert est.check_convergence() is True
    finally:
        est.coef_samples_ = saved


@pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto")
def test_to_inference_data(short_fit, iris):
    az = pytest.importorskip("arviz")
    est, _ = short_fit
    X, y = iris
    idata = est.to_inference_data(X[:30], y[:30], posterior_predictive=True, random_state=0)
    post = idata.posterior
    assert post["W1"].shape == (2, 20, 4, 8) and post["b2"].shape == (2, 20, 3)
    (W1, W2), (b1, b2) = est.unpack_params(est.coef_samples_[1, 3])
    np.testing.assert_array_equal(post["W1"].values[1, 3], W1)
    np.testing.assert_array_equal(post["b2"].values[1, 3], b2)
    assert post["weight_norm"].shape == (2, 20, 2)
    # the pointwise log-likelihood sums to the draws' log-likelihood of the rows
    ll = idata.log_likelihood["y"].values
    assert ll.shape == (2, 20, 30)
    np.testing.assert_allclose(ll.sum(axis=2), est._draw_log_likelihood(X[:30], y[:30]),
                               rtol=1e-5)
    pp = idata.posterior_predictive["y"].values
    assert pp.shape == (2, 20, 30) and set(np.unique(pp)) <= set(est.classes_)
    assert np.isfinite(az.loo(idata).elpd_loo)
    # the module function hands the network to its own export
    other = to_inference_data(est, X[:5])
    assert "posterior_predictive" in other.groups() and "log_likelihood" not in other.groups()
    with pytest.raises(ValueError, match="needs X"):
        est.to_inference_data(y=y)


def test_posterior_predictive_has_the_draws_class_probabilities(short_fit, iris):
    """The predictive classes follow each draw's probabilities: averaged over
    many draws of one fixed row, the class frequencies match the model
    average (tolerance: 5 binomial sds)."""
    pytest.importorskip("arviz")
    est, _ = short_fit
    X, _ = iris
    rows = np.repeat(X[[0, 60, 120]], 200, axis=0)
    pp = est.to_inference_data(rows, random_state=3).posterior_predictive["y"].values
    pp = pp.reshape(-1, 3, 200).transpose(1, 0, 2).reshape(3, -1)     # per row
    proba = est.predict_proba(X[[0, 60, 120]])
    n = pp.shape[1]
    for i in range(3):
        freq = np.array([(pp[i] == c).mean() for c in est.classes_])
        sd = np.sqrt(proba[i] * (1 - proba[i]) / n) + 1e-3
        assert np.all(np.abs(freq - proba[i]) < 5 * sd), (freq, proba[i])


@pytest.mark.filterwarnings("ignore:Estimated shape parameter of Pareto")
@pytest.mark.filterwarnings("ignore:PSIS-LOO is unreliable")   # a 20-draw fit
def test_loo_of_the_estimator_is_loo_of_its_export(short_fit, iris):
    """``loo(mlp, X, y)`` works as for every estimator (it raised "has no
    pointwise log likelihood") and equals ``loo`` of the export, also through
    a pipeline; ``compare`` takes networks too."""
    pytest.importorskip("arviz")
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import FunctionTransformer

    from skbayes_sg.diagnostics import compare, loo
    est, _ = short_fit
    X, y = iris
    direct = loo(est, X[:40], y[:40])
    exported = loo(est.to_inference_data(X[:40], y[:40]))
    assert direct.pareto_k.shape == (40,)
    np.testing.assert_allclose(direct.elpd_loo_i, exported.elpd_loo_i, rtol=1e-10)
    assert np.isfinite(direct.elpd_loo)
    pipe = make_pipeline(FunctionTransformer(lambda Z: Z * 2.0).fit(X), est)
    piped = loo(pipe, X[:40] / 2.0, y[:40])
    np.testing.assert_allclose(piped.elpd_loo_i, direct.elpd_loo_i, rtol=1e-10)
    table = compare({"net": est, "same": est}, X[:40], y[:40])
    assert len(table) == 2
    with pytest.raises(ValueError, match="labels not in classes_"):
        loo(est, X[:5], np.array([9, 9, 9, 9, 9]))


def test_model_average_error_reads_the_network(short_fit, iris):
    """The network's draws through ``model_average_error``: its log-loss is
    that of ``predict_proba``, one piece per chain."""
    from skbayes_sg.diagnostics import model_average_error

    est, _ = short_fit
    X, y = iris
    result = model_average_error(est, X, y)
    p = est.predict_proba(X)[np.arange(len(y)), np.searchsorted(est.classes_, y)]
    assert result.log_loss == pytest.approx(-np.mean(np.log(p)), rel=1e-5)
    assert result.n_pieces == est.coef_samples_.shape[0]
    assert np.isfinite(result.bias) and result.se >= 0.0


def test_the_warning_points_to_the_prediction_check(short_fit):
    """The weight norms' R-hat can fail while the prediction has settled:
    the warning names the check that says which."""
    _, caught = short_fit
    assert caught
    assert "model_average_error(clf, X_val, y_val)" in str(caught[0].message)
