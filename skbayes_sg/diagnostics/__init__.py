"""Diagnostics of fitted SG-MCMC estimators: ESS, R-hat, summaries, KSD, ArviZ."""
from ._advice import check_convergence
from ._arviz import to_inference_data
from ._calibration import expected_calibration_error, predictive_entropy
from ._convergence import (
    MCMCConvergenceWarning, SummaryTable, ess, rhat, summary)
from ._ksd import ksd, ksd_from_estimator
from ._loo import LOOResult, LOOWarning, compare, loo, psislw
from ._model_average import ModelAverageError, model_average_error

__all__ = ["ksd", "ksd_from_estimator", "ess", "rhat", "summary", "check_convergence",
           "to_inference_data", "MCMCConvergenceWarning", "SummaryTable",
           "loo", "compare", "psislw", "LOOResult", "LOOWarning",
           "expected_calibration_error", "predictive_entropy",
           "model_average_error", "ModelAverageError"]
