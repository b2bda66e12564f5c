"""What sparse (CSR) rows cost the network against the same rows dense.

The network's chains gather each minibatch from the CSR matrix and make it
dense (``SparseRows``), so a fit on sparse rows is the fit on the dense
ones, draw for draw; this script checks that and times both fits at the
defaults in the same run, on

- ``digits``: sklearn's digits divided by 16 (about half of the pixels are
  zero), ``hidden_layer_sizes=(100,)``;
- ``one-hot``: 5,000 rows of 6 categorical columns with 30 levels each,
  one-hot encoded (180 columns, 3 % non-zero), ``hidden_layer_sizes=(50,)``.

It prints the wall time of each ``fit`` and the sparse one as a ratio of
the dense one, and, on a 30 % held-out split, the model average's log-loss
and whether the fit warned, beside ``MLPClassifier`` of the same hidden
layers fitted in the same run.

Usage: ``python benchmarks/bench_mlp_sparse.py`` (``OMP_NUM_THREADS=1`` on a
machine shared with other work).
"""
import time
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_digits
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split
from sklearn.neural_network import MLPClassifier
from sklearn.preprocessing import OneHotEncoder

from skbayes_sg.diagnostics import MCMCConvergenceWarning
from skbayes_sg.neural_network import SGMCMCMLPClassifier


def digits():
    X, y = load_digits(return_X_y=True)
    return X / 16.0, y, (100,)


def one_hot(n=5000, columns=6, levels=30, seed=0):
    rng = np.random.default_rng(seed)
    cats = rng.integers(0, levels, size=(n, columns))
    effect = rng.standard_normal((columns, levels))
    logit = effect[np.arange(columns), cats].sum(axis=1)
    y = (logit + rng.logistic(size=n) > 0).astype(int)
    X = OneHotEncoder().fit_transform(cats)     # CSR
    return X.toarray(), y, (50,)


def main():
    print(f"{'data':8s} {'rows':>6s} {'cols':>5s} {'density':>7s} {'dense s':>8s} "
          f"{'sparse s':>8s} {'ratio':>6s} {'same draws':>10s} {'warned':>6s} "
          f"{'LL':>7s} {'MLP LL':>7s}")
    for name, load in (("digits", digits), ("one-hot", one_hot)):
        X, y, hidden = load()
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
        times, fits = [], []
        for rows in (Xtr, sp.csr_matrix(Xtr)):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                t0 = time.perf_counter()
                clf = SGMCMCMLPClassifier(hidden_layer_sizes=hidden, random_state=0).fit(rows, ytr)
                times.append(time.perf_counter() - t0)
            warned = any(issubclass(w.category, MCMCConvergenceWarning) for w in caught)
            fits.append(clf)
        same = np.array_equal(fits[0].coef_samples_, fits[1].coef_samples_)
        ll = log_loss(yte, fits[1].predict_proba(sp.csr_matrix(Xte)), labels=fits[1].classes_)
        mlp = MLPClassifier(hidden, max_iter=300, random_state=0).fit(Xtr, ytr)
        mlp_ll = log_loss(yte, mlp.predict_proba(Xte), labels=mlp.classes_)
        print(f"{name:8s} {Xtr.shape[0]:6d} {X.shape[1]:5d} {np.mean(X != 0):7.3f} "
              f"{times[0]:8.2f} {times[1]:8.2f} {times[1] / times[0]:6.2f} {str(same):>10s} "
              f"{str(warned):>6s} {ll:7.4f} {mlp_ll:7.4f}", flush=True)


if __name__ == "__main__":
    main()
