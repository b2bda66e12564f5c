"""Export the draws of a fitted estimator to ArviZ (optional extra ``arviz``).

ArviZ is imported when :func:`to_inference_data` is called, never when
``skbayes_sg`` is imported.
"""
import numpy as np

from ._convergence import _final_estimator

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


def to_inference_data(estimator, *, names=None):
    """The posterior draws of a fitted estimator as an ``arviz.InferenceData``.

    Parameters
    ----------
    estimator : fitted SG-MCMC estimator or Pipeline ending with one
        Anything with ``coef_samples_`` and ``intercept_samples_``.
    names : sequence of str or None, default=None
        Feature names for the ``coef_dim`` coordinate; by default
        ``feature_names_in_`` when the estimator was fitted on named columns,
        else ``x0, x1, ...``.

    Returns
    -------
    idata : arviz.InferenceData
        Its ``posterior`` group holds

        - ``coef``, dims ``(chain, draw, coef_dim)``, or ``(chain, draw,
          class, coef_dim)`` for a multinomial model (the layout of
          ``coef_samples_``);
        - ``intercept``, dims ``(chain, draw)`` or ``(chain, draw, class)``
          (absent when ``fit_intercept=False``);

        with coordinates ``coef_dim`` (the feature names) and ``class``
        (``classes_``).  The attributes of the posterior group record the
        sampler, the subsampling scheme, ``step_size_``, ``n_grad_evals_``
        and ``sampling_time_`` (``sampling_time`` is the name ArviZ uses).

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
    estimator = _final_estimator(estimator)
    coef = np.asarray(estimator.coef_samples_)
    d = coef.shape[-1]
    if names is None:
        names = getattr(estimator, "feature_names_in_", None)
        if names is None:
            names = [f"x{j}" for j in range(d)]
    names = [str(v) for v in names]
    if len(names) != d:
        raise ValueError(f"names has {len(names)} entries; the estimator has {d} "
                         "coefficients per output.")

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

    from .. import __version__

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
    return az.from_dict(posterior=posterior, coords=coords, dims=dims, posterior_attrs=attrs)
