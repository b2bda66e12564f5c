"""
Trace plots: what R-hat and the effective sample size see
=========================================================

Four SGHMC chains sample a Bayesian logistic regression, each started from
its own draw of the prior (``init="prior"``: overdispersed starts, so that
R-hat can tell whether the chains forget where they started).  The same
number of draws, 400 per chain, is kept twice: every step (``thin=1``), then
every 50th step (``thin=50``, 50 times the steps).

Both runs fix the number of steps by hand to show what an unconverged run
looks like; with the defaults (``n_samples="auto"``) the estimator itself
samples until every R-hat is at most 1.01 and the smallest bulk effective
sample size reaches its target (see :doc:`../diagnostics`).
"""

# %%
# Two runs
# --------
# A well-conditioned problem: 2,000 rows, 4 independent standardised
# features.  A fit whose draws fall short emits an ``MCMCConvergenceWarning``
# naming the setting to change; it is printed here.
import textwrap
import warnings

import matplotlib.pyplot as plt
import numpy as np

from skbayes_sg import SGMCMCLogisticRegression
from skbayes_sg.diagnostics import ess, rhat

rng = np.random.default_rng(0)
X = rng.normal(size=(2000, 4))
y = (X @ [1.0, -1.0, 0.5, 0.0] + rng.logistic(size=2000) > 0).astype(int)

fits = {}
for thin in (1, 50):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fits[thin] = est = SGMCMCLogisticRegression(
            sampler="sghmc", init="prior", n_warmup=2000, n_samples=400, thin=thin,
            random_state=0).fit(X, y)
    print(f"thin={thin}: {thin * 400:,} steps per chain after 2,000 warm-up steps; "
          f"all parameters: max R-hat {est.rhat_.max():.3f}, "
          f"min bulk ESS {est.ess_.min():.0f} of {est.n_chains * est.n_samples_} draws")
    for w in caught:
        print(textwrap.fill(f"{w.category.__name__}: {w.message}", 100,
                            initial_indent="    ", subsequent_indent="    "))

# %%
# Traces of the first coefficient
# -------------------------------
# With ``thin=1`` each chain drifts slowly through a few hundred steps and
# the four cover different ranges: their densities disagree, which is what
# the large R-hat and the tiny ESS above measure.  With ``thin=50`` the
# traces overlap, the per-chain densities agree and the diagnostics pass.
fig, axes = plt.subplots(2, 2, figsize=(10, 6), sharey="row",
                         gridspec_kw=dict(width_ratios=[4, 1]))
for (thin, est), (trace, hist) in zip(fits.items(), axes):
    draws = est.coef_samples_[:, :, 0]              # (chains, draws)
    r, e = rhat(draws), ess(draws)
    print(f"thin={thin}: coefficient x0: R-hat {r:.3f}, bulk ESS {e:.0f} of {draws.size}")
    for c, chain in enumerate(draws):
        trace.plot(chain, lw=0.7, label=f"chain {c}")
        hist.hist(chain, bins=30, density=True, histtype="step", orientation="horizontal")
    trace.set_title(f"thin={thin}: {thin * 400:,} steps per chain kept as 400 draws; "
                    f"R-hat {r:.3f}, bulk ESS {e:.0f} of {draws.size}", fontsize=10)
    trace.set_ylabel("coefficient x0")
    hist.set_title("per-chain density", fontsize=10)
axes[1, 0].set_xlabel("draw")
axes[0, 0].legend(loc="lower right", ncol=4, fontsize=8)
fig.tight_layout()
plt.show()
