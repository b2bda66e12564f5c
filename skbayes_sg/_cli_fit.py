"""``python -m skbayes_sg fit``: fit an estimator on a data file, save the draws.

The data is a CSV file with a header row (``--target COL`` names the target
column; every other column is a numeric feature) or a file in the libsvm /
svmlight format (``--libsvm``, read as a sparse CSR matrix); ``.gz`` and
``.bz2`` files are read as they are.  The rows are split once into training
and held-out rows (``--test-size``, stratified for classification), the
features optionally standardised on the training rows, the model fitted, and
the command prints

- the posterior summary (mean, sd, quantiles, bulk/tail ESS, R-hat per
  coefficient; :func:`skbayes_sg.diagnostics._convergence.summary`) and the
  convergence check; for the network (``--model mlp``) a short summary
  instead (:func:`_report_network`: the range of the parameters' ESS and
  R-hat, and the estimator's permutation-invariant quantities -- the draws'
  log-likelihood and the layers' weight norms -- which decide convergence,
  with the estimator's own check and advice);
- held-out metrics: accuracy and log-loss of the posterior predictive
  (logistic, mlp), or RMSE of the posterior mean and mean log predictive
  density (ridge, poisson, negative-binomial);

and saves the draws with their metadata (``--out``): a path ending in ``.nc``
gets ``est.to_inference_data(X_train, y_train)`` as netCDF (ArviZ, with the
log likelihood of the training rows; needs ArviZ and h5netcdf or netCDF4),
any other path an ``.npz`` file, readable with ``numpy.load(path)`` (no
pickling):

``coef_samples``, ``intercept_samples``
    the draws, as ``coef_samples_`` / ``intercept_samples_``;
``feature_names``, ``classes`` (logistic)
    string / label arrays;
``summary_values``, ``summary_index``, ``summary_columns``
    the printed summary;
``x_mean``, ``x_scale``
    the standardisation of the features (zeros / ones without
    ``--standardize``), so that new rows ``(x - x_mean) / x_scale`` match
    the draws;
``metadata``
    a JSON string: the command's settings, ``step_size_``,
    ``n_grad_evals_``, ``sampling_time_``, the held-out metrics, the target
    scaling of ridge (``y_mean``, ``y_scale``), the model's fitted settings
    (ridge: ``noise_var``; negative binomial: ``shape``) and the skbayes_sg
    version.

What differs between the linear models (a numeric target, whether it may
be standardised, the fitted settings saved) is read from the model registry
(:mod:`._sampling._glm`), through each estimator's ``likelihood``.

``--model mlp`` writes ``.npz`` only, with ``coef_samples`` (flat parameter
vectors), ``layer_sizes``, ``ess_bulk``, ``r_hat`` (per parameter) and
``log_likelihood_trace`` in place of the intercepts and the summary table
(:func:`_network_arrays`).

Besides the hand-written flags of :func:`add_arguments` (:data:`HAND_WRITTEN`),
every other estimator parameter gets a flag generated from the estimators'
``_parameter_constraints`` (:func:`generated_flags`; :data:`SKIPPED` lists the
parameters without one, and why).  Without ``--standardize``, features that
look unscaled get a warning on stderr.

The entry point for the command line is :func:`run`; :func:`fit_file` does the
same for Python callers and tests and returns the fitted estimator and the
printed numbers.
"""
import argparse
import bz2
import csv
import gzip
import inspect
import json
import numbers
import os
import re
import sys
import tempfile
import textwrap
import time
import warnings
from types import SimpleNamespace

import numpy as np
import scipy.sparse as sp
from scipy.special import logsumexp
from sklearn.base import is_classifier
from sklearn.metrics import accuracy_score, log_loss
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from sklearn.utils._param_validation import InvalidParameterError, Interval, StrOptions
from sklearn.utils.sparsefuncs import mean_variance_axis, min_max_axis

from . import __version__
from ._sampling._glm import model_spec
from ._sampling._registry import SAMPLERS, SUBSAMPLINGS
from ._sampling._specs import NETWORK, dynamics_for, estimators_for
from .diagnostics._advice import check_convergence
from .exceptions import UncentredTargetWarning
from .diagnostics._convergence import (
    MIN_ESS_PER_CHAIN, RHAT_THRESHOLD, MCMCConvergenceWarning, SummaryTable,
    bulk_ess_and_rhat, summary)
from .linear_model import (SGMCMCLogisticRegression, SGMCMCNegativeBinomialRegressor,
                           SGMCMCPoissonRegressor, SGMCMCRidge)
from .neural_network import SGMCMCMLPClassifier
from .neural_network._mlp import DIAGNOSTIC_ROWS

__all__ = ["add_arguments", "run", "fit_file", "load_csv", "load_libsvm", "DataError",
           "MissingDependencyError", "generated_flags", "estimator_params"]

MODELS = {"logistic": SGMCMCLogisticRegression, "mlp": SGMCMCMLPClassifier,
          "negative-binomial": SGMCMCNegativeBinomialRegressor,
          "poisson": SGMCMCPoissonRegressor, "ridge": SGMCMCRidge}
CLASSIFIERS = tuple(name for name, cls in MODELS.items() if is_classifier(cls()))
#: the models of the model registry (the network is not a GLM)
LINEAR = tuple(name for name, cls in MODELS.items() if hasattr(cls, "likelihood"))
MAX_SUMMARY_ROWS = 40   # printed rows of the summary (all of them go to --out)
WRAP = 88               # width of the wrapped convergence warnings
# --model mlp on libsvm data: densified up to this many numbers (2 GiB of float64)
MLP_DENSE_LIMIT = 2 ** 28
# hand-written flags that SGMCMCMLPClassifier has no parameter for, and their
# values when not given
NOT_MLP = {"metric": ("--metric", "auto"), "n_jobs": ("--n-jobs", None)}
# hand-written flags whose default "auto" means the network's own default
MLP_AUTO_IS_DEFAULT = ("sampler", "subsampling", "n_samples", "n_warmup", "thin", "init")


class DataError(ValueError):
    """The data file cannot be used as given (missing column, bad value, ...)."""


class MissingDependencyError(ImportError):
    """An optional dependency that the chosen output needs is not installed."""


# ----------------------------------------------------------------- command line
# Estimator parameters with a hand-written flag in add_arguments (their defaults
# and help predate the generated flags and stay as they were), and that flag.
HAND_WRITTEN = {
    "sampler": "--sampler", "subsampling": "--subsampling", "metric": "--metric",
    "n_samples": "--n-samples", "n_warmup": "--n-warmup", "thin": "--thin",
    "n_chains": "--n-chains", "step_size": "--step-size", "batch_size": "--batch-size",
    "alpha": "--alpha",
    # the string starts only: an array of starting points has no command-line spelling
    "init": "--init",
    # --seed: it also seeds the train/test split, so the whole run repeats
    "random_state": "--seed",
    # --n-jobs: joblib's count as it is (None, one job, when absent)
    "n_jobs": "--n-jobs",
    # --verbose: a switch (verbose=1), the estimator's levels above 1 are not needed here
    "verbose": "--verbose",
}
# Estimator parameters that no flag sets, and why.
SKIPPED = {
    # every run builds a new estimator and fits it once: there are no previous
    # chains to continue
    "warm_start": "every run fits a new estimator once; there are no chains to continue",
}
GENERATED_DEST = "param_"   # argparse dest prefix of the generated flags


def _auto_or(kind):
    def parse(text):
        return "auto" if text == "auto" else kind(text)
    parse.__name__ = f"{kind.__name__} or 'auto'"
    return parse


def add_arguments(parser):
    """Add the options of the ``fit`` subcommand to an argparse parser."""
    parser.add_argument("data", metavar="DATA",
                        help="CSV file with a header row, or libsvm file with --libsvm "
                             "(.gz and .bz2 are decompressed on the fly)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--target", metavar="COL",
                        help="CSV: name of the target column (all other columns are "
                             "numeric features)")
    source.add_argument("--libsvm", action="store_true",
                        help="DATA is in the libsvm/svmlight format (sparse)")
    parser.add_argument("--zero-based", choices=("auto", "yes", "no"), default="auto",
                        dest="zero_based",
                        help="--libsvm: whether the file's feature indices start at 0 "
                             "(default: auto, scikit-learn's guess: one-based unless an "
                             "index 0 appears, so a zero-based file whose column 0 is "
                             "empty is read one column short)")
    parser.add_argument("--n-features", type=int, default=None, dest="n_features",
                        metavar="D",
                        help="--libsvm: the number of features (default: the largest "
                             "index in the file)")
    parser.add_argument("--model", choices=sorted(MODELS), required=True,
                        help="logistic: SGMCMCLogisticRegression (binary or multinomial); "
                             "ridge: SGMCMCRidge; poisson: SGMCMCPoissonRegressor (counts, "
                             "log link); negative-binomial: "
                             "SGMCMCNegativeBinomialRegressor (overdispersed counts, log "
                             "link, its --shape); mlp: SGMCMCMLPClassifier (Bayesian neural "
                             "network, needs torch)")
    parser.add_argument("--sampler", choices=["auto", *SAMPLERS], default="auto",
                        metavar="NAME",
                        help=f"dynamics: auto or one of {', '.join(SAMPLERS)} (default: "
                             f"auto; --model mlp: {', '.join(dynamics_for(NETWORK))}, auto "
                             "is sgld)")
    parser.add_argument("--subsampling", choices=["auto", *SUBSAMPLINGS], default="auto",
                        metavar="NAME",
                        help=f"gradient estimator: auto or one of {', '.join(SUBSAMPLINGS)} "
                             f"(default: auto; --model mlp: {', '.join(estimators_for(NETWORK))}"
                             ", auto is uniform)")
    parser.add_argument("--metric", choices=("auto", "dense", "diagonal", "identity"),
                        default="auto",
                        help="coordinates of the sampler: the Laplace metric (dense or "
                             "diagonal) or the identity (default: auto; not --model mlp)")
    parser.add_argument("--test-size", type=float, default=0.2, dest="test_size",
                        help="held-out fraction of the rows, 0 for none (default: 0.2)")
    parser.add_argument("--standardize", action="store_true",
                        help="standardise the features on the training rows (sparse data: "
                             "scaled, not centred); ridge also standardises the target and "
                             "reports metrics in its original units (poisson counts are "
                             "left as they are)")
    _add_run_arguments(parser)


def _add_run_arguments(parser):
    """The hand-written options of the run's length, start, step and output,
    then the generated ones (every other estimator parameter)."""
    parser.add_argument("--n-samples", type=_auto_or(int), default="auto", dest="n_samples",
                        help="draws kept per chain, or 'auto' (default): until the effective "
                             "sample size reaches its target (--model mlp: its default, 100)")
    parser.add_argument("--n-warmup", type=_auto_or(int), default="auto", dest="n_warmup",
                        help="discarded steps per chain, or 'auto' (default; --model mlp: "
                             "1000)")
    parser.add_argument("--thin", type=_auto_or(int), default="auto",
                        help="keep every THIN-th step, or 'auto' (default; --model mlp: 10)")
    parser.add_argument("--n-chains", type=int, default=4, dest="n_chains",
                        help="chains (default: 4)")
    parser.add_argument("--init", choices=("auto", "laplace", "mode", "prior", "zeros"),
                        default="auto",
                        help="start of the chains: overdispersed Laplace draws in the Laplace "
                             "metric, the mode in the identity metric (default: auto; not "
                             "--model mlp)")
    parser.add_argument("--step-size", type=_auto_or(float), default="auto", dest="step_size",
                        help="step size, or 'auto' (default)")
    parser.add_argument("--batch-size", type=_auto_or(int), default="auto", dest="batch_size",
                        help="minibatch size, or 'auto' (default)")
    parser.add_argument("--alpha", type=_auto_or(float), default=None,
                        help="prior precision of every coefficient, or 'auto' (set by the "
                             "evidence; not --model mlp) (default: 1.0, auto for ridge)")
    parser.add_argument("--seed", type=int, default=0,
                        help="random_state of the split and of the sampler (default: 0)")
    parser.add_argument("--n-jobs", type=int, default=None, dest="n_jobs",
                        help="chains run in parallel (joblib); the draws do not depend on "
                             "it (default: one; not --model mlp, whose chains run in turn)")
    parser.add_argument("--verbose", action="store_true",
                        help="print the progress of every chain")
    parser.add_argument("--out", default=None, metavar="PATH",
                        help="where to save the draws and metadata: PATH.nc writes an "
                             "ArviZ InferenceData (netCDF, needs the arviz extra), "
                             "otherwise .npz (appended when missing); without it the "
                             "report is printed and nothing is saved")
    group = parser.add_argument_group(
        "other estimator parameters",
        "Generated from the estimators' parameter constraints: --NAME sets the "
        "parameter NAME (dashes for underscores) of the chosen model; booleans are "
        "spelled true or false, None is spelled none. Only the flags given are "
        "passed; the estimator's defaults apply to the others.")
    for flag in generated_flags().values():
        group.add_argument(flag["flag"], dest=GENERATED_DEST + flag["name"],
                           type=flag["parse"], metavar=flag["metavar"],
                           default=argparse.SUPPRESS, help=flag["help"])


def generated_flags():
    """The generated flags: estimator parameter name -> description.

    Every ``get_params()`` key of the models in :data:`MODELS` that has no
    hand-written flag (:data:`HAND_WRITTEN`) and is not skipped
    (:data:`SKIPPED`) gets ``--name-with-dashes``, whose values are those its
    ``_parameter_constraints`` allow.  Each description is a dict with
    ``name``, ``flag``, ``models`` (the ``--model`` names that have the
    parameter), ``parse`` (text -> value, for argparse), ``metavar``,
    ``help`` and ``defaults`` (model -> the estimator's default).
    """
    flags = {}
    for model, cls in sorted(MODELS.items()):
        constraints = getattr(cls, "_parameter_constraints", {})
        docs = _parameter_docs(cls)
        for name, default in cls().get_params(deep=False).items():
            if name in HAND_WRITTEN or name in SKIPPED:
                continue
            flag = flags.setdefault(name, dict(
                name=name, flag="--" + name.replace("_", "-"), models=[], defaults={},
                constraints=[], doc=docs.get(name)))
            flag["models"].append(model)
            flag["defaults"][model] = default
            for c in constraints.get(name, []):
                if _value_word(c) is not None and not any(
                        _same_constraint(c, d) or _within(c, d) for d in flag["constraints"]):
                    flag["constraints"].append(c)
    for name, flag in list(flags.items()):
        if not flag["constraints"]:
            # no constraint that a command line can spell (a new kind of parameter):
            # no flag; tests/test_cli.py names the parameter
            del flags[name]
            continue
        flag["parse"] = _parser_for(flag["flag"], flag["constraints"])
        flag["metavar"] = "|".join(w for c in flag["constraints"] for w in _value_word(c))
        flag["help"] = _flag_help(flag)
    return dict(sorted(flags.items()))


def _value_word(constraint):
    """How ``constraint`` reads on the command line (a list of words), or None."""
    if isinstance(constraint, StrOptions):
        return sorted(constraint.options, key=lambda o: (o != "auto", o))
    if isinstance(constraint, Interval):
        return ["INT" if _is_integral(constraint) else "FLOAT"]
    if isinstance(constraint, str) and constraint == "boolean":
        return ["true", "false"]
    if isinstance(constraint, str) and constraint == "array-like":
        return ["N,N,..."]   # a comma-separated list (hidden_layer_sizes)
    if constraint is str:
        return ["TEXT"]      # any string (device)
    if constraint is None:
        return ["none"]
    return None   # "random_state", dict, other types, ...: not spelled here


def _same_constraint(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, StrOptions):
        return a.options == b.options
    if isinstance(a, Interval):
        return (a.type, a.left, a.right, a.closed) == (b.type, b.left, b.right, b.closed)
    return a == b


def _within(a, b):
    """Whether the values of interval ``a`` are all values of interval ``b``
    of the same kind (the flag then reads the wider one; the estimator
    refuses what its own constraint does not allow)."""
    if not (isinstance(a, Interval) and isinstance(b, Interval)
            and _is_integral(a) == _is_integral(b)):
        return False
    def closed(c, side):
        return c.closed in (side, "both")
    if b.left is not None and (a.left is None or a.left < b.left
                               or (a.left == b.left and closed(a, "left")
                                   and not closed(b, "left"))):
        return False
    if b.right is not None and (a.right is None or a.right > b.right
                                or (a.right == b.right and closed(a, "right")
                                    and not closed(b, "right"))):
        return False
    return True


def _is_integral(interval):
    return isinstance(interval.type, type) and issubclass(interval.type, numbers.Integral)


def _describe(constraint):
    if isinstance(constraint, StrOptions):
        words = _value_word(constraint)
        return (" or ".join(words) if len(words) <= 2
                else "one of " + ", ".join(words[:-1]) + " or " + words[-1])
    if isinstance(constraint, Interval):
        kind = "an int" if _is_integral(constraint) else "a float"
        left, right = constraint.left, constraint.right
        low = "[" if constraint.closed in ("left", "both") else "("
        high = "]" if constraint.closed in ("right", "both") else ")"
        if left is not None and right is None:
            return f"{kind} {'>=' if low == '[' else '>'} {left:g}"
        if right is not None and left is None:
            return f"{kind} {'<=' if high == ']' else '<'} {right:g}"
        if left is None and right is None:
            return kind
        return f"{kind} in {low}{left:g}, {right:g}{high}"
    if constraint == "boolean":
        return "true or false"
    if constraint == "array-like":
        return "a comma-separated list of numbers (() for an empty one)"
    if constraint is str:
        return "a string"
    return "none"


def _parse_list(word):
    """``"100,50"``, ``"(100,)"``, ``"[3]"`` or ``"()"`` -> a tuple of ints
    (floats when one is not an int); None when ``word`` is not such a list."""
    inner = word
    if len(inner) >= 2 and inner[0] + inner[-1] in ("()", "[]"):
        inner = inner[1:-1]
    parts = [p.strip() for p in inner.split(",")]
    if parts and parts[-1] == "":
        parts = parts[:-1]                      # "(100,)"
    values = []
    for part in parts:
        try:
            values.append(int(part))
        except ValueError:
            try:
                values.append(float(part))
            except ValueError:
                return None
    return tuple(values)


def _parser_for(flag, constraints):
    """The argparse ``type`` of a generated flag: the first constraint that
    reads ``text`` and is satisfied by the value wins."""
    def parse(text):
        word = text.strip()
        for c in constraints:
            if isinstance(c, StrOptions):
                if word in c.options:
                    return word
            elif isinstance(c, Interval):
                try:
                    value = int(word) if _is_integral(c) else float(word)
                except ValueError:
                    continue
                if c.is_satisfied_by(value):
                    return value
            elif c == "boolean":
                if word.lower() in ("true", "false"):
                    return word.lower() == "true"
            elif c == "array-like":
                values = _parse_list(word)
                if values is not None:
                    return values
            elif c is str:
                return word
            elif c is None and word.lower() == "none":
                return None
        raise argparse.ArgumentTypeError(
            f"invalid value {text!r}: expected {', or '.join(_describe(c) for c in constraints)}")
    parse.__name__ = flag
    return parse


def _parameter_docs(cls):
    """The first sentence of each parameter's description in ``cls``'s
    numpydoc docstring, when it is short; {} when there is none."""
    doc = inspect.getdoc(cls) or ""
    section = re.search(r"^Parameters\n-+\n(.*?)(?=^\w[^\n]*\n-+\n|\Z)", doc, re.S | re.M)
    if section is None:
        return {}
    docs = {}
    for match in re.finditer(r"^(\w+) :[^\n]*\n((?:[ \t]+[^\n]*\n|\n)*)",
                             section.group(1) + "\n", re.M):
        text = " ".join(match.group(2).split()).replace("``", "")
        text = re.sub(r":\w+:`~?([^`]+)`", r"\1", text)   # :class:`x` -> x
        first = re.split(r"(?<=\.)\s+(?=[A-Z(`\"])", text, maxsplit=1)[0]
        if first.endswith(".") and len(first) <= 100:
            docs[match.group(1)] = first
    return docs


def _text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value) or "()"
    return str(value)


def _flag_help(flag):
    defaults = flag["defaults"]
    if len({_text(v) for v in defaults.values()}) == 1:
        default = _text(next(iter(defaults.values())))
    else:
        default = ", ".join(f"{_text(v)} for {m}" for m, v in defaults.items())
    parts = [flag["doc"]] if flag["doc"] else []
    parts.append(f"The parameter {flag['name']}"
                 + (f" ({' and '.join(flag['models'])} only)"
                    if len(flag["models"]) < len(MODELS) else "")
                 + f": {', or '.join(_describe(c) for c in flag['constraints'])} "
                 f"(default: {default})")
    return " ".join(parts).replace("%", "%%")


def estimator_params(args):
    """The estimator's keyword arguments from parsed command-line arguments.

    The hand-written flags are passed as always (with their defaults); the
    generated ones only when given.  A generated flag of a parameter the
    chosen model does not have raises :class:`DataError`.
    """
    if args.model == "mlp":
        params = _mlp_hand_written(args)
    else:
        params = dict(
            sampler=args.sampler, subsampling=args.subsampling, metric=args.metric,
            n_samples=args.n_samples, n_warmup=args.n_warmup, thin=args.thin,
            n_chains=args.n_chains, init=args.init, step_size=args.step_size,
            batch_size=args.batch_size, random_state=args.seed,
            n_jobs=args.n_jobs, verbose=int(args.verbose),
            **({} if args.alpha is None else {"alpha": args.alpha}))
    flags = generated_flags()
    for dest, value in sorted(vars(args).items()):
        if not dest.startswith(GENERATED_DEST):
            continue
        flag = flags[dest[len(GENERATED_DEST):]]
        if args.model not in flag["models"]:
            raise DataError(
                f"{flag['flag']} does not apply to --model {args.model}: it is a parameter "
                f"of {' and '.join('--model ' + m for m in flag['models'])} "
                f"({', '.join(MODELS[m].__name__ for m in flag['models'])}) only.")
        params[flag["name"]] = value
    return params


def _mlp_hand_written(args):
    """The hand-written flags as ``SGMCMCMLPClassifier`` parameters.

    ``--n-chains``, ``--step-size``, ``--batch-size``, ``--seed`` and
    ``--verbose`` are passed as always; ``--sampler``, ``--subsampling``,
    ``--n-samples``, ``--n-warmup``, ``--thin`` and ``--init`` only when not
    ``auto`` (the network's own defaults apply), ``--alpha`` only when given.
    ``--metric`` and ``--n-jobs``, which the network does not have, and the
    starts of ``--init`` that only the linear models have, raise
    :class:`DataError` when given.
    """
    for name, (flag, unset) in NOT_MLP.items():
        if getattr(args, name) != unset:
            raise DataError(
                f"{flag} does not apply to --model mlp: it is a parameter of "
                f"{', '.join('--model ' + m for m in LINEAR)} "
                f"({', '.join(MODELS[m].__name__ for m in LINEAR)}) only.")
    starts = SGMCMCMLPClassifier._parameter_constraints["init"][0].options
    if args.init not in starts:
        raise DataError(
            f"--init {args.init} does not apply to --model mlp: the network starts at "
            f"{' or '.join(sorted(starts))}; {args.init!r} is a start of "
            f"{', '.join('--model ' + m for m in LINEAR)} only.")
    params = dict(n_chains=args.n_chains, step_size=args.step_size,
                  batch_size=args.batch_size, random_state=args.seed,
                  verbose=int(args.verbose))
    for name in MLP_AUTO_IS_DEFAULT:
        value = getattr(args, name)
        if value != "auto":
            params[name] = value
    if args.alpha is not None:
        # --alpha is the global N(0, 1/alpha) prior: the network's
        # prior="isotropic" (its default is the per-layer fan-in prior)
        params["alpha"] = args.alpha
        params["prior"] = "isotropic"
    return params


def run(args):
    """Run ``fit`` from parsed command-line arguments; return the exit status."""
    try:
        fit_file(
            args.data, target=args.target, libsvm=args.libsvm, model=args.model,
            zero_based={"yes": True, "no": False}.get(args.zero_based, "auto"),
            n_features=args.n_features,
            out=args.out, test_size=args.test_size, standardize=args.standardize,
            estimator_params=estimator_params(args), seed=args.seed, stdout=sys.stdout,
            stderr=sys.stderr)
    except (DataError, OSError, InvalidParameterError, MissingDependencyError) as exc:
        # the file or an option cannot be used: a usage error, as argparse's
        print(f"python -m skbayes_sg fit: error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:   # e.g. SamplingDivergedError, which names a smaller step
        print(f"python -m skbayes_sg fit: error: {exc}", file=sys.stderr)
        return 1
    return 0


# ------------------------------------------------------------------------ data
def _open_text(path):
    path = str(path)
    if path.endswith(".gz"):
        return gzip.open(path, "rt", newline="")
    if path.endswith(".bz2"):
        return bz2.open(path, "rt", newline="")
    return open(path, newline="")


def load_csv(path, target):
    """Read a CSV file with a header row.

    Parameters
    ----------
    path : str or path-like
        The file (``.gz`` / ``.bz2`` decompressed on the fly).
    target : str
        Name of the target column.

    Returns
    -------
    X : ndarray of shape (n_rows, n_features), float64
    y : ndarray of shape (n_rows,)
        Integers or floats when every value parses as one, else strings
        (class labels).
    feature_names : list of str
    """
    try:
        import pandas as pd
    except ImportError:
        pd = None
    if pd is not None:
        try:
            frame = pd.read_csv(path)
        except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as exc:
            raise DataError(f"{path} cannot be read as a CSV file with a header row "
                            f"({type(exc).__name__}: {exc}).") from None
        header = [str(c) for c in frame.columns]
        if target not in header:
            raise DataError(f"no column {target!r} in {path}; its columns are {header}.")
        features = [c for c in frame.columns if str(c) != target]
        bad = [str(c) for c in features if not pd.api.types.is_numeric_dtype(frame[c])]
        if bad:
            raise DataError(f"non-numeric feature column(s) {bad} in {path}; encode them "
                            "as numbers or drop them.")
        X = frame[features].to_numpy(dtype=np.float64)
        y_col = frame[frame.columns[header.index(target)]]
        if pd.api.types.is_integer_dtype(y_col):
            y = y_col.to_numpy(dtype=np.int64)
        elif pd.api.types.is_numeric_dtype(y_col):
            y = y_col.to_numpy(dtype=np.float64)
        else:
            y = y_col.astype(str).to_numpy()
        names = [str(c) for c in features]
    else:
        X, y, names = _load_csv_stdlib(path, target)
    _check_finite(X, y, names, target, path)
    return X, y, names


def _load_csv_stdlib(path, target):
    try:
        return _parse_csv_stdlib(path, target)
    except (csv.Error, UnicodeDecodeError) as exc:
        raise DataError(f"{path} cannot be read as a CSV file with a header row "
                        f"({type(exc).__name__}: {exc}).") from None


def _parse_csv_stdlib(path, target):
    with _open_text(path) as f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise DataError(f"{path} is empty.") from None
        header = [h.strip() for h in header]
        if target not in header:
            raise DataError(f"no column {target!r} in {path}; its columns are {header}.")
        t = header.index(target)
        rows = [r for r in reader if r]
    names = [h for j, h in enumerate(header) if j != t]
    X = np.empty((len(rows), len(names)))
    labels = []
    for i, row in enumerate(rows):
        if len(row) != len(header):
            raise DataError(f"row {i + 2} of {path} has {len(row)} fields; the header has "
                            f"{len(header)}.")
        labels.append(row[t].strip())
        values = [v for j, v in enumerate(row) if j != t]
        try:
            X[i] = [float(v) if v.strip() else np.nan for v in values]
        except ValueError:
            bad = [names[j] for j, v in enumerate(values) if not _is_number(v)]
            raise DataError(f"non-numeric value in feature column(s) {bad} (row {i + 2} of "
                            f"{path}); encode them as numbers or drop them.") from None
    try:
        y = np.array([int(v) for v in labels], dtype=np.int64)
    except ValueError:
        if all(_is_number(v) for v in labels):
            y = np.array([float(v) if v else np.nan for v in labels])
        else:
            y = np.array(labels)
    return X, y, names


def _is_number(text):
    try:
        float(text)
    except ValueError:
        return not text.strip()   # an empty field is a missing number
    return True


def _check_finite(X, y, names, target, path):
    bad = np.flatnonzero(~np.all(np.isfinite(X), axis=0))
    if len(bad):
        raise DataError(f"missing or non-finite values in feature column(s) "
                        f"{[names[j] for j in bad[:10]]} of {path}; impute or drop them.")
    if y.dtype.kind == "f" and not np.all(np.isfinite(y)):
        raise DataError(f"missing or non-finite values in the target column {target!r} "
                        f"of {path}.")


def load_libsvm(path, zero_based="auto", n_features=None):
    """Read a libsvm/svmlight file as CSR float64 ``X``, ``y`` and names ``x0, ...``.

    ``zero_based`` (True, False or "auto": one-based unless an index 0
    appears) and ``n_features`` (None: the largest index) are those of
    :func:`sklearn.datasets.load_svmlight_file`."""
    from sklearn.datasets import load_svmlight_file

    if n_features is not None and int(n_features) < 1:
        raise DataError(f"--n-features must be a positive number of features; got "
                        f"{n_features}.")
    try:
        X, y = load_svmlight_file(str(path), dtype=np.float64, zero_based=zero_based,
                                  n_features=n_features)
    except ValueError as exc:
        hint = ""
        if n_features is not None and "n_features" in str(exc):
            hint = " (--n-features is smaller than the file's largest feature index)"
        raise DataError(f"{path} is not a valid libsvm file{hint}: {exc}") from exc
    return sp.csr_matrix(X), y, [f"x{j}" for j in range(X.shape[1])]


# ------------------------------------------------------------------------- fit
def fit_file(data, *, target=None, libsvm=False, model="logistic", out=None, test_size=0.2,
             standardize=False, estimator_params=None, seed=0, stdout=None, stderr=None,
             zero_based="auto", n_features=None):
    """Load ``data``, fit, print the report and save the draws.

    Parameters
    ----------
    data : str or path-like
        CSV (with ``target``) or libsvm (``libsvm=True``) file.
    target : str or None, default=None
        CSV target column.
    libsvm : bool, default=False
        Read ``data`` as libsvm.
    model : {"logistic", "ridge", "poisson", "negative-binomial", "mlp"}, default="logistic"
    out : str, path-like or None, default=None
        Where to save the draws (None: not saved): a path ending in ``.nc``
        gets the ArviZ ``InferenceData`` of the fit as netCDF (needs ArviZ
        and h5netcdf or netCDF4), any other an ``.npz`` file.
    test_size : float, default=0.2
        Held-out fraction in [0, 1); 0 keeps every row for training.
    standardize : bool, default=False
        Standardise the features (and, for ridge, the target: a model whose
        registry entry has ``standardize_target``) on the training rows.
    estimator_params : dict or None, default=None
        Keyword arguments of the estimator.
    seed : int, default=0
        Seed of the train/test split.
    stdout : file-like or None, default=None
        Where the report goes (None: ``sys.stdout``).
    stderr : file-like or None, default=None
        Where the warning about unscaled features goes (None:
        ``sys.stderr``).
    zero_based : bool or "auto", default="auto"
        libsvm: whether the feature indices start at 0 ("auto": one-based
        unless an index 0 appears, as
        :func:`sklearn.datasets.load_svmlight_file`).
    n_features : int or None, default=None
        libsvm: the number of features (None: the largest index).

    Returns
    -------
    result : dict
        ``estimator`` (fitted), ``summary`` (the table), ``metrics`` (dict of
        held-out metrics, empty when ``test_size=0``), ``converged`` (bool)
        and ``out`` (the path written, or None).
    """
    say = _printer(stdout)
    network, spec, engine = _check_request(model, out, test_size)
    X, y, names = _load_rows(data, target, libsvm, model, spec, say,
                             libsvm_options=dict(zero_based=zero_based, n_features=n_features))
    rows = _split_and_scale(X, y, names, model, spec, test_size, seed, standardize, stderr)
    # a refusal of the estimator's parameters (the network's subsampling="saga",
    # ...) comes from fit as an InvalidParameterError: a usage error, status 2
    est = MODELS[model](**dict(estimator_params or {}))
    _say_estimator(est, rows, network, standardize, say)
    t0 = time.perf_counter()
    _fit_printing_warnings(est, rows, stderr, spec is not None and not standardize
                           and spec.standardize_target)
    seconds = time.perf_counter() - t0
    if network:
        table = None
        converged, diagnostics = _report_network(est, rows.X_tr, rows.y_tr, seconds,
                                                 standardize, say)
    else:
        table, converged = _report_linear(est, names, spec, standardize, seconds, say)
        diagnostics = None
    metrics = _held_out_metrics(est, rows, model, spec, standardize, say)
    if out is not None:
        meta = _metadata(est, rows, data, libsvm, target, model, spec, network, test_size,
                         seed, standardize, seconds, converged, metrics)
        out = _save(out, engine, est, rows, names, model, network, table, diagnostics, meta,
                    say)
    result = dict(estimator=est, summary=table, metrics=metrics, converged=converged, out=out)
    if network and engine is None:
        result["diagnostics"] = diagnostics
    return result


def _check_request(model, out, test_size):
    """What can be refused before the data are read: ``(network, registry
    entry, netCDF engine or None)``."""
    engine = None
    if model not in MODELS:
        raise DataError(f"model={model!r} is not one of {sorted(MODELS)}.")
    network = model == "mlp"
    spec = _registry_entry(model)
    if network:
        if out is not None and _is_netcdf(out):
            raise DataError(
                f"--out {out}: the .nc output is the ArviZ InferenceData of a linear "
                "model's coefficients; --model mlp saves its draws to .npz (give a path "
                "not ending in .nc).")
        _check_torch()
    if out is not None:
        _check_writable(out)      # before the fit, not after it
        if _is_netcdf(out):
            engine = _netcdf_engine()
    if not 0 <= test_size < 1:
        raise DataError(f"test_size must be in [0, 1); got {test_size}.")
    return network, spec, engine


def _load_rows(data, target, libsvm, model, spec, say, libsvm_options=None):
    """``(X, y, feature names)`` of the file, the targets checked by the
    model, and the network's rows dense; says what was read."""
    if libsvm:
        X, y, names = load_libsvm(data, **(libsvm_options or {}))
    else:
        if target is None:
            raise DataError("a CSV file needs --target COL (or pass --libsvm).")
        X, y, names = load_csv(data, target)
    if spec is not None and spec.task == "regression":
        if y.dtype.kind not in "fiu":
            raise DataError(f"--model {model} needs a numeric target; {target!r} has labels "
                            f"such as {y[0]!r}.")
        try:      # the model's own target check (Poisson: counts >= 0), before the fit
            y = spec.validate_targets(y, name=f"the target {target or '(libsvm labels)'}")
        except ValueError as exc:
            raise DataError(f"--model {model}: {exc}") from None
    n, d = X.shape
    kind = "CSR" if sp.issparse(X) else "dense"
    if model == "mlp" and sp.issparse(X):
        if n * d > MLP_DENSE_LIMIT:
            raise DataError(
                f"--model mlp needs dense rows, and {data} ({n:,} x {d:,}, sparse) would "
                f"take {n * d * 8 / 2 ** 30:.1f} GiB dense; reduce the features or the rows "
                "first.")
        X = X.toarray()
        kind = "CSR, densified for the network"
    say(f"skbayes_sg {__version__} fit: {data} ({n:,} rows x {d:,} features, {kind})")
    return X, y, names


def _split_and_scale(X, y, names, model, spec, test_size, seed, standardize, stderr):
    """Hold out ``test_size`` of the rows (stratified for a classifier) and
    standardise what ``--standardize`` asks for (else warn about unscaled
    features).  Returns the rows as the fit and the metrics read them:
    ``X_tr``, ``X_te`` (None without held-out rows), the labels ``y_tr``,
    ``y_te``, the targets fitted ``t_tr``, ``t_te`` (a standardised ridge
    target) and the scalings ``x_mean``, ``x_scale``, ``y_mean``, ``y_scale``."""
    d = X.shape[1]
    stratify = None
    if model in CLASSIFIERS and test_size > 0:
        _, counts = np.unique(y, return_counts=True)
        stratify = y if counts.min() >= 2 else None
    if test_size > 0:
        X_tr, X_te, y_tr, y_te = train_test_split(
            X, y, test_size=test_size, random_state=seed, stratify=stratify)
    else:
        X_tr, X_te, y_tr, y_te = X, None, y, None
    x_mean, x_scale = np.zeros(d), np.ones(d)
    if not standardize:
        problem = _unscaled(X_tr, names)
        if problem:
            print(f"python -m skbayes_sg fit: warning: the features look unscaled: {problem}; "
                  "the samplers mix faster on standardised features: pass --standardize.",
                  file=sys.stderr if stderr is None else stderr, flush=True)
    else:
        scaler = StandardScaler(with_mean=not sp.issparse(X)).fit(X_tr)
        X_tr = scaler.transform(X_tr)
        X_te = scaler.transform(X_te) if X_te is not None else None
        if scaler.mean_ is not None and not sp.issparse(X):
            x_mean = scaler.mean_
        x_scale = scaler.scale_
    y_mean, y_scale = 0.0, 1.0
    t_tr, t_te = y_tr, y_te
    if spec is not None and spec.task == "regression":
        y_tr = y_tr.astype(np.float64)
        t_tr = y_tr
        if standardize and spec.standardize_target:
            y_mean, y_scale = float(y_tr.mean()), float(y_tr.std()) or 1.0
            t_tr = (y_tr - y_mean) / y_scale
        if y_te is not None:
            y_te = y_te.astype(np.float64)
            t_te = (y_te - y_mean) / y_scale
    return SimpleNamespace(X_tr=X_tr, X_te=X_te, y_tr=y_tr, y_te=y_te, t_tr=t_tr, t_te=t_te,
                 x_mean=x_mean, x_scale=x_scale, y_mean=y_mean, y_scale=y_scale)




def _say_estimator(est, rows, network, standardize, say):
    """One line: the estimator with the settings that matter and the split."""
    split = (f"{rows.X_tr.shape[0]:,} training / {rows.X_te.shape[0]:,} held-out rows"
             if rows.X_te is not None
             else f"all {rows.X_tr.shape[0]:,} rows for training (no held-out rows)")
    shown = ("hidden_layer_sizes", "sampler", "subsampling", "metric", "n_chains", "n_warmup",
             "n_samples", "thin", "alpha")
    current = est.get_params(deep=False)
    defaults = type(est)().get_params(deep=False)
    first = ", ".join(f"{k}={current[k]!r}" for k in shown
                      if k in current and (k != "thin" or network))
    extra = "".join(f", {k}={v!r}" for k, v in current.items()
                    if k not in shown and k not in ("random_state", "n_jobs", "verbose")
                    and _scalar(v) and not (_scalar(defaults.get(k)) and v == defaults[k]))
    say(f"{type(est).__name__}({first}{extra}); {split}"
        + ("; features standardised" if standardize else ""))


def _held_out_metrics(est, rows, model, spec, standardize, say):
    """Accuracy and log-loss (classifiers), or RMSE and mean log predictive
    density (regressors) on the held-out rows; {} without them."""
    if rows.X_te is None:
        return {}
    say()
    y_te = rows.y_te
    if model in CLASSIFIERS:
        proba = est.predict_proba(rows.X_te)
        metrics = dict(
            accuracy=float(accuracy_score(y_te, est.classes_[proba.argmax(axis=1)])),
            log_loss=float(log_loss(y_te, proba, labels=est.classes_)))
        say(f"Held-out: accuracy {metrics['accuracy']:.4f}, log-loss "
            f"{metrics['log_loss']:.4f} (posterior predictive, {len(y_te):,} rows)")
        return metrics
    mean = est.predict(rows.X_te)
    lpd = _log_predictive_density(est, rows.X_te, rows.t_te) - np.log(rows.y_scale)
    metrics = dict(rmse=float(rows.y_scale * np.sqrt(np.mean((mean - rows.t_te) ** 2))),
                   mean_log_predictive_density=float(lpd.mean()))
    say(f"Held-out: RMSE {metrics['rmse']:.4g}, mean log predictive density "
        f"{metrics['mean_log_predictive_density']:.4f} ({len(y_te):,} rows"
        + (", original target units)" if standardize and spec.standardize_target else ")"))
    return metrics


def _metadata(est, rows, data, libsvm, target, model, spec, network, test_size, seed,
              standardize, seconds, converged, metrics):
    """The saved file's ``metadata``: the command, the fit's resolved
    settings and the held-out metrics (a JSON-able dict)."""
    meta = dict(
        skbayes_sg_version=__version__, data=str(data),
        format="libsvm" if libsvm else "csv", target=target, model=model,
        estimator=type(est).__name__, params=_jsonable(est.get_params()),
        test_size=test_size, split_seed=seed, standardize=bool(standardize),
        n_train=int(rows.X_tr.shape[0]),
        n_test=int(0 if rows.X_te is None else rows.X_te.shape[0]),
        step_size=est.step_size_, n_grad_evals=int(est.n_grad_evals_),
        sampling_time=getattr(est, "sampling_time_", None), fit_time=seconds,
        converged=bool(converged), metrics=metrics, y_mean=rows.y_mean, y_scale=rows.y_scale)
    meta["alpha"] = float(est.alpha if network else est.alpha_)
    if spec is not None:
        meta.update(est.likelihood_params_)
    return meta


def _save(out, engine, est, rows, names, model, network, table, diagnostics, meta, say):
    """Write the draws and ``meta`` to ``out`` (netCDF with ``engine``, else
    ``.npz``); returns the path written."""
    regression = model not in CLASSIFIERS
    if engine is not None:
        _save_netcdf(out, engine, est, rows.X_tr, rows.t_tr if regression else rows.y_tr,
                     names, rows.x_mean, rows.x_scale, meta)
        say(f"Saved the draws, log likelihood and metadata to {out} (ArviZ "
            "InferenceData, netCDF)")
        return out
    if network:
        arrays = _network_arrays(est, diagnostics, meta)
    else:
        arrays = dict(
            coef_samples=est.coef_samples_, intercept_samples=est.intercept_samples_,
            summary_values=np.asarray(table.values, dtype=np.float64),
            summary_index=np.array([str(i) for i in table.index], dtype=str),
            summary_columns=np.array([str(c) for c in table.columns], dtype=str))
    arrays.update(feature_names=np.array(names, dtype=str), x_mean=rows.x_mean,
                  x_scale=rows.x_scale, metadata=np.array(json.dumps(meta)))
    if model in CLASSIFIERS:
        classes = np.asarray(est.classes_)
        arrays["classes"] = classes.astype(str) if classes.dtype == object else classes
    np.savez(out, **arrays)
    if not str(out).endswith(".npz"):
        out = str(out) + ".npz"   # numpy.savez appends the suffix
    say(f"Saved the draws and metadata to {out}")
    return out


def _report_linear(est, names, spec, standardize, seconds, say):
    """The linear models' report: the settings used, the posterior summary
    table and the convergence check; returns ``(table, converged)``."""
    say(f"sampler {est.sampler_!r}, subsampling {est.subsampling_!r}, {est.metric_} metric"
        + (", Metropolis-adjusted" if est.metropolis_ else "")
        + f": {est.n_warmup_} warm-up steps and {est.n_samples_} draws per chain "
        f"(thin {est.thin_}), batch {est.batch_size_}")
    say(f"fit in {seconds:.2f} s (sampling {est.sampling_time_:.2f} s); step size "
        f"{est.step_size_:.3g}; {est.n_grad_evals_:,} gradient evaluations "
        f"({est.n_passes_:,.0f} data passes)")
    settings = est.likelihood_params_
    if settings:   # the model's own parameters, as fixed for the draws
        say("model: " + ", ".join(f"{name} {value:.4g}" for name, value in settings.items()))
    if isinstance(est.alpha, str):
        say(f"prior: alpha {est.alpha_:.4g}, set by the evidence")

    table = summary(est, names=names)
    say()
    say("Posterior summary" + (" (standardised features)" if standardize else "")
        + (" (standardised target)" if spec.standardize_target and standardize else ""))
    say(_format_table(table))
    say()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MCMCConvergenceWarning)
        converged = check_convergence(est, names=names)
    if converged:
        say("Convergence: R-hat <= 1.01 and bulk and tail ESS >= 100 per chain for every "
            "parameter.")
    _say_warnings(caught, say)
    return table, converged


def _report_network(est, X, y, seconds, standardize, say):
    """The network's report: the settings used and a short posterior
    summary instead of a table of its (many) parameters: the range of the
    parameters' bulk ESS and R-hat, and the estimator's own convergence
    quantities (:meth:`SGMCMCMLPClassifier.summary`: the draws'
    log-likelihood on up to ``DIAGNOSTIC_ROWS`` training rows and the
    layers' weight norms, without the weights' permutation symmetry), which
    decide convergence with the estimator's own check and advice.
    Returns ``(converged, diagnostics)``, the figures as a dict."""
    n_chains, n_draws, n_params = est.coef_samples_.shape
    held_out = getattr(est, "validation_error_", None)
    say(f"sampler {est.sampler!r}, subsampling {est.subsampling!r} on {est.device_}"
        + (", Metropolis-adjusted (acceptance rate "
           f"{est.acceptance_rate_:.2f})" if est.metropolis_ else "")
        + f": {est.n_warmup_} warm-up steps and {n_draws} draws per chain "
        f"(thin {est.thin_}), batch {est.batch_size_}")
    say(f"fit in {seconds:.2f} s; step size {est.step_size_:.3g}"
        + (f", friction {est.friction_:.3g}" if est.friction_ is not None else "")
        + f"; {est.n_grad_evals_:,} gradient evaluations "
        f"({est.n_grad_evals_ / (n_chains * X.shape[0]):,.0f} data passes per chain)")

    ess_p, rhat_p = bulk_ess_and_rhat(est.coef_samples_)
    table = summary(est)
    values = np.asarray(table.values, dtype=np.float64)
    columns = list(table.columns)
    trace = est.convergence_quantities()[0][:, :, 0]       # row 0: the log-likelihood
    rows = min(X.shape[0], DIAGNOSTIC_ROWS)              # the rows of that trace
    ess_t = float(values[0, columns.index("ess_bulk")])
    rhat_t = float(values[0, columns.index("r_hat")])
    norms = values[1:]
    diagnostics = dict(
        n_params=int(n_params), layer_sizes=[int(s) for s in est.layer_sizes_],
        ess_bulk_min=_nan_stat(np.nanmin, ess_p), ess_bulk_median=_nan_stat(np.nanmedian, ess_p),
        ess_bulk_max=_nan_stat(np.nanmax, ess_p), r_hat_min=_nan_stat(np.nanmin, rhat_p),
        r_hat_median=_nan_stat(np.nanmedian, rhat_p), r_hat_max=_nan_stat(np.nanmax, rhat_p),
        trace_rows=rows, trace_mean=float(trace.mean()), trace_sd=float(trace.std()),
        trace_ess_bulk=ess_t, trace_r_hat=rhat_t,
        weight_norm_ess_bulk_min=_nan_stat(np.nanmin, norms[:, columns.index("ess_bulk")]),
        weight_norm_r_hat_max=_nan_stat(np.nanmax, norms[:, columns.index("r_hat")]))
    say()
    say(f"Posterior summary ({n_params:,} parameters, layers "
        f"{'-'.join(str(s) for s in est.layer_sizes_)}, {est.activation}; {n_chains} chains "
        f"x {n_draws} draws" + ("; standardised features" if standardize else "") + ")")
    d = diagnostics
    say(f"  parameters: bulk ESS min {d['ess_bulk_min']:.0f}, median {d['ess_bulk_median']:.0f},"
        f" max {d['ess_bulk_max']:.0f}; R-hat min {d['r_hat_min']:.3f}, median "
        f"{d['r_hat_median']:.3f}, max {d['r_hat_max']:.3f}")
    say(f"  log-likelihood of {rows:,} training rows per draw: mean {d['trace_mean']:.2f}, sd "
        f"{d['trace_sd']:.2f}, bulk ESS {ess_t:.0f}, R-hat {rhat_t:.3f}")
    say(f"  weight norms of the {len(norms)} layers: bulk ESS min "
        f"{d['weight_norm_ess_bulk_min']:.0f}, R-hat max {d['weight_norm_r_hat_max']:.3f}")
    say(textwrap.fill(
        "  (a network's weights are identified only up to permutations and sign flips of "
        "its hidden units, so chains in different modes inflate the parameters' R-hat while "
        "predicting alike; the log-likelihood and the weight norms have no such symmetry "
        + ("and are the convergence check)" if held_out is None else
           "but drift where the data do not constrain the weights, so with "
           "held-out rows the prediction there is the check)"),
        width=WRAP, subsequent_indent="   "))
    say()
    selection = getattr(est, "temperature_selection_", None)
    if selection is not None:
        _say_selection(selection, say)
        diagnostics["temperature_selection"] = selection
    if held_out is not None:
        converged = _say_held_out_check(est, held_out, say)
        diagnostics["validation"] = dict(n_rows=int(held_out.n_rows),
                                         log_loss=float(held_out.log_loss),
                                         bias=float(held_out.bias), se=float(held_out.se))
    else:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", MCMCConvergenceWarning)
            converged = est.check_convergence()
        if converged:
            say(f"Convergence: R-hat <= {RHAT_THRESHOLD} and bulk and tail ESS >= "
                f"{MIN_ESS_PER_CHAIN} per chain for the log-likelihood and the weight norms.")
        _say_warnings(caught, say)
    diagnostics["trace"] = trace
    diagnostics["ess_bulk"], diagnostics["r_hat"] = ess_p, rhat_p
    return converged, diagnostics


def _say_selection(selection, say):
    """``--temperature auto``: which model the held-out rows chose, and by how much."""
    from .neural_network._network_temperature import SELECTION_Z

    chosen = selection["chosen"]
    posterior, cold = selection["held_out_log_loss"]
    say(textwrap.fill(
        f"Model: temperature {selection['temperature'][chosen]:g}, prior_scale "
        f"{selection['prior_scale'][chosen]}, chosen on {selection['n_rows']} held-out rows "
        f"(model-average log-loss {posterior:.4f} for the posterior, {cold:.4f} for the cold "
        f"model: difference {selection['difference']:+.4f} +- {selection['se']:.4f}; the cold "
        f"model is kept only when better by more than {SELECTION_Z:g} se).", width=WRAP,
        subsequent_indent="  "))


def _say_held_out_check(est, held_out, say):
    """The fit's own check with ``--validation-fraction``: the checked run's
    model-average error on the held-out rows, not R-hat."""
    from .neural_network._network_validation import PREDICTION_TOLERANCE, fit_messages

    messages = fit_messages(est)
    if not messages:
        say(textwrap.fill(
            f"Convergence: the run checked on {held_out.n_rows} held-out rows (before the "
            f"chains continued on every row) has a model-average log-loss of "
            f"{held_out.log_loss:.4f} there, a finite-run bias of "
            f"{held_out.bias:+.4f} and a Monte Carlo se of {held_out.se:.4f}: both within "
            f"{PREDICTION_TOLERANCE} nats a row (R-hat on the weight norms above is not the "
            "check here).", width=WRAP, subsequent_indent="  "))
    for text in messages:
        say(textwrap.fill(f"Convergence warning: {text}", width=WRAP, subsequent_indent="  "))
    return not messages


def _fit_printing_warnings(est, rows, stderr, target_unscaled):
    """``est.fit`` on the training rows, its warnings printed as the command's
    (:func:`_print_fit_warnings`), also when the fit stops with an error."""
    with warnings.catch_warnings(record=True) as caught:
        # the fit's own convergence warning is reported below, with the check
        warnings.simplefilter("ignore", MCMCConvergenceWarning)
        try:
            est.fit(rows.X_tr, rows.t_tr)
        finally:
            _print_fit_warnings(caught, stderr, target_unscaled)


def _print_fit_warnings(caught, stderr, target_unscaled):
    """The fit's other warnings (the ridge's mean of ``y``, ...) on ``stderr``
    as the command's own: a Python warning would point at the interpreter's
    ``runpy``, the first frame outside the package. With ``target_unscaled``
    (a model whose target ``--standardize`` scales, not passed) a warning
    about the target's centre names that option."""
    for w in caught:
        kind = "" if w.category is UserWarning else f" ({w.category.__name__})"
        text = f"python -m skbayes_sg fit: warning{kind}: {w.message}"
        if target_unscaled and issubclass(w.category, UncentredTargetWarning):
            text += " Here: pass --standardize, which standardises the target too."
        print(textwrap.fill(text, width=WRAP, subsequent_indent="  "),
              file=sys.stderr if stderr is None else stderr, flush=True)


def _say_warnings(caught, say):
    """Print the convergence warnings caught (the others are re-issued)."""
    for w in caught:
        if issubclass(w.category, MCMCConvergenceWarning):
            say(textwrap.fill(f"Convergence warning: {w.message}", width=WRAP,
                              subsequent_indent="  "))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def _nan_stat(stat, values):
    values = np.asarray(values, dtype=np.float64)
    return float(stat(values)) if np.isfinite(values).any() else float("nan")


def _network_arrays(est, diagnostics, meta):
    """The ``.npz`` arrays of ``--model mlp`` (the metadata gets the
    network's description and the summary's figures)."""
    meta["activation"] = est.activation
    meta["layer_sizes"] = [int(s) for s in est.layer_sizes_]
    meta["n_params"] = int(est.n_params_)
    meta["out_activation"] = est.out_activation_
    meta["device"] = est.device_
    meta["diagnostics"] = {k: v for k, v in diagnostics.items()
                           if k not in ("trace", "ess_bulk", "r_hat")}
    return dict(
        coef_samples=est.coef_samples_,
        layer_sizes=np.asarray(est.layer_sizes_, dtype=np.int64),
        ess_bulk=np.asarray(diagnostics["ess_bulk"], dtype=np.float64),
        r_hat=np.asarray(diagnostics["r_hat"], dtype=np.float64),
        log_likelihood_trace=np.asarray(diagnostics["trace"], dtype=np.float64))


def _check_torch():
    """``--model mlp`` needs PyTorch: say what to install before reading the data."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise MissingDependencyError(
            '--model mlp needs PyTorch, an optional dependency: pip install '
            '"skbayes_sg[torch]".')


def _is_netcdf(out):
    return str(out).lower().endswith(".nc")


def _netcdf_engine():
    """The engine ArviZ writes netCDF with: h5netcdf (its default) or netCDF4.

    Raises :class:`MissingDependencyError` naming the extra to install when
    ArviZ or both engines are missing.  (scipy's netCDF3 engine cannot hold
    the groups of an InferenceData.)
    """
    try:
        import arviz  # noqa: F401
    except ImportError:
        raise MissingDependencyError(
            "--out *.nc writes an ArviZ InferenceData and needs ArviZ, an optional "
            'dependency: pip install "skbayes_sg[arviz]" (and h5netcdf for the netCDF '
            "file), or save to .npz.") from None
    for module, engine in (("h5netcdf", "h5netcdf"), ("netCDF4", "netcdf4")):
        try:
            __import__(module)
        except ImportError:
            continue
        return engine
    raise MissingDependencyError(
        "--out *.nc needs a netCDF writer for ArviZ: pip install h5netcdf (or netCDF4) "
        'next to pip install "skbayes_sg[arviz]", or save to .npz.')


def _save_netcdf(out, engine, est, X, y, names, x_mean, x_scale, meta):
    """``est``'s InferenceData with the training rows (log likelihood,
    observed data, lp), the standardisation as ``constant_data`` and the
    metadata JSON as an attribute of ``posterior``, written to ``out``."""
    import xarray as xr

    from .diagnostics import to_inference_data

    idata = to_inference_data(est, X, y, names=names)
    idata.add_groups(constant_data=xr.Dataset(
        {"x_mean": ("coef_dim", np.asarray(x_mean, dtype=np.float64)),
         "x_scale": ("coef_dim", np.asarray(x_scale, dtype=np.float64))},
        coords={"coef_dim": list(names)}))
    idata.posterior.attrs["skbayes_sg_fit"] = json.dumps(meta)
    idata.to_netcdf(str(out), engine=engine)


def _unscaled(X, names):
    """Why the columns of ``X`` look unscaled (a phrase), or "" when they do not.

    Unscaled: the standard deviations of the non-constant columns span more
    than a factor of 1,000, or a column's mean is more than 100 of its
    standard deviations from 0.  CSR matrices are read through their
    nonzeros (never densified).
    """
    if X.shape[0] < 2 or X.shape[1] == 0:
        return ""
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        mean, var = mean_variance_axis(X, axis=0)
        low, high = min_max_axis(X, axis=0)
    else:
        mean = X.mean(axis=0)
        var = np.zeros(X.shape[1])
        for start in range(0, X.shape[0], 2 ** 16):   # no full-size temporary
            var += np.square(X[start:start + 2 ** 16] - mean).sum(axis=0)
        var /= X.shape[0]
        low, high = X.min(axis=0), X.max(axis=0)
    sd = np.sqrt(np.maximum(np.asarray(var, dtype=np.float64), 0.0))
    varying = np.flatnonzero(np.asarray(high) > np.asarray(low))   # constant columns left out
    if len(varying) == 0:
        return ""
    sd = np.maximum(sd[varying], np.finfo(np.float64).tiny)
    mean = np.asarray(mean, dtype=np.float64)[varying]
    reasons = []
    lo, hi = int(np.argmin(sd)), int(np.argmax(sd))
    if sd[hi] / sd[lo] > 1e3:
        reasons.append(f"their standard deviations range from {sd[lo]:.3g} "
                       f"({names[varying[lo]]}) to {sd[hi]:.3g} ({names[varying[hi]]})")
    z = np.abs(mean) / sd
    far = int(np.argmax(z))
    if z[far] > 100:
        reasons.append(f"{names[varying[far]]} has mean {mean[far]:.4g}, {z[far]:.3g} "
                       "standard deviations from 0")
    return "; ".join(reasons)


def _scalar(value):
    return isinstance(value, (str, bool, int, float, type(None), np.generic))


def _check_writable(out):
    """Fail now, naming ``--out``, when the draws could not be saved later."""
    text = str(out)
    path = os.path.abspath(text if text.endswith(".npz") or _is_netcdf(text)
                           else text + ".npz")
    folder = os.path.dirname(path)
    if os.path.isdir(path):
        raise DataError(f"--out {out} is a directory; give a file name such as "
                        f"{os.path.join(str(out), 'draws.npz')}.")
    if not os.path.isdir(folder):
        raise DataError(f"--out {out}: the directory {folder} does not exist; create it "
                        "or choose another path.")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".skbayes_sg-"):
            pass
    except OSError as exc:
        raise DataError(f"--out {out}: cannot write to {folder} ({exc.strerror}); choose "
                        "another path.") from None


def _printer(stdout):
    out = sys.stdout if stdout is None else stdout

    def say(line=""):
        print(line, file=out, flush=True)
    return say


def _format_table(table):
    """The summary table as text (3 decimals, ESS as integers), long tables cut."""
    index = [str(i) for i in table.index]
    columns = [str(c) for c in table.columns]
    values = np.asarray(table.values, dtype=np.float64)
    shown = min(len(index), MAX_SUMMARY_ROWS)
    text = SummaryTable(index[:shown], columns, values[:shown]).to_string()
    if shown < len(index):
        r_hat = values[:, columns.index("r_hat")]
        text += f"\n... {len(index) - shown} more rows (all of them are saved with --out)"
        if np.isfinite(r_hat).any():
            worst = int(np.nanargmax(r_hat))
            text += f"; largest R-hat: {index[worst]} ({r_hat[worst]:.3f})"
    return text


def _registry_entry(model):
    """The model registry entry of a linear ``--model`` (None for the network)."""
    name = getattr(MODELS[model], "likelihood", None)
    return None if name is None else model_spec(name)


def _log_predictive_density(est, X, t):
    """log p(t_i | x_i) under the posterior predictive: the log of the mean
    over the draws of the model's density (the registry's log predictive,
    ``est.log_likelihood``), by blocks of rows."""
    S = int(np.prod(np.shape(est.intercept_samples_)[:2]))
    rows = max(1, 2 ** 22 // S)
    out = np.empty(X.shape[0])
    for start in range(0, X.shape[0], rows):
        logp = est.log_likelihood(X[start:start + rows], t[start:start + rows])
        out[start:start + rows] = logsumexp(logp, axis=1) - np.log(S)
    return out


def _jsonable(params):
    out = {}
    for key, value in params.items():
        if isinstance(value, (str, bool, int, float)) or value is None:
            out[key] = value
        elif isinstance(value, np.generic):
            out[key] = value.item()
        else:
            out[key] = repr(value)
    return out

