# distutils: language = c++
"""Compiled rank-normalised ESS and split R-hat, one parameter at a time.

The numpy functions of :mod:`._convergence` (``_z_scale``, ``_rhat_basic``,
``_ess_basic``, the tail ESS) are the definition and stay the reference; this
kernel computes the same numbers per parameter in one nogil loop, for the
fit's stopping rule and its post-fit warning, where they ran over every
parameter after every sampling round (10^6 parameters x 20 draws: 6.4 s of a
7.3 s one-pass fit in numpy).

Per parameter it sorts the split draws once (a radix sort; the bulk ranks, averaged over
ties as ``rankdata(method="average")``; Blom scores from a table), sorts the
draws folded about their median once more, and sums the autocovariances
lag by lag until Geyer's initial positive sequence ends.  That sum is
direct, O(chains x draws) a lag, and stops after ``MAX_DIRECT_PAIRS`` pairs
of lags: a parameter whose autocorrelation runs longer is flagged, and the
caller computes its ESS by FFT (numpy) instead, from the scores the kernel
hands it (no second sort).  A lag-1 autocorrelation above
``EARLY_FLAG_RHO1`` flags a parameter at once where the sequence could run
that long: an AR(1) chain's pairs are still ~0.2 at lag 64 there, so the
direct sums would run to the limit and be thrown away (on a 10^4-parameter
fit of 4 x 1,000 draws that mixed badly they were a third of the
diagnostics).  Either route gives the same ESS to rounding: the FFT is the
definition.
"""
from cython cimport floating
from libc.math cimport floor, sqrt, log10, fabs, isfinite, NAN, INFINITY
from libc.stdint cimport uint64_t
from libc.string cimport memcpy
from libcpp.pair cimport pair
from libcpp.vector cimport vector

import numpy as np

ctypedef pair[double, Py_ssize_t] Item

#: pairs of autocorrelation lags summed directly (beyond: flagged for the FFT)
cdef Py_ssize_t _MAX_DIRECT_PAIRS = 32
MAX_DIRECT_PAIRS = _MAX_DIRECT_PAIRS
#: a lag-1 autocorrelation above which the FFT is taken at once (0.1 ** (1 / 64))
cdef double _EARLY_FLAG_RHO1 = 0.965
EARLY_FLAG_RHO1 = _EARLY_FLAG_RHO1
# ``np.finfo(np.float64).resolution``: a parameter whose draws span less is constant
cdef double RESOLUTION = 1e-15


cdef enum:
    RADIX_BITS = 11
    RADIX_BUCKETS = 1 << RADIX_BITS


cdef inline uint64_t _order_key(double v) noexcept nogil:
    """The bits of a finite double as an unsigned integer in the same order
    (-0.0 just below +0.0: adjacent, so still one run of ties)."""
    cdef uint64_t u
    memcpy(&u, &v, 8)
    return ~u if u >> 63 else u | (<uint64_t> 1 << 63)


cdef void _radix_sort(const double* values, Py_ssize_t N, Item* items, uint64_t* keys,
                      uint64_t* keys_tmp, Py_ssize_t* idx, Py_ssize_t* idx_tmp,
                      Py_ssize_t* counts) noexcept nogil:
    """``items[i] = (values[j], j)`` in ascending order of the values (ties
    in any order: their scores are shared), by a least-significant-digit
    radix sort of the keys (6 passes of 11 bits, a pass skipped where every
    key has one digit: the sign and exponent of draws of one scale).  In
    place of ``std::sort`` of the pairs: 10^4 parameters of 4 x 1,000 draws
    took 3.9 s through ``bulk_ess_and_rhat`` instead of 5.2 s."""
    cdef Py_ssize_t i, b, shift, total
    cdef uint64_t* k_src = keys
    cdef uint64_t* k_dst = keys_tmp
    cdef Py_ssize_t* i_src = idx
    cdef Py_ssize_t* i_dst = idx_tmp
    cdef uint64_t* k_swap
    cdef Py_ssize_t* i_swap
    cdef Py_ssize_t digit
    for i in range(N):
        keys[i] = _order_key(values[i])
        idx[i] = i
    shift = 0
    while shift < 64:
        for b in range(RADIX_BUCKETS):
            counts[b] = 0
        for i in range(N):
            counts[(k_src[i] >> shift) & (RADIX_BUCKETS - 1)] += 1
        if counts[(k_src[0] >> shift) & (RADIX_BUCKETS - 1)] == N:
            shift += RADIX_BITS
            continue
        total = 0
        for b in range(RADIX_BUCKETS):
            digit = counts[b]
            counts[b] = total
            total += digit
        for i in range(N):
            digit = (k_src[i] >> shift) & (RADIX_BUCKETS - 1)
            k_dst[counts[digit]] = k_src[i]
            i_dst[counts[digit]] = i_src[i]
            counts[digit] += 1
        k_swap = k_src
        k_src = k_dst
        k_dst = k_swap
        i_swap = i_src
        i_src = i_dst
        i_dst = i_swap
        shift += RADIX_BITS
    for i in range(N):
        items[i].first = values[i_src[i]]
        items[i].second = i_src[i]


cdef void _scores(Item* items, Py_ssize_t N, const double* table, double* out) noexcept nogil:
    """Blom scores of sorted ``items`` at their original positions; a run of
    ties shares the score of its average rank (``table[first + last]``)."""
    cdef Py_ssize_t i = 0, j, k
    cdef double s
    while i < N:
        j = i
        while j + 1 < N and items[j + 1].first == items[i].first:
            j += 1
        s = table[i + j]
        for k in range(i, j + 1):
            out[items[k].second] = s
        i = j + 1


cdef double _rhat_basic(const double* x, Py_ssize_t M, Py_ssize_t h,
                        double* mv) noexcept nogil:
    """``sqrt((B/W + h - 1) / h)`` of M chains of h draws (``_rhat_basic``);
    ``mv``: M values of scratch (the chain means)."""
    cdef Py_ssize_t c, t
    cdef double mean, var, within = 0.0, grand = 0.0, between = 0.0, d
    for c in range(M):
        mean = 0.0
        for t in range(h):
            mean += x[c * h + t]
        mean /= h
        var = 0.0
        for t in range(h):
            d = x[c * h + t] - mean
            var += d * d
        within += var / (h - 1)
        mv[c] = mean
        grand += mean
    within /= M
    grand /= M
    for c in range(M):
        d = mv[c] - grand
        between += d * d
    between = h * between / (M - 1)
    return sqrt((between / within + h - 1) / h)


cdef double _ess_basic(const double* x, Py_ssize_t M, Py_ssize_t h, double* mv,
                       int* flag) noexcept nogil:
    """``_ess_basic`` of M chains of h draws (Geyer's initial positive and
    monotone sequences), autocovariances summed directly; ``flag[0] = 1``
    (and NaN returned) when the sequence runs past ``MAX_DIRECT_PAIRS``;
    ``mv``: M values of scratch (the chain means)."""
    cdef Py_ssize_t c, t, k, lag, k_max, size = M * h
    cdef double lo = INFINITY, hi = -INFINITY, v, d, mean_var = 0.0, var_plus
    cdef double grand = 0.0, spread = 0.0, head = 0.0, run_min = INFINITY
    cdef double r_even, r_odd, pair_sum, tail, tau, acc
    if h < 2:
        return NAN
    for t in range(size):
        v = x[t]
        if v < lo:
            lo = v
        if v > hi:
            hi = v
    if hi - lo < RESOLUTION:
        return <double> size
    for c in range(M):
        acc = 0.0
        for t in range(h):
            acc += x[c * h + t]
        mv[c] = acc / h
        grand += mv[c]
        acc = 0.0
        for t in range(h):
            d = x[c * h + t] - mv[c]
            acc += d * d
        mean_var += acc / h
    grand /= M
    mean_var = mean_var / M * h / (h - 1.0)
    var_plus = mean_var * (h - 1.0) / h
    if M > 1:
        for c in range(M):
            d = mv[c] - grand
            spread += d * d
        var_plus += spread / (M - 1)
    k_max = (h - 3) // 2
    if k_max < 0:
        k_max = 0
    k = 0
    while True:
        if k >= _MAX_DIRECT_PAIRS:
            flag[0] = 1
            return NAN
        r_even = 1.0 if k == 0 else _rho(x, M, h, mv, 2 * k, mean_var, var_plus)
        r_odd = _rho(x, M, h, mv, 2 * k + 1, mean_var, var_plus)
        if k == 0 and r_odd > _EARLY_FLAG_RHO1 and k_max >= _MAX_DIRECT_PAIRS:
            flag[0] = 1
            return NAN
        pair_sum = r_even + r_odd
        if pair_sum <= 0.0 or k == k_max:
            break
        if pair_sum < run_min:
            run_min = pair_sum
        head += run_min
        k += 1
    tail = r_even if (r_even > 0.0 or pair_sum >= 0.0) else 0.0
    tau = -1.0 + 2.0 * head + tail
    if tau < 1.0 / log10(<double> size):
        tau = 1.0 / log10(<double> size)
    return size / tau


cdef inline double _rho(const double* x, Py_ssize_t M, Py_ssize_t h, const double* mv,
                        Py_ssize_t lag, double mean_var, double var_plus) noexcept nogil:
    """The combined autocorrelation at ``lag``: ``1 - (W - mean acov) / var+``."""
    cdef Py_ssize_t c, t
    cdef double acov = 0.0, acc
    for c in range(M):
        acc = 0.0
        for t in range(h - lag):
            acc += (x[c * h + t] - mv[c]) * (x[c * h + t + lag] - mv[c])
        acov += acc / h
    acov /= M
    return 1.0 - (mean_var - acov) / var_plus


cdef inline double _quantile(const double* srt, Py_ssize_t N, double q) noexcept nogil:
    """``np.quantile(..., method="linear")`` of the sorted ``srt`` (numpy's
    arithmetic, so that indicators ``x <= q`` agree draw for draw)."""
    cdef double virtual = (N - 1) * q, g, a, b, diff
    cdef Py_ssize_t lo
    if virtual >= N - 1:
        return srt[N - 1]
    lo = <Py_ssize_t> floor(virtual)
    g = virtual - lo
    a = srt[lo]
    b = srt[lo + 1]
    diff = b - a
    if g >= 0.5:
        return b - diff * (1.0 - g)
    return a + diff * g


def rank_diagnostics(const floating[:, :, :] a, const double[::1] table, bint bulk,
                     bint tail, double[::1] ess_bulk, double[::1] rhat,
                     double[::1] ess_tail, int[::1] fallback, double[:, ::1] scores=None):
    """Bulk ESS and R-hat (``bulk``), tail ESS (``tail``) of (P, m, n) draws,
    into the given arrays; a parameter with a non-finite draw is skipped (its
    entries are left as they are: the caller's NaN).

    ``a`` may be any strided view, float32 or float64: the fit's
    (chains, draws, parameters) store transposed, not copied (a copy of 10^6
    parameters' draws cost a third of the diagnostics).

    ``table[j]`` is the Blom score of average rank ``(j + 2) / 2`` among the
    ``2 m (n // 2)`` split draws.  ``fallback[p]`` gets 1 where the bulk ESS
    needs the FFT, 2 where the tail ESS does (3: both); those entries are
    NaN.  ``scores`` (P, 2 m (n // 2)), if given, gets the rank-normalised
    split draws of each parameter flagged for the bulk FFT (the bits of
    ``_convergence._z_scale(_split_chains(a))``); its other rows are left.
    """
    cdef Py_ssize_t P = a.shape[0], m = a.shape[1], n = a.shape[2]
    cdef Py_ssize_t h = n // 2, M = 2 * m, Ns = M * h, Nf = m * n  # Nf >= Ns
    cdef Py_ssize_t p, c, t, i
    cdef double r_bulk, r_fold
    cdef int flag
    cdef bint keep_scores = scores is not None
    cdef vector[Item] items
    cdef vector[double] xs, z, work, srt, means
    cdef vector[Py_ssize_t] order, idx, idx_tmp, counts
    cdef vector[uint64_t] keys, keys_tmp
    if h < 2:
        raise ValueError("rank_diagnostics needs at least 4 draws per chain")
    items.resize(Nf)
    xs.resize(Ns)
    z.resize(Ns)
    work.resize(Ns)
    srt.resize(Nf)
    order.resize(Ns)
    idx.resize(Nf)
    idx_tmp.resize(Nf)
    keys.resize(Nf)
    keys_tmp.resize(Nf)
    counts.resize(RADIX_BUCKETS)
    means.resize(M)
    with nogil:
        for p in range(P):
            if not _split_chains(a, p, &xs[0]):
                continue
            flag = 0
            if bulk:
                _radix_sort(&xs[0], Ns, &items[0], &keys[0], &keys_tmp[0], &idx[0],
                            &idx_tmp[0], &counts[0])
                _scores(&items[0], Ns, &table[0], &z[0])
                r_bulk = _rhat_basic(&z[0], M, h, &means[0])
                ess_bulk[p] = _ess_basic(&z[0], M, h, &means[0], &flag)
                if flag:
                    fallback[p] |= 1
                    if keep_scores:
                        for i in range(Ns):
                            scores[p, i] = z[i]
                r_fold = _folded_rhat(&items[0], &srt[0], &order[0], Ns, &table[0], &work[0],
                                      M, h, &means[0])
                # np.maximum: NaN (constant draws) wins
                if r_bulk != r_bulk or r_fold != r_fold:
                    rhat[p] = NAN
                else:
                    rhat[p] = r_bulk if r_bulk > r_fold else r_fold
            if tail:
                # the quantiles of all m n draws (an odd n keeps its middle
                # draw; an even one has the split draws' sort)
                if not bulk or Nf != Ns:
                    for c in range(m):
                        for t in range(n):
                            srt[c * n + t] = a[p, c, t]
                    _radix_sort(&srt[0], Nf, &items[0], &keys[0], &keys_tmp[0], &idx[0],
                                &idx_tmp[0], &counts[0])
                    for i in range(Nf):
                        srt[i] = items[i].first
                flag = 0
                ess_tail[p] = _tail_ess(&srt[0], Nf, &xs[0], &work[0], M, h, &means[0], &flag)
                if flag:
                    fallback[p] |= 2


cdef bint _split_chains(const floating[:, :, :] a, Py_ssize_t p, double* xs) noexcept nogil:
    """Parameter ``p``'s draws as split chains into ``xs`` (first halves of
    every chain, then second halves); False (nothing written) where one of
    its draws is not finite."""
    cdef Py_ssize_t c, t, m = a.shape[1], n = a.shape[2], h = a.shape[2] // 2
    for c in range(m):
        for t in range(n):
            if not isfinite(a[p, c, t]):
                return False
    for c in range(m):
        for t in range(h):
            xs[c * h + t] = a[p, c, t]
            xs[(m + c) * h + t] = a[p, c, n - h + t]
    return True


cdef double _folded_rhat(Item* items, double* srt, Py_ssize_t* order, Py_ssize_t Ns,
                         const double* table, double* work, Py_ssize_t M, Py_ssize_t h,
                         double* means) noexcept nogil:
    """The split R-hat of the draws folded about their median, from
    ``items`` (the split draws sorted, with their positions; overwritten):
    Ns is even, np.median's arithmetic, as ArviZ's tail R-hat.  The sorted
    halves folded are two ascending runs, merged in linear time."""
    cdef Py_ssize_t i, lo = Ns // 2 - 1, hi = Ns // 2
    cdef double med = (items[Ns // 2 - 1].first + items[Ns // 2].first) / 2.0
    for i in range(Ns):
        srt[i] = items[i].first
        order[i] = items[i].second
    for i in range(Ns):
        if hi >= Ns or (lo >= 0 and fabs(srt[lo] - med) <= fabs(srt[hi] - med)):
            items[i].first = fabs(srt[lo] - med)
            items[i].second = order[lo]
            lo -= 1
        else:
            items[i].first = fabs(srt[hi] - med)
            items[i].second = order[hi]
            hi += 1
    _scores(items, Ns, table, work)
    return _rhat_basic(work, M, h, means)


cdef double _tail_ess(const double* srt, Py_ssize_t Nf, const double* xs, double* work,
                      Py_ssize_t M, Py_ssize_t h, double* means, int* flag) noexcept nogil:
    """The tail ESS: the smaller ESS of the indicators of the split draws
    ``xs`` at or below the 5% and the 95% quantiles of all ``Nf`` draws
    (``srt``, sorted); NaN and ``flag[0] = 1`` where either needs the FFT."""
    cdef Py_ssize_t i, t, Ns = M * h
    cdef double q, e, e_lo = NAN, e_hi = NAN
    cdef int one = 0
    for i in range(2):
        q = _quantile(srt, Nf, 0.05 if i == 0 else 0.95)
        for t in range(Ns):
            work[t] = 1.0 if xs[t] <= q else 0.0
        one = 0
        e = _ess_basic(work, M, h, means, &one)
        if one:
            flag[0] = 1
        if i == 0:
            e_lo = e
        else:
            e_hi = e
    if e_lo != e_lo or e_hi != e_hi:
        return NAN
    return e_lo if e_lo < e_hi else e_hi


def score_table(Py_ssize_t N):
    """Blom scores ``ndtri((r - 3/8) / (N + 1/4))`` of the average ranks
    ``r = (j + 2) / 2``, j = 0 .. 2N - 2 (the first and last 0-based
    positions of a run of ties summed), as ``_convergence._z_scale``."""
    from scipy.special import ndtri
    j = np.arange(2 * N - 1, dtype=np.float64)
    return np.ascontiguousarray(ndtri((0.5 * (j + 2.0) - 0.375) / (N + 0.25)))
