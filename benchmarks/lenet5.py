"""LeNet5 on (Fashion-)MNIST: the SimpleChains.jl blog's second benchmark.

28x28x1 -> Conv(6, 5x5, relu) -> MaxPool(2) -> Conv(16, 5x5, relu) -> MaxPool(2) -> Flatten ->
Dense(120, relu) -> Dense(84, relu) -> Dense(10); Adam(3e-4), logit cross-entropy, mini-batches
reshuffled every epoch. Prints the batch size, the first epoch (compilation included) and the
seconds of each later epoch, train and test accuracy after epochs 1, 5 and 10, the training
GFLOP/s as a fraction of the FP32 peak measured on this machine (``_peak.py``); with --peers,
the same in PyTorch (benchmarks/peers/lenet5_torch.py) in the same run.

Data: --dataset fashion (default; Debian's dataset-fashion-mnist or a download) or mnist;
pixels standardised with the training set's mean and standard deviation (--no-standardize:
raw [0, 1] pixels), for both scichains and the peer.

Usage: python benchmarks/lenet5.py [--epochs 10] [--batch-size N] [--threads T] [--peers]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import _machine as machine  # noqa: E402


def lenet5():
    import scichains as sc

    return sc.SimpleChain(
        (1, 28, 28),
        sc.Conv(6, (5, 5), "relu"),
        sc.MaxPool((2, 2)),
        sc.Conv(16, (5, 5), "relu"),
        sc.MaxPool((2, 2)),
        sc.Flatten(),
        sc.Dense(120, "relu"),
        sc.Dense(84, "relu"),
        sc.Dense(10),
    )


# multiply-adds per image of the forward pass: conv1 24*24 positions x 6 x 25, conv2 8*8 x 16 x
# 150, dense 256*120 + 120*84 + 84*10 (the max-pools and activations: no multiply-adds)
FORWARD_MACS = 24 * 24 * 6 * 25 + 8 * 8 * 16 * 150 + 256 * 120 + 120 * 84 + 84 * 10
# training: forward, the weight gradients (as many), the input gradients (as many, except
# for the first layer, whose input needs none)
TRAIN_MACS = 3 * FORWARD_MACS - 24 * 24 * 6 * 25


def load(name):
    from scichains import datasets

    loader = datasets.load_fashion_mnist if name == "fashion" else datasets.load_mnist
    return loader("train") + loader("test")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--dataset", choices=("fashion", "mnist"), default="fashion")
    ap.add_argument("--peers", action="store_true")
    ap.add_argument(
        "--no-standardize",
        dest="standardize",
        action="store_false",
        help="feed pixels in [0, 1] instead of standardised ones",
    )
    args = ap.parse_args(argv)

    import numba

    import scichains as sc

    threads = args.threads or numba.config.NUMBA_NUM_THREADS
    batch = args.batch_size or 32 * threads
    X, y, Xt, yt = load(args.dataset)
    if args.standardize:
        # zero mean, unit variance, with the training set's statistics (test set likewise)
        mu, sd = float(X.mean()), float(X.std())
        X = (X - mu) / sd
        Xt = (Xt - mu) / sd
    chain = lenet5()
    cwl = chain.add_loss(sc.LogitCrossEntropyLoss(y))
    p = chain.init_params(seed=0)
    opt = sc.Adam(3e-4)
    print(
        f"LeNet5 on {args.dataset}-MNIST: {chain.num_params} parameters, {X.shape[0]} "
        f"training images, batch size {batch} ({threads} thread(s)), Adam(3e-4), float32"
    )
    print(machine.describe())
    times = []
    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        sc.train_batched(p, cwl, X, opt, 1, batch_size=batch, seed=epoch, threads=threads)
        dt = time.perf_counter() - t0
        times.append(dt)
        line = f"epoch {epoch}: {dt:.2f} s" + (" (includes compilation)" if epoch == 1 else "")
        if epoch in (1, 5, 10) or epoch == args.epochs:
            acc, _ = sc.accuracy_and_loss(cwl, X, y, p, threads=threads)
            acc_t, _ = sc.accuracy_and_loss(cwl, Xt, yt, p, threads=threads)
            line += f"; train accuracy {acc:.4f}, test accuracy {acc_t:.4f}"
        print(line)
        sys.stdout.flush()
    if len(times) > 1:
        med = float(np.median(times[1:]))
        print(f"median seconds per epoch after the first: {med:.2f}")
        import _peak

        peak, how = _peak.describe_peak(threads)
        gflops = 2 * TRAIN_MACS * X.shape[0] / med / 1e9
        print(how)
        print(
            f"{gflops:.1f} GFLOP/s ({TRAIN_MACS} multiply-adds per image and step) = "
            f"{100 * gflops / peak:.0f}% of the measured FP32 peak of {threads} thread(s)"
        )
    if args.peers:
        out = subprocess.run(
            [
                sys.executable,
                str(HERE / "peers" / "lenet5_torch.py"),
                "--epochs",
                str(min(args.epochs, 3)),
                "--batch-size",
                str(batch),
                "--threads",
                str(threads),
                "--dataset",
                args.dataset,
                *([] if args.standardize else ["--no-standardize"]),
            ],
            capture_output=True,
            text=True,
            timeout=3600,
        )
        print(out.stdout.strip())
        if out.returncode != 0:
            print(f"peer failed: {out.stderr.strip().splitlines()[-1:]}")
        elif len(times) > 1:
            import re

            m = re.search(r"median seconds per epoch: ([0-9.]+)", out.stdout)
            if m:
                ours = float(np.median(times[1:]))
                print(
                    f"scichains is {float(m.group(1)) / ours:.2f}x faster per epoch than "
                    f"PyTorch eager (same batch {batch}, {threads} threads, same run)"
                )


if __name__ == "__main__":
    main()
