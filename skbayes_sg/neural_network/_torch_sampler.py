"""Torch kernels behind :class:`~skbayes_sg.neural_network.SGMCMCMLPClassifier`.

This private module imports :mod:`torch` at import time; the estimator module
imports it lazily, inside ``fit`` and ``predict``, so that the public package
imports without torch.

Layout of a flat parameter vector ``theta`` for layer sizes
``(d_0, d_1, ..., d_L)``: for each layer ``l = 1..L`` in order, the weight
matrix ``W_l`` of shape ``(d_{l-1}, d_l)`` in C order (the orientation of
``MLPClassifier.coefs_``), then the bias ``b_l`` of shape ``(d_l,)``.

Gradients are computed by a hand-written backward pass (no autograd graph):
every minibatch gradient is the gradient of the loss *summed* over the rows
of the batch (weighted by the rows' frequency weights ``w_i`` when the chain
has them), written directly into a preallocated flat buffer.

The dynamics (one class per ``sampler=``) are in :mod:`._net_dynamics`. On
the CPU a step of SGLD, pSGLD, SGHMC, BAOAB or SGNHT is one fused sweep
(:mod:`skbayes_sg._sampling._flat_dynamics`) with the noise from a vectorised
:class:`~skbayes_sg._sampling._normal_stream.NormalStream`; on other devices
(and for ULD and SG-HMC leapfrog everywhere) it is the same formulas as torch
operations.
"""

import contextlib
import dataclasses
import math

import numpy as np
import scipy.sparse as sp
import torch

from .._sampling._normal_stream import NormalStream
from ..exceptions import SamplingDivergedError
from ._net_dynamics import NETWORK_DYNAMICS
from ._net_estimators import NetworkGradientsMixin
from ._net_metropolis import NetworkMetropolis

# Number of activations (elements) per prediction block: bounds device memory.
_PREDICT_BLOCK_ELEMENTS = 1 << 23
# Parameters are checked for non-finite values this often (steps) and at the end.
_FINITE_CHECK_EVERY = 100
# |log-probability| below which exp() stays a normal (not subnormal) float.
_LOGIT_CLAMP = {torch.float32: 80.0, torch.float64: 700.0}
# A minibatch's multiply-adds (rows x sum of fan_in x fan_out) below which a
# CPU step runs on one thread: there a second intra-op thread costs time even
# on idle cores (64-100-10 at 200 rows, 1.5 M: 214 us a gradient on one
# thread, 274 us on two; from 2.5 M two threads gain 9-34%, issue 26), and
# when the other core is busy it makes the whole fit 3-7x slower.
SMALL_STEP_WORK = 2_000_000


def torch_dtype(name):
    """Map ``"float32"``/``"float64"`` to the torch dtype."""
    return {"float32": torch.float32, "float64": torch.float64}[name]


def _T(x):
    """``x`` with its last two axes swapped (a matrix's, or each of a stack's,
    transpose)."""
    return x.transpose(-1, -2)


def _affine(b, a, W):
    """``b + a W``: one matrix (``torch.addmm``) or a stack (``torch.baddbmm``)."""
    return torch.addmm(b, a, W) if a.dim() == 2 else torch.baddbmm(b, a, W)


def _mm(a, b, out=None):
    """``a b``: one matrix (``torch.mm``) or a stack (``torch.bmm``)."""
    return torch.mm(a, b, out=out) if a.dim() == 2 else torch.bmm(a, b, out=out)


def _dot(v, w):
    """``sum_i v_i w_i`` over the last axis (one dot product per chain)."""
    return torch.dot(v, w) if v.dim() == 1 else (v * w).sum(dim=-1)


class MLPNet:
    """A fully connected network on a flat parameter vector.

    Parameters
    ----------
    layer_sizes : sequence of int
        ``(n_features, *hidden_layer_sizes, n_outputs)``.
    activation : {"relu", "tanh", "logistic", "identity"}
        Hidden-layer activation.
    binary : bool
        If True the single output is the logit of class 1 (sigmoid /
        binary cross-entropy, i.e. softmax over ``(0, z)``); otherwise the
        outputs are softmax logits.
    """

    def __init__(self, layer_sizes, activation, binary):
        self.layer_sizes = tuple(int(s) for s in layer_sizes)
        self.activation = activation
        self.binary = bool(binary)
        self.layers = []  # (fan_in, fan_out, w_start, b_start, end)
        pos = 0
        for fan_in, fan_out in zip(self.layer_sizes[:-1], self.layer_sizes[1:]):
            w0, b0 = pos, pos + fan_in * fan_out
            pos = b0 + fan_out
            self.layers.append((fan_in, fan_out, w0, b0, pos))
        self.n_params = pos

    # ------------------------------------------------------------------ views
    def views(self, flat):
        """Return ``[(W_l, b_l), ...]`` as views of a flat tensor.

        ``flat`` of shape ``(P,)`` gives ``W_l`` of shape ``(fan_in,
        fan_out)`` and ``b_l`` of shape ``(1, fan_out)``; a stack of chains,
        shape ``(C, P)``, gives ``(C, fan_in, fan_out)`` and ``(C, 1,
        fan_out)`` (:meth:`stacked_views`).
        """
        if flat.dim() == 2:
            return self.stacked_views(flat)
        return [
            (flat[w0:b0].view(fi, fo), flat[b0:end].view(1, fo))
            for fi, fo, w0, b0, end in self.layers
        ]

    def stacked_views(self, flat):
        """Return ``[(W_l, b_l), ...]`` with a leading draw axis from ``(D, P)``."""
        D = flat.shape[0]
        return [
            (flat[:, w0:b0].reshape(D, fi, fo), flat[:, b0:end].reshape(D, 1, fo))
            for fi, fo, w0, b0, end in self.layers
        ]

    # ------------------------------------------------------------ activation
    def _act(self, z):
        if self.activation == "relu":
            return torch.relu_(z)
        if self.activation == "tanh":
            return torch.tanh_(z)
        if self.activation == "logistic":
            return torch.sigmoid_(z)
        return z

    def _act_backward(self, a, da):
        """In place ``da *= act'(z)`` written with the activation output ``a``."""
        if self.activation == "relu":
            # a >= 0, so sign(a) is the 0/1 mask: 7 us a 200 x 100 layer,
            # against 36 us for the boolean mask's cast
            da.mul_(torch.sign(a))
        elif self.activation == "tanh":
            da.mul_(1.0 - a * a)
        elif self.activation == "logistic":
            da.mul_(a * (1.0 - a))
        return da

    # ------------------------------------------------------------ init
    def init_params(self, generator, device, dtype):
        """Glorot-uniform initialisation, as ``MLPClassifier`` does.

        Weights and biases of layer ``l`` are uniform on ``[-s, s]`` with
        ``s = sqrt(6 / (fan_in + fan_out))`` (times ``sqrt(2)`` for the
        logistic activation).
        """
        theta = torch.empty(self.n_params, device=device, dtype=dtype)
        factor = 2.0 if self.activation == "logistic" else 6.0
        for fi, fo, w0, b0, end in self.layers:
            bound = math.sqrt(factor / (fi + fo))
            seg = theta[w0:end]
            seg.uniform_(-bound, bound, generator=generator)
        return theta

    # ------------------------------------------------------------ forward
    def logits(self, flat, X):
        """Network outputs ``f_theta(X)`` of shape ``(n, n_outputs)``."""
        a = X
        views = self.views(flat)
        for W, b in views[:-1]:
            a = self._act(torch.addmm(b, a, W))
        W, b = views[-1]
        return torch.addmm(b, a, W)

    def loss_grad(self, flat, X, y, out, views=None, gviews=None, weights=None):
        """Summed cross-entropy over the rows of ``X`` and its gradient, for
        one chain or for a stack of chains at once.

        Parameters
        ----------
        flat : tensor of shape (P,) or (C, P)
            Parameters (of ``C`` chains: each row a chain's).
        X : tensor of shape (m, n_features) or (C, m, n_features)
            Rows (each chain its own).
        y : tensor of shape (m,) or (C, m)
            Class indices (int64) for softmax outputs, 0/1 floats for binary.
        out : tensor of shape (P,) or (C, P)
            Receives ``sum_i grad CE(y_i, f(x_i))`` (overwritten).
        views, gviews : list, optional
            Precomputed ``self.views(flat)`` and ``self.views(out)``.
        weights : tensor of shape (m,) or (C, m), optional
            Frequency weights ``w_i`` of the rows: the loss and the gradient
            are then ``sum_i w_i CE(y_i, f(x_i))`` and its gradient (each row's
            output error is scaled by ``w_i`` before the backward matmuls, so
            a weighted row costs no more than an unweighted one).

        Returns
        -------
        loss : tensor of shape () or (C,)
            ``sum_i w_i CE(y_i, f(x_i))`` (``w_i = 1`` without ``weights``;
            stays on the device: no sync).

        A stack of chains runs the same operations batched (``torch.bmm``
        in place of ``torch.mm``), so one pass of Python serves every chain;
        each chain's numbers are its own gradient's to rounding (the
        products of a batch may take another kernel).
        """
        if views is None:
            views = self.views(flat)
        if gviews is None:
            gviews = self.views(out)
        acts = [X]
        a = X
        for W, b in views[:-1]:
            a = self._act(_affine(b, a, W))
            acts.append(a)
        last = len(views) - 1
        W, b = views[last]
        loss, dz_t = self._output_error(a, W, b, y, weights)
        gW, gb = gviews[last]
        # the output layer's products with the outputs as rows: with few
        # outputs BLAS is several times faster so (MKL, 200 x 100 rows by 10
        # outputs: 12-16 us against 36-40 us either way); a transposed out=
        # is slower still (84 us), hence the copy
        _T(gW).copy_(_mm(dz_t, a))
        torch.sum(dz_t, dim=-1, keepdim=True, out=_T(gb))
        if last == 0:
            return loss
        dz = self._act_backward(a, _mm(_T(dz_t), _T(W)))
        for layer in range(last - 1, -1, -1):
            W, _ = views[layer]
            gW, gb = gviews[layer]
            a_prev = acts[layer]
            _mm(_T(a_prev), dz, out=gW)
            torch.sum(dz, dim=-2, keepdim=True, out=gb)
            if layer > 0:
                dz = self._act_backward(a_prev, _mm(dz, _T(W)))
        return loss

    def _output_error(self, a, W, b, y, weights):
        """The summed (weighted) cross-entropy of the output layer and its
        error ``dCE/dz`` with the outputs as rows, shape ``(n_outputs, m)``
        (``(C, n_outputs, m)`` for a stack of chains)."""
        if self.binary:
            z1 = _affine(b, a, W)[..., 0]
            ce = torch.nn.functional.softplus(z1) - y * z1
            loss = ce.sum(dim=-1) if weights is None else _dot(ce, weights)
            # clamping keeps sigmoid(z) away from subnormal floats, whose
            # arithmetic is ~100x slower on CPUs (changes it by < 1e-34)
            lim = _LOGIT_CLAMP[z1.dtype]
            dz_t = torch.sigmoid(z1.clamp(-lim, lim)).sub_(y).unsqueeze_(-2)
        else:
            z_t = _affine(_T(b), _T(W), _T(a))
            log_p = torch.log_softmax(z_t, dim=-2)
            rows = y.unsqueeze(-2)
            picked = log_p.gather(-2, rows).squeeze_(-2)
            loss = -(picked.sum(dim=-1) if weights is None else _dot(picked, weights))
            # log-probabilities clamped above log(smallest normal float):
            # subnormal probabilities make the backward matmuls ~100x slower
            dz_t = torch.exp(log_p.clamp_(min=-_LOGIT_CLAMP[z_t.dtype]))
            minus_one = torch.full(rows.shape, -1.0, dtype=dz_t.dtype, device=dz_t.device)
            dz_t.scatter_add_(-2, rows, minus_one)
        if weights is not None:
            # d(sum_i w_i CE_i)/dz_i = w_i dCE_i/dz_i; the backward pass is
            # linear in dz, so every layer's gradient is weighted from here
            dz_t.mul_(weights.unsqueeze(-2))
        return loss, dz_t

    # ------------------------------------------------------------ prediction
    def draws_log_proba(self, draws, X):
        """Per-draw class log-probabilities, shape ``(D, m, n_classes)``."""
        a = X
        views = self.stacked_views(draws)
        for W, b in views[:-1]:
            a = self._act(torch.baddbmm(b, a, W) if a.dim() == 3 else torch.matmul(a, W).add_(b))
        W, b = views[-1]
        z = torch.baddbmm(b, a, W) if a.dim() == 3 else torch.matmul(a, W).add_(b)
        if self.binary:
            z1 = z[..., 0]
            return torch.stack(
                [-torch.nn.functional.softplus(z1), -torch.nn.functional.softplus(-z1)],
                dim=-1,
            )
        return torch.log_softmax(z, dim=-1)


@contextlib.contextmanager
def step_threads(net, batch_size, device):
    """Run the chains on one intra-op thread when a step is small (on the
    CPU, ``batch_size * sum(fan_in * fan_out)`` below :data:`SMALL_STEP_WORK`);
    torch's own setting is restored afterwards (and used as it is for larger
    steps and other devices)."""
    work = int(batch_size) * sum(fi * fo for fi, fo, *_ in net.layers)
    before = torch.get_num_threads()
    single = torch.device(device).type == "cpu" and work < SMALL_STEP_WORK and before > 1
    if single:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if single:
            torch.set_num_threads(before)


def prediction_blocks(net, n_draws, max_draws):
    """``(d_block, rows)``: draws moved to the device at once (at most
    ``max_draws``) and rows per block, so that one block's activations hold
    at most ``_PREDICT_BLOCK_ELEMENTS`` numbers."""
    d_block = max(1, min(int(max_draws), n_draws))
    rows = max(1, _PREDICT_BLOCK_ELEMENTS // (d_block * max(net.layer_sizes)))
    return d_block, rows


def device_tensor(X, device, dtype):
    """A numpy block (rows, draws) as a tensor on ``device``: shared with
    numpy where it can be, copied where numpy's array is read-only (pandas
    hands out a DataFrame's values so, joblib a memory-mapped fit's draws),
    which torch cannot share without a warning to the user. A block of
    sparse rows is made dense (a prediction block, or a minibatch of
    :class:`SparseRows`)."""
    if sp.issparse(X):
        X = X.toarray()
    if X.flags.writeable:
        return torch.as_tensor(X).to(device=device, dtype=dtype)
    return torch.tensor(X, device=device, dtype=dtype)


class SparseRows:
    """CSR rows that a chain reads as dense tensors.

    A minibatch (or a chunk of a full-data gradient) is gathered from the
    CSR matrix and made dense on the device, so the network's products are
    those of the dense rows -- the draws of the same rows given dense -- at a
    minibatch's memory, never the whole matrix's. It has what
    :class:`ChainRunner` reads of its rows: ``shape``, ``device``,
    ``dtype``, ``index_select(0, idx)`` and slices of rows.

    Parameters
    ----------
    X : scipy.sparse matrix of shape (n, n_features)
    device, dtype :
        Of the dense blocks.
    """

    def __init__(self, X, device, dtype):
        X = sp.csr_matrix(X)
        if not X.has_canonical_format:     # summed duplicates, sorted columns: a copy
            X = X.copy()
            X.sum_duplicates()
        self.X = X
        self.shape = X.shape
        self.device = torch.device(device)
        self.dtype = dtype
        self._np_dtype = torch.empty(0, dtype=dtype).numpy().dtype
        self._every_row = None

    def every_row(self):
        """All the rows as one dense block, made once (the chains whose
        minibatch is every row share it)."""
        if self._every_row is None:
            self._every_row = self[0:self.shape[0]]
        return self._every_row

    def _dense(self, rows):
        """Rows ``rows`` (int array) as a dense tensor: each row's non-zeros
        written into a zeroed block (2-3x faster than scipy's row selection
        and ``toarray``; the same numbers)."""
        indptr = self.X.indptr
        starts = indptr[rows]
        lengths = indptr[rows + 1] - starts
        out = np.zeros((len(rows), self.shape[1]), dtype=self._np_dtype)
        nnz = int(lengths.sum())
        if nnz:
            owner = np.repeat(np.arange(len(rows)), lengths)
            pos = np.arange(nnz) + np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
            out[owner, self.X.indices[pos]] = self.X.data[pos]
        return torch.from_numpy(out).to(device=self.device)

    def index_select(self, dim, idx):
        """The rows ``idx`` (a tensor of indices), dense."""
        if dim != 0:
            raise ValueError("SparseRows selects rows (dim 0) only")
        return self._dense(idx.cpu().numpy())

    def __getitem__(self, rows):
        """A slice of rows, dense."""
        return self._dense(np.arange(*rows.indices(self.shape[0])))


def bma_log_proba(net, draws, X, *, device, dtype, max_draws):
    """Log of the Bayesian-model-average class probabilities.

    ``log (1/D) sum_d softmax(f_{theta_d}(x))``, evaluated in blocks of at
    most ``max_draws`` draws and a number of rows chosen so that one block's
    activations hold at most ``_PREDICT_BLOCK_ELEMENTS`` numbers.

    Parameters
    ----------
    net : MLPNet
    draws : ndarray of shape (D, P)
        Flat parameter draws (CPU).
    X : ndarray of shape (m, n_features)
    device, dtype : torch device and dtype used for the computation.
    max_draws : int
        Draws moved to the device at once.

    Returns
    -------
    ndarray of shape (m, n_classes), float64
        Normalised log-probabilities.
    """
    n_draws = draws.shape[0]
    m = X.shape[0]
    n_classes = 2 if net.binary else net.layer_sizes[-1]
    d_block, rows = prediction_blocks(net, n_draws, max_draws)
    out = np.empty((m, n_classes), dtype=np.float64)
    with torch.no_grad():
        for r0 in range(0, m, rows):
            Xt = device_tensor(X[r0:r0 + rows], device, dtype)
            acc = None
            for d0 in range(0, n_draws, d_block):
                chunk = device_tensor(draws[d0:d0 + d_block], device, dtype)
                lp = torch.logsumexp(net.draws_log_proba(chunk, Xt), dim=0)
                acc = lp if acc is None else torch.logaddexp(acc, lp)
            out[r0:r0 + rows] = acc.double().cpu().numpy()
    out -= math.log(n_draws)
    # renormalise in float64 so that probabilities sum to one
    mx = out.max(axis=1, keepdims=True)
    out -= mx + np.log(np.exp(out - mx).sum(axis=1, keepdims=True))
    return out


def draws_log_likelihood(net, draws, X, y_idx, *, device, dtype, max_draws):
    """Log-likelihood of the rows under every draw.

    Parameters
    ----------
    net : MLPNet
    draws : ndarray of shape (D, P)
        Flat parameter draws (CPU).
    X : ndarray of shape (m, n_features)
    y_idx : ndarray of shape (m,)
        Class indices (positions in ``classes_``).
    device, dtype : torch device and dtype used for the computation.
    max_draws : int
        Draws moved to the device at once.

    Returns
    -------
    ndarray of shape (D,), float64
        ``sum_i log p(y_i | x_i, theta_d)`` for each draw ``d``, evaluated in
        the blocks of :func:`bma_log_proba`.
    """
    n_draws = draws.shape[0]
    m = X.shape[0]
    d_block, rows = prediction_blocks(net, n_draws, max_draws)
    out = np.zeros(n_draws, dtype=np.float64)
    with torch.no_grad():
        yt_all = torch.as_tensor(np.asarray(y_idx, dtype=np.int64))
        for r0 in range(0, m, rows):
            Xt = device_tensor(X[r0:r0 + rows], device, dtype)
            yt = yt_all[r0:r0 + rows].to(device=device)
            for d0 in range(0, n_draws, d_block):
                chunk = device_tensor(draws[d0:d0 + d_block], device, dtype)
                lp = net.draws_log_proba(chunk, Xt)                     # (d, rows, C)
                picked = lp.gather(2, yt.view(1, -1, 1).expand(lp.shape[0], -1, 1))
                out[d0:d0 + lp.shape[0]] += picked.sum(dim=(1, 2)).double().cpu().numpy()
    return out


@dataclasses.dataclass
class _Run:
    """What a run's steps read (:meth:`ChainRunner.before_step`,
    :meth:`ChainRunner.after_step`; see :meth:`ChainRunner.run`), and the
    run's counts so far."""

    n_steps: int
    n_warmup: int
    thin: int
    samples: object
    progress: object
    step_factors: object
    keep: object
    stepper: object
    h0: float
    gibbs_every: int
    estimate: object
    svrg: bool
    period: int
    report_every: int
    loss_acc: object
    n_acc: int = 0
    kept: int = 0


class ChainRunner(NetworkGradientsMixin):
    """Run one SG-MCMC chain on a data set held on the device.

    The chain state (parameters, momentum, thermostat, pSGLD accumulator,
    minibatch permutation, SVRG/CV anchors, generator state) lives in
    ``self.state``; the dynamics (``self.dynamics``, one
    :mod:`._net_dynamics` class per sampler) add and update their entries;
    :meth:`dump_state` / :meth:`load_state` convert it to and from numpy
    arrays so that the estimator can store it (pickling) and continue the
    chain later (``warm_start`` / ``partial_fit``).

    Parameters
    ----------
    net : MLPNet
    X : tensor of shape (n, n_features)
    y : tensor of shape (n,)
    params : dict
        ``sampler, subsampling, step_size, batch_size, alpha, temperature,
        friction, ewsg_chain_length, snapshot_period, map_epochs,
        map_learning_rate, verbose`` and optionally ``init`` (``"mode"``:
        start at the mode Adam finds; default ``"auto"``), ``inv_mass`` (default 1),
        ``n_leapfrog`` (default 10), ``prior_layers`` (``[(s_l, s_b)]`` per
        layer: the fan-in prior, weights ``N(0, s_l^2 / fan_in)`` and biases
        ``N(0, s_b^2)``, with ``alpha`` 0; None: the isotropic ``alpha``) and
        ``hyperprior`` (``(a, b)``: Gibbs steps on each layer's precision).
    generator : torch.Generator
        The chain's generator (on the device).
    weights : tensor of shape (n,) or None, default=None
        Frequency weights ``w_i`` of the rows (on the device, in ``X``'s
        dtype): the potential is ``alpha ||theta||^2 / 2 + sum_i w_i U_i``.
        Every gradient estimator stays unbiased for it: minibatches are still
        uniform ``b``-subsets of the ``n`` rows, each row's gradient weighted
        (``(n/b) sum_{j in S} w_j grad U_j``), and full-data gradients (SVRG
        snapshots, CV anchors) are ``sum_j w_j grad U_j``. Where a rule
        means the amount of data in the potential (pSGLD's mean gradient
        ``g / n``, the CV mode search on ``U / n``) it uses the total weight
        ``sum_i w_i`` (``n_eff``) instead of ``n``; counts of work (``b``,
        ``n_grad_evals``, data passes) stay in rows. None: every weight is 1,
        the unweighted computation itself.
    """

    def __init__(self, net, X, y, params, generator, weights=None):
        self.net = net
        self.X = X
        self.y = y
        self.n = X.shape[0]
        self.w = weights
        # the amount of data in the potential: sum_i w_i (n without weights)
        self.n_eff = self.n if weights is None else float(weights.double().sum())
        self.p = params
        self.g = generator
        self.device = X.device
        self.dtype = X.dtype
        self.b = min(int(params["batch_size"]), self.n)
        if isinstance(X, SparseRows) and self.b >= self.n:
            # every row is each minibatch: one dense block, made once
            self.X = X.every_row()
        self.scale = self.n / self.b
        # SVRG / CV: every estimate subtracts the anchor's minibatch gradient
        self._anchored = params["subsampling"] in ("svrg", "cv")
        P = net.n_params
        self.grad_buf = torch.empty(P, device=self.device, dtype=self.dtype)
        self.grad_buf2 = torch.empty(P, device=self.device, dtype=self.dtype)
        self.noise = torch.empty(P, device=self.device, dtype=self.dtype)
        self.n_grad_evals = 0
        self.state = None
        self._views = {}
        self.on_cpu = self.device.type == "cpu"
        # On the CPU the step noise comes from a vectorised generator (5x
        # faster than torch's, whose cost equals a whole backward pass on
        # large networks) and each step is one fused sweep; on a GPU torch's
        # own generator is the fast one and the step is torch operations.
        # (``fused = False`` runs the torch operations on the CPU too, with
        # the same noise: the tests compare the two.)
        self.normal_stream = None
        self._noise_np = self.noise.numpy() if self.on_cpu else None
        self.fused = self.on_cpu
        if params["subsampling"] == "ewsg":
            # the proposed candidate's gradient
            self._cand = torch.empty(P, device=self.device, dtype=self.dtype)
        self._ewsg_work = []  # scratch of the dynamics' EWSG energies
        # per-layer prior (params["prior_layers"]): the prior term is then a
        # vector of precisions, added to every estimate (the dynamics' scalar
        # alpha is 0); None: the isotropic prior alpha, exact in the dynamics
        self.prior_layers = params.get("prior_layers")
        self.hyperprior = params.get("hyperprior")
        self.prior_prec = None
        if self.prior_layers is not None:
            if float(params["alpha"]) != 0.0:
                raise ValueError("a per-layer prior needs params['alpha'] = 0")
            self.prior_prec = torch.empty(P, device=self.device, dtype=self.dtype)
            self._layer_lambda = np.ones(len(net.layers))
            self._fill_prior()
        self.dynamics = NETWORK_DYNAMICS[params["sampler"]](self)
        # exact gradients and a reversible proposal: Metropolis-adjusted
        self.metropolis = (NetworkMetropolis(self, params["target_accept"], params["adapt_step"])
                           if params.get("metropolis") else None)

    # ----------------------------------------------------------- prior
    def _fill_prior(self):
        """``prior_prec`` <- the precisions of the per-layer prior: layer
        ``l``'s weights ``lambda_l * fan_in / s_l**2`` (``lambda_l = 1``
        without a hyperprior), its biases ``1 / s_b**2``."""
        for (fi, fo, w0, b0, end), (w_scale, b_scale), lam in zip(
                self.net.layers, self.prior_layers, self._layer_lambda):
            self.prior_prec[w0:b0].fill_(float(lam) * fi / (w_scale * w_scale))
            self.prior_prec[b0:end].fill_(1.0 / (b_scale * b_scale))

    def add_prior_grad(self, buf, theta, c):
        """``buf += prior_prec * theta / c``: the estimate ``c * buf`` then
        holds the prior term (a no-op for the isotropic prior, which the
        dynamics add exactly)."""
        if self.prior_prec is not None:
            buf.addcmul_(self.prior_prec, theta, value=1.0 / c)
        return buf

    def gibbs_prior(self):
        """Gibbs update of the per-layer precision multipliers ``lambda_l``
        (``hyperprior=(a, b)``, a Gamma(a, b) prior on each): given the
        weights ``W_l`` (``n_l`` numbers, prior ``N(0, s_l^2 / (lambda_l
        fan_in))``), ``lambda_l`` is drawn from the conditional of the target
        ``exp(-U / T)``: Gamma with shape ``(a - 1 + n_l / 2) / T + 1`` and
        rate ``(b + fan_in ||W_l||^2 / (2 s_l^2)) / T`` (at ``T = 1``:
        ``a + n_l / 2`` and ``b + fan_in ||W_l||^2 / (2 s_l^2)``). The gamma
        variates come from a numpy generator seeded by the chain's
        generator, so the chain stays reproducible."""
        a, b = self.hyperprior
        T = float(self.p["temperature"])
        theta = self.state["theta"]
        seed = int(torch.randint(0, 2 ** 62, (1,), generator=self.g, device=self.device))
        rng = np.random.default_rng(seed)
        for k, ((fi, fo, w0, b0, end), (w_scale, _)) in enumerate(
                zip(self.net.layers, self.prior_layers)):
            W = theta[w0:b0]
            ss = float(torch.dot(W, W)) * fi / (w_scale * w_scale)
            shape = (a - 1.0 + 0.5 * fi * fo) / T + 1.0
            rate = (b + 0.5 * ss) / T
            self._layer_lambda[k] = rng.gamma(shape, 1.0 / rate)
        self._fill_prior()
        if self.metropolis is not None:
            self.metropolis.invalidate()   # the potential changed with the prior

    def ewsg_work(self, k=0):
        """Scratch vector ``k`` (``P`` numbers) of the EWSG energies."""
        while len(self._ewsg_work) <= k:
            self._ewsg_work.append(torch.empty_like(self.grad_buf))
        return self._ewsg_work[k]

    def _views_of(self, flat):
        """Per-layer views of ``flat``, cached (the cache holds ``flat``, so
        its id cannot be reused while cached)."""
        hit = self._views.get(id(flat))
        if hit is None or hit[0] is not flat:
            if len(self._views) > 16:
                self._views.clear()
            hit = (flat, self.net.views(flat))
            self._views[id(flat)] = hit
        return hit[1]

    # ----------------------------------------------------------- state
    def _seed_normal_stream(self):
        """CPU noise stream seeded by one draw of the chain's generator."""
        if self.on_cpu:
            seed = int(torch.randint(0, 2 ** 62, (1,), generator=self.g, device=self.device))
            self.normal_stream = NormalStream(seed)

    def draw_noise(self, out=None):
        """``out`` (default ``self.noise``) <- standard normals: the CPU
        stream on the CPU, the chain's torch generator elsewhere."""
        out = self.noise if out is None else out
        if self.on_cpu:
            self.normal_stream.fill(self._noise_np if out is self.noise else out.numpy())
        else:
            out.normal_(generator=self.g)
        return out

    def init_state(self, search_mode=True):
        """Fresh chain: Glorot-initialised parameters, then the dynamics'
        entries (momentum ~ N(0, T I), thermostat, ...); then, where
        ``search_mode``, :meth:`search_mode` (``init="mode"`` or
        ``subsampling="cv"``: the mode Adam finds from there, each chain its
        own)."""
        theta = self.net.init_params(self.g, self.device, self.dtype)
        self._seed_normal_stream()
        st = {"theta": theta, "perm": None, "pos": 0, "step": 0,
              "V": None, "r": None, "anchor": None, "since_snapshot": 0,
              "ewsg_accept": 0, "ewsg_proposals": 0, "thermostat": None, "p_mid": None,
              "mh_step": None}
        self.dynamics.init_state(st)
        self.state = st
        if search_mode:
            self.search_mode()
        return st

    def search_mode(self):
        """A fresh chain's move to its mode: with ``subsampling="cv"`` to the
        mode it anchors on, with ``init="mode"`` to the mode Adam finds from
        its start, else nowhere (:func:`._net_lockstep.search_modes` runs
        the Adam searches of several chains together)."""
        if self.p["subsampling"] == "cv":
            self._find_mode()      # the chain starts at the mode it anchors on
        elif self.p.get("init", "auto") == "mode":
            self.state["theta"] = self._adam_mode(self.state["theta"])

    def dump_state(self):
        """Numpy copy of the chain state (for pickling / warm start)."""
        st = self.state
        out = {}
        for key in ("theta", "perm", "V", "r", "anchor"):
            val = st[key]
            out[key] = None if val is None else val.detach().cpu().numpy().copy()
        for key in ("pos", "step", "since_snapshot", "ewsg_accept", "ewsg_proposals"):
            out[key] = int(st[key])
        out["thermostat"] = None if st["thermostat"] is None else float(st["thermostat"])
        out["p_mid"] = st["p_mid"]
        out["mh_step"] = st.get("mh_step")
        out["generator"] = self.g.get_state().numpy().copy()
        out["normal_stream"] = (None if self.normal_stream is None
                                else self.normal_stream.get_state())
        out["n_data"] = int(self.n)
        out["layer_lambda"] = (None if self.prior_prec is None
                               else self._layer_lambda.copy())
        return out

    def load_state(self, saved):
        """Restore a state written by :meth:`dump_state`."""
        st = {}
        for key in ("theta", "V", "r", "anchor"):
            val = saved[key]
            st[key] = None if val is None else torch.as_tensor(val).to(
                device=self.device, dtype=self.dtype).clone()
        for key in ("pos", "step", "since_snapshot", "ewsg_accept", "ewsg_proposals"):
            st[key] = int(saved[key])
        # states pickled before SGNHT / BAOAB existed lack these
        xi = saved.get("thermostat")
        st["thermostat"] = None if xi is None else torch.tensor(
            float(xi), dtype=torch.float64, device=self.device)
        st["p_mid"] = saved.get("p_mid")
        st["mh_step"] = saved.get("mh_step")   # the Metropolis chain's adapted step
        if saved["perm"] is not None and saved["n_data"] == self.n and len(saved["perm"]) == self.n:
            st["perm"] = torch.as_tensor(saved["perm"]).to(self.device)
        else:
            st["perm"], st["pos"] = None, 0
        self.g.set_state(torch.from_numpy(saved["generator"].copy()))
        if self.on_cpu and saved.get("normal_stream") is not None:
            self.normal_stream = NormalStream(0)
            self.normal_stream.set_state(saved["normal_stream"])
        else:  # a fresh chain, or one continued on another device
            self._seed_normal_stream()
        self.state = st
        lam = saved.get("layer_lambda")
        if (self.prior_prec is not None and self.hyperprior is not None
                and lam is not None and len(lam) == len(self._layer_lambda)):
            self._layer_lambda = np.array(lam, dtype=np.float64)
            self._fill_prior()
        # what this sampler needs and the saved chain lacks (another sampler's)
        self.dynamics.init_state(st)
        if self.p["subsampling"] == "cv" and st["anchor"] is None:
            self._find_mode()
        elif st["anchor"] is not None:
            # the anchor's full-data gradient is recomputed on the current data
            self.anchor_grad = self.full_grad(st["anchor"])

    # ----------------------------------------------------------- driver
    def run(self, n_steps, *, n_warmup, thin, samples, progress=None,
            step_factors=None, keep=None):
        """Run ``n_steps`` steps; after ``n_warmup`` keep every ``thin``-th.

        Parameters
        ----------
        n_steps : int
        n_warmup : int
            Steps discarded at the start of this run.
        thin : int
        samples : tensor of shape (n_keep, P) on the CPU
            Receives the kept draws.
        progress : FitProgress or None
            Receives the steps done (and, once per data pass, the mean
            minibatch cross-entropy as a note).
        step_factors : ndarray of shape (n_steps,) or None
            Step ``k`` uses the step size ``step_size * step_factors[k]`` (a
            step schedule); None: ``step_size`` throughout.
        keep : ndarray of bool, shape (n_steps,), or None
            Keep the state after step ``k`` where ``keep[k]`` (in place of
            the ``n_warmup`` / ``thin`` rule); the cyclical schedule's.

        Returns
        -------
        kept : int
            Draws written to ``samples``.

        :func:`._net_lockstep.run_chains` runs several runners' steps
        together through the pieces of this loop: :meth:`begin`, then for
        each step :meth:`before_step`, the stepper's ``step_requests`` and
        :meth:`after_step`, and :meth:`finish`.
        """
        run = self.begin(n_steps, n_warmup=n_warmup, thin=thin, samples=samples,
                         progress=progress, step_factors=step_factors, keep=keep)
        for k in range(n_steps):
            self.advance(run, k)
        return self.finish(run)

    def begin(self, n_steps, *, n_warmup, thin, samples, progress=None,
              step_factors=None, keep=None):
        """The settings of a run of :meth:`advance` steps (see :meth:`run`)."""
        p = self.p
        if self.metropolis is not None:
            self.metropolis.begin(self.state, n_warmup,
                                  schedule_constant=step_factors is None)
        period = p["snapshot_period"]
        if period in (None, "auto"):        # one data pass
            period = int(math.ceil(self.n / self.b))
        return _Run(
            n_steps=n_steps, n_warmup=n_warmup, thin=thin, samples=samples,
            progress=progress, step_factors=step_factors, keep=keep,
            stepper=self.metropolis or self.dynamics, h0=float(self.dynamics.h),
            gibbs_every=(max(1, int(math.ceil(self.n / self.b)))
                         if self.hyperprior is not None and self.prior_prec is not None
                         else 0),
            estimate=self.ewsg_estimate if p["subsampling"] == "ewsg" else self.estimate,
            svrg=p["subsampling"] == "svrg", period=period,
            report_every=max(1, int(math.ceil(self.n / self.b))),
            loss_acc=torch.zeros((), device=self.device, dtype=self.dtype))

    def advance(self, run, k, estimate=None):
        """Step ``k`` of ``run`` (from :meth:`begin`); ``estimate`` (default
        the run's gradient estimator) is the step's ``estimate(theta)``."""
        self.before_step(run, k)
        # one step of the dynamics: one estimate (K + 1 for leapfrog)
        loss = run.stepper.step(self.state, run.estimate if estimate is None else estimate)
        self.after_step(run, k, loss)

    def before_step(self, run, k):
        """What step ``k`` of ``run`` does before its dynamics: the SVRG
        snapshot when due, the schedule's step size."""
        st = self.state
        if run.svrg and (st["anchor"] is None or st["since_snapshot"] >= run.period):
            st["anchor"] = st["theta"].clone()
            self.anchor_grad = self.full_grad(st["anchor"])
            st["since_snapshot"] = 0
        if run.step_factors is not None:
            self.dynamics.set_step_size(run.h0 * float(run.step_factors[k]))

    def after_step(self, run, k, loss):
        """What step ``k`` of ``run`` does after its dynamics (``loss`` the
        step's data loss): the Gibbs step of a hyperprior, the kept draw,
        the finiteness check, the progress line."""
        st = self.state
        st["step"] += 1
        if run.gibbs_every and st["step"] % run.gibbs_every == 0:
            self.gibbs_prior()
        if run.svrg:
            st["since_snapshot"] += 1
        if (run.keep[k] if run.keep is not None
                else k >= run.n_warmup and (k - run.n_warmup + 1) % run.thin == 0):
            run.samples[run.kept].copy_(st["theta"])
            run.kept += 1
        if (k + 1) % _FINITE_CHECK_EVERY == 0 and not bool(torch.isfinite(st["theta"]).all()):
            self._diverged()
        if run.progress is not None:
            run.loss_acc += loss
            run.n_acc += 1
            if (k + 1) % run.report_every == 0 or k + 1 == run.n_steps:
                # per unit of weight: b rows carry b * n_eff / n of it on average
                mean_loss = float(run.loss_acc) / (run.n_acc * self.b * self.n_eff / self.n)
                run.progress.note = f"minibatch loss (mean CE) {mean_loss:.5f}"
                run.loss_acc.zero_()
                run.n_acc = 0
            run.progress.add(0, 1)

    def finish(self, run):
        """Close ``run``: check the state and the draws, settle the EWSG and
        Metropolis counts; returns the draws kept."""
        st = self.state
        if not (bool(torch.isfinite(st["theta"]).all())
                and bool(torch.isfinite(run.samples[:run.kept]).all())):
            self._diverged()
        if "ewsg_accept_t" in st:
            st["ewsg_accept"] += int(st.pop("ewsg_accept_t"))
        if self.metropolis is not None:
            self.metropolis.end(st)
        return run.kept

    def _diverged(self):
        h = self.p["step_size"]
        raise SamplingDivergedError(
            f"The {self.p['sampler']} chain diverged (non-finite parameters) at step "
            f"{self.state['step']}: step_size={h!r} is too large for this problem; "
            f"try a smaller step_size, e.g. step_size={h / 10:g}."
        )
