"""Convergence diagnostics: ESS, R-hat, summary, check_convergence, ArviZ export.

Known answers:

* independent draws: bulk ESS close to the number of draws, R-hat close to 1;
* a stationary Gaussian AR(1) chain with lag-one correlation rho has
  integrated autocorrelation time (1 + rho) / (1 - rho), hence ESS
  ``N (1 - rho) / (1 + rho)`` (larger than N for rho < 0);
* chains with different means, or different scales (the folded "tail"
  R-hat), or a trend inside a chain (the split): R-hat well above 1;
* rank normalisation makes ESS and R-hat invariant under any increasing
  transformation of the draws.

And, when ArviZ is installed, agreement with ``arviz.ess`` / ``arviz.rhat``
on the same arrays to rounding.
"""
import sys
import warnings

import numpy as np
import pytest
from scipy.signal import lfilter
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skbayes_sg import SGMCMCLogisticRegression, SGMCMCRidge
from skbayes_sg.diagnostics._arviz import to_inference_data
from skbayes_sg.diagnostics import check_convergence
from skbayes_sg.diagnostics._advice import RunReport
from skbayes_sg.diagnostics._convergence import (
    MCMCConvergenceWarning, SummaryTable, ess, rhat, summary)


def _ar1(rng, rho, shape):
    """Stationary Gaussian AR(1) chains along axis 1, unit marginal variance."""
    m, n = shape[:2]
    e = rng.standard_normal(shape) * np.sqrt(1.0 - rho ** 2)
    e[:, 0] = rng.standard_normal((m,) + shape[2:])          # stationary start
    return lfilter([1.0], [1.0, -rho], e, axis=1)


def _arviz():
    az = pytest.importorskip("arviz")
    return az


# --------------------------------------------------------------------- ArviZ
ARRAYS = {
    "iid": lambda rng: rng.normal(size=(4, 1000, 5)),
    "ar0.9_odd": lambda rng: _ar1(rng, 0.9, (4, 1001, 3)),
    "ar0.99": lambda rng: _ar1(rng, 0.99, (3, 500, 3)),
    "antithetic": lambda rng: _ar1(rng, -0.7, (2, 301, 3)),
    "cauchy": lambda rng: rng.standard_cauchy(size=(4, 200, 3)),
    "shifted": lambda rng: rng.normal(size=(4, 300, 2)) + np.arange(4)[:, None, None],
    "ties": lambda rng: rng.integers(0, 3, size=(4, 100, 3)).astype(float),
    "short": lambda rng: _ar1(rng, 0.5, (2, 9, 2)),
    "matrix_params": lambda rng: _ar1(rng, 0.6, (3, 200, 2, 3)),
}


@pytest.mark.parametrize("case", sorted(ARRAYS))
def test_ess_and_rhat_match_arviz(case):
    az = _arviz()
    draws = ARRAYS[case](np.random.default_rng(0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = az.convert_to_dataset(draws)
        for method in ("bulk", "tail", "mean"):
            expected = az.ess(data, method=method)["x"].values
            np.testing.assert_allclose(ess(draws, method), expected, rtol=1e-10,
                                       err_msg=method)
        np.testing.assert_allclose(ess(draws, relative=True),
                                   az.ess(data, relative=True)["x"].values, rtol=1e-10)
        np.testing.assert_allclose(rhat(draws), az.rhat(data)["x"].values, rtol=1e-12)


# --------------------------------------------------------------- known cases
def test_iid_draws_have_ess_close_to_n_and_rhat_close_to_one():
    rng = np.random.default_rng(1)
    draws = rng.normal(size=(4, 1000, 40))
    rel = ess(draws, relative=True)
    # the relative ESS of i.i.d. draws fluctuates by ~5% per parameter
    assert abs(rel.mean() - 1.0) < 0.03
    assert np.all((rel > 0.75) & (rel < 1.25))
    assert np.all(ess(draws, "tail", relative=True) > 0.75)
    r = rhat(draws)
    assert np.all(r < 1.01) and abs(np.median(r) - 1.0) < 0.003


@pytest.mark.parametrize("rho", [0.5, 0.9, -0.5])
@pytest.mark.parametrize("method", ["bulk", "mean"])
def test_ar1_ess_matches_the_autocorrelation_time(rho, method):
    rng = np.random.default_rng(2)
    m, n, P = 4, 20_000, 10
    draws = _ar1(rng, rho, (m, n, P))
    expected = m * n * (1 - rho) / (1 + rho)
    values = ess(draws, method)
    # the estimate has a relative sd of roughly sqrt(2 tau / ESS-free lags):
    # a few percent here; averaged over 10 parameters, well under 10%
    assert abs(values.mean() / expected - 1) < 0.1, (values.mean(), expected)
    assert np.all(np.abs(values / expected - 1) < 0.25)
    assert np.all(rhat(draws) < 1.01)


def test_chains_with_different_means_have_large_rhat():
    rng = np.random.default_rng(3)
    draws = rng.normal(size=(4, 500, 3)) + np.array([0.0, 0.0, 0.0, 3.0])[:, None, None]
    assert np.all(rhat(draws) > 1.3)
    assert np.all(ess(draws) < 100)


def test_chains_with_different_scales_are_caught_by_the_folded_rhat():
    rng = np.random.default_rng(4)
    draws = rng.normal(size=(4, 2000)) * np.array([1.0, 1.0, 1.0, 4.0])[:, None]
    # the means agree: the bulk R-hat alone would pass
    from skbayes_sg.diagnostics._convergence import _rhat_basic, _split_chains, _z_scale
    a = np.ascontiguousarray(draws[None])
    assert _rhat_basic(_z_scale(_split_chains(a)))[0] < 1.01
    assert rhat(draws) > 1.05


def test_split_rhat_sees_a_trend_within_one_chain():
    rng = np.random.default_rng(5)
    n = 1000
    trend = rng.normal(size=n) + np.linspace(0.0, 3.0, n)
    assert rhat(trend) > 1.2                       # one chain: halves compared
    assert rhat(np.stack([trend, rng.normal(size=n)])) > 1.1


def test_rank_normalised_statistics_are_invariant_under_monotone_maps():
    rng = np.random.default_rng(6)
    draws = _ar1(rng, 0.8, (4, 500, 3))
    for f in (np.exp, lambda x: x ** 3, lambda x: 5 * x - 2):
        np.testing.assert_allclose(ess(f(draws)), ess(draws), rtol=1e-12)
        np.testing.assert_allclose(ess(f(draws), "tail"), ess(draws, "tail"), rtol=1e-12)
        np.testing.assert_allclose(rhat(f(draws)), rhat(draws), rtol=1e-12)


def test_shapes_and_degenerate_inputs():
    rng = np.random.default_rng(7)
    assert isinstance(ess(rng.normal(size=(4, 100))), float)
    assert isinstance(rhat(rng.normal(size=(4, 100))), float)
    assert isinstance(ess(rng.normal(size=100)), float)      # 1-D: one chain
    assert ess(rng.normal(size=(2, 50, 3, 4))).shape == (3, 4)
    assert rhat(rng.normal(size=(2, 50, 3, 4))).shape == (3, 4)

    draws = rng.normal(size=(4, 100, 3))
    draws[:, :, 1] = 2.5                                     # constant parameter
    draws[0, 7, 2] = np.nan                                  # one missing draw
    e, r = ess(draws), rhat(draws)
    assert np.isfinite(e[0]) and np.isfinite(r[0])
    assert e[1] == 400 and np.isnan(r[1])
    assert np.isnan(e[2]) and np.isnan(r[2]) and np.isnan(ess(draws, "tail")[2])
    assert np.isnan(ess(rng.normal(size=(4, 3)))) and np.isnan(rhat(rng.normal(size=(4, 3))))
    with pytest.raises(ValueError, match="method"):
        ess(draws, "median")
    with pytest.raises(ValueError, match="dimension"):
        ess(1.0)


def test_many_parameters_are_processed_in_blocks():
    from skbayes_sg.diagnostics import _convergence

    rng = np.random.default_rng(8)
    draws = _ar1(rng, 0.7, (2, 300, 25))
    whole = ess(draws)
    old = _convergence._BLOCK_ELEMENTS
    try:
        _convergence._BLOCK_ELEMENTS = 2 * 2 * 300 * 3      # 3 parameters per block
        np.testing.assert_array_equal(ess(draws), whole)
    finally:
        _convergence._BLOCK_ELEMENTS = old


# ------------------------------------------------------------------ estimators
NAMES = ["age", "dose", "weight"]


@pytest.fixture(scope="module")
def binary_fit():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y = (X @ [1.0, -1.0, 0.5] + rng.normal(size=300) > 0).astype(int)
    try:
        import pandas as pd
    except ImportError:      # the estimator then names the features x0, x1, x2
        pass
    else:
        X = pd.DataFrame(X, columns=NAMES)
    # the classical sampler, started at the mode: a fit that has not mixed
    return SGMCMCLogisticRegression(n_samples=120, n_warmup=200, random_state=0,
                                    metric="identity", sampler="sgld", subsampling="uniform",
                                    init="mode").fit(X, y)


def _names(fit):
    return [str(v) for v in getattr(fit, "feature_names_in_", ["x0", "x1", "x2"])]


@pytest.fixture(scope="module")
def multinomial_fit():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 2))
    y = np.array(["a", "b", "c"])[np.argmax(X @ [[1, -1, 0], [0, 1, -1]]
                                             + rng.gumbel(size=(300, 3)), axis=1)]
    return SGMCMCLogisticRegression(n_samples=80, n_warmup=100, n_chains=3,
                                    random_state=0).fit(X, y)


def _pooled(coef, icpt):
    """(chains, draws, params) with every output's coefficients then intercept."""
    if coef.ndim == 3:
        coef, icpt = coef[:, :, None], icpt[:, :, None]
    return np.concatenate([coef, icpt[..., None]], axis=3).reshape(
        coef.shape[0], coef.shape[1], -1)


def test_summary_binary_with_feature_names(binary_fit):
    table = summary(binary_fit)
    assert list(table.index) == _names(binary_fit) + ["intercept"]
    assert list(table.columns) == ["mean", "sd", "5%", "50%", "95%", "ess_bulk",
                                   "ess_tail", "r_hat"]
    draws = _pooled(binary_fit.coef_samples_, binary_fit.intercept_samples_)
    flat = draws.reshape(-1, 4)
    np.testing.assert_allclose(table["mean"], flat.mean(axis=0))
    np.testing.assert_allclose(np.asarray(table["mean"])[:3], binary_fit.coef_)
    np.testing.assert_allclose(table["sd"], flat.std(axis=0, ddof=1))
    np.testing.assert_allclose(table["95%"], np.quantile(flat, 0.95, axis=0))
    np.testing.assert_allclose(table["ess_bulk"], ess(draws))
    np.testing.assert_allclose(table["ess_tail"], ess(draws, "tail"))
    np.testing.assert_allclose(table["r_hat"], rhat(draws))


def test_summary_options(binary_fit):
    table = summary(binary_fit, quantiles=(0.025, 0.975), names=["a", "b", "c"])
    assert list(table.index) == ["a", "b", "c", "intercept"]
    assert "2.5%" in table.columns and "97.5%" in table.columns
    with pytest.raises(ValueError, match="names has 2"):
        summary(binary_fit, names=["a", "b"])
    with pytest.raises(ValueError, match="quantiles"):
        summary(binary_fit, quantiles=(5, 95))
    with pytest.raises(NotFittedError):
        summary(SGMCMCRidge())


def test_summary_multinomial_rows_are_class_qualified(multinomial_fit):
    table = summary(multinomial_fit)
    assert list(table.index) == [f"{name}[{cls}]" for cls in "abc"
                                 for name in ("x0", "x1", "intercept")]
    draws = _pooled(multinomial_fit.coef_samples_, multinomial_fit.intercept_samples_)
    np.testing.assert_allclose(np.asarray(table["r_hat"]), rhat(draws))
    np.testing.assert_allclose(np.asarray(table["mean"]),
                               draws.reshape(-1, draws.shape[2]).mean(axis=0))


def test_summary_without_intercept_and_of_a_pipeline():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 2))
    y = X @ [1.0, 2.0] + rng.normal(size=200)
    reg = make_pipeline(StandardScaler(), SGMCMCRidge(fit_intercept=False, n_samples=50,
                                                      random_state=0)).fit(X, y)
    table = summary(reg)
    assert list(table.index) == ["x0", "x1"]
    assert np.all(np.isfinite(np.asarray(table["r_hat"])))


def test_summary_without_pandas_is_a_readable_table(binary_fit, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)        # import pandas fails
    table = summary(binary_fit)
    assert isinstance(table, SummaryTable)
    assert table.shape == (4, 8) and len(table) == 4
    assert table.index == _names(binary_fit) + ["intercept"]
    np.testing.assert_allclose(table["mean"][:3], binary_fit.coef_)
    text = str(table)
    lines = text.splitlines()
    assert len(lines) == 5
    assert lines[0].split() == ["parameter", "mean", "sd", "5%", "50%", "95%", "ess_bulk",
                                "ess_tail", "r_hat"]
    assert lines[2].startswith(_names(binary_fit)[1] + " ")
    assert text == table.to_string() == repr(table)


class _Draws:
    """Duck-typed fitted estimator holding given draws."""

    def __init__(self, coef, intercept, **params):
        self.coef_samples_ = coef
        self.intercept_samples_ = intercept
        self.step_size_ = 0.01
        self._params = dict(n_samples=coef.shape[1], n_warmup=1000, thin=1, init="mode",
                            **params)

    def get_params(self):
        return dict(self._params)

    def __skbayes_sg_run__(self):
        # what a linear fit records: "prior" and "laplace" draw each chain's start
        return RunReport(chains_share_a_start=self._params["init"] not in ("prior", "laplace"))


def test_check_convergence_passes_for_independent_draws():
    rng = np.random.default_rng(3)
    fit = _Draws(rng.normal(size=(4, 1000, 3)), rng.normal(size=(4, 1000)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_convergence(fit) is True


def test_check_convergence_warns_about_rhat_and_names_the_fixes():
    rng = np.random.default_rng(4)
    coef = rng.normal(size=(4, 500, 3))
    coef[3, :, 1] += 3.0                                      # chain 3 elsewhere
    fit = _Draws(coef, rng.normal(size=(4, 500)))
    with pytest.warns(MCMCConvergenceWarning) as record:
        assert check_convergence(fit, names=["a", "b", "c"]) is False
    messages = [str(w.message) for w in record]
    rhat_msg = next(m for m in messages if m.startswith("Split R-hat"))
    assert "1 of 4 quantities" in rhat_msg and "for 'b'" in rhat_msg
    # warm-up doubled (at least 1000), chains twice as long
    assert "Raise n_warmup to 2000 (now 1000)" in rhat_msg
    # one length for both problems: the ESS's (it needs more than twice 500)
    ess_msg = next(m for m in messages if m.startswith("The draws are worth"))
    need = int(ess_msg.split("Use n_samples=")[1].split()[0])
    assert need > 1000 and f"sample longer (n_samples={need}, now 500)" in rhat_msg
    # every chain started at the mode: the note on optimistic R-hat
    assert "init='prior'" in rhat_msg

    fit = _Draws(coef, rng.normal(size=(4, 500)), )
    fit._params["init"] = "prior"
    with pytest.warns(MCMCConvergenceWarning) as record:
        check_convergence(fit)
    assert all("optimistic" not in str(w.message) for w in record)


def test_check_convergence_warns_about_low_ess():
    rng = np.random.default_rng(5)
    fit = _Draws(rng.normal(size=(4, 1000, 2)), rng.normal(size=(4, 1000)), sampler="sgld")
    # about 4000 effective draws; ask for 2000 per chain
    with pytest.warns(MCMCConvergenceWarning) as record:
        assert check_convergence(fit, min_ess_per_chain=2000) is False
    assert len(record) == 1
    msg = str(record[0].message)
    assert "short of the target 8000 (2000 per chain x 4 chains) with n_samples=1000" in msg
    # the length that reaches the target at the measured pace
    ess_min = min(ess(fit.coef_samples_).min(), ess(fit.coef_samples_, "tail").min(),
                  ess(fit.intercept_samples_), ess(fit.intercept_samples_, "tail"))
    need = int(np.ceil(1000 * 8000 / round(ess_min, 6)))
    assert abs(int(msg.split("Use n_samples=")[1].split()[0]) - need) <= 1
    assert "thin=" in msg
    with pytest.raises(ValueError, match="rhat_threshold"):
        check_convergence(fit, rhat_threshold=0.5)


@pytest.mark.parametrize("sampler", ["sgld", "sghmc"])
def test_the_warning_ends_with_the_dynamics_hint(sampler):
    """The estimator writes the hint (diagnostics knows no sampler): SGLD's
    says SGHMC explores faster; SGHMC's says nothing of the kind."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(200, 3))
    y = (X @ [1.0, -1.0, 0.5] + rng.logistic(size=200) > 0).astype(int)
    est = SGMCMCLogisticRegression(sampler=sampler, subsampling="cv", n_samples=40,
                                   n_warmup=20, n_chains=2, random_state=0)
    with pytest.warns(MCMCConvergenceWarning) as record:
        est.fit(X, y)
    messages = " ".join(str(r.message) for r in record)
    assert ("sampler='sghmc' often explores faster" in messages) == (sampler == "sgld")
    assert "Check the data are scaled" in messages


def test_the_warning_is_a_user_and_sklearn_convergence_warning():
    assert issubclass(MCMCConvergenceWarning, ConvergenceWarning)
    assert issubclass(MCMCConvergenceWarning, UserWarning)


def test_check_convergence_on_short_chains_of_a_real_fit(binary_fit):
    # 120 draws per chain from the mode with the automatic step size: the
    # chains are far from mixed, and the check says so
    with pytest.warns(MCMCConvergenceWarning) as record:
        assert check_convergence(binary_fit) is False
    messages = [str(w.message) for w in record]
    assert any(m.startswith("Split R-hat is") and "above 1.01" in m for m in messages)
    assert any("short of the target 400 (100 per chain x 4 chains)" in m for m in messages)


# ----------------------------------------------------------------------- ArviZ
def test_to_inference_data_binary(binary_fit):
    az = _arviz()
    idata = to_inference_data(binary_fit)
    assert isinstance(idata, az.InferenceData)
    post = idata.posterior
    assert post["coef"].dims == ("chain", "draw", "coef_dim")
    assert post["intercept"].dims == ("chain", "draw")
    assert list(post["coef_dim"].values) == _names(binary_fit)
    np.testing.assert_array_equal(post["coef"].values, binary_fit.coef_samples_)
    np.testing.assert_array_equal(post["intercept"].values, binary_fit.intercept_samples_)
    assert post.attrs["inference_library"] == "skbayes_sg"
    assert post.attrs["sampler"] == "sgld"
    assert post.attrs["step_size"] == binary_fit.step_size_
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_allclose(az.rhat(idata)["coef"].values,
                                   np.asarray(summary(binary_fit)["r_hat"])[:3], rtol=1e-10)


def test_to_inference_data_multinomial_and_without_intercept(multinomial_fit):
    _arviz()
    post = to_inference_data(multinomial_fit, names=["u", "v"]).posterior
    assert post["coef"].dims == ("chain", "draw", "class", "coef_dim")
    assert post["intercept"].dims == ("chain", "draw", "class")
    assert list(post["class"].values) == ["a", "b", "c"]
    assert list(post["coef_dim"].values) == ["u", "v"]
    np.testing.assert_array_equal(post["coef"].values, multinomial_fit.coef_samples_)

    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 2))
    reg = SGMCMCRidge(fit_intercept=False, n_samples=20, n_chains=2, random_state=0).fit(
        X, X[:, 0])
    post = to_inference_data(reg).posterior
    assert "intercept" not in post and post["coef"].shape == (2, 20, 2)


def test_to_inference_data_without_arviz_names_the_extra(binary_fit, monkeypatch):
    monkeypatch.setitem(sys.modules, "arviz", None)
    with pytest.raises(ImportError, match=r"skbayes_sg\[arviz\]"):
        to_inference_data(binary_fit)


def test_bulk_ess_and_rhat_share_one_rank_normalisation():
    """The fit's stopping rule computes both at once; they equal the public
    functions' values, NaN for a parameter with a non-finite draw."""
    from skbayes_sg.diagnostics._convergence import bulk_ess_and_rhat
    rng = np.random.default_rng(0)
    draws = 0.1 * rng.normal(size=(4, 300, 5)).cumsum(axis=1) + rng.normal(size=(4, 300, 5))
    e, r = bulk_ess_and_rhat(draws)
    np.testing.assert_allclose(e, ess(draws), rtol=1e-12)
    np.testing.assert_allclose(r, rhat(draws), rtol=1e-12)
    draws[1, 7, 3] = np.inf
    e, r = bulk_ess_and_rhat(draws)
    assert np.isnan(e[3]) and np.isnan(r[3]) and np.all(np.isfinite(e[:3]))
    e, r = bulk_ess_and_rhat(draws[:, :3])
    assert np.all(np.isnan(e)) and np.all(np.isnan(r))


def test_the_kernel_reads_float32_and_strided_draws_without_a_copy():
    """The fit's store is (chains, draws, parameters), maybe float32: the
    kernel reads it transposed in place and gives the numbers of a float64
    contiguous copy, bit for bit (a non-finite parameter NaN, its
    neighbours untouched)."""
    from skbayes_sg.diagnostics._convergence import _rank_block, bulk_ess_and_rhat
    rng = np.random.default_rng(5)
    draws = (0.3 * rng.normal(size=(3, 80, 7)).cumsum(axis=1)
             + rng.normal(size=(3, 80, 7))).astype(np.float32)
    draws[2, 40, 4] = np.nan
    copy = np.ascontiguousarray(draws.astype(np.float64).transpose(2, 0, 1))
    for view in (draws.transpose(2, 0, 1), draws.astype(np.float64).transpose(2, 0, 1)):
        for got, expected in zip(_rank_block(view, tail=True), _rank_block(copy, tail=True)):
            np.testing.assert_array_equal(got, expected)
    e, r = bulk_ess_and_rhat(draws)
    assert np.isnan(e[4]) and np.isnan(r[4]) and np.all(np.isfinite(np.delete(e, 4)))
    np.testing.assert_array_equal(e, ess(draws.astype(np.float64)))


def test_labels_are_made_on_demand_and_equal_the_list():
    """A million parameters' labels are not built for one warning: the
    sequence gives the labels summary() lists, in its order."""
    from skbayes_sg.diagnostics._convergence import _parameter_labels

    class Fitted:
        classes_ = np.array(["a", "b", "c"])

    for names, intercept, multi in [(None, True, True), (None, False, False),
                                    (["u", "v"], True, False), (["u", "v"], False, True)]:
        own = (list(names) if names else ["x0", "x1"]) + (["intercept"] if intercept else [])
        expected = [f"{n}[{c}]" for c in "abc" for n in own] if multi else own
        labels = _parameter_labels(Fitted(), names, 2, intercept, multi)
        assert list(labels) == expected and len(labels) == len(expected)
        assert labels[-1] == expected[-1] and labels[1:3] == expected[1:3]
        with pytest.raises(IndexError):
            labels[len(expected)]


@pytest.mark.parametrize("shape", [(4, 1000, 40), (3, 101, 20), (1, 200, 5), (2, 60, 3)])
def test_summary_block_equals_the_separate_statistics(shape):
    """summary() computes every column of a block of parameters from one sort
    of the draws; the numbers equal those of ess(), rhat() and np.quantile
    (ties, a constant parameter, an odd number of draws and a non-finite draw
    included)."""
    from skbayes_sg.diagnostics._convergence import _summary_block
    rng = np.random.default_rng(3)
    d = 0.2 * rng.normal(size=shape).cumsum(axis=1) + rng.normal(size=shape)
    d[:, :, -1] = 1.0                         # constant
    d[:, :, 0] = np.round(d[:, :, 0], 1)      # ties
    if shape[2] > 3:
        d[0, 5, 1] = np.nan
    q = np.array([0.05, 0.5, 0.95])
    flat = d.reshape(-1, shape[2])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = np.column_stack([flat.mean(0), flat.std(0, ddof=1),
                                    *np.quantile(flat, q, axis=0), ess(d, "bulk"),
                                    ess(d, "tail"), rhat(d)])
        got = _summary_block(d, q)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12, equal_nan=True)


def test_to_inference_data_log_likelihood_is_the_models_density():
    """Every group, and the pointwise log likelihood against a direct
    computation from the draws (binary, multinomial, ridge)."""
    az = _arviz()
    from scipy.special import log_softmax
    rng = np.random.default_rng(2)
    X = rng.normal(size=(120, 2))
    quick = dict(n_samples=30, n_warmup=50, n_chains=2, random_state=0)
    y_bin = np.array(["no", "yes"])[(X[:, 0] + rng.logistic(size=120) > 0).astype(int)]
    y_mult = np.argmax(X @ [[1, -1, 0], [0, 1, -1]] + rng.gumbel(size=(120, 3)), axis=1)
    y_reg = X[:, 0] - X[:, 1] + 0.5 * rng.normal(size=120)
    for est, y in ((SGMCMCLogisticRegression(**quick), y_bin),
                   (SGMCMCLogisticRegression(**quick), y_mult),
                   (SGMCMCRidge(**quick), y_reg)):
        est.fit(X, y)
        idata = est.to_inference_data(X, y, posterior_predictive=True, random_state=0)
        for group in ("posterior", "log_likelihood", "observed_data", "sample_stats",
                      "posterior_predictive"):
            assert group in idata.groups()
        ll = idata.log_likelihood["y"].values
        assert ll.shape == (2, 30, 120)
        coef, icpt = est.coef_samples_, est.intercept_samples_
        if isinstance(est, SGMCMCRidge):
            z = np.einsum("csd,nd->csn", coef, X) + icpt[..., None]
            expected = -0.5 * (np.log(2 * np.pi * est.noise_var_)
                               + (y - z) ** 2 / est.noise_var_)
        elif coef.ndim == 3:
            z = np.einsum("csd,nd->csn", coef, X) + icpt[..., None]
            expected = np.where(y == "yes", -np.logaddexp(0, -z), -np.logaddexp(0, z))
        else:
            z = np.einsum("cskd,nd->csnk", coef, X) + icpt[:, :, None, :]
            expected = np.take_along_axis(log_softmax(z, axis=3),
                                          np.broadcast_to(y[None, None, :, None],
                                                          z.shape[:3] + (1,)), axis=3)[..., 0]
        np.testing.assert_allclose(ll, expected, rtol=1e-10, atol=1e-12)
        np.testing.assert_array_equal(idata.observed_data["y"].values, y)
        pred = idata.posterior_predictive["y"].values
        assert pred.shape == (2, 30, 120)
        if not isinstance(est, SGMCMCRidge):
            assert set(np.unique(pred)) <= set(np.unique(y))
        stats = idata.sample_stats
        assert not stats["diverging"].values.any()
        np.testing.assert_allclose(stats["step_size"].values, est.step_size_)
        prior = -0.5 * est.alpha_ * (np.square(coef).reshape(2, 30, -1).sum(-1)
                                    + np.square(icpt).reshape(2, 30, -1).sum(-1))
        np.testing.assert_allclose(stats["lp"].values, ll.sum(-1) + prior, rtol=1e-10)
        assert np.isfinite(az.loo(idata).elpd_loo)
    # X without y: posterior predictive draws at new data (tests/test_predictive.py)
    assert "posterior_predictive" in est.to_inference_data(X).groups()
    with pytest.raises(ValueError, match="needs X"):
        est.to_inference_data(y=y)


def test_az_compare_ranks_the_right_model_first():
    """Simulated logistic data that depend on x0 and x1: the model that sees
    them beats the one that sees only the noise column x2, by more than two
    standard errors of the elpd difference."""
    az = _arviz()
    rng = np.random.default_rng(5)
    X = rng.normal(size=(400, 3))
    y = (1.5 * X[:, 0] - X[:, 1] + rng.logistic(size=400) > 0).astype(int)
    right = SGMCMCLogisticRegression(random_state=0).fit(X, y)
    wrong = SGMCMCLogisticRegression(random_state=0).fit(X[:, 2:], y)
    table = az.compare({"right": right.to_inference_data(X, y),
                        "wrong": wrong.to_inference_data(X[:, 2:], y)})
    assert table.index[0] == "right"
    assert table.loc["wrong", "elpd_diff"] > 2.0 * table.loc["wrong", "dse"]
    assert np.isfinite(table.loc["right", "elpd_loo"])


def test_bulk_ess_and_rhat_are_the_same_on_threads():
    """Blocks of parameters on two threads give exactly the values of one
    pass (non-finite parameters, NaN, in every block included)."""
    from skbayes_sg.diagnostics._convergence import _BLOCK_ELEMENTS, bulk_ess_and_rhat

    rng = np.random.default_rng(0)
    m, n = 4, 200
    P = 3 * _BLOCK_ELEMENTS // (m * n) + 7        # four blocks, the last one short
    draws = rng.normal(size=(m, n, P)).cumsum(axis=1) * 0.1 + rng.normal(size=(m, n, P))
    draws[:, 5, ::4001] = np.inf
    one = bulk_ess_and_rhat(draws)
    two = bulk_ess_and_rhat(draws, n_jobs=2)
    assert np.isnan(one[0][::4001]).all() and np.isfinite(one[0][1:4001]).all()
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[1], two[1])
