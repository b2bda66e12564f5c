"""The network estimator's dynamics: one small class per ``sampler=``.

Each class holds what one algorithm of the specs
(:data:`skbayes_sg._sampling._specs.DYNAMICS`) needs on a flat parameter
vector: the chain state it adds (momentum, thermostat, pSGLD accumulator),
its step, and its EWSG energy (the candidate's gradient whitened by the
step's own Gaussian transition, as the linear engine's ``ewsg_whitening``).
:class:`~._torch_sampler.ChainRunner` owns the data, the gradient
estimators, the noise and the driver loop, and calls these.

The formulas are those of the user guide (doc/algorithms.rst) in the
identity metric (``kappa = 0``: the classical integrators), with
``g = c * buf + alpha * theta`` the gradient estimate (``buf`` the
minibatch sum, ``c`` its scale, ``alpha theta`` the exact prior term).
On the CPU, SGLD, pSGLD, SGHMC, BAOAB and SGNHT run one fused C sweep
(:mod:`skbayes_sg._sampling._flat_dynamics`); ULD and SG-HMC leapfrog are
torch operations on every device (with the CPU noise stream on the CPU):
ULD's exact step needs two noise vectors and its memory traffic is that of
a few sweeps, and leapfrog spends ``K + 1`` gradients per step, so their
update is never the bottleneck.  Off the CPU (or with ``runner.fused`` off)
every dynamics is torch operations with the same formulas, so that on the
CPU the two paths give the same draws to rounding.

State keys (shared by the dynamics so that a chain switched to another
sampler between ``warm_start`` fits keeps what still applies): ``"r"`` the
momentum / velocity, ``"V"`` pSGLD's accumulator, ``"thermostat"`` SGNHT's
friction (a 0-d float64 tensor), ``"p_mid"`` True once BAOAB's momentum is
mid-step (the closing half-kick pending).
"""

import math

import torch

from .._sampling import _flat_dynamics as flat_dynamics
from .._sampling._coefficients import (py_friction_noise, py_langevin_coefficients,
                                       py_ou_coefficients)
from .._sampling._dynamics import uld_coefficients

# pSGLD constants (the formula sheet, doc/algorithms.rst): RMSprop decay ``a`` and
# regulariser ``lambda``.
PSGLD_DECAY = 0.99
PSGLD_EPS = 1e-5

#: ``n_leapfrog="auto"`` on the network: no whitened metric, so no reference
#: Gaussian whose quarter period would set it (the linear engine's rule)
NETWORK_N_LEAPFROG = 10


def _whitened_energy(parts, theta, alpha, work):
    """EWSG energy ``E(buf, c) = 1/2 sum_m ||x_m + a_m g||^2`` of a candidate
    ``g = c buf + alpha theta``, expanded into dot products per candidate.

    Parameters
    ----------
    parts : list of (float, tensor or None)
        ``(a_m, x_m)``: the whitening scale (the linear engine's ``c / s``)
        and the whitened gradient-free increment of component ``m`` (None
        for zero).  Each ``x_m`` is overwritten by ``u_m = x_m + a_m alpha
        theta``, the part shared by the candidates, so candidates are never
        materialised.
    theta : tensor
    alpha : float
    work : callable
        ``work(m)``: a scratch vector for component ``m`` when ``x_m`` is None.
    """
    us = []
    for m, (a, x) in enumerate(parts):
        if x is None:
            x = torch.mul(theta, a * alpha, out=work(m))
        elif alpha != 0.0:
            x.add_(theta, alpha=a * alpha)
        us.append((a, x, torch.dot(x, x)))

    def energy(buf, c):
        bb = torch.dot(buf, buf)
        e = 0.0
        for a, u, uu in us:
            ac = a * c
            e = e + ac * ac * bb + 2.0 * ac * torch.dot(buf, u) + uu
        return 0.5 * e
    return energy


def run_step(requests, estimate):
    """Drive a step's generator (``step_requests``) to its end, sending it
    ``estimate(point)`` at each point it yields; returns the step's loss."""
    point = next(requests)
    while True:
        try:
            point = requests.send(estimate(point))
        except StopIteration as done:
            return done.value


#: filled as the classes below are defined (``NetworkDynamics.__init_subclass__``)
_REGISTERED = {}


class NetworkDynamics:
    """Base class: a dynamics fed by one gradient estimate per step.

    Parameters
    ----------
    runner : ChainRunner
        Supplies ``p`` (the sampler parameters), the noise
        (``draw_noise``), scratch buffers and ``fused``.

    Subclasses set ``name`` and implement :meth:`update` (torch operations)
    and, where a C kernel exists, :meth:`fused_update`; :meth:`energy_parts`
    gives the EWSG whitening.
    """

    name = None
    has_momentum = False

    def __init_subclass__(cls, **kwargs):
        # a class that names its sampler registers itself (NETWORK_DYNAMICS)
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("name") is not None:
            _REGISTERED[cls.name] = cls

    def __init__(self, runner):
        self.runner = runner
        p = runner.p
        self.h = float(p["step_size"])
        self.T = float(p["temperature"])
        self.alpha = float(p["alpha"])

    def set_step_size(self, h):
        """Change the step size ``h`` (a step schedule), recomputing the
        coefficients that depend on it; the friction stays as set."""
        self.h = float(h)
        self._coefficients()

    def _coefficients(self):
        """Recompute the step's coefficients from ``self.h`` (none here)."""

    # ------------------------------------------------------------ state
    def init_state(self, st):
        """Add this dynamics' entries that ``st`` lacks (a fresh chain, or
        one continued from another sampler): momentum ~ N(0, T I)."""
        if self.has_momentum and st.get("r") is None:
            r = torch.empty_like(st["theta"]).normal_(generator=self.runner.g)
            st["r"] = r.mul_(math.sqrt(self.momentum_variance()))

    def momentum_variance(self):
        """Variance of the stationary momentum (T; ``u T`` for ULD)."""
        return self.T

    # ------------------------------------------------------------ step
    def step(self, st, estimate):
        """One step; ``estimate(theta)`` returns ``(loss, buf, c)``.  Returns
        the loss of the (last) estimate."""
        return run_step(self.step_requests(st), estimate)

    def step_requests(self, st):
        """One step as a generator: it yields each point at which the step
        needs a gradient estimate, is sent the estimate there (``(loss,
        buf, c)``) and returns the step's loss. :func:`run_step` drives it
        with one chain's estimator; :func:`._net_lockstep.run_chains` drives
        several chains' together, their estimates computed in one pass."""
        loss, buf, c = yield st["theta"]
        self.apply(st, buf, c)
        return loss

    def apply(self, st, buf, c):
        """The update with the estimate ``c * buf + alpha * theta``."""
        self.prepare(st, buf, c)
        if self.runner.fused:
            self.fused_update(st, buf.numpy(), c)
        else:
            self.update(st, buf, c)

    def prepare(self, st, buf, c):
        """Hook run with the first estimate before any energy or update."""

    def g_hat(self, st, buf, c):
        """``c * buf + alpha * theta`` in the runner's scratch buffer."""
        g = torch.mul(buf, c, out=self.runner.grad_buf2)  # scratch, never a ``buf``
        if self.alpha != 0.0:
            g.add_(st["theta"], alpha=self.alpha)
        return g

    def update(self, st, buf, c):
        raise NotImplementedError

    def fused_update(self, st, buf, c):
        # no C kernel: the torch operations, with the CPU noise stream
        self.update(st, torch.from_numpy(buf), c)

    # ------------------------------------------------------------ EWSG
    def ewsg_energy(self, st):
        """``E(buf, c)`` of a candidate at the current state (see
        :func:`_whitened_energy`)."""
        return _whitened_energy(self.energy_parts(st), st["theta"], self.alpha, self._work)

    def energy_parts(self, st):
        raise NotImplementedError

    def _work(self, k=0):
        """Scratch vector ``k`` of the EWSG energies."""
        return self.runner.ewsg_work(k)


class SGLD(NetworkDynamics):
    """``theta <- theta - h g + sqrt(2 h T) xi``."""

    name = "sgld"

    def __init__(self, runner):
        super().__init__(runner)
        self._coefficients()

    def _coefficients(self):
        _, self.s = py_langevin_coefficients(self.h, 0.0, self.T)

    def update(self, st, buf, c):
        g = self.g_hat(st, buf, c)
        noise = self.runner.draw_noise()
        st["theta"].add_(g, alpha=-self.h).add_(noise, alpha=self.s)

    def fused_update(self, st, buf, c):
        flat_dynamics.sgld_step(self.runner.normal_stream, st["theta"].numpy(), buf, c,
                                self.alpha, self.h, self.s)

    def energy_parts(self, st):
        # c = h, s = sqrt(2 h T), x = 0: E = h / (4T) ||g||^2
        return [(math.sqrt(self.h / (2.0 * self.T)), None)]


class PSGLD(NetworkDynamics):
    """pSGLD (RMSprop preconditioner, ``Gamma`` dropped):
    ``V <- a V + (1 - a) (g / n)^2``, ``D = lambda + sqrt(V)``,
    ``theta <- theta - h g / D + sqrt(2 h T / D) xi``; ``V`` starts at
    ``(g / n)^2`` of the chain's first estimate (``n`` the total weight)."""

    name = "psgld"

    def __init__(self, runner):
        super().__init__(runner)
        self._coefficients()
        self.inv_n = 1.0 / runner.n_eff  # the mean gradient is g / n
        self.v_weight = (1.0 - PSGLD_DECAY) / float(runner.n_eff) ** 2

    def _coefficients(self):
        # the Euler noise sqrt(2 h T), scaled per coordinate by 1 / sqrt(D)
        _, self.s = py_langevin_coefficients(self.h, 0.0, self.T)

    def prepare(self, st, buf, c):
        # not at zero, which would make the first steps 1 / lambda times too
        # large; the first update then leaves V unchanged
        if st.get("V") is None:
            g = torch.mul(buf, c).add_(st["theta"], alpha=self.alpha)
            st["V"] = g.mul_(g).div_(float(self.runner.n_eff) ** 2)

    def D(self, st):
        """``D = lambda + sqrt(V)`` (the preconditioner is ``1 / D``)."""
        return torch.sqrt(st["V"]).add_(PSGLD_EPS)

    def update(self, st, buf, c):
        g = self.g_hat(st, buf, c)
        noise = self.runner.draw_noise()
        st["V"].mul_(PSGLD_DECAY).addcmul_(g, g, value=self.v_weight)
        D = self.D(st)
        theta = st["theta"]
        theta.addcdiv_(g, D, value=-self.h)
        theta.addcdiv_(noise, torch.sqrt(D), value=self.s)

    def fused_update(self, st, buf, c):
        flat_dynamics.psgld_step(self.runner.normal_stream, st["theta"].numpy(),
                                 st["V"].numpy(), buf, c, self.alpha, self.h,
                                 self.s, PSGLD_DECAY, PSGLD_EPS, self.inv_n)

    def ewsg_energy(self, st):
        # c = h G, s = sqrt(2 h T G), x = 0 with G = 1 / D of the previous V:
        # a weighted norm, candidates materialised
        D = self.D(st)
        g = self._work()
        theta, alpha, k = st["theta"], self.alpha, self.h / (4.0 * self.T)

        def energy(buf, c):
            torch.mul(buf, c, out=g)
            if alpha != 0.0:
                g.add_(theta, alpha=alpha)
            return k * torch.dot(g, g / D)
        return energy


class SGHMC(NetworkDynamics):
    """Euler-Maruyama underdamped Langevin: ``theta <- theta + h r``,
    ``r <- (1 - h gamma) r - h g + sqrt(2 gamma T h) xi`` (g at the old theta)."""

    name = "sghmc"
    has_momentum = True

    def __init__(self, runner):
        super().__init__(runner)
        self.gamma = float(runner.p["friction"])
        self._coefficients()

    def _coefficients(self):
        self.s = py_friction_noise(self.gamma, self.T, self.h)
        self.keep = 1.0 - self.h * self.gamma

    def update(self, st, buf, c):
        g = self.g_hat(st, buf, c)
        noise = self.runner.draw_noise()
        r = st["r"]
        st["theta"].add_(r, alpha=self.h)
        r.mul_(self.keep).add_(g, alpha=-self.h).add_(noise, alpha=self.s)

    def fused_update(self, st, buf, c):
        flat_dynamics.sghmc_step(self.runner.normal_stream, st["theta"].numpy(),
                                 st["r"].numpy(), buf, c, self.alpha, self.h, self.gamma,
                                 self.s)

    def energy_parts(self, st):
        # c = h, s = sqrt(2 gamma T h), x = h gamma r / s (auto: r_{k+1} = r_k)
        a = self.h / self.s
        return [(a, torch.mul(st["r"], a * self.gamma, out=self._work()))]


class BAOAB(NetworkDynamics):
    """BAOAB (Leimkuhler & Matthews) with one estimate per step.

    B: ``p -= (h/2) g``; A: ``theta += (h/2) p``; O: ``p <- e^{-gamma h} p +
    sqrt(T (1 - e^{-2 gamma h})) xi``; A; B with the gradient at the new
    point.  The closing B of a step and the opening B of the next share the
    estimate at the new point, so the state momentum is mid-step (its closing
    half-kick pending) and a step is ``p -= t g`` (``t = h``; ``h/2`` at a
    chain's first step), then A O A.
    """

    name = "baoab"
    has_momentum = True

    def __init__(self, runner):
        super().__init__(runner)
        self.gamma = float(runner.p["friction"])
        self._coefficients()
        # the step size of the previous step: its closing half-kick is pending
        self._h_last = self.h

    def _coefficients(self):
        self.decay, self.s = py_ou_coefficients(self.gamma, self.h, self.T)

    def init_state(self, st):
        super().init_state(st)
        if st.get("p_mid") is None:
            st["p_mid"] = False

    def kick(self, st):
        # the pending closing half-kick of the previous step (its step size)
        # and the opening one of this step: h with a constant step
        return 0.5 * self.h + (0.5 * self._h_last if st["p_mid"] else 0.0)

    def apply(self, st, buf, c):
        super().apply(st, buf, c)
        st["p_mid"] = True
        self._h_last = self.h

    def update(self, st, buf, c):
        g = self.g_hat(st, buf, c)
        noise = self.runner.draw_noise()
        p, theta = st["r"], st["theta"]
        p.add_(g, alpha=-self.kick(st))
        theta.add_(p, alpha=0.5 * self.h)
        p.mul_(self.decay).add_(noise, alpha=self.s)
        theta.add_(p, alpha=0.5 * self.h)

    def fused_update(self, st, buf, c):
        flat_dynamics.baoab_step(self.runner.normal_stream, st["theta"].numpy(),
                                 st["r"].numpy(), buf, c, self.alpha, self.h,
                                 self.kick(st), self.decay, self.s)

    def energy_parts(self, st):
        # the candidate enters the O step's input: p_O = d (p - t g) + s xi, so
        # c/s = d t / s and x = (p - d p) / s (auto: target p_{k+1} = p_k)
        a = self.decay * self.kick(st) / self.s
        return [(a, torch.mul(st["r"], (1.0 - self.decay) / self.s, out=self._work()))]


class SGNHT(NetworkDynamics):
    """Stochastic gradient Nose-Hoover thermostat (Ding et al. 2014, Alg. 2):
    ``p <- p - h xi p - h g + sqrt(2 A T h) eta``; ``theta <- theta + h p``;
    ``xi <- xi + h (p.p / d - T)``, ``d`` the number of parameters, ``xi``
    starting at ``A = friction``."""

    name = "sgnht"
    has_momentum = True

    def __init__(self, runner):
        super().__init__(runner)
        self.A = float(runner.p["friction"])
        self._coefficients()

    def _coefficients(self):
        self.s = py_friction_noise(self.A, self.T, self.h)

    def init_state(self, st):
        super().init_state(st)
        if st.get("thermostat") is None:
            st["thermostat"] = torch.tensor(self.A, dtype=torch.float64,
                                            device=st["theta"].device)

    def update(self, st, buf, c):
        g = self.g_hat(st, buf, c)
        noise = self.runner.draw_noise()
        p, xi = st["r"], st["thermostat"]
        # the thermostat stays on the device (no synchronisation per step)
        p.mul_(1.0 - self.h * xi).add_(g, alpha=-self.h).add_(noise, alpha=self.s)
        st["theta"].add_(p, alpha=self.h)
        xi.add_(torch.dot(p, p).double().div_(p.numel()).sub_(self.T).mul_(self.h))

    def fused_update(self, st, buf, c):
        xi = st["thermostat"]
        kinetic = flat_dynamics.sgnht_step(
            self.runner.normal_stream, st["theta"].numpy(), st["r"].numpy(), buf, c,
            self.alpha, self.h, 1.0 - self.h * float(xi), self.s)
        xi.add_(self.h * (kinetic / st["r"].numel() - self.T))

    def energy_parts(self, st):
        # c = h, s = sqrt(2 A T h), x = h xi p / s (auto: p_{k+1} = p_k)
        a = self.h / self.s
        x = torch.mul(st["r"], st["thermostat"].to(st["r"].dtype), out=self._work())
        return [(a, x.mul_(a))]


class ULD(NetworkDynamics):
    """SG underdamped Langevin with the exact Ornstein-Uhlenbeck step (Cheng
    et al.): the gradient frozen at ``g``, velocity ``v`` with inverse mass
    ``u``, ``x' = e_xx x + e_xv v - f_x g + l_xv xi_1 + l_xx xi_2``,
    ``v' = e_vx x + e_vv v - f_v g + l_vv xi_1`` with the coefficients of
    :func:`skbayes_sg._sampling._dynamics.uld_coefficients` (``kappa = 0``,
    so ``e_xx = 1``, ``e_vx = 0``); ``v`` starts at ``N(0, u T I)``.

    Torch operations on every device (on the CPU with the noise stream):
    ``xi_1`` then ``xi_2``, one fill each, as the linear engine.
    """

    name = "uld"
    has_momentum = True

    def __init__(self, runner):
        super().__init__(runner)
        self.u = float(runner.p.get("inv_mass", 1.0))
        self.gamma = float(runner.p["friction"])
        self._coefficients()
        self._xi2 = torch.empty_like(runner.noise)  # the second noise vector

    def _coefficients(self):
        (self.e_xx, self.e_xv, self.e_vx, self.e_vv, self.f_x, self.f_v,
         self.l_vv, self.l_xv, self.l_xx) = uld_coefficients(
            self.h, self.gamma, self.u, self.T, 0.0)
        assert self.e_vx == 0.0 and self.e_xx == 1.0  # kappa = 0

    def momentum_variance(self):
        return self.u * self.T

    def update(self, st, buf, c):
        g = self.g_hat(st, buf, c)
        xi1 = self.runner.draw_noise()
        xi2 = self.runner.draw_noise(self._xi2)
        v, theta = st["r"], st["theta"]
        theta.add_(v, alpha=self.e_xv).add_(g, alpha=-self.f_x)
        theta.add_(xi1, alpha=self.l_xv).add_(xi2, alpha=self.l_xx)
        v.mul_(self.e_vv).add_(g, alpha=-self.f_v).add_(xi1, alpha=self.l_vv)

    def energy_parts(self, st):
        # whitened by the Cholesky factor [[l_vv, 0], [l_xv, l_xx]]: per
        # coordinate w_v = (f_v / l_vv) g, w_x = ((f_x - l_xv f_v / l_vv) / l_xx) g;
        # x (auto): v' = v and x' at its gradient-free mean
        av = self.f_v / self.l_vv
        ax = (self.f_x - self.l_xv * av) / self.l_xx if self.l_xx > 0 else 0.0
        xv_coef = (1.0 - self.e_vv) / self.l_vv          # (v - e_vv v) / l_vv
        xv = torch.mul(st["r"], xv_coef, out=self._work(0))
        xx_coef = -self.l_xv * xv_coef / self.l_xx if self.l_xx > 0 else 0.0
        xx = torch.mul(st["r"], xx_coef, out=self._work(1))
        return [(av, xv), (ax, xx)]


class SGHMCLeapfrog(NetworkDynamics):
    """SG-HMC with leapfrog: each step draws ``p ~ N(0, T I)``, makes ``K``
    leapfrog steps ``p -= (h/2) g; theta += h p; p -= (h/2) g`` with fresh
    stochastic gradients (``K + 1`` estimates per step: the closing
    half-kick of one leapfrog step and the opening one of the next share an
    estimate) and keeps ``theta``; no Metropolis test (stochastic gradients).

    Torch operations on every device (on the CPU the momentum comes from
    the noise stream): the ``K + 1`` gradients dominate the cost.
    """

    name = "sghmc-leapfrog"

    def __init__(self, runner):
        super().__init__(runner)
        K = runner.p.get("n_leapfrog", NETWORK_N_LEAPFROG)
        self.K = NETWORK_N_LEAPFROG if K == "auto" else int(K)
        self._p = torch.empty_like(runner.noise)  # the momentum, redrawn every step
        self.sqrt_T = math.sqrt(self.T)

    def step_requests(self, st):
        theta, half = st["theta"], 0.5 * self.h
        p = self.runner.draw_noise(self._p).mul_(self.sqrt_T)
        loss, buf, c = yield theta
        for _ in range(self.K):
            self._kick(p, theta, buf, c, half)
            theta.add_(p, alpha=self.h)
            loss, buf, c = yield theta
            self._kick(p, theta, buf, c, half)
        return loss

    def _kick(self, p, theta, buf, c, t):
        p.add_(buf, alpha=-t * c)
        if self.alpha != 0.0:
            p.add_(theta, alpha=-t * self.alpha)

    def energy_parts(self, st):
        # a kick from a fresh p ~ N(0, T): theta' ~ N(theta + h p - (h^2/2) g, h^2 T),
        # so c/s = h / (2 sqrt(T)) and x = 0 (kappa = 0); the same whitening
        # for every kick of the trajectory, as the linear engine
        return [(self.h / (2.0 * math.sqrt(self.T)), None)]


#: ``sampler=`` -> its class; the keys are the specs' network samplers
#: (checked by the tests)
NETWORK_DYNAMICS = _REGISTERED
