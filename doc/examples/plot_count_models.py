"""
Overdispersed counts: Poisson or negative binomial?
===================================================

Real counts (visits, claims, words) usually vary more than a Poisson law
allows: given the features, their variance exceeds their mean.  A Poisson
regression then fits the mean well but is too sure of itself: its posterior
is too narrow and its predictive intervals miss too often.
:class:`skbayes_sg.SGMCMCNegativeBinomialRegressor` adds the shape ``r`` of a
Gamma-Poisson mixture (``Var y = mu + mu^2 / r``), estimated from the data
with ``shape="auto"``.

Simulated counts with ``r = 1.5``: the two models' coefficient intervals,
the coverage of their 90% posterior predictive intervals on held-out rows,
and their leave-one-out comparison (:func:`skbayes_sg.diagnostics.compare`).
The figures are printed as this page was built.
"""

# %%
# Data and the two fits
# ---------------------
import matplotlib.pyplot as plt
import numpy as np

from skbayes_sg import SGMCMCNegativeBinomialRegressor, SGMCMCPoissonRegressor
from skbayes_sg.diagnostics import compare, loo

rng = np.random.default_rng(0)
n, coef, shape = 800, np.array([0.6, -0.4, 0.3]), 1.5
X = rng.standard_normal((n, len(coef)))
mu = np.exp(0.8 + X @ coef)
y = rng.negative_binomial(shape, shape / (shape + mu))
train, test = slice(0, 500), slice(500, n)

nb = SGMCMCNegativeBinomialRegressor(random_state=0).fit(X[train], y[train])
po = SGMCMCPoissonRegressor(random_state=0).fit(X[train], y[train])
print(f"estimated shape r: {nb.shape_:.2f} (true {shape})")
for name, est in (("negative binomial", nb), ("Poisson", po)):
    print(f"{name:>17}: coef {np.round(est.coef_, 3)}, sd {np.round(est.coef_std_, 3)}")

# %%
# Predictive intervals on held-out rows
# -------------------------------------
# ``sample_y`` draws counts from the posterior predictive (one per row and
# draw); the share of held-out counts inside each model's central 90%
# interval should be near 0.90 (a little above: the bounds are counts, and
# the counts on them are inside).
coverage = {}
for name, est in (("negative binomial", nb), ("Poisson", po)):
    draws = est.sample_y(X[test], n_draws=400, random_state=1)
    lo, hi = np.quantile(draws, [0.05, 0.95], axis=1)
    coverage[name] = float(np.mean((y[test] >= lo) & (y[test] <= hi)))
    print(f"{name:>17}: {coverage[name]:.2f} of the held-out counts in the 90% interval")

# %%
# Leave-one-out comparison
# ------------------------
# The expected log predictive density of a new count (higher is better),
# from one fit of each model (PSIS-LOO).
table = compare({"negative binomial": loo(nb, X[train], y[train]),
                 "Poisson": loo(po, X[train], y[train])})
print(table[["elpd_loo", "se", "elpd_diff", "dse"]].to_string(float_format="{:.1f}".format))

# %%
# The coefficients' 90% intervals
# -------------------------------
# Both models centre the coefficients near the truth; the Poisson intervals
# are the narrower ones, by about ``sqrt(1 + mu / r)``.
fig, ax = plt.subplots(figsize=(7, 3), layout="constrained")
for k, (name, est) in enumerate((("negative binomial", nb), ("Poisson", po))):
    draws = est.coef_samples_.reshape(-1, len(coef))
    lo, hi = np.quantile(draws, [0.05, 0.95], axis=0)
    pos = np.arange(len(coef)) + 0.15 * (2 * k - 1)
    ax.errorbar(pos, est.coef_, yerr=[est.coef_ - lo, hi - est.coef_], fmt="o", capsize=4,
                label=f"{name} (predictive coverage {coverage[name]:.2f})")
ax.scatter(np.arange(len(coef)), coef, marker="x", color="k", zorder=3, label="true")
ax.set_xticks(np.arange(len(coef)), [f"x{j}" for j in range(len(coef))])
ax.set_ylabel("coefficient")
ax.legend(fontsize=8)
plt.show()
