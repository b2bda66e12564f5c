"""Where a fit's draws go: one preallocated array, a memory budget, running moments.

The chains of a fit write their kept draws straight into one array of shape
``(n_chains, capacity, dim)`` (:class:`DrawStore`), in ``float64`` or
``float32``.  The array is sized to the memory budget up front and never
copied: ``numpy.empty`` of a large size maps pages that the operating system
commits only when they are written, so the resident memory is that of the
draws actually kept (and no stacked or concatenated copy ever exists).

When the draws would outgrow the budget the store keeps every other one of
those it holds (in place) and, from then on, every ``stride``-th draw the
chains send: the fit says so (``thin_`` and a warning).  Whatever is stored,
the posterior mean and variance are running moments over *every* draw the
chains kept (at the fit's ``thin``), accumulated in ``float64``.

Each chain writes through its own :class:`ChainSink` (threads of one
process: no copies; a chain run in another process returns its draws and
the pool writes them for it).
"""
import os

import numpy as np

#: ``draws_dtype="auto"`` stores float32 from this many parameters on (its
#: relative rounding, 6e-8, is far below any posterior sd of interest)
FLOAT32_FROM_DIM = 10_000
#: ``draws_memory_limit="auto"``: a quarter of the physical memory, at most this (GiB)
AUTO_BUDGET_GIB = 4.0
#: the store keeps at least this many draws per chain whatever the budget
MIN_STORED = 16


def physical_memory():
    """Bytes of physical memory (16 GiB when the system does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 16 << 30


def resolve_budget(draws_memory_limit):
    """The draws' memory budget in bytes (``"auto"``, or a number of GiB)."""
    if draws_memory_limit == "auto":
        return int(min(AUTO_BUDGET_GIB * (1 << 30), physical_memory() // 4))
    return int(float(draws_memory_limit) * (1 << 30))


def resolve_dtype(draws_dtype, dim):
    """``numpy.float32`` or ``numpy.float64`` for ``draws_dtype`` at ``dim`` parameters."""
    if draws_dtype == "auto":
        return np.dtype(np.float32 if dim >= FLOAT32_FROM_DIM else np.float64)
    return np.dtype(draws_dtype)


class DrawStore:
    """The kept draws of every chain of one fit.

    Parameters
    ----------
    n_chains, dim : int
    dtype : numpy dtype
        Storage type of the draws (the moments are float64 whatever it is).
    max_bytes : int
        Budget of the stored draws.
    expected : int or None
        Draws per chain the fit will keep, when known (fixed ``n_samples``):
        the array is then no larger than that.
    """

    def __init__(self, n_chains, dim, dtype, max_bytes, expected=None):
        self.dtype = np.dtype(dtype)
        row_bytes = n_chains * dim * self.dtype.itemsize
        capacity = max(MIN_STORED, int(max_bytes // max(row_bytes, 1)))
        if expected is not None:
            capacity = min(capacity, max(int(expected), 1))
        self.array = np.empty((n_chains, capacity, dim), dtype=self.dtype)
        self.max_bytes = int(max_bytes)
        self.stride = 1                              # stores every stride-th draw
        self.seen = np.zeros(n_chains, dtype=np.int64)    # draws sent, per chain
        self.stored = np.zeros(n_chains, dtype=np.int64)  # draws held, per chain
        # moments about each chain's first draw (no cancellation when the
        # mean is far from zero): sum of d and of d^2, d = draw - origin
        self.origin = np.zeros((n_chains, dim))
        self.sum = np.zeros((n_chains, dim))
        self.sum_sq = np.zeros((n_chains, dim))

    @property
    def capacity(self):
        return self.array.shape[1]

    def reserve(self, n_new):
        """Make room for ``n_new`` more draws per chain: halve what is held
        (doubling ``stride``) until they fit the array."""
        while True:
            need = self.stored.max() + _count_stored(self.seen.max(), n_new, self.stride)
            if need <= self.capacity:
                return
            self._halve()

    def _halve(self):
        # keep the held draws at even positions (global indices multiple of
        # 2 stride), moved down in blocks [i, 2i) <- [2i, 4i) that never overlap
        for c in range(self.array.shape[0]):
            m = int(self.stored[c])
            a = self.array[c]
            i = 1
            while i < (m + 1) // 2:
                j = min(2 * i, (m + 1) // 2)
                a[i:j] = a[2 * i:2 * j:2]
                i = j
            self.stored[c] = (m + 1) // 2
        self.stride *= 2

    def sink(self, chain):
        """The writer of one chain."""
        return ChainSink(self, chain)

    def draws(self):
        """The stored draws, ``(n_chains, n_stored, dim)`` (a view)."""
        return self.array[:, :int(self.stored.min())]

    def moments(self):
        """Posterior mean and variance per parameter over every draw sent
        (all chains pooled), float64."""
        n = self.seen[:, None].astype(np.float64)
        total = float(self.seen.sum())
        mean_c = self.origin + self.sum / np.maximum(n, 1.0)
        mean = (mean_c * n).sum(axis=0) / max(total, 1.0)
        # sum over chains of sum_t (x - mean)^2, from each chain's shifted sums
        shift = self.origin - mean
        ss = (self.sum_sq + 2.0 * shift * self.sum + n * shift * shift).sum(axis=0)
        return mean, ss / max(total, 1.0)


def _count_stored(start, n, stride):
    """How many of the global indices ``start .. start + n - 1`` are multiples of ``stride``."""
    if n <= 0:
        return 0
    first = (-start) % stride
    return 0 if first >= n else (n - 1 - first) // stride + 1


class ChainSink:
    """Writes one chain's kept draws into its :class:`DrawStore`.

    ``owner`` is the process the store lives in: a chain run elsewhere
    cannot write into it and returns its draws instead.
    """

    def __init__(self, store, chain):
        self.store = store
        self.chain = chain
        self.owner = os.getpid()

    def __reduce__(self):
        # sent to another process it carries no store (and cannot write)
        return (_remote_sink, (self.chain, self.owner))

    @property
    def local(self):
        """Whether this chain can write into the store (same process, and the
        store came along: a pickled sink carries none)."""
        return self.store is not None and os.getpid() == self.owner

    def write(self, rows):
        """Add the chain's next draws (``(r, dim)``, float64)."""
        st, c = self.store, self.chain
        r = rows.shape[0]
        if r == 0:
            return
        start = int(st.seen[c])
        if start == 0:
            st.origin[c] = rows[0]
        d = rows - st.origin[c]
        st.sum[c] += d.sum(axis=0)
        st.sum_sq[c] += np.einsum("ij,ij->j", d, d)
        first = (-start) % st.stride
        pick = rows[first::st.stride]
        j = int(st.stored[c])
        st.array[c, j:j + pick.shape[0]] = pick
        st.stored[c] = j + pick.shape[0]
        st.seen[c] = start + r


def _remote_sink(chain, owner):
    sink = ChainSink.__new__(ChainSink)
    sink.store, sink.chain, sink.owner = None, chain, owner
    return sink
