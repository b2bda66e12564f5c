"""Bayesian MLPs on MNIST with SG-MCMC: accuracy/NLL per epoch, speed vs plain SGD.

Networks (ReLU, prior N(0, I), minibatches of 100):
- 784-100-10, as in the EWSG paper (section 5.3);
- 784-400-400-10, as in the pSGLD paper (MNIST feed-forward networks).

Samplers: SGLD, pSGLD, SGHMC (uniform minibatches) and EWSG (SGHMC dynamics,
index chain M=1). An *epoch* is a budget of n per-datum gradient evaluations
(one data pass), as the EWSG paper counts: EWSG with M=1 takes half as many
steps per epoch. Each epoch is one ``fit`` with ``warm_start=True`` (the chain
continues; the first epoch starts from the Glorot initialisation, no warm-up),
keeping ``--draws`` evenly thinned draws; the row reports the test accuracy
and negative log-likelihood (mean over test rows) of the Bayesian model average
over that epoch's draws, and of the last draw alone. Step sizes follow this
library's convention (the potential sums over the 60,000 rows), see the table
``STEP_SIZES``.

Speed: the wall time of one epoch (the ``fit`` call: validation and draw
copies included) against one epoch of a plain torch loop on the same network,
device, batch size and threads (``nn.Sequential`` + autograd +
``torch.optim.SGD``, reshuffled each epoch). Target: ratio <= 1.2 for the
uniform samplers. Times are medians over the epochs run.

Accuracy (``--mode accuracy``, issue 26): one ``fit`` of the whole model
average against point estimates of the same network trained in the same run
(torch, minibatches of 100, reshuffled each epoch: SGD with momentum 0.9 at
learning rate 0.05, Adam at 1e-3, and Adam at 1e-3 with weight decay 5e-4, each
for ``--point-epochs`` epochs).
Printed per model: test error, log-loss, ECE (15 bins), epochs of data seen
(gradient evaluations over n, all chains) and minutes. The models:

- ``defaults``: ``SGMCMCMLPClassifier(hidden_layer_sizes=..., random_state=0)``,
  nothing else set (``temperature="auto"``: the posterior or the cold model of
  ``mode-cold`` with a doubled prior scale, chosen on a fifth of the rows);
- ``temperature-1``: the defaults before that, ``temperature=1.0``;
- ``long``: the ``temperature=1.0`` defaults run for ``--best-epochs`` epochs a chain (half of
  them warm-up, the other half spread over the 100 draws; the default
  2,000 steps are ~7 epochs a chain at 60,000 rows);
- ``best``: the best configuration measured (``doc/mlp.rst``): SGHMC at
  learning rate 0.05 (``step_size=sqrt(0.05 / n)``), ``temperature=0.01``,
  4 chains of twice ``--best-epochs`` epochs (80 by default; 1.48% test
  error when measured);
- ``mode-cold``: the recipe of ``doc/mlp.rst`` (issue 40): ``init="mode"``
  (50 passes of Adam at 1e-2), ``prior_scale=8``, ``temperature=0.02``,
  ``n_warmup=200``;
- ``defaults-validation``, ``mode-cold-validation``: ``temperature-1`` and
  ``mode-cold`` with
  ``validation_fraction=0.1`` (the run checked on a tenth of the rows, the
  fit's warning on that check, then the chains continued on every row);
- ``psgld``: the pSGLD paper's MNIST set-up in this library's terms, one
  chain: ``sampler="psgld"``, the N(0, 100 I) prior (``prior="isotropic",
  alpha=0.01``), minibatches of 100, ``--best-epochs`` epochs of which the
  first fifth is warm-up, a polynomial step decay, one draw kept per epoch
  and all of them averaged.

Data: ``<repo>/../shared/data/mnist`` (idx gz files), or the directory in
``$SKBAYES_SG_MNIST`` (or ``$SKBAYES_SG_DATA/mnist``).

Usage::

    python benchmarks/bench_mlp_mnist.py --epochs 3                # 784-100-10
    python benchmarks/bench_mlp_mnist.py --arch both --epochs 2
    python benchmarks/bench_mlp_mnist.py --quick                   # smoke run
    python benchmarks/bench_mlp_mnist.py --device cuda             # on a GPU
    python benchmarks/bench_mlp_mnist.py --mode accuracy --arch 400-400
"""

import argparse
import gzip
import math
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np

ARCHS = {"100": (100,), "400-400": (400, 400)}

# (sampler, subsampling, step_size, extra parameters) per sampler name, for
# n = 60,000 rows (chosen from a coarse grid on 784-100-10: SGLD {1e-6, 4e-6,
# 1e-5}, pSGLD {2e-8, 1e-7, 3e-7}, SGHMC (h, gamma) {(4e-4, 250), (1e-3, 100),
# (2e-3, 50)}, best test NLL after two epochs).
STEP_SIZES = {
    "sgld": ("sgld", "uniform", 1e-5, {}),
    "psgld": ("psgld", "uniform", 1e-7, {}),
    "sghmc": ("sghmc", "uniform", 1e-3, {"friction": 100.0}),
    "ewsg": ("sghmc", "ewsg", 1e-3, {"friction": 100.0, "ewsg_chain_length": 1}),
    "svrg": ("sgld", "svrg", 1e-5, {}),
    "cv": ("sgld", "cv", 1e-5, {"map_epochs": 1}),
}


def mnist_dir():
    """Directory holding the four MNIST idx gz files."""
    if os.environ.get("SKBAYES_SG_MNIST"):
        return Path(os.environ["SKBAYES_SG_MNIST"]).expanduser()
    if os.environ.get("SKBAYES_SG_DATA"):
        return Path(os.environ["SKBAYES_SG_DATA"]).expanduser() / "mnist"
    return Path(__file__).resolve().parents[1].parent / "shared" / "data" / "mnist"


def _read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_mnist(directory):
    """MNIST as float32 in [0, 1] (rows of 784 pixels) and int64 labels."""
    d = Path(directory)
    Xtr = _read_idx(d / "train-images-idx3-ubyte.gz").reshape(-1, 784)
    ytr = _read_idx(d / "train-labels-idx1-ubyte.gz").astype(np.int64)
    Xte = _read_idx(d / "t10k-images-idx3-ubyte.gz").reshape(-1, 784)
    yte = _read_idx(d / "t10k-labels-idx1-ubyte.gz").astype(np.int64)
    scale = np.float32(1.0 / 255.0)
    return Xtr.astype(np.float32) * scale, ytr, Xte.astype(np.float32) * scale, yte


def _torch_net(n_inputs, hidden):
    """The network as ``nn.Sequential`` (ReLU, 10 outputs), torch's initialisation."""
    from torch import nn

    sizes = (n_inputs, *hidden, 10)
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def sgd_epoch_times(X, y, hidden, *, batch_size, epochs, device, lr=0.1, seed=0):
    """Per-epoch wall times (and final test-free state) of a plain torch SGD loop."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    model = _torch_net(X.shape[1], hidden).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    Xt = torch.as_tensor(X, device=device)
    yt = torch.as_tensor(y, device=device)
    n = len(X)
    times = []
    for _ in range(epochs):
        if device != "cpu":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        perm = torch.randperm(n, device=device)
        for s in range(0, n - batch_size + 1, batch_size):
            idx = perm[s:s + batch_size]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(Xt[idx]), yt[idx])
            loss.backward()
            opt.step()
        if device != "cpu":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return times, model


def evaluate(clf, Xte, yte):
    """(BMA accuracy, BMA NLL, last-draw accuracy, last-draw NLL) on the test set."""
    import copy

    logp = clf.predict_log_proba(Xte)
    acc = float(np.mean(clf.classes_[logp.argmax(1)] == yte))
    nll = float(-np.mean(logp[np.arange(len(yte)), np.searchsorted(clf.classes_, yte)]))
    one = copy.copy(clf)
    one.coef_samples_ = clf.coef_samples_[:1, -1:]
    logp1 = one.predict_log_proba(Xte)
    acc1 = float(np.mean(clf.classes_[logp1.argmax(1)] == yte))
    nll1 = float(-np.mean(logp1[np.arange(len(yte)), np.searchsorted(clf.classes_, yte)]))
    return acc, nll, acc1, nll1


def run_sampler(name, hidden, Xtr, ytr, Xte, yte, *, epochs, batch_size, draws, device,
                seed, step_scale):
    """Train one sampler for ``epochs`` epochs; yields per-epoch rows."""
    from skbayes_sg.neural_network import SGMCMCMLPClassifier

    sampler, subsampling, h, extra = STEP_SIZES[name]
    extra = dict(extra)
    # the table is for n = 60,000 rows; keep the SGD-equivalent learning rate
    # (h n for SGLD/pSGLD; h^2 n with h gamma fixed for SGHMC) on a subset
    ratio = 60000.0 / len(Xtr)
    if sampler == "sghmc":
        h *= np.sqrt(ratio)
        extra["friction"] /= np.sqrt(ratio)
    else:
        h *= ratio
    cost = 1 + extra.get("ewsg_chain_length", 0) if subsampling == "ewsg" else 1
    if subsampling in ("svrg", "cv"):
        cost = 2  # two backward passes per step (+ snapshots, counted in evals)
    steps = max(1, len(Xtr) // (batch_size * cost))
    n_draws = max(1, min(draws, steps))
    thin = max(1, steps // n_draws)
    clf = SGMCMCMLPClassifier(
        hidden, sampler=sampler, subsampling=subsampling, step_size=h * step_scale,
        batch_size=batch_size, n_samples=n_draws, n_warmup=0, thin=thin, alpha=1.0,
        # one chain (the defaults run 4: an epoch would be 4 chains' work
        # against one SGD epoch), the N(0, I) prior of the papers' networks
        n_chains=1, prior="isotropic", temperature=1.0,
        device=device, random_state=seed, **extra,
    )
    for epoch in range(1, epochs + 1):
        t0 = time.perf_counter()
        clf.fit(Xtr, ytr)
        dt = time.perf_counter() - t0
        clf.set_params(warm_start=True)
        acc, nll, acc1, nll1 = evaluate(clf, Xte, yte)
        yield dict(sampler=name, epoch=epoch, time=dt, acc=acc, nll=nll, acc1=acc1,
                   nll1=nll1, evals=clf.n_grad_evals_, steps=clf.n_steps_)


def point_estimate(X, y, Xte, yte, hidden, *, optimizer, epochs, batch_size=100, seed=0):
    """Test (error, log-loss, ECE, seconds) of a torch point estimate of the net."""
    import torch
    from torch import nn

    torch.manual_seed(seed)
    model = _torch_net(X.shape[1], hidden)
    # "adam-wd": the MAP net of issue 40's done-when (Adam with weight decay,
    # the 5e-4 of its digits anchor)
    opt = (torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9) if optimizer == "sgd"
           else torch.optim.Adam(model.parameters(), lr=1e-3,
                                 weight_decay=5e-4 if optimizer == "adam-wd" else 0.0))
    loss_fn = nn.CrossEntropyLoss()
    Xt, yt = torch.as_tensor(X), torch.as_tensor(y)
    t0 = time.perf_counter()
    for _ in range(epochs):
        perm = torch.randperm(len(X))
        for s in range(0, len(X) - batch_size + 1, batch_size):
            idx = perm[s:s + batch_size]
            opt.zero_grad(set_to_none=True)
            loss_fn(model(Xt[idx]), yt[idx]).backward()
            opt.step()
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        proba = torch.softmax(model(torch.as_tensor(Xte)), dim=1).double().numpy()
    return _scores(proba, yte) + (seconds,)


def _scores(proba, y):
    """(error, log-loss, ECE) of class probabilities over classes 0..9."""
    from skbayes_sg.diagnostics import expected_calibration_error

    p = np.clip(proba[np.arange(len(y)), y], 1e-300, None)
    return (float(np.mean(proba.argmax(1) != y)), float(-np.mean(np.log(p))),
            float(expected_calibration_error(y, proba, classes=np.arange(10))))


def accuracy_models(hidden, n_rows, best_epochs, seed):
    """{name: unfitted estimator} of ``--mode accuracy``."""
    from skbayes_sg.neural_network import SGMCMCMLPClassifier

    steps_per_epoch = n_rows // 100
    warm = best_epochs // 5
    # the defaults' batch (200 rows here): steps for half of best_epochs
    half = max(1, best_epochs * n_rows // (2 * 200))
    return {
        # temperature="auto" (issue 40): the posterior or the cold model
        # below, chosen on a fifth of the rows held out
        "defaults": SGMCMCMLPClassifier(hidden_layer_sizes=hidden, random_state=seed),
        # the defaults before it: the posterior itself
        "temperature-1": SGMCMCMLPClassifier(hidden_layer_sizes=hidden, temperature=1.0,
                                             random_state=seed),
        # issue 40, item 2: 10 % of the rows held out of the posterior, the
        # fit's warning on the model average's error on them
        "defaults-validation": SGMCMCMLPClassifier(hidden_layer_sizes=hidden,
                                                   validation_fraction=0.1, temperature=1.0,
                                                   random_state=seed),
        "long": SGMCMCMLPClassifier(hidden_layer_sizes=hidden, n_warmup=half, temperature=1.0,
                                    thin=max(1, half // 100), random_state=seed),
        # the best configuration measured (doc/mlp.rst): SGHMC at learning
        # rate 0.05 (second order: lr = h^2 n, so h = sqrt(0.05 / 60,000) =
        # 9.13e-4), tempered to T = 0.01, 4 chains of 2 x best_epochs epochs
        # (default 80: 12,000 + 100 x 120 steps of 200 rows)
        "best": SGMCMCMLPClassifier(hidden_layer_sizes=hidden, sampler="sghmc",
                                    step_size=math.sqrt(0.05 / n_rows), temperature=0.01,
                                    n_warmup=2 * half, thin=max(1, 2 * half // 100),
                                    random_state=seed),
        # issue 40's recipe measured on digits, breast cancer and 5,000 rows
        # (doc/mlp.rst): chains started at their own Adam modes, a wider
        # prior at a cold temperature
        "mode-cold": SGMCMCMLPClassifier(hidden_layer_sizes=hidden, init="mode", map_epochs=50,
                                         map_learning_rate=1e-2, prior_scale=8.0,
                                         temperature=0.02, n_warmup=200, random_state=seed),
        # the same, its run checked on a tenth of the rows before the chains
        # continue on all of them (validation_fraction)
        "mode-cold-validation": SGMCMCMLPClassifier(
            hidden_layer_sizes=hidden, init="mode", map_epochs=50, map_learning_rate=1e-2,
            prior_scale=8.0, temperature=0.02, n_warmup=200, validation_fraction=0.1,
            random_state=seed),
        "psgld": SGMCMCMLPClassifier(
            hidden_layer_sizes=hidden, sampler="psgld", prior="isotropic", alpha=0.01,
            temperature=1.0, batch_size=100, n_chains=1, n_warmup=warm * steps_per_epoch,
            n_samples=best_epochs - warm, thin=steps_per_epoch, schedule="polynomial",
            random_state=seed),
    }


def run_accuracy(args, Xtr, ytr, Xte, yte):
    """``--mode accuracy``: the model averages against point estimates."""
    for arch in (["100", "400-400"] if args.arch == "both" else [args.arch]):
        hidden = ARCHS[arch]
        print(f"\n== 784-{arch}-10: test error, log-loss, ECE (15 bins), epochs, minutes ==")
        print(f"{'model':26s} {'error':>7s} {'log-loss':>9s} {'ECE':>7s} {'epochs':>8s} "
              f"{'min':>6s}")
        rows = []
        for opt in ("sgd", "adam", "adam-wd"):
            err, nll, ece, sec = point_estimate(Xtr, ytr, Xte, yte, hidden, optimizer=opt,
                                                epochs=args.point_epochs, seed=args.seed)
            rows.append((f"torch {opt} point estimate", err, nll, ece,
                         float(args.point_epochs), sec))
            print(f"{rows[-1][0]:26s} {err:7.4f} {nll:9.4f} {ece:7.4f} "
                  f"{args.point_epochs:8.1f} {sec / 60:6.2f}", flush=True)
        for name, clf in accuracy_models(hidden, len(Xtr), args.best_epochs,
                                         args.seed).items():
            if args.models and name not in args.models.split(","):
                continue
            t0 = time.perf_counter()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                clf.fit(Xtr, ytr)
            sec = time.perf_counter() - t0
            proba = clf.predict_proba(Xte)
            full = np.zeros((len(yte), 10))
            full[:, clf.classes_] = proba
            err, nll, ece = _scores(full, yte)
            epochs = clf.n_grad_evals_ / len(Xtr)
            print(f"{'BMA ' + name:26s} {err:7.4f} {nll:9.4f} {ece:7.4f} {epochs:8.1f} "
                  f"{sec / 60:6.2f}  ({clf.sampler}, {clf.coef_samples_.shape[0]} chain(s) "
                  f"x {clf.coef_samples_.shape[1]} draws)", flush=True)
            selection = getattr(clf, "temperature_selection_", None)
            if selection is not None:
                print(f"    chose temperature {clf.temperature_:g}: {selection}")
            for w in caught:
                print(f"    warning: {str(w.message)[:300]}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=3, help="epochs per sampler")
    parser.add_argument("--arch", choices=["100", "400-400", "both"], default="100")
    parser.add_argument("--samplers", default="sgld,psgld,sghmc,ewsg",
                        help=f"comma-separated, from {sorted(STEP_SIZES)}")
    parser.add_argument("--subset", type=int, default=0,
                        help="use only the first N training rows (0: all 60,000)")
    parser.add_argument("--test-subset", type=int, default=0,
                        help="use only the first N test rows (0: all 10,000)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 1 epoch, 6,000 train / 2,000 test rows")
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--draws", type=int, default=10, help="draws kept per epoch")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or auto")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch.set_num_threads (0: torch's default)")
    parser.add_argument("--step-scale", type=float, default=1.0,
                        help="multiply every step size in STEP_SIZES")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mode", choices=["speed", "accuracy"], default="speed",
                        help="speed: per-epoch rows against a plain SGD epoch; accuracy: "
                        "whole fits against torch point estimates")
    parser.add_argument("--best-epochs", type=int, default=40,
                        help="epochs a chain of 'long' and of the pSGLD configuration "
                        "(accuracy mode)")
    parser.add_argument("--point-epochs", type=int, default=20,
                        help="epochs of the torch point estimates (accuracy mode)")
    parser.add_argument("--models", default="",
                        help="accuracy mode: comma-separated subset of "
                        "defaults,defaults-validation,long,best,mode-cold,mode-cold-validation,psgld")
    args = parser.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        args.epochs = 1
        args.subset = args.subset or 6000
        args.test_subset = args.test_subset or 2000
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"

    Xtr, ytr, Xte, yte = load_mnist(mnist_dir())
    if args.subset:
        Xtr, ytr = Xtr[:args.subset], ytr[:args.subset]
    if args.test_subset:
        Xte, yte = Xte[:args.test_subset], yte[:args.test_subset]
    if args.mode == "accuracy":
        print(f"MNIST train {Xtr.shape}, test {Xte.shape}; torch threads="
              f"{torch.get_num_threads()}")
        run_accuracy(args, Xtr, ytr, Xte, yte)
        return 0
    archs = ["100", "400-400"] if args.arch == "both" else [args.arch]
    samplers = [s.strip() for s in args.samplers.split(",") if s.strip()]
    print(f"MNIST train {Xtr.shape}, test {Xte.shape}; device={device}, "
          f"torch threads={torch.get_num_threads()}, batch={args.batch_size}, "
          f"epochs={args.epochs}, draws/epoch={args.draws}")

    for arch in archs:
        hidden = ARCHS[arch]
        name = "784-" + arch.replace("400-400", "400-400") + "-10"
        sgd_times, _ = sgd_epoch_times(Xtr, ytr, hidden, batch_size=args.batch_size,
                                       epochs=max(2, args.epochs), device=device)
        # the first epoch of the SGD loop includes warm-up effects; use the median
        sgd_t = statistics.median(sgd_times)
        print(f"\n== {name}: plain torch SGD epoch {sgd_t:.2f} s (median of "
              f"{len(sgd_times)}) ==")
        header = (f"{'sampler':8s} {'epoch':>5s} {'time[s]':>8s} {'x SGD':>6s} "
                  f"{'acc BMA':>8s} {'NLL BMA':>8s} {'acc 1':>7s} {'NLL 1':>7s} "
                  f"{'grad evals':>11s}")
        print(header)
        print("-" * len(header))
        summary = []
        for s in samplers:
            times = []
            for row in run_sampler(s, hidden, Xtr, ytr, Xte, yte, epochs=args.epochs,
                                   batch_size=args.batch_size, draws=args.draws,
                                   device=device, seed=args.seed,
                                   step_scale=args.step_scale):
                times.append(row["time"])
                print(f"{row['sampler']:8s} {row['epoch']:5d} {row['time']:8.2f} "
                      f"{row['time'] / sgd_t:6.2f} {row['acc']:8.4f} {row['nll']:8.4f} "
                      f"{row['acc1']:7.4f} {row['nll1']:7.4f} {row['evals']:11d}",
                      flush=True)
            summary.append((s, statistics.median(times)))
        print("epoch time / plain SGD epoch time (median over epochs; target <= 1.2):")
        for s, t in summary:
            print(f"  {s:8s} {t / sgd_t:5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
