"""The vectorised normal generator and the fused flat-vector SG-MCMC steps.

``NormalStream`` supplies the Gaussian noise of the network sampler on the
CPU, so its law is tested like a sampler's: moments, tails, the KS distance
and the independence of neighbouring outputs (lanes and Box-Muller pairs are
neighbours), each against a tolerance of a few Monte Carlo standard errors.
The fused kernels are tested against the same formulas written in numpy,
with the noise of a copy of the stream.

Break checks (run once by hand, each caught): no quadrant rotation (11
tests fail), no sin/cos swap (7), every lane seeded alike (7), u1 from 24
bits, a log or sin coefficient off by 10% (the reference test), ``1 - decay``
-> ``decay`` in the pSGLD kernel (10).
"""

import copy
import math
import pickle

import numpy as np
import pytest
from scipy import stats

from skbayes_sg._sampling import _flat_dynamics as flat_dynamics
from skbayes_sg._sampling._normal_stream import LANES, NormalStream

N_DRAWS = 4_000_000


@pytest.fixture(scope="module")
def draws():
    z = np.empty(N_DRAWS, dtype=np.float32)
    NormalStream(20261121).fill(z)
    return z.astype(np.float64)


def _reference_stream(seed, n_blocks):
    """The generator written again in numpy, in float64: splitmix64 seeding,
    16 xoshiro128++ lanes, exact log / cos / sin (an independent check of
    the C kernel's bit handling and polynomials)."""
    mask64 = (1 << 64) - 1
    x = seed
    state = np.empty((4, LANES), dtype=np.uint64)

    def splitmix():
        nonlocal x
        x = (x + 0x9E3779B97F4A7C15) & mask64
        z = x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask64
        return z ^ (z >> 31)

    for lane in range(LANES):
        a, b = splitmix(), splitmix()
        state[:, lane] = [a & 0xFFFFFFFF, a >> 32, b & 0xFFFFFFFF, b >> 32]
    s0, s1, s2, s3 = (state[i].astype(np.uint32) for i in range(4))

    def rotl(v, k):
        return (v << np.uint32(k)) | (v >> np.uint32(32 - k))

    def next_word():
        nonlocal s0, s1, s2, s3
        out = rotl(s0 + s3, 7) + s0
        t = s1 << np.uint32(9)
        s2 = s2 ^ s0
        s3 = s3 ^ s1
        s1 = s1 ^ s2
        s0 = s0 ^ s3
        s2 = s2 ^ t
        s3 = rotl(s3, 11)
        return out

    blocks = []
    with np.errstate(over="ignore"):
        for _ in range(n_blocks):
            k1, k2 = next_word(), next_word()
            u1 = ((k1 >> np.uint32(1)).astype(np.float64) + 0.5) * 2.0**-31
            r = np.sqrt(-2.0 * np.log(u1))
            q = (k2 >> np.uint32(30)).astype(np.float64)
            a = (((k2 & np.uint32(0xFFFFFF)).astype(np.float64) + 0.5) * 2.0**-24 - 0.5)
            angle = q * np.pi / 2 + a * np.pi / 2
            blocks.append(np.concatenate([r * np.cos(angle), r * np.sin(angle)]))
    return np.concatenate(blocks)


def test_matches_reference_implementation():
    n_blocks = 2000
    ref = _reference_stream(123456789, n_blocks)
    z = NormalStream(123456789).fill(np.empty(ref.size, np.float32))
    # float32 rounding of u1 (relative 6e-8) and of the results
    np.testing.assert_allclose(z, ref, rtol=2e-6, atol=2e-6)


def test_moments(draws):
    n = draws.size
    # standard errors of the sample mean, variance, third and fourth moments
    # of N(0, 1): 1, sqrt(2), sqrt(15), sqrt(96) over sqrt(n)
    assert abs(draws.mean()) < 5.0 / math.sqrt(n)
    assert abs(np.mean(draws**2) - 1.0) < 5.0 * math.sqrt(2.0 / n)
    assert abs(np.mean(draws**3)) < 5.0 * math.sqrt(15.0 / n)
    assert abs(np.mean(draws**4) - 3.0) < 5.0 * math.sqrt(96.0 / n)


@pytest.mark.parametrize("threshold", [1.0, 2.0, 3.0, 4.0, 4.5])
def test_tail_frequencies(draws, threshold):
    p = 2.0 * stats.norm.sf(threshold)
    freq = np.mean(np.abs(draws) > threshold)
    assert abs(freq - p) < 5.0 * math.sqrt(p * (1.0 - p) / draws.size), (freq, p)


def test_far_tail_is_reached():
    """Far tail: 5e7 draws hold ~10 with |z| > 5.2 (Poisson; P(count < 2)
    = 5e-4, P(count > 25) = 1e-5), and none beyond the largest radius the
    31-bit uniforms allow (6.67)."""
    stream = NormalStream(7)
    z = np.empty(1 << 22, dtype=np.float32)
    big = 0
    for _ in range(12):
        stream.fill(z)
        big += int(np.sum(np.abs(z) > 5.2))
        assert np.abs(z).max() < 6.67
    expected = 12 * z.size * 2.0 * stats.norm.sf(5.2)
    assert 2 <= big <= 25, (big, expected)


def test_kolmogorov_smirnov(draws):
    sub = draws[:1_000_000]
    d = stats.kstest(sub, "norm").statistic
    # the 0.001 critical value of the KS statistic is ~1.95 / sqrt(n)
    assert d < 1.95 / math.sqrt(sub.size), d


@pytest.mark.parametrize("lag", [1, 2, 15, LANES, 17, 2 * LANES, 3 * LANES])
def test_neighbours_are_uncorrelated(draws, lag):
    """Lag ``LANES`` pairs the two outputs of one Box-Muller transform;
    their squares share the radius, and are uncorrelated only when the
    angle is uniform on the whole circle."""
    a, b = draws[:-lag], draws[lag:]
    n = a.size
    assert abs(np.mean(a * b)) < 5.0 / math.sqrt(n)
    cov_sq = np.mean((a * a - 1.0) * (b * b - 1.0))  # sd 2 for independent N(0, 1)
    assert abs(cov_sq) < 5.0 * 2.0 / math.sqrt(n)


def test_signs_and_quadrants_balanced(draws):
    """The pairs (z0, z1) of one transform fall in the four quadrants of the
    plane equally often (chi-square, 3 degrees of freedom)."""
    blocks = draws[: (draws.size // (2 * LANES)) * 2 * LANES].reshape(-1, 2, LANES)
    z0, z1 = blocks[:, 0, :].ravel(), blocks[:, 1, :].ravel()
    counts = np.bincount(2 * (z0 > 0) + (z1 > 0), minlength=4)
    chi2 = stats.chisquare(counts).statistic
    assert chi2 < stats.chi2.ppf(0.999, 3), counts


def test_reproducible_state_and_pickle():
    a, b = NormalStream(3), NormalStream(3)
    x = a.fill(np.empty(100, np.float32))
    assert np.array_equal(x, b.fill(np.empty(100, np.float32)))
    assert not np.array_equal(x, NormalStream(4).fill(np.empty(100, np.float32)))
    state = a.get_state()
    assert state.shape == (4, LANES) and state.dtype == np.uint32
    c = NormalStream(0)
    c.set_state(state)
    d = pickle.loads(pickle.dumps(a))
    e = copy.deepcopy(a)
    nxt = a.fill(np.empty(77, np.float32))
    for other in (c, d, e):
        assert np.array_equal(other.fill(np.empty(77, np.float32)), nxt)


def test_fill_consumes_whole_blocks_and_float64_matches():
    """A fill of n numbers uses ceil(n / 32) blocks: the stream after it is
    the same for every n in one block count; float64 fills hold the float32
    values."""
    block = 2 * LANES
    ref = NormalStream(11).fill(np.empty(3 * block, np.float32))
    for n in (1, block - 1, block):
        s = NormalStream(11)
        head = s.fill(np.empty(n, np.float32))
        assert np.array_equal(head, ref[:n])
        assert np.array_equal(s.fill(np.empty(block, np.float32)), ref[block:2 * block])
    z64 = NormalStream(11).fill(np.empty(3 * block - 5, np.float64))
    assert np.array_equal(z64, ref[:3 * block - 5].astype(np.float64))


def test_bad_arguments():
    with pytest.raises(ValueError, match="seed"):
        NormalStream(-1)
    s = NormalStream(0)
    with pytest.raises(TypeError, match="float32 or float64"):
        s.fill(np.empty(4, np.int32))
    with pytest.raises(TypeError, match="1-D C-contiguous"):
        s.fill(np.empty((4, 4), np.float32)[:, 0])
    with pytest.raises(ValueError, match="shape"):
        s.set_state(np.ones((4, 3), np.uint32))
    with pytest.raises(ValueError, match="zeros"):
        s.set_state(np.zeros((4, LANES), np.uint32))
    with pytest.raises(TypeError, match="one dtype"):
        flat_dynamics.sgld_step(s, np.zeros(4, np.float32), np.zeros(4), 1.0, 0.0, 0.1, 0.1)


# ---------------------------------------------------------------------------
# fused kernels == their formulas (the formula sheet, doc/algorithms.rst),
# with the same noise
# ---------------------------------------------------------------------------
def _arrays(n, dtype, seed):
    rng = np.random.default_rng(seed)
    theta = rng.standard_normal(n).astype(dtype)
    buf = rng.standard_normal(n).astype(dtype)
    aux = (rng.random(n) + 0.1).astype(dtype)  # V > 0, or a momentum
    return theta, buf, aux


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 31, 32, 33, 1000])
def test_fused_steps_match_formulas(dtype, n):
    rtol = 2e-6 if dtype == np.float32 else 1e-12
    c, alpha, h, T = 7.0, 0.5, 1e-2, 0.8
    s = math.sqrt(2.0 * h * T)

    # SGLD
    theta, buf, _ = _arrays(n, dtype, 0)
    stream = NormalStream(5)
    xi = copy.deepcopy(stream).fill(np.empty(n, np.float64))
    t64, b64 = theta.astype(np.float64), buf.astype(np.float64)
    expect = t64 - h * (c * b64 + alpha * t64) + s * xi
    flat_dynamics.sgld_step(stream, theta, buf, c, alpha, h, s)
    np.testing.assert_allclose(theta, expect, rtol=rtol, atol=rtol)
    # the stream moved by exactly the blocks a fill of n would use
    ref = NormalStream(5)
    ref.fill(np.empty(n, np.float32))
    assert np.array_equal(stream.get_state(), ref.get_state())

    # pSGLD (decay a, lambda, g / n_rows)
    theta, buf, V = _arrays(n, dtype, 1)
    V *= 1e-2
    a, lam, inv_rows = 0.9, 1e-3, 0.25
    stream = NormalStream(6)
    xi = copy.deepcopy(stream).fill(np.empty(n, np.float64))
    t64, b64, v64 = (x.astype(np.float64) for x in (theta, buf, V))
    g = c * b64 + alpha * t64
    v_new = a * v64 + (1 - a) * (g * inv_rows) ** 2
    D = lam + np.sqrt(v_new)
    expect = t64 - h * g / D + s * xi / np.sqrt(D)
    flat_dynamics.psgld_step(stream, theta, V, buf, c, alpha, h, s, a, lam, inv_rows)
    np.testing.assert_allclose(V, v_new, rtol=rtol, atol=0)
    np.testing.assert_allclose(theta, expect, rtol=10 * rtol, atol=10 * rtol)

    # SGHMC (Euler-Maruyama), gradient at the old theta
    theta, buf, r = _arrays(n, dtype, 2)
    gamma = 3.0
    s_hmc = math.sqrt(2.0 * gamma * T * h)
    stream = NormalStream(7)
    xi = copy.deepcopy(stream).fill(np.empty(n, np.float64))
    t64, b64, r64 = (x.astype(np.float64) for x in (theta, buf, r))
    g = c * b64 + alpha * t64
    expect_theta = t64 + h * r64
    expect_r = (1 - h * gamma) * r64 - h * g + s_hmc * xi
    flat_dynamics.sghmc_step(stream, theta, r, buf, c, alpha, h, gamma, s_hmc)
    np.testing.assert_allclose(theta, expect_theta, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(r, expect_r, rtol=rtol, atol=rtol)


def test_sgld_kernel_stationary_law_on_a_gaussian():
    """With exact gradients of U = theta^2 / (2 sigma^2) (buf = theta), the
    SGLD kernel's chain has the exact finite-h stationary variance
    2hT / (1 - (1 - h/sigma^2)^2) (an AR(1) recursion), over many
    independent coordinates at once."""
    n, h, T, sigma2 = 20000, 0.05, 1.0, 2.0
    theta = np.zeros(n, np.float64)
    stream = NormalStream(99)
    for _ in range(400):  # (1 - h / sigma^2)^400 ~ 4e-5: forgotten start
        flat_dynamics.sgld_step(stream, theta, theta.copy(), 1.0 / sigma2, 0.0, h,
                                math.sqrt(2.0 * h * T))
    rho = 1.0 - h / sigma2
    var_exact = 2.0 * h * T / (1.0 - rho**2)
    # sample variance of n independent normals: sd var * sqrt(2 / n)
    assert abs(theta.var() / var_exact - 1.0) < 5.0 * math.sqrt(2.0 / n)
    assert abs(theta.mean()) < 5.0 * math.sqrt(var_exact / n)
