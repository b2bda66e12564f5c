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
}

SKB_FLAT_KERNELS(float, f32, sqrtf)
SKB_FLAT_KERNELS(double, f64, sqrt)

#endif /* SKB_FLAT_DYNAMICS_KERNEL_H */
