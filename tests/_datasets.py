"""Small real datasets the tests read, shipped in ``tests/data`` (as
scikit-learn ships its small datasets): a fresh clone has no ``../shared``,
and a test never reads it.

``australian_scale.gz``: LIBSVM's ``australian_scale`` (Statlog Australian
credit approval, UCI; 690 rows x 14 features scaled to [-1, 1], labels -1/+1),
the bytes of the benchmarks' copy (``data/australian_scale`` of the shared
folder) gzipped with ``gzip -n -9`` (sha256 of the decompressed file below;
provenance in ``tests/data/README.md``).

``a9a_4000.gz``: 4,000 rows of LIBSVM's ``a9a`` (UCI Adult, 123 binary
features, labels -1/+1), the lines of the benchmarks' copy at the row
indices ``numpy.random.default_rng(0).choice(32561, 4000, replace=False)``
in file order, gzipped the same way.
"""
import gzip
import hashlib
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data"
#: sha256 of the decompressed ``australian_scale`` (as the shared data's README)
AUSTRALIAN_SHA256 = "2cd070cb79b304b9f2397c04799fd49553a57caf5e8a14c13d99622886998e41"
#: sha256 of the decompressed ``a9a_4000``
A9A_4000_SHA256 = "dc5ee4f230bce1f103fb152c5a2302e0b291c1b775f111e8c2da9e01573d9f66"


def australian_scale(dense=True):
    """``(X, y)`` of ``australian_scale``: X (690, 14), dense float64 (CSR
    with ``dense=False``), y in {-1, +1} as in the file."""
    from sklearn.datasets import load_svmlight_file

    path = DATA / "australian_scale.gz"
    raw = gzip.decompress(path.read_bytes())
    if hashlib.sha256(raw).hexdigest() != AUSTRALIAN_SHA256:   # pragma: no cover
        raise RuntimeError(f"{path} is not the australian_scale the tests were written for.")
    X, y = load_svmlight_file(str(path), n_features=14)
    return (np.ascontiguousarray(X.toarray()) if dense else X), y


def a9a_4000():
    """``(X, y)`` of the 4,000-row ``a9a`` sample: X CSR (4000, 123) float64,
    y in {0, 1} (the file's +1)."""
    from sklearn.datasets import load_svmlight_file

    path = DATA / "a9a_4000.gz"
    raw = gzip.decompress(path.read_bytes())
    if hashlib.sha256(raw).hexdigest() != A9A_4000_SHA256:   # pragma: no cover
        raise RuntimeError(f"{path} is not the a9a sample the tests were written for.")
    X, y = load_svmlight_file(str(path), n_features=123)
    return X.tocsr(), (y > 0).astype(np.float64)
