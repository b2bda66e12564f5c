"""Diagnostics of fitted SG-MCMC estimators: ESS, R-hat, summaries, KSD, ArviZ."""
from ._arviz import to_inference_data
from ._convergence import (
    MCMCConvergenceWarning, SummaryTable, check_convergence, ess, rhat, summary)
from ._ksd import ksd, ksd_from_estimator

__all__ = ["ksd", "ksd_from_estimator", "ess", "rhat", "summary", "check_convergence",
           "to_inference_data", "MCMCConvergenceWarning", "SummaryTable"]
