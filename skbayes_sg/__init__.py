"""skbayes_sg: scikit-learn compatible Bayesian estimators sampled with SG-MCMC."""
from ._base import SamplingDivergedError
from .linear_model import SGMCMCLogisticRegression, SGMCMCRidge

__version__ = "0.1.0.dev0"
__all__ = ["SGMCMCLogisticRegression", "SGMCMCRidge", "SamplingDivergedError", "__version__"]
