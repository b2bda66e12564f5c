"""``temperature="auto"``: the network's model chosen on held-out rows.

At ``temperature=1`` the default model (a Gaussian fan-in prior) is the
posterior itself, and on some data its model average loses to the point
estimate (digits: log-loss 0.12 against ``MLPClassifier``'s 0.07, the exact
posterior included: doc/mlp.rst); on others it wins (breast cancer, a
5,000-row problem). A cold posterior under a wider prior, with each chain
started at its own mode, wins where the posterior loses and loses a little
where it wins. So the choice is made from the data, as a validation split
chooses a hyperparameter: both candidates run on the rows not held out, the
one whose model average predicts the held-out rows better is kept, and its
chains continue on every row (as ``validation_fraction`` does for one
setting). The cold candidate is kept only when its advantage is larger than
twice the standard error of the paired per-row difference; otherwise the
posterior is (a tie goes to the exact Bayesian model).
"""
import math
from contextvars import ContextVar

import numpy as np
from sklearn.base import clone

from .._parameters import parameters_set
from ._network_validation import held_out_rows

#: held-out share used by ``temperature="auto"`` when ``validation_fraction``
#: is None (the share the three small data sets of doc/mlp.rst were measured at)
AUTO_VALIDATION_FRACTION = 0.2

#: the cold candidate (doc/mlp.rst, "Chains started at modes"): measured on
#: digits, breast cancer and 5,000 rows, and on MNIST
COLD_TEMPERATURE = 0.02
#: its prior scale against the estimator's: the tempered target tempers the
#: prior too (weights' scale ``s * sqrt(T)``), so a colder posterior needs a
#: wider prior to keep its modes from shrinking (8 against the default 4)
COLD_PRIOR_FACTOR = 2.0
#: where the chains of both candidates start when ``init="auto"``: each at
#: its own mode (``init="mode"`` keeps the estimator's own ``map_epochs``
#: and ``map_learning_rate``); measured (doc/mlp.rst), the posterior started
#: there predicts as well as from its Glorot start, or better (5,000 rows:
#: 0.121 against 0.131), at fewer steps
MODE_START = {"init": "mode", "map_epochs": 50, "map_learning_rate": 1e-2}
#: their warm-up when ``n_warmup="auto"``: from a mode the chains only
#: settle within its basin
MODE_WARMUP = 200

#: held-out rows below which ``temperature="auto"`` does not choose (the
#: posterior is fitted).  On all of digits the paired per-row difference
#: between the candidates has sd 0.22 nats and mean -0.057, so 2 se fall
#: below the mean from (2 * 0.22 / 0.057)^2 = 60 rows; fewer rows only lose
#: power there (the posterior, kept on a tie, is then fitted), and on small
#: data the differences are larger: at 20 (100 rows) against 60, on 100-280
#: training rows of digits, a 5,000-row problem, breast cancer, wine and
#: iris (seeds 0-2, the other rows as test rows), the mean test log-loss
#: fell in all 7 cases (digits 150 rows 0.483 -> 0.321, 280 rows 0.306 ->
#: 0.233, wine 0.059 -> 0.044, the 5,000-row problem 0.185 -> 0.178),
#: the cold model chosen in 11 of 21 fits
MIN_SELECTION_ROWS = 20

#: held-out rows from which a fit too small to choose is still checked on
#: them (the posterior run on the other rows, its model average's held-out
#: error, then its chains continued on every row, as validation_fraction
#: does): its warning then reads the prediction, not the weight norms, whose
#: chains sit in different basins on nearly every network (wine and iris
#: warned on every seed; checked, 0 of 4 seeds each, and 2 and 3 of 4 at a
#: deliberately short run).  20 (100 rows, as a 3-fold cross-validation of
#: iris trains on): on 100- and 120-row subsets of iris, wine and breast
#: cancer (seeds 0-3) the weight norms warned on all 24 default fits, the
#: 20-24 held-out rows on 11 and on 23 of 24 short runs (``n_samples=20,
#: thin=2, n_warmup=100``), and their advice is one a user can follow
#: (wine, 100 rows: ``thin`` 90, then 180, silent in 11 s; the weight norms
#: asked for ``thin=740``).  Below it (12 rows of 60) the check is not tried.
#: It equals MIN_SELECTION_ROWS: from 20 held-out rows the fit chooses, then
#: checks the chosen run there; a check without a choice needs it lower
MIN_CHECK_ROWS = 20

#: the cold candidate is kept only when it beats the posterior by more than
#: this many standard errors of the paired held-out difference
SELECTION_Z = 2.0


def candidate_settings(estimator):
    """``[posterior, cold]``: the parameters each candidate is fitted with.

    The posterior is ``temperature=1``, the cold candidate
    ``temperature=COLD_TEMPERATURE`` under ``prior_scale`` times
    ``COLD_PRIOR_FACTOR``; both keep every other setting, except that where
    the estimator leaves them to the package (``init="auto"``,
    ``n_warmup="auto"``) their chains start at modes (``MODE_START``) with
    ``MODE_WARMUP`` warm-up steps.
    """
    start = {}
    if estimator.init == "auto":
        start.update(MODE_START)
    if isinstance(estimator.n_warmup, str) and estimator.n_warmup == "auto":
        start["n_warmup"] = MODE_WARMUP
    return [dict(start, temperature=1.0),
            dict(start, temperature=COLD_TEMPERATURE,
                 prior_scale=_scaled(estimator.prior_scale, COLD_PRIOR_FACTOR))]


def _scaled(prior_scale, factor):
    scale = np.asarray(prior_scale, dtype=np.float64) * factor
    return float(scale) if scale.ndim == 0 else scale.tolist()


def row_log_loss(estimator, X, y):
    """Each row's ``-log p(y_i | x_i)`` under the model average."""
    proba = estimator.predict_proba(X)
    index = np.searchsorted(estimator.classes_, y)
    return -np.log(np.clip(proba[np.arange(len(y)), index], 1e-300, None))


def choose(posterior_losses, cold_losses, weights=None, z=SELECTION_Z):
    """``(index, difference, se)``: 1 (the cold candidate) when its mean
    held-out log-loss is below the posterior's by more than ``z`` standard
    errors of the paired difference, else 0; ``difference`` is cold minus
    posterior, nats a row. With frequency ``weights`` (the fit's row
    weights) the mean is weighted and its se that of a ratio estimator over
    the held-out rows (a repeated row is not more evidence than the row)."""
    d = np.asarray(cold_losses, dtype=np.float64) - np.asarray(posterior_losses, np.float64)
    w = np.ones_like(d) if weights is None else np.asarray(weights, dtype=np.float64)
    diff = float(np.dot(w, d) / w.sum())
    if np.count_nonzero(w) < 2:
        return 0, diff, math.inf
    n = np.count_nonzero(w)
    # sum w^2 (d - mean)^2 / (sum w)^2, with the n / (n - 1) of the sample variance
    se = float(math.sqrt(n / (n - 1) * np.dot(w * w, (d - diff) ** 2)) / w.sum())
    return (1 if diff < -z * se else 0), diff, se


#: the estimator's private attributes that a fit writes (beside the public
#: ones, which end in "_"); others, such as scikit-learn's callback context,
#: are not the fit's and are left alone
_FIT_PRIVATE = ("_chain_states", "_diagnostic_rows", "_validation_mask", "_auto_settings")


#: what ``fit``'s own validation of the data wrote (the candidates see the
#: validated arrays, without the column names of a DataFrame)
_VALIDATED = ("n_features_in_", "feature_names_in_")


def _fitted(estimator):
    """The attributes a fit wrote, beside those of the data's validation."""
    return {k: v for k, v in vars(estimator).items()
            if k in _FIT_PRIVATE or (k.endswith("_") and not k.startswith("_")
                                     and k not in _VALIDATED)}


def _take_fit(estimator, candidate):
    """``estimator`` holds ``candidate``'s fit, and nothing of its own
    previous one."""
    for name in _fitted(estimator):
        delattr(estimator, name)
    vars(estimator).update(_fitted(candidate))


#: True while a candidate of ``temperature="auto"`` is fitted: its ``fit``
#: skips its own convergence check and warning (the estimator warns once, on
#: the held-out check of the candidate it keeps; the check costs a tenth of
#: a digits fit).  A context variable, so another thread's fits are not quiet.
_FITTING_CANDIDATE = ContextVar("skbayes_sg_fitting_a_temperature_candidate", default=False)


def fitting_a_candidate():
    """Whether the running ``fit`` is a candidate's of ``temperature="auto"``."""
    return _FITTING_CANDIDATE.get()


def _quiet_fit(candidate, X, y, sample_weight):
    """Fit a candidate without its own convergence check and warning."""
    token = _FITTING_CANDIDATE.set(True)
    try:
        return candidate.fit(X, y, sample_weight=sample_weight)
    finally:
        _FITTING_CANDIDATE.reset(token)


def _describe(settings):
    return f"temperature={settings['temperature']:g}" + (
        f", prior_scale={settings['prior_scale']}" if "prior_scale" in settings else "")


class NetworkTemperatureMixin:
    """``temperature="auto"`` for :class:`~._mlp.SGMCMCMLPClassifier`: the
    candidates fitted as clones, the choice, and the chosen model's
    continuation on every row, on the estimator itself."""

    def _fit_auto(self, X, y, sample_weight, continuing):
        """``temperature="auto"`` (``fit``, which has checked the data): fit
        the candidates on the rows not held out, keep the one whose model
        average predicts them better, continue its chains on every row, and
        warn on its held-out check. The chosen settings and the comparison
        are written on the estimator (``temperature_``, ``prior_scale_``,
        ``temperature_selection_``, ``validation_error_``).

        Too few rows to tell the candidates apart (fewer than
        ``MIN_SELECTION_ROWS`` held out): the posterior, fitted as
        ``temperature=1`` is (``temperature_selection_`` None), with the
        held-out check of ``validation_fraction`` (the default share) from
        ``MIN_CHECK_ROWS`` held-out rows. With ``continuing`` (``warm_start``
        after a fit): the previous choice continues, checked as its fit was.
        """
        if continuing:
            # the previous fit's model (a fit at a number continues at it)
            settings = getattr(self, "_auto_settings", None) or {
                "temperature": self.temperature_, "prior_scale": self.prior_scale_}
            self._fit_as(settings, X, y, sample_weight, continuing=True)
            return self
        fraction = (AUTO_VALIDATION_FRACTION if self.validation_fraction is None
                    else self.validation_fraction)
        held = held_out_rows(self, X, y, fraction,
                             required=self.validation_fraction is not None)
        if held is None or held.sum() < MIN_SELECTION_ROWS:
            checked = held is not None and held.sum() >= MIN_CHECK_ROWS
            check = fraction if checked else self.validation_fraction
            self._fit_as({"temperature": 1.0, "validation_fraction": check},
                         X, y, sample_weight, continuing=False, temperature_selection_=None)
            return self
        self._select_temperature(X, y, sample_weight, held, fraction)
        self._warn_if_unreliable()
        return self

    def _fit_as(self, settings, X, y, sample_weight, continuing, **selection):
        """One candidate fitted on every row as a fit with ``settings`` is (its
        own check and warning); ``selection`` replaces ``temperature_selection_``."""
        kept = {"_auto_settings": getattr(self, "_auto_settings", None),
                "temperature_selection_": getattr(self, "temperature_selection_", None),
                **selection}
        candidate = clone(self).set_params(**settings)
        if continuing:
            vars(candidate).update(_fitted(self))
        candidate.fit(X, y, sample_weight=sample_weight)
        _take_fit(self, candidate)
        self.temperature_selection_ = kept["temperature_selection_"]
        self._auto_settings = kept["_auto_settings"] if continuing else dict(settings)

    def _say(self, text):
        """With ``verbose``: a line before each run of the choice (each run
        writes its own progress lines)."""
        if self.verbose:
            print(f"temperature='auto': {text}", flush=True)

    def _select_temperature(self, X, y, sample_weight, held, fraction):
        """Both candidates on the rows not ``held``, the choice, the chosen
        one's continuation on every row."""
        kept = ~held
        w_kept = (sample_weight if sample_weight is None or np.ndim(sample_weight) == 0
                  else np.asarray(sample_weight)[kept])
        candidates, fitted_as = [], []
        for name, settings in zip(("the posterior", "the cold model"),
                                  candidate_settings(self)):
            self._say(f"{name} ({_describe(settings)}) on the {int(kept.sum())} rows not "
                      "held out")
            fitted_as.append(dict(settings, validation_fraction=None, warm_start=False))
            candidate = clone(self).set_params(**fitted_as[-1])
            candidates.append(_quiet_fit(candidate, X[kept], y[kept], w_kept))
        losses = [row_log_loss(c, X[held], y[held]) for c in candidates]
        row_weights = self._row_weights(X, y, sample_weight)     # times class_weight
        weights = None if row_weights is None else row_weights[held]
        index, diff, se = choose(*losses, weights=weights)
        means = [float(np.average(v, weights=weights)) for v in losses]
        chosen = candidates[index]
        self._say(f"held-out log-loss {means[0]:.4f} (posterior), "
                  f"{means[1]:.4f} (cold), difference {diff:+.4f} +- {se:.4f}: "
                  f"{('the posterior', 'the cold model')[index]} continues on every row")
        # the chosen run checked on the held-out rows, then continued on every
        # row (validation_fraction's mechanism, which writes validation_error_),
        # here under the chosen candidate's parameters
        _take_fit(self, chosen)
        with parameters_set(self, **fitted_as[index]):
            self._check_then_continue(X, y, held, fraction, row_weights)
        # the fit's work includes the candidate it did not keep
        self.n_grad_evals_ += sum(c.n_grad_evals_ for c in candidates if c is not chosen)
        self.temperature_selection_ = {
            "temperature": [c.temperature for c in candidates],
            "prior_scale": [c.prior_scale for c in candidates],
            "held_out_log_loss": means,
            "difference": diff, "se": se, "n_rows": int(held.sum()), "chosen": index}
        self._auto_settings = dict(
            {k: chosen.get_params()[k] for k in ("temperature", "prior_scale", "init",
                                                 "map_epochs", "map_learning_rate",
                                                 "n_warmup")},
            validation_fraction=fraction)
