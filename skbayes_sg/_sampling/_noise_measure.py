"""The gradient noise measured on the chains' own draws, where the set-up's
model of it is least sure, and the batch chosen again from it.

The set-up predicts each row's residual moment ``E_i`` under the Laplace
law of its linear predictor, tilted by the row's own likelihood
(:meth:`~._glm.ModelSpec.residual_moments`).  Where that predictor's
posterior sd exceeds 1 (``MEASURED_ROW_VAR``: its law spans the curved part
of the likelihood) the prediction depends on the shape of the posterior
beyond the row itself: on a9a with prior variance 10, the 146 such rows
(rare features, weakly identified) carry a skew that the other rows sharing
those features give, and the model overstates the one-row noise ``v1``
2.7-fold (2,341 against 880 measured on 400 posterior draws), so the batch,
and the cost, were 2.7 times what the error budget needs.

After the first warm-up window that keeps draws, this module measures those
rows' moments on the window's draws (a few hundred draws of a few hundred
rows: about one data pass), recomputes ``v1`` with them, and takes the
batch the error model chooses for it at the chains' step.  The measurement
is noisy where a row's moment comes from rare excursions (breast cancer:
453 such rows of 569), so the noise used is an upper bound, the estimate
plus two jackknife-over-chains standard errors, and the batch only falls:
a bound above the model keeps the set-up's batch.
"""
from dataclasses import dataclass, replace

import numpy as np

from . import _error_model
from ._glm import linear_predictor
from ._registry import SUBSAMPLINGS, row_probabilities
from ._row_algebra import dense_times

#: rows whose linear predictor's Laplace variance exceeds this are measured
MEASURED_ROW_VAR = 1.0
#: row evaluations the measurement may spend: a data pass, or this share of
#: the sampling's predicted row evaluations where that is more
MEASURE_PASSES = 1.0
MEASURE_SHARE = 0.05
#: draws per chain the measurement wants at least (fewer: no measurement)
MIN_DRAWS_PER_CHAIN = 16
#: standard errors (jackknife over chains) added to the measured noise
UPPER_SE = 2.0
#: the batch is changed only when the new one is below this share of the old
MIN_CHANGE = 0.8


@dataclass
class BatchRemeasure:
    """``remeasure(draws, pool, expected_rows)``: measure, choose and set the
    chains' batch (returns it, or None when the set-up's stays);
    ``expected_rows`` the sampling's predicted row evaluations.

    Attributes (after a call): ``noise_model`` (the set-up's ``v1``),
    ``noise_measured`` (the upper bound), ``batch_size`` (the new batch, or
    None) and ``n_grad_evals`` (row evaluations spent)."""

    ctx: object
    setup: object
    factor: np.ndarray
    scale: float
    overhead: float
    rows: np.ndarray
    noise_model: float = np.nan
    noise_measured: float = np.nan
    batch_size: object = None
    n_grad_evals: int = 0

    def __call__(self, draws, pool, expected_rows=0.0):
        ctx = self.ctx
        draws = np.asarray(draws, dtype=np.float64)
        m, N, _ = draws.shape
        budget = max(MEASURE_PASSES * ctx.n, MEASURE_SHARE * expected_rows)
        per_chain = min(N, int(budget / max(m * len(self.rows), 1)))
        if m < 2 or per_chain < MIN_DRAWS_PER_CHAIN:
            return None
        picked = draws[:, np.linspace(0, N - 1, per_chain).astype(int)]
        # the rows' residuals at the mode: the control variate's values
        Xr = ctx.X[self.rows]
        z0 = linear_predictor(Xr, ctx.mode().reshape(1, -1), ctx.fit_intercept)
        control = ctx.glm.residual(z0, ctx.y[self.rows])[:, 0]
        by_chain = [self._row_moments(Xr, control, picked[c]) for c in range(m)]
        E = ctx.row_noise_moments("fixed", ctx.resolved.posterior_row_cov)
        p = row_probabilities(ctx, SUBSAMPLINGS[self.setup.subsampling])
        inv_p = np.full(ctx.n, float(ctx.n)) if p is None else 1.0 / p
        # the other rows' part of the noise, once (one counted pass)
        w = E * inv_p
        w[self.rows] = 0.0
        before = ctx.n_grad_evals
        rest = self.factor.T @ ctx.weighted_gram(w) @ self.factor
        self.n_grad_evals += ctx.n_grad_evals - before
        Fr = dense_times(Xr, self.factor, ctx.fit_intercept)      # (rows, dim): x_i^T L

        def noise(E_rows):
            V = rest + Fr.T @ ((E_rows * inv_p[self.rows])[:, None] * Fr)
            return float(np.linalg.eigvalsh(self.scale ** 2 * 0.5 * (V + V.T))[-1])

        self.noise_model = noise(E[self.rows])
        measured = noise(np.mean(by_chain, axis=0))
        # jackknife over chains: a chain's draws are correlated, the chains not
        leave_one = np.array([noise(np.mean(by_chain[:c] + by_chain[c + 1:], axis=0))
                              for c in range(m)])
        se = np.sqrt((m - 1) / m * np.sum((leave_one - leave_one.mean()) ** 2))
        self.noise_measured = measured + UPPER_SE * se
        if not self.noise_measured < self.noise_model:
            return None
        cfg = self.setup.sampler_config
        choice = _error_model.choose(
            self.setup.sampler, self.noise_measured, ctx.n, step_size=cfg["step_size"],
            friction=cfg.get("friction", "auto"), overhead_rows=self.overhead)
        batch = int(min(max(choice.batch_size, 1), ctx.n))
        if not batch < MIN_CHANGE * self.setup.batch_size:
            return None
        self.batch_size = ctx.batch_size = batch
        pool.spec = replace(pool.spec, subsampling_config={**pool.spec.subsampling_config,
                                                           "batch_size": batch})
        return batch

    def _row_moments(self, Xr, control, thetas):
        """``w_i^2 E[(r_i(theta) - r_i(mode))^2]`` over ``thetas`` (M, dim)
        for the measured rows ``Xr`` (``control``: their ``r_i(mode)``): one
        linear predictor a row and draw."""
        ctx, rows = self.ctx, self.rows
        M = len(thetas)
        Z = linear_predictor(Xr, thetas, ctx.fit_intercept)                 # (rows, M)
        r = ctx.glm.residual(Z.reshape(-1, 1), np.repeat(ctx.y[rows], M))[:, 0]
        self.n_grad_evals += len(rows) * M
        E = np.mean((r.reshape(len(rows), M) - control[:, None]) ** 2, axis=1)
        if ctx.sample_weight is not None:
            E = E * ctx.sample_weight[rows] ** 2
        return E


def batch_remeasure(policy, ctx, setup):
    """A :class:`BatchRemeasure` for this fit, or None where it does not apply.

    It applies to an automatic batch of an unadjusted dynamics in the dense
    Laplace metric, with a control variate at the mode and a fixed batch
    (``cv``, ``cv-preferential``: not the adaptive-size or EWSG estimators,
    which size or pick their own rows, nor the second-order control, whose
    remainder grows without bound with the distance from the mode where the
    residual is bounded: a short window's draws understate it in the tails,
    and on the nearly separable breast-cancer posterior the batch measured
    down from 550 to 199 rows gave a mean 0.14 sd off, the model's a right
    fit), one output, non-lazy steps, rows
    whose Gram is cheap, and the tilted noise model; and where some row's
    predictor has a Laplace variance above ``MEASURED_ROW_VAR``."""
    spec = SUBSAMPLINGS[setup.subsampling]
    Q = ctx.resolved.posterior_row_cov
    if (policy.p.batch_size != "auto" or setup.metropolis or setup.lazy
            or setup.metric["kind"] != "dense" or spec.control != "fixed"
            or spec.index_chain or spec.hyperparameters or ctx.glm.n_outputs != 1
            or ctx.resolved.linearised_noise or Q is None or np.ndim(Q) != 1
            or setup.sampler not in _error_model.MAX_STEP or ctx.gram_is_dear()):
        return None
    rows = np.flatnonzero(Q > MEASURED_ROW_VAR)
    if not len(rows):
        return None
    T = float(policy.p.temperature)
    _, factor = ctx.laplace_metric("dense", T)
    return BatchRemeasure(ctx, setup, np.asarray(factor, dtype=np.float64), 1.0 / T,
                          policy.step_overhead(ctx, "dense"), rows)
