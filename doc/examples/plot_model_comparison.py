"""
Model comparison with ArviZ (PSIS-LOO)
======================================

``est.to_inference_data(X, y)`` includes the pointwise log likelihood
``log p(y_i | x_i, theta_s)`` of every row and draw, which is what ArviZ's
leave-one-out cross-validation (``az.loo``, Pareto-smoothed importance
sampling) and ``az.compare`` need.  No refit per left-out row is required.

Simulated logistic data where all five features matter: the *full* model
(all five) is the true one, the *small* model sees only the first two.
ArviZ estimates each model's expected log predictive density on new data
(``elpd_loo``, higher is better) and the standard error of the difference.
"""

# %%
# Data and the two fits
# ---------------------
import matplotlib.pyplot as plt
import numpy as np

from skbayes_sg import SGMCMCLogisticRegression

try:
    import arviz as az
except ImportError:  # the optional ``arviz`` extra
    az = None
    print("arviz is not installed (pip install arviz): this example is skipped.")

rng = np.random.default_rng(0)
n, true_coef = 400, np.array([1.5, -1.0, 1.0, -0.8, 0.7])
X = rng.standard_normal((n, len(true_coef)))
y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(X @ true_coef + 0.3)))).astype(int)

full = SGMCMCLogisticRegression(random_state=0).fit(X, y)
small = SGMCMCLogisticRegression(random_state=0).fit(X[:, :2], y)
for name, est in (("full", full), ("small", small)):
    print(f"{name:>5}: {est.n_features_in_} features, {est.n_chains} x {est.n_samples_} draws, "
          f"max R-hat {est.rhat_.max():.3f}")

# %%
# PSIS-LOO for each model
# -----------------------
# The Pareto k diagnostic checks each row's importance weights; values
# below 0.7 mean that the leave-one-out estimate of that row is reliable.
if az is not None:
    idatas = {"full": full.to_inference_data(X, y),
              "small": small.to_inference_data(X[:, :2], y)}
    print(idatas["full"].log_likelihood)
    for name, idata in idatas.items():
        loo = az.loo(idata, pointwise=True)
        print(f"{name:>5}: elpd_loo {loo.elpd_loo:.1f} +- {loo.se:.1f}, "
              f"effective number of parameters p_loo {loo.p_loo:.1f}, "
              f"largest Pareto k {float(loo.pareto_k.max()):.2f}")

# %%
# ``az.compare``
# --------------
# The models ranked by ``elpd_loo``; ``elpd_diff`` is each model's shortfall
# from the best, with its standard error ``dse``.  A difference of many
# standard errors is a clear preference.  ``dse`` is smaller than the two
# models' own standard errors ``se`` combined, because the same rows enter
# both estimates.  The plot shows each model's ``elpd_loo`` (circle) with its
# standard error (bar); the dashed line marks the best model.
if az is not None:
    table = az.compare(idatas)
    print(table.to_string(float_format="{:.2f}".format))
    worst = table.index[-1]
    print(f"'{table.index[0]}' is ahead of '{worst}' by {table.loc[worst, 'elpd_diff']:.1f} "
          f"(= {table.loc[worst, 'elpd_diff'] / table.loc[worst, 'dse']:.1f} standard errors)")
    az.plot_compare(table, figsize=(8, 3))
    plt.gcf().set_layout_engine("constrained")
plt.show()
