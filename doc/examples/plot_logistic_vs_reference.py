"""
Logistic regression: the sampled posterior against a reference
===============================================================

Unlike ridge regression, Bayesian logistic regression has no posterior in
closed form.  To check :class:`skbayes_sg.SGMCMCLogisticRegression` we
build a reference in a few lines of numpy: a long *independence
Metropolis-Hastings* chain whose proposal is a heavy-tailed (Student t)
version of the Laplace approximation.  Its acceptance rate is high and its
draws are nearly independent, so 50,000 proposals give a reference far more
precise than the estimator's few hundred draws per chain.

The data are four standardised features of the breast cancer data set that
ships with scikit-learn; the estimator runs with its default settings.
"""

# %%
# Data and the default fit
# ------------------------
import time

import matplotlib.pyplot as plt
import numpy as np
from scipy.special import log_expit
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

from skbayes_sg import SGMCMCLogisticRegression

data = load_breast_cancer()
features = ["mean radius", "mean texture", "mean smoothness", "mean concavity"]
columns = [list(data.feature_names).index(name) for name in features]
X = StandardScaler().fit_transform(data.data[:, columns])
y = data.target
names = features + ["intercept"]

t0 = time.perf_counter()
est = SGMCMCLogisticRegression(random_state=0).fit(X, y)
print(f"fit in {time.perf_counter() - t0:.2f} s: sampler {est.sampler_!r}, "
      f"{est.n_chains} chains x {est.n_samples_} draws, "
      f"max R-hat {est.rhat_.max():.3f}, min bulk ESS {est.ess_.min():.0f} "
      f"(target {est.target_ess_:.0f})")
draws = np.concatenate([est.coef_samples_, est.intercept_samples_[..., None]], axis=2)
draws = draws.reshape(-1, len(names))      # all chains pooled: (n_draws, 5)

# %%
# The reference: independence Metropolis-Hastings
# -----------------------------------------------
# The posterior is ``exp(-U)`` with
# ``U(theta) = alpha ||theta||^2 / 2 - sum_i log p(y_i | x_i, theta)`` and a
# prior on the intercept too (``alpha_`` is the prior precision the
# estimator used).  Newton's method finds the mode and the Hessian there;
# proposals are drawn from a multivariate t with 5 degrees of freedom
# centred at the mode with the inverse Hessian as scale.  Its tails are
# heavier than the posterior's, which keeps the importance weights bounded.
Xa = np.hstack([X, np.ones((X.shape[0], 1))])
sign = 2 * y - 1                           # labels as -1 / +1
alpha = est.alpha_


def log_post(theta):
    """Unnormalised log posterior of every row of ``theta``."""
    theta = np.atleast_2d(theta)
    margins = sign[:, None] * (Xa @ theta.T)             # (n_obs, n_theta)
    return log_expit(margins).sum(axis=0) - 0.5 * alpha * (theta ** 2).sum(axis=1)


mode = np.zeros(Xa.shape[1])
for _ in range(25):                       # Newton's method
    p = 1.0 / (1.0 + np.exp(-Xa @ mode))
    grad = Xa.T @ (y - p) - alpha * mode
    hess = Xa.T @ (Xa * (p * (1 - p))[:, None]) + alpha * np.eye(Xa.shape[1])
    mode = mode + np.linalg.solve(hess, grad)
chol = np.linalg.cholesky(np.linalg.inv(hess))

rng = np.random.default_rng(1)
n_prop, dof, dim = 50_000, 5, Xa.shape[1]
z = rng.standard_normal((n_prop, dim))
scale = np.sqrt(dof / rng.chisquare(dof, size=n_prop))
proposals = mode + scale[:, None] * (z @ chol.T)
# log target - log proposal density (up to constants) of every proposal
maha = np.sum(z ** 2, axis=1) * scale ** 2
log_q = -0.5 * (dof + dim) * np.log1p(maha / dof)
log_w = np.concatenate([log_post(block) for block in np.array_split(proposals, 10)]) - log_q

u = np.log(rng.uniform(size=n_prop))
current, accepted = 0, 0
chain = np.empty(n_prop, dtype=np.int64)
for i in range(n_prop):
    if u[i] < log_w[i] - log_w[current]:
        current = i
        accepted += 1
    chain[i] = current
reference = proposals[chain[500:]]        # the first 500 steps discarded
print(f"independence MH: acceptance rate {accepted / n_prop:.2f}, "
      f"{len(reference):,} reference draws")

# %%
# Moments
# -------
# For every parameter: the estimator's posterior mean minus the reference
# mean, in reference standard deviations, and the ratio of the standard
# deviations.  A chain's estimates carry Monte Carlo error: about
# ``1 / sqrt(ESS)`` reference sds for a mean and ``1 / sqrt(2 ESS)`` (relative)
# for a standard deviation, with ESS the effective sample size (the last two
# columns).  The defaults sample until the smallest ESS reaches
# ``target_ess_``, chosen so that every posterior mean is within 0.1
# posterior sd of its limit with 95% probability.
ref_mean, ref_sd = reference.mean(axis=0), reference.std(axis=0)
err = (draws.mean(axis=0) - ref_mean) / ref_sd
ratio = draws.std(axis=0) / ref_sd
print(f"{'parameter':>16} {'ref mean':>9} {'ref sd':>7} {'(mean-ref)/sd':>14} "
      f"{'sd/ref sd':>10} {'ESS':>6} {'1/sqrt(ESS)':>12}")
for k, name in enumerate(names):
    print(f"{name:>16} {ref_mean[k]:9.3f} {ref_sd[k]:7.3f} {err[k]:14.3f} "
          f"{ratio[k]:10.3f} {est.ess_[k]:6.0f} {1 / np.sqrt(est.ess_[k]):12.3f}")
print(f"largest |mean error| {np.abs(err).max():.3f} sd (0.1 is the target's bound); "
      f"sd ratios {ratio.min():.3f} to {ratio.max():.3f}")

# %%
# The differences are Monte Carlo error, not bias: they shrink with more
# draws.  The same fit keeping 2,000 draws per chain instead of the automatic
# number:
t0 = time.perf_counter()
long = SGMCMCLogisticRegression(n_samples=2000, random_state=0).fit(X, y)
long_draws = np.concatenate([long.coef_samples_, long.intercept_samples_[..., None]], axis=2)
long_draws = long_draws.reshape(-1, len(names))
long_err = (long_draws.mean(axis=0) - ref_mean) / ref_sd
long_ratio = long_draws.std(axis=0) / ref_sd
print(f"n_samples=2000 ({time.perf_counter() - t0:.2f} s, min ESS {long.ess_.min():.0f}): "
      f"largest |mean error| {np.abs(long_err).max():.3f} sd; "
      f"sd ratios {long_ratio.min():.3f} to {long_ratio.max():.3f}")

# %%
# Marginals and one joint
# -----------------------
# Histograms of the estimator's draws (pooled over chains) over the
# reference's, and the joint of the two most correlated parameters.
corr = np.corrcoef(reference.T)
np.fill_diagonal(corr, 0)
i, j = np.unravel_index(np.argmax(np.abs(corr)), corr.shape)

fig, axes = plt.subplots(2, 3, figsize=(11, 6.5))
for k, ax in enumerate(axes.flat[:5]):
    bins = np.linspace(*np.quantile(reference[:, k], [0.0005, 0.9995]), 40)
    ax.hist(reference[:, k], bins=bins, density=True, color="0.8", label="reference (IMH)")
    ax.hist(draws[:, k], bins=bins, density=True, histtype="step", lw=1.5,
            label="SGMCMCLogisticRegression")
    ax.set_title(names[k], fontsize=10)
    ax.set_yticks([])
    ax.set_ylim(top=1.3 * ax.get_ylim()[1])      # room for the legend
axes[0, 0].legend(fontsize=8, loc="upper left")
ax = axes[1, 2]
ax.plot(reference[::20, i], reference[::20, j], ".", color="0.7", ms=2, label="reference")
ax.plot(draws[:, i], draws[:, j], ".", ms=2, alpha=0.5, label="SGMCMC draws")
ax.set_xlabel(names[i])
ax.set_ylabel(names[j])
ax.set_title(f"correlation {corr[i, j]:.2f}", fontsize=10)
ax.legend(fontsize=8, markerscale=4)
fig.suptitle("Breast cancer, 4 standardised features: posterior marginals")
fig.tight_layout()
plt.show()
