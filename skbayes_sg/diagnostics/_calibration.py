"""Calibration and uncertainty of predicted class probabilities.

:func:`expected_calibration_error` and :func:`predictive_entropy` work on the
output of any classifier's ``predict_proba`` (the Bayesian model average of
:class:`~skbayes_sg.neural_network.SGMCMCMLPClassifier`, a deep ensemble,
:class:`sklearn.neural_network.MLPClassifier`), so they compare like with like.
"""

import numpy as np

__all__ = ["expected_calibration_error", "predictive_entropy"]


def _check_proba(proba):
    proba = np.asarray(proba, dtype=np.float64)
    if proba.ndim == 1:  # P(positive class) of a binary problem
        proba = np.column_stack([1.0 - proba, proba])
    if proba.ndim != 2 or proba.shape[1] < 2:
        raise ValueError(
            "proba must be the (n_rows, n_classes) output of predict_proba (or, for "
            f"two classes, the 1-d probability of the second class); got shape "
            f"{proba.shape}.")
    if not np.all(np.isfinite(proba)) or np.any(proba < 0):
        raise ValueError("proba must hold finite nonnegative probabilities.")
    if not np.allclose(proba.sum(axis=1), 1.0, atol=1e-6):
        raise ValueError("every row of proba must sum to one (pass predict_proba's output, "
                         "not decision_function's or log-probabilities).")
    return proba


def expected_calibration_error(y_true, proba, n_bins=15, *, classes=None):
    """Expected calibration error of the top-class confidence.

    The rows are binned by their confidence ``c_i = max_k proba[i, k]`` into
    ``n_bins`` equal-width bins ``(k / n_bins, (k + 1) / n_bins]`` (a
    confidence on an edge belongs to the bin below it); with ``acc(B)`` the accuracy of the predicted
    class ``argmax_k proba[i, k]`` and ``conf(B)`` the mean confidence of the
    rows in bin ``B``,

    ``ECE = sum_B (|B| / n) |acc(B) - conf(B)|``

    (Guo et al., 2017; Naeini et al., 2015), empty bins contributing 0.

    Parameters
    ----------
    y_true : array-like of shape (n_rows,)
        True labels: class indices ``0..n_classes-1``, or labels from
        ``classes``.
    proba : array-like of shape (n_rows, n_classes)
        Predicted class probabilities (rows sum to one), columns in the order
        of ``classes``. A 1-d array is taken as the probability of the second
        of two classes.
    n_bins : int, default=15
        Number of equal-width confidence bins.
    classes : array-like of shape (n_classes,) or None, default=None
        Labels of ``proba``'s columns (for example ``clf.classes_``); None:
        ``y_true`` holds column indices.

    Returns
    -------
    ece : float
        In ``[0, 1]``; 0 for a perfectly calibrated classifier.

    Examples
    --------
    >>> import numpy as np
    >>> from skbayes_sg.diagnostics import expected_calibration_error
    >>> proba = np.array([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7]])
    >>> # one occupied bin (0.5, 1]: accuracy 2/3, mean confidence 2.2/3
    >>> round(expected_calibration_error([0, 1, 1], proba, n_bins=2), 4)
    0.0667
    """
    proba = _check_proba(proba)
    if not (isinstance(n_bins, (int, np.integer)) and not isinstance(n_bins, bool)
            and n_bins >= 1):
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}.")
    y_true = np.asarray(y_true).ravel()
    if y_true.shape[0] != proba.shape[0]:
        raise ValueError(f"y_true has {y_true.shape[0]} rows but proba has "
                         f"{proba.shape[0]}; pass the labels of the rows of proba.")
    if classes is not None:
        classes = np.asarray(classes)
        if classes.shape[0] != proba.shape[1]:
            raise ValueError(f"classes has {classes.shape[0]} labels but proba has "
                             f"{proba.shape[1]} columns.")
        if not np.all(np.isin(y_true, classes)):
            raise ValueError("y_true contains labels not in classes.")
        idx = np.array([np.flatnonzero(classes == v)[0] for v in y_true], dtype=np.int64) \
            if classes.dtype == object else np.searchsorted(np.sort(classes), y_true)
        if classes.dtype != object:  # searchsorted ran on the sorted labels
            idx = np.argsort(classes)[idx]
    else:
        idx = y_true.astype(np.int64)
        if not np.array_equal(idx, y_true) or idx.min(initial=0) < 0 \
                or idx.max(initial=0) >= proba.shape[1]:
            raise ValueError(
                "y_true must hold column indices 0..n_classes-1 of proba; for other "
                "labels pass classes= (e.g. classes=clf.classes_).")
    if proba.shape[0] == 0:
        return 0.0
    conf = proba.max(axis=1)
    correct = proba.argmax(axis=1) == idx
    # bins (lo, hi] on np.linspace(0, 1, n_bins + 1), as Guo et al.'s code (a
    # confidence on an edge belongs to the bin below it)
    bins = np.searchsorted(np.linspace(0.0, 1.0, n_bins + 1)[1:-1], conf, side="left")
    n = proba.shape[0]
    acc_sum = np.bincount(bins, weights=correct.astype(np.float64), minlength=n_bins)
    conf_sum = np.bincount(bins, weights=conf, minlength=n_bins)
    return float(np.sum(np.abs(acc_sum - conf_sum)) / n)


def predictive_entropy(proba):
    """Entropy of each row's predicted class distribution, in nats.

    ``H_i = -sum_k p_ik log p_ik`` (``0 log 0 = 0``): 0 for a certain
    prediction, ``log(n_classes)`` for a uniform one. For a Bayesian model
    average it is the total predictive uncertainty (aleatoric plus
    epistemic).

    Parameters
    ----------
    proba : array-like of shape (n_rows, n_classes)
        Predicted class probabilities (rows sum to one); a 1-d array is the
        probability of the second of two classes.

    Returns
    -------
    entropy : ndarray of shape (n_rows,)

    Examples
    --------
    >>> import numpy as np
    >>> from skbayes_sg.diagnostics import predictive_entropy
    >>> predictive_entropy(np.array([[0.5, 0.5], [1.0, 0.0]])).round(4)
    array([0.6931, 0.    ])
    """
    proba = _check_proba(proba)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(proba > 0, proba * np.log(np.where(proba > 0, proba, 1.0)), 0.0)
    return 0.0 - terms.sum(axis=1)  # 0.0 - 0.0: no negative zeros
