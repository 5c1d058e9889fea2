"""PyTorch peer of benchmarks/matexp.py: same data, initial weights, loss and optimizer.

Prints 'RESULT <config> <seconds per 10,000 iterations>' for eager Adam, eager
Adam(fused=True) and torch.compile; 'SKIP ...' when PyTorch is not installed.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _matexp_data as data  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("SKIP PyTorch not installed (pip install torch==2.13.0 for the CPU build)")
        return
    torch.set_num_threads(args.threads)
    X, Y, _, _ = data.dataset()
    X = torch.from_numpy(X)
    Y = torch.from_numpy(Y)
    N = X.shape[0]
    weights = data.initial_weights()

    def build():
        layers = [
            torch.nn.Linear(4, 32),
            torch.nn.Tanh(),
            torch.nn.Linear(32, 16),
            torch.nn.Tanh(),
            torch.nn.Linear(16, 4),
        ]
        with torch.no_grad():
            for lin, (W, b) in zip(layers[::2], weights):
                lin.weight.copy_(torch.from_numpy(W))  # (out, in), as scichains
                lin.bias.copy_(torch.from_numpy(b))
        return torch.nn.Sequential(*layers)

    def loss_fn(model):
        r = model(X) - Y
        return (r * r).sum() / N  # mean over samples of the sum of squares, as scichains

    def run(name, fused=False, compiled=False):
        model = build()
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=fused or None)
        f = torch.compile(loss_fn) if compiled else loss_fn

        def step():
            opt.zero_grad(set_to_none=True)
            loss = f(model)
            loss.backward()
            opt.step()
            return loss

        for _ in range(20):  # warm-up (and compilation)
            step()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            loss = step()
        dt = time.perf_counter() - t0
        print(f"RESULT torch-{name} {dt / args.iters * 10_000:.3f}  (loss {loss.item():.4f})")
        sys.stdout.flush()

    run("eager")
    run("eager-fused-adam", fused=True)
    try:
        run("compile", compiled=True)
    except Exception as e:  # torch.compile needs a C++ compiler; report, don't fail
        print(f"SKIP torch.compile failed: {type(e).__name__}: {str(e)[:200]}")


if __name__ == "__main__":
    main()
