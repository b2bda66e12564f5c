"""Several network chains stepped together: one batched gradient a step.

A chain's step is a minibatch gradient (a dozen matrix products and
elementwise operations of torch, each paying a few microseconds of Python
and dispatch whatever its size) followed by the dynamics' update. On a small
network that fixed cost is most of the step: digits' 64-100-10 network at
200 rows spends about 270 us a gradient, of which the products are about
120. Stepping the chains together computes every chain's gradient in one
pass of :meth:`~._torch_sampler.MLPNet.loss_grad` over a stack of chains
(``torch.bmm`` in place of ``torch.mm``), so that cost is paid once a step
rather than once a chain; the rest of the step -- each chain's minibatch
from its own generator, its dynamics' update with its own noise stream, its
prior, its kept draws -- is that chain's own, through
:meth:`~._torch_sampler.ChainRunner.advance`. So each chain is the chain it
would be alone, up to the rounding of the batched products (the kernel a
batch of products takes may sum in another order).

Chains step together when each step is one gradient of uniform
subsampling: a dynamics of one estimate a step (not SG-HMC leapfrog's
``K + 1``), on minibatches (each chain its own) or on every row (the rows
shared), and with one full batch also MALA (``metropolis=True``): there each
chain proposes, the proposals' gradients are computed together, and each
chain makes its own decision. The others (EWSG's candidate chain, SVRG and
control-variate anchors, leapfrog) run one chain after the other, as before.
"""
import torch

from ._net_dynamics import NetworkDynamics
from ._net_estimators import adam_modes, stacked_batch_grad

#: activations (chains x minibatch rows x widest layer) up to which the
#: chains step together: a stack holds every chain's activations at once
LOCKSTEP_ELEMENTS = 1 << 23


def steps_together(runners):
    """Whether the runners' chains can step together (see the module)."""
    if len(runners) < 2:
        return False
    first = runners[0]
    rows = min(first.b, first.n)
    if len(runners) * rows * max(first.net.layer_sizes) > LOCKSTEP_ELEMENTS:
        return False
    # one estimate a step, or MALA's one gradient at its proposal
    return all(
        r.p["subsampling"] == "uniform" and type(r.dynamics).step is NetworkDynamics.step
        and (r.metropolis is None) == (first.metropolis is None)
        and r.X is first.X and r.net is first.net
        for r in runners)


def run_chains(runners, n_steps, *, n_warmup, thin, samples, progress=None,
               step_factors=None, keep=None):
    """Run each runner's chain ``n_steps`` steps, together where they can.

    The arguments are those of :meth:`~._torch_sampler.ChainRunner.run`,
    with ``samples`` a list (one tensor a chain). Returns the list of the
    draws each chain kept.
    """
    settings = dict(n_warmup=n_warmup, thin=thin, progress=progress,
                    step_factors=step_factors, keep=keep)
    if not steps_together(runners):
        return [runner.run(n_steps, samples=out, **settings)
                for runner, out in zip(runners, samples)]
    runs = [runner.begin(n_steps, samples=out, **settings)
            for runner, out in zip(runners, samples)]
    stack = StackedGradients(runners)
    chains = list(zip(runners, runs, stack.estimates))
    if runners[0].metropolis is None:
        for k in range(n_steps):
            stack.compute()
            for runner, run, estimate in chains:
                runner.advance(run, k, estimate)
    else:
        # MALA: each chain proposes, the proposals' gradients are computed
        # together, each chain decides (a chain's gradient at its own point
        # is cached, or computed alone where it is not)
        for k in range(n_steps):
            proposals = []
            for runner, run, _ in chains:
                runner.before_step(run, k)
                proposals.append(runner.metropolis.propose(runner.state, run.estimate))
            stack.compute(proposals)
            for runner, run, estimate in chains:
                runner.after_step(run, k, runner.metropolis.conclude(runner.state, estimate))
    return [runner.finish(run) for runner, run in zip(runners, runs)]


def search_modes(runners):
    """Each fresh chain's move to its mode
    (:meth:`~._torch_sampler.ChainRunner.search_mode`), the Adam searches of
    ``init="mode"`` together where the chains can step together."""
    if runners and steps_together(runners) and runners[0].p.get("init", "auto") == "mode":
        modes = adam_modes(runners, torch.stack([r.state["theta"] for r in runners]))
        for runner, mode in zip(runners, modes):
            runner.state["theta"] = mode.clone()
        return
    for runner in runners:
        runner.search_mode()


class StackedGradients:
    """Every chain's minibatch gradient in one batched pass.

    :meth:`compute` stacks the chains' parameters and writes each chain's
    summed gradient on its next minibatch (its own generator and
    permutation, as :meth:`~._net_estimators.NetworkGradientsMixin.estimate`
    draws it) into its row of ``grad``, with the prior's term where the
    chains share one; ``estimates[c]`` then hands chain ``c``'s dynamics
    that row as its estimate.

    Parameters
    ----------
    runners : list of ChainRunner
        Chains on the same network and rows (:func:`steps_together`).
    """

    def __init__(self, runners):
        first = runners[0]
        self.runners = runners
        self.theta = torch.empty((len(runners), first.net.n_params),
                                 device=first.device, dtype=first.dtype)
        self.grad = torch.empty_like(self.theta)
        self._views = first.net.views(self.theta)
        self._gviews = first.net.views(self.grad)
        # one per-layer prior for every chain (no Gibbs steps on it): its
        # term is added to the stack at once (elementwise: each row's own)
        self._shared_prior = (first.prior_prec is not None and first.hyperprior is None
                              and all(r.p is first.p for r in runners))
        self.loss = None
        self.estimates = [self._estimate_of(c) for c in range(len(runners))]

    def compute(self, points=None):
        """The chains' next minibatch gradients at ``points`` (one tensor a
        chain; default: their current parameters)."""
        for c, runner in enumerate(self.runners):
            self.theta[c].copy_(runner.state["theta"] if points is None else points[c])
        self.loss = stacked_batch_grad(self.runners, self.theta, self.grad,
                                       self._views, self._gviews)
        if self._shared_prior:
            first = self.runners[0]
            first.add_prior_grad(self.grad, self.theta, first.scale)

    def _estimate_of(self, c):
        """Chain ``c``'s estimate: its row of the last :meth:`compute`, as
        :meth:`~._net_estimators.NetworkGradientsMixin.estimate` returns
        its minibatch sum (``(loss, buf, c)``, the estimate ``c * buf +
        alpha * theta``)."""
        runner = self.runners[c]
        buf = self.grad[c]

        def estimate(theta):
            if not self._shared_prior:
                runner.add_prior_grad(buf, theta, runner.scale)
            return self.loss[c], buf, runner.scale
        return estimate
