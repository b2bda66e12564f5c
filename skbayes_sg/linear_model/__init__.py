"""SG-MCMC Bayesian linear models."""
from ._logistic import SGMCMCLogisticRegression
from ._poisson import SGMCMCPoissonRegressor
from ._ridge import SGMCMCRidge

__all__ = ["SGMCMCLogisticRegression", "SGMCMCPoissonRegressor", "SGMCMCRidge"]
