"""``model_average_error``: the jackknife over chains estimates how much a
finite run overstates the model average's log-loss.

The reference is exact: draws of ``theta`` from ``N(0, 1)`` (AR(1) chains, so
each chain is worth few independent draws) under the likelihood
``N(y | theta, 1)`` have the endless-run predictive ``N(y | 0, 2)``.
Tolerances are Monte Carlo errors of the means over replicate runs."""
import numpy as np
import pytest
from scipy.stats import norm
from sklearn.datasets import load_breast_cancer
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skbayes_sg import SGMCMCLogisticRegression
from skbayes_sg.diagnostics import ModelAverageError, model_average_error

N_REPLICATES = 100


class GaussianDraws:
    """Stands in for a fitted estimator: draws ``theta`` and the likelihood
    ``N(y | theta, 1)``."""

    def __init__(self, theta):
        self.coef_samples_ = theta[..., None]

    def log_likelihood(self, X, y):
        theta = self.coef_samples_.reshape(-1)
        return norm.logpdf(np.asarray(y)[:, None], loc=theta[None, :], scale=1.0)


def ar1_chains(rng, n_chains, n_draws, phi):
    """Stationary AR(1) chains with ``N(0, 1)`` margins, shape (chains, draws)."""
    theta = np.empty((n_chains, n_draws))
    theta[:, 0] = rng.standard_normal(n_chains)
    innovations = rng.standard_normal((n_chains, n_draws)) * np.sqrt(1.0 - phi ** 2)
    for s in range(1, n_draws):
        theta[:, s] = phi * theta[:, s - 1] + innovations[:, s]
    return theta


@pytest.fixture(scope="module")
def rows():
    rng = np.random.default_rng(0)
    y = rng.normal(0.0, np.sqrt(2.0), 300)
    exact = -float(np.mean(norm.logpdf(y, 0.0, np.sqrt(2.0))))
    return np.zeros((len(y), 1)), y, exact


def replicate(rows, n_chains, n_draws, phi, seed=1):
    X, y, _ = rows
    rng = np.random.default_rng(seed)
    results = [model_average_error(GaussianDraws(ar1_chains(rng, n_chains, n_draws, phi)), X, y)
               for _ in range(N_REPLICATES)]
    return (np.array([r.log_loss for r in results]), np.array([r.bias for r in results]),
            np.array([r.se for r in results]))


def mean_and_error(values):
    return values.mean(), values.std(ddof=1) / np.sqrt(len(values))


def test_the_jackknife_removes_the_finite_run_excess(rows):
    """4 chains of 100 draws, lag-1 correlation 0.9 (about 5 independent
    draws a chain): the log-loss overstates the endless run's by ~0.016
    nats a row; the bias-corrected one is within Monte Carlo error of it.
    (Without the (K - 1) factor of the jackknife the corrected excess is
    ~0.010, 8 of its standard errors: this test fails.)"""
    *_, exact = rows
    log_loss, bias, se = replicate(rows, 4, 100, 0.9)
    excess, excess_error = mean_and_error(log_loss - exact)
    assert excess > 5 * excess_error          # there is an excess to find
    corrected, corrected_error = mean_and_error(log_loss - bias - exact)
    assert abs(corrected) < 4 * corrected_error
    # the standard error is of the order of the run-to-run spread (the
    # jackknife's from 4 pieces is itself uncertain: a factor 2 either way)
    assert 0.5 < se.mean() / log_loss.std(ddof=1) < 2.0


def test_more_chains_leave_less_bias(rows):
    """Twice the chains, about half the excess, and the estimate follows."""
    four, bias_four, _ = replicate(rows, 4, 100, 0.9)
    eight, bias_eight, _ = replicate(rows, 8, 100, 0.9)
    assert bias_eight.mean() < 0.7 * bias_four.mean()
    assert eight.mean() < four.mean()


def test_one_chain_is_cut_into_pieces(rows):
    X, y, _ = rows
    rng = np.random.default_rng(3)
    result = model_average_error(GaussianDraws(ar1_chains(rng, 1, 400, 0.5)), X, y)
    assert isinstance(result, ModelAverageError)
    assert result.n_pieces == 4 and result.n_rows == len(y)
    assert np.isfinite([result.log_loss, result.bias, result.se]).all()
    assert result.corrected_log_loss == pytest.approx(result.log_loss - result.bias)
    assert "bias" in str(result)


def test_bad_requests_say_what_to_change(rows):
    X, y, _ = rows
    est = GaussianDraws(np.zeros((3, 5)))
    with pytest.raises(ValueError, match="multiple of the 3 chains"):
        model_average_error(est, X, y, n_pieces=4)
    with pytest.raises(ValueError, match="n_pieces must be an int"):
        model_average_error(est, X, y, n_pieces=2.5)
    with pytest.raises(ValueError, match="n_samples"):
        model_average_error(est, X, y, n_pieces=18)
    with pytest.raises(ValueError, match="pass X and y"):
        model_average_error(est, None, None)


def test_a_fitted_estimator_and_its_pipeline():
    """A real fit (breast cancer, logistic): held-out rows, the same figures
    through a Pipeline, and the log-loss of its predict_proba."""
    X, y = load_breast_cancer(return_X_y=True)
    Xtr, Xte, ytr, yte = X[::2], X[1::2], y[::2], y[1::2]
    pipe = make_pipeline(StandardScaler(), SGMCMCLogisticRegression(random_state=0)).fit(Xtr, ytr)
    through_pipe = model_average_error(pipe, Xte, yte)
    est = pipe[-1]
    direct = model_average_error(est, pipe[0].transform(Xte), yte)
    assert through_pipe == direct
    p = pipe.predict_proba(Xte)[np.arange(len(yte)), yte]
    assert direct.log_loss == pytest.approx(-np.mean(np.log(p)), rel=1e-6)
    assert direct.n_pieces == est.coef_samples_.shape[0]
