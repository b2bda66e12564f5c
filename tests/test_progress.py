"""Progress output (``verbose``, issue 27): one line per phase, redrawn in
place in a terminal; few lines in a log; an ETA over the whole phase; a final
line with the smallest bulk ESS and the largest R-hat."""
import io
import sys

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

from skbayes_sg import SGMCMCLogisticRegression
from skbayes_sg._sampling import _runner
from skbayes_sg._sampling._runner import FitProgress


class _Terminal(io.StringIO):
    def isatty(self):
        return True


class _Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


@pytest.fixture(scope="module")
def data():
    X, y = load_breast_cancer(return_X_y=True)
    return StandardScaler().fit_transform(X), y


def _final_line_agrees(line, est):
    assert line.startswith("fit: ")
    assert " s (set-up " in line and " s, warm-up " in line
    assert f"min bulk ESS {np.nanmin(est.ess_):,.0f} (target {est.target_ess_:,.0f})" in line
    assert f"max R-hat {np.nanmax(est.rhat_):.3f}" in line
    assert f"x {est.n_chains} chains" in line


def test_a_short_fit_writes_one_line_to_a_log(data, capsys, monkeypatch):
    """Not a terminal (pytest's capture): no progress line for a fit shorter
    than LOG_SECONDS, only the final line (the old output: one line per
    segment and chain, 32 for a 1.7 s fit)."""
    # a loaded machine may make the fit last more than 5 s: the throttle itself
    # is tested on a fake clock below
    monkeypatch.setattr(_runner, "LOG_SECONDS", 60.0)
    X, y = data
    est = SGMCMCLogisticRegression(random_state=0, verbose=1).fit(X, y)
    out = capsys.readouterr().out
    assert "\r" not in out and "\x1b" not in out
    lines = out.splitlines()
    assert len(lines) == 1, out
    _final_line_agrees(lines[0], est)


def _fit_in_a_terminal(data, monkeypatch):
    """A default fit with ``verbose=1`` writing to a fake terminal: the
    estimator and what it wrote."""
    term = _Terminal()
    monkeypatch.setattr(sys, "stdout", term)
    X, y = data
    est = SGMCMCLogisticRegression(random_state=0, verbose=1).fit(X, y)
    return est, term.getvalue()


def test_a_terminal_gets_one_line_per_phase_redrawn_in_place(data, monkeypatch):
    """A terminal without tqdm: each phase's line is redrawn with carriage
    returns and ended once; then the final line."""
    monkeypatch.setitem(sys.modules, "tqdm", None)      # import tqdm fails
    monkeypatch.setattr(_runner, "PROGRESS_SECONDS", 0.0)  # redraw at every segment
    est, out = _fit_in_a_terminal(data, monkeypatch)
    lines = out.split("\n")
    assert lines[-1] == ""
    assert [line.split("\r")[-1].split(" (")[0] for line in lines[:2]] == ["warm-up", "sampling"]
    assert out.count("\r") > 2                       # redrawn, not new lines
    assert len(lines) == 4, out
    _final_line_agrees(lines[2], est)


def test_a_log_gets_a_line_every_few_seconds_with_the_phase_eta(monkeypatch):
    """Log mode with a fake clock: lines at least LOG_SECONDS apart, the ETA
    that of the phase's planned steps at the rate measured over the phase
    (not the current pool call's), the end of a phase that printed, and the
    final line."""
    clock = _Clock()
    monkeypatch.setattr(_runner.time, "perf_counter", clock)
    log = io.StringIO()
    p = FitProgress(n_chains=2, verbose=1, stream=log, t_start=clock.t - 0.5)
    assert p.mode == "log"

    def run(seconds):                    # 80 steps per chain a second
        for _ in range(int(seconds / 0.125)):
            clock.t += 0.125
            p.add(0, 20)                 # both chains' steps (counted together)

    p.expect("warm-up", 1000, exact=True)
    run(3.0)
    p.expect("warm-up", 300)             # one pool call within the plan
    assert p.total == 1000
    run(2.0)                             # 5 s: the first line
    assert log.getvalue().splitlines() == [
        "warm-up (2 chains): 400/1,000 steps, 80 steps/s, 5.0 s elapsed, ETA 7.5 s"]
    p.expect("warm-up", 800)             # a longer window than planned: the total grows
    assert p.total == 1200
    run(3.0)                             # no line: 5 s apart
    assert len(log.getvalue().splitlines()) == 1
    p.expect("sampling", 200, exact=True)   # ends the warm-up, which had printed
    clock.t += 1.0
    p.add(0, 200)
    p.add(1, 200)
    p.finish(np.array([850.0, np.nan, 1200.0]), np.array([1.004, 1.0, np.nan]), 800)
    assert log.getvalue().splitlines()[1:] == [
        "warm-up (2 chains): 640 steps in 8.0 s",
        "fit: 9.5 s (set-up 0.5 s, warm-up 640 + sampling 200 steps x 2 chains), "
        "min bulk ESS 850 (target 800), max R-hat 1.004"]


def test_an_interrupted_phase_says_so():
    """verbose=2 writes log lines even to a terminal; a phase cut short ends
    with a line that says why."""
    p = FitProgress(n_chains=1, verbose=2, stream=_Terminal())
    assert p.mode == "log"
    p.expect("sampling", 100, exact=True)
    p.add(0, 40)
    p.close("interrupted")
    lines = p.stream.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("sampling: 40 steps in ")
    assert lines[0].endswith(", interrupted")


def test_tqdm_draws_one_bar_per_phase_in_a_terminal(data, monkeypatch):
    pytest.importorskip("tqdm")
    est, out = _fit_in_a_terminal(data, monkeypatch)
    lines = out.split("\n")
    assert len(lines) == 4, out                # two bars left on screen, the final line
    assert lines[0].split("\r")[-1].startswith("warm-up (4 chains): 100%")
    assert lines[1].split("\r")[-1].startswith("sampling (4 chains): 100%")
    _final_line_agrees(lines[2], est)


def test_the_network_writes_one_line_to_a_log(capsys, monkeypatch):
    """The network's chains (one after the other) share one line and end
    with the final line, on the quantities of its summary (the old output:
    a line per data pass and chain, 146 for a 0.4 s fit)."""
    pytest.importorskip("torch")
    from skbayes_sg.neural_network import SGMCMCMLPClassifier

    monkeypatch.setattr(_runner, "LOG_SECONDS", 60.0)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4))
    y = (X[:, 0] > 0).astype(int)
    # one fit at one temperature (temperature="auto" would write a line for
    # each candidate it runs)
    est = SGMCMCMLPClassifier(hidden_layer_sizes=(4,), n_samples=50, n_warmup=50, thin=1,
                              n_chains=2, temperature=1.0, random_state=0, verbose=1)
    with pytest.warns(Warning):     # 50 draws: the convergence warning
        est.fit(X, y)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("fit: ")
    assert " s (warm-up and sampling 100 steps x 2 chains), " in lines[0]
    from skbayes_sg.diagnostics._convergence import bulk_ess_and_rhat
    ess, rhat = bulk_ess_and_rhat(est.convergence_quantities()[0])
    assert f"min bulk ESS {np.nanmin(ess):,.0f}, max R-hat {np.nanmax(rhat):.3f}" in lines[0]
