"""SG-MCMC Bayesian linear models."""
from ._logistic import SGMCMCLogisticRegression
from ._ridge import SGMCMCRidge

__all__ = ["SGMCMCLogisticRegression", "SGMCMCRidge"]
