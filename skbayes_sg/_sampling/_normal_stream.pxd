from libc.stdint cimport int64_t, uint32_t, uint64_t


cdef extern from "normal_kernel.h" nogil:
    enum: SKB_NORMAL_LANES
    ctypedef struct skb_normal_state:
        uint32_t s[4][SKB_NORMAL_LANES]
    void skb_normal_seed(skb_normal_state *st, uint64_t seed)
    void skb_normal_fill_f32(skb_normal_state *st, float *out, int64_t n)
    void skb_normal_fill_f64(skb_normal_state *st, double *out, int64_t n)


cdef class NormalStream:
    cdef skb_normal_state state
    cdef uint32_t[:, ::1] _state_view(self)
