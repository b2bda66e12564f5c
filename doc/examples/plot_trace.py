"""Trace plots: what R-hat and the effective sample size see.

Four SGHMC chains sample a Bayesian logistic regression, each started from
its own draw of the prior (``init="prior"``: overdispersed starts, so that
R-hat can tell whether the chains forget where they started).  The same
number of draws is kept twice: every step (``thin=1``), then every 50th
step (``thin=50``, 50 times the steps).

With ``thin=1`` the chains are still crawling away from their starts: the
traces do not overlap, R-hat is far above 1.01 and the effective sample
size is a few dozen out of 1600 draws.  With ``thin=50`` the traces mix and
the diagnostics pass.  :func:`skbayes_sg.diagnostics.check_convergence`
turns the same numbers into a warning naming the setting to change.

Run: ``python doc/examples/plot_trace.py [OUTPUT_DIR]`` (about 5 s).
"""
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from skbayes_sg import SGMCMCLogisticRegression  # noqa: E402
from skbayes_sg.diagnostics import ess, rhat  # noqa: E402

OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent / "images"

# a well-conditioned problem: 2000 rows, 4 independent standardised features
rng = np.random.default_rng(0)
X = rng.normal(size=(2000, 4))
y = (X @ [1.0, -1.0, 0.5, 0.0] + rng.logistic(size=2000) > 0).astype(int)

t0 = time.perf_counter()
fig, axes = plt.subplots(2, 2, figsize=(10, 6), sharey="row",
                         gridspec_kw=dict(width_ratios=[4, 1]))
for row, thin in enumerate((1, 50)):
    est = SGMCMCLogisticRegression(sampler="sghmc", init="prior", n_warmup=2000,
                                   n_samples=400, thin=thin, random_state=0)
    est.fit(X, y)
    draws = est.coef_samples_[:, :, 0]              # (chains, draws): the first coefficient
    r, e = rhat(draws), ess(draws)
    print(f"thin={thin:>2}: R-hat {r:.3f}, bulk ESS {e:.0f} of {draws.size} draws; "
          f"all coefficients: max R-hat {np.max(rhat(est.coef_samples_)):.3f}, "
          f"min ESS {np.min(ess(est.coef_samples_)):.0f}")
    trace, hist = axes[row]
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
OUT.mkdir(parents=True, exist_ok=True)
fig.savefig(OUT / "plot_trace.png", dpi=90)
print(f"saved {OUT / 'plot_trace.png'} ({time.perf_counter() - t0:.1f} s)")
