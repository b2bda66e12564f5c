"""Property-based tests (hypothesis): whatever the shapes, dtypes, sparsity,
label encodings and parameter combinations, a fit gives finite draws of the
right shape or raises a clear ``ValueError`` naming a parameter (issue 16)."""
import re

import numpy as np
import pytest
import scipy.sparse as sp

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings            # noqa: E402
from hypothesis import strategies as st                         # noqa: E402

from skbayes_sg import SGMCMCLogisticRegression, SGMCMCRidge    # noqa: E402
from skbayes_sg.exceptions import SamplingDivergedError               # noqa: E402
from skbayes_sg._sampling._registry import SAMPLERS, SUBSAMPLINGS  # noqa: E402

# every public parameter of the estimators, for "the message names one"
PARAMETERS = set(SGMCMCRidge().get_params()) | set(SGMCMCLogisticRegression().get_params())
LABELS = {
    "int": lambda k: np.arange(k),
    "shifted": lambda k: np.arange(k) * 3 - 2,
    "str": lambda k: np.array([f"class-{i}" for i in range(k)]),
    "float": lambda k: np.arange(k, dtype=float) * 2.0,   # integer-valued (sklearn)
    "bool": lambda k: np.array([False, True])[:k],
}
QUICK = dict(n_samples=20, n_warmup=20, n_chains=2, thin=1)


@st.composite
def datasets(draw):
    n = draw(st.integers(2, 40))
    p = draw(st.integers(1, 6))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p)) * draw(st.sampled_from([1e-3, 1.0, 1e3]))
    density = draw(st.sampled_from([1.0, 0.5, 0.1]))
    X[rng.random(X.shape) > density] = 0.0
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    X = X.astype(dtype)
    if draw(st.booleans()):
        X = draw(st.sampled_from([sp.csr_matrix, sp.csc_matrix]))(X)
    return X, rng


@st.composite
def settings_(draw):
    return dict(
        sampler=draw(st.sampled_from(["auto", *SAMPLERS])),
        subsampling=draw(st.sampled_from(["auto", *SUBSAMPLINGS])),
        metric=draw(st.sampled_from(["auto", "identity", "diagonal", "dense"])),
        fit_intercept=draw(st.booleans()),
        batch_size=draw(st.sampled_from(["auto", 1, 5, 1000])),
        random_state=draw(st.integers(0, 10)))


def _names_a_parameter(message):
    words = set(re.findall(r"[A-Za-z_]+", message))
    return bool(words & PARAMETERS) or "X" in words or "y" in words


def _check(est, X, y, n_outputs):
    try:
        est.fit(X, y)
    except SamplingDivergedError as exc:
        assert "step_size" in str(exc)
        return
    except ValueError as exc:
        assert _names_a_parameter(str(exc)), str(exc)
        return
    p = X.shape[1]
    shape = (2, 20, p) if n_outputs == 1 else (2, 20, n_outputs, p)
    assert est.coef_samples_.shape == shape
    assert np.all(np.isfinite(est.coef_samples_))
    assert np.all(np.isfinite(est.intercept_samples_))
    if not est.fit_intercept:
        assert np.all(est.intercept_samples_ == 0)
    pred = est.predict(X)
    assert pred.shape == (X.shape[0],)
    return est


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=datasets(), params=settings_(),
       labels=st.sampled_from(sorted(LABELS)), k=st.integers(2, 3))
def test_logistic_fit_gives_finite_draws_or_a_clear_error(data, params, labels, k):
    X, rng = data
    k = min(k, 2) if labels == "bool" else k
    classes = LABELS[labels](k)
    y = classes[rng.integers(0, k, size=X.shape[0])]
    est = SGMCMCLogisticRegression(**params, **QUICK)
    n_classes = len(np.unique(y))
    fitted = _check(est, X, y, 1 if n_classes <= 2 else n_classes)
    if fitted is not None:
        proba = fitted.predict_proba(X)
        assert proba.shape == (X.shape[0], n_classes)
        np.testing.assert_allclose(proba.sum(axis=1), 1.0, rtol=1e-6)
        assert set(np.unique(fitted.predict(X))) <= set(np.unique(y))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=datasets(), params=settings_(),
       noise=st.sampled_from(["auto", 0.3]), alpha=st.sampled_from(["auto", 1.0]))
def test_ridge_fit_gives_finite_draws_or_a_clear_error(data, params, noise, alpha):
    X, rng = data
    y = rng.normal(size=X.shape[0]) * rng.choice([1e-2, 1.0, 1e2])
    est = SGMCMCRidge(noise_var=noise, alpha=alpha, **params, **QUICK)
    fitted = _check(est, X, y, 1)
    if fitted is not None:
        mean, std = fitted.predict(X, return_std=True)
        assert np.all(np.isfinite(mean)) and np.all(std > 0)
