"""Where the network's model average is miscalibrated, and what would move it
(issue 40's ECE line).

For each data set (``bench_mlp_defaults.load``: standardised, 70/30 split) and
seed, ``SGMCMCMLPClassifier(random_state=seed)`` at its defaults, then on the
test rows:

- the model average: log-loss, ECE (15 bins), mean confidence minus accuracy
  (negative: underconfident), and the ECE a perfectly calibrated predictor
  with these probabilities would show on these rows
  (``bench_mlp_defaults.calibrated_ece``: the floor of the statistic);
- each chain's model average and one draw alone: their confidence minus
  accuracy (is the underconfidence each network's, or the mixture of chains
  in different basins?);
- the model average sharpened, ``p^(1/tau)`` renormalised, at the ``tau``
  that minimises the *test* rows' log-loss: an oracle, the most any such
  recalibration could give (its log-loss, ECE and floor);
- the same with ``tau`` fitted on held-out rows as a user's fit could: a
  default fit on 80 % of the training rows, ``tau`` from the other 20 %,
  applied to that fit's test probabilities (what a "pool, then calibrate"
  step built into ``fit`` would do; Rahaman and Thiery 2021).

Measured (stop 66, this machine, seeds 0-2): on digits each chain's model
average is underconfident (confidence minus accuracy -0.006 to -0.014, one
draw alone -0.001 to -0.009), the four chains' -0.011 to -0.014; the oracle
``tau`` 0.67-0.72 takes the log-loss from 0.063-0.067 to 0.055-0.058 and the
ECE from 0.021-0.024 to 0.013-0.015, and its floor to 0.011-0.012: below
``MLPClassifier``'s ECE of 0.0136, so the floor of stop 65 (0.015-0.017) was
that of today's probabilities, not of any model.  A ``tau`` from held-out rows
helps digits (the 80 % fit's log-loss 0.072-0.099 to 0.059-0.096) but not
breast cancer, whose model average is overconfident (oracle ``tau``
1.02-1.44): its 114 held-out rows, nearly all predicted with certainty, ask
for 0.35-2.0, and the test log-loss goes from 0.103-0.111 to 0.169-0.200 at
0.35.  So no such step is built.

Usage: ``python benchmarks/bench_mlp_calibration.py [--data digits cancer]
[--seeds 0 1 2]``
"""
import argparse
import os
import sys
import warnings

import numpy as np
from scipy.optimize import minimize_scalar
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_mlp_defaults import calibrated_ece, load  # noqa: E402

from skbayes_sg.diagnostics import expected_calibration_error  # noqa: E402
from skbayes_sg.neural_network import SGMCMCMLPClassifier  # noqa: E402

#: the sharpening's search interval for tau
TAU_BOUNDS = (0.25, 4.0)


def sharpened(proba, tau):
    """``proba ** (1 / tau)``, each row renormalised (in log space)."""
    logp = np.log(np.clip(proba, 1e-300, 1.0)) / tau
    logp -= logp.max(axis=1, keepdims=True)
    p = np.exp(logp)
    return p / p.sum(axis=1, keepdims=True)


def best_tau(proba, y, classes):
    """The ``tau`` in ``TAU_BOUNDS`` that minimises the log-loss of ``y``."""
    return minimize_scalar(lambda t: log_loss(y, sharpened(proba, t), labels=classes),
                           bounds=TAU_BOUNDS, method="bounded").x


def scores(proba, y, classes, seed):
    confidence_gap = proba.max(axis=1).mean() - (classes[proba.argmax(axis=1)] == y).mean()
    return (f"LL {log_loss(y, proba, labels=classes):.4f} "
            f"ECE {expected_calibration_error(y, proba, classes=classes):.4f} "
            f"(floor {calibrated_ece(proba, classes, seed)[1]:.4f}) "
            f"conf-acc {confidence_gap:+.4f}")


def gaps_per_chain(est, X, y):
    """Confidence minus accuracy of each chain's model average, and of the
    first chain's last draw alone."""
    draws, gaps = est.coef_samples_, []
    try:
        for kept in [draws[c:c + 1] for c in range(draws.shape[0])] + [draws[:1, -1:]]:
            est.coef_samples_ = kept
            p = est.predict_proba(X)
            gaps.append(p.max(axis=1).mean() - (est.classes_[p.argmax(axis=1)] == y).mean())
    finally:
        est.coef_samples_ = draws
    return gaps


def run(name, seed):
    Xtr, Xte, ytr, yte = load(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = SGMCMCMLPClassifier(random_state=seed).fit(Xtr, ytr)
        Xa, Xh, ya, yh = train_test_split(Xtr, ytr, test_size=0.2, stratify=ytr,
                                          random_state=seed)
        part = SGMCMCMLPClassifier(random_state=seed).fit(Xa, ya)
    classes = est.classes_
    proba = est.predict_proba(Xte)
    gaps = gaps_per_chain(est, Xte, yte)
    oracle = best_tau(proba, yte, classes)
    held_tau = best_tau(part.predict_proba(Xh), yh, classes)
    print(f"{name} seed {seed} (temperature_ {est.temperature_:g})", flush=True)
    print(f"  model average          {scores(proba, yte, classes, seed)}")
    print("  conf-acc per chain " + " ".join(f"{g:+.4f}" for g in gaps[:-1])
          + f"; one draw {gaps[-1]:+.4f}")
    print(f"  oracle tau {oracle:.2f}        "
          f"{scores(sharpened(proba, oracle), yte, classes, seed)}")
    part_proba = part.predict_proba(Xte)
    print(f"  80% fit                {scores(part_proba, yte, classes, seed)}")
    print(f"  80% fit, held-out tau {held_tau:.2f} "
          f"{scores(sharpened(part_proba, held_tau), yte, classes, seed)}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data", nargs="+", default=["digits", "cancer"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    args = parser.parse_args()
    for name in args.data:
        for seed in args.seeds:
            run(name, seed)


if __name__ == "__main__":
    main()
