"""Small real datasets the tests read, shipped in ``tests/data`` (as
scikit-learn ships its small datasets): a fresh clone has no ``../shared``,
and a test never reads it.

``australian_scale.gz``: LIBSVM's ``australian_scale`` (Statlog Australian
credit approval, UCI; 690 rows x 14 features scaled to [-1, 1], labels -1/+1),
the bytes of the benchmarks' copy (``data/australian_scale`` of the shared
folder) gzipped with ``gzip -n -9`` (sha256 of the decompressed file below;
provenance in ``tests/data/README.md``).
"""
import gzip
import hashlib
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parent / "data"
#: sha256 of the decompressed ``australian_scale`` (as the shared data's README)
AUSTRALIAN_SHA256 = "2cd070cb79b304b9f2397c04799fd49553a57caf5e8a14c13d99622886998e41"


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
