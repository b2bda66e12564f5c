"""
Ridge regression: predictive uncertainty bands
==============================================

:class:`skbayes_sg.SGMCMCRidge` gives two kinds of uncertainty about a
prediction:

* ``predict(X, return_std=True)``: the posterior predictive mean and standard
  deviation, ``sqrt(Var_s[x^T w_s + b_s] + noise_var_)``: the spread of the
  regression line over the posterior draws plus the observation noise;
* ``sample_y(X, n_draws)``: draws of new observations ``y`` from the
  posterior predictive (a stored draw ``(w_s, b_s)`` plus Gaussian noise).

A one-feature problem shows both: disease progression against body mass
index in the diabetes data that ships with scikit-learn.  The estimator runs
with its defaults, which also set the prior precision ``alpha`` and the
noise variance by maximising the evidence (``alpha_``, ``noise_var_``).
"""

# %%
# Fit on half the rows
# --------------------
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split

from skbayes_sg import SGMCMCRidge

data = load_diabetes()
x = data.data[:, [data.feature_names.index("bmi")]]     # one column: (n, 1)
x = (x - x.mean()) / x.std()                              # in standard deviations
y = data.target
x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.5, random_state=0)

reg = SGMCMCRidge(random_state=0).fit(x_tr, y_tr)
print(f"{len(y_tr)} training rows; alpha_ = {reg.alpha_:.3g}, "
      f"noise sd = sqrt(noise_var_) = {np.sqrt(reg.noise_var_):.1f}")
print(f"slope {reg.coef_[0]:.1f} +- {reg.coef_samples_.std():.1f}, "
      f"intercept {reg.intercept_:.1f} +- {reg.intercept_samples_.std():.1f} "
      f"(posterior mean +- sd)")

# %%
# Bands
# -----
# The dark band is the 90% credible band of the regression line
# ``x w + b`` (quantiles over the posterior draws): the uncertainty about
# the mean, which shrinks with more data.  The light band is the 90%
# predictive band ``mean +- 1.645 std`` from ``predict(return_std=True)``,
# dominated here by the observation noise.  The dots are ``sample_y``
# draws: one simulated observation per grid point and draw.
grid = np.linspace(x.min(), x.max(), 200)[:, None]
mean, std = reg.predict(grid, return_std=True)
lines = (reg.coef_samples_.reshape(-1, 1) @ grid.T + reg.intercept_samples_.reshape(-1, 1))
line_lo, line_hi = np.quantile(lines, [0.05, 0.95], axis=0)
draws = reg.sample_y(grid, n_draws=5, random_state=0)          # (200, 5)

fig, ax = plt.subplots(figsize=(8, 5))
ax.fill_between(grid[:, 0], mean - 1.645 * std, mean + 1.645 * std, color="C0", alpha=0.15,
                label="90% predictive band (predict, return_std=True)")
ax.fill_between(grid[:, 0], line_lo, line_hi, color="C0", alpha=0.5,
                label="90% credible band of the line x w + b")
ax.plot(grid[:, 0], mean, color="C0", lw=2, label="predictive mean")
ax.plot(np.repeat(grid[:, 0], draws.shape[1]), draws.ravel(), ".", color="C1", ms=2,
        alpha=0.6, label="sample_y draws")
ax.plot(x_tr[:, 0], y_tr, "k.", ms=4, label="training rows")
ax.plot(x_te[:, 0], y_te, "kx", ms=4, alpha=0.5, label="held-out rows")
ax.set_xlabel("body mass index (standardised)")
ax.set_ylabel("disease progression after one year")
ax.legend(fontsize=8, loc="upper left")
fig.tight_layout()
print(f"at the mean BMI: predictive sd {std[np.argmin(np.abs(grid[:, 0]))]:.1f}, "
      f"of which the line's sd {lines[:, np.argmin(np.abs(grid[:, 0]))].std():.1f}")

# %%
# Coverage on held-out rows
# -------------------------
# If the model's noise level is right, about 90% of new observations fall in
# the 90% predictive band, and the ``sample_y`` draws have the same spread as
# ``predict``'s standard deviation.
mean_te, std_te = reg.predict(x_te, return_std=True)
inside = np.abs(y_te - mean_te) <= 1.645 * std_te
print(f"held-out rows inside the 90% predictive band: {inside.mean():.1%} of {len(y_te)}")
sims = reg.sample_y(x_te, n_draws=2000, random_state=1)
print(f"sd of 2,000 sample_y draws / predict's std: "
      f"median {np.median(sims.std(axis=1) / std_te):.3f} over held-out rows")
plt.show()
