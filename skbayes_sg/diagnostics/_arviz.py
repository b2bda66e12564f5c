"""Export the draws of a fitted estimator to ArviZ (optional extra ``arviz``).

ArviZ is imported when :func:`to_inference_data` is called, never when
``skbayes_sg`` is imported.
"""
import numpy as np

from ._convergence import _feature_names, _final_estimator

__all__ = ["to_inference_data"]

ARVIZ_EXTRA = "arviz"


def _import_arviz():
    try:
        import arviz
    except ImportError as exc:
        raise ImportError(
            "to_inference_data needs ArviZ, an optional dependency of skbayes_sg: "
            f'pip install "skbayes_sg[{ARVIZ_EXTRA}]" (or pip install arviz).') from exc
    return arviz


def _predictive_request(X, y, posterior_predictive):
    """Whether an export draws the posterior predictive at ``X`` (``None``:
    when ``X`` comes without ``y``); a ValueError for a request it cannot
    serve.  Shared by the linear export and the network's."""
    if posterior_predictive is None:
        posterior_predictive = X is not None and y is None
    if X is None and (y is not None or posterior_predictive):
        raise ValueError("to_inference_data needs X: with y for the log likelihood, alone "
                         "(or with posterior_predictive=True) for posterior predictive draws "
                         "at X; pass X.")
    if X is not None and y is None and not posterior_predictive:
        raise ValueError("to_inference_data got X without y and posterior_predictive=False: "
                         "pass y for the log likelihood, or leave posterior_predictive at its "
                         "default for posterior predictive draws at X.")
    return posterior_predictive


def to_inference_data(estimator, X=None, y=None, *, names=None, posterior_predictive=None,
                      random_state=None):
    """The posterior draws of a fitted estimator as an ``arviz.InferenceData``.

    Parameters
    ----------
    estimator : fitted SG-MCMC estimator or Pipeline ending with one
        Anything with ``coef_samples_`` and ``intercept_samples_``.  For a
        pipeline, ``X`` goes through its steps before the final estimator.
    X : {array-like, sparse matrix} of shape (n_obs, n_features) or None
        Observations.  With ``y``: the ``log_likelihood`` group (``y``, dims
        ``(chain, draw, obs)``: ``log p(y_i | x_i, theta)`` per observation and
        draw, what :func:`skbayes_sg.diagnostics.loo`, ``az.loo``, ``az.waic`` and
        ``az.compare`` read; ``n_obs x n_draws`` doubles), ``observed_data`` and
        ``lp`` in ``sample_stats``.  Without ``y`` (new data): the
        ``posterior_predictive`` group alone.
    y : array-like of shape (n_obs,) or None
        Their targets (class labels for a classifier).
    posterior_predictive : bool or None, default=None
        Add the ``posterior_predictive`` group: ``y``, dims ``(chain, draw, obs)``,
        one observation per row of ``X`` and posterior draw, drawn from the model
        at that draw (what ``estimator.sample_y(X, n_draws=None)`` returns,
        transposed; for ``az.plot_ppc`` or a held-out predictive check).  Needs
        ``X``.  ``None``: True when ``X`` comes without ``y``, else False.
    random_state : int, RandomState instance or None, default=None
        Seeds the posterior predictive draws.
    names : sequence of str or None, default=None
        Feature names for the ``coef_dim`` coordinate; by default ``feature_names_in_``
        when the estimator was fitted on named columns, else ``x0, x1, ...``.

    Returns
    -------
    idata : arviz.InferenceData (ArviZ 0.x) or xarray.DataTree (ArviZ 1.x)
        Its ``posterior`` group holds ``coef``, dims ``(chain, draw, coef_dim)``
        (multinomial: ``(chain, draw, class, coef_dim)``, the layout of
        ``coef_samples_``), and ``intercept``, dims ``(chain, draw)`` or
        ``(chain, draw, class)`` (absent when ``fit_intercept=False``), with coordinates
        ``coef_dim`` (the feature names) and ``class`` (``classes_``); its attributes
        record the sampler, the subsampling scheme, ``step_size_``, ``n_grad_evals_``
        and ``sampling_time_`` (``sampling_time`` is the name ArviZ uses).
        ``sample_stats`` holds ``step_size`` and ``diverging`` per draw (always False: a
        fit whose chain diverged raises instead of returning draws) and, with ``X`` and
        ``y``, ``lp``, the log posterior density of every draw up to a constant.

    Raises
    ------
    ImportError
        When ArviZ is not installed (``pip install "skbayes_sg[arviz]"``).

    Examples
    --------
    >>> from sklearn.datasets import load_breast_cancer
    >>> from sklearn.preprocessing import scale
    >>> from skbayes_sg import SGMCMCLogisticRegression
    >>> from skbayes_sg.diagnostics import to_inference_data
    >>> X, y = load_breast_cancer(return_X_y=True)
    >>> clf = SGMCMCLogisticRegression(n_samples=200, random_state=0).fit(scale(X), y)
    >>> idata = to_inference_data(clf)                     # doctest: +SKIP
    >>> idata.posterior["coef"].dims                       # doctest: +SKIP
    ('chain', 'draw', 'coef_dim')
    """
    az = _import_arviz()
    pipeline = estimator            # X goes through a pipeline's steps below
    estimator = _final_estimator(estimator)
    if not hasattr(estimator, "intercept_samples_") and hasattr(estimator, "to_inference_data"):
        # the network: its own layout (weights per layer, invariant quantities)
        return _network_export(pipeline, estimator, X, y, posterior_predictive, random_state)
    posterior, dims, coords = _posterior_layout(estimator, names)
    attrs = _posterior_attrs(estimator)
    shape = np.shape(estimator.intercept_samples_)[:2]          # (chains, draws)
    sample_stats = _draw_stats(estimator, shape)
    groups = {}
    posterior_predictive = _predictive_request(X, y, posterior_predictive)
    if X is not None:
        groups, lp, n_obs = _observation_groups(pipeline, X, y, posterior, shape,
                                                posterior_predictive, random_state)
        dims["y"], coords["obs"] = ["obs"], np.arange(n_obs)
        if lp is not None:
            sample_stats["lp"] = lp
    return _from_dict(az, posterior, sample_stats, groups, coords, dims, attrs)


def _network_export(pipeline, network, X, y, posterior_predictive, random_state):
    """The network's own export (``network.to_inference_data``), with ``X``
    first through the steps of a pipeline."""
    if X is not None:
        X = _final_estimator_and_features(pipeline, X)[1]
    return network.to_inference_data(X, y, posterior_predictive=posterior_predictive,
                                     random_state=random_state)


def _posterior_layout(estimator, names):
    """``(posterior, dims, coords)`` of a linear estimator's export: the
    ``coef`` and ``intercept`` draws, their dims, and the ``coef_dim`` (and
    ``class``) coordinates."""
    coef = np.asarray(estimator.coef_samples_)
    d = coef.shape[-1]
    names = _feature_names(estimator, names, d)

    posterior = {"coef": coef}
    coords = {"coef_dim": names}
    if coef.ndim == 4:
        dims = {"coef": ["class", "coef_dim"], "intercept": ["class"]}
        coords["class"] = list(np.asarray(estimator.classes_).tolist())
    else:
        dims = {"coef": ["coef_dim"], "intercept": []}
    if bool(getattr(estimator, "fit_intercept", True)):
        posterior["intercept"] = np.asarray(estimator.intercept_samples_)
    else:
        del dims["intercept"]
    return posterior, dims, coords


def _posterior_attrs(estimator):
    """The attributes of the ``posterior`` group: the library, the estimator,
    the settings its fit used, its step size, gradient evaluations and time."""
    from .._version import __version__

    attrs = {"inference_library": "skbayes_sg",
             "inference_library_version": __version__,
             "estimator": type(estimator).__name__}
    params = estimator.get_params() if hasattr(estimator, "get_params") else {}
    for key in ("sampler", "subsampling", "metric"):
        # the settings the fit used ("auto" resolved), else the parameters
        value = getattr(estimator, key + "_", params.get(key))
        if value is not None:
            attrs[key] = str(value)
    for key, name in (("step_size_", "step_size"), ("n_grad_evals_", "n_grad_evals"),
                      ("sampling_time_", "sampling_time")):
        if hasattr(estimator, key):
            attrs[name] = getattr(estimator, key)
    return attrs


def _draw_stats(estimator, shape):
    """The ``sample_stats`` of every draw (``shape``: chains, draws) before
    ``lp``: ``diverging`` (all False) and, when known, ``step_size``."""
    sample_stats = {"diverging": np.zeros(shape, dtype=bool)}
    if hasattr(estimator, "step_size_"):
        sample_stats["step_size"] = np.full(shape, float(estimator.step_size_))
    return sample_stats


def _observation_groups(pipeline, X, y, posterior, shape, posterior_predictive,
                        random_state):
    """``(groups, lp, n_obs)`` at the observations ``X`` (through the steps of
    a pipeline): with ``y`` the ``log_likelihood`` and ``observed_data``
    groups and ``lp``, the log posterior of every draw (else None); the
    ``posterior_predictive`` group when asked; and the number of rows."""
    chains, draws = shape
    model, X = _final_estimator_and_features(pipeline, X)
    groups, lp = {}, None
    if y is not None:
        if not hasattr(model, "log_likelihood"):
            raise ValueError(f"{type(model).__name__} has no pointwise log likelihood; "
                             "call to_inference_data without y.")
        y = np.asarray(y).ravel()
        loglik = model.log_likelihood(X, y).T.reshape(chains, draws, -1)
        groups["log_likelihood"] = {"y": loglik}
        groups["observed_data"] = {"y": y}
        lp = loglik.sum(axis=2) + _log_prior(model, posterior)
    if posterior_predictive:
        if not hasattr(model, "sample_y"):
            raise ValueError(f"{type(model).__name__} draws no observations; pass "
                             "posterior_predictive=False.")
        pred = model.sample_y(X, n_draws=None, random_state=random_state)
        groups["posterior_predictive"] = {"y": pred.T.reshape(chains, draws, -1)}
    return groups, lp, X.shape[0]


def _from_dict(az, posterior, sample_stats, groups, coords, dims, attrs):
    """The export, ``az.from_dict`` called as the installed ArviZ takes it:
    a DataTree from ArviZ 1.x, an InferenceData from 0.x."""
    if _arviz_major(az) >= 1:
        # ArviZ 1.x (arviz-base): one dict of groups, a DataTree back
        return az.from_dict({"posterior": posterior, "sample_stats": sample_stats, **groups},
                            coords=coords, dims=dims, attrs={"posterior": attrs})
    return az.from_dict(posterior=posterior, sample_stats=sample_stats, coords=coords,
                        dims=dims, posterior_attrs=attrs, **groups)


def _arviz_major(az):
    """The major version of the ArviZ module ``az`` (0 when unknown)."""
    try:
        return int(str(getattr(az, "__version__", "0")).split(".")[0])
    except ValueError:
        return 0


def _final_estimator_and_features(estimator, X):
    """The last step of a pipeline and ``X`` transformed by the others."""
    if hasattr(estimator, "steps"):
        for _, step in estimator.steps[:-1]:
            if step is not None and step != "passthrough":
                X = step.transform(X)
        return estimator.steps[-1][1], X
    return estimator, X


def _log_prior(estimator, posterior):
    """``log N(theta | 0, alpha^-1 I)`` per draw, up to a constant."""
    alpha = float(getattr(estimator, "alpha_", getattr(estimator, "alpha", 1.0)))
    chains, draws = posterior["coef"].shape[:2]
    sq = np.square(posterior["coef"]).reshape(chains, draws, -1).sum(axis=2)
    if "intercept" in posterior:
        sq = sq + np.square(posterior["intercept"]).reshape(chains, draws, -1).sum(axis=2)
    return -0.5 * alpha * sq
