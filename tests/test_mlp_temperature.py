"""``temperature="auto"``: the network's model chosen on held-out rows
(issue 40, item 1). The posterior (``temperature=1``) and a cold model under a
wider prior, with chains started at modes, both run on the rows not held out;
the one whose model average predicts the held-out rows better by more than
two paired standard errors is kept (a tie goes to the posterior) and its
chains continue on every row. The rule alone is in
``test_temperature_rule.py``; this module is skipped without torch.
"""
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sklearn.base import clone  # noqa: E402
from sklearn.datasets import load_digits, load_iris, make_classification  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from skbayes_sg.diagnostics import MCMCConvergenceWarning  # noqa: E402
from skbayes_sg.neural_network import SGMCMCMLPClassifier  # noqa: E402
from skbayes_sg.neural_network._network_temperature import (  # noqa: E402
    COLD_TEMPERATURE, MIN_CHECK_ROWS, MIN_SELECTION_ROWS, candidate_settings, choose,
    row_log_loss)


def _iris():
    X, y = load_iris(return_X_y=True)
    return (X - X.mean(axis=0)) / X.std(axis=0), y


def _rows(n=400):
    """Enough rows to choose on (80 held out of 400, MIN_SELECTION_ROWS 60)."""
    X, y = make_classification(n, n_features=6, n_informative=4, n_classes=3,
                               random_state=0)
    return X, y


def _small(**kw):
    kw = dict(dict(hidden_layer_sizes=(8,), n_samples=20, n_warmup=50, thin=2,
                   n_chains=2, random_state=0), **kw)
    return SGMCMCMLPClassifier(**kw)


def _quiet(clf, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCMCConvergenceWarning)
        return clf.fit(X, y)


@pytest.mark.usefixtures("one_torch_thread")
def test_auto_is_the_chosen_candidate_fitted_on_the_other_rows_then_continued():
    """Bit for bit: each candidate fitted on the rows not held out, the
    choice made from their held-out row losses, the chosen one continued
    (``warm_start``) on every row; the parameters stay as the user set them."""
    X, y = _rows()
    for kw in ({}, {"n_warmup": "auto", "map_epochs": 5}):
        auto = _quiet(_small(temperature="auto", **kw), X, y)
        mask = auto._validation_mask
        assert mask.sum() == 80 and auto.get_params()["temperature"] == "auto"
        candidates = [_quiet(clone(auto).set_params(**s, validation_fraction=None),
                             X[~mask], y[~mask])
                      for s in candidate_settings(auto)]
        losses = [row_log_loss(c, X[mask], y[mask]) for c in candidates]
        index, diff, se = choose(*losses)
        chosen = candidates[index]
        n_warmup, other = chosen.n_warmup_, candidates[1 - index].n_grad_evals_
        _quiet(chosen.set_params(warm_start=True), X, y)
        np.testing.assert_array_equal(auto.coef_samples_, chosen.coef_samples_)
        selection = auto.temperature_selection_
        assert selection["chosen"] == index and selection["n_rows"] == 80
        assert selection["held_out_log_loss"] == pytest.approx([v.mean() for v in losses])
        assert (selection["difference"], selection["se"]) == pytest.approx((diff, se))
        assert auto.temperature_ == chosen.temperature == [1.0, COLD_TEMPERATURE][index]
        assert auto.prior_scale_ == chosen.prior_scale
        assert auto.n_warmup_ == n_warmup                  # the first run's
        assert auto.n_grad_evals_ == chosen.n_grad_evals_ + other   # both candidates' work
        assert auto.validation_error_.log_loss == pytest.approx(losses[index].mean(), rel=1e-5)


@pytest.mark.usefixtures("one_torch_thread")
def test_warm_start_continues_the_choice_and_a_number_clears_it():
    X, y = _rows()
    clf = _quiet(_small(temperature="auto", warm_start=True), X, y)
    selection, temperature, steps = clf.temperature_selection_, clf.temperature_, clf.n_steps_
    _quiet(clf, X, y)
    assert clf.temperature_selection_ is selection and clf.temperature_ == temperature
    # continued twice (on the other rows, then every row), no new warm-up
    assert clf.n_steps_ == steps + 2 * 20 * 2 and clf.validation_error_.n_rows == 80
    _quiet(clf.set_params(temperature=0.5, warm_start=False), X, y)
    assert clf.temperature_ == 0.5 and clf.prior_scale_ == 4.0
    assert not hasattr(clf, "temperature_selection_") and not hasattr(clf, "validation_error_")
    # column names and a scalar weight reach the chosen fit as fit's own data;
    # neither the fit (its held-out check reads the validated rows) nor the
    # prediction warns about them, nor does torch about pandas' read-only
    # arrays (the frame's values are read-only under copy-on-write)
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(X.shape[1])])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", MCMCConvergenceWarning)
        named = _small(temperature="auto").fit(frame, y)
        named.predict_proba(frame)
    assert list(named.feature_names_in_) == list(frame.columns) and named.n_features_in_ == 6
    assert not [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCMCConvergenceWarning)
        weighted = _small(temperature="auto").fit(X, y, sample_weight=2.0)
    assert weighted.temperature_selection_["n_rows"] == 80
    # a fit at a number, continued with "auto", continues at that number
    _quiet(clf.set_params(temperature="auto", warm_start=True), X, y)
    assert clf.temperature_ == 0.5 and clf.temperature_selection_ is None


@pytest.mark.usefixtures("one_torch_thread")
def test_too_few_rows_to_choose_fit_the_posterior_as_temperature_one_does():
    """From MIN_SELECTION_ROWS held-out rows the fit chooses (iris: 30, and
    20 of 100 of its rows), and checks the chosen run there. With fewer to
    choose on but MIN_CHECK_ROWS (the selection's threshold raised to 40
    here: the two are equal by default), the fit is the ``temperature=1``
    fit checked on them, draw for draw (its warning included), with or
    without ``validation_fraction`` (the default share); data too small to
    hold out MIN_CHECK_ROWS rows, or to stratify, are the plain
    ``temperature=1`` fit."""
    from skbayes_sg.neural_network import _network_temperature
    X, y = _iris()
    assert MIN_CHECK_ROWS == MIN_SELECTION_ROWS <= 0.2 * 100
    hundred = np.r_[0:34, 50:83, 100:133]                  # 100 rows: 20 held out
    for rows, held in ((slice(None), 30), (hundred, 20)):
        auto = _quiet(_small(temperature="auto"), X[rows], y[rows])
        assert auto.temperature_selection_["n_rows"] == auto.validation_error_.n_rows == held
    with pytest.MonkeyPatch.context() as m:
        m.setattr(_network_temperature, "MIN_SELECTION_ROWS", 40)
        for fraction in (None, 0.2):
            auto = _quiet(_small(temperature="auto", validation_fraction=fraction), X, y)
            plain = _quiet(_small(temperature=1.0, validation_fraction=0.2), X, y)
            np.testing.assert_array_equal(auto.coef_samples_, plain.coef_samples_)
            assert auto.temperature_ == 1.0 and auto.temperature_selection_ is None
            assert auto.validation_error_.n_rows == 30 and auto.validation_fraction_ == 0.2
    few = np.r_[0:20, 50:70, 100:120]                         # 60 rows: 12 held out
    auto = _quiet(_small(temperature="auto"), X[few], y[few])
    plain = _quiet(_small(temperature=1.0), X[few], y[few])
    np.testing.assert_array_equal(auto.coef_samples_, plain.coef_samples_)
    assert not hasattr(auto, "validation_error_")
    tiny = np.arange(12.0).reshape(6, 2), np.array([0, 0, 1, 1, 2, 2])
    assert _quiet(_small(temperature="auto"), *tiny).temperature_ == 1.0
    # a fraction the user set must stratify
    with pytest.raises(ValueError, match=r"validation_fraction=0\.2 cannot hold out"):
        _small(temperature="auto", validation_fraction=0.2).fit(*tiny)


def _split(X, y):
    """doc/mlp.rst's split: 70/30 stratified, seed 0, scaler on all rows."""
    X = StandardScaler().fit_transform(X)
    return train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)


@pytest.mark.usefixtures("one_torch_thread")
def test_digits_choose_the_cold_model_and_5000_rows_the_posterior():
    """Measured in doc/mlp.rst (3 seeds each): on digits the posterior's
    model average loses to the cold model by far more than the paired noise
    of 252 held-out rows; on the 5,000-row problem the posterior wins (test
    log-loss 0.131 against 0.148). Both fits are silent, and each predicts
    the test rows better than ``MLPClassifier`` (0.067 and 0.161) and the
    defaults at ``temperature=1`` on digits (0.123)."""
    digits = _split(*load_digits(return_X_y=True))
    rows = _split(*make_classification(5000, n_features=20, random_state=0))
    for (Xtr, Xte, ytr, yte), expected, bound in ((digits, 1, 0.075), (rows, 0, 0.15)):
        with warnings.catch_warnings():
            warnings.simplefilter("error", MCMCConvergenceWarning)
            clf = SGMCMCMLPClassifier(temperature="auto", random_state=0).fit(Xtr, ytr)
        selection = clf.temperature_selection_
        assert selection["chosen"] == expected, selection
        if expected:
            assert selection["difference"] < -2 * selection["se"]
            assert clf.temperature_ == COLD_TEMPERATURE and clf.prior_scale_ == 8.0
            # the log prior the diagnostics read is the chosen model's, not
            # that of the prior_scale parameter (4.0): at theta = 1 each layer
            # gives -fan_in * fan_out * fan_in / (2 s^2), each bias -1 / 2
            sizes = clf.layer_sizes_
            log_prior = -0.5 * sum(fi * fo * fi / 8.0 ** 2 + fo
                                   for fi, fo in zip(sizes[:-1], sizes[1:]))
            assert clf._log_prior(np.ones(clf.n_params_)) == pytest.approx(log_prior)
        else:
            assert clf.temperature_ == 1.0 and clf.prior_scale_ == 4.0
        assert np.mean(row_log_loss(clf, Xte, yte)) < bound


@pytest.mark.usefixtures("one_torch_thread")
def test_verbose_says_which_run_is_which(capsys):
    X, y = _rows()
    _quiet(_small(temperature="auto", verbose=1), X, y)
    lines = [line for line in capsys.readouterr().out.splitlines()
             if line.startswith("temperature='auto': ")]
    assert len(lines) == 3
    assert "the posterior (temperature=1)" in lines[0] and "320 rows" in lines[0]
    assert "the cold model (temperature=0.02, prior_scale=8.0)" in lines[1]
    assert "continues on every row" in lines[2]


@pytest.mark.parametrize("params, runs", [
    (dict(), 3),                                           # two candidates, then the continuation
    (dict(temperature=1.0, validation_fraction=0.2), 2),   # the checked run, then the continuation
])
def test_a_fit_interrupted_in_its_last_run_leaves_the_estimator_as_before(
        monkeypatch, params, runs):
    """Ctrl-C in the last of a fit's runs: the estimator holds nothing of
    that fit (before, the first runs' posterior, of four fifths of the rows,
    was left on it), neither on a fresh estimator nor on a fitted one."""
    from skbayes_sg.neural_network import _net_lockstep
    real = _net_lockstep.run_chains
    calls = []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == runs:
            raise KeyboardInterrupt
        return real(*args, **kwargs)
    X, y = _rows()
    est = _small(**params)
    monkeypatch.setattr(_net_lockstep, "run_chains", interrupted)
    with pytest.raises(KeyboardInterrupt) as info:
        _quiet(est, X, y)
    assert len(calls) == runs
    # the note is the call's: nothing of it is left (not the continued run's)
    said = info.value.__notes__[-1] if hasattr(info.value, "add_note") else info.value.args[0]
    assert said.endswith("the estimator is unfitted, as it was before the call.")
    assert not [k for k in vars(est) if k.endswith("_") and not k.startswith("_")]
    assert not hasattr(est, "_chain_states")
    monkeypatch.setattr(_net_lockstep, "run_chains", real)
    _quiet(est, X, y)
    before = dict(vars(est))
    calls.clear()
    monkeypatch.setattr(_net_lockstep, "run_chains", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _quiet(est, X[:, :5], y)                  # other data, other features
    assert vars(est).keys() == before.keys()
    assert all(vars(est)[k] is before[k] for k in before)
    assert est.predict_proba(X).shape == (len(X), 3)


def test_an_interrupted_partial_fit_leaves_the_estimator_as_before_the_call(monkeypatch):
    """Ctrl-C in a first ``partial_fit``: the estimator stays unfitted (it
    kept ``n_features_in_``, ``n_samples_`` and the like, which
    ``check_is_fitted`` took for a fit); in a later call: every attribute is
    the same object as before, so the call can be made again. The note names
    ``partial_fit``, not ``fit`` and ``warm_start``."""
    from sklearn.exceptions import NotFittedError
    from sklearn.utils.validation import check_is_fitted

    from skbayes_sg.neural_network import _net_lockstep
    real = _net_lockstep.run_chains

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    X, y = _rows()
    est = _small(temperature=1.0)
    monkeypatch.setattr(_net_lockstep, "run_chains", interrupted)
    with pytest.raises(KeyboardInterrupt) as info:
        est.partial_fit(X, y, classes=np.unique(y))
    assert not [k for k in vars(est) if k not in est.get_params()]
    with pytest.raises(NotFittedError):
        check_is_fitted(est)
    said = info.value.__notes__ if hasattr(info.value, "add_note") else info.value.args
    assert said == ["SGMCMCMLPClassifier.partial_fit was interrupted: the draws of this "
                    "call were discarded and the estimator is unfitted, as it was before "
                    "the call."]
    monkeypatch.setattr(_net_lockstep, "run_chains", real)
    est.partial_fit(X, y, classes=np.unique(y))
    before = dict(vars(est))
    monkeypatch.setattr(_net_lockstep, "run_chains", interrupted)
    with pytest.raises(KeyboardInterrupt) as info:
        est.partial_fit(X[:100], y[:100])
    assert vars(est).keys() == before.keys()
    assert all(vars(est)[k] is before[k] for k in before)
    said = info.value.__notes__[-1] if hasattr(info.value, "add_note") else info.value.args[0]
    assert said.endswith("and the chains this call began from (partial_fit continues them).")
    monkeypatch.setattr(_net_lockstep, "run_chains", real)
    assert est.partial_fit(X[:100], y[:100]).coef_samples_.shape[1] == 40


@pytest.mark.parametrize("method", ["partial_fit", "warm_start"])
def test_a_continuation_interrupted_mid_run_then_resumed_gives_the_same_draws(
        monkeypatch, method):
    """Ctrl-C after a few steps of a continuation (the chains' tensors had
    moved): the next call continues from the chains the interrupted one
    began from, bit for bit as if it had not been made."""
    from skbayes_sg.neural_network import _torch_sampler
    X, y = _rows(300)
    real = _torch_sampler.ChainRunner.after_step

    def run(interrupt):
        est = _small(temperature=1.0, warm_start=method == "warm_start")
        if method == "partial_fit":
            est.partial_fit(X, y, classes=np.unique(y))
            call = lambda: est.partial_fit(X, y)           # noqa: E731
        else:
            est.fit(X, y)
            call = lambda: est.fit(X, y)                   # noqa: E731
        if interrupt:
            steps = []

            def stopped(self, *args, **kwargs):
                steps.append(1)
                if len(steps) == 7:
                    raise KeyboardInterrupt
                return real(self, *args, **kwargs)
            with monkeypatch.context() as m:
                m.setattr(_torch_sampler.ChainRunner, "after_step", stopped)
                with pytest.raises(KeyboardInterrupt):
                    call()
        call()
        return est.coef_samples_
    assert np.array_equal(run(True), run(False))


@pytest.mark.parametrize("params", [dict(temperature=1.0), dict()])
def test_the_network_warnings_point_at_the_users_line(params):
    """Through every run of a fit (``temperature="auto"``: candidates, the
    check, the continuation), the warning is the caller's line's."""
    X, y = _rows()
    est = _small(**params)
    with pytest.warns(MCMCConvergenceWarning) as record:
        est.fit(X, y)
    assert {w.filename for w in record} == {__file__}
