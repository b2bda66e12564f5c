"""skbayes_sg: scikit-learn compatible Bayesian estimators sampled with SG-MCMC."""
from ._base import SamplingDivergedError
from .linear_model import SGMCMCLogisticRegression, SGMCMCPoissonRegressor, SGMCMCRidge
from .neural_network import SGMCMCMLPClassifier

__version__ = "0.1.0.dev0"
__all__ = ["SGMCMCLogisticRegression", "SGMCMCPoissonRegressor", "SGMCMCRidge",
           "SGMCMCMLPClassifier",
           "SamplingDivergedError", "__version__"]
