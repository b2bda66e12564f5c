"""The chains' runner (``_sampling/_runner.py``): a chain's step lives in its
state, once.

Dual averaging adapts the step per chain during warm-up; each chain's state
carries its own, a warm start continues from it, and a halving after a
divergence starts from the chains' step.  The set-up's config keeps only
the step the chains started from (it is never written back)."""
import warnings

import numpy as np

from skbayes_sg import SGMCMCLogisticRegression
from skbayes_sg._base import chain_spec


def _data(n=200, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = (rng.random(n) < 1 / (1 + np.exp(-X @ [1.0, -0.5, 0.3]))).astype(float)
    return X, y


def test_each_chain_carries_its_adapted_step():
    from sklearn.datasets import load_breast_cancer
    X, y = load_breast_cancer(return_X_y=True)
    X = (X - X.mean(axis=0)) / X.std(axis=0)      # 31 parameters: steps below the largest
    est = SGMCMCLogisticRegression(n_samples=50, random_state=0).fit(X, y)
    assert est.metropolis_
    steps = np.array([s.dynamics["step_size"][0] for s in est._chain_states])
    assert np.ptp(steps) > 0                       # adapted per chain
    assert est.step_size_ == np.exp(np.mean(np.log(steps)))     # their geometric mean
    start = est._fit_setup.sampler_config["step_size"]
    assert not np.any(steps == start)              # the config kept its start only
    # a warm start continues from every chain's own step, without warm-up
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.set_params(warm_start=True, n_warmup="auto").fit(X, y)
    again = np.array([s.dynamics["step_size"][0] for s in est._chain_states])
    np.testing.assert_array_equal(again, steps)
    assert est._fit_setup.sampler_config["step_size"] == start


def test_set_step_moves_every_chain_and_only_the_chains():
    from skbayes_sg._sampling._runner import ChainPool
    X, y = _data()
    est = SGMCMCLogisticRegression(subsampling="uniform", sampler="sgld", metric="identity",
                                   n_samples=20, random_state=0).fit(X, y)
    spec = chain_spec(est, est._fit_context(X, y, est._model_spec(), None),
                      est._model_spec(), est._fit_setup, None)
    pool = ChainPool(X, y, spec, list(est._chain_states))
    start = spec.sampler_config["step_size"]
    np.testing.assert_array_equal(pool.step_sizes(), np.full(4, est.step_size_))
    states = list(pool.states)
    pool.set_step(0.5 * est.step_size_)
    np.testing.assert_array_equal(pool.step_sizes(), np.full(4, 0.5 * est.step_size_))
    assert spec.sampler_config["step_size"] == start
    # the chains' saved states are new ones (the ones handed in are not written)
    assert all(new.dynamics is not old.dynamics for new, old in zip(pool.states, states))


def test_a_metric_change_is_a_new_spec():
    """The spec is frozen: ``rebase`` to a new metric gives the pool a new
    spec, and the one the chains were built from is left as it was."""
    import dataclasses

    import pytest
    from skbayes_sg._sampling._runner import ChainPool
    X, y = _data()
    est = SGMCMCLogisticRegression(subsampling="uniform", sampler="baoab", metric="identity",
                                   n_samples=20, random_state=0).fit(X, y)
    spec = chain_spec(est, est._fit_context(X, y, est._model_spec(), None),
                      est._model_spec(), est._fit_setup, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.metric = {}
    pool = ChainPool(X, y, spec, list(est._chain_states))
    wider = {**spec.metric, "kind": "diagonal", "center": np.zeros(4), "factor": np.full(4, 2.0)}
    thetas = [np.asarray(s.theta).copy() for s in pool.states]
    before = list(pool.states)
    pool.rebase(wider)
    assert pool.spec is not spec and pool.spec.metric is wider
    assert spec.metric["kind"] == "identity"
    for state, old, theta in zip(pool.states, before, thetas):
        np.testing.assert_allclose(state.theta, theta / 2.0)     # the same parameters
        assert state.dynamics["cache_scalars"][1] == 0.0        # the cached gradient dropped
        # the chains' states are new ones too, and the old ones are as they were
        assert state is not old
        np.testing.assert_array_equal(old.theta, theta)
    with pytest.raises(dataclasses.FrozenInstanceError):
        pool.states[0].theta = thetas[0]


def test_default_chain_workers_follow_the_cores_and_joblib_config(monkeypatch):
    """``n_jobs=None`` runs one chain thread per core (at most
    OMP_NUM_THREADS, at most one per chain), as scikit-learn's OpenMP
    estimators; a joblib ``parallel_config`` or an explicit ``n_jobs``
    decides instead; and the draws are those of ``n_jobs=1``."""
    import joblib
    from skbayes_sg._sampling import _runner
    monkeypatch.setattr(_runner, "pass_threads", lambda: 2)
    assert _runner.chain_workers(None, 4) == 2
    assert _runner.chain_workers(None, 1) == 1
    assert _runner.chain_workers(3, 4) == 3
    with joblib.parallel_config(backend="threading"):
        assert _runner.chain_workers(None, 4) is None
    with joblib.parallel_config(n_jobs=1):
        assert _runner.chain_workers(None, 4) is None
    # the real count: OMP_NUM_THREADS caps it
    from skbayes_sg._sampling._row_algebra import pass_threads
    monkeypatch.setattr(_runner, "pass_threads", pass_threads)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert _runner.chain_workers(None, 4) == 1

    seen = []
    real = _runner.Parallel

    def spy(*args, **kwargs):
        seen.append(kwargs.get("n_jobs"))
        return real(*args, **kwargs)

    monkeypatch.setattr(_runner, "pass_threads", lambda: 2)
    monkeypatch.setattr(_runner, "Parallel", spy)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y = (X[:, 0] + rng.logistic(size=300) > 0).astype(int)
    kw = dict(n_samples=100, n_warmup=100, random_state=0, sampler="sgld", step_size=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        default = SGMCMCLogisticRegression(**kw).fit(X, y)
        assert seen and set(seen) == {2}
        one = SGMCMCLogisticRegression(n_jobs=1, **kw).fit(X, y)
    np.testing.assert_array_equal(default.coef_samples_, one.coef_samples_)


def test_every_momentum_dynamics_saves_its_momentum_under_its_definitions_key():
    """After a metric change the pool redraws each chain's momentum under its
    definition's ``momentum_key`` (no list of key names): every dynamics
    with a momentum saves it there, and the others save none."""
    from skbayes_sg import SGMCMCRidge
    from skbayes_sg._sampling._registry import SAMPLERS
    from skbayes_sg._sampling._specs import DYNAMICS
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = X @ np.ones(3) + rng.normal(size=60)
    keys = {DYNAMICS[name].momentum_key for name in SAMPLERS}
    for name in SAMPLERS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # a short fit: only its state is read
            est = SGMCMCRidge(sampler=name, n_samples=20, n_warmup=20, n_chains=1,
                              random_state=0).fit(X, y)
        saved = est._chain_states[0].dynamics
        definition = DYNAMICS[name]
        if definition.has_momentum:
            assert definition.momentum_key in saved, (name, sorted(saved))
            assert saved[definition.momentum_key].shape == (4,)
        else:
            assert not keys & set(saved), (name, sorted(saved))
