"""Each dynamics' update law, written once, and the maps read off it.

The moves -- one coordinate's step given the gradient's value there and the
step's Gaussian draws -- are written once, in C, in ``laws.h.tp`` (rendered
in float and double by setup.py), so that every compiled kernel calls the
same code: the eager loops (``_dynamics.pyx``) and the lazy kernel
(``_lazy.pyx``) through the declarations below, and the network's fused
CPU sweeps (``flat_dynamics_kernel.h``).  The coefficients come from
``_coefficients.pxd``, held in a :c:type:`LawCoefficients`.

Read off the moves here: the lazy kernel's one-step Gaussian map of a
coordinate whose gradient is ``a z + beta`` (:func:`one_step_law`: the moves
are affine, so their values at the unit inputs are the map's columns), whose
k-th power its catch-up samples; the error model (``samplers/*.py``) reads
the same map through the ``def`` twin ``_dynamics.one_step_law``.  The
network's torch steps (``neural_network/_net_dynamics.py``) are the one twin
written apart; ``tests/test_laws.py`` checks them against the moves
(``_dynamics.law_move``), and ``tests/test_architecture.py`` that no kernel
writes a coordinate's update outside ``laws.h.tp``.
"""


cdef extern from "laws.h" nogil:
    ctypedef struct LawCoefficients "skb_law_coefficients":
        int kind
        double h, kappa, gamma
        double c, s
        double e_xx, e_xv, e_vx, e_vv, f_x, f_v, l_vv, l_xv, l_xx
        double rot_c, rot_s, omega, o_decay, o_noise

    enum:
        LAW_SGLD "SKB_LAW_SGLD"
        LAW_SGHMC "SKB_LAW_SGHMC"
        LAW_ULD "SKB_LAW_ULD"
        LAW_BAOAB "SKB_LAW_BAOAB"
        LAW_SGNHT "SKB_LAW_SGNHT"

    # the moves (double; the fused network kernels call the float ones too)
    double langevin_move "skb_langevin_move_f64" (double z, double g, double xi, double c,
                                                  double s)
    void psgld_move "skb_psgld_move_f64" (double* z, double* V, double g, double xi, double h,
                                         double s, double decay, double eps, double inv_n)
    void sghmc_move "skb_sghmc_move_f64" (double* z, double* r, double g, double xi, double h,
                                         double gamma, double s)
    void uld_move "skb_uld_move_f64" (double* x, double* v, double rem, double xi1, double xi2,
                                     const LawCoefficients* q)
    double kick "skb_kick_f64" (double p, double rem, double t)
    void drift "skb_drift_f64" (double* z, double* p, double c, double s, double omega,
                               double t)
    double ou_move "skb_ou_move_f64" (double p, double xi, double decay, double noise)
    double sgnht_move "skb_sgnht_move_f64" (double* z, double* p, double g, double xi,
                                           double h, double keep, double s)

    # the Metropolis rule (both engines: the network through _dynamics' def twins)
    double mala_log_ratio "skb_mala_log_ratio" (double du, double delta_dot_gsum, double gg,
                                                double gg_new, double c, double s2, double T)
    double accept_prob "skb_accept_prob" (double log_ratio)


cdef struct Law:
    # x -> M x + u + N(0, C): M row-major, C as (c00, c01, c11)
    double M[4]
    double u[2]
    double C[3]


# ----------------------------------------------- one coordinate's whole step

cdef inline void pair_move(const LawCoefficients* q, double* z, double* r, double a,
                           double beta, double xi1, double xi2, bint partial) noexcept nogil:
    """One step of a momentum coordinate whose gradient is ``a z + beta``
    (SGHMC, ULD, BAOAB's B A O A B, or with ``partial`` its B A O A; SGNHT at
    its current thermostat, ``gamma``)."""
    cdef double ae = a - q.kappa
    cdef double t = 0.5 * q.h
    if q.kind == LAW_SGHMC:
        sghmc_move(z, r, a * z[0] + beta, xi1, q.h, q.gamma, q.s)
    elif q.kind == LAW_ULD:
        uld_move(z, r, ae * z[0] + beta, xi1, xi2, q)
    elif q.kind == LAW_SGNHT:
        sgnht_move(z, r, a * z[0] + beta, xi1, q.h, 1.0 - q.h * q.gamma, q.s)
    else:
        r[0] = kick(r[0], ae * z[0] + beta, t)
        drift(z, r, q.rot_c, q.rot_s, q.omega, t)
        r[0] = ou_move(r[0], xi1, q.o_decay, q.o_noise)
        drift(z, r, q.rot_c, q.rot_s, q.omega, t)
        if not partial:
            r[0] = kick(r[0], ae * z[0] + beta, t)


cdef inline void noise_factor(const LawCoefficients* q, double a, bint partial,
                              double* N) noexcept nogil:
    """The move's response to its two Gaussian draws, row-major
    ``(dz/dxi1, dz/dxi2, dr/dxi1, dr/dxi2)``: a factor of the step's noise
    covariance."""
    cdef double z = 0.0, r = 0.0
    pair_move(q, &z, &r, a, 0.0, 1.0, 0.0, partial)
    N[0], N[2] = z, r
    z = 0.0
    r = 0.0
    pair_move(q, &z, &r, a, 0.0, 0.0, 1.0, partial)
    N[1], N[3] = z, r


cdef inline void one_step_law(const LawCoefficients* q, double a, double beta, bint partial,
                              Law* L) noexcept nogil:
    """The one-step law of :func:`pair_move` as ``x -> M x + u + N(0, C)``:
    the move is affine in (z, r, beta, xi), so its value at zero is ``u``,
    the unit states give M's columns, and the unit draws the noise's factor."""
    cdef double z, r
    cdef double N[4]
    z = 0.0
    r = 0.0
    pair_move(q, &z, &r, a, beta, 0.0, 0.0, partial)
    L.u[0], L.u[1] = z, r
    z = 1.0
    r = 0.0
    pair_move(q, &z, &r, a, 0.0, 0.0, 0.0, partial)
    L.M[0], L.M[2] = z, r
    z = 0.0
    r = 1.0
    pair_move(q, &z, &r, a, 0.0, 0.0, 0.0, partial)
    L.M[1], L.M[3] = z, r
    noise_factor(q, a, partial, N)
    L.C[0] = N[0] * N[0] + N[1] * N[1]
    L.C[1] = N[0] * N[2] + N[1] * N[3]
    L.C[2] = N[2] * N[2] + N[3] * N[3]
