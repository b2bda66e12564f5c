"""The network's Metropolis-adjusted Langevin step (MALA), for exact gradients.

When a chain's minibatch is every row (``batch_size >= n_rows``, uniform
subsampling) its gradient is exact, and an SGLD step is the proposal of
MALA: from ``theta`` with the gradient ``g = grad U(theta)``,

    theta' = theta - h g + sqrt(2 h T) xi,

accepted with probability ``min(1, exp(log_r))``,

    log_r = [ -(U(theta') - U(theta)) + (theta' - theta) . (g + g') / 2
              + h (|g|^2 - |g'|^2) / 4 ] / T,

the log of ``pi(theta') q(theta | theta') / (pi(theta) q(theta' | theta))``
for the target ``pi = exp(-U / T)`` and the Gaussian proposal ``q`` (the two
quadratic forms of ``q`` expanded, so that no term of size ``P / 2`` cancels
in floating point). The chain's law is then the posterior itself at every
step size: the O(h) bias of the unadjusted step (on a 60-row, 40-feature
problem, the draws' training log-likelihood 0.12-0.25 posterior sds below an
exact Hamiltonian Monte Carlo reference at the default step) is gone. The
proposal is the SGLD dynamics' own step (fused on the CPU), so the formula
lives in one place; one gradient is spent per step, as for SGLD (the
current point's potential and gradient are cached).

With ``step_size="auto"`` and the constant schedule, each chain adapts its
step during warm-up by dual averaging (Hoffman and Gelman, 2014, the linear
engine's rule itself) toward the acceptance rate of the SGLD file's
``METROPOLIS`` rule; the step then stays fixed, so the draws after warm-up
are a Markov chain with the posterior as its stationary law.
"""

import torch

# the linear engine's dual averaging (one definition, _dual_averaging.pxd) and
# Metropolis rule (laws.h.tp)
from .._sampling._dual_averaging import DualAveraging
from .._sampling._dynamics import py_accept_prob, py_mala_log_ratio
from ._net_dynamics import run_step


class NetworkMetropolis:
    """MALA on a :class:`~._torch_sampler.ChainRunner`'s chain (see the
    module docstring).

    Parameters
    ----------
    runner : ChainRunner
        Its dynamics must be SGLD, its minibatch every row.
    target_accept : float
        Dual averaging's target acceptance rate.
    adapt : bool
        Adapt the step during warm-up (``step_size="auto"``).
    """

    def __init__(self, runner, target_accept, adapt):
        if runner.b != runner.n or runner.p["subsampling"] != "uniform":
            raise ValueError("the Metropolis step needs exact gradients (every row a step)")
        self.runner = runner
        self.target_accept = float(target_accept)
        self.adapt = bool(adapt)
        P = runner.net.n_params
        new = lambda: torch.empty(P, device=runner.device, dtype=runner.dtype)  # noqa: E731
        # the current point's and the proposal's c * buf, the dynamics' form of
        # the gradient (the whole gradient adds alpha * theta: the isotropic
        # prior's exact term, 0 with the default fan-in prior)
        self._cbuf, self._cbuf_prop = new(), new()
        self._prop, self._work = new(), new()
        # at the current point: potential, data loss and ||g||^2
        self._U = self._loss = self._gg = None
        self._averaging = None
        self.base_step = float(runner.dynamics.h)
        self._k = 0
        self._n_warmup = 0
        self.accept_sum = 0.0
        self.n_proposed = 0

    # ------------------------------------------------------------ the run
    def begin(self, st, n_warmup, schedule_constant):
        """Start a run: the chain's step (its adapted one, if it has one),
        and dual averaging over the ``n_warmup`` first steps where allowed."""
        h = st.get("mh_step")
        dyn = self.runner.dynamics
        if h is not None:
            dyn.set_step_size(h)
        self._k, self._n_warmup = 0, int(n_warmup)
        self.base_step = float(dyn.h)       # a schedule's factors multiply it
        self._averaging = (DualAveraging(dyn.h, self.target_accept)
                           if self.adapt and schedule_constant and n_warmup > 0 else None)
        self.accept_sum, self.n_proposed = 0.0, 0
        self._U = None

    def end(self, st):
        """Keep the chain's step in its state (a warm start continues with it)."""
        st["mh_step"] = self.base_step

    def invalidate(self):
        """Forget the cached potential (the prior changed: a Gibbs step)."""
        self._U = None

    # ------------------------------------------------------------ one step
    def _evaluated(self, estimated, theta, cbuf):
        """``cbuf <- c * buf`` from ``estimated = (loss, buf, c)``, the
        estimate at ``theta``; returns ``(U(theta), data loss, g)`` with ``U =
        sum_i w_i CE_i + prior energy`` (float64) and ``g = cbuf + alpha
        theta`` the whole gradient (``cbuf`` itself when alpha is 0)."""
        r = self.runner
        loss, buf, c = estimated
        torch.mul(buf, c, out=cbuf)
        alpha = r.dynamics.alpha
        if r.prior_prec is not None:
            prior = torch.dot(torch.mul(theta, r.prior_prec, out=self._work), theta)
        else:
            prior = alpha * torch.dot(theta, theta)
        g = cbuf if alpha == 0.0 else torch.add(cbuf, theta, alpha=alpha)
        return float(loss) + 0.5 * float(prior), loss, g

    def step(self, st, estimate):
        """One MALA step; returns the data loss at the chain's new point
        (the loss the runner reports)."""
        return run_step(self.step_requests(st), estimate)

    def step_requests(self, st):
        """:meth:`step` as a generator (the protocol of
        :meth:`._net_dynamics.NetworkDynamics.step_requests`): it yields the
        chain's point where its gradient is not cached, then the proposal,
        and is sent the estimate at each."""
        dyn = self.runner.dynamics
        theta = st["theta"]
        if self._U is None:
            estimated = yield theta
            self._U, self._loss, g = self._evaluated(estimated, theta, self._cbuf)
            self._gg = float(torch.dot(g, g))
        else:
            g = self._cbuf if dyn.alpha == 0.0 else torch.add(self._cbuf, theta, alpha=dyn.alpha)
        prop = self._prop
        prop.copy_(theta)
        dyn.apply({"theta": prop}, self._cbuf, 1.0)   # the SGLD step: the proposal
        estimated = yield prop
        U_prop, loss_prop, g_prop = self._evaluated(estimated, prop, self._cbuf_prop)
        gg_prop = float(torch.dot(g_prop, g_prop))
        delta = torch.sub(prop, theta, out=self._work)
        # the linear engine's Metropolis rule (one definition, laws.h.tp)
        log_r = py_mala_log_ratio(
            U_prop - self._U, float(torch.dot(delta, g)) + float(torch.dot(delta, g_prop)),
            self._gg, gg_prop, dyn.h, 2.0 * dyn.h * dyn.T, dyn.T)
        accept = py_accept_prob(log_r)
        u = float(torch.rand((), generator=self.runner.g, device=self.runner.device,
                             dtype=torch.float64))
        if u < accept:
            st["theta"], self._prop = prop, theta
            self._cbuf, self._cbuf_prop = self._cbuf_prop, self._cbuf
            self._U, self._loss, self._gg = U_prop, loss_prop, gg_prop
        self._record(accept)
        return self._loss

    def _record(self, accept):
        """Acceptance statistics after warm-up; dual averaging during it."""
        self._k += 1
        if self._k > self._n_warmup:
            self.accept_sum += accept
            self.n_proposed += 1
        elif self._averaging is not None:
            dyn = self.runner.dynamics
            if self._k < self._n_warmup:
                dyn.set_step_size(self._averaging.update(accept))
            else:
                self._averaging.update(accept)
                self.base_step = self._averaging.final()
                dyn.set_step_size(self.base_step)
