"""The automatic pass budget is a floor, not a wall (issue 25, item 4): with
``max_passes="auto"`` and ``max_time=None`` sampling goes on past it while
the measured pace says a round (sized to reach the ESS target) ends within
``AUTO_EXTEND_SECONDS`` of the fit's start and ``AUTO_EXTEND_FACTOR`` times
the budget's passes; otherwise the budget stops the fit and the warning says
so."""
import warnings

import numpy as np
import pytest
from sklearn.datasets import make_classification

from skbayes_sg import SGMCMCLogisticRegression
from skbayes_sg import _base, _setup
from skbayes_sg._sampling import _schedule
from skbayes_sg.diagnostics import MCMCConvergenceWarning

# this fit converges in about 1,800 passes (3.6 budgets of 500); with a
# budget of 100 it would need about 18
BUDGET = 500


def _data():
    return make_classification(300, 5, n_informative=3, random_state=0)


def _fit_with_budget(monkeypatch, budget, **kwargs):
    monkeypatch.setattr(_setup, "AUTO_BUDGET_PASSES", (budget, budget))
    X, y = _data()
    return SGMCMCLogisticRegression(random_state=0, **kwargs).fit(X, y)


def test_the_automatic_budget_runs_on_while_converging_is_near(monkeypatch):
    with warnings.catch_warnings():
        warnings.simplefilter("error", MCMCConvergenceWarning)
        est = _fit_with_budget(monkeypatch, BUDGET)
    assert est.max_passes_ == BUDGET
    assert 2 * est.max_passes_ < est.n_passes_ <= _base.AUTO_EXTEND_FACTOR * est.max_passes_
    assert np.nanmin(est.ess_) >= est.target_ess_ and np.nanmax(est.rhat_) <= 1.01


def test_a_fit_many_budgets_from_converging_stops_at_its_budget(monkeypatch):
    with pytest.warns(MCMCConvergenceWarning, match=r"the budget ran out\. Raise max_passes"):
        est = _fit_with_budget(monkeypatch, 100)
    assert est.n_passes_ <= 2 * est.max_passes_


def test_without_the_time_the_budget_stops_the_fit(monkeypatch):
    monkeypatch.setattr(_base, "AUTO_EXTEND_SECONDS", 0.0)
    with pytest.warns(MCMCConvergenceWarning, match=r"the budget ran out\. Raise max_passes"):
        est = _fit_with_budget(monkeypatch, BUDGET)
    assert est.n_passes_ <= 1.01 * est.max_passes_


@pytest.mark.parametrize("limit", [{"max_time": 3600.0}, {"max_passes": BUDGET}])
def test_a_budget_the_user_sets_is_a_wall(monkeypatch, limit):
    with pytest.warns(MCMCConvergenceWarning, match="budget ran out"):
        est = _fit_with_budget(monkeypatch, BUDGET, **limit)
    assert est.n_passes_ <= 1.01 * BUDGET


def _round_sizes(est):
    return [steps for phase, steps, *_ in est._warmup_log if phase == "sampling"]


def test_a_round_adds_at_most_twice_the_draws_made(monkeypatch):
    """Each sampling round after the first adds at most MAX_ROUND_GROWTH
    times the draws already made (short chains under-predict the rate: one
    round sized from them overshot the text logistic regression's target by
    35%), and the fit still reaches its target.  A first round at 5% of
    the predicted length (20,000 effective draws) ends far below the target,
    so that the cap binds; without it the second round is far larger (the
    power check)."""
    monkeypatch.setattr(_schedule, "FIRST_ROUND", 0.05)
    X, y = _data()
    kwargs = dict(target_ess=20_000, max_passes=1e8, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", MCMCConvergenceWarning)
        est = SGMCMCLogisticRegression(**kwargs).fit(X, y)
    sizes = _round_sizes(est)
    assert len(sizes) >= 3
    made = np.cumsum(sizes)
    assert all(s <= _schedule.MAX_ROUND_GROWTH * m + 1 for s, m in zip(sizes[1:], made))
    assert sizes[1] >= 1.9 * sizes[0]                       # the cap bound
    assert np.nanmin(est.ess_) >= 20_000 and np.nanmax(est.rhat_) <= 1.01
    monkeypatch.setattr(_schedule, "MAX_ROUND_GROWTH", np.inf)
    uncapped = _round_sizes(SGMCMCLogisticRegression(**kwargs).fit(X, y))
    assert uncapped[1] > 3 * uncapped[0]


def test_the_automatic_budget_is_also_its_seconds(monkeypatch):
    """max_passes="auto" means about ten seconds of gradients a flop budget:
    where passes run slower than its flop count says (a million sparse
    coefficients), the fit stops at those seconds, not at the passes, and
    the warning says which.  Here the rate is set so that the budget's
    1e10 flops (two of AUTO_BUDGET_FLOPS at five parameters) are a
    microsecond: no fit converges in that, on any machine (at 0.05 s a fast
    one did), so the fit keeps the few draws it must and warns."""
    monkeypatch.setattr(_base, "AUTO_EXTEND_SECONDS", 0.0)
    monkeypatch.setattr(_setup, "AUTO_BUDGET_FLOP_RATE", 2 * _setup.AUTO_BUDGET_FLOPS / 1e-6)
    with pytest.warns(MCMCConvergenceWarning, match=r"data passes or \d+ s, the time its flops"):
        est = _fit_with_budget(monkeypatch, 100 * BUDGET)
    assert est._auto_seconds == pytest.approx(1e-6)
    assert est.n_passes_ < 0.1 * est.max_passes_
    # a budget the user sets in passes has no such clock
    est = _fit_with_budget(monkeypatch, 100 * BUDGET, max_passes=100 * BUDGET)
    assert est._auto_seconds is None and np.nanmin(est.ess_) >= est.target_ess_


def _ar1(rng, shape, rho):
    """Stationary AR(1) chains along axis 1 (unit variance)."""
    x = np.empty(shape)
    x[:, 0] = rng.standard_normal(shape[0:1] + shape[2:])
    noise = rng.standard_normal(shape) * np.sqrt(1 - rho ** 2)
    for t in range(1, shape[1]):
        x[:, t] = rho * x[:, t - 1] + noise[:, t]
    return x


def test_a_round_check_stops_only_on_every_coordinate(monkeypatch):
    """Above SCREEN_MIN_PARAMS parameters a round's check looks first at the
    coordinates that were slowest at the last full check: where they fail,
    the round's check ends there (with their min ESS); where they pass, all
    coordinates are checked, so a coordinate that became slow elsewhere still
    stops nothing, and the outcome's ESS is always a full check's."""
    monkeypatch.setattr(_schedule, "SCREEN_MIN_PARAMS", 400)
    monkeypatch.setattr(_schedule, "SCREEN_COORDINATES", 20)
    rng = np.random.default_rng(0)
    draws = rng.standard_normal((4, 400, 500))
    draws[:, :, 7] = _ar1(rng, (4, 400), 0.95)[:, :]          # one slow coordinate
    out = _schedule.Outcome(None, 0, None, None, False, False, np.nan, None)
    target = 400.0
    min_ess, _, screen = _schedule._round_check(draws, 1, out, target, None)
    assert min_ess < target and 7 in screen.index and not screen.stale
    full_ess = out.ess.copy()
    assert min_ess == np.nanmin(full_ess)
    # the same draws again: the screen fails at coordinate 7, nothing else is read
    calls = []
    monkeypatch.setattr(_schedule, "sampling_diagnostics",
                        lambda *a, **k: calls.append(1) or (_ for _ in ()).throw(AssertionError))
    again, _, screen = _schedule._round_check(draws, 1, out, target, screen)
    assert again == min_ess and screen.stale and not calls
    np.testing.assert_array_equal(out.ess, full_ess)                 # untouched
    monkeypatch.undo()
    monkeypatch.setattr(_schedule, "SCREEN_MIN_PARAMS", 400)
    monkeypatch.setattr(_schedule, "SCREEN_COORDINATES", 20)
    # coordinate 7 mixes now, but one outside the screen is slow: the screen
    # passes, the full check finds it and the round does not stop
    draws[:, :, 7] = rng.standard_normal((4, 400))
    outside = next(j for j in range(500) if j not in screen.index)
    draws[:, :, outside] = _ar1(rng, (4, 400), 0.95)
    min_ess, _, screen = _schedule._round_check(draws, 1, out, target, screen)
    assert min_ess < target and min_ess == np.nanmin(out.ess)
    assert np.argmin(out.ess) == outside and outside in screen.index
    # below SCREEN_MIN_PARAMS every check is a full one
    monkeypatch.setattr(_schedule, "SCREEN_MIN_PARAMS", 500)
    assert _schedule._round_check(draws, 1, out, target, None)[2] is None
