"""PyTorch peer of benchmarks/lenet5.py: same model, data, optimizer and batch size (eager)."""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dataset", default="fashion")
    ap.add_argument("--no-standardize", dest="standardize", action="store_false")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("SKIP PyTorch not installed (pip install torch==2.13.0)")
        return
    import numpy as np
    from lenet5 import load

    torch.set_num_threads(args.threads)
    X, y, Xt, yt = load(args.dataset)
    if args.standardize:  # as benchmarks/lenet5.py does
        mu, sd = float(X.mean()), float(X.std())
        X = (X - mu) / sd
        Xt = (Xt - mu) / sd
    X = torch.from_numpy(X[:, None])
    y = torch.from_numpy(y)
    Xt = torch.from_numpy(Xt[:, None])
    yt = torch.from_numpy(yt)
    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(1, 6, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(256, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, 10),
    )
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)
    lossf = nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(0)
    times = []
    for epoch in range(1, args.epochs + 1):
        t0 = time.perf_counter()
        perm = torch.randperm(X.shape[0], generator=g)
        for i in range(0, X.shape[0], args.batch_size):
            idx = perm[i : i + args.batch_size]
            opt.zero_grad(set_to_none=True)
            loss = lossf(model(X[idx]), y[idx])
            loss.backward()
            opt.step()
        times.append(time.perf_counter() - t0)
        with torch.no_grad():
            acc = (model(Xt).argmax(1) == yt).float().mean().item()
        print(f"torch eager epoch {epoch}: {times[-1]:.2f} s, test accuracy {acc:.4f}")
    print(
        f"torch eager median seconds per epoch: {np.median(times):.2f} "
        f"(batch {args.batch_size}, {args.threads} threads)"
    )


if __name__ == "__main__":
    main()
