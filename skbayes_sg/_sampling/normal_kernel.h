/*
 * Fast standard-normal fills for the SG-MCMC noise of large parameter vectors.
 *
 * Written by hand (not generated).  Used by _normal_stream.pyx.
 *
 * Generator: SKB_NORMAL_LANES independent xoshiro128++ streams (Blackman and
 * Vigna, "Scrambled linear pseudorandom number generators", 2021), stored
 * structure-of-arrays so that the compiler runs all lanes in one vector.
 * Each lane gives two 32-bit words per pair of normals:
 *   - u1 = (31 bits + 1/2) * 2^-31 in (0, 1): radius r = sqrt(-2 log u1)
 *     (largest |z| is 6.66; torch's float32 generator stops at 5.77);
 *   - a uniform angle: quadrant from the top 2 bits of the second word, the
 *     offset in [-pi/4, pi/4) from its low 24 bits;
 * and returns (r cos, r sin) (Box-Muller).  log, sin and cos are the Cephes
 * single-precision polynomials on their reduced ranges (errors of a few
 * ulp), written branch-free so that GCC vectorises the loop.
 *
 * The fill functions are compiled for AVX-512, AVX2/FMA and baseline x86-64
 * (target_clones; the loader picks the best one for the CPU at run time).
 * Elsewhere (other compilers, architectures or C libraries) they are
 * compiled once, for the build's default target.
 */
#ifndef SKB_NORMAL_KERNEL_H
#define SKB_NORMAL_KERNEL_H

#include <stdint.h>
#include <string.h>
#include <math.h>

#define SKB_NORMAL_LANES 16
#define SKB_NORMAL_BLOCK (2 * SKB_NORMAL_LANES)

/* ifunc-based clones: GCC >= 11 (x86-64-v3/v4 names) on x86-64 with glibc */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && defined(__x86_64__) \
    && defined(__GLIBC__)
#define SKB_NORMAL_CLONES \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SKB_NORMAL_CLONES
#endif

#if defined(__GNUC__)
#define SKB_ALWAYS_INLINE inline __attribute__((always_inline))
#define SKB_MAYBE_UNUSED __attribute__((unused))
#else
#define SKB_ALWAYS_INLINE inline
#define SKB_MAYBE_UNUSED
#endif

typedef struct {
    uint32_t s[4][SKB_NORMAL_LANES];
} skb_normal_state;

static SKB_ALWAYS_INLINE uint32_t skb_rotl32(uint32_t x, int k)
{
    return (x << k) | (x >> (32 - k));
}

static SKB_ALWAYS_INLINE float skb_as_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static SKB_ALWAYS_INLINE uint32_t skb_as_uint(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* splitmix64: expands one 64-bit seed into the lane states. */
static inline uint64_t skb_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline void skb_normal_seed(skb_normal_state *st, uint64_t seed)
{
    uint64_t x = seed;
    for (int l = 0; l < SKB_NORMAL_LANES; l++) {
        uint64_t a = skb_splitmix64(&x), b = skb_splitmix64(&x);
        st->s[0][l] = (uint32_t)a;
        st->s[1][l] = (uint32_t)(a >> 32);
        st->s[2][l] = (uint32_t)b;
        st->s[3][l] = (uint32_t)(b >> 32);
        if ((a | b) == 0)  /* the all-zero state is a fixed point */
            st->s[0][l] = 1u;
    }
}

/* One block: SKB_NORMAL_BLOCK standard normals into z. */
static SKB_ALWAYS_INLINE void skb_normal_block(uint32_t s[4][SKB_NORMAL_LANES],
                                               float *restrict z)
{
    uint32_t k1[SKB_NORMAL_LANES], k2[SKB_NORMAL_LANES];
    for (int l = 0; l < SKB_NORMAL_LANES; l++) {
        uint32_t s0 = s[0][l], s1 = s[1][l], s2 = s[2][l], s3 = s[3][l], t;
        /* xoshiro128++, twice */
        k1[l] = skb_rotl32(s0 + s3, 7) + s0;
        t = s1 << 9;
        s2 ^= s0; s3 ^= s1; s1 ^= s2; s0 ^= s3; s2 ^= t; s3 = skb_rotl32(s3, 11);
        k2[l] = skb_rotl32(s0 + s3, 7) + s0;
        t = s1 << 9;
        s2 ^= s0; s3 ^= s1; s1 ^= s2; s0 ^= s3; s2 ^= t; s3 = skb_rotl32(s3, 11);
        s[0][l] = s0; s[1][l] = s1; s[2][l] = s2; s[3][l] = s3;
    }
    for (int l = 0; l < SKB_NORMAL_LANES; l++) {
        /* log(u1), u1 in (0, 1): u1 = m 2^e with m in [sqrt(1/2), sqrt(2)) */
        float u1 = ((float)(int32_t)(k1[l] >> 1) + 0.5f) * 0x1p-31f;
        uint32_t bits = skb_as_uint(u1);
        int32_t e = (int32_t)(bits >> 23) - 127;
        float m = skb_as_float((bits & 0x007fffffu) | 0x3f800000u);
        /* m > sqrt(2): halve m through its exponent field, e += 1 (no branch) */
        uint32_t big = (uint32_t)(m > 1.41421356f);
        m = skb_as_float(skb_as_uint(m) - (big << 23));
        e += (int32_t)big;
        float x = m - 1.0f, x2 = x * x;
        float p = 7.0376836292E-2f;
        p = p * x - 1.1514610310E-1f;
        p = p * x + 1.1676998740E-1f;
        p = p * x - 1.2420140846E-1f;
        p = p * x + 1.4249322787E-1f;
        p = p * x - 1.6668057665E-1f;
        p = p * x + 2.0000714765E-1f;
        p = p * x - 2.4999993993E-1f;
        p = p * x + 3.3333331174E-1f;
        float fe = (float)e;
        float lg = x * x2 * p - 2.12194440e-4f * fe - 0.5f * x2 + x + 0.693359375f * fe;
        float r = sqrtf(-2.0f * lg);

        /* angle = q pi/2 + a, q uniform in {0..3}, a uniform in [-pi/4, pi/4) */
        uint32_t q = k2[l] >> 30;
        float a = ((float)(int32_t)(k2[l] & 0x00ffffffu) + 0.5f) * 0x1p-24f;
        a = (a - 0.5f) * 1.5707963267948966f;
        float a2 = a * a;
        float sn = ((-1.9515295891E-4f * a2 + 8.3321608736E-3f) * a2
                    - 1.6666654611E-1f) * a2 * a + a;
        float cs = ((2.443315711809948E-5f * a2 - 1.388731625493765E-3f) * a2
                    + 4.166664568298827E-2f) * a2 * a2 - 0.5f * a2 + 1.0f;
        /* rotate (cos a, sin a) by q quarter turns: swap when q is odd, then
           cos flips sign for q in {1, 2} and sin for q in {2, 3} */
        uint32_t swap = 0u - (q & 1u);
        uint32_t cb = skb_as_uint(cs), sb = skb_as_uint(sn);
        uint32_t A = (sb & swap) | (cb & ~swap);
        uint32_t B = (cb & swap) | (sb & ~swap);
        A ^= ((q ^ (q >> 1)) & 1u) << 31;
        B ^= (q >> 1) << 31;
        z[l] = r * skb_as_float(A);
        z[SKB_NORMAL_LANES + l] = r * skb_as_float(B);
    }
}

/* out[0:n] = standard normals (float32). */
SKB_NORMAL_CLONES SKB_MAYBE_UNUSED
static void skb_normal_fill_f32(skb_normal_state *st, float *out, int64_t n)
{
    uint32_t s[4][SKB_NORMAL_LANES];
    memcpy(s, st->s, sizeof s);
    int64_t i = 0;
    for (; i + SKB_NORMAL_BLOCK <= n; i += SKB_NORMAL_BLOCK)
        skb_normal_block(s, out + i);
    if (i < n) {  /* the rest of the last block is discarded */
        float tmp[SKB_NORMAL_BLOCK];
        skb_normal_block(s, tmp);
        memcpy(out + i, tmp, (size_t)(n - i) * sizeof(float));
    }
    memcpy(st->s, s, sizeof s);
}

/* out[0:n] = the same float32 normals, stored as float64. */
SKB_NORMAL_CLONES SKB_MAYBE_UNUSED
static void skb_normal_fill_f64(skb_normal_state *st, double *out, int64_t n)
{
    uint32_t s[4][SKB_NORMAL_LANES];
    float tmp[SKB_NORMAL_BLOCK];
    memcpy(s, st->s, sizeof s);
    for (int64_t i = 0; i < n; i += SKB_NORMAL_BLOCK) {
        int64_t len = n - i < SKB_NORMAL_BLOCK ? n - i : SKB_NORMAL_BLOCK;
        skb_normal_block(s, tmp);
        for (int64_t j = 0; j < len; j++)
            out[i + j] = (double)tmp[j];
    }
    memcpy(st->s, s, sizeof s);
}

#endif /* SKB_NORMAL_KERNEL_H */
