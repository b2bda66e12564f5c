"""What batching K network chains can save on this CPU: the matrix products.

Issue 26 asks 4 batched chains of a 784-100-10 network to cost at most 2.5
times one chain. Nearly all of a step's arithmetic is the first layer's two
products (the forward ``X W1`` and the weight gradient ``X^T dZ``); this
script times them for one chain and for ``K`` chains three ways, in the
same run, and prints each as a ratio to one chain:

- ``shared``: the K chains share one minibatch, so their first layers are
  one product with K times the columns (``X [W1_1 ... W1_K]``), the best
  case for the hardware;
- ``batched``: K minibatches, ``torch.bmm``;
- ``looped``: K separate products (the chains one after the other; the
  estimator now steps its chains together, ``torch.bmm``, where it can).

Where one chain's products already run near the machine's peak, no batching
can bring K chains below ~K times one chain; the printed GFLOP/s say how
near.

Usage::

    python benchmarks/bench_mlp_chain_batching.py            # K = 4, rows 100 and 200
    python benchmarks/bench_mlp_chain_batching.py --chains 8
"""
import argparse
import time

import torch


def _time(fn, repeats=200):
    for _ in range(10):
        fn()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--rows", nargs="+", type=int, default=[100, 200])
    parser.add_argument("--fan-in", type=int, default=784)
    parser.add_argument("--hidden", type=int, default=100)
    args = parser.parse_args(argv)
    K, d, h = args.chains, args.fan_in, args.hidden
    torch.manual_seed(0)
    print(f"first layer {d} x {h}, {K} chains; times in us, ratios to one chain")
    for threads in sorted({1, torch.get_num_threads()}):
        torch.set_num_threads(threads)
        for b in args.rows:
            X, W = torch.randn(b, d), torch.randn(d, h)
            dz, gW = torch.randn(b, h), torch.empty(d, h)
            Wk, dzk, gWk = torch.randn(d, K * h), torch.randn(b, K * h), torch.empty(d, K * h)
            Xb, Wb = torch.randn(K, b, d), torch.randn(K, d, h)
            dzb, gWb = torch.randn(K, b, h), torch.empty(K, d, h)
            one = _time(lambda: (torch.mm(X, W), torch.mm(X.t(), dz, out=gW)))
            shared = _time(lambda: (torch.mm(X, Wk), torch.mm(X.t(), dzk, out=gWk)))
            batched = _time(lambda: (torch.bmm(Xb, Wb),
                                     torch.bmm(Xb.transpose(1, 2), dzb, out=gWb)))
            looped = _time(lambda: [(torch.mm(Xb[k], Wb[k]),
                                     torch.mm(Xb[k].t(), dzb[k], out=gWb[k]))
                                    for k in range(K)])
            gflops = 2 * 2 * b * d * h / one / 1e9
            print(f"  {threads} thread(s), {b} rows: one chain {one * 1e6:7.0f} "
                  f"({gflops:5.0f} GFLOP/s); {K} chains shared {shared / one:5.2f}x, "
                  f"batched {batched / one:5.2f}x, looped {looped / one:5.2f}x", flush=True)


if __name__ == "__main__":
    main()
