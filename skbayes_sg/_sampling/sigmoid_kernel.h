/*
 * The logistic sigmoid and softplus of a block of linear predictors,
 * vectorised: the full-data passes of the logistic model (FullGradient, a
 * lockstep group's pass) compute the predictors of a block of rows first,
 * then their sigmoids here (and, at a Metropolis trajectory's end, their
 * softplus), then scatter.  glibc's scalar exp took a fifth of a default
 * d = 10^4 logistic fit, log1p and exp of the potential another 6 %; these
 * loops run in SIMD lanes.
 *
 * Written by hand (not generated).  Used through _estimators.pxd.
 *
 * sigmoid(z) = (z >= 0 ? 1 : e) / (1 + e) and softplus(z) = max(z, 0) +
 * log1p(e) with e = exp(-|z|), the formulas of _models.pxd's scalar ones.
 * exp(x) for x <= 0: x = n ln2 + r with |r| <= ln2 / 2 (n by the 1.5 * 2^52
 * rounding trick, ln2 in two parts), exp(r) by its Taylor polynomial of
 * degree 12 (truncation below 2e-16 there), times 2^n added to the exponent
 * bits; below -708 (where 2^n would leave the normal range) the value is 0.
 * log1p(e) for e in [0, 1]: 2 atanh(s), s = e / (2 + e) in [0, 1/3], by its
 * odd series.  Both within 8e-16 of expit / logaddexp
 * (test_sigmoid_kernel.py).
 *
 * No fused multiply-adds and no trapping assumptions (the pragma below):
 * every clone, and the numpy twins of the tests, give the same bits.
 * Compiled for AVX-512, AVX2 and baseline x86-64 (target_clones, picked by
 * the loader for the CPU) with GCC on x86-64 glibc; once, for the build's
 * default target, elsewhere.
 */
#ifndef SKB_SIGMOID_KERNEL_H
#define SKB_SIGMOID_KERNEL_H

#include <stdint.h>
#include <string.h>
#include <math.h>

#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 && defined(__x86_64__) \
    && defined(__GLIBC__)
#define SKB_SIGMOID_CLONES \
    __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SKB_SIGMOID_CLONES
#endif

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
/* selects need no branches (the loop vectorises); a*b+c stays two roundings
   in every clone (the same bits everywhere) */
#pragma GCC optimize ("no-trapping-math", "fp-contract=off")
#elif defined(__clang__)
/* clang contracts a*b+c within a statement by default where FMA exists
   (arm64 always): off, for the same bits */
#pragma STDC FP_CONTRACT OFF
#endif

static inline double skb_exp_nonpositive(double x)
{
    const double shift = 6755399441055744.0;          /* 1.5 * 2^52 */
    const double log2e = 1.4426950408889634;
    const double ln2_hi = 0.6931471805598903;         /* ln2 in two parts */
    const double ln2_lo = 5.497923018708371e-14;
    double xc = x < -708.0 ? -708.0 : x;
    double t = xc * log2e + shift;                    /* n in t's low bits */
    double n = t - shift;
    double r = (xc - n * ln2_hi) - n * ln2_lo;
    double p = 1.0 / 479001600.0;                     /* 1 / 12! */
    int64_t bits, tbits;
    double out;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    p = p * r + 1.0;
    p = p * r + 1.0;
    memcpy(&tbits, &t, sizeof(double));
    memcpy(&bits, &p, sizeof(double));
    bits += (int64_t)((uint64_t)(tbits - (int64_t)0x4338000000000000LL) << 52);
    memcpy(&out, &bits, sizeof(double));
    return out * (x < -708.0 ? 0.0 : 1.0);
}

/* out[k] = sigmoid(z[k]) for k < n (out may be z) */
static SKB_SIGMOID_CLONES void skb_sigmoid_block(const double *z, int64_t n, double *out)
{
    int64_t k;
    for (k = 0; k < n; k++) {
        double v = z[k];
        double e = skb_exp_nonpositive(-fabs(v));
        out[k] = (v >= 0.0 ? 1.0 : e) / (1.0 + e);
    }
}

/* log(1 + e) for 0 <= e <= 1: 2 atanh(s) with s = e / (2 + e) in [0, 1/3],
   its odd series to s^33 (the next term's share below 2e-17) */
static inline double skb_log1p_unit(double e)
{
    double s = e / (2.0 + e);
    double s2 = s * s;
    double p = 1.0 / 33.0;
    int j;
    for (j = 31; j >= 1; j -= 2)
        p = p * s2 + 1.0 / (double)j;
    return 2.0 * s * p;
}

/* out[k] = log(1 + exp(z[k])) for k < n, as _models.pxd's softplus:
   max(z, 0) + log1p(exp(-|z|)) (out may be z) */
static SKB_SIGMOID_CLONES void skb_softplus_block(const double *z, int64_t n, double *out)
{
    int64_t k;
    for (k = 0; k < n; k++) {
        double v = z[k];
        double e = skb_exp_nonpositive(-fabs(v));
        out[k] = (v > 0.0 ? v : 0.0) + skb_log1p_unit(e);
    }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

#endif  /* SKB_SIGMOID_KERNEL_H */
