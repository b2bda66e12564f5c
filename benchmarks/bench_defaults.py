"""What a user gets at the defaults, against reference posteriors.

For each posterior of ``_posteriors.py`` (diabetes ridge, australian, breast
cancer and its nearly separable variant, a multinomial and an image problem,
a9a at ``alpha`` 1 and at the pSGLD paper's 0.1), the estimator at its defaults (only the model set: ``alpha``,
``noise_var``, ``fit_intercept=False`` with an explicit column of ones) is
compared with the reference posterior (exact for ridge, a long Metropolis-
adjusted HMC run otherwise):

* the largest error of a posterior mean, in posterior sds (target <= 0.1),
* the range of the marginal sd ratios draws / reference (target 0.9-1.1),
* data passes (every gradient evaluation, set-up included, / n; target
  <= 10,000 on the small posteriors, <= 300 on a9a, <= 250 on a9a at
  ``alpha=0.1``, issue 41's line) and the set-up's share,
* wall time, the fit's own ESS / target and R-hat, and whether it warned;

and, where numpyro is installed (``pip install numpyro``), NUTS in the same
run (one chain, 500 warm-up + 1,000 draws, compilation included; numpyro's
default diagonal mass matrix): its errors, gradient passes and wall time,
and our time as a ratio of it.

Then the other samplers at their defaults (``sghmc`` and ``uld``: target
<= 0.15 sd and sds within 15% on australian and a9a), and every gradient
estimator in the Laplace metric, on australian and a9a.

Usage: ``python benchmarks/bench_defaults.py [--quick] [--no-nuts]
[--posteriors a,b,...]``.  ``--quick`` skips the sweeps on a9a.
"""
import argparse
import time
import warnings

import numpy as np

from _posteriors import POSTERIORS, SMALL, errors, reference

from skbayes_sg import SGMCMCLogisticRegression, SGMCMCRidge
from skbayes_sg._sampling._registry import SAMPLERS, SUBSAMPLINGS

TARGET = {"err": 0.10, "sd": 0.10, "passes_small": 10_000, "passes_a9a": 300,
          "passes_a9a_weak": 250}
TARGET_MOMENTUM = {"err": 0.15, "sd": 0.15}


def fit(post, **kw):
    Est = SGMCMCRidge if post.model == "gaussian" else SGMCMCLogisticRegression
    est = Est(random_state=0, **post.estimator_kwargs(), **kw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        est.fit(post.X, post.target())
        seconds = time.perf_counter() - t0
    draws = est.coef_samples_
    draws = draws.reshape(draws.shape[0], draws.shape[1], -1)
    warned = any(issubclass(w.category, UserWarning) and "worth" in str(w.message)
                 or "R-hat" in str(w.message) for w in caught)
    return est, draws, seconds, warned


def row(name, est, draws, seconds, warned, ref, limits, passes_limit=None):
    err, ratio = errors(draws, ref)
    ok = err <= limits["err"] and np.all(np.abs(ratio - 1) <= limits["sd"])
    if passes_limit is not None:
        ok = ok and est.n_passes_ <= passes_limit
    label = f"{est.sampler_}/{est.subsampling_}" + ("+MH" if est.metropolis_ else "")
    print(f"{name:<26}{label:<34}{err:>6.3f}  [{ratio.min():.3f}, {ratio.max():.3f}]"
          f"{est.n_passes_:>9,.0f}{est.n_setup_passes_:>7.0f}{seconds:>8.2f}"
          f"{np.nanmin(est.ess_):>7.0f}/{est.target_ess_:<5.0f}{np.nanmax(est.rhat_):>7.3f}"
          f"{'  warned' if warned else '':<8}{'  ok' if ok else '  MISS'}", flush=True)
    return dict(err=err, ratio=ratio, passes=est.n_passes_, seconds=seconds, ok=ok)


HEADER = (f"{'posterior':<26}{'sampler/subsampling':<34}{'err':>6}  {'sd ratio range':<16}"
          f"{'passes':>9}{'setup':>7}{'time s':>8}{'ESS/target':>13}{'R-hat':>7}")


# ----------------------------------------------------------------------- NUTS
def nuts(post, n_warmup=500, n_samples=1000, seed=0):
    """numpyro NUTS (one chain) on the same posterior; None without numpyro."""
    try:
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        import numpyro
        import numpyro.distributions as dist
        from numpyro.infer import MCMC, NUTS
    except ImportError:
        return None
    X = post.X.toarray() if hasattr(post.X, "toarray") else post.X
    X = jnp.asarray(X)
    y = jnp.asarray(post.target())
    sd = 1.0 / np.sqrt(post.alpha)

    def model():
        theta = numpyro.sample("theta", dist.Normal(0.0, sd).expand([post.K, post.p]).to_event(2))
        Z = X @ theta.T
        if post.model == "logistic":
            numpyro.sample("y", dist.Bernoulli(logits=Z[:, 0]), obs=y)
        elif post.model == "gaussian":
            numpyro.sample("y", dist.Normal(Z[:, 0], np.sqrt(post.noise_var)), obs=y)
        else:
            numpyro.sample("y", dist.Categorical(logits=Z), obs=y)

    t0 = time.perf_counter()
    mcmc = MCMC(NUTS(model), num_warmup=n_warmup, num_samples=n_samples, num_chains=1,
                progress_bar=False)
    mcmc.warmup(jax.random.PRNGKey(seed), extra_fields=("num_steps",), collect_warmup=True)
    warm_steps = int(np.sum(mcmc.get_extra_fields()["num_steps"]))
    mcmc.run(jax.random.PRNGKey(seed + 1), extra_fields=("num_steps",))
    steps = int(np.sum(mcmc.get_extra_fields()["num_steps"]))
    draws = np.asarray(mcmc.get_samples()["theta"]).reshape(1, n_samples, -1)
    return draws, time.perf_counter() - t0, warm_steps + steps


# ----------------------------------------------------------------------- main
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posteriors", default=",".join(POSTERIORS))
    parser.add_argument("--no-nuts", action="store_true")
    parser.add_argument("--quick", action="store_true", help="skip the sweeps on a9a")
    args = parser.parse_args(argv)
    names = args.posteriors.split(",")
    posts = {name: POSTERIORS[name]() for name in names}
    refs = {}
    for name, post in posts.items():
        refs[name] = reference(post)

    print("\n== 1. Each estimator at its defaults, against the reference posterior ==")
    print(f"targets: max mean error <= {TARGET['err']} sd, every sd ratio within "
          f"{1 - TARGET['sd']:.2f}-{1 + TARGET['sd']:.2f}, passes <= "
          f"{TARGET['passes_small']:,} (small) / {TARGET['passes_a9a']} (a9a) / "
          f"{TARGET['passes_a9a_weak']} (a9a-alpha0.1)")
    print(HEADER)
    results = {}
    for name, post in posts.items():
        limit = (TARGET["passes_a9a_weak"] if name == "a9a-alpha0.1" else
                 TARGET["passes_a9a"] if name == "a9a" else TARGET["passes_small"])
        est, draws, sec, warned = fit(post)
        results[name] = row(name, est, draws, sec, warned, refs[name], TARGET, limit)
        if not args.no_nuts and name in SMALL:
            out = nuts(post)
            if out is None:
                print(f"{'':<26}NUTS: numpyro is not installed (pip install numpyro)")
                args.no_nuts = True
                continue
            d, sec_nuts, grads = out
            err, ratio = errors(d, refs[name])
            print(f"{'':<26}{'NUTS (numpyro, 1 chain)':<34}{err:>6.3f}  [{ratio.min():.3f}, "
                  f"{ratio.max():.3f}]{grads:>9,.0f}{'':>7}{sec_nuts:>8.2f}   time ours / NUTS "
                  f"{results[name]['seconds'] / sec_nuts:.2f}, passes ours / NUTS "
                  f"{results[name]['passes'] / grads:.3f}", flush=True)

    print("\n== 2. The other samplers at their defaults ==")
    print(f"sghmc and uld: targets <= {TARGET_MOMENTUM['err']} sd and sds within "
          f"{TARGET_MOMENTUM['sd']:.0%} on australian and a9a; the others printed")
    print(HEADER)
    for name in [n for n in ("australian", "a9a") if n in posts]:
        if name == "a9a" and args.quick:
            continue
        for sampler in SAMPLERS:
            est, draws, sec, warned = fit(posts[name], sampler=sampler)
            row(name, est, draws, sec, warned, refs[name],
                TARGET_MOMENTUM if sampler in ("sghmc", "uld") else TARGET)

    print("\n== 3. Every gradient estimator in the Laplace metric (sampler 'auto') ==")
    print(HEADER)
    for name in [n for n in ("australian", "a9a") if n in posts]:
        if name == "a9a" and args.quick:
            continue
        for sub in SUBSAMPLINGS:
            est, draws, sec, warned = fit(posts[name], subsampling=sub)
            row(name, est, draws, sec, warned, refs[name], TARGET)


if __name__ == "__main__":
    main()
