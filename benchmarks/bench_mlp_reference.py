"""The network's default fit against the exact T = 1 posterior, on digits.

Issue 26 asks the defaults (``temperature=1``) to beat ``MLPClassifier`` in
log-loss on digits. Whether any sampler can is a property of the posterior,
not of a sampler: this script computes that posterior's model average with
Metropolis-adjusted Hamiltonian Monte Carlo, which is exact whatever its
step, and prints it beside the defaults and ``MLPClassifier``.

The model is the estimator's default for ``hidden_layer_sizes=(100,)``: a
64-100-10 ReLU network, softmax likelihood summed over the 1,257 training
rows of issue 26's split (``bench_mlp_defaults.load("digits")``), the fan-in
prior ``W_l ~ N(0, 4^2 / fan_in)``, biases ``N(0, 1)``. The reference:
full-batch HMC (``tests/_reference.hmc``, the sampler of the network's
reference test) in float64 with gradients from torch's autograd (not the
library's hand-written backward pass), a diagonal metric and the step
adapted as Stan does (windows of 75 / 25 / 50 / 100 / 300 / 50 iterations in
a 600-iteration warm-up; dual averaging toward acceptance 0.8), trajectories
of 2 time units (jittered by +-20%, at most 512 leapfrog steps), then 600
kept iterations; ``--chains`` chains from Glorot starts (numpy seeds 1000 +
chain for the start, 2000 + chain for the sampler). Each chain takes ~7
minutes on one core; the results are cached in
``benchmarks/results/mlp-digits-hmc-<chains>x600-v2.npz``.

Printed, for the reference, the defaults (``--seeds``) and MLPClassifier:
test log-loss of the model average, accuracy, ECE (15 bins), mean predictive
entropy, and for the two posteriors the per-draw means of the training
cross-entropy (per row) and of the test log-loss (per row), with Monte Carlo
standard errors for the reference.

Usage::

    python benchmarks/bench_mlp_reference.py               # 4 chains, seed 0
    python benchmarks/bench_mlp_reference.py --seeds 0 1 2
"""
import argparse
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
# the tests' references: the HMC sampler
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench_mlp_defaults import _scores, load, run_mlp  # noqa: E402
from _common import results_dir  # noqa: E402
from _reference import hmc  # noqa: E402

SIZES = (64, 100, 10)
PRIOR_SCALE, BIAS_SCALE = 4.0, 1.0
N_WARMUP = N_DRAWS = 600


def _layout():
    """``[(start, fan_in, fan_out)]`` and the prior precisions, flat."""
    layers, pos, prec = [], 0, []
    for fi, fo in zip(SIZES[:-1], SIZES[1:]):
        layers.append((pos, fi, fo))
        pos += fi * fo + fo
        prec += [fi / PRIOR_SCALE ** 2] * (fi * fo) + [1.0 / BIAS_SCALE ** 2] * fo
    return layers, np.array(prec)


def hmc_chain(chain, data, verbose=True):
    """One HMC chain (``tests/_reference.hmc``, the sampler the network's
    reference test uses) on the potential written here with torch's
    autograd: per kept iteration the test-set probabilities (averaged), the
    training cross-entropy per row and the test log-loss per row."""
    import torch
    torch.set_num_threads(1)
    dt = torch.float64
    Xtr, Xte, ytr, yte = data
    X, Y = torch.tensor(Xtr, dtype=dt), torch.tensor(ytr)
    Xt, Yt = torch.tensor(Xte, dtype=dt), torch.tensor(yte)
    layers, prec = _layout()
    prec = torch.tensor(prec, dtype=dt)

    def logits(th, A):
        for k, (p0, fi, fo) in enumerate(layers):
            A = A @ th[p0:p0 + fi * fo].view(fi, fo) + th[p0 + fi * fo:p0 + fi * fo + fo]
            if k < len(layers) - 1:
                A = torch.relu(A)
        return A

    def potential_and_gradient(theta):
        th = torch.from_numpy(theta).requires_grad_(True)
        u = (torch.nn.functional.cross_entropy(logits(th, X), Y, reduction="sum")
             + 0.5 * (prec * th * th).sum())
        g, = torch.autograd.grad(u, th)
        return float(u.detach()), g.numpy()

    rng = np.random.default_rng(1000 + chain)
    start = np.concatenate([rng.uniform(-b, b, fi * fo + fo) for b, fi, fo in
                            ((math.sqrt(6.0 / (fi + fo)), fi, fo) for _, fi, fo in layers)])
    t0 = time.time()
    draws, accept = hmc(potential_and_gradient, start, n_warmup=N_WARMUP, n_draws=N_DRAWS,
                        seed=2000 + chain, target_accept=0.8, max_leapfrog=512)
    with torch.no_grad():
        th = torch.from_numpy(draws)
        probs = torch.zeros(Xt.shape[0], SIZES[-1], dtype=dt)
        train_ce, test_ll = [], []
        for t in th:
            lp = torch.log_softmax(logits(t, Xt), dim=1)
            probs += lp.exp()
            test_ll.append(float(-lp[torch.arange(len(Yt)), Yt].mean()))
            train_ce.append(float(torch.nn.functional.cross_entropy(logits(t, X), Y)))
    if verbose:
        print(f"  HMC chain {chain}: acceptance {accept:.3f}, {time.time() - t0:.0f} s",
              flush=True)
    return dict(probs=(probs / N_DRAWS).numpy(), train_ce=np.array(train_ce),
                test_ll=np.array(test_ll), accept=accept)


def reference(n_chains, data):
    """The HMC chains' results (cached)."""
    path = results_dir() / f"mlp-digits-hmc-{n_chains}x{N_DRAWS}-v2.npz"
    if path.exists():
        z = np.load(path)
        return {k: z[k] for k in z.files}
    chains = [hmc_chain(c, data) for c in range(n_chains)]
    out = {k: np.array([c[k] for c in chains]) for k in chains[0]}
    np.savez(path, **out)
    return out


def _se(x):
    """Monte Carlo standard error of the mean of (chains, draws) series."""
    from skbayes_sg.diagnostics import ess
    return float(np.std(x) / math.sqrt(float(ess(x[:, :, None], method="mean")[0])))


def _line(label, s, train=None, test=None):
    extra = "" if train is None else f"  {train:>15} {test:>15}"
    print(f"  {label:<28} {s['log_loss']:8.4f} {s['accuracy']:8.4f} {s['ece']:7.4f} "
          f"{s['entropy']:8.4f}{extra}", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    args = parser.parse_args(argv)
    from skbayes_sg.diagnostics import MCMCConvergenceWarning
    from skbayes_sg.neural_network import SGMCMCMLPClassifier

    data = load("digits")
    Xtr, Xte, ytr, yte = data
    classes = np.arange(SIZES[-1])
    ref = reference(args.chains, data)
    print("digits 64-100-10, fan-in prior s = 4, T = 1; test rows:", len(yte))
    print(f"  {'':<28} {'log-loss':>8} {'accuracy':>8} {'ECE':>7} {'entropy':>8}"
          f"  {'train CE/draw':>15} {'test ll/draw':>15}")
    tr, te = ref["train_ce"], ref["test_ll"]
    _line(f"exact (HMC, {args.chains} x {N_DRAWS})", _scores(ref["probs"].mean(0), classes, yte),
          f"{tr.mean():.4f}+-{_se(tr):.4f}", f"{te.mean():.4f}+-{_se(te):.4f}")
    for seed in args.seeds:
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MCMCConvergenceWarning)
            # the T = 1 defaults (before temperature="auto"): the model the
            # exact reference samples
            clf = SGMCMCMLPClassifier(hidden_layer_sizes=(100,), temperature=1.0,
                                      random_state=seed).fit(Xtr, ytr)
        wall = time.perf_counter() - t0
        train = -clf._draw_log_likelihood(Xtr, ytr).mean() / len(ytr)
        test = -clf._draw_log_likelihood(Xte, yte).mean() / len(yte)
        _line(f"defaults, seed {seed} ({wall:.1f} s)",
              _scores(clf.predict_proba(Xte), clf.classes_, yte), f"{train:.4f}", f"{test:.4f}")
    _line("MLPClassifier", run_mlp(data, 0))


if __name__ == "__main__":
    main()
