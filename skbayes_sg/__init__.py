"""skbayes_sg: scikit-learn compatible Bayesian estimators sampled with SG-MCMC."""
from ._version import __version__
from .exceptions import SamplingDivergedError
from .linear_model import (SGMCMCLogisticRegression, SGMCMCNegativeBinomialRegressor,
                           SGMCMCPoissonRegressor, SGMCMCRidge)
from .neural_network import SGMCMCMLPClassifier

__all__ = ["SGMCMCLogisticRegression", "SGMCMCNegativeBinomialRegressor",
           "SGMCMCPoissonRegressor", "SGMCMCRidge",
           "SGMCMCMLPClassifier",
           "SamplingDivergedError", "__version__"]
