"""Where a linear fit's chains start, what counts as a divergence, and the
check of a hand-set step in the identity metric.

Functions of a :class:`~._setup.SetupPolicy` (the estimator's parameters)
and the fit's context: they read the estimator through nothing else.
"""
import numpy as np

from ._sampling import _error_model
from ._sampling._metric import Metric
from ._sampling._registry import SUBSAMPLINGS, noise_per_row
from ._sampling._runner import CHECK_EVERY
from ._sampling.samplers import BY_NAME as SAMPLER_MODULES
from .exceptions import SamplingDivergedError

#: a chain whose parameters leave the mode by more than this many Laplace
#: marginal sds has blown up (a posterior draw is within ~4.5 of its sds;
#: the Laplace sds of the nearly separable benchmark are 1.3x too small)
DIVERGENCE_SD = 10.0
#: the same along every whitened direction of a dense metric (z ~ N(0, I))
DIVERGENCE_Z = 12.0
#: a diagonal metric's z_j has variance 1/(1 - R_j^2) (correlated features):
#: only an overflow-like excursion counts
DIVERGENCE_Z_DIAGONAL = 1e4
#: a Metropolis-adjusted chain is exact: its far excursions are the posterior's
#: own tail (skewed posteriors of few rows reach 11 Laplace sds), and a
#: trajectory that blows up is rejected; only an absurd state counts there
DIVERGENCE_EXACT_FACTOR = 10.0
#: the identity-step check takes its dense route (the whitened metric of the
#: mode's Hessian, exact eigenvalues) where that costs at most this many data
#: passes, or this many floating-point operations; else Lanczos iterations on
#: passes at any dim (``_predict_identity_step_error``)
STEP_CHECK_DENSE_PASSES = 50
STEP_CHECK_DENSE_FLOPS = 3e7
#: the iterative route's Lanczos stop (relative change of the largest Ritz
#: value): its eigenvalues within a few per cent, in 5-10 passes each
STEP_CHECK_TOL = 1e-2
#: chains start at draws of the Laplace approximation with sds this much wider
#: (overdispersed, so that split R-hat can see chains that have not converged)
OVERDISPERSION = 2.0


def start_points(policy, ctx, setup, seeds):
    """Every chain's start, in the metric's coordinates."""
    metric = Metric.from_config(setup.metric)
    init = policy.p.init
    if isinstance(init, str) and init == "auto":
        init = "laplace" if metric.whitened else "mode"
    rngs = [np.random.default_rng(s.spawn(1)[0]) for s in seeds[:policy.p.n_chains]]
    if isinstance(init, str) and init == "laplace":
        # overdispersed draws of the Laplace approximation (split R-hat
        # then sees chains that have not converged)
        # (normals truncated at 3: a start is at most 6 sds out, well
        # inside the divergence bounds whatever the dimension)
        xis = [np.clip(r.standard_normal(ctx.dim), -3.0, 3.0) for r in rngs]
        if metric.whitened:
            return [OVERDISPERSION * xi for xi in xis]
        F = np.linalg.cholesky(ctx.laplace_cov(ctx.mode()) * policy.p.temperature)
        thetas = [ctx.mode() + OVERDISPERSION * F @ xi for xi in xis]
    elif isinstance(init, str) and init == "prior":
        thetas = [r.standard_normal(ctx.dim) / np.sqrt(ctx.alpha) for r in rngs]
    elif isinstance(init, str):
        theta = ctx.mode() if init == "mode" else np.zeros(ctx.dim)
        thetas = [theta] * policy.p.n_chains
    else:
        thetas = [policy.init_array(ctx)] * policy.p.n_chains
    return [metric.py_to_z(t) for t in thetas]


def divergence_bounds(policy, ctx, setup, starts):
    """What a chain must stay within to count as not diverged.

    Every parameter within ``DIVERGENCE_SD`` posterior sds of the mode,
    with the sds of the Laplace approximation where they are at hand (a
    dense metric's factor, or a Hessian at the mode already computed) and
    otherwise the bound ``sqrt(T / alpha)`` (the likelihoods are
    log-concave, so the posterior is ``alpha / T``-strongly log-concave
    and no marginal sd exceeds the prior's); in a dense metric also every
    ``|z_j|`` within ``DIVERGENCE_Z``.  A diagonal metric's ``z`` is not
    standardised (correlations), so only an overflow-like excursion counts
    there.  The bounds widen to twice the farthest start, so that a chain
    started far out (``init``) may travel in, and tenfold for a
    Metropolis-adjusted chain (exact: a far excursion is the posterior's
    own tail, and a trajectory that blows up is rejected).  Without a mode
    only non-finite states count.
    """
    out = {}
    T = float(policy.p.temperature)
    widen = DIVERGENCE_EXACT_FACTOR if setup.metropolis else 1.0
    metric = Metric.from_config(setup.metric)
    kind = setup.metric["kind"]
    z0 = np.abs(np.asarray(starts)).max() if len(starts) else 0.0
    if kind == "dense":
        F = np.asarray(setup.metric["factor"])
        center, sd = np.asarray(setup.metric["center"]), np.sqrt(np.einsum("ij,ij->i", F, F))
        out["max_abs_z"] = max(widen * DIVERGENCE_Z, 2.0 * z0)
    elif kind in ("diagonal", "lowrank"):
        out["max_abs_z"] = max(DIVERGENCE_Z_DIAGONAL, 2.0 * z0)
        return out
    elif ctx.has_mode():
        center = ctx.mode()
        if ctx.has_mode_hessian():
            sd = np.sqrt(T * np.diag(ctx.laplace_cov(center)))
        else:
            sd = np.full(ctx.dim, np.sqrt(T / ctx.alpha))
    else:
        return out
    thetas = metric.py_to_theta(np.asarray(starts))
    farthest = np.max(np.abs(thetas - center) / sd) if len(starts) else 0.0
    out["bounds"] = (center, sd, max(widen * DIVERGENCE_SD, 2.0 * farthest))
    return out


def identity_step_error(policy, ctx, setup, pool):
    """``mu = lambda_max(G^1/2 H G^1/2)`` and the noise ``v`` of
    :meth:`_identity_step_error`, by one of two routes.

    Dense (where it costs at most ``STEP_CHECK_DENSE_PASSES`` passes or
    ``STEP_CHECK_DENSE_FLOPS`` operations, the mode search included
    where the fit did not need the mode: small problems, as before): H the
    Hessian at the mode, ``v`` the estimator's one-row noise in the dense
    Laplace metric, exact eigenvalues.

    Iterative (every other fit, at any dim; passes only, no dense
    dim x dim matrix, no mode search): H the Hessian at the mode if the
    fit found it, else at the chains' calibration point (the start for
    ``init="zeros"`` or an array; for the logistic model the curvature
    there is at most the global bound 1/4 per datum, so ``mu`` is then
    an upper estimate); ``mu`` by Lanczos on Hessian-vector products.
    ``v`` approximates the whitened noise by the diagonal Laplace metric
    ``D = sqrt(T / diag H)`` at the same point: the rows' variances
    ``x_i^T D^2 x_i`` for the dense ``x_i^T S x_i``, and the largest
    noise variance along a direction whitened by D instead of L (exact
    where H is diagonal; where the features are correlated in H the two
    differ, by 13% on a 5-feature logistic test), Lanczos on passes.
    About 10-30 passes in all.

    Returns ``(error, advised step)``: the predicted relative variance error
    ``k (1 + v) / (2 - k)`` (``k = h mu``; inf from ``k = 2``) and the step
    that keeps it at the error model's budget.
    """
    T = float(policy.p.temperature)
    spec = SUBSAMPLINGS[setup.subsampling]
    g = SAMPLER_MODULES[setup.sampler].identity_preconditioner(
        setup.sampler_config, pool.states, ctx.dim)
    v = 0.0
    # the dense route's work: two dense products of the rows (O(nnz_i^2)
    # a row and output pair) and O(dim^3) algebra, and the mode search
    # (about 8 such Hessians) where the fit did not need the mode
    X, K = ctx.X, ctx.glm.n_outputs
    lens = (np.diff(X.indptr).astype(np.float64) + int(ctx.fit_intercept)
            if hasattr(X, "indptr") else np.full(X.shape[0], float(ctx.dext)))
    hessian = K * K * float(lens @ lens) + float(ctx.dim) ** 3
    work = 2.0 * hessian + 2.0 * float(ctx.dim) ** 3
    if not ctx.has_mode():
        work += 8.0 * hessian
    elif not ctx.has_mode_hessian():     # a mode without its Hessian (warm start)
        work = np.inf
    if (work <= STEP_CHECK_DENSE_PASSES * K * max(float(lens.sum()), 1.0)
            or work <= STEP_CHECK_DENSE_FLOPS):
        center, factor = ctx.laplace_metric("dense", T)
        H = ctx.hessian_at(center)
        mu = float(np.linalg.eigvalsh(g[:, None] * H * g[None, :])[-1])
        if spec.stochastic:
            if ctx.resolved.posterior_row_cov is None:
                ctx.resolved.posterior_row_cov = ctx.metric_row_covariances("dense", factor)
            v = noise_per_row(ctx, spec, factor, "dense", 1.0 / T) / max(setup.batch_size, 1)
    else:
        center = ctx.mode() if ctx.has_mode() else policy.calibration_point(ctx)
        mu = ctx.hessian_max_eigenvalue(center, g, tol=STEP_CHECK_TOL)
        if spec.stochastic:
            ctx.resolved.noise_tol = STEP_CHECK_TOL
            ctx.resolved.linearised_noise = True
            if not ctx.has_mode():
                ctx.resolved.noise_center = center
            D = np.sqrt(T / ctx.hessian_diag(center))
            ctx.resolved.posterior_row_cov = ctx.metric_row_covariances("diagonal", D)
            v = noise_per_row(ctx, spec, D, "diagonal", 1.0 / T) / max(setup.batch_size, 1)
    kappa = float(setup.sampler_config["step_size"]) * mu
    error = kappa * (1.0 + v) / (2.0 - kappa) if kappa < 2.0 else np.inf
    budget = _error_model.VARIANCE_ERROR
    return float(error), 2.0 * budget / ((1.0 + v + budget) * mu)


def step_retuner(step_size, setup, pool):
    """After a divergence with an automatic step: halve it, the batch
    kept; None when the user set the step, or for a Metropolis
    correction (which rejects instead of diverging).

    Why the batch is kept: a divergence says the error model understated
    the gradient noise somewhere, often one row whose term, divided by
    its ``b p_i``, throws the chain out.  That kick is ``h / b`` times the
    row's term: halving the batch with the step (the error model's own
    trade) would leave it as it was, and every halving would diverge
    again (breast cancer, SGHMC-CV-PS, before the tilted noise model)."""
    if step_size != "auto" or setup.metropolis:
        return None

    def retune():
        # the chains' step (one for all: an unadjusted dynamics does not adapt it)
        return 0.5 * float(pool.step_sizes().min())
    return retune


def divergence_error(exc, setup, model_hint=""):
    """The :class:`SamplingDivergedError` of a diverged chain: where, with
    which settings, the smaller step to pass, and the model's own
    ``model_hint`` (why its posterior is hard here; "" none)."""
    bad = [(c, r) for c, r in enumerate(exc.results) if r.diverged]
    c, r = bad[0]
    h = r.step_size
    bounds = setup.bounds
    what = ("non-finite parameters" if r.reason == "non-finite" else
            f"parameters more than {bounds[2]:.0f} posterior sds from the mode"
            if bounds is not None else "parameters implausibly far from the mode")
    return SamplingDivergedError(
        f"Chain {c} diverged ({what}) during {exc.phase}, {r.n_steps_done} to "
        f"{r.n_steps_done + CHECK_EVERY} steps into that round, with "
        f"sampler={setup.sampler!r}, subsampling={setup.subsampling!r} and step_size={h:.3g}. Pass a smaller step_size, e.g. step_size={h / 10:.3g} "
        "(or leave step_size='auto', or standardise X). No samples were kept."
        + (" " + model_hint if model_hint else ""))
