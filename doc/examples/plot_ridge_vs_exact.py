"""Ridge: the sampled posterior against the exact one.

With a Gaussian likelihood and prior the posterior is Gaussian in closed
form: with ``Xa = [X, 1]``, noise variance ``s2`` and prior precision
``alpha``, its precision is ``H = Xa^T Xa / s2 + alpha I`` and its mean
``H^-1 Xa^T y / s2``.  This makes :class:`skbayes_sg.SGMCMCRidge` the
yardstick of the samplers.

SGLD runs twice, each chain with 10,000 warm-up steps and then 500 draws
kept every 20th step (20,000 steps in all) or every 400th step (210,000
steps).  The top row compares the draws with the exact marginals for three
coefficients of the diabetes data: ``bmi`` (nearly independent of the
others) and ``s1``, ``s2`` (correlated at 0.9: an ill-conditioned
direction, which the chains explore slowly).  The bottom panel shows, for every coefficient, the
sampled standard deviation over the exact one (bars) and the error of the
sampled mean in exact standard deviations (triangles); the legend gives the
largest R-hat and the smallest bulk ESS.

The short run is too narrow along the ill-conditioned direction, and its
R-hat and ESS say so.  The long run is closer, but still narrow there: the
slowest direction of this posterior relaxes in about 19,000 SGLD steps (the
inverse of step size times smallest posterior precision), so even 210,000
steps give each chain only a few independent draws along it, which is what
its ESS reports.  About a million steps per chain bring every ratio within
5% of 1.

Run: ``python doc/examples/plot_ridge_vs_exact.py [OUTPUT_DIR]`` (about 6 s).
"""
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from scipy.stats import norm  # noqa: E402
from sklearn.datasets import load_diabetes  # noqa: E402
from sklearn.preprocessing import scale  # noqa: E402

from skbayes_sg import SGMCMCRidge  # noqa: E402
from skbayes_sg.diagnostics import summary  # noqa: E402

OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "images"
ALPHA = 1.0

data = load_diabetes()
X = scale(data.data)
y = (data.target - data.target.mean()) / data.target.std()   # the prior also covers the intercept
names = list(data.feature_names) + ["intercept"]

t0 = time.perf_counter()
fits = {}
for thin in (20, 400):
    label = f"{thin * 500 + 10_000:,} steps"
    fits[label] = SGMCMCRidge(sampler="sgld", alpha=ALPHA, n_warmup=10_000, n_samples=500,
                              thin=thin, random_state=0).fit(X, y)

# the exact posterior, at the noise variance the estimator used
s2 = fits[label].noise_var_
Xa = np.hstack([X, np.ones((X.shape[0], 1))])
cov = np.linalg.inv(Xa.T @ Xa / s2 + ALPHA * np.eye(Xa.shape[1]))
mean = cov @ Xa.T @ y / s2
sd = np.sqrt(np.diag(cov))

fig = plt.figure(figsize=(11, 7))
grid = fig.add_gridspec(2, 3)
for k, name in enumerate(("bmi", "s1", "s2")):
    ax = fig.add_subplot(grid[0, k])
    j = names.index(name)
    grid_x = np.linspace(mean[j] - 4 * sd[j], mean[j] + 4 * sd[j], 200)
    ax.plot(grid_x, norm.pdf(grid_x, mean[j], sd[j]), "k", lw=2, label="exact")
    for label, est in fits.items():
        ax.hist(est.coef_samples_[:, :, j].ravel(), bins=40, density=True, histtype="step",
                lw=1.5, label=label)
    ax.set_title(f"coefficient {name}")
    ax.set_yticks([])
fig.axes[0].legend(fontsize=8)

ax = fig.add_subplot(grid[1, :])
pos = np.arange(len(names))
for i, (label, est) in enumerate(fits.items()):
    table = summary(est)
    draws = np.concatenate([est.coef_samples_, est.intercept_samples_[..., None]], axis=2)
    flat = draws.reshape(-1, len(names))
    ratio = flat.std(axis=0) / sd
    bias = (flat.mean(axis=0) - mean) / sd
    legend = (f"{label} per chain: max R-hat {np.max(table['r_hat']):.2f}, "
              f"min bulk ESS {np.min(table['ess_bulk']):.0f} of {flat.shape[0]}")
    ax.bar(pos + 0.2 * (2 * i - 1), ratio, width=0.4, label=legend)
    ax.plot(pos + 0.2 * (2 * i - 1), bias, "kv" if i == 0 else "k^", ms=5)
    print(f"{label}: step size {est.step_size_:.3g}; sd / exact sd per coefficient: "
          + " ".join(f"{v:.2f}" for v in ratio))
ax.axhline(1.0, color="grey", lw=1)
ax.axhline(0.0, color="grey", lw=0.5)
ax.set_xticks(pos, names)
ax.set_ylabel("sampled sd / exact sd (bars)\n(mean - exact) / exact sd (triangles)")
ax.legend(fontsize=8, loc="upper right")
fig.suptitle("SGMCMCRidge(sampler='sgld') on the diabetes data: 4 chains, 500 draws each",
             fontsize=11)
fig.tight_layout()
OUT.mkdir(parents=True, exist_ok=True)
fig.savefig(OUT / "plot_ridge_vs_exact.png", dpi=90)
print(f"saved {OUT / 'plot_ridge_vs_exact.png'} ({time.perf_counter() - t0:.1f} s)")
