"""The network's priors, step schedules and defaults (issue 26), at T = 1.

- the fan-in prior's gradient and the Gamma hyperprior's Gibbs step, against
  formulas written here;
- the schedules' step factors and kept steps;
- at ``temperature=1``: the model average beats the MAP net of the same model
  on a small problem, and the defaults beat ``MLPClassifier``'s log-loss on
  breast cancer.
"""
import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from sklearn.datasets import load_breast_cancer, make_classification  # noqa: E402
from sklearn.metrics import log_loss  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.neural_network import MLPClassifier  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from skbayes_sg.diagnostics import MCMCConvergenceWarning  # noqa: E402
from skbayes_sg.neural_network import SGMCMCMLPClassifier  # noqa: E402
from skbayes_sg.neural_network import _torch_sampler  # noqa: E402
from skbayes_sg.neural_network._schedules import schedule_plan  # noqa: E402


def _runner(prior_layers, hyperprior=None, temperature=1.0, sizes=(5, 7, 3)):
    rng = np.random.default_rng(0)
    X = torch.tensor(rng.normal(size=(40, sizes[0])))
    y = torch.tensor(rng.integers(0, sizes[-1], size=40))
    params = dict(sampler="sgld", subsampling="uniform", step_size=1e-3, batch_size=10,
                  alpha=0.0, temperature=temperature, friction=1.0, ewsg_chain_length=1,
                  snapshot_period=None, map_epochs=0, map_learning_rate=1e-3, verbose=0,
                  prior_layers=prior_layers, hyperprior=hyperprior)
    net = _torch_sampler.MLPNet(sizes, "relu", False)
    runner = _torch_sampler.ChainRunner(net, X, y, params, torch.Generator().manual_seed(0))
    runner.init_state()
    return runner, net


def test_fan_in_prior_gradient():
    """The estimate ``c * buf`` is the minibatch gradient plus the prior's
    ``theta_j * fan_in / s_l^2`` (weights of layer l) and ``theta_j / s_b^2``
    (biases), checked against autograd of that log density."""
    layers = [(2.0, 0.5), (3.0, 1.5)]
    runner, net = _runner(layers)
    theta = runner.state["theta"].clone().normal_(generator=torch.Generator().manual_seed(1))
    state = runner.g.get_state()
    _, buf, c = runner.estimate(theta)
    got = (c * buf).clone()
    runner.state["perm"], runner.state["pos"] = None, 0   # the same minibatch again,
    runner.g.set_state(state)                              # now without the prior
    runner.prior_prec.zero_()
    plain = torch.empty_like(theta)
    _, plain, c2 = runner.estimate(theta, plain)
    t = theta.clone().requires_grad_(True)
    neg_log_prior = 0.0
    for (fi, fo, w0, b0, end), (s, sb) in zip(net.layers, layers):
        neg_log_prior = neg_log_prior + 0.5 * fi / s**2 * (t[w0:b0] ** 2).sum() \
            + 0.5 / sb**2 * (t[b0:end] ** 2).sum()
    neg_log_prior.backward()
    np.testing.assert_allclose(got.numpy(), (c2 * plain + t.grad).numpy(), rtol=1e-10,
                               atol=1e-10)


def test_gamma_hyperprior_gibbs_step():
    """The Gibbs draw of layer l's precision multiplier is
    Gamma((a - 1 + n_l/2)/T + 1, rate (b + fan_in ||W_l||^2 / (2 s_l^2)) / T):
    its mean over many draws at fixed weights matches."""
    layers = [(2.0, 1.0), (1.0, 1.0)]
    a, b, T = 2.0, 0.5, 0.7
    runner, net = _runner(layers, hyperprior=(a, b), temperature=T)
    theta = runner.state["theta"]
    lam = []
    for _ in range(4000):
        runner.gibbs_prior()
        lam.append(runner._layer_lambda.copy())
    lam = np.array(lam)
    for k, ((fi, fo, w0, b0, end), (s, _)) in enumerate(zip(net.layers, layers)):
        shape = (a - 1 + 0.5 * fi * fo) / T + 1
        rate = (b + 0.5 * fi * float((theta[w0:b0] ** 2).sum()) / s**2) / T
        mean, sd = shape / rate, math.sqrt(shape) / rate
        assert abs(lam[:, k].mean() - mean) < 5 * sd / math.sqrt(len(lam))
        assert lam[:, k].std() == pytest.approx(sd, rel=0.1)
        # the precision vector follows the multiplier
        assert float(runner.prior_prec[w0]) == pytest.approx(lam[-1, k] * fi / s**2)
        assert float(runner.prior_prec[b0]) == pytest.approx(1.0)


def test_schedules():
    n, f, k = schedule_plan("constant", n_warmup=10, n_samples=5, thin=3)
    assert (n, f, k) == (25, None, None)
    n, f, k = schedule_plan("polynomial", n_warmup=10, n_samples=5, thin=3, power_t=0.5)
    assert n == 25 and k is None
    np.testing.assert_allclose(f, (1 + np.arange(25) / 10) ** -0.5)
    n, f, k = schedule_plan("cyclical", n_warmup=4, n_samples=6, thin=2, n_cycles=3,
                            exploration_fraction=0.5)
    # warm-up 4 steps at factor 1, then 3 cycles of 2 explore + 2 * 2 sampling... each
    # cycle: 2 draws * thin 2 = 4 sampling steps, ceil(0.5/0.5 * 4) = 4 exploring
    assert n == 4 + 3 * 8 and k.sum() == 6
    np.testing.assert_array_equal(f[:4], 1.0)
    cycle = 0.5 * (np.cos(np.pi * np.arange(8) / 8) + 1)
    np.testing.assert_allclose(f[4:], np.tile(cycle, 3))
    kept = np.flatnonzero(k)
    np.testing.assert_array_equal(kept, [4 + c * 8 + j for c in range(3) for j in (5, 7)])


@pytest.mark.parametrize("sampler", ["sgld", "psgld", "sghmc", "sghmc-leapfrog", "uld",
                                     "baoab", "sgnht"])
@pytest.mark.parametrize("schedule", ["cyclical", "polynomial"])
def test_every_dynamics_runs_every_schedule(sampler, schedule):
    """Every dynamics follows a schedule: the draws are finite, as many as
    asked, and the step size at each step is the schedule's."""
    X, y = make_classification(80, n_features=4, n_informative=3, n_redundant=0,
                               random_state=0)
    kw = dict(n_cycles=2) if schedule == "cyclical" else {}
    clf = SGMCMCMLPClassifier((6,), sampler=sampler, schedule=schedule, n_samples=4,
                              n_warmup=10, thin=2, n_chains=1, random_state=0, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCMCConvergenceWarning)
        clf.fit(X, y)
    assert clf.coef_samples_.shape == (1, 4, clf.n_params_)
    assert np.all(np.isfinite(clf.coef_samples_))
    n_steps = schedule_plan(schedule, n_warmup=10, n_samples=4, thin=2, **kw)[0]
    assert clf.n_steps_ == n_steps


def test_cyclical_step_follows_the_cosine(monkeypatch):
    """The runner sets ``step_size * factor`` before every step."""
    seen = []
    orig = _torch_sampler.ChainRunner.run

    def spy(self, *args, **kwargs):
        set_step = self.dynamics.set_step_size

        def record(h):
            seen.append(h)
            set_step(h)
        self.dynamics.set_step_size = record
        return orig(self, *args, **kwargs)
    monkeypatch.setattr(_torch_sampler.ChainRunner, "run", spy)
    X, y = make_classification(60, n_features=4, random_state=0)
    clf = SGMCMCMLPClassifier((5,), schedule="cyclical", n_cycles=2, n_samples=4, thin=2,
                              n_warmup=3, n_chains=1, step_size=1e-3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCMCConvergenceWarning)
        clf.fit(X, y)
    _, factors, _ = schedule_plan("cyclical", n_warmup=3, n_samples=4, thin=2, n_cycles=2)
    np.testing.assert_allclose(seen, 1e-3 * factors)


@pytest.mark.parametrize("params, match", [
    (dict(alpha=0.1), "prior='isotropic'"),
    (dict(prior="isotropic", prior_scale=2.0), "prior='fan_in'"),
    (dict(prior="isotropic", hyperprior=(1, 1)), "prior='fan_in'"),
    (dict(hyperprior=(1.0, -1.0)), "hyperprior"),
    (dict(hyperprior=(1.0,)), "hyperprior"),
    (dict(prior_scale=(1.0, 2.0, 3.0)), "one positive number per layer"),
    (dict(prior_scale=-1.0), "prior_scale"),
    (dict(prior="laplace"), "prior"),
    (dict(n_cycles=3), "schedule='cyclical'"),
    (dict(exploration_fraction=0.3), "schedule='cyclical'"),
    (dict(power_t=1.0), "schedule='polynomial'"),
    (dict(schedule="cyclical", n_cycles=50, n_samples=10), "n_cycles"),
    (dict(schedule="cyclical", exploration_fraction=1.0), "exploration_fraction"),
    (dict(schedule="warm"), "schedule"),
])
def test_bad_prior_and_schedule_parameters(params, match):
    X, y = make_classification(30, n_features=4, random_state=0)
    with pytest.raises(ValueError, match=match):
        SGMCMCMLPClassifier((4,), **{"n_samples": 10, "n_warmup": 2, **params}).fit(X, y)


def test_isotropic_prior_keeps_alpha():
    """prior='isotropic' is the old model: alpha acts, the runner gets it as
    the dynamics' exact scalar term."""
    clf = SGMCMCMLPClassifier(prior="isotropic", alpha=0.3)
    assert clf._sampler_params(10, 10)["alpha"] == 0.3
    assert clf._prior_layers((4, 5, 2)) is None
    clf = SGMCMCMLPClassifier(prior_scale=(2.0, 4.0), prior_bias_scale=0.5)
    assert clf._sampler_params(10, 10)["alpha"] == 0.0
    assert clf._prior_layers((4, 5, 2)) == [(2.0, 0.5), (4.0, 0.5)]


@pytest.fixture
def one_thread():
    """One torch thread: on a loaded 2-core machine two threads contend and
    a fit takes 10-30 times longer; the draws are the same."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _small_problem():
    X, y = make_classification(n_samples=600, n_features=40, n_informative=5, n_redundant=1,
                               class_sep=1.2, flip_y=0.05, random_state=0)
    Xtr, Xte, ytr, yte = train_test_split(X, y, train_size=60, stratify=y, random_state=0)
    sc = StandardScaler().fit(Xtr)
    return sc.transform(Xtr), sc.transform(Xte), ytr, yte


def test_bma_beats_the_map_net_at_temperature_one(one_thread):
    """At T = 1 (no tempering) the model average beats the MAP of the same
    network and prior in held-out log-loss on a small problem (60 rows, 40
    features, 5 informative): a 40-32-1 ReLU net with the fan-in prior at
    ``prior_scale=1``.

    Measured (seeds 0, 1, 2; with 60 rows the chains are MALA, exact, since
    stop 36): BMA 0.604, 0.606, 0.606 against 0.693 for the MAP (Adam, 500
    passes, the chain's own potential), which this prior shrinks to the
    constant function; the margin 0.04 is under half the smallest gap and
    40 times the BMA's spread over seeds (the unadjusted chains of earlier
    stops gave 0.607, 0.617, 0.607). Not a general claim: at
    ``prior_scale=3`` the MAP wins here (0.416 against 0.438), see
    doc/mlp.rst. With an absurd prior (``prior_scale=100``) the BMA loses
    (1.08, 0.94, 0.81 against the MAP's 0.81, 0.72, 0.82; seed 0 is the
    test's) and this test fails: checked by hand.
    """
    Xtr, Xte, ytr, yte = _small_problem()
    kw = dict(hidden_layer_sizes=(32,), prior_scale=1.0, n_chains=2, temperature=1.0,
              random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCMCConvergenceWarning)
        bma = SGMCMCMLPClassifier(**kw).fit(Xtr, ytr)
        map_net = SGMCMCMLPClassifier(subsampling="cv", map_epochs=500,
                                      map_learning_rate=1e-2, n_samples=1, n_warmup=0,
                                      thin=1, **kw).fit(Xtr, ytr)
    assert bma.temperature == 1.0
    map_net.coef_samples_ = map_net.map_coef_[:1, None, :]   # predict with the mode
    ll_bma = log_loss(yte, bma.predict_proba(Xte))
    ll_map = log_loss(yte, map_net.predict_proba(Xte))
    assert ll_bma < ll_map - 0.04, (ll_bma, ll_map)
    assert ll_bma < math.log(2) - 0.04          # it learned something


def test_defaults_beat_mlp_log_loss_on_breast_cancer(one_thread):
    """The defaults (``temperature="auto"``, 4 chains) against
    ``MLPClassifier((100,), max_iter=300)`` on breast cancer (398 training
    rows, 70/30 stratified split, scaler fitted on the training rows), over
    seeds 0-2 (the same seed for both), with no convergence warning.

    Measured with seeds 0-4: ours 0.1086 (the cold model chosen), 0.0958,
    0.1018, 0.0899, 0.0940 (the posterior); MLPClassifier 0.1083, 0.1188,
    0.1105, 0.1130, 0.1195. Over seeds 0-2 the means are 0.1021 and 0.1125:
    the margin 0.005 is half that gap. At ``temperature=1`` alone (earlier
    stops): 0.0970, 0.0978, 0.1010, 0.0902, 0.0971.
    """
    X, y = load_breast_cancer(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
    sc = StandardScaler().fit(Xtr)
    Xtr, Xte = sc.transform(Xtr), sc.transform(Xte)
    ll_ours, ll_mlp = [], []
    for seed in range(3):
        with warnings.catch_warnings():
            warnings.simplefilter("error", MCMCConvergenceWarning)
            ours = SGMCMCMLPClassifier((100,), random_state=seed).fit(Xtr, ytr)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")       # MLPClassifier's own
            mlp = MLPClassifier((100,), max_iter=300, random_state=seed).fit(Xtr, ytr)
        assert ours.temperature == "auto" and ours.n_chains == 4
        ll_ours.append(log_loss(yte, ours.predict_proba(Xte)))
        ll_mlp.append(log_loss(yte, mlp.predict_proba(Xte)))
    assert np.mean(ll_ours) < np.mean(ll_mlp) - 0.005, (ll_ours, ll_mlp)


@pytest.mark.parametrize("n_rows, warmup, thin", [(500, 1000, 10), (5100, 1020, 102)])
def test_automatic_run_length_counts_passes_on_big_data(n_rows, warmup, thin):
    """n_warmup="auto" is 1,000 steps or 20 data passes, thin="auto" 10 or
    20 passes over the draws, whichever is more (batch 100, 10 draws: 5,100
    rows need 1,020 warm-up steps and a thinning of 102); the chain runs
    exactly those steps."""
    X, y = make_classification(n_rows, 4, random_state=0)
    clf = SGMCMCMLPClassifier((3,), batch_size=100, n_samples=10, n_chains=1, temperature=1.0,
                              random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCMCConvergenceWarning)
        clf.fit(X, y)
    assert (clf.n_warmup_, clf.thin_) == (warmup, thin)
    assert clf.n_steps_ == warmup + 10 * thin
    # set by hand, they are taken as they are
    clf.set_params(n_warmup=7, thin=3, n_samples=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MCMCConvergenceWarning)
        clf.fit(X, y)
    assert (clf.n_warmup_, clf.thin_, clf.n_steps_) == (7, 3, 13)
