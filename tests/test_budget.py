"""The automatic pass budget is a floor, not a wall (issue 25, item 4): with
``max_passes="auto"`` and ``max_time=None`` sampling goes on past it while
the measured pace says a round ends within ``AUTO_EXTEND_SECONDS`` of the
fit's start; otherwise the budget stops the fit and the warning says so."""
import warnings

import numpy as np
import pytest
from sklearn.datasets import make_classification

from skbayes_sg import SGMCMCLogisticRegression
from skbayes_sg import _base
from skbayes_sg.diagnostics import MCMCConvergenceWarning


BUDGET = 300


@pytest.fixture
def tiny_budget(monkeypatch):
    """An automatic budget of 300 passes: converging takes about 1,600."""
    monkeypatch.setattr(_base, "AUTO_BUDGET_PASSES", (BUDGET, BUDGET))


def _data():
    return make_classification(300, 5, n_informative=3, random_state=0)


def test_the_automatic_budget_runs_on_while_converging_is_in_time(tiny_budget):
    X, y = _data()
    with warnings.catch_warnings():
        warnings.simplefilter("error", MCMCConvergenceWarning)
        est = SGMCMCLogisticRegression(random_state=0).fit(X, y)
    assert est.max_passes_ == BUDGET
    assert est.n_passes_ > 3 * est.max_passes_
    assert np.nanmin(est.ess_) >= est.target_ess_ and np.nanmax(est.rhat_) <= 1.01


def test_without_the_time_the_budget_stops_the_fit_and_says_so(tiny_budget, monkeypatch):
    X, y = _data()
    monkeypatch.setattr(_base, "AUTO_EXTEND_SECONDS", 0.0)
    with pytest.warns(MCMCConvergenceWarning, match=r"the budget ran out\. Raise max_passes"):
        est = SGMCMCLogisticRegression(random_state=0).fit(X, y)
    assert est.n_passes_ <= 1.01 * est.max_passes_


@pytest.mark.parametrize("limit", [{"max_time": 3600.0}, {"max_passes": BUDGET}])
def test_a_budget_the_user_sets_is_a_wall(limit):
    X, y = _data()
    with pytest.warns(MCMCConvergenceWarning, match="budget ran out"):
        est = SGMCMCLogisticRegression(random_state=0, **limit)
        if "max_time" in limit:
            # the automatic pass budget with a time cap: no extension past it
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(_base, "AUTO_BUDGET_PASSES", (BUDGET, BUDGET))
                est.fit(X, y)
        else:
            est.fit(X, y)
    assert est.n_passes_ <= 1.01 * BUDGET
