"""scikit-learn's estimator checks on every public estimator."""
from sklearn.utils.estimator_checks import parametrize_with_checks

from skbayes_sg import SGMCMCLogisticRegression, SGMCMCRidge

# Small chains keep the ~50 checks per estimator fast; every check must pass.
_SMALL = dict(n_samples=200, n_warmup=200, n_chains=2)


@parametrize_with_checks([
    SGMCMCLogisticRegression(**_SMALL),
    SGMCMCRidge(**_SMALL),
])
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)
