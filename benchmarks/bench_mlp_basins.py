"""Can the network's draws say how many basins its chains visit?

Issue 40 asks ``summary()`` to count the basins.  A basin that matters to
the prediction shows in function space: chains in different basins should
disagree on rows they were not fitted on by more than one chain disagrees
with itself.  This measures that, for both candidates of
``temperature="auto"`` (the posterior, ``T = 1``, and the cold model,
``T = 0.02`` with ``prior_scale`` doubled; chains started at their own Adam
modes, 200 warm-up steps: ``candidate_settings``), fitted on the 70 % training
split of ``bench_mlp_defaults.py`` and read on its 30 % test rows:

- four chains of 100 draws, started at four modes (four basins by
  construction, as a deep ensemble's members);
- one chain of 400 draws, cut into four consecutive quarters (one start).

For each chain (quarter) ``c``, ``P_c`` is the model average of its second
half on the test rows, and ``W_c`` the total-variation distance between the
model averages of its two halves (mean over rows); printed: the ``W_c`` and
the ratios ``TV(P_a, P_b) / sqrt(W_a W_b)`` over pairs.  Were the four modes
distinct basins that the chains do not leave, the first set of ratios would
stand above the second.

Run: ``PYTHONPATH=. python benchmarks/bench_mlp_basins.py`` (about a minute;
needs torch).
"""
import warnings

import numpy as np
from sklearn.datasets import load_breast_cancer, load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from skbayes_sg.neural_network import SGMCMCMLPClassifier
from skbayes_sg.neural_network._network_temperature import candidate_settings

DATA = {"digits": load_digits, "cancer": load_breast_cancer}


def chain_probabilities(clf, X, pieces, draws):
    """Class probabilities of every draw on ``X``, shape (pieces, draws, rows, classes)."""
    lp = np.empty((pieces * draws, X.shape[0], len(clf.classes_)))
    for d, r, block in clf._pointwise_log_proba(X):
        lp[d, r] = block
    return np.exp(lp).reshape(pieces, draws, X.shape[0], -1)


def disagreement(P):
    """``W`` (each piece's halves) and the pairwise ratios of the docstring."""
    m, n = P.shape[:2]
    h = n // 2

    def tv(a, b):
        return 0.5 * np.abs(a - b).sum(axis=-1).mean()
    W = np.array([tv(P[c, :h].mean(0), P[c, h:].mean(0)) for c in range(m)])
    ratios = [tv(P[a, h:].mean(0), P[b, h:].mean(0)) / np.sqrt(W[a] * W[b])
              for a in range(m) for b in range(a + 1, m)]
    return W, np.array(ratios)


def main():
    warnings.simplefilter("ignore")
    base = SGMCMCMLPClassifier(hidden_layer_sizes=(100,), random_state=0)
    print(f"{'data':8s} {'model':10s} {'chains':22s} {'W (halves, TV)':30s} pairwise ratios")
    for name, loader in DATA.items():
        X, y = loader(return_X_y=True)
        X = StandardScaler().fit_transform(X)
        Xtr, Xte, ytr, _ = train_test_split(X, y, test_size=0.3, stratify=y, random_state=0)
        for label, settings in zip(("posterior", "cold"), candidate_settings(base)):
            runs = {"4 chains, 4 modes": dict(n_chains=4, n_samples=100),
                    "1 chain in quarters": dict(n_chains=1, n_samples=400)}
            for what, shape in runs.items():
                clf = SGMCMCMLPClassifier(hidden_layer_sizes=(100,), random_state=0,
                                          **settings, **shape).fit(Xtr, ytr)
                P = chain_probabilities(clf, Xte, 4, 100)
                W, ratios = disagreement(P)
                print(f"{name:8s} {label:10s} {what:22s} {np.array2string(W, precision=4):30s} "
                      f"{ratios.min():.2f}-{ratios.max():.2f} (mean {ratios.mean():.2f})",
                      flush=True)


if __name__ == "__main__":
    main()
