"""Bayesian neural networks sampled with stochastic-gradient MCMC.

The estimators here are backed by PyTorch, an optional dependency
(``pip install "skbayes_sg[torch]"``). Importing this module does not import
torch; fitting does.
"""

from ._mlp import SGMCMCMLPClassifier

__all__ = ["SGMCMCMLPClassifier"]
