"""The rule of ``temperature="auto"`` (``neural_network/_network_temperature.py``):
the candidates and the choice between them, without torch; the fits are in
``test_mlp_temperature.py``.
"""

import numpy as np
import pytest

from skbayes_sg.neural_network import SGMCMCMLPClassifier
from skbayes_sg.neural_network._network_temperature import (
    COLD_PRIOR_FACTOR, COLD_TEMPERATURE, MODE_WARMUP, SELECTION_Z, candidate_settings,
    choose)


def test_the_candidates_are_the_posterior_and_the_measured_cold_model():
    start = {"init": "mode", "map_epochs": 50, "map_learning_rate": 1e-2,
             "n_warmup": MODE_WARMUP}
    posterior, cold = candidate_settings(SGMCMCMLPClassifier(temperature="auto"))
    assert posterior == dict(start, temperature=1.0)
    assert cold == dict(start, temperature=COLD_TEMPERATURE,
                        prior_scale=4.0 * COLD_PRIOR_FACTOR)
    # what the user set stays theirs: their mode search, warm-up and per-layer scales
    posterior, cold = candidate_settings(SGMCMCMLPClassifier(
        hidden_layer_sizes=(5,), temperature="auto", init="mode", map_epochs=7,
        n_warmup=300, prior_scale=[1.0, 3.0]))
    assert posterior == {"temperature": 1.0}
    assert cold == {"temperature": COLD_TEMPERATURE,
                    "prior_scale": [1.0 * COLD_PRIOR_FACTOR, 3.0 * COLD_PRIOR_FACTOR]}


def test_the_cold_model_is_kept_only_when_it_predicts_better_by_two_standard_errors():
    rng = np.random.default_rng(0)
    posterior = rng.gamma(2.0, 0.05, size=400)
    noise = rng.normal(0.0, 0.02, size=400)
    se = noise.std(ddof=1) / np.sqrt(400)
    # better by 4 se: kept; by 1 se: a tie, which goes to the posterior
    for shift, expected in ((-4 * se, 1), (-1 * se, 0), (3 * se, 0)):
        cold = posterior + noise - noise.mean() + shift
        index, diff, d_se = choose(posterior, cold)
        assert index == expected
        assert diff == pytest.approx(shift) and d_se == pytest.approx(se)
    assert SELECTION_Z == 2.0
    # frequency weights: a weight k is the row k times (the mean), a zero
    # weight the row left out
    counts = rng.integers(0, 4, size=400)
    cold = posterior + noise - 4 * se
    repeated = choose(np.repeat(posterior, counts), np.repeat(cold, counts))
    weighted = choose(posterior, cold, weights=counts)
    assert weighted[1] == pytest.approx(repeated[1])
    # the se counts the held-out rows, not their weights: a repeated row is
    # not more evidence about the difference than the row itself
    assert weighted[2] > repeated[2]
    kept = counts > 0
    assert choose(posterior, cold, weights=kept.astype(float))[1:] == pytest.approx(
        choose(posterior[kept], cold[kept])[1:])
    # one row cannot measure a difference
    assert choose([0.5], [0.1])[0] == 0
