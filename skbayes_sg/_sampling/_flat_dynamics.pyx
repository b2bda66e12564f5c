"""One-pass SG-MCMC updates of a flat parameter vector on the CPU.

The torch-backed network sampler keeps its parameters in one flat tensor;
on the CPU its step goes through these kernels (``flat_dynamics_kernel.h``,
rendered from its Tempita template ``flat_dynamics_kernel.h.tp`` by setup.py):
one sweep that forms ``g = c * buf + alpha * theta``, draws the noise from a
:class:`~skbayes_sg._sampling._normal_stream.NormalStream` and updates the
state, instead of five to nine torch sweeps over the parameters. The
formulas are those of the formula sheet, doc/algorithms.rst (SGLD, pSGLD
with ``Gamma`` dropped, SGHMC Euler-Maruyama, BAOAB with one estimate per
step, SGNHT); the GPU path writes the same formulas with torch operations.

Every function takes 1-D C-contiguous arrays of one dtype (float32 or
float64) and the same length, updates them in place without the GIL, and
consumes ``ceil(n / 32)`` blocks of the stream (the numbers
``stream.fill`` would have returned).
"""

import numpy as np

from libc.stdint cimport int64_t

from ._normal_stream cimport NormalStream, skb_normal_state


cdef extern from "flat_dynamics_kernel.h" nogil:
    void skb_sgld_step_f32(skb_normal_state *st, float *theta, const float *buf,
                           int64_t n, float c, float alpha, float h, float s)
    void skb_sgld_step_f64(skb_normal_state *st, double *theta, const double *buf,
                           int64_t n, double c, double alpha, double h, double s)
    void skb_psgld_step_f32(skb_normal_state *st, float *theta, float *V,
                            const float *buf, int64_t n, float c, float alpha,
                            float h, float s, float decay, float lam, float inv_rows)
    void skb_psgld_step_f64(skb_normal_state *st, double *theta, double *V,
                            const double *buf, int64_t n, double c, double alpha,
                            double h, double s, double decay, double lam,
                            double inv_rows)
    void skb_sghmc_step_f32(skb_normal_state *st, float *theta, float *r,
                            const float *buf, int64_t n, float c, float alpha,
                            float h, float friction, float s)
    void skb_sghmc_step_f64(skb_normal_state *st, double *theta, double *r,
                            const double *buf, int64_t n, double c, double alpha,
                            double h, double friction, double s)
    void skb_baoab_step_f32(skb_normal_state *st, float *theta, float *p,
                            const float *buf, int64_t n, float c, float alpha,
                            float h, float t, float decay, float s)
    void skb_baoab_step_f64(skb_normal_state *st, double *theta, double *p,
                            const double *buf, int64_t n, double c, double alpha,
                            double h, double t, double decay, double s)
    double skb_sgnht_step_f32(skb_normal_state *st, float *theta, float *p,
                              const float *buf, int64_t n, float c, float alpha,
                              float h, float keep, float s)
    double skb_sgnht_step_f64(skb_normal_state *st, double *theta, double *p,
                              const double *buf, int64_t n, double c, double alpha,
                              double h, double keep, double s)


def _check(*arrays):
    """Common dtype of 1-D C-contiguous arrays of equal length (or raise)."""
    first = arrays[0]
    for a in arrays:
        if not isinstance(a, np.ndarray) or a.ndim != 1 or not a.flags.c_contiguous:
            raise TypeError("flat dynamics need 1-D C-contiguous numpy arrays.")
        if a.dtype != first.dtype or a.shape[0] != first.shape[0]:
            raise TypeError("flat dynamics need arrays of one dtype and length.")
    if first.dtype != np.float32 and first.dtype != np.float64:
        raise TypeError(f"flat dynamics need float32 or float64, got {first.dtype}.")
    for a in arrays[:len(arrays) - 1]:  # the updated ones: all but ``buf``
        if not a.flags.writeable:
            raise ValueError("the updated arrays must be writeable.")
    return first.dtype


def sgld_step(NormalStream stream, theta, buf, double c, double alpha, double h,
              double noise_std):
    """``theta <- theta - h (c buf + alpha theta) + noise_std xi``."""
    cdef float[::1] t32, b32
    cdef double[::1] t64, b64
    cdef int64_t n = theta.shape[0]
    if _check(theta, buf) == np.float32:
        t32, b32 = theta, buf
        if n:
            with nogil:
                skb_sgld_step_f32(&stream.state, &t32[0], &b32[0], n, <float>c,
                                  <float>alpha, <float>h, <float>noise_std)
    else:
        t64, b64 = theta, buf
        if n:
            with nogil:
                skb_sgld_step_f64(&stream.state, &t64[0], &b64[0], n, c, alpha, h,
                                  noise_std)


def psgld_step(NormalStream stream, theta, V, buf, double c, double alpha, double h,
               double noise_std, double decay, double lam, double inv_rows):
    """pSGLD with ``g = c buf + alpha theta``:
    ``V <- decay V + (1 - decay) (g inv_rows)^2``, ``D = lam + sqrt(V)``,
    ``theta <- theta - h g / D + noise_std xi / sqrt(D)``."""
    cdef float[::1] t32, v32, b32
    cdef double[::1] t64, v64, b64
    cdef int64_t n = theta.shape[0]
    if _check(theta, V, buf) == np.float32:
        t32, v32, b32 = theta, V, buf
        if n:
            with nogil:
                skb_psgld_step_f32(&stream.state, &t32[0], &v32[0], &b32[0], n,
                                   <float>c, <float>alpha, <float>h, <float>noise_std,
                                   <float>decay, <float>lam, <float>inv_rows)
    else:
        t64, v64, b64 = theta, V, buf
        if n:
            with nogil:
                skb_psgld_step_f64(&stream.state, &t64[0], &v64[0], &b64[0], n, c,
                                   alpha, h, noise_std, decay, lam, inv_rows)


def sghmc_step(NormalStream stream, theta, r, buf, double c, double alpha, double h,
               double friction, double noise_std):
    """SGHMC with ``g = c buf + alpha theta`` at the old ``theta``:
    ``theta <- theta + h r``, ``r <- r - h (g + friction r) + noise_std xi``."""
    cdef float[::1] t32, r32, b32
    cdef double[::1] t64, r64, b64
    cdef int64_t n = theta.shape[0]
    if _check(theta, r, buf) == np.float32:
        t32, r32, b32 = theta, r, buf
        if n:
            with nogil:
                skb_sghmc_step_f32(&stream.state, &t32[0], &r32[0], &b32[0], n,
                                   <float>c, <float>alpha, <float>h, <float>friction,
                                   <float>noise_std)
    else:
        t64, r64, b64 = theta, r, buf
        if n:
            with nogil:
                skb_sghmc_step_f64(&stream.state, &t64[0], &r64[0], &b64[0], n, c,
                                   alpha, h, friction, noise_std)


def baoab_step(NormalStream stream, theta, p, buf, double c, double alpha, double h,
               double kick, double decay, double noise_std):
    """BAOAB with ``g = c buf + alpha theta`` at the current ``theta``:
    ``p -= kick g``, ``theta += (h/2) p``, ``p <- decay p + noise_std xi``,
    ``theta += (h/2) p`` (``kick`` = h, or h/2 at a chain's first step)."""
    cdef float[::1] t32, p32, b32
    cdef double[::1] t64, p64, b64
    cdef int64_t n = theta.shape[0]
    if _check(theta, p, buf) == np.float32:
        t32, p32, b32 = theta, p, buf
        if n:
            with nogil:
                skb_baoab_step_f32(&stream.state, &t32[0], &p32[0], &b32[0], n,
                                   <float>c, <float>alpha, <float>h, <float>kick,
                                   <float>decay, <float>noise_std)
    else:
        t64, p64, b64 = theta, p, buf
        if n:
            with nogil:
                skb_baoab_step_f64(&stream.state, &t64[0], &p64[0], &b64[0], n, c,
                                   alpha, h, kick, decay, noise_std)


def sgnht_step(NormalStream stream, theta, p, buf, double c, double alpha, double h,
               double keep, double noise_std):
    """SGNHT with ``g = c buf + alpha theta`` at the old ``theta``:
    ``p <- keep p - h g + noise_std xi`` (``keep = 1 - h * thermostat``),
    ``theta += h p``.  Returns ``p.p`` of the new momentum (summed in double),
    for the thermostat update ``xi += h (p.p / d - T)``."""
    cdef float[::1] t32, p32, b32
    cdef double[::1] t64, p64, b64
    cdef int64_t n = theta.shape[0]
    cdef double kinetic = 0.0
    if _check(theta, p, buf) == np.float32:
        t32, p32, b32 = theta, p, buf
        if n:
            with nogil:
                kinetic = skb_sgnht_step_f32(&stream.state, &t32[0], &p32[0], &b32[0],
                                             n, <float>c, <float>alpha, <float>h,
                                             <float>keep, <float>noise_std)
    else:
        t64, p64, b64 = theta, p, buf
        if n:
            with nogil:
                kinetic = skb_sgnht_step_f64(&stream.state, &t64[0], &p64[0], &b64[0],
                                             n, c, alpha, h, keep, noise_std)
    return kinetic
