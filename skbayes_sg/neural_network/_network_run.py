"""The network estimator's run: the data as tensors, the run length and step
schedule, the chains (stepped together where their steps allow:
:mod:`._net_lockstep`), and the fit's attributes beside the draws (:class:`NetworkRunMixin`)."""
import math
import warnings

import numpy as np
import scipy.sparse as sp

from ._schedules import schedule_plan
from .._sampling._draws import MIN_STORED, resolve_budget
from .._sampling._runner import FitProgress, progress_guard
from .._sampling._specs import DYNAMICS
from .._warn_location import user_stacklevel

# n_warmup="auto" / thin="auto": at least MIN_WARMUP_STEPS warm-up steps and a
# thinning of MIN_THIN, and on data big enough that those are few passes,
# AUTO_PASSES passes of warm-up and as many again spread over the draws
# (MNIST 784-400-400-10: 2,000 steps are ~7 passes a chain, test error 2.58%
# and log-loss 0.092; 40 passes a chain 1.75% and 0.066; see doc/mlp.rst)
MIN_WARMUP_STEPS = 1000
MIN_THIN = 10
AUTO_PASSES = 20


def _auto_length(value, minimum, n_rows, rows_per_unit):
    """``value``, or for "auto" the larger of ``minimum`` and the count of
    ``rows_per_unit``-row units in ``AUTO_PASSES`` passes over ``n_rows``."""
    if value != "auto":
        return int(value)
    return max(minimum, int(math.ceil(AUTO_PASSES * n_rows / max(rows_per_unit, 1))))


class NetworkRunMixin:
    """The chains' run and the fitted attributes of
    :class:`~._mlp.SGMCMCMLPClassifier` (they read its parameters)."""

    def _tensors(self, torch, X, y_idx, weights, binary, device, dtype):
        """The rows (without a copy where they already are what the chains
        read), class indices and weights as tensors on ``device``."""
        # imports torch: fit only
        from ._torch_sampler import SparseRows, device_tensor

        if sp.issparse(X):      # made dense a minibatch at a time
            Xt = SparseRows(X, device, dtype)
        else:   # contiguous rows (index_select per minibatch), shared where they can be
            Xt = device_tensor(np.ascontiguousarray(X), device, dtype)
        if binary:
            yt = torch.tensor(y_idx, dtype=dtype, device=device)
        else:
            yt = torch.tensor(y_idx, dtype=torch.int64, device=device)
        wt = None if weights is None else torch.tensor(weights, dtype=dtype, device=device)
        return Xt, yt, wt

    def __sklearn_is_fitted__(self):
        """Fitted when it holds draws (``check_is_fitted``), not merely the
        data's attributes."""
        return hasattr(self, "coef_samples_")

    def _run_length(self, continuing, n_rows, batch_size, n_params, stored=0):
        """The chains' saved states and seeds, and the run: warm-up steps,
        draws, thinning and the step schedule (``n_warmup_``, ``thin_``,
        ``n_samples_``), the draws thinned to ``draws_memory_limit`` beside
        the ``stored`` draws per chain a ``partial_fit`` appends to."""
        if continuing:
            states = self._chain_states
            seeds = [0] * len(states)
            n_warmup = 0
        else:
            states = [None] * int(self.n_chains)
            seeds = self._chain_seeds()
            n_warmup = _auto_length(self.n_warmup, MIN_WARMUP_STEPS, n_rows, batch_size)
        n_keep = int(self.n_samples)
        thin = _auto_length(self.thin, MIN_THIN, n_rows, batch_size * n_keep)
        stride = self._memory_stride(n_keep, n_params, stored)
        if stride > 1:    # the same run, every stride-th draw kept
            n_keep, thin = -(-n_keep // stride), thin * stride
            if self.schedule == "cyclical":
                n_keep = max(n_keep, int(self.n_cycles))
        self.n_warmup_, self.thin_, self.n_samples_ = n_warmup, thin, n_keep
        n_steps, step_factors, keep = schedule_plan(
            self.schedule, n_warmup=n_warmup, n_samples=n_keep, thin=thin,
            n_cycles=self.n_cycles, exploration_fraction=self.exploration_fraction,
            power_t=self.power_t)
        return dict(states=states, seeds=seeds, n_warmup=n_warmup, n_keep=n_keep, thin=thin,
                    n_steps=n_steps, step_factors=step_factors, keep=keep)

    def _memory_stride(self, n_keep, n_params, stored):
        """1, or the thinning that keeps ``n_keep`` more float32 draws per
        chain (after ``stored`` ones) within ``draws_memory_limit``, with a
        warning that says so (as the linear estimators')."""
        per_draw = int(self.n_chains) * int(n_params) * np.dtype(np.float32).itemsize
        budget = resolve_budget(self.draws_memory_limit)
        capacity = max(MIN_STORED, (budget - stored * per_draw) // max(per_draw, 1))
        if n_keep <= capacity:
            return 1
        stride = -(-n_keep // capacity)
        kept = -(-n_keep // stride)
        warnings.warn(
            f"The {n_keep} draws per chain of {n_params:,} weights ({self.n_chains} chains) "
            f"would need {n_keep * per_draw / (1 << 30):.2f} GiB, more than "
            f"draws_memory_limit={self.draws_memory_limit!r} allows "
            f"({budget / (1 << 30):.2f} GiB): every {stride}-th is stored "
            f"({kept} per chain, thin_ {stride} times thin), for a run of "
            "the same length. To store more, raise draws_memory_limit or ask for fewer "
            "draws (n_samples) with a larger thin.", UserWarning, stacklevel=user_stacklevel())
        return stride

    def _run_chains(self, backend, torch, net, tensors, params, run, device, dtype):
        """The chains (stepped together where they can, else one after the
        other: :mod:`._net_lockstep`): ``(draws, states, modes, counts,
        progress)`` with ``counts`` the gradient evaluations and EWSG's
        acceptances, ``progress`` the progress line (verbose) or None."""
        # torch's modules: imported by fit only (the backend is loaded)
        from ._net_lockstep import run_chains, search_modes
        Xt, yt, wt = tensors
        n_keep, n_steps, n_warmup = run["n_keep"], run["n_steps"], run["n_warmup"]
        draws = np.empty((len(run["states"]), n_keep, net.n_params), dtype=np.float32)
        new_states, modes = [], []
        accepted = proposals = n_grad_evals = 0
        metropolis = []   # per chain: (acceptance sum, proposals, step)
        # one progress line for the chains and a final one with ESS and
        # R-hat, as the linear estimators
        progress = FitProgress(len(run["states"]), self.verbose) if self.verbose else None
        if progress is not None:
            progress.expect("warm-up and sampling" if n_warmup else "sampling", n_steps,
                            exact=True)
        # Ctrl-C: fit and partial_fit put the estimator back (restored_on_interrupt)
        with torch.no_grad(), progress_guard(progress), \
                backend.step_threads(net, min(int(params["batch_size"]), Xt.shape[0]), device):
            runners, fresh = [], []
            for saved, seed in zip(run["states"], run["seeds"]):
                gen = torch.Generator(device=device)
                gen.manual_seed(seed)
                runner = backend.ChainRunner(net, Xt, yt, params, gen, weights=wt)
                if saved is None:
                    runner.init_state(search_mode=False)
                    fresh.append(runner)
                else:
                    runner.load_state(saved)
                runners.append(runner)
            search_modes(fresh)
            if self.subsampling == "cv":
                modes = [r.state["anchor"].float().cpu().numpy() for r in runners]
            # float32 chains keep their draws in the fit's array itself (every
            # chain's at once, as they step together: no second copy)
            outs = [torch.from_numpy(draws[c]) if dtype == torch.float32
                    else torch.empty((n_keep, net.n_params), dtype=dtype)
                    for c in range(len(runners))]
            # stepped together where they can (_net_lockstep): the gradients
            # the chains ask for at once computed in one batched pass
            run_chains(runners, n_steps, n_warmup=n_warmup, thin=run["thin"],
                       samples=outs, step_factors=run["step_factors"],
                       keep=run["keep"], progress=progress)
            for c, (runner, out) in enumerate(zip(runners, outs)):
                if out.dtype != torch.float32:
                    draws[c] = out.float().numpy()
                new_states.append(runner.dump_state())
                n_grad_evals += runner.n_grad_evals
                accepted += new_states[-1]["ewsg_accept"]
                proposals += new_states[-1]["ewsg_proposals"]
                if runner.metropolis is not None:
                    metropolis.append((runner.metropolis.accept_sum,
                                       runner.metropolis.n_proposed,
                                       runner.metropolis.base_step))
        counts = (n_grad_evals, accepted, proposals, metropolis)
        return draws, new_states, modes, counts, progress

    def _store_fit(self, net, classes, states, modes, counts, run, params, device,
                   batch_size, continuing):
        """The fit's attributes beside the draws."""
        n_grad_evals, accepted, proposals, metropolis = counts
        binary = len(classes) == 2
        self._chain_states = states
        self.classes_ = classes
        self.layer_sizes_ = net.layer_sizes
        self.n_layers_ = len(net.layer_sizes)
        self.n_outputs_ = 1 if binary else len(classes)
        self.out_activation_ = "logistic" if binary else "softmax"
        self.n_params_ = net.n_params
        if not continuing:
            self.n_grad_evals_ = self.n_steps_ = 0
        self.n_grad_evals_ += n_grad_evals
        self.n_steps_ += run["n_steps"]
        self.ewsg_acceptance_rate_ = (
            accepted / proposals if self.subsampling == "ewsg" and proposals else None
        )
        if self.subsampling == "cv":
            self.map_coef_ = np.stack(modes)
        elif not continuing:
            self.map_coef_ = None
        self.device_ = device
        # the model the draws are of (temperature="auto" fits candidates)
        self.temperature_, self.prior_scale_ = self._model()
        self._store_steps(params, metropolis)
        self.batch_size_ = int(batch_size)
        self.friction_ = (params["friction"]
                          if "friction" in DYNAMICS[self.sampler].hyperparameters else None)

    def _store_steps(self, params, metropolis):
        """``step_size_`` (the geometric mean of the chains' adapted steps
        with a Metropolis step), ``metropolis_`` and ``acceptance_rate_``."""
        self.metropolis_ = bool(params["metropolis"])
        if not metropolis:
            self.step_size_ = params["step_size"]
            if hasattr(self, "acceptance_rate_"):
                del self.acceptance_rate_
            return
        steps = np.array([h for _, _, h in metropolis])
        self.step_size_ = (float(np.exp(np.mean(np.log(steps)))) if np.ptp(steps) > 0
                           else float(steps[0]))
        proposed = sum(n for _, n, _ in metropolis)
        self.acceptance_rate_ = (float(sum(a for a, _, _ in metropolis)) / proposed
                                 if proposed else float("nan"))
