"""Helpers shared by the benchmark scripts (data paths, a9a, Gaussian KL, timing).

Not part of the package: the scripts import it as a sibling module
(``benchmarks/`` is put on ``sys.path`` by running a script from it).
"""
import os
import time
from pathlib import Path

import numpy as np

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"


def data_dir():
    """The shared data directory: ``$SKBAYES_SG_DATA`` or ``<repo>/../shared/data``."""
    env = os.environ.get("SKBAYES_SG_DATA")
    if env:
        return Path(env).expanduser().resolve()
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


def results_dir():
    """``benchmarks/results/`` (gitignored), created on first use."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    return RESULTS_DIR


def load_a9a(split="train", int32_indices=True):
    """a9a (LIBSVM) as CSR float64 with 123 features and labels in {0, 1}.

    Parameters
    ----------
    split : {"train", "test"}
        ``a9a.gz`` (32,561 rows) or ``a9a.t.gz`` (16,281 rows).
    """
    from sklearn.datasets import load_svmlight_file

    name = {"train": "a9a.gz", "test": "a9a.t.gz"}[split]
    path = data_dir() / name
    if not path.exists():
        raise FileNotFoundError(
            f"{path} not found: set SKBAYES_SG_DATA to the directory holding {name}")
    X, y = load_svmlight_file(str(path), n_features=123)
    X = X.tocsr()
    if int32_indices:
        X.indices = X.indices.astype(np.int32)
        X.indptr = X.indptr.astype(np.int32)
    y = (y > 0).astype(np.int64)  # labels +-1 -> 0/1
    return X, y


def covertype_like(n, d=54, seed=0):
    """Dense synthetic logistic data shaped like covertype (10 real + 44 binary columns)."""
    rng = np.random.default_rng(seed)
    X = np.empty((n, d))
    X[:, :10] = rng.standard_normal((n, 10))
    X[:, 10:] = (rng.random((n, d - 10)) < 0.1).astype(np.float64)
    w = rng.standard_normal(d) / np.sqrt(d)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(X @ w)))).astype(np.int64)
    return X, y


# ------------------------------------------------------------------ Gaussian KL
def gaussian_kl(m0, S0, m1, S1):
    """KL(N(m0, S0) || N(m1, S1)), closed form; m0, S0 may carry leading batch axes."""
    m0 = np.asarray(m0, dtype=np.float64)
    S0 = np.asarray(S0, dtype=np.float64)
    m1 = np.asarray(m1, dtype=np.float64)
    S1 = np.asarray(S1, dtype=np.float64)
    d = m1.shape[-1]
    S1inv = np.linalg.inv(S1)
    diff = m1 - m0
    trace = np.einsum("ij,...ji->...", S1inv, S0)
    maha = np.einsum("...i,ij,...j->...", diff, S1inv, diff)
    _, logdet0 = np.linalg.slogdet(S0)
    _, logdet1 = np.linalg.slogdet(S1)
    return 0.5 * (trace + maha - d + logdet1 - logdet0)


def fitted_gaussian_kl(samples, m1, S1):
    """KL of the Gaussian fitted to ``samples`` (mean, unbiased covariance) to N(m1, S1).

    samples : ndarray of shape (..., n_draws, d)
    """
    samples = np.asarray(samples, dtype=np.float64)
    m0 = samples.mean(axis=-2)
    c = samples - m0[..., None, :]
    S0 = np.einsum("...ki,...kj->...ij", c, c) / (samples.shape[-2] - 1)
    return gaussian_kl(m0, S0, m1, S1)


# ----------------------------------------------------------------------- timing
def median_time(fn, repeats, clock=time.perf_counter):
    """Median over ``repeats`` calls of ``fn`` timed with ``clock``."""
    times = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        times.append(clock() - t0)
    return float(np.median(times))



class tee_stdout:
    """Context manager: everything printed to stdout is also written to ``path``."""

    def __init__(self, path):
        self.path = Path(path)

    def __enter__(self):
        import sys

        self._file = open(self.path, "w", encoding="utf-8")
        self._stdout = sys.stdout
        outer = self

        class _Tee:
            def write(self, s):
                outer._stdout.write(s)
                outer._file.write(s)
                return len(s)

            def flush(self):
                outer._stdout.flush()
                outer._file.flush()

        sys.stdout = _Tee()
        return self

    def __exit__(self, *exc):
        import sys

        sys.stdout = self._stdout
        self._file.close()
        return False
