"""
Calibration of the posterior predictive
=======================================

With 200 training rows and 50 features, the maximum a posteriori (MAP)
logistic regression (scikit-learn's ``LogisticRegression`` with the same
Gaussian prior, ``C = 1 / alpha``) is overconfident: its held-out
probabilities are pushed towards 0 and 1 more often than the outcomes
justify.  :class:`skbayes_sg.SGMCMCLogisticRegression` averages the
predictions of its posterior draws (Bayesian model averaging, BMA), which
accounts for the uncertainty left in the coefficients.

``predict_proba_interval`` goes one step further: for every row it gives an
equal-tailed credible interval of the class probability ``p(y = k | x, theta)``
over the posterior draws, i.e. how well the data pin that probability down.

(sklearn leaves the intercept unpenalised while skbayes_sg's prior covers it;
with standardised features the difference is small.)
"""

# %%
# Data and fits
# -------------
# A simulated problem (8 informative features out of 50, 5% of labels
# flipped); 200 rows to train on, 5,000 held out.  Both models use the
# default prior precision ``alpha=1``; the sampler runs with its defaults.
import time

import matplotlib.pyplot as plt
import numpy as np
from sklearn.calibration import calibration_curve
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss, log_loss
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from skbayes_sg import SGMCMCLogisticRegression

X, y = make_classification(n_samples=5200, n_features=50, n_informative=8, n_redundant=0,
                           flip_y=0.05, class_sep=0.8, random_state=0)
X_tr, X_te, y_tr, y_te = train_test_split(X, y, train_size=200, random_state=0)
scaler = StandardScaler().fit(X_tr)
X_tr, X_te = scaler.transform(X_tr), scaler.transform(X_te)

t0 = time.perf_counter()
bma = SGMCMCLogisticRegression(random_state=0).fit(X_tr, y_tr)
print(f"BMA: sampler {bma.sampler_!r}, {bma.n_chains} x {bma.n_samples_} draws, "
      f"max R-hat {bma.rhat_.max():.3f}, min bulk ESS {bma.ess_.min():.0f}, "
      f"fit {time.perf_counter() - t0:.2f} s")
mapfit = LogisticRegression(C=1.0 / bma.alpha_, max_iter=10_000).fit(X_tr, y_tr)

# %%
# Reliability diagram
# -------------------
# Held-out rows are binned by predicted probability (ten bins of equal
# size); a calibrated model has, in every bin, a fraction of positives equal
# to its mean prediction (the diagonal).  Below, the histograms of the
# predicted probabilities.  The BMA's curve is the closer to the diagonal
# and its held-out log-loss and Brier score are the lower (printed below);
# with 200 rows for 51 parameters both models remain overconfident (their
# curves are flatter than the diagonal), the MAP more so.
fig, (ax, ax_hist) = plt.subplots(2, 1, figsize=(6.5, 7.5), sharex=True,
                                  gridspec_kw=dict(height_ratios=[3, 1]))
ax.plot([0, 1], [0, 1], color="grey", lw=1, ls="--", label="perfectly calibrated")
for label, model in (("SGMCMCLogisticRegression (BMA)", bma),
                     ("LogisticRegression (MAP)", mapfit)):
    p = model.predict_proba(X_te)[:, 1]
    frac, mean_p = calibration_curve(y_te, p, n_bins=10, strategy="quantile")
    scores = f"log-loss {log_loss(y_te, p):.3f}, Brier {brier_score_loss(y_te, p):.3f}"
    print(f"{label}: {scores}; predictions below 0.05 or above 0.95: "
          f"{np.mean((p < 0.05) | (p > 0.95)):.1%}")
    ax.plot(mean_p, frac, "o-", label=f"{label}\n{scores}")
    ax_hist.hist(p, bins=25, histtype="step", lw=1.5)
ax.set_ylabel("fraction of positives")
ax.set_title(f"Held-out reliability ({len(y_te):,} rows); 200 training rows x 50 features",
             fontsize=10)
ax.legend(fontsize=8, loc="upper left")
ax_hist.set_xlabel("predicted probability of class 1")
ax_hist.set_ylabel("count")
fig.tight_layout()

# %%
# Credible intervals of the class probabilities
# ---------------------------------------------
# ``predict_proba_interval(X, level=0.9)`` returns ``(lower, upper)``, each of
# shape ``(n_samples, n_classes)``: the 5% and 95% posterior quantiles of
# ``p(y = k | x, theta)``.  It is an interval for the *probability*, not for
# the label.  Rows whose interval contains 0.5 are those for which the data
# do not settle even the more likely class; the model is right less often on
# them.
lower, upper = bma.predict_proba_interval(X_te, level=0.9)
p = bma.predict_proba(X_te)[:, 1]
width = upper[:, 1] - lower[:, 1]
undecided = (lower[:, 1] < 0.5) & (upper[:, 1] > 0.5)
correct = (p > 0.5) == y_te     # bma.predict(X_te) == y_te, from the probabilities
print(f"90% intervals of p(y=1 | x): median width {np.median(width):.2f}")
print(f"interval contains 0.5 for {undecided.mean():.1%} of held-out rows; accuracy "
      f"{correct[undecided].mean():.3f} on them, {correct[~undecided].mean():.3f} on the others")

rows = np.random.default_rng(0).choice(len(y_te), size=60, replace=False)
rows = rows[np.argsort(p[rows])]
fig, ax = plt.subplots(figsize=(9, 4))
pos = np.arange(len(rows))
ax.vlines(pos, lower[rows, 1], upper[rows, 1], color="C0", lw=2, alpha=0.6,
          label="90% credible interval of p(y=1 | x)")
ax.plot(pos, p[rows], "o", color="C0", ms=4, label="BMA predict_proba")
ax.plot(pos, y_te[rows], "k+", ms=6, label="observed label")
ax.axhline(0.5, color="grey", lw=0.8, ls=":")
ax.set_xticks([])
ax.set_xlabel("60 held-out rows, sorted by predicted probability")
ax.set_ylabel("probability of class 1")
ax.legend(fontsize=8, loc="upper left")
fig.tight_layout()
plt.show()
