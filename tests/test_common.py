"""scikit-learn's estimator checks on every public estimator."""
from sklearn.utils.estimator_checks import parametrize_with_checks

from skbayes_sg import (SGMCMCLogisticRegression, SGMCMCNegativeBinomialRegressor,
                        SGMCMCPoissonRegressor, SGMCMCRidge)

# Small chains keep the ~50 checks per estimator fast; every check must pass
# but the two below, whose reason is written out.
_SMALL = dict(n_samples=200, n_warmup=200, n_chains=2)

# These compare the predictions of a fit with integer weights and of a fit on
# repeated rows to 1e-7: a sampler's two fits are different Monte Carlo runs
# (the data and so the minibatches differ), equal in law, not draw for draw.
# tests/test_weights.py checks the law against exact and reference posteriors.
_SAME_LAW_NOT_SAME_DRAWS = (
    "integer sample_weight gives the posterior of repeated rows in law, not the same "
    "Monte Carlo draws (tested statistically in tests/test_weights.py)")


_ONE_IN_THE_ROWS_SPAN = (
    "the check's 15 weighted rows of 31 coefficients are sampled in their span "
    "(skbayes_sg._rows_span: fewer than half as many rows as coefficients) and its ~30 "
    "repeated rows are not: the same posterior in law, not the same Monte Carlo draws "
    "(tested statistically in tests/test_rows_span.py)")


def _expected_failures(estimator):
    # the logistic fit at these settings (3 classes: not in the rows' span)
    # takes exact gradients (Metropolis-adjusted HMC): the two runs then agree
    # to rounding and the check passes
    reason = (_SAME_LAW_NOT_SAME_DRAWS if isinstance(estimator, SGMCMCRidge)
              else _ONE_IN_THE_ROWS_SPAN if isinstance(estimator, SGMCMCPoissonRegressor)
              else None)
    if reason is None:
        return {}
    return {check: reason for check in (
        "check_sample_weight_equivalence_on_dense_data",
        "check_sample_weight_equivalence_on_sparse_data")}


@parametrize_with_checks([
    SGMCMCLogisticRegression(**_SMALL),
    SGMCMCRidge(**_SMALL),
    SGMCMCPoissonRegressor(**_SMALL),
    SGMCMCNegativeBinomialRegressor(**_SMALL),
], expected_failed_checks=_expected_failures)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)
