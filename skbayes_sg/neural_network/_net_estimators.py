"""The network's gradient estimators (``subsampling=``): minibatches
(uniform, with their access order), the full gradient, the mode of ``"cv"``
(Adam) and the control-variate and snapshot estimates, and EWSG's index
chain over candidate minibatches (:class:`NetworkGradientsMixin`, of
:class:`~._torch_sampler.ChainRunner`)."""
import math

import torch

from ..exceptions import SamplingDivergedError

#: rows per chunk when a full-data gradient is needed (SVRG snapshots, the
#: mode of "cv"): bounded temporaries
_FULL_GRAD_CHUNK = 4096


class _Adam:
    """Adam (Kingma & Ba, 2015) on one flat tensor, in place: the update of
    ``torch.optim.Adam`` (defaults ``betas=(0.9, 0.999)``, ``eps=1e-8``)
    without its per-step bookkeeping, which cost four sampling steps each on
    a digits-sized network."""

    def __init__(self, param, lr, betas=(0.9, 0.999), eps=1e-8):
        self.param, self.lr, self.betas, self.eps = param, float(lr), betas, eps
        self.m = torch.zeros_like(param)
        self.v = torch.zeros_like(param)
        self.denom = torch.empty_like(param)
        self.t = 0

    def step(self, grad):
        b1, b2 = self.betas
        self.t += 1
        self.m.mul_(b1).add_(grad, alpha=1.0 - b1)
        self.v.mul_(b2).addcmul_(grad, grad, value=1.0 - b2)
        # torch's order: sqrt(v) / sqrt(1 - b2^t) + eps, step lr / (1 - b1^t)
        torch.sqrt(self.v, out=self.denom).div_(math.sqrt(1.0 - b2 ** self.t)).add_(self.eps)
        self.param.addcdiv_(self.m, self.denom, value=-self.lr / (1.0 - b1 ** self.t))


def stacked_batch_grad(runners, theta, out, views=None, gviews=None, anchored=False):
    """Each chain's next minibatch gradient, all in one batched pass.

    Parameters
    ----------
    runners : list of ChainRunner
        ``C`` chains on the same network and rows; each draws its next
        minibatch (:meth:`NetworkGradientsMixin.next_batch`, its own
        generator) as its own estimate would, or takes every row where the
        minibatch is every row.
    theta : tensor of shape (C, P), or (2 C, P) where ``anchored``
        Row ``c``: where chain ``c``'s gradient is taken (and row ``C + c``
        its anchor, where ``anchored``).
    out : tensor of the shape of ``theta``
        Row ``c`` receives chain ``c``'s summed minibatch gradient.
    views, gviews : list, optional
        ``net.views(theta)`` and ``net.views(out)``, precomputed.
    anchored : bool, default=False
        SVRG and control variates: each chain's minibatch is also taken at
        its anchor (rows ``C ..``), as :meth:`NetworkGradientsMixin.estimate`
        does.

    Returns
    -------
    loss : tensor of shape (C,) (``2 C`` where ``anchored``)
    """
    first = runners[0]
    copies = 2 if anchored else 1           # gradients a chain: at theta (and its anchor)
    C, b = len(runners) * copies, first.b
    if b >= first.n:
        # every row is each chain's minibatch (one chain's full batch draws
        # no indices): the rows shared along a stride-0 chain axis
        for runner in runners:
            runner.n_grad_evals += first.n * copies
        X, y, w = first.X, first.y, first.w
        return first.net.loss_grad(theta, X.expand(C, *X.shape), y.expand(C, *y.shape), out,
                                   views, gviews, None if w is None else w.expand(C, *w.shape))
    rows = []
    for runner in runners:
        rows.append(runner.next_batch())
        runner.n_grad_evals += b * copies
    rows = torch.cat(rows * copies)
    X = first.X.index_select(0, rows)
    weights = None if first.w is None else first.w.index_select(0, rows).view(C, b)
    return first.net.loss_grad(theta, X.view(C, b, X.shape[1]),
                               first.y.index_select(0, rows).view(C, b), out,
                               views, gviews, weights)


def adam_modes(runners, theta):
    """The modes Adam finds from ``theta``, one chain or several together.

    ``map_epochs`` passes of minibatches of size ``batch_size`` on ``U(theta)
    / n_eff`` (``n_eff`` the total weight: ``n`` without weights) with
    learning rate ``map_learning_rate``. The mode of ``exp(-U / T)`` is that
    of ``U`` at every temperature.

    Parameters
    ----------
    runners : list of ChainRunner
        One chain, or several fresh chains on the same network, rows and
        prior (their minibatch gradients then come from
        :func:`stacked_batch_grad`; Adam's update is elementwise, so each
        chain's is its own).
    theta : tensor of shape (P,) or (len(runners), P)
        The starts (a row each for several chains).

    Returns
    -------
    tensor of the shape of ``theta``
        A new tensor (``theta`` itself when ``map_epochs`` is 0).
    """
    first = runners[0]
    p = first.p
    steps = int(math.ceil(first.n / first.b)) * int(p["map_epochs"])
    if steps <= 0:
        return theta
    w = theta.clone()
    buf = torch.empty_like(w)
    grad = torch.empty_like(w)
    adam = _Adam(w, p["map_learning_rate"])
    alpha = p["alpha"]
    views, gviews = first.net.views(w), first.net.views(buf)
    for _ in range(steps):
        if w.dim() == 1:
            first.batch_grad(w, first.next_batch(), buf)
        else:
            stacked_batch_grad(runners, w, buf, views, gviews)
        grad.copy_(buf).mul_(first.scale).add_(w, alpha=alpha)
        first.add_prior_grad(grad, w, 1.0).div_(first.n_eff)
        adam.step(grad)
    if not bool(torch.isfinite(w).all()):
        raise SamplingDivergedError(
            "The Adam search for the mode (subsampling='cv' or init='mode') "
            f"diverged (map_learning_rate={p['map_learning_rate']!r}); try "
            f"map_learning_rate={p['map_learning_rate'] / 10:g}."
        )
    return w


class NetworkGradientsMixin:
    """The gradient estimates of a network chain (they read its net, data,
    parameters and state)."""

    # ----------------------------------------------------------- data access
    def next_batch(self):
        """Indices of the next minibatch: consecutive blocks of a random
        permutation (a fresh one when fewer than ``b`` indices remain), so
        every minibatch is a uniformly random ``b``-subset; None when the
        minibatch is every row (no permutation drawn: the chain's generator
        then serves the Metropolis decisions alone, so weighted and repeated
        rows give the same chain)."""
        if self.b >= self.n:
            return None
        st = self.state
        if st["perm"] is None or st["pos"] + self.b > self.n:
            st["perm"] = torch.randperm(self.n, generator=self.g, device=self.device)
            st["pos"] = 0
        idx = st["perm"][st["pos"]:st["pos"] + self.b]
        st["pos"] += self.b
        return idx

    def batch_grad(self, theta, idx, out):
        """``sum_{j in idx} w_j grad U_j(theta)`` into ``out`` (every row
        where ``idx`` is None); returns the loss (``w_j = 1`` without
        weights)."""
        if idx is None:
            self.n_grad_evals += self.n
            return self.net.loss_grad(theta, self.X, self.y, out, self._views_of(theta),
                                      self._views_of(out), self.w)
        self.n_grad_evals += int(idx.shape[0])
        return self.net.loss_grad(theta, self.X.index_select(0, idx),
                                  self.y.index_select(0, idx), out,
                                  self._views_of(theta), self._views_of(out),
                                  None if self.w is None else self.w.index_select(0, idx))

    def full_grad(self, theta):
        """``sum_i w_i grad U_i(theta)`` over all data (chunks of rows)."""
        total = torch.zeros_like(theta)
        tmp = torch.empty_like(theta)
        for r0 in range(0, self.n, _FULL_GRAD_CHUNK):
            self.net.loss_grad(theta, self.X[r0:r0 + _FULL_GRAD_CHUNK],
                               self.y[r0:r0 + _FULL_GRAD_CHUNK], tmp,
                               weights=None if self.w is None
                               else self.w[r0:r0 + _FULL_GRAD_CHUNK])
            total.add_(tmp)
        self.n_grad_evals += self.n
        return total

    # ----------------------------------------------------------- CV mode
    def _find_mode(self):
        """MAP estimate for control variates (:meth:`_adam_mode` from the
        chain's initial parameters); the chain then starts at the mode, its
        anchor."""
        st = self.state
        theta = self._adam_mode(st["theta"])
        st["theta"] = theta
        st["anchor"] = theta.clone()
        self.anchor_grad = self.full_grad(st["anchor"])

    def _adam_mode(self, theta):
        """The mode Adam finds from ``theta``: :func:`adam_modes` of this
        chain alone."""
        return adam_modes([self], theta)

    # ----------------------------------------------------------- estimators
    def estimate(self, theta, buf=None):
        """One unbiased estimate of ``grad U(theta)``, kept factored.

        Returns ``(loss, buf, c)``: the estimate is ``c * buf + alpha * theta``
        (the prior term is exact and added by the dynamics, so the plain
        minibatch gradient is never rescaled in a separate sweep). ``buf``
        (default: the runner's gradient buffer) is overwritten.
        """
        buf = self.grad_buf if buf is None else buf
        idx = self.next_batch()
        if self._anchored:
            loss = self.batch_grad(theta, idx, buf)
            self.batch_grad(self.state["anchor"], idx, self.grad_buf2)
            # anchor_grad + (n/b) (sum_S grad U_j(theta) - sum_S grad U_j(anchor))
            buf.sub_(self.grad_buf2).mul_(self.scale).add_(self.anchor_grad)
            self.add_prior_grad(buf, theta, 1.0)
            return loss, buf, 1.0
        loss = self.batch_grad(theta, idx, buf)
        self.add_prior_grad(buf, theta, self.scale)
        return loss, buf, self.scale

    def _ewsg_energy_fn(self, theta):
        """``E(buf, c) = 1/2 ||x + w||^2`` of a candidate ``c * buf + alpha * theta``
        for the dynamics in use (the formula sheet, doc/algorithms.rst, "EWSG"),
        at the current state (``theta`` is the state's): see
        :meth:`._net_dynamics.NetworkDynamics.ewsg_energy`."""
        assert theta is self.state["theta"]
        return self.dynamics.ewsg_energy(self.state)

    def ewsg_estimate(self, theta):
        """EWSG: Metropolis index chain of length M over candidate minibatches.

        The first candidate ``J`` is a uniform minibatch; each of the ``M``
        proposals ``J'`` (uniform) replaces it with probability
        ``min(1, exp(E(J') - E(J)))``, ``E = ||x + w||^2 / 2``. Returns
        ``(loss, buf, c)`` of the chosen candidate, as :meth:`estimate`.
        """
        M = int(self.p["ewsg_chain_length"])
        loss, buf, c = self.estimate(theta, self.grad_buf)
        st = self.state
        self.dynamics.prepare(st, buf, c)  # pSGLD: its energies use D of V
        energy = self.dynamics.ewsg_energy(st)
        e_cur = energy(buf, c)
        cand = self._cand
        for _ in range(M):
            # every candidate comes from the same estimator: the same scale c
            loss_c, cand, _ = self.estimate(theta, cand)
            e_c = energy(cand, c)
            u = torch.rand((), generator=self.g, device=self.device, dtype=torch.float64)
            if self.on_cpu:
                # host-side decision: swap the buffers, no copies
                if math.log(float(u)) < float(e_c) - float(e_cur):
                    buf, cand = cand, buf
                    e_cur, loss = e_c, loss_c
                    st["ewsg_accept"] += 1
            else:
                # stay on the device (no synchronisation per step)
                accept = torch.log(u) < (e_c - e_cur).double()
                buf.copy_(torch.where(accept, cand, buf))
                e_cur = torch.where(accept, e_c, e_cur)
                loss = torch.where(accept, loss_c, loss)
                st["ewsg_accept_t"] = st.get("ewsg_accept_t", 0) + accept.to(torch.int64)
            st["ewsg_proposals"] += 1
        return loss, buf, c
