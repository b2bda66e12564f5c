/*
 * One-pass SG-MCMC updates of a flat parameter vector (CPU), with the
 * Gaussian noise generated in registers by normal_kernel.h.
 *
 * Written by hand (not generated).  Used by _flat_dynamics.pyx.
 *
 * The gradient estimate is passed as ``g_i = c * buf_i + alpha * theta_i``
 * (``buf`` the minibatch sum, ``c`` its scale, ``alpha`` the exact prior
 * term), so it is never stored.  One sweep reads and writes every array once
 * instead of the five to nine sweeps of the same update written with torch
 * operations.  The noise is the stream's next ``ceil(n / 32)`` blocks, the
 * same numbers a fill of length ``n`` would give.
 * Kernels: SGLD, pSGLD, SGHMC (Euler-Maruyama), BAOAB, SGNHT; the network's
 * ULD and SG-HMC leapfrog steps are torch operations on every device.
 */
#ifndef SKB_FLAT_DYNAMICS_KERNEL_H
#define SKB_FLAT_DYNAMICS_KERNEL_H

#include "normal_kernel.h"

#define SKB_FLAT_KERNELS(T, SUF, SQRT)                                                \
/* SGLD: theta <- theta - h g + s xi */                                            \
SKB_NORMAL_CLONES                                                                  \
static void skb_sgld_step_##SUF(skb_normal_state *st, T *restrict theta,          \
                                const T *restrict buf, int64_t n, T c, T alpha,    \
                                T h, T s)                                          \
{                                                                                  \
    uint32_t S[4][SKB_NORMAL_LANES];                                               \
    float z[SKB_NORMAL_BLOCK];                                                     \
    memcpy(S, st->s, sizeof S);                                                    \
    for (int64_t i = 0; i < n; i += SKB_NORMAL_BLOCK) {                            \
        int64_t len = n - i < SKB_NORMAL_BLOCK ? n - i : SKB_NORMAL_BLOCK;         \
        skb_normal_block(S, z);                                                    \
        T *restrict th = theta + i;                                                \
        const T *restrict b = buf + i;                                             \
        for (int64_t j = 0; j < len; j++) {                                        \
            T g = c * b[j] + alpha * th[j];                                        \
            th[j] = th[j] - h * g + s * (T)z[j];                                   \
        }                                                                          \
    }                                                                              \
    memcpy(st->s, S, sizeof S);                                                    \
}                                                                                  \
                                                                                   \
/* pSGLD: V <- a V + (1 - a) (g / n)^2, D = lam + sqrt(V),                         \
   theta <- theta - h g / D + s xi / sqrt(D) */                                    \
SKB_NORMAL_CLONES                                                                  \
static void skb_psgld_step_##SUF(skb_normal_state *st, T *restrict theta,         \
                                 T *restrict V, const T *restrict buf, int64_t n,  \
                                 T c, T alpha, T h, T s, T decay, T lam,           \
                                 T inv_rows)                                       \
{                                                                                  \
    uint32_t S[4][SKB_NORMAL_LANES];                                               \
    float z[SKB_NORMAL_BLOCK];                                                     \
    memcpy(S, st->s, sizeof S);                                                    \
    for (int64_t i = 0; i < n; i += SKB_NORMAL_BLOCK) {                            \
        int64_t len = n - i < SKB_NORMAL_BLOCK ? n - i : SKB_NORMAL_BLOCK;         \
        skb_normal_block(S, z);                                                    \
        T *restrict th = theta + i;                                                \
        T *restrict v = V + i;                                                     \
        const T *restrict b = buf + i;                                             \
        for (int64_t j = 0; j < len; j++) {                                        \
            T g = c * b[j] + alpha * th[j];                                        \
            T gb = g * inv_rows;                                                   \
            T vj = decay * v[j] + (1 - decay) * gb * gb;                           \
            v[j] = vj;                                                             \
            T w = 1 / SQRT(lam + SQRT(vj)); /* 1 / sqrt(D): G = w^2 */           \
            th[j] = th[j] - h * g * w * w + s * (T)z[j] * w;                       \
        }                                                                          \
    }                                                                              \
    memcpy(st->s, S, sizeof S);                                                    \
}                                                                                  \
                                                                                   \
/* SGHMC (Euler-Maruyama): theta <- theta + h r,                                   \
   r <- (1 - h gamma) r - h g + s xi, g at the old theta */                        \
SKB_NORMAL_CLONES                                                                  \
static void skb_sghmc_step_##SUF(skb_normal_state *st, T *restrict theta,         \
                                 T *restrict r, const T *restrict buf, int64_t n,  \
                                 T c, T alpha, T h, T friction, T s)               \
{                                                                                  \
    uint32_t S[4][SKB_NORMAL_LANES];                                               \
    float z[SKB_NORMAL_BLOCK];                                                     \
    memcpy(S, st->s, sizeof S);                                                    \
    T keep = 1 - h * friction;                                                     \
    for (int64_t i = 0; i < n; i += SKB_NORMAL_BLOCK) {                            \
        int64_t len = n - i < SKB_NORMAL_BLOCK ? n - i : SKB_NORMAL_BLOCK;         \
        skb_normal_block(S, z);                                                    \
        T *restrict th = theta + i;                                                \
        T *restrict rr = r + i;                                                    \
        const T *restrict b = buf + i;                                             \
        for (int64_t j = 0; j < len; j++) {                                        \
            T g = c * b[j] + alpha * th[j];                                        \
            T rj = rr[j];                                                          \
            th[j] = th[j] + h * rj;                                                \
            rr[j] = keep * rj - h * g + s * (T)z[j];                               \
        }                                                                          \
    }                                                                              \
    memcpy(st->s, S, sizeof S);                                                    \
}                                                                                  \
                                                                                   \
/* BAOAB with one estimate per step (g at the current theta): p -= t g (t = h,    \
   or h/2 at a chain's first step: the closing half-kick of the previous step    \
   and the opening one of this step share g); theta += (h/2) p;                   \
   p <- decay p + s xi; theta += (h/2) p */                                       \
SKB_NORMAL_CLONES                                                                  \
static void skb_baoab_step_##SUF(skb_normal_state *st, T *restrict theta,         \
                                 T *restrict p, const T *restrict buf, int64_t n,  \
                                 T c, T alpha, T h, T t, T decay, T s)             \
{                                                                                  \
    uint32_t S[4][SKB_NORMAL_LANES];                                               \
    float z[SKB_NORMAL_BLOCK];                                                     \
    memcpy(S, st->s, sizeof S);                                                    \
    T half = h / 2;                                                                \
    for (int64_t i = 0; i < n; i += SKB_NORMAL_BLOCK) {                            \
        int64_t len = n - i < SKB_NORMAL_BLOCK ? n - i : SKB_NORMAL_BLOCK;         \
        skb_normal_block(S, z);                                                    \
        T *restrict th = theta + i;                                                \
        T *restrict pp = p + i;                                                    \
        const T *restrict b = buf + i;                                             \
        for (int64_t j = 0; j < len; j++) {                                        \
            T g = c * b[j] + alpha * th[j];                                        \
            T pj = pp[j] - t * g;                                                  \
            T x = th[j] + half * pj;                                               \
            pj = decay * pj + s * (T)z[j];                                         \
            th[j] = x + half * pj;                                                 \
            pp[j] = pj;                                                            \
        }                                                                          \
    }                                                                              \
    memcpy(st->s, S, sizeof S);                                                    \
}                                                                                  \
                                                                                   \
/* SGNHT (Ding et al. 2014, Alg. 2), g at the old theta:                          \
   p <- keep p - h g + s xi (keep = 1 - h * thermostat); theta += h p.            \
   Returns sum p.p of the new momentum (accumulated in double) for the            \
   thermostat update done by the caller. */                                        \
SKB_NORMAL_CLONES                                                                  \
static double skb_sgnht_step_##SUF(skb_normal_state *st, T *restrict theta,       \
                                   T *restrict p, const T *restrict buf,           \
                                   int64_t n, T c, T alpha, T h, T keep, T s)      \
{                                                                                  \
    uint32_t S[4][SKB_NORMAL_LANES];                                               \
    float z[SKB_NORMAL_BLOCK];                                                     \
    double kinetic = 0.0;                                                          \
    memcpy(S, st->s, sizeof S);                                                    \
    for (int64_t i = 0; i < n; i += SKB_NORMAL_BLOCK) {                            \
        int64_t len = n - i < SKB_NORMAL_BLOCK ? n - i : SKB_NORMAL_BLOCK;         \
        skb_normal_block(S, z);                                                    \
        T *restrict th = theta + i;                                                \
        T *restrict pp = p + i;                                                    \
        const T *restrict b = buf + i;                                             \
        for (int64_t j = 0; j < len; j++) {                                        \
            T g = c * b[j] + alpha * th[j];                                        \
            T pj = keep * pp[j] - h * g + s * (T)z[j];                             \
            pp[j] = pj;                                                            \
            th[j] = th[j] + h * pj;                                                \
            kinetic += (double)pj * (double)pj;                                    \
        }                                                                          \
    }                                                                              \
    memcpy(st->s, S, sizeof S);                                                    \
    return kinetic;                                                                \
}

SKB_FLAT_KERNELS(float, f32, sqrtf)
SKB_FLAT_KERNELS(double, f64, sqrt)

#endif /* SKB_FLAT_DYNAMICS_KERNEL_H */
