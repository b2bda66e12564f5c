"""``init="mode"``: every network chain starts at the mode Adam finds from its
own initialisation (issue 40's "chains started in several basins").

The whole module is skipped without torch.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sklearn.datasets import load_iris  # noqa: E402
from sklearn.utils._param_validation import InvalidParameterError  # noqa: E402

from skbayes_sg.neural_network import SGMCMCMLPClassifier  # noqa: E402


# torch on one thread (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _iris():
    X, y = load_iris(return_X_y=True)
    return (X - X.mean(axis=0)) / X.std(axis=0), y


def _gradient_norm(clf, theta, X, y):
    """``||grad U(theta)||`` by autograd, written here from the model's
    definition: the summed softmax cross-entropy of a ReLU network and the
    fan-in prior (weights ``N(0, s^2 / fan_in)``, biases ``N(0, s_b^2)``)."""
    coefs, intercepts = clf.unpack_params(theta)
    params = [torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True)
              for a in coefs + intercepts]
    weights, biases = params[:len(coefs)], params[len(coefs):]
    h = torch.tensor(X, dtype=torch.float64)
    for layer, (W, b) in enumerate(zip(weights, biases)):
        h = h @ W + b
        if layer < len(weights) - 1:
            h = torch.relu(h)
    target = torch.tensor(np.searchsorted(clf.classes_, y))
    U = torch.nn.functional.cross_entropy(h, target, reduction="sum")
    s, s_b = clf.prior_scale, clf.prior_bias_scale
    for W, b in zip(weights, biases):
        U = U + W.shape[0] / (2 * s ** 2) * (W ** 2).sum() + (b ** 2).sum() / (2 * s_b ** 2)
    U.backward()
    return float(np.sqrt(sum(float((p.grad ** 2).sum()) for p in params)))


# one step so small that the first draw is where the chain started, on every
# row (temperature=1.0: at "auto" iris's fit would run on four fifths of the
# rows first, checked on the fifth held out)
_AT_START = dict(hidden_layer_sizes=(16,), n_warmup=0, n_samples=1, thin=1, step_size=1e-12,
                 dtype="float64", temperature=1.0, random_state=0)


def test_chains_start_at_their_own_modes():
    """With ``init="mode"`` the gradient of ``U`` at each chain's start is a
    small fraction of that at the Glorot start (a mode), and the chains'
    modes differ (each chain searched from its own initialisation)."""
    X, y = _iris()
    glorot = SGMCMCMLPClassifier(**_AT_START).fit(X, y)
    mode = SGMCMCMLPClassifier(init="mode", map_epochs=300, map_learning_rate=1e-2,
                               **_AT_START).fit(X, y)
    for chain in range(4):
        at_glorot = _gradient_norm(glorot, glorot.coef_samples_[chain, 0], X, y)
        at_mode = _gradient_norm(mode, mode.coef_samples_[chain, 0], X, y)
        # measured 0.5-0.8% (0.1% after 1,000 passes: what is left is the
        # search stopping); without the search, 100%
        assert at_mode < 0.03 * at_glorot, (chain, at_mode, at_glorot)
    starts = mode.coef_samples_[:, 0]
    assert np.min(np.linalg.norm(starts[:, None] - starts[None], axis=-1)
                  + np.eye(4) * 1e9) > 1.0


def test_one_search_for_the_start_and_the_control_variates():
    """``subsampling="cv"`` starts at the same mode (one search, not two):
    ``init="mode"`` changes nothing there, and a uniform chain with
    ``init="mode"`` starts where the cv chain does."""
    X, y = _iris()
    cv = SGMCMCMLPClassifier(subsampling="cv", **_AT_START).fit(X, y)
    cv_mode = SGMCMCMLPClassifier(subsampling="cv", init="mode", **_AT_START).fit(X, y)
    np.testing.assert_array_equal(cv.coef_samples_, cv_mode.coef_samples_)
    assert cv.n_grad_evals_ == cv_mode.n_grad_evals_
    uniform = SGMCMCMLPClassifier(init="mode", **_AT_START).fit(X, y)
    np.testing.assert_allclose(uniform.coef_samples_, cv.coef_samples_, atol=1e-8)


def test_a_continued_chain_is_not_searched_again():
    """A ``warm_start`` fit continues the chains where they stopped: its
    gradient evaluations are those of its steps, as with Glorot starts."""
    X, y = _iris()
    settings = dict(hidden_layer_sizes=(8,), n_warmup=20, n_samples=10, thin=2,
                    random_state=0, warm_start=True, map_epochs=30)
    added = {}
    for init in ("auto", "mode"):
        clf = SGMCMCMLPClassifier(init=init, **settings).fit(X, y)
        first = clf.n_grad_evals_
        clf.fit(X, y)
        added[init] = clf.n_grad_evals_ - first
    assert added["mode"] == added["auto"] > 0


def test_a_start_only_the_linear_models_have_is_refused():
    X, y = _iris()
    with pytest.raises(InvalidParameterError, match="'init' parameter"):
        SGMCMCMLPClassifier(init="laplace", n_samples=2).fit(X, y)
