"""How the scaling of mostly-zero features changes a default logistic fit.

sklearn's digits (1,797 images of 8 x 8 pixels, 10 classes: 650
coefficients), 70/30 stratified split: ``SGMCMCLogisticRegression`` at its
defaults after three scalings of the pixels, each fitted on the training
rows (``X / 16``, ``MinMaxScaler``, ``StandardScaler``). For each: the wall
time of ``fit``, its data passes, sampler, smallest ESS / target, whether it
warned, and the held-out log-loss and accuracy, beside sklearn's
``LogisticRegression`` (same penalty, ``C = 1 / alpha``) on the same
features in the same run.

Standardising a pixel that is almost always zero turns its rare non-zero
values into values of 20-40 (the largest |z| of each scaling is printed);
the user guide's "Scaling the data" explains what that does to the
posterior. ``--long`` adds the standardised fit at ``max_passes=250_000``
(about two minutes): does a larger budget make it converge?

Usage: ``python benchmarks/bench_feature_scaling.py [--seeds 0 1] [--long]``.
"""
import argparse
import time
import warnings

import numpy as np
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import MinMaxScaler, StandardScaler

from skbayes_sg import SGMCMCLogisticRegression
from skbayes_sg.diagnostics import MCMCConvergenceWarning


class _DivideBy16:
    """Digits' pixels are 0-16: the scaling of ``benchmarks/_posteriors.py``."""

    def fit(self, X):
        return self

    def transform(self, X):
        return X / 16.0


SCALINGS = {"X / 16": _DivideBy16, "MinMaxScaler": MinMaxScaler,
            "StandardScaler": StandardScaler}


def fit_one(Xtr, ytr, Xte, yte, seed, **kw):
    """Wall time, passes, sampler, ESS / target, warned, log-loss, accuracy."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        est = SGMCMCLogisticRegression(random_state=seed, **kw).fit(Xtr, ytr)
        seconds = time.perf_counter() - t0
    warned = any(issubclass(w.category, MCMCConvergenceWarning) for w in caught)
    proba = est.predict_proba(Xte)
    return dict(seconds=seconds, passes=est.n_passes_, sampler=est.sampler_,
                ess=float(np.min(est.ess_)), target=est.target_ess_, warned=warned,
                log_loss=log_loss(yte, proba, labels=est.classes_),
                accuracy=float(np.mean(est.classes_[proba.argmax(1)] == yte)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--long", action="store_true",
                        help="also the standardised fit at max_passes=250_000")
    args = parser.parse_args(argv)
    X, y = load_digits(return_X_y=True)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
    print(f"digits, {len(ytr)} training rows, 10 classes, 650 coefficients; defaults")
    print(f"{'scaling':15s} {'max|x|':>6s} {'seed':>4s} {'fit s':>6s} {'passes':>8s} "
          f"{'sampler':>15s} {'ESS/target':>11s} {'warned':>6s} {'log-loss':>8s} "
          f"{'acc':>6s} | {'LogReg LL':>9s} {'acc':>6s}")
    runs = [(name, {}) for name in SCALINGS]
    if args.long:
        runs.append(("StandardScaler", {"max_passes": 250_000}))
    for name, kw in runs:
        scaler = SCALINGS[name]().fit(Xtr)
        A, B = scaler.transform(Xtr), scaler.transform(Xte)
        ref = LogisticRegression(C=1.0, max_iter=10_000).fit(A, ytr)
        ref_ll, ref_acc = log_loss(yte, ref.predict_proba(B)), ref.score(B, yte)
        for seed in args.seeds:
            r = fit_one(A, ytr, B, yte, seed, **kw)
            label = name + (" (250k)" if kw else "")
            print(f"{label:15s} {np.abs(A).max():6.1f} {seed:4d} {r['seconds']:6.1f} "
                  f"{r['passes']:8.0f} {r['sampler']:>15s} "
                  f"{r['ess']:5.0f}/{r['target']:<5.0f} {str(r['warned']):>6s} "
                  f"{r['log_loss']:8.4f} {r['accuracy']:6.3f} | {ref_ll:9.4f} {ref_acc:6.3f}",
                  flush=True)


if __name__ == "__main__":
    main()
