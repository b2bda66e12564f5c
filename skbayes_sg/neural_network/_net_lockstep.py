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
prior, its kept draws -- is that chain's own, through the pieces of
:meth:`~._torch_sampler.ChainRunner.run`. So each chain is the chain it
would be alone, up to the rounding of the batched products (the kernel a
batch of products takes may sum in another order).

Chains step together when their gradients are minibatches of uniform
subsampling (each chain its own) or every row (shared), for every dynamics
and with MALA (``metropolis=True``): each chain's step is a generator that
yields the points at which it needs a gradient (one for most dynamics, ``K
+ 1`` for SG-HMC leapfrog, MALA's proposal), and the points the chains ask
for at the same time are computed together. With SVRG and control variates
each chain's minibatch is also taken at its anchor in the same pass (SVRG's
snapshots of every row stay each chain's own). EWSG, whose estimate is an
index chain over candidate minibatches, runs one chain after the other.
"""
import torch

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
    return all(
        r.p["subsampling"] in ("uniform", "svrg", "cv") and r.p is first.p
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
    for k in range(n_steps):
        for runner, run in zip(runners, runs):
            runner.before_step(run, k)
        steps = [run.stepper.step_requests(runner.state) for runner, run in zip(runners, runs)]
        losses = stack.drive(steps, [run.estimate for run in runs])
        for runner, run, loss in zip(runners, runs, losses):
            runner.after_step(run, k, loss)
    return [runner.finish(run) for runner, run in zip(runners, runs)]


def search_modes(runners):
    """Each fresh chain's move to its mode
    (:meth:`~._torch_sampler.ChainRunner.search_mode`), the Adam searches of
    ``init="mode"`` together where the chains can step together."""
    first = runners[0] if runners else None
    # (control variates search their anchors each chain alone: _find_mode)
    if (first is not None and steps_together(runners) and first.p["subsampling"] != "cv"
            and first.p.get("init", "auto") == "mode"):
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
        # SVRG / control variates: each chain's minibatch also at its anchor
        # (rows C ..), as its estimate takes it
        self.anchored = first.p["subsampling"] in ("svrg", "cv")
        rows = len(runners) * (2 if self.anchored else 1)
        self.theta = torch.empty((rows, first.net.n_params),
                                 device=first.device, dtype=first.dtype)
        self.grad = torch.empty_like(self.theta)
        self._views = first.net.views(self.theta)
        self._gviews = first.net.views(self.grad)
        # one per-layer prior for every chain (no Gibbs steps on it): its
        # term is added to the stack at once (elementwise: each row's own)
        # (the chains share their parameters: steps_together)
        self._shared_prior = (first.prior_prec is not None and first.hyperprior is None
                              and not self.anchored)
        self.loss = None
        self.estimates = [self._estimate_of(c) for c in range(len(runners))]

    def compute(self, points=None):
        """The chains' next minibatch gradients at ``points`` (one tensor a
        chain; default: their current parameters), and at their anchors."""
        C = len(self.runners)
        for c, runner in enumerate(self.runners):
            self.theta[c].copy_(runner.state["theta"] if points is None else points[c])
            if self.anchored:
                self.theta[C + c].copy_(runner.state["anchor"])
        self.loss = stacked_batch_grad(self.runners, self.theta, self.grad,
                                       self._views, self._gviews, self.anchored)
        if self._shared_prior:
            first = self.runners[0]
            first.add_prior_grad(self.grad, self.theta, first.scale)

    def drive(self, steps, own_estimates):
        """Run one step of every chain (``steps[c]``, chain ``c``'s
        ``step_requests`` generator) to its end; returns their losses.

        While every chain asks for an estimate, the estimates are computed
        together (:meth:`compute`); a chain that asks while others have
        finished gets its own (``own_estimates[c]``, its estimator alone).
        """
        points = [next(step) for step in steps]
        losses = [None] * len(steps)
        waiting = list(range(len(steps)))
        while waiting:
            if len(waiting) == len(steps):
                self.compute(points)
                answers = [self.estimates[c](points[c]) for c in waiting]
            else:
                answers = [own_estimates[c](points[c]) for c in waiting]
            still = []
            for c, answer in zip(waiting, answers):
                try:
                    points[c] = steps[c].send(answer)
                    still.append(c)
                except StopIteration as done:
                    losses[c] = done.value
            waiting = still
        return losses

    def _estimate_of(self, c):
        """Chain ``c``'s estimate: its row of the last :meth:`compute`, as
        :meth:`~._net_estimators.NetworkGradientsMixin.estimate` returns
        its minibatch sum (``(loss, buf, c)``, the estimate ``c * buf +
        alpha * theta``)."""
        runner = self.runners[c]
        buf = self.grad[c]
        if self.anchored:
            at_anchor = self.grad[len(self.runners) + c]

            def estimate(theta):
                # anchor_grad + (n/b) (sum_S grad U_j(theta) - sum_S grad U_j(anchor))
                buf.sub_(at_anchor).mul_(runner.scale).add_(runner.anchor_grad)
                runner.add_prior_grad(buf, theta, 1.0)
                return self.loss[c], buf, 1.0
            return estimate

        def estimate(theta):
            if not self._shared_prior:
                runner.add_prior_grad(buf, theta, runner.scale)
            return self.loss[c], buf, runner.scale
        return estimate
