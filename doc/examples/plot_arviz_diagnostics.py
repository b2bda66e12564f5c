"""
ArviZ trace and rank plots
==========================

``est.to_inference_data()`` exports the draws of a fitted estimator as an
``arviz.InferenceData`` (the ``arviz`` extra), so ArviZ's diagnostics and
plots apply directly.  Here: Bayesian logistic regression on four
standardised features of the breast cancer data, fitted with the default
settings, then ArviZ's summary table, trace plot and rank plot.
"""

# %%
# Fit and export
# --------------
# With a pandas ``DataFrame`` as ``X`` (pandas comes with ArviZ) the feature
# names become the coordinates of ``coef`` in the export.
import matplotlib.pyplot as plt
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

from skbayes_sg import SGMCMCLogisticRegression

try:
    import arviz as az
except ImportError:  # the optional ``arviz`` extra
    az = None
    print("arviz is not installed (pip install arviz): this example is skipped.")

data = load_breast_cancer()
features = ["mean radius", "mean texture", "mean smoothness", "mean concavity"]
X = StandardScaler().fit_transform(data.data[:, [list(data.feature_names).index(f)
                                                 for f in features]])
y = data.target
if az is not None:
    import pandas as pd

    X = pd.DataFrame(X, columns=features)

est = SGMCMCLogisticRegression(random_state=0).fit(X, y)
print(f"{est.n_chains} chains x {est.n_samples_} draws (thin={est.thin_}), "
      f"sampler {est.sampler_!r}")
if az is not None:
    idata = est.to_inference_data()
    print(idata.posterior)

# %%
# ArviZ's summary
# ---------------
# Posterior means and sds, highest-density intervals, Monte Carlo standard
# errors, bulk and tail effective sample sizes and rank-normalised split
# R-hat.  The defaults sampled until every R-hat was at most 1.01 and every
# bulk ESS reached the estimator's target:
print(f"estimator's target ESS {est.target_ess_:.0f}")
if az is not None:
    print(az.summary(idata).to_string())

# %%
# Trace plot
# ----------
# Left: the density of each parameter, one line per chain; right: the draws
# in sampling order.  Chains that agree and traces without trends or long
# excursions are what R-hat and ESS summarise.
if az is not None:
    axes = az.plot_trace(idata, compact=False, figsize=(10, 9),
                         backend_kwargs={"layout": "constrained"})

# %%
# Rank plot
# ---------
# All draws are ranked together, and each chain's ranks are shown as a
# histogram.  If the chains sample the same distribution every histogram is
# close to uniform (the dashed line); a chain stuck in one region shows up as
# a histogram piled at one end.
if az is not None:
    axes = az.plot_rank(idata, figsize=(10, 6))
    plt.gcf().set_layout_engine("constrained")
plt.show()
