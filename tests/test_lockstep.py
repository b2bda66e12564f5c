"""Chains in lockstep (issue 41): the chains a thread runs share each full
pass over sparse rows (``_sampling/_group.pyx``), and each chain's draws are
the ones it makes alone, bit for bit.

Equality is the whole claim (a chain's sums are taken in the same order in
a shared pass), so the tests compare the draws of a fit with and without
the groups, across the kernel's cases: Metropolis-adjusted HMC (the
potential) with an intercept and weights, a Gaussian and a Poisson model,
float32 values and int64 indices, one group in the main thread and two in
worker threads, and a chain that diverges and leaves its group."""
from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp

from skbayes_sg import SGMCMCLogisticRegression, SGMCMCPoissonRegressor, SGMCMCRidge
from skbayes_sg._base import chain_spec
from skbayes_sg._sampling import _runner
from skbayes_sg._sampling._group import COROUTINES

pytestmark = pytest.mark.skipif(not COROUTINES,
                                reason="no glibc ucontext here: chains never group")


def _rows(n=400, d=300, seed=0, dtype=np.float64, idx64=False):
    X = sp.random(n, d, density=0.03, format="csr", random_state=seed, dtype=dtype)
    if idx64:
        X.indices = X.indices.astype(np.int64)
        X.indptr = X.indptr.astype(np.int64)
    return X, np.random.default_rng(seed)


GROUPS = _runner.lockstep_groups


def _fit(monkeypatch, lockstep, make, X, y, **fit_kw):
    """A fit with the groups on or off, and the groups its rounds ran."""
    seen = []

    def spy(*args):
        seen.append(GROUPS(*args))
        return seen[-1]
    monkeypatch.setattr(_runner, "LOCKSTEP", lockstep)
    monkeypatch.setattr(_runner, "lockstep_groups", spy)
    return make().fit(X, y, **fit_kw), seen


def _logistic(X, rng):
    return (X @ rng.standard_normal(X.shape[1]) * 3 + rng.logistic(size=X.shape[0]) > 0
            ).astype(int)


SHORT = dict(n_warmup=60, n_samples=40, random_state=0)
CASES = {
    # HMC with its Metropolis correction (the potential), intercept, weights
    "logistic hmc, two groups": (
        lambda: SGMCMCLogisticRegression(sampler="sghmc-leapfrog", subsampling="full",
                                         n_chains=4, n_jobs=2, **SHORT),
        _rows, _logistic, True, [[0, 1], [2, 3]]),
    "logistic hmc, one group of four": (
        lambda: SGMCMCLogisticRegression(sampler="sghmc-leapfrog", subsampling="full",
                                         n_chains=4, n_jobs=1, **SHORT),
        _rows, _logistic, False, [[0, 1, 2, 3]]),
    "logistic, float32 and int64 indices": (
        lambda: SGMCMCLogisticRegression(sampler="sghmc-leapfrog", subsampling="full",
                                         n_chains=3, n_jobs=1, **SHORT),
        lambda: _rows(dtype=np.float32, idx64=True), _logistic, False, [[0, 1, 2]]),
    "ridge, no intercept": (
        lambda: SGMCMCRidge(subsampling="full", fit_intercept=False, n_chains=4, n_jobs=2,
                            **SHORT),
        _rows, lambda X, rng: X @ rng.standard_normal(X.shape[1]) + rng.standard_normal(
            X.shape[0]), True, [[0, 1], [2, 3]]),
    "poisson sgld": (
        lambda: SGMCMCPoissonRegressor(sampler="sgld", subsampling="full", n_chains=2,
                                       n_jobs=1, **SHORT),
        _rows, lambda X, rng: rng.poisson(np.exp(0.5 * (X @ rng.standard_normal(X.shape[1])))),
        False, [[0, 1]]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_chains_in_lockstep_make_the_draws_they_make_alone(monkeypatch, name):
    make, rows, target, weighted, expected_groups = CASES[name]
    X, rng = rows()
    y = target(X, rng)
    fit_kw = {"sample_weight": rng.uniform(0.5, 2.0, size=X.shape[0])} if weighted else {}
    alone, never = _fit(monkeypatch, False, make, X, y, **fit_kw)
    grouped, groups = _fit(monkeypatch, True, make, X, y, **fit_kw)
    assert grouped.subsampling_ == "full"
    assert not any(never)
    assert expected_groups in groups          # the rounds ran in lockstep
    np.testing.assert_array_equal(grouped.coef_samples_, alone.coef_samples_)
    if alone.fit_intercept:
        np.testing.assert_array_equal(grouped.intercept_samples_, alone.intercept_samples_)
    assert grouped.n_passes_ == alone.n_passes_


def test_a_chain_that_diverges_leaves_its_group_and_the_others_go_on():
    X, rng = _rows()
    y = _logistic(X, rng)
    est = SGMCMCLogisticRegression(sampler="sghmc-leapfrog", subsampling="full", n_chains=3,
                                   n_jobs=1, **SHORT).fit(X, y)
    ctx = est._fit_context(X, y, est._model_spec(), None)
    spec = replace(chain_spec(est, ctx, est._model_spec(), est._fit_setup, None),
                   max_abs_z=30.0)
    states = list(est._chain_states)
    # chain 1 starts far out: it diverges within its first checks
    states[1] = replace(states[1], theta=np.full_like(states[1].theta, 40.0))
    alone = [_runner.run_chain(ctx.X, ctx.y, spec, s, 50, thin=2, chain_id=c)
             for c, s in enumerate(states)]
    grouped = _runner.run_chain_group(ctx.X, ctx.y, spec, states, 50, thin=2)
    assert [r.diverged for r in alone] == [False, True, False]
    for a, g in zip(alone, grouped):
        assert (g.diverged, g.n_steps_done, g.reason) == (a.diverged, a.n_steps_done, a.reason)
        np.testing.assert_array_equal(g.samples, a.samples)
        np.testing.assert_array_equal(g.state.theta, a.state.theta)
        assert g.n_grad_evals == a.n_grad_evals


def test_only_chains_that_share_a_thread_and_a_full_sparse_pass_group():
    X, rng = _rows()
    est = SGMCMCLogisticRegression(sampler="sghmc-leapfrog", subsampling="full",
                                   n_chains=4, **SHORT).fit(X, _logistic(X, rng))
    spec = chain_spec(est, est._fit_context(X, _logistic(X, rng), est._model_spec(), None),
                      est._model_spec(), est._fit_setup, None)
    groups = GROUPS
    assert groups(X, spec, 4, 2) == [[0, 1], [2, 3]]
    assert groups(X, spec, 4, 1) == [[0, 1, 2, 3]]
    assert groups(X, spec, 5, 2) == [[0, 1, 2], [3, 4]]
    assert groups(X, spec, 4, 4) is None                  # a thread a chain
    assert groups(X, spec, 4, -1) == groups(X, spec, 4, _runner.effective_n_jobs(-1))
    assert groups(X.toarray(), spec, 4, 1) is None        # dense rows
    assert groups(X.tocsc(), spec, 4, 1) is None
    assert groups(X, replace(spec, subsampling="uniform"), 4, 1) is None
    assert groups(X, replace(spec, n_outputs=3), 4, 1) is None
