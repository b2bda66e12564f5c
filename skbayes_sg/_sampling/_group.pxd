# cython: language_level=3
"""Chains in lockstep: see ``_group.pyx``."""
from numpy cimport npy_intp as intp

from ._estimators cimport Candidate, FullGradient, ProblemStore
from ._interrupt cimport StopPoll

# the most chains one group runs (one thread's share of a fit's chains)
cdef enum:
    MAX_GROUP = 16

cdef extern from *:
    """
    /* Cooperative coroutines: glibc's ucontext (each chain's loop on its own
       stack, switched at its gradients).  Elsewhere (Windows, musl, macOS)
       SKB_COROUTINES is 0 and every chain runs alone, as before. */
    #if defined(__GLIBC__)
    #include <ucontext.h>
    #define SKB_COROUTINES 1
    typedef ucontext_t skb_context;
    static __thread void* skb_entry_arg;
    /* start fn(arg) on stack; it runs until it switches back to *back */
    static int skb_start(skb_context* ctx, skb_context* back, char* stack, size_t size,
                         void (*fn)(void), void* arg) {
        if (getcontext(ctx) != 0) return -1;
        ctx->uc_stack.ss_sp = stack;
        ctx->uc_stack.ss_size = size;
        ctx->uc_link = back;
        makecontext(ctx, fn, 0);
        skb_entry_arg = arg;
        return swapcontext(back, ctx);
    }
    static void* skb_entry(void) { return skb_entry_arg; }
    static int skb_switch(skb_context* from, skb_context* to) { return swapcontext(from, to); }
    #else
    #define SKB_COROUTINES 0
    typedef int skb_context;
    static int skb_start(skb_context* ctx, skb_context* back, char* stack, size_t size,
                         void (*fn)(void), void* arg) { return -1; }
    static void* skb_entry(void) { return 0; }
    static int skb_switch(skb_context* from, skb_context* to) { return -1; }
    #endif
    """
    ctypedef struct skb_context:
        pass
    int SKB_COROUTINES
    int skb_start(skb_context* ctx, skb_context* back, char* stack, size_t size,
                  void (*fn)() noexcept nogil, void* arg) noexcept nogil
    void* skb_entry() noexcept nogil
    int skb_switch(skb_context* frm, skb_context* to) noexcept nogil


cdef class GroupTask:
    """One chain's share of a group: its loop, run on its own stack."""
    cdef ChainGroup group
    cdef int slot
    cdef void run(self) noexcept nogil


cdef class ChainGroup:
    cdef int size                       # chains in the group (<= MAX_GROUP)
    cdef const ProblemStore* P          # the rows every member reads (one copy)
    cdef object _first                  # keeps P's owner alive
    cdef skb_context scheduler
    cdef skb_context contexts[MAX_GROUP]
    cdef char* stacks[MAX_GROUP]
    cdef bint posted[MAX_GROUP]
    cdef const double* thetas[MAX_GROUP]
    cdef Candidate* candidates[MAX_GROUP]
    cdef bint potentials[MAX_GROUP]
    cdef int[::1] flag                  # set: the members stop (their StopPoll reads it)
    cdef double[::1] block              # dim x (posted chains), interleaved parameters
    cdef double[::1] grads              # the same layout, their gradients
    cdef public long long n_batches     # passes made for several chains at once
    cdef public long long n_requests    # gradients those passes gave

    cdef void request(self, int slot, const double* theta, Candidate* c,
                      bint potential) noexcept nogil
    cdef void _evaluate_posted(self) noexcept nogil


cdef class GroupedFullGradient(FullGradient):
    cdef ChainGroup group               # None: evaluates alone (FullGradient)
    cdef int slot
