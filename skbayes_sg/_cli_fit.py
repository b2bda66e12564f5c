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
  convergence check;
- held-out metrics: accuracy and log-loss of the posterior predictive
  (logistic), or RMSE of the posterior mean and mean log predictive density
  (ridge);

and saves the draws with their metadata to an ``.npz`` file (``--out``),
readable with ``numpy.load(path)`` (no pickling):

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
    scaling of ridge (``y_mean``, ``y_scale``), ``noise_var_`` and the
    skbayes_sg version.

The entry point for the command line is :func:`run`; :func:`fit_file` does the
same for Python callers and tests and returns the fitted estimator and the
printed numbers.
"""
import bz2
import csv
import gzip
import json
import os
import sys
import tempfile
import textwrap
import time
import warnings

import numpy as np
import scipy.sparse as sp
from scipy.special import logsumexp
from sklearn.metrics import accuracy_score, log_loss
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from sklearn.utils._param_validation import InvalidParameterError

from . import __version__
from ._sampling._registry import SAMPLERS, SUBSAMPLINGS
from .diagnostics._convergence import (
    MCMCConvergenceWarning, SummaryTable, check_convergence, summary)
from .linear_model import SGMCMCLogisticRegression, SGMCMCRidge

__all__ = ["add_arguments", "run", "fit_file", "load_csv", "load_libsvm", "DataError"]

MODELS = {"logistic": SGMCMCLogisticRegression, "ridge": SGMCMCRidge}
MAX_SUMMARY_ROWS = 40   # printed rows of the summary (all of them go to --out)
WRAP = 88               # width of the wrapped convergence warnings


class DataError(ValueError):
    """The data file cannot be used as given (missing column, bad value, ...)."""


# ----------------------------------------------------------------- command line
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
    parser.add_argument("--model", choices=sorted(MODELS), required=True,
                        help="logistic: SGMCMCLogisticRegression (binary or multinomial); "
                             "ridge: SGMCMCRidge")
    parser.add_argument("--sampler", choices=["auto", *SAMPLERS], default="auto",
                        metavar="NAME",
                        help=f"dynamics: auto or one of {', '.join(SAMPLERS)} (default: auto)")
    parser.add_argument("--subsampling", choices=["auto", *SUBSAMPLINGS], default="auto",
                        metavar="NAME",
                        help=f"gradient estimator: auto or one of {', '.join(SUBSAMPLINGS)} "
                             "(default: auto)")
    parser.add_argument("--metric", choices=("auto", "dense", "diagonal", "identity"),
                        default="auto",
                        help="coordinates of the sampler: the Laplace metric (dense or "
                             "diagonal) or the identity (default: auto)")
    parser.add_argument("--test-size", type=float, default=0.2, dest="test_size",
                        help="held-out fraction of the rows, 0 for none (default: 0.2)")
    parser.add_argument("--standardize", action="store_true",
                        help="standardise the features on the training rows (sparse data: "
                             "scaled, not centred); ridge also standardises the target and "
                             "reports metrics in its original units")
    parser.add_argument("--n-samples", type=_auto_or(int), default="auto", dest="n_samples",
                        help="draws kept per chain, or 'auto' (default): until the effective "
                             "sample size reaches its target")
    parser.add_argument("--n-warmup", type=_auto_or(int), default="auto", dest="n_warmup",
                        help="discarded steps per chain, or 'auto' (default)")
    parser.add_argument("--thin", type=_auto_or(int), default="auto",
                        help="keep every THIN-th step, or 'auto' (default)")
    parser.add_argument("--n-chains", type=int, default=4, dest="n_chains",
                        help="chains (default: 4)")
    parser.add_argument("--init", choices=("auto", "laplace", "mode", "prior", "zeros"),
                        default="auto",
                        help="start of the chains: overdispersed Laplace draws in the Laplace "
                             "metric, the mode in the identity metric (default: auto)")
    parser.add_argument("--step-size", type=_auto_or(float), default="auto", dest="step_size",
                        help="step size, or 'auto' (default)")
    parser.add_argument("--batch-size", type=_auto_or(int), default="auto", dest="batch_size",
                        help="minibatch size, or 'auto' (default)")
    parser.add_argument("--alpha", type=_auto_or(float), default=None,
                        help="prior precision of every coefficient, or 'auto' (ridge only: "
                             "set by the evidence) (default: 1.0 for logistic, auto for ridge)")
    parser.add_argument("--seed", type=int, default=0,
                        help="random_state of the split and of the sampler (default: 0)")
    parser.add_argument("--n-jobs", type=int, default=None, dest="n_jobs",
                        help="chains run in parallel (joblib); the draws do not depend on "
                             "it (default: one)")
    parser.add_argument("--verbose", action="store_true",
                        help="print the progress of every chain")
    parser.add_argument("--out", default=None, metavar="PATH",
                        help="where to save the draws and metadata (.npz); without it "
                             "the report is printed and nothing is saved")


def run(args):
    """Run ``fit`` from parsed command-line arguments; return the exit status."""
    try:
        fit_file(
            args.data, target=args.target, libsvm=args.libsvm, model=args.model,
            out=args.out, test_size=args.test_size, standardize=args.standardize,
            estimator_params=dict(
                sampler=args.sampler, subsampling=args.subsampling, metric=args.metric,
                n_samples=args.n_samples, n_warmup=args.n_warmup, thin=args.thin,
                n_chains=args.n_chains, init=args.init, step_size=args.step_size,
                batch_size=args.batch_size, random_state=args.seed,
                n_jobs=args.n_jobs, verbose=int(args.verbose),
                **({} if args.alpha is None else {"alpha": args.alpha})),
            seed=args.seed, stdout=sys.stdout)
    except (DataError, OSError, InvalidParameterError) as exc:
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


def load_libsvm(path):
    """Read a libsvm/svmlight file as CSR float64 ``X``, ``y`` and names ``x0, ...``."""
    from sklearn.datasets import load_svmlight_file

    try:
        X, y = load_svmlight_file(str(path), dtype=np.float64)
    except ValueError as exc:
        raise DataError(f"{path} is not a valid libsvm file: {exc}") from exc
    return sp.csr_matrix(X), y, [f"x{j}" for j in range(X.shape[1])]


# ------------------------------------------------------------------------- fit
def fit_file(data, *, target=None, libsvm=False, model="logistic", out=None, test_size=0.2,
             standardize=False, estimator_params=None, seed=0, stdout=None):
    """Load ``data``, fit, print the report and save the draws.

    Parameters
    ----------
    data : str or path-like
        CSV (with ``target``) or libsvm (``libsvm=True``) file.
    target : str or None, default=None
        CSV target column.
    libsvm : bool, default=False
        Read ``data`` as libsvm.
    model : {"logistic", "ridge"}, default="logistic"
    out : str, path-like or None, default=None
        Where to save the ``.npz`` (None: not saved).
    test_size : float, default=0.2
        Held-out fraction in [0, 1); 0 keeps every row for training.
    standardize : bool, default=False
        Standardise the features (and, for ridge, the target) on the
        training rows.
    estimator_params : dict or None, default=None
        Keyword arguments of the estimator.
    seed : int, default=0
        Seed of the train/test split.
    stdout : file-like or None, default=None
        Where the report goes (None: ``sys.stdout``).

    Returns
    -------
    result : dict
        ``estimator`` (fitted), ``summary`` (the table), ``metrics`` (dict of
        held-out metrics, empty when ``test_size=0``), ``converged`` (bool)
        and ``out`` (the path written, or None).
    """
    say = _printer(stdout)
    if out is not None:
        _check_writable(out)      # before the fit, not after it
    if model not in MODELS:
        raise DataError(f"model={model!r} is not one of {sorted(MODELS)}.")
    if not 0 <= test_size < 1:
        raise DataError(f"test_size must be in [0, 1); got {test_size}.")
    if libsvm:
        X, y, names = load_libsvm(data)
    else:
        if target is None:
            raise DataError("a CSV file needs --target COL (or pass --libsvm).")
        X, y, names = load_csv(data, target)
    if model == "ridge" and y.dtype.kind not in "fiu":
        raise DataError(f"--model ridge needs a numeric target; {target!r} has labels such "
                        f"as {y[0]!r}.")
    n, d = X.shape
    kind = "CSR" if sp.issparse(X) else "dense"
    say(f"skbayes_sg {__version__} fit: {data} ({n:,} rows x {d:,} features, {kind})")

    stratify = None
    if model == "logistic" and test_size > 0:
        _, counts = np.unique(y, return_counts=True)
        stratify = y if counts.min() >= 2 else None
    if test_size > 0:
        X_tr, X_te, y_tr, y_te = train_test_split(
            X, y, test_size=test_size, random_state=seed, stratify=stratify)
    else:
        X_tr, X_te, y_tr, y_te = X, None, y, None

    x_mean, x_scale = np.zeros(d), np.ones(d)
    if standardize:
        scaler = StandardScaler(with_mean=not sp.issparse(X)).fit(X_tr)
        X_tr = scaler.transform(X_tr)
        X_te = scaler.transform(X_te) if X_te is not None else None
        if scaler.mean_ is not None and not sp.issparse(X):
            x_mean = scaler.mean_
        x_scale = scaler.scale_
    y_mean, y_scale = 0.0, 1.0
    t_tr, t_te = y_tr, y_te
    if model == "ridge":
        y_tr = y_tr.astype(np.float64)
        t_tr = y_tr
        if standardize:
            y_mean, y_scale = float(y_tr.mean()), float(y_tr.std()) or 1.0
            t_tr = (y_tr - y_mean) / y_scale
        if y_te is not None:
            y_te = y_te.astype(np.float64)
            t_te = (y_te - y_mean) / y_scale

    params = dict(estimator_params or {})
    est = MODELS[model](**params)
    split = (f"{X_tr.shape[0]:,} training / {X_te.shape[0]:,} held-out rows"
             if X_te is not None else f"all {n:,} rows for training (no held-out rows)")
    say(f"{type(est).__name__}(sampler={est.sampler!r}, subsampling={est.subsampling!r}, "
        f"metric={est.metric!r}, n_chains={est.n_chains}, n_warmup={est.n_warmup!r}, "
        f"n_samples={est.n_samples!r}, alpha={est.alpha!r}); {split}"
        + ("; features standardised" if standardize else ""))
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        # the fit's own convergence warning is reported below, with the check
        warnings.simplefilter("ignore", MCMCConvergenceWarning)
        est.fit(X_tr, t_tr)
    seconds = time.perf_counter() - t0
    say(f"sampler {est.sampler_!r}, subsampling {est.subsampling_!r}, {est.metric_} metric"
        + (", Metropolis-adjusted" if est.metropolis_ else "")
        + f": {est.n_warmup_} warm-up steps and {est.n_samples_} draws per chain "
        f"(thin {est.thin_}), batch {est.batch_size_}")
    say(f"fit in {seconds:.2f} s (sampling {est.sampling_time_:.2f} s); step size "
        f"{est.step_size_:.3g}; {est.n_grad_evals_:,} gradient evaluations "
        f"({est.n_passes_:,.0f} data passes)")

    table = summary(est, names=names)
    say()
    say("Posterior summary" + (" (standardised features)" if standardize else "")
        + (" (standardised target)" if model == "ridge" and standardize else ""))
    say(_format_table(table))
    say()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", MCMCConvergenceWarning)
        converged = check_convergence(est, names=names)
    if converged:
        say("Convergence: R-hat <= 1.01 and bulk and tail ESS >= 100 per chain for every "
            "parameter.")
    for w in caught:
        if issubclass(w.category, MCMCConvergenceWarning):
            say(textwrap.fill(f"Convergence warning: {w.message}", width=WRAP,
                              subsequent_indent="  "))
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)

    metrics = {}
    if X_te is not None:
        say()
        if model == "logistic":
            proba = est.predict_proba(X_te)
            metrics = dict(
                accuracy=float(accuracy_score(y_te, est.classes_[proba.argmax(axis=1)])),
                log_loss=float(log_loss(y_te, proba, labels=est.classes_)))
            say(f"Held-out: accuracy {metrics['accuracy']:.4f}, log-loss "
                f"{metrics['log_loss']:.4f} (posterior predictive, {len(y_te):,} rows)")
        else:
            mean = est.predict(X_te)
            lpd = _ridge_log_predictive(est, X_te, t_te) - np.log(y_scale)
            metrics = dict(rmse=float(y_scale * np.sqrt(np.mean((mean - t_te) ** 2))),
                           mean_log_predictive_density=float(lpd.mean()))
            say(f"Held-out: RMSE {metrics['rmse']:.4g}, mean log predictive density "
                f"{metrics['mean_log_predictive_density']:.4f} ({len(y_te):,} rows"
                + (", original target units)" if standardize else ")"))

    if out is not None:
        meta = dict(
            skbayes_sg_version=__version__, data=str(data),
            format="libsvm" if libsvm else "csv", target=target, model=model,
            estimator=type(est).__name__, params=_jsonable(est.get_params()),
            test_size=test_size, split_seed=seed, standardize=bool(standardize),
            n_train=int(X_tr.shape[0]), n_test=int(0 if X_te is None else X_te.shape[0]),
            step_size=est.step_size_, n_grad_evals=int(est.n_grad_evals_),
            sampling_time=est.sampling_time_, fit_time=seconds, converged=bool(converged),
            metrics=metrics, y_mean=y_mean, y_scale=y_scale)
        meta["alpha"] = float(est.alpha_)
        if model == "ridge":
            meta["noise_var"] = float(est.noise_var_)
        arrays = dict(
            coef_samples=est.coef_samples_, intercept_samples=est.intercept_samples_,
            feature_names=np.array(names, dtype=str), x_mean=x_mean, x_scale=x_scale,
            summary_values=np.asarray(table.values, dtype=np.float64),
            summary_index=np.array([str(i) for i in table.index], dtype=str),
            summary_columns=np.array([str(c) for c in table.columns], dtype=str),
            metadata=np.array(json.dumps(meta)))
        if model == "logistic":
            classes = np.asarray(est.classes_)
            arrays["classes"] = classes.astype(str) if classes.dtype == object else classes
        np.savez(out, **arrays)
        if not str(out).endswith(".npz"):
            out = str(out) + ".npz"   # numpy.savez appends the suffix
        say(f"Saved the draws and metadata to {out}")
    return dict(estimator=est, summary=table, metrics=metrics, converged=converged, out=out)


def _check_writable(out):
    """Fail now, naming ``--out``, when the draws could not be saved later."""
    path = os.path.abspath(str(out) if str(out).endswith(".npz") else str(out) + ".npz")
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


def _ridge_log_predictive(est, X, t):
    """log p(t_i | x_i) under the posterior predictive: a mixture over the
    draws of N(x^T w_s + b_s, noise_var_), by blocks of rows."""
    W = est.coef_samples_.reshape(-1, est.coef_samples_.shape[-1])
    b = est.intercept_samples_.reshape(-1)
    s2 = float(est.noise_var_)
    S = W.shape[0]
    out = np.empty(X.shape[0])
    rows = max(1, 2 ** 22 // S)
    for start in range(0, X.shape[0], rows):
        Z = np.asarray(X[start:start + rows] @ W.T) + b           # (rows, S)
        r = t[start:start + rows, None] - Z
        logpdf = -0.5 * (r * r / s2 + np.log(2 * np.pi * s2))
        out[start:start + rows] = logsumexp(logpdf, axis=1) - np.log(S)
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

