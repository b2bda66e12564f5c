"""Network chains stepped together (``neural_network/_net_lockstep.py``).

A fit's chains whose steps are one plain minibatch gradient each run in
lockstep: every step computes all their gradients in one batched pass of
``MLPNet.loss_grad`` over a stack of chains, and each chain then takes its
own step (its own minibatch order, noise stream, prior and draws). The
tests check the pieces against the one-chain computations they replace:

- the stacked ``loss_grad`` against each chain's own, for every activation,
  binary and multi-class outputs, with and without row weights, in float32
  and float64;
- the fitted draws of chains stepped together against the same chains run
  one after the other (the Adam mode searches of ``init="mode"`` too, the
  defaults' ``temperature="auto"``, sparse and weighted rows), to the
  rounding of the batched products;
- which configurations step together, and that the others still run;
- a step's generator driven with one chain's estimator (``run_step``) and
  several chains' steps driven together when they ask for different numbers
  of gradients.

The whole module is skipped without torch.
"""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

torch = pytest.importorskip("torch")

from skbayes_sg.neural_network import SGMCMCMLPClassifier  # noqa: E402
from skbayes_sg.neural_network import _net_lockstep  # noqa: E402
from skbayes_sg.neural_network._torch_sampler import MLPNet  # noqa: E402

#: the stacked products may take another BLAS kernel than one chain's: their
#: sums in another order, a few units in the last place of each number
_RTOL = {torch.float32: 1e-5, torch.float64: 1e-12}


def _data(n=120, d=7, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    y = np.arange(n) % classes
    X = rng.standard_normal((n, d))
    X[:, 0] += y
    return X, y


@pytest.mark.parametrize(
    "activation, sizes, binary, weighted, dtype",
    list(itertools.product(["relu", "tanh", "logistic", "identity"],
                           [(9, 11, 4), (9, 6, 5, 3), (9, 4)],
                           [False, True], [False, True],
                           [torch.float32, torch.float64])))
def test_stacked_loss_grad_is_each_chains_own(activation, sizes, binary, weighted, dtype):
    if binary:
        sizes = sizes[:-1] + (1,)
    net = MLPNet(sizes, activation, binary)
    C, m = 3, 23
    g = torch.Generator().manual_seed(1)
    theta = torch.stack([net.init_params(g, "cpu", dtype) for _ in range(C)])
    X = torch.randn(C, m, sizes[0], generator=g, dtype=dtype)
    y = (torch.randint(0, 2, (C, m), generator=g).to(dtype) if binary
         else torch.randint(0, sizes[-1], (C, m), generator=g))
    w = torch.rand(C, m, generator=g, dtype=dtype) if weighted else None
    stacked = torch.full_like(theta, np.nan)
    loss = net.loss_grad(theta, X, y, stacked, weights=w)
    assert loss.shape == (C,)
    for c in range(C):
        own = torch.full((net.n_params,), np.nan, dtype=dtype)
        own_loss = net.loss_grad(theta[c], X[c], y[c], own,
                                 weights=None if w is None else w[c])
        scale = float(own.abs().max())
        np.testing.assert_allclose(stacked[c].numpy(), own.numpy(), rtol=0,
                                   atol=_RTOL[dtype] * scale)
        np.testing.assert_allclose(float(loss[c]), float(own_loss), rtol=_RTOL[dtype])


def _fit_both(monkeypatch, X, y, **params):
    """The same estimator fitted with its chains stepped together and one
    after the other; returns both and whether the first stepped together."""
    together = []
    real = _net_lockstep.steps_together

    def spy(runners):
        result = real(runners)
        together.append(result)
        return result
    monkeypatch.setattr(_net_lockstep, "steps_together", spy)
    fast = SGMCMCMLPClassifier(**params).fit(X, y)
    monkeypatch.setattr(_net_lockstep, "steps_together", lambda runners: False)
    slow = SGMCMCMLPClassifier(**params).fit(X, y)
    return fast, slow, together


_SMALL = dict(hidden_layer_sizes=(8,), batch_size=16, n_samples=20, n_warmup=30, thin=2,
              n_chains=3, temperature=1.0, random_state=0, dtype="float64")


def _same_chains(fast, slow):
    np.testing.assert_allclose(fast.coef_samples_, slow.coef_samples_, rtol=0,
                               atol=1e-9 * np.abs(slow.coef_samples_).max())
    assert fast.n_grad_evals_ == slow.n_grad_evals_
    assert fast.n_steps_ == slow.n_steps_


@pytest.mark.parametrize("sampler, subsampling", [
    *[(s, "uniform") for s in ["sgld", "psgld", "sghmc", "baoab", "sgnht", "uld",
                               "sghmc-leapfrog"]],
    ("sgld", "svrg"), ("sghmc-leapfrog", "svrg"), ("baoab", "cv"), ("sgld", "cv-mode")])
def test_chains_stepped_together_are_the_chains_run_alone(monkeypatch, sampler, subsampling):
    # one gradient a step, or K + 1 (leapfrog: each asked for together);
    # SVRG and control variates: each chain's minibatch at its anchor too
    X, y = _data()
    extra = dict(n_leapfrog=3) if sampler == "sghmc-leapfrog" else {}
    if subsampling.startswith("cv"):
        extra["map_epochs"] = 2
    if subsampling == "cv-mode":       # init="mode" too: the anchors still each chain's
        subsampling, extra["init"] = "cv", "mode"
    fast, slow, together = _fit_both(monkeypatch, X, y, sampler=sampler, step_size=1e-3,
                                     subsampling=subsampling, **extra, **_SMALL)
    assert together and all(together)
    _same_chains(fast, slow)
    # each chain is its own: the chains did not take one another's steps
    assert not np.allclose(fast.coef_samples_[0], fast.coef_samples_[1])


def test_mode_searches_and_schedules_together(monkeypatch):
    # init="mode": the chains' Adam searches run together too; a cyclical
    # schedule changes the step at every step of every chain
    X, y = _data(classes=2)
    fast, slow, together = _fit_both(monkeypatch, X, y, init="mode", map_epochs=3,
                                     schedule="cyclical", step_size=1e-3,
                                     prior_scale=2.0, **_SMALL)
    assert together and all(together)
    _same_chains(fast, slow)


def test_sparse_and_weighted_rows_together(monkeypatch):
    X, y = _data(n=90)
    X[np.abs(X) < 0.8] = 0.0
    weights = np.random.default_rng(3).integers(1, 4, size=len(y)).astype(float)
    params = dict(_SMALL, step_size=1e-3)
    together = []
    real = _net_lockstep.steps_together
    monkeypatch.setattr(_net_lockstep, "steps_together",
                        lambda r: together.append(real(r)) or together[-1])
    fast = SGMCMCMLPClassifier(**params).fit(sp.csr_matrix(X), y, sample_weight=weights)
    monkeypatch.setattr(_net_lockstep, "steps_together", lambda runners: False)
    slow = SGMCMCMLPClassifier(**params).fit(X, y, sample_weight=weights)
    assert together and all(together)
    _same_chains(fast, slow)


@pytest.mark.parametrize("params", [
    dict(metropolis=True),                                   # MALA, adapting its step
    dict(metropolis=True, step_size=1e-3, schedule="cyclical"),
    dict(metropolis=True, hyperprior=(2.0, 2.0)),             # a Gibbs step every step
    dict(metropolis=False, sampler="baoab", step_size=1e-3),
])
def test_full_batches_step_together(monkeypatch, params):
    # every row each chain's minibatch: the rows are shared; with MALA the
    # proposals' gradients are computed together and each chain decides
    X, y = _data(n=60)
    fast, slow, together = _fit_both(monkeypatch, X, y, **{**_SMALL, "batch_size": 500,
                                                           **params})
    assert together and all(together)
    _same_chains(fast, slow)
    if params["metropolis"]:
        assert fast.metropolis_
        np.testing.assert_allclose([fast.acceptance_rate_, fast.step_size_],
                                   [slow.acceptance_rate_, slow.step_size_], rtol=1e-9)


def test_defaults_step_together(monkeypatch):
    # temperature="auto": both candidates and the continuation on every row
    X, y = _data(n=400, d=6)
    fast, slow, together = _fit_both(monkeypatch, X, y, hidden_layer_sizes=(10,),
                                     random_state=0, dtype="float64")
    assert together and all(together)
    _same_chains(fast, slow)
    assert fast.temperature_ == slow.temperature_
    np.testing.assert_allclose(fast.predict_proba(X), slow.predict_proba(X), rtol=1e-9)


@pytest.mark.parametrize("params", [
    dict(subsampling="ewsg"),
    dict(n_chains=1),
])
def test_other_chains_run_one_after_the_other(monkeypatch, params):
    X, y = _data()
    together = []
    real = _net_lockstep.steps_together
    monkeypatch.setattr(_net_lockstep, "steps_together",
                        lambda r: together.append(real(r)) or together[-1])
    est = SGMCMCMLPClassifier(**{**_SMALL, "step_size": 1e-4, **params}).fit(X, y)
    assert together and not any(together)
    assert np.isfinite(est.coef_samples_).all()


def test_large_stacks_run_one_after_the_other():
    # every chain's activations at once would pass LOCKSTEP_ELEMENTS
    net = MLPNet((5, 1000, 3), "relu", False)

    class Runner:
        b, n, metropolis, X = 3000, 10_000, None, object()
        p = {"subsampling": "uniform"}
    Runner.net = net
    from skbayes_sg.neural_network._net_dynamics import SGLD
    Runner.dynamics = SGLD.__new__(SGLD)
    assert _net_lockstep.steps_together([Runner(), Runner()])
    Runner.b = _net_lockstep.LOCKSTEP_ELEMENTS // (2 * 1000) + 1
    assert not _net_lockstep.steps_together([Runner(), Runner()])


def test_steps_that_ask_for_different_numbers_of_gradients():
    """StackedGradients.drive: while every chain asks, one stacked pass;
    a chain still asking after the others finished gets its own estimate."""
    from skbayes_sg.neural_network._net_dynamics import run_step

    class Runner:
        def __init__(self, c):
            self.c = c

    def steps(n_asks, log, c):
        total = 0.0
        for i in range(n_asks):
            loss, buf, scale = yield torch.full((2,), float(c))
            log.append((c, i))
            total += float(loss)
        return total

    class Stack(_net_lockstep.StackedGradients):
        def __init__(self):
            self.computed = []
            self.estimates = [lambda theta: (torch.tensor(1.0), theta, 1.0)] * 3

        def compute(self, points):
            self.computed.append([float(p[0]) for p in points])

    stack, log = Stack(), []
    own = [lambda theta: (torch.tensor(10.0), theta, 1.0)] * 3
    losses = stack.drive([steps(n, log, c) for c, n in enumerate([1, 3, 2])], own)
    assert stack.computed == [[0.0, 1.0, 2.0]]          # the one step all three asked in
    assert losses == [1.0, 21.0, 11.0]                  # then each its own
    assert run_step(steps(2, log, 7), lambda theta: (torch.tensor(2.0), theta, 1.0)) == 4.0


@pytest.mark.parametrize("params", [dict(sampler="sghmc"), dict(sampler="sghmc-leapfrog",
                                                                 n_leapfrog=2),
                                    dict(batch_size=500, metropolis=True)])
def test_torch_updates_step_together(monkeypatch, params):
    """The dynamics' torch operations (a GPU's path; ``fused`` off on the
    CPU) read the stacked gradient as the fused sweeps do."""
    from skbayes_sg.neural_network import _torch_sampler
    real_init = _torch_sampler.ChainRunner.__init__

    def torch_path(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self.fused = False
    monkeypatch.setattr(_torch_sampler.ChainRunner, "__init__", torch_path)
    X, y = _data()
    fast, slow, together = _fit_both(monkeypatch, X, y, **{**_SMALL, "step_size": 1e-3,
                                                           **params})
    assert together and all(together)
    _same_chains(fast, slow)
