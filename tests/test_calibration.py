"""ECE and predictive entropy (skbayes_sg.diagnostics), against hand computations."""
import numpy as np
import pytest

from skbayes_sg.diagnostics import expected_calibration_error, predictive_entropy


def test_ece_by_hand():
    # 4 bins of width 0.25. Rows and their top-class confidence:
    #   [0.9, 0.1] y=0 -> conf 0.9 (bin (0.75, 1]), correct
    #   [0.8, 0.2] y=1 -> conf 0.8 (bin (0.75, 1]), wrong
    #   [0.3, 0.7] y=1 -> conf 0.7 (bin (0.5, 0.75]), correct
    #   [0.6, 0.4] y=1 -> conf 0.6 (bin (0.5, 0.75]), wrong
    #   [0.5, 0.5] y=0 -> conf 0.5 (bin (0.25, 0.5]: on the edge, the bin below),
    #                     argmax 0, correct
    # bin (0.75, 1]: 2 rows, acc 0.5, conf 0.85 -> 2/5 * 0.35 = 0.14
    # bin (0.5, 0.75]: 2 rows, acc 0.5, conf 0.65 -> 2/5 * 0.15 = 0.06
    # bin (0.25, 0.5]: 1 row, acc 1, conf 0.5 -> 1/5 * 0.5 = 0.10
    proba = np.array([[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4], [0.5, 0.5]])
    y = np.array([0, 1, 1, 1, 0])
    assert expected_calibration_error(y, proba, n_bins=4) == pytest.approx(0.30)
    # one bin: |mean accuracy - mean confidence| = |3/5 - 3.5/5| = 0.1
    assert expected_calibration_error(y, proba, n_bins=1) == pytest.approx(0.10)
    # labels given through classes= (columns in the order of classes)
    labels = np.array(["a", "b"])[y]
    assert expected_calibration_error(labels, proba, n_bins=4,
                                      classes=["a", "b"]) == pytest.approx(0.30)
    # a 1-d probability of the second class is the binary case
    assert expected_calibration_error(y, proba[:, 1], n_bins=4) == pytest.approx(0.30)


def test_ece_matches_the_bin_loop_and_default_bins():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(500, 4)) * 2
    proba = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    y = rng.integers(0, 4, size=500)
    conf, correct = proba.max(1), proba.argmax(1) == y
    edges = np.linspace(0, 1, 16)
    want = sum(((conf > lo) & (conf <= hi)).mean()
               * abs(correct[(conf > lo) & (conf <= hi)].mean()
                     - conf[(conf > lo) & (conf <= hi)].mean())
               for lo, hi in zip(edges[:-1], edges[1:]) if ((conf > lo) & (conf <= hi)).any())
    assert expected_calibration_error(y, proba) == pytest.approx(want, abs=1e-12)
    # classes in an unsorted order map labels to the right columns
    cls = np.array([3, 1, 0, 2])
    assert expected_calibration_error(cls[y], proba, classes=cls) == pytest.approx(want)


def test_predictive_entropy_by_hand():
    proba = np.array([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0], [0.25, 0.25, 0.5]])
    h = predictive_entropy(proba)
    assert h == pytest.approx([np.log(2), 0.0, 1.5 * np.log(2)])
    assert predictive_entropy(np.array([0.5, 1.0])) == pytest.approx([np.log(2), 0.0])


@pytest.mark.parametrize("args, match", [
    ((np.array([0, 1]), np.array([[0.5, 0.6], [0.5, 0.5]])), "sum to one"),
    ((np.array([0, 1, 1]), np.array([[0.5, 0.5], [0.5, 0.5]])), "rows"),
    ((np.array([0, 2]), np.array([[0.5, 0.5], [0.5, 0.5]])), "classes="),
    ((np.array([0, 1]), np.array([[0.5, 0.5], [0.5, 0.5]]), 0), "n_bins"),
])
def test_calibration_errors(args, match):
    with pytest.raises(ValueError, match=match):
        expected_calibration_error(*args)
