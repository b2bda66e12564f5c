"""SG-MCMC Bayesian linear models."""
from ._logistic import SGMCMCLogisticRegression
from ._negative_binomial import SGMCMCNegativeBinomialRegressor
from ._poisson import SGMCMCPoissonRegressor
from ._ridge import SGMCMCRidge

__all__ = ["SGMCMCLogisticRegression", "SGMCMCNegativeBinomialRegressor",
           "SGMCMCPoissonRegressor", "SGMCMCRidge"]
