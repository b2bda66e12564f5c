"""What sparse (CSR) rows cost the network against the same rows dense.

The network's chains gather each minibatch from the CSR matrix and make it
dense (``SparseRows``), so a fit on sparse rows is the fit on the dense
ones, draw for draw; this script checks that and times both fits at the
defaults in the same run, on

- ``digits``: sklearn's digits divided by 16 (70 % of the rows; about half
  of the pixels are zero), ``hidden_layer_sizes=(100,)``;
- ``one-hot``: 5,000 rows of 6 categorical columns with 30 levels each,
  one-hot encoded (180 columns, 3 % non-zero), ``hidden_layer_sizes=(50,)``.

It prints the wall time of each ``fit`` and the sparse one as a ratio of
the dense one.

Usage: ``python benchmarks/bench_mlp_sparse.py`` (``OMP_NUM_THREADS=1`` on a
machine shared with other work).
"""
import time

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import OneHotEncoder

from skbayes_sg.neural_network import SGMCMCMLPClassifier


def digits():
    X, y = load_digits(return_X_y=True)
    Xtr, _, ytr, _ = train_test_split(X / 16.0, y, test_size=0.3, stratify=y, random_state=0)
    return Xtr, ytr, (100,)


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
          f"{'sparse s':>8s} {'ratio':>6s} {'same draws':>10s}")
    for name, load in (("digits", digits), ("one-hot", one_hot)):
        X, y, hidden = load()
        times, draws = [], []
        for rows in (X, sp.csr_matrix(X)):
            t0 = time.perf_counter()
            clf = SGMCMCMLPClassifier(hidden_layer_sizes=hidden, random_state=0).fit(rows, y)
            times.append(time.perf_counter() - t0)
            draws.append(clf.coef_samples_)
        same = np.array_equal(*draws)
        print(f"{name:8s} {X.shape[0]:6d} {X.shape[1]:5d} {np.mean(X != 0):7.3f} "
              f"{times[0]:8.2f} {times[1]:8.2f} {times[1] / times[0]:6.2f} {str(same):>10s}",
              flush=True)


if __name__ == "__main__":
    main()
