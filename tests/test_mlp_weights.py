"""Row weights of the torch network: ``sample_weight`` and ``class_weight``.

Frequency weights: the potential is ``alpha ||theta||^2 / 2 + sum_i w_i U_i``,
so an integer weight ``k`` is the row repeated ``k`` times and a zero weight
the row left out. The tests check

- the weighted backward pass against autograd and against repeated rows, and
  that every gradient estimator averages to the weighted full-data gradient
  over a data pass (exactly);
- with one minibatch holding all the data, a weighted chain and the chain on
  the repeated rows are the same chain (same seed: same start and noise), up
  to float64 rounding, for every sampler and estimator: every rule that reads
  the amount of data (automatic step and friction, pSGLD's mean gradient, the
  CV mode search) reads the total weight;
- with minibatches, the posterior law: integer weights against repeated
  rows, zero weights against dropped rows (posterior means and sds within
  their Monte Carlo error);
- all-ones weights are the unweighted fit bit for bit; ``class_weight`` is
  ``sample_weight=compute_sample_weight(class_weight, y)``; bad weights are
  refused naming ``sample_weight``.

The whole module is skipped without torch; torch runs on one thread.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sklearn.utils.class_weight import compute_sample_weight  # noqa: E402

from skbayes_sg.neural_network import SGMCMCMLPClassifier  # noqa: E402
from skbayes_sg.neural_network import _torch_sampler  # noqa: E402

try:  # tests/ as a package or as a plain directory on sys.path
    from ._reference import small_classification as _small_data
except ImportError:
    from _reference import small_classification as _small_data


# torch on one thread (tests/conftest.py)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


_SMALL = dict(hidden_layer_sizes=(6,), step_size=1e-3, batch_size=16,
              n_samples=5, n_warmup=10, thin=3, n_chains=2)
_COMBOS = [("sgld", "uniform"), ("psgld", "uniform"), ("sghmc", "uniform"),
           ("sghmc", "ewsg"), ("psgld", "ewsg"), ("sgld", "svrg"), ("sgld", "cv")]


# ---------------------------------------------------------------------------
# the weighted gradient, exactly
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("sizes, binary", [((5, 7, 4, 3), False), ((5, 6, 1), True)])
def test_weighted_loss_grad_matches_autograd_and_repeated_rows(sizes, binary):
    gen = torch.Generator().manual_seed(0)
    net = _torch_sampler.MLPNet(sizes, "tanh", binary)
    theta = torch.randn(net.n_params, dtype=torch.float64, generator=gen)
    X = torch.randn(11, sizes[0], dtype=torch.float64, generator=gen)
    if binary:
        y = torch.randint(0, 2, (11,), generator=gen).double()
    else:
        y = torch.randint(0, sizes[-1], (11,), generator=gen)
    w = torch.tensor([0, 1, 2, 3, 0, 1, 4, 1, 2, 0, 1], dtype=torch.float64)
    out = torch.empty_like(theta)
    loss = net.loss_grad(theta, X, y, out, weights=w)

    t = theta.clone().requires_grad_(True)
    z = net.logits(t, X)
    if binary:
        ce = torch.nn.functional.binary_cross_entropy_with_logits(z[:, 0], y, reduction="none")
    else:
        ce = torch.nn.functional.cross_entropy(z, y, reduction="none")
    ref = (w * ce).sum()
    ref.backward()
    np.testing.assert_allclose(loss.item(), ref.item(), rtol=1e-12)
    np.testing.assert_allclose(out.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12)

    reps = w.long()
    rep_out = torch.empty_like(theta)
    rep_loss = net.loss_grad(theta, X.repeat_interleave(reps, 0),
                             y.repeat_interleave(reps, 0), rep_out)
    np.testing.assert_allclose(loss.item(), rep_loss.item(), rtol=1e-12)
    np.testing.assert_allclose(out.numpy(), rep_out.numpy(), rtol=1e-10, atol=1e-12)


_DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a GPU"))]


@pytest.mark.parametrize("device", _DEVICES)
@pytest.mark.parametrize("subsampling", ["uniform", "svrg", "cv"])
def test_estimators_average_to_the_weighted_gradient(subsampling, device):
    """Over one data pass (consecutive blocks of one permutation: every row
    once) the mean of the estimates ``c * buf`` is exactly the weighted
    full-data gradient ``sum_i w_i grad U_i``: the estimators are unbiased
    for the weighted potential (the prior term is exact and added apart)."""
    X, y = _small_data(n=64)
    w = np.random.default_rng(1).integers(0, 4, size=64).astype(np.float64)
    params = dict(sampler="sgld", subsampling=subsampling, step_size=1e-3, batch_size=16,
                  alpha=1.0, temperature=1.0, friction=1.0, ewsg_chain_length=1,
                  snapshot_period=None, map_epochs=1, map_learning_rate=1e-2, verbose=0)
    net = _torch_sampler.MLPNet((4, 6, 3), "relu", False)
    Xt = torch.tensor(X, dtype=torch.float64, device=device)
    yt = torch.tensor(y, dtype=torch.int64, device=device)
    wt = torch.tensor(w, device=device)
    runner = _torch_sampler.ChainRunner(net, Xt, yt, params,
                                        torch.Generator(device=device).manual_seed(0),
                                        weights=wt)
    runner.init_state()
    assert runner.n_eff == w.sum()
    theta = runner.state["theta"].clone()
    if subsampling == "svrg":
        runner.state["anchor"] = theta + 0.1   # an anchor away from theta
        runner.anchor_grad = runner.full_grad(runner.state["anchor"])
    theta.add_(0.05)                           # and theta away from the CV mode
    runner.state["perm"], runner.state["pos"] = None, 0
    total = torch.zeros_like(theta)
    for _ in range(64 // 16):
        _, buf, c = runner.estimate(theta)
        total.add_(buf, alpha=c)
    full = torch.zeros_like(theta)
    net.loss_grad(theta, Xt, yt, full, weights=wt)
    total, full = total.cpu().numpy(), full.cpu().numpy()
    np.testing.assert_allclose(total / 4, full, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(runner.full_grad(theta).cpu().numpy(), full, rtol=1e-12)
    unweighted = torch.empty_like(theta)
    net.loss_grad(theta, Xt, yt, unweighted)
    assert not np.allclose(full, unweighted.cpu().numpy(), rtol=0.1)


class _TorchOpsRunner(_torch_sampler.ChainRunner):
    """The torch-operation step (the GPU code path), run on the CPU."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fused = False


@pytest.mark.parametrize("torch_ops", [False, True], ids=["fused-cpu", "torch-ops"])
@pytest.mark.parametrize("sampler, subsampling", [c for c in _COMBOS if c[1] != "ewsg"])
def test_full_batch_weighted_chain_is_the_repeated_rows_chain(sampler, subsampling,
                                                              torch_ops, monkeypatch):
    """One minibatch of all the rows: the weighted fit and the fit on the
    repeated rows (``np.repeat(X, w)``) follow the same chain (same seed:
    same start and noise), on both step paths. This holds only if the
    automatic step and friction, pSGLD's ``V`` (mean gradient ``g / n``), the
    CV mode search (on ``U / n``) and the SVRG snapshots all read the total
    weight where they read the number of rows. (EWSG draws its acceptance
    from the generator after the permutations, which differ in length.)"""
    if torch_ops:
        monkeypatch.setattr(_torch_sampler, "ChainRunner", _TorchOpsRunner)
    X, y = _small_data(n=30)
    w = np.random.default_rng(2).integers(1, 4, size=30)
    kw = dict(_SMALL, sampler=sampler, subsampling=subsampling, step_size="auto",
              dtype="float64", map_epochs=3, map_learning_rate=0.01, random_state=5)
    weighted = SGMCMCMLPClassifier(**dict(kw, batch_size=30)).fit(X, y, sample_weight=w)
    repeated = SGMCMCMLPClassifier(**dict(kw, batch_size=int(w.sum()))).fit(
        np.repeat(X, w, axis=0), np.repeat(y, w))
    assert weighted.step_size_ == pytest.approx(repeated.step_size_, rel=1e-15)
    assert not np.array_equal(weighted.coef_samples_[:, 0], weighted.coef_samples_[:, -1])
    np.testing.assert_allclose(weighted.coef_samples_, repeated.coef_samples_,
                               rtol=1e-5, atol=1e-6)
    unweighted = SGMCMCMLPClassifier(**dict(kw, batch_size=30)).fit(X, y)
    assert np.abs(unweighted.coef_samples_ - weighted.coef_samples_).max() > 1e-3


@pytest.mark.parametrize("sampler, subsampling", _COMBOS)
def test_fused_cpu_step_matches_the_torch_operations_with_weights(sampler, subsampling,
                                                                  monkeypatch):
    """Both step paths carry the weights: the same weighted chain up to
    rounding (as tests/test_mlp.py checks without weights).  In float64, so
    that the tolerance is rounding's: in float32 pSGLD's division by its
    RMSprop scale lets one number of psgld-ewsg drift by 4e-5 in 25 steps
    under the fan-in prior."""
    X, y = _small_data()
    w = np.random.default_rng(3).uniform(0.0, 3.0, size=len(X))
    kw = dict(_SMALL, sampler=sampler, subsampling=subsampling, map_epochs=2,
              random_state=1, dtype="float64")
    fused = SGMCMCMLPClassifier(**kw).fit(X, y, sample_weight=w)
    monkeypatch.setattr(_torch_sampler, "ChainRunner", _TorchOpsRunner)
    ops = SGMCMCMLPClassifier(**kw).fit(X, y, sample_weight=w)
    np.testing.assert_allclose(ops.coef_samples_, fused.coef_samples_, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------------------
# (a) all-ones weights are the unweighted fit
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("sampler, subsampling", _COMBOS)
def test_unit_weights_are_the_unweighted_fit_bit_for_bit(sampler, subsampling):
    X, y = _small_data()
    kw = dict(_SMALL, sampler=sampler, subsampling=subsampling, map_epochs=2,
              step_size="auto", random_state=3)
    plain = SGMCMCMLPClassifier(**kw).fit(X, y)
    ones = SGMCMCMLPClassifier(**kw).fit(X, y, sample_weight=np.ones(len(X)))
    np.testing.assert_array_equal(ones.coef_samples_, plain.coef_samples_)
    assert ones.step_size_ == plain.step_size_
    assert ones.n_grad_evals_ == plain.n_grad_evals_
    if subsampling == "uniform":
        unit = SGMCMCMLPClassifier(class_weight={0: 1, 1: 1.0, 2: 1}, **kw).fit(
            X, y, sample_weight=[1] * len(X))
        np.testing.assert_array_equal(unit.coef_samples_, plain.coef_samples_)
        pf_plain = SGMCMCMLPClassifier(**kw).partial_fit(X, y, classes=[0, 1, 2])
        pf_ones = SGMCMCMLPClassifier(**kw).partial_fit(X, y, classes=[0, 1, 2],
                                                        sample_weight=np.ones(len(X)))
        np.testing.assert_array_equal(pf_ones.coef_samples_, pf_plain.coef_samples_)


def test_weighted_partial_fit_and_warm_start_continue_the_chain():
    """Weighted continuation: two halves (warm start, two partial_fit calls)
    are one long weighted run, as without weights."""
    X, y = _small_data()
    w = np.arange(len(X)) % 3
    kw = dict(_SMALL, random_state=0, sampler="psgld")
    full = SGMCMCMLPClassifier(**dict(kw, n_samples=10)).fit(X, y, sample_weight=w)
    half = SGMCMCMLPClassifier(**dict(kw, warm_start=True)).fit(X, y, sample_weight=w)
    half.fit(X, y, sample_weight=w)
    np.testing.assert_array_equal(half.coef_samples_, full.coef_samples_[:, 5:])
    pf = SGMCMCMLPClassifier(**kw)
    pf.partial_fit(X, y, classes=np.unique(y), sample_weight=w)
    pf.partial_fit(X, y, sample_weight=w)
    np.testing.assert_array_equal(pf.coef_samples_, full.coef_samples_)


# ---------------------------------------------------------------------------
# (b), (c) the posterior law with minibatches
# ---------------------------------------------------------------------------
def _logistic_problem():
    """One feature and a bias (2 parameters, no hidden layer): a posterior
    whose means and sds are well defined (no label switching), sampled by the
    same chains as a network's. Weights favour class 1, so that the weighted
    posterior sits several sds away from the unweighted one."""
    rng = np.random.default_rng(0)
    n = 30
    x = rng.standard_normal(n)
    x = (x - x.mean()) / x.std()
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(0.5 + x)))).astype(int)
    w = rng.integers(1, 3, n) + 2 * y            # 1..4, total 79
    keep = (rng.random(n) < 0.5) | (y == 0)      # zero weights: half of class 1
    return x[:, None], y, w, keep.astype(int)


def _summary(draws, n_batches=20):
    """Posterior means and sds of the parameters with their Monte Carlo
    standard errors (batch means: ``n_batches`` per chain)."""
    n_chains = draws.shape[0]
    batches = draws.reshape(n_chains * n_batches, -1, draws.shape[-1]).astype(np.float64)
    bm = batches.mean(axis=1)
    mean = bm.mean(axis=0)
    se_mean = bm.std(axis=0, ddof=1) / np.sqrt(len(bm))
    sq = ((batches - mean) ** 2).mean(axis=1)
    sd = np.sqrt(sq.mean(axis=0))
    se_sd = sq.std(axis=0, ddof=1) / np.sqrt(len(sq)) / (2 * sd)
    return mean, se_mean, sd, se_sd


# sampler, subsampling, step * total weight (None: "auto"), extra parameters
_LAW = {
    "sgld": ("sgld", "uniform", None, {}),
    "psgld": ("psgld", "uniform", 0.045, {}),
    "svrg": ("sgld", "svrg", None, {}),
    "sghmc-ewsg": ("sghmc", "ewsg", None, {}),
    "cv": ("sgld", "cv", None, {"map_epochs": 50, "map_learning_rate": 0.05}),
}
_LAW_FAST = ("sgld", "psgld")


def _law_pair(name, X, y, w, X_ref, y_ref):
    """Weighted fit on (X, y, w) and unweighted fit on (X_ref, y_ref), the
    same amount of data (sum(w) rows), minibatches of a third of the rows
    (so the same n/b), the same step."""
    sampler, subsampling, hw, extra = _LAW[name]
    step = "auto" if hw is None else hw / w.sum()
    kw = dict(hidden_layer_sizes=(), sampler=sampler, subsampling=subsampling,
              step_size=step, n_samples=5000, n_warmup=500, thin=2, n_chains=4, **extra)
    a = SGMCMCMLPClassifier(batch_size=len(X) // 3, random_state=0, **kw).fit(
        X, y, sample_weight=w)
    b = SGMCMCMLPClassifier(batch_size=len(X_ref) // 3, random_state=1, **kw).fit(
        X_ref, y_ref)
    assert a.step_size_ == pytest.approx(b.step_size_, rel=1e-12)
    return _summary(a.coef_samples_), _summary(b.coef_samples_)


def _assert_same_law(fit_a, fit_b):
    """Means and sds agree within 4 Monte Carlo standard errors of their
    difference, plus 0.05 posterior sd (means) and 5% (sds) for the O(h)
    bias of the minibatch noise, which differs between the two data sets
    (measured: at most 0.07 sd and 5% from the exact posterior, by
    quadrature, for every estimator here)."""
    (ma, sma, sa, ssa), (mb, smb, sb, ssb) = fit_a, fit_b
    tol_mean = 4 * np.hypot(sma, smb) + 0.05 * sb
    tol_sd = 4 * np.hypot(ssa, ssb) + 0.05 * sb
    assert np.all(np.abs(ma - mb) <= tol_mean), (ma, mb, tol_mean)
    assert np.all(np.abs(sa - sb) <= tol_sd), (sa, sb, tol_sd)


@pytest.mark.parametrize("name", [
    pytest.param(k, marks=() if k in _LAW_FAST else pytest.mark.slow) for k in _LAW])
def test_integer_weights_are_repeated_rows_in_law(name):
    X, y, w, _ = _logistic_problem()
    a, b = _law_pair(name, X, y, w, np.repeat(X, w, axis=0), np.repeat(y, w))
    _assert_same_law(a, b)


@pytest.mark.parametrize("name", [
    pytest.param(k, marks=() if k == "sgld" else pytest.mark.slow) for k in _LAW])
def test_zero_weights_are_dropped_rows_in_law(name):
    X, y, _, keep = _logistic_problem()
    a, b = _law_pair(name, X, y, keep, X[keep == 1], y[keep == 1])
    _assert_same_law(a, b)


# ---------------------------------------------------------------------------
# (d) class_weight, (e) bad weights
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("class_weight", ["balanced", {0: 0.5, 2: 3.0}])
def test_class_weight_is_sample_weight(class_weight):
    X, y = _small_data()
    y = np.where(np.arange(len(y)) % 5 == 0, 1, y)        # unbalanced classes
    labels = np.array(["a", "b", "c"])[y]
    cw = class_weight if class_weight == "balanced" else {
        "abc"[k]: v for k, v in class_weight.items()}
    kw = dict(_SMALL, subsampling="svrg", random_state=2)
    by_class = SGMCMCMLPClassifier(class_weight=cw, **kw).fit(X, labels)
    by_row = SGMCMCMLPClassifier(**kw).fit(
        X, labels, sample_weight=compute_sample_weight(cw, labels))
    np.testing.assert_array_equal(by_class.coef_samples_, by_row.coef_samples_)
    assert by_class.step_size_ == by_row.step_size_
    # both multiply
    sw = np.arange(len(X)) % 4
    both = SGMCMCMLPClassifier(class_weight=cw, **kw).fit(X, labels, sample_weight=sw)
    rows = SGMCMCMLPClassifier(**kw).fit(
        X, labels, sample_weight=sw * compute_sample_weight(cw, labels))
    np.testing.assert_array_equal(both.coef_samples_, rows.coef_samples_)
    assert not np.array_equal(both.coef_samples_, by_class.coef_samples_)


def test_auto_step_follows_the_total_weight():
    X, y = _small_data()
    w = np.full(len(X), 2.5)
    for sampler, want in (("sgld", 0.2 / 150), ("psgld", 1e-3 / 150),
                          ("sghmc", np.sqrt(0.01 / 150))):
        clf = SGMCMCMLPClassifier(sampler=sampler, **dict(_SMALL, step_size="auto"))
        clf.fit(X, y, sample_weight=w)
        assert clf.step_size_ == pytest.approx(want, rel=1e-12)
    balanced = SGMCMCMLPClassifier(class_weight="balanced", **dict(_SMALL, step_size="auto"))
    assert balanced.fit(X, y).step_size_ == pytest.approx(0.2 / len(X), rel=1e-12)


@pytest.mark.parametrize("method", ["fit", "partial_fit"])
@pytest.mark.parametrize("bad, match", [
    (-np.ones(60), "sample_weight"),
    (np.r_[np.ones(59), -1.0], "sample_weight"),
    (np.ones(59), "sample_weight"),
    (np.ones((60, 2)), "sample_weight"),
    (np.zeros(60), "sample_weight"),
    (np.r_[np.ones(59), np.nan], "sample_weight|NaN"),
])
def test_bad_weights_are_refused(method, bad, match):
    X, y = _small_data()
    clf = SGMCMCMLPClassifier(**_SMALL)
    kwargs = {"classes": [0, 1, 2]} if method == "partial_fit" else {}
    with pytest.raises(ValueError, match=match):
        getattr(clf, method)(X, y, sample_weight=bad, **kwargs)
    assert not hasattr(clf, "coef_samples_")


def test_bad_class_weight_is_refused():
    X, y = _small_data()
    with pytest.raises(ValueError, match="class_weight"):
        SGMCMCMLPClassifier(class_weight="uniform", **_SMALL).fit(X, y)
    # class weights that zero every row name sample_weight and class_weight
    with pytest.raises(ValueError, match="sample_weight is zero.*class_weight"):
        SGMCMCMLPClassifier(class_weight={0: 0, 1: 0, 2: 0}, **_SMALL).fit(X, y)
