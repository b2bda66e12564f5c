"""The rule of the network's held-out check (``validation_fraction``,
``neural_network/_network_validation.py``) and its parameter's validation,
without torch; the fits are in ``test_mlp_validation.py``.
"""

import numpy as np
import pytest
from sklearn.utils._param_validation import InvalidParameterError

from skbayes_sg.diagnostics._model_average import ModelAverageError
from skbayes_sg.neural_network import SGMCMCMLPClassifier
from skbayes_sg.neural_network._network_validation import (PREDICTION_TOLERANCE,
                                                            prediction_messages)


def _error(bias, se):
    return ModelAverageError(log_loss=0.15, bias=bias, se=se, n_pieces=4, n_rows=250)


def test_the_rule_warns_on_bias_or_se_and_scales_thin_by_their_measured_rates():
    assert prediction_messages(_error(0.005, 0.009), 0.2, 10) == []
    assert prediction_messages(_error(-0.02, 0.009), 0.2, 10) == []   # the bias can only help
    # the default digits fit of doc/mlp.rst: bias 0.022 (1/span: x3), se 0.019
    # (1/sqrt(span): x4) -> 4 times the span, which measured 0.003
    [text] = prediction_messages(_error(0.022, 0.019), 0.2, 10)
    assert "thin=40" in text and "validation_fraction=0.2" in text and "250 held-out" in text
    [text] = prediction_messages(_error(0.001, 0.011), 0.2, 10)       # se alone
    assert "thin=20" in text                                           # at least twice
    assert prediction_messages(_error(PREDICTION_TOLERANCE, PREDICTION_TOLERANCE), 0.2, 5) == []


def test_a_fraction_outside_the_open_unit_interval_is_refused():
    for bad in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(InvalidParameterError, match="validation_fraction"):
            SGMCMCMLPClassifier(validation_fraction=bad).fit(np.zeros((10, 2)), [0, 1] * 5)
